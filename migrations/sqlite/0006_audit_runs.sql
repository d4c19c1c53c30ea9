-- Results of `audit verify` runs (CLI or operator API), for the operator view.
CREATE TABLE audit_runs
(
    run_id       text    NOT NULL PRIMARY KEY,
    finished_ms  integer NOT NULL,
    streams      integer NOT NULL,
    events       integer NOT NULL,
    intact       integer NOT NULL,
    broken_at    text
) STRICT;
CREATE INDEX audit_runs_finished ON audit_runs (finished_ms);
