-- Global position for catch-up projectors. SQLite serializes writers, so a position taken
-- inside the inserting transaction is gapless and in commit order; a trigger assigns it so the
-- store crate's INSERT (which names its columns) stays unchanged.
ALTER TABLE events ADD COLUMN position integer;
UPDATE events SET position = rowid;
CREATE UNIQUE INDEX events_position ON events (position);
CREATE TRIGGER events_assign_position AFTER INSERT ON events
BEGIN
    UPDATE events SET position = (SELECT IFNULL(MAX(position), 0) + 1 FROM events) WHERE rowid = NEW.rowid;
END;

-- Where each projector stands, written in the same transaction as its rows.
CREATE TABLE projector_checkpoints
(
    projector text    NOT NULL PRIMARY KEY,
    tx        integer NOT NULL,
    position  integer NOT NULL,
    events    integer NOT NULL
) STRICT;

CREATE TABLE analytics_goal_mastery
(
    journey_id  text    NOT NULL,
    goal_id     text    NOT NULL,
    mastery     real    NOT NULL,
    mastered    integer NOT NULL,
    completions integer NOT NULL,
    updated_at  text    NOT NULL,
    PRIMARY KEY (journey_id, goal_id)
) STRICT;

CREATE TABLE analytics_recall_outcomes
(
    card_id text    NOT NULL PRIMARY KEY,
    goal_id text    NOT NULL,
    passed  integer NOT NULL,
    failed  integer NOT NULL
) STRICT;

CREATE TABLE analytics_exam_results
(
    journey_id   text    NOT NULL,
    instance     integer NOT NULL,
    total_points real    NOT NULL,
    max_points   integer NOT NULL,
    passed       integer NOT NULL,
    scored_at    text    NOT NULL,
    PRIMARY KEY (journey_id, instance)
) STRICT;

CREATE TABLE analytics_daily_activity
(
    day             text    NOT NULL PRIMARY KEY,
    events          integer NOT NULL,
    goals_completed integer NOT NULL,
    recall_results  integer NOT NULL,
    exams_scored    integer NOT NULL
) STRICT;

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
