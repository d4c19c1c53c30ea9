-- Learners known to an external identity provider: its issuer and subject map to one learner,
-- created the first time a valid access token names them.
CREATE TABLE oauth_subjects
(
    issuer     text    NOT NULL,
    subject    text    NOT NULL,
    learner_id text    NOT NULL REFERENCES learners (learner_id),
    created_ms integer NOT NULL,
    PRIMARY KEY (issuer, subject)
) STRICT;
