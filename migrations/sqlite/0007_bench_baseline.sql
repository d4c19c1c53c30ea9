-- The physical baseline of `skillpilot bench`: single-row insert transactions on the same
-- store, driver and pool as the service. Empty in production; the benchmark clears it.
CREATE TABLE bench_baseline
(
    id      integer NOT NULL PRIMARY KEY,
    payload text    NOT NULL
) STRICT;
