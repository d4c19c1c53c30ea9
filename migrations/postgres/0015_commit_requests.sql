-- The idempotency key of a commit (ADR 0010): one row per request id and stream, written in the
-- command's transaction with its events. Its primary key refuses a second commit of the same
-- request, whatever plan the planner would pick for a lookup; the sequence range finds the
-- original events. The events' metadata still carries the requestId (the log stays the record:
-- this table can be rebuilt from it), and the expression index it replaces is dropped, so an
-- event insert no longer parses its metadata for an index.
CREATE TABLE commit_requests
(
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    request_id     text   NOT NULL,
    first_sequence bigint NOT NULL,
    last_sequence  bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id, request_id)
);

INSERT INTO commit_requests (aggregate_type, aggregate_id, request_id, first_sequence, last_sequence)
SELECT aggregate_type, aggregate_id, metadata ->> 'requestId', MIN(sequence), MAX(sequence)
FROM events
WHERE (metadata ->> 'requestId') IS NOT NULL
GROUP BY aggregate_type, aggregate_id, metadata ->> 'requestId';

DROP INDEX events_request_id;
