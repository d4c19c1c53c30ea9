-- The event log, in the shape postgres-es and sqlite-es use (one schema for operators and
-- analysts). Per-event metadata carries the hash chain and the idempotency record.
CREATE TABLE events
(
    aggregate_type text                          NOT NULL,
    aggregate_id   text                          NOT NULL,
    sequence       integer CHECK (sequence >= 0) NOT NULL,
    event_type     text                          NOT NULL,
    event_version  text                          NOT NULL,
    payload        text                          NOT NULL,
    metadata       text                          NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id, sequence)
) STRICT;

-- Idempotency lookup: a commit's events all carry its requestId.
CREATE INDEX events_request_id ON events (aggregate_type, aggregate_id, (metadata ->> 'requestId'));
