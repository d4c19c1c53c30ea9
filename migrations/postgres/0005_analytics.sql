-- Global order for catch-up projectors. A bigserial value is taken at insert, not at commit,
-- so position order is not commit order: a reader that passed position 10 while 9 was still
-- in flight would skip 9 for ever. Each row therefore also records its transaction id, and
-- projectors read only rows of transactions older than the oldest one still running
-- (pg_snapshot_xmin), ordered by (tx, position). Both columns have defaults, so postgres-es's
-- INSERT (which names its columns) stays unchanged.
ALTER TABLE events ADD COLUMN position bigserial;
ALTER TABLE events ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_tx_position ON events (tx, position);

-- Where each projector stands, written in the same transaction as its rows.
CREATE TABLE projector_checkpoints
(
    projector text   NOT NULL PRIMARY KEY,
    tx        bigint NOT NULL,
    position  bigint NOT NULL,
    events    bigint NOT NULL
);

CREATE TABLE analytics_goal_mastery
(
    journey_id  text             NOT NULL,
    goal_id     text             NOT NULL,
    mastery     double precision NOT NULL,
    mastered    bigint           NOT NULL,
    completions bigint           NOT NULL,
    updated_at  text             NOT NULL,
    PRIMARY KEY (journey_id, goal_id)
);

CREATE TABLE analytics_recall_outcomes
(
    card_id text   NOT NULL PRIMARY KEY,
    goal_id text   NOT NULL,
    passed  bigint NOT NULL,
    failed  bigint NOT NULL
);

CREATE TABLE analytics_exam_results
(
    journey_id   text             NOT NULL,
    instance     bigint           NOT NULL,
    total_points double precision NOT NULL,
    max_points   bigint           NOT NULL,
    passed       bigint           NOT NULL,
    scored_at    text             NOT NULL,
    PRIMARY KEY (journey_id, instance)
);

CREATE TABLE analytics_daily_activity
(
    day             text   NOT NULL PRIMARY KEY,
    events          bigint NOT NULL,
    goals_completed bigint NOT NULL,
    recall_results  bigint NOT NULL,
    exams_scored    bigint NOT NULL
);

-- Read-only views for analysts (the same names on both stores).
CREATE VIEW analyst_goal_mastery AS SELECT journey_id, goal_id, mastery, mastered, completions, updated_at FROM analytics_goal_mastery;
CREATE VIEW analyst_recall_outcomes AS SELECT card_id, goal_id, passed, failed FROM analytics_recall_outcomes;
CREATE VIEW analyst_exam_results AS SELECT journey_id, instance, total_points, max_points, passed, scored_at FROM analytics_exam_results;
CREATE VIEW analyst_daily_activity AS SELECT day, events, goals_completed, recall_results, exams_scored FROM analytics_daily_activity;
CREATE VIEW analyst_tool_usage AS
    SELECT tool,
           SUM(CASE WHEN phase = 'started' THEN 1 ELSE 0 END)       AS delivered,
           SUM(CASE WHEN phase <> 'started' THEN 1 ELSE 0 END)      AS processed,
           SUM(CASE WHEN phase = 'completed' THEN 1 ELSE 0 END)     AS completed,
           SUM(CASE WHEN phase = 'clarification' THEN 1 ELSE 0 END) AS clarification,
           SUM(CASE WHEN phase = 'rejected' THEN 1 ELSE 0 END)      AS rejected,
           SUM(CASE WHEN phase = 'error' THEN 1 ELSE 0 END)         AS error
    FROM tool_calls
    GROUP BY tool;

-- A read-only role for analysts (cluster-wide; created once).
DO $$
BEGIN
    CREATE ROLE skillpilot_analyst NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;
GRANT SELECT ON analyst_goal_mastery, analyst_recall_outcomes, analyst_exam_results, analyst_daily_activity, analyst_tool_usage TO skillpilot_analyst;
