-- Shadow copies of the analytic tables: `skillpilot replay` folds the whole log into them with
-- a separate projector and compares them with the live tables (and `--swap` copies them in).

CREATE TABLE analytics_shadow_goal_mastery
(
    journey_id  text    NOT NULL,
    goal_id     text    NOT NULL,
    mastery     real    NOT NULL,
    mastered    integer NOT NULL,
    completions integer NOT NULL,
    updated_at  text    NOT NULL,
    PRIMARY KEY (journey_id, goal_id)
) STRICT;

CREATE TABLE analytics_shadow_recall_outcomes
(
    card_id text    NOT NULL PRIMARY KEY,
    goal_id text    NOT NULL,
    passed  integer NOT NULL,
    failed  integer NOT NULL
) STRICT;

CREATE TABLE analytics_shadow_exam_results
(
    journey_id   text    NOT NULL,
    instance     integer NOT NULL,
    total_points real    NOT NULL,
    max_points   integer NOT NULL,
    passed       integer NOT NULL,
    scored_at    text    NOT NULL,
    PRIMARY KEY (journey_id, instance)
) STRICT;

CREATE TABLE analytics_shadow_daily_activity
(
    day             text    NOT NULL PRIMARY KEY,
    events          integer NOT NULL,
    goals_completed integer NOT NULL,
    recall_results  integer NOT NULL,
    exams_scored    integer NOT NULL
) STRICT;
