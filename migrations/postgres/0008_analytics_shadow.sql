-- Shadow copies of the analytic tables: `skillpilot replay` folds the whole log into them with
-- a separate projector and compares them with the live tables (and `--swap` copies them in).

CREATE TABLE analytics_shadow_goal_mastery
(
    journey_id  text             NOT NULL,
    goal_id     text             NOT NULL,
    mastery     double precision NOT NULL,
    mastered    bigint           NOT NULL,
    completions bigint           NOT NULL,
    updated_at  text             NOT NULL,
    PRIMARY KEY (journey_id, goal_id)
);

CREATE TABLE analytics_shadow_recall_outcomes
(
    card_id text   NOT NULL PRIMARY KEY,
    goal_id text   NOT NULL,
    passed  bigint NOT NULL,
    failed  bigint NOT NULL
);

CREATE TABLE analytics_shadow_exam_results
(
    journey_id   text             NOT NULL,
    instance     bigint           NOT NULL,
    total_points double precision NOT NULL,
    max_points   bigint           NOT NULL,
    passed       bigint           NOT NULL,
    scored_at    text             NOT NULL,
    PRIMARY KEY (journey_id, instance)
);

CREATE TABLE analytics_shadow_daily_activity
(
    day             text   NOT NULL PRIMARY KEY,
    events          bigint NOT NULL,
    goals_completed bigint NOT NULL,
    recall_results  bigint NOT NULL,
    exams_scored    bigint NOT NULL
);
