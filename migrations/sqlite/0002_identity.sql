-- Learners, their hashed bearer tokens, the learner <-> journey link (kept outside the event
-- payloads) and learning sessions (beside the journey, never in its stream).
CREATE TABLE learners
(
    learner_id text    NOT NULL PRIMARY KEY,
    name       text    NOT NULL,
    created_ms integer NOT NULL
) STRICT;

CREATE TABLE tokens
(
    token_hash text    NOT NULL PRIMARY KEY,
    role       text    NOT NULL CHECK (role IN ('learner', 'operator', 'analyst')),
    learner_id text REFERENCES learners (learner_id),
    created_ms integer NOT NULL
) STRICT;

CREATE TABLE journeys
(
    journey_id    text    NOT NULL PRIMARY KEY,
    learner_id    text    NOT NULL REFERENCES learners (learner_id),
    curriculum_id text    NOT NULL,
    created_ms    integer NOT NULL,
    UNIQUE (learner_id, curriculum_id)
) STRICT;

CREATE TABLE learning_sessions
(
    session_id  text    NOT NULL PRIMARY KEY,
    learner_id  text    NOT NULL REFERENCES learners (learner_id),
    journey_id  text    NOT NULL REFERENCES journeys (journey_id),
    time_zone   text    NOT NULL,
    started_ms  integer NOT NULL
) STRICT;

CREATE INDEX learning_sessions_learner ON learning_sessions (learner_id, started_ms);
