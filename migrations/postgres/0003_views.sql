-- Snapshots of the journey state (written every N events, each proven equal to the full fold
-- by a test) and the persisted full-context view with the version it reflects, plus the shadow
-- table `skillpilot replay` rebuilds into.
CREATE TABLE journey_snapshots
(
    journey_id text    NOT NULL PRIMARY KEY,
    schema     bigint NOT NULL,
    version    bigint NOT NULL,
    chain_hash text    NOT NULL,
    state      text    NOT NULL
);

CREATE TABLE journey_context_view
(
    view_id text    NOT NULL PRIMARY KEY,
    version bigint NOT NULL,
    payload text    NOT NULL
);

CREATE TABLE journey_context_view_shadow
(
    view_id text    NOT NULL PRIMARY KEY,
    version bigint NOT NULL,
    payload text    NOT NULL
);
