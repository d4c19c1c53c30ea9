-- The tool-call audit (R-6d): each handler writes its own `started` row and then exactly one
-- exit; the partial unique index makes a second exit impossible (a late handler after a
-- dispatcher timeout writes nothing). Never free text: codes and counts only.
CREATE TABLE tool_calls
(
    call_id         text    NOT NULL,
    phase           text    NOT NULL CHECK (phase IN ('started', 'completed', 'clarification', 'rejected', 'error')),
    writer          text    NOT NULL CHECK (writer IN ('handler', 'dispatcher')),
    tool            text    NOT NULL,
    journey_id      text,
    code            text,
    events_appended bigint NOT NULL DEFAULT 0,
    duration_ms     bigint,
    at_ms           bigint NOT NULL,
    PRIMARY KEY (call_id, phase)
);

CREATE UNIQUE INDEX tool_calls_one_exit ON tool_calls (call_id) WHERE phase <> 'started';
CREATE INDEX tool_calls_at ON tool_calls (at_ms);
