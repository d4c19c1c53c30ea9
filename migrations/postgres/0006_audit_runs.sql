-- Results of `audit verify` runs (CLI or operator API), for the operator view.
CREATE TABLE audit_runs
(
    run_id       text    NOT NULL PRIMARY KEY,
    finished_ms  bigint NOT NULL,
    streams      bigint NOT NULL,
    events       bigint NOT NULL,
    intact       bigint NOT NULL,
    broken_at    text
);
CREATE INDEX audit_runs_finished ON audit_runs (finished_ms);
