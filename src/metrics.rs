//! Prometheus metrics (`/metrics`): HTTP requests by route and status, commands by outcome,
//! tool exits, latency histograms, the analytics projector's lag, the database pool, build
//! info and the process (CPU, RSS, open file descriptors, read from `/proc` at each scrape). One
//! registry per application (no global state, so several instances in one test process stay
//! apart); the `process_*` series carry the standard unprefixed names.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(&'static str, String)>;

fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The service's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    process: Mutex<Registry>,
    commands: Family<Labels, Counter>,
    command_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    tool_exits: Family<Labels, Counter>,
    tool_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    projection_lag: Gauge,
    http_requests: Family<Labels, Counter>,
    http_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pool_connections: Family<Labels, Gauge>,
    pool_max: Gauge,
    pool_timeouts: Counter,
    cpu_seconds: Counter<f64, AtomicU64>,
    rss_bytes: Gauge,
    open_fds: Gauge,
    commits: CommitMetrics,
}

/// The write path's batching (ADR 0006, 0012): a handle the writer keeps; it counts into the
/// application's registry.
#[derive(Clone, Debug)]
pub struct CommitMetrics {
    /// Commands per commit transaction attempted (one statement on PostgreSQL, one transaction
    /// on SQLite).
    per_transaction: Histogram,
    /// Commands of a batch refused alone (their savepoint rolled back on SQLite; on PostgreSQL
    /// the batch's statement was refused and the command failed when rerun alone).
    refused_in_batch: Counter,
}

impl CommitMetrics {
    /// Counts a commit transaction of `commands` commands.
    pub fn transaction(&self, commands: usize) {
        self.per_transaction.observe(commands as f64);
    }

    /// Counts a command of a batch that was refused alone.
    pub fn refused_in_batch(&self) {
        self.refused_in_batch.inc();
    }
}

/// What the store's pool looks like at a scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolSample {
    pub size: u32,
    /// Of those, idle.
    pub idle: u32,
    /// The configured maximum.
    pub max: u32,
    /// Acquisitions that timed out since start (each became `STORE_UNAVAILABLE`).
    pub timeouts: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("skillpilot");
        let commands = Family::<Labels, Counter>::default();
        let command_seconds = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency as fn() -> Histogram);
        let tool_exits = Family::<Labels, Counter>::default();
        let tool_seconds = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency as fn() -> Histogram);
        let projection_lag = Gauge::default();
        registry.register("commands", "Commands by command and outcome (applied, replayed, conflict, rejected, error)", commands.clone());
        registry.register("command_duration_seconds", "Command latency through the command service", command_seconds.clone());
        registry.register("tool_exits", "Tool calls by tool and exit (completed, clarification, rejected, error)", tool_exits.clone());
        registry.register("tool_duration_seconds", "Tool call latency", tool_seconds.clone());
        registry.register("projection_lag_events", "Events not yet folded into the analytics views", projection_lag.clone());
        let http_requests = Family::<Labels, Counter>::default();
        let http_seconds = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency as fn() -> Histogram);
        registry.register("http_requests", "HTTP requests by route, method and status", http_requests.clone());
        registry.register("http_request_duration_seconds", "HTTP request latency by route", http_seconds.clone());
        let build = Family::<Labels, Gauge>::default();
        build.get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_owned()), ("commit", crate::GIT_COMMIT.to_owned())]).set(1);
        registry.register("build_info", "The running build: version and git commit", build);
        let (pool_connections, pool_max, pool_timeouts) = (Family::<Labels, Gauge>::default(), Gauge::default(), Counter::default());
        registry.register("db_pool_connections", "Database pool connections by state (idle, busy)", pool_connections.clone());
        registry.register("db_pool_max_connections", "The database pool's configured maximum", pool_max.clone());
        registry.register("db_pool_acquire_timeouts", "Pool acquisitions that waited past the acquire timeout", pool_timeouts.clone());
        let commits =
            CommitMetrics { per_transaction: Histogram::new(exponential_buckets(1.0, 2.0, 9)), refused_in_batch: Counter::default() };
        registry.register(
            "commit_transaction_commands",
            "Commands per commit transaction (concurrent commands share one)",
            commits.per_transaction.clone(),
        );
        registry.register(
            "commit_batch_refused_commands",
            "Commands refused alone inside a shared commit transaction",
            commits.refused_in_batch.clone(),
        );
        let (cpu_seconds, rss_bytes, open_fds) = (Counter::<f64, AtomicU64>::default(), Gauge::default(), Gauge::default());
        // Standard names, as every Prometheus client library exports them.
        let mut outer = Registry::default();
        outer.register("process_cpu_seconds", "Total user and system CPU time spent in seconds", cpu_seconds.clone());
        outer.register("process_resident_memory_bytes", "Resident memory size in bytes", rss_bytes.clone());
        outer.register("process_open_fds", "Number of open file descriptors", open_fds.clone());
        Self {
            registry: Mutex::new(registry),
            process: Mutex::new(outer),
            commands,
            command_seconds,
            tool_exits,
            tool_seconds,
            projection_lag,
            http_requests,
            http_seconds,
            pool_connections,
            pool_max,
            pool_timeouts,
            cpu_seconds,
            rss_bytes,
            open_fds,
            commits,
        }
    }
}

