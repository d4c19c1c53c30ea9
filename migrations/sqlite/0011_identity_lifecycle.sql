-- The identity lifecycle: learners, development tokens and OAuth clients can be revoked (rows
-- stay, so the operator audit and the journeys keep their references); web sign-ins are
-- server-side sessions that sign-out ends; every operator action is recorded.
ALTER TABLE learners ADD COLUMN revoked_ms integer;
ALTER TABLE tokens ADD COLUMN revoked_ms integer;
ALTER TABLE oauth_clients ADD COLUMN revoked_ms integer;

CREATE TABLE web_sessions
(
    session_id text    NOT NULL PRIMARY KEY,
    role       text    NOT NULL CHECK (role IN ('learner', 'operator', 'analyst')),
    learner_id text REFERENCES learners (learner_id),
    created_ms integer NOT NULL,
    expires_ms integer NOT NULL,
    ended_ms   integer
) STRICT;
CREATE INDEX web_sessions_learner ON web_sessions (learner_id);

CREATE TABLE operator_actions
(
    action_id text    NOT NULL PRIMARY KEY,
    at_ms     integer NOT NULL,
    actor     text    NOT NULL,
    action    text    NOT NULL,
    target    text    NOT NULL
) STRICT;
CREATE INDEX operator_actions_at ON operator_actions (at_ms);
