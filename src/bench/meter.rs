//! What a phase of the benchmark cost besides wall time: CPU seconds of the server process, of
//! this process and of the database (the PostgreSQL processes on this host: every live one
//! plus what the postmaster's reaped children used), and PostgreSQL's own counters — WAL
//! records, bytes and flushes (`pg_stat_wal`), transactions and row writes of the scratch database
//! (`pg_stat_database`) and, when `pg_stat_statements` is loaded, statements. SQLite runs in
//! the server process, so its CPU is the server's. On a virtual machine it also reads the CPU
//! time the hypervisor gave to other guests (`steal` in `/proc/stat`): a phase that lost much of
//! its cores that way measured the host, not the service, and its ratios say so.

use serde_json::{json, Value};
use sqlx::{PgPool, Row};

/// One reading of every counter; `None` where the counter is not available here.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reading {
    server_cpu: f64,
    self_cpu: f64,
    db_cpu: Option<f64>,
    wal: Option<(i64, i64, i64)>,
    commits_and_rows: Option<(i64, i64)>,
    statements: Option<i64>,
    /// CPU seconds stolen from this machine's CPUs.
    steal: Option<f64>,
}

/// Reads the counters of one benchmark run.
pub(crate) struct Meter {
    server_pid: u32,
    pg: Option<PgPool>,
    tick_hz: f64,
}

/// utime, stime, cutime, cstime (seconds) and the parent of a process, from `/proc/PID/stat`.
fn proc_stat(pid: &str, tick_hz: f64) -> Option<(String, u32, [f64; 4])> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields are counted after it.
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    let ppid = fields.get(1)?.parse().ok()?;
    let mut cpu = [0.0; 4];
    for (i, slot) in cpu.iter_mut().enumerate() {
        *slot = fields.get(11 + i)?.parse::<f64>().ok()? / tick_hz;
    }
    Some((comm, ppid, cpu))
}

/// CPU seconds the hypervisor ran something else while this machine's CPUs wanted to run,
/// summed over its CPUs: the eighth value of `/proc/stat`'s `cpu` line, in clock ticks.
fn stolen_cpu(tick_hz: f64) -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.split_whitespace().next() == Some("cpu"))?;
    line.split_whitespace().nth(8)?.parse::<f64>().ok().map(|ticks| ticks / tick_hz)
}

/// CPU seconds of every PostgreSQL process on this host, including backends that already
/// exited (the postmaster's reaped children); `None` when none runs here.
fn postgres_cpu(tick_hz: f64) -> Option<f64> {
    let mut processes = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        if let Some((comm, ppid, cpu)) = proc_stat(pid, tick_hz) {
            if comm == "postgres" {
                processes.push((pid.parse::<u32>().unwrap_or(0), ppid, cpu));
            }
        }
    }
    if processes.is_empty() {
        return None;
    }
    let pids: std::collections::HashSet<u32> = processes.iter().map(|p| p.0).collect();
    let mut total = 0.0;
    for (_, ppid, [user, system, child_user, child_system]) in &processes {
        total += user + system;
        // A postmaster (its parent is no PostgreSQL process) carries its exited backends.
        if !pids.contains(ppid) {
            total += child_user + child_system;
        }
    }
    Some(total)
}

impl Meter {
    /// A meter for a server child process and, on PostgreSQL, a pool on the scratch database.
    pub(crate) async fn new(server_pid: u32, pg: Option<PgPool>) -> Self {
        let tick_hz = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0);
        if let Some(pool) = &pg {
            // Present only where the server preloads it; otherwise statements stay unmeasured.
            let _ = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(pool).await;
        }
        Self { server_pid, pg, tick_hz }
    }

    /// Reads every counter now; with `settle` on PostgreSQL, once every backend has published
    /// what the phase before did.
    pub(crate) async fn read(&self, settle: bool) -> Reading {
        if settle && self.pg.is_some() {
            tokio::time::sleep(PUBLISHED_WITHIN).await;
        }
        let cpu = |pid: &str| proc_stat(pid, self.tick_hz).map(|(_, _, c)| c[0] + c[1]).unwrap_or(0.0);
        let mut reading = Reading {
            server_cpu: cpu(&self.server_pid.to_string()),
            self_cpu: cpu("self"),
            steal: stolen_cpu(self.tick_hz),
            ..Reading::default()
        };
        if let Some(pool) = &self.pg {
            reading.db_cpu = postgres_cpu(self.tick_hz);
            reading.wal = sqlx::query("SELECT wal_records, CAST(wal_bytes AS bigint) AS wal_bytes, wal_sync FROM pg_stat_wal")
                .fetch_one(pool)
                .await
                .ok()
                .and_then(|r| Some((r.try_get("wal_records").ok()?, r.try_get("wal_bytes").ok()?, r.try_get("wal_sync").ok()?)));
            reading.commits_and_rows = sqlx::query(
                "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted AS rows FROM pg_stat_database WHERE datname = current_database()",
            )
            .fetch_one(pool)
            .await
            .ok()
            .and_then(|r| Some((r.try_get("xact_commit").ok()?, r.try_get("rows").ok()?)));
            reading.statements = sqlx::query(
                "SELECT CAST(COALESCE(SUM(calls), 0) AS bigint) AS calls FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(pool)
            .await
            .ok()
            .and_then(|r| r.try_get("calls").ok());
        }
        reading
    }
}