impl Metrics {
    /// The write path's handle on its series.
    pub fn commits(&self) -> CommitMetrics {
        self.commits.clone()
    }

    /// Counts a command and its latency.
    pub fn command(&self, command: &'static str, outcome: &'static str, seconds: f64) {
        self.commands.get_or_create(&vec![("command", command.to_owned()), ("outcome", outcome.to_owned())]).inc();
        self.command_seconds.get_or_create(&vec![("command", command.to_owned())]).observe(seconds);
    }

    /// Counts a tool exit and its latency.
    pub fn tool(&self, tool: &str, exit: &'static str, seconds: f64) {
        self.tool_exits.get_or_create(&vec![("tool", tool.to_owned()), ("exit", exit.to_owned())]).inc();
        self.tool_seconds.get_or_create(&vec![("tool", tool.to_owned())]).observe(seconds);
    }

    /// Sets the projector lag.
    pub fn set_projection_lag(&self, events: i64) {
        self.projection_lag.set(events);
    }

    /// Counts an HTTP request by its route pattern (never the raw path, which could carry ids).
    pub fn http(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.http_requests
            .get_or_create(&vec![("route", route.to_owned()), ("method", method.to_owned()), ("status", status.to_string())])
            .inc();
        self.http_seconds.get_or_create(&vec![("route", route.to_owned())]).observe(seconds);
    }

    /// Refreshes the pool and process series (at each scrape).
    pub fn sample(&self, pool: PoolSample) {
        self.pool_connections.get_or_create(&vec![("state", "idle".to_owned())]).set(i64::from(pool.idle));
        self.pool_connections.get_or_create(&vec![("state", "busy".to_owned())]).set(i64::from(pool.size.saturating_sub(pool.idle)));
        self.pool_max.set(i64::from(pool.max));
        let seen = self.pool_timeouts.get();
        self.pool_timeouts.inc_by(pool.timeouts.saturating_sub(seen));
        if let Some(p) = ProcessSample::read() {
            let seen = self.cpu_seconds.get();
            if p.cpu_seconds > seen {
                self.cpu_seconds.inc_by(p.cpu_seconds - seen);
            }
            self.rss_bytes.set(p.rss_bytes);
            self.open_fds.set(p.open_fds);
        }
    }

    /// The text exposition format: the process series, then the service's.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Ok(process) = self.process.lock() {
            if encode(&mut out, &process).is_err() {
                out.clear();
            }
        }
        // One exposition has one `# EOF`, at its end.
        if let Some(stripped) = out.strip_suffix("# EOF\n") {
            out.truncate(stripped.len());
        }
        if let Ok(registry) = self.registry.lock() {
            if encode(&mut out, &registry).is_err() {
                out.clear();
            }
        }
        out
    }
}

/// This process as `/proc/self` shows it (Linux; elsewhere nothing is reported).
struct ProcessSample {
    cpu_seconds: f64,
    rss_bytes: i64,
    open_fds: i64,
}

impl ProcessSample {
    fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat(5), counted in clock ticks; the kernel's
        // USER_HZ is 100 on every Linux ABI Rust targets.
        let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let resident_pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
        Some(Self { cpu_seconds: ticks / 100.0, rss_bytes: resident_pages * 4096, open_fds: i64::try_from(open_fds).unwrap_or(i64::MAX) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_carries_http_build_pool_and_process_series_with_one_eof() {
        let m = Metrics::default();
        m.http("/mcp", "POST", 200, 0.01);
        m.sample(PoolSample { size: 3, idle: 1, max: 10, timeouts: 2 });
        let text = m.render();
        for needle in [
            "skillpilot_http_requests_total{route=\"/mcp\",method=\"POST\",status=\"200\"} 1",
            "skillpilot_build_info{version=",
            "skillpilot_db_pool_connections{state=\"busy\"} 2",
            "skillpilot_db_pool_max_connections 10",
            "skillpilot_db_pool_acquire_timeouts_total 2",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_cpu_seconds_total ",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
    }
}
