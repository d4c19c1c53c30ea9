-- Chain checkpoints: after every clean `audit verify` the head (version and chainHash) of every
-- journey, hash-chained to the previous checkpoint. A later verify compares the log with the
-- newest checkpoint, so deleting the newest events of a journey (which leaves its own chain
-- intact) is found.
CREATE TABLE chain_checkpoints
(
    seq       integer NOT NULL PRIMARY KEY,
    at_ms     integer NOT NULL,
    heads     text    NOT NULL,
    prev_hash text    NOT NULL,
    hash      text    NOT NULL
) STRICT;
