//! Prometheus metrics (`/metrics`): commands by outcome, conflicts, idempotent replays, tool
//! exits, latency histograms and the analytics projector's lag. One registry per application
//! (no global state, so several instances in one test process stay apart).

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The service's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    commands: Family<Labels, Counter>,
    command_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    tool_exits: Family<Labels, Counter>,
    tool_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    projection_lag: Gauge,
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
        Self { registry: Mutex::new(registry), commands, command_seconds, tool_exits, tool_seconds, projection_lag }
    }
}

impl Metrics {
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

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            if encode(&mut out, &registry).is_err() {
                out.clear();
            }
        }
        out
    }
}