/// How long PostgreSQL (15 and later) may keep a backend's statistics (its transactions, rows
/// and WAL, `pg_stat_wal` included) unpublished: a backend publishes at most once a second,
/// and one that goes idle within a second of its last publication holds the rest for
/// `PGSTAT_IDLE_INTERVAL`, ten seconds. A wait of 1.5 s let the last second of a phase's idle
/// backends count in the next phase.
const PUBLISHED_WITHIN: std::time::Duration = std::time::Duration::from_millis(10_500);

/// Who issued the SQL of a phase: the server (commands), this process (the insert baseline),
/// or a tool whose CPU is not read (pgbench, an exited child): its share stays null.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Client {
    Server,
    Bench,
    Unmeasured,
}

/// What one unit of work (a write command, an insert) cost between two readings: CPU
/// milliseconds of the SQL client and of the database, their sum, and PostgreSQL's counters.
pub(crate) fn cost(before: &Reading, after: &Reading, units: f64, client: Client) -> Value {
    let per = |x: f64| if units > 0.0 { Some(x / units) } else { None };
    let client_cpu = match client {
        Client::Server => Some(after.server_cpu - before.server_cpu),
        Client::Bench => Some(after.self_cpu - before.self_cpu),
        Client::Unmeasured => None,
    };
    let db_cpu = after.db_cpu.zip(before.db_cpu).map(|(a, b)| a - b);
    // While the server is the client, this process is the load generator: on one machine its CPU
    // competes with the server's and the database's, so the three together bound the rate.
    let generator_cpu = (client == Client::Server).then_some(after.self_cpu - before.self_cpu);
    let diff = |a: Option<i64>, b: Option<i64>| a.zip(b).map(|(a, b)| (a - b) as f64).and_then(per);
    let stolen = after.steal.zip(before.steal).map(|(a, b)| (a - b).max(0.0));
    json!({
        "units": units,
        "client_cpu_ms": client_cpu.and_then(|c| per(c * 1000.0)),
        "db_cpu_ms": db_cpu.and_then(|d| per(d * 1000.0)),
        // A total only where both parts were read (SQLite has no separate database process).
        "cpu_ms": client_cpu.and_then(|c| per((c + db_cpu.unwrap_or(0.0)) * 1000.0)),
        "load_generator_cpu_ms": generator_cpu.and_then(|g| per(g * 1000.0)),
        "machine_cpu_ms": client_cpu.zip(generator_cpu).and_then(|(c, g)| per((c + g + db_cpu.unwrap_or(0.0)) * 1000.0)),
        "wal_records": diff(after.wal.map(|w| w.0), before.wal.map(|w| w.0)),
        "wal_bytes": diff(after.wal.map(|w| w.1), before.wal.map(|w| w.1)),
        "wal_flushes": diff(after.wal.map(|w| w.2), before.wal.map(|w| w.2)),
        // Every autocommit statement is a transaction of its own, reads included.
        "transactions": diff(after.commits_and_rows.map(|c| c.0), before.commits_and_rows.map(|c| c.0)),
        "rows_written": diff(after.commits_and_rows.map(|c| c.1), before.commits_and_rows.map(|c| c.1)),
        "statements": diff(after.statements, before.statements),
        // Comparable with `machine_cpu_ms`: CPU time the machine wanted and the host gave to
        // others. A run whose phases lost much of it measured the host, not the service.
        "stolen_cpu_ms": stolen.and_then(|s| per(s * 1000.0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_readable_cpu_time() {
        let (comm, ppid, cpu) = proc_stat("self", 100.0).expect("own /proc stat");
        assert!(!comm.is_empty() && ppid > 0);
        assert!(cpu.iter().all(|c| *c >= 0.0));
    }

    #[test]
    fn stolen_time_is_read_from_proc_stat_and_charged_per_unit() {
        assert!(stolen_cpu(100.0).is_some_and(|s| s >= 0.0), "this Linux host has /proc/stat");
        let before = Reading { steal: Some(10.0), ..Reading::default() };
        let after = Reading { steal: Some(12.0), ..Reading::default() };
        let c = cost(&before, &after, 500.0, Client::Server);
        assert!((c["stolen_cpu_ms"].as_f64().unwrap() - 4.0).abs() < 1e-9, "{c}");
        assert!(cost(&Reading::default(), &after, 500.0, Client::Server)["stolen_cpu_ms"].is_null());
    }

    #[test]
    fn a_cost_is_per_unit_and_unmeasured_counters_stay_null() {
        let before = Reading { server_cpu: 1.0, ..Reading::default() };
        let after = Reading { server_cpu: 3.0, db_cpu: None, wal: None, ..Reading::default() };
        let c = cost(&before, &after, 1000.0, Client::Server);
        assert!((c["client_cpu_ms"].as_f64().unwrap() - 2.0).abs() < 1e-9, "{c}");
        assert!(c["db_cpu_ms"].is_null() && c["wal_flushes"].is_null(), "{c}");
        assert!(cost(&before, &after, 0.0, Client::Server)["cpu_ms"].is_null());
        let external = cost(&before, &after, 1000.0, Client::Unmeasured);
        assert!(external["client_cpu_ms"].is_null() && external["cpu_ms"].is_null(), "{external}");
    }
}
