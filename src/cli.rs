//! The command line (clap): `serve`, `migrate`, `learner create`, `token create`, `keygen`,
//! `events`, `audit verify`, `replay`. Every command takes `--db` (or `DATABASE_URL`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use crate::app::identity::Role;
use crate::app::operator::EventFilter;
use crate::app::tokens::Keys;
use crate::app::App;
use crate::clock::SystemClock;
use crate::config::Settings;
use crate::registry::{relock, Lock};
use crate::startup::{shutdown_signal, Application};
use crate::store::{DbUrl, Store};

/// SkillPilot: the event-sourced backend of AI learning coaches.
#[derive(Debug, Parser)]
#[command(name = "skillpilot", version, about)]
pub struct Cli {
    /// Database: a SQLite file (default ./skillpilot.db) or a postgres:// URL.
    #[arg(long, global = true, env = "DATABASE_URL", default_value = "sqlite://skillpilot.db")]
    db: String,
    /// The content directory with the curricula.
    #[arg(long = "content", global = true, env = "SKILLPILOT_CONTENT", default_value = "content")]
    content: PathBuf,
    /// A TOML config file (keys: db, addr, public_url, content, default_locale, allowed_hosts,
    /// allowed_origins, capability_keys, max_body_bytes, client_timeout_secs, oauth_issuer,
    /// oauth_jwks, oauth_audience); flags and environment variables take precedence.
    #[arg(long, global = true, env = "SKILLPILOT_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve {
        /// Listen address.
        #[arg(long, env = "SKILLPILOT_ADDR", default_value = "127.0.0.1:8080")]
        addr: String,
        /// The externally visible base URL (start URLs, OAuth metadata).
        #[arg(long, env = "SKILLPILOT_PUBLIC_URL")]
        public_url: Option<String>,
        /// Allowed Host values of the MCP endpoint, comma-separated (behind a reverse proxy: its public host).
        #[arg(long, env = "SKILLPILOT_ALLOWED_HOSTS", value_delimiter = ',')]
        allowed_hosts: Vec<String>,
        /// Allowed browser origins of the MCP endpoint, comma-separated, with ports (https://chatgpt.com:443).
        #[arg(long, env = "SKILLPILOT_ALLOWED_ORIGINS", value_delimiter = ',')]
        allowed_origins: Vec<String>,
        /// Locale of new journeys when the learner names none.
        #[arg(long, env = "SKILLPILOT_DEFAULT_LOCALE", default_value = "de")]
        default_locale: String,
        /// Largest accepted request body in bytes; larger ones get 413 before parsing.
        #[arg(long, env = "SKILLPILOT_MAX_BODY_BYTES", default_value_t = 262_144)]
        max_body_bytes: usize,
        /// Seconds a client has to send its request headers, and then its body.
        #[arg(long, env = "SKILLPILOT_CLIENT_TIMEOUT_SECS", default_value_t = 30)]
        client_timeout_secs: u64,
        /// Accept JWT access tokens of this external identity provider (its issuer identifier)
        /// instead of running the built-in authorization server; needs --oauth-jwks.
        #[arg(long, env = "SKILLPILOT_OAUTH_ISSUER", requires = "oauth_jwks")]
        oauth_issuer: Option<String>,
        /// The provider's JWKS: an https URL or a local file.
        #[arg(long, env = "SKILLPILOT_OAUTH_JWKS", requires = "oauth_issuer")]
        oauth_jwks: Option<String>,
        /// The audience its tokens carry (default: this server's `<public-url>/mcp`).
        #[arg(long, env = "SKILLPILOT_OAUTH_AUDIENCE")]
        oauth_audience: Option<String>,
    },
    /// Apply the migrations and exit.
    Migrate,
    /// Manage learners.
    Learner {
        #[command(subcommand)]
        command: LearnerCommand,
    },
    /// Manage operator and analyst tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Print a new capability key spec for SKILLPILOT_CAPABILITY_KEYS.
    Keygen,
    /// Print events as JSON lines.
    Events {
        /// Only this journey.
        journey: Option<String>,
        /// Only this event type.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Only events at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<DateTime<Utc>>,
        /// Only events before this time (RFC 3339).
        #[arg(long)]
        until: Option<DateTime<Utc>>,
    },
    /// Audit the event log.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Rebuild the projections from the log into shadow tables and compare with the live ones.
    Replay {
        /// Replace the live view with the rebuilt one when they differ.
        #[arg(long)]
        swap: bool,
    },
    /// Measure the service against the store's own limit (see docs/performance.md). Runs on a
    /// scratch database: a temporary SQLite file, or with `--db postgres://…` a scratch
    /// database created on that server and dropped afterwards.
    Bench {
        /// Concurrency levels (simulated coaches).
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        concurrency: Vec<usize>,
        /// Seconds per level (and per baseline).
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Events of the long journey.
        #[arg(long, default_value_t = 10_000)]
        long_journey_events: usize,
        /// Journeys for the peak-RSS measurement.
        #[arg(long, default_value_t = 10_000)]
        rss_journeys: usize,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Write an SVG plot of throughput against concurrency.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Print an analyst view (or, without a name, the views with their lag).
    Analytics {
        /// View name (goal-mastery, recall-outcomes, exam-results, daily-activity, tool-usage).
        name: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "json")]
        format: OutputFormat,
    },
    /// The tool registry: regenerate the seam lock (offline) or print the registry report.
    Registry {
        #[command(subcommand)]
        command: RegistryCommand,
    },
}

#[derive(Debug, Subcommand)]
enum RegistryCommand {
    /// Recompute every tool's seam signature and write the lock file; refuses a changed
    /// signature of a tool whose registration version was not bumped.
    Lock {
        /// The lock file.
        #[arg(long, default_value = "tool-seams.lock")]
        path: PathBuf,
    },
    /// Print the handshake result, the whole-picture report and the quota table.
    Report {
        /// A lock file other than the committed one.
        #[arg(long)]
        seams_lock: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum LearnerCommand {
    /// Create a learner; the last line printed is its bearer token.
    Create {
        /// Display name.
        #[arg(long)]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token; the last line printed is the token.
    Create {
        /// Role.
        #[arg(long, value_enum)]
        role: StaffRole,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputFormat {
    Json,
    Csv,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StaffRole {
    Operator,
    Analyst,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Recompute every hash chain; exit non-zero naming the first broken link.
    Verify,
}

/// Runs the parsed command; the exit code is returned rather than `exit`ed, so tests can call it.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let mut settings = Settings::for_db(DbUrl::parse(&cli.db));
    settings.content_dir = cli.content.clone();
    settings.capability_keys = std::env::var("SKILLPILOT_CAPABILITY_KEYS").ok().filter(|s| !s.trim().is_empty());
    match cli.command {
        Command::Registry { command: RegistryCommand::Lock { path } } => {
            let previous = if path.exists() { Lock::read(&path)? } else { Lock::default() };
            match relock(&previous) {
                Ok(lock) => {
                    let text = serde_json::to_string_pretty(&lock)? + "\n";
                    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
                    println!("registry lock: {} tools recorded in {}", lock.tools.len(), path.display());
                    Ok(0)
                }
                Err(refused) => {
                    for r in refused {
                        eprintln!("registry lock refused: {r}");
                    }
                    Ok(2)
                }
            }
        }
        Command::Registry { command: RegistryCommand::Report { seams_lock } } => {
            settings.seams_lock = seams_lock;
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let report = app.registry_report().await.map_err(|e| anyhow::anyhow!("cannot read the tool-call audit: {}", e.code()))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(0)
        }
        Command::Bench { concurrency, duration, long_journey_events, rss_journeys, json, plot } => {
            anyhow::ensure!(!concurrency.is_empty() && concurrency.iter().all(|c| *c > 0), "--concurrency needs positive numbers");
            let db = std::env::args()
                .any(|a| a == "--db" || a.starts_with("--db="))
                .then(|| cli.db.clone())
                .or_else(|| std::env::var("DATABASE_URL").ok());
            let options = crate::bench::BenchOptions {
                db,
                concurrency,
                duration,
                long_journey_events,
                rss_journeys,
                content: cli.content.clone(),
                plot,
            };
            let report = crate::bench::run(options).await?;
            if json {
                println!("{report}");
            } else {
                print_bench(&report);
            }
            Ok(0)
        }
        Command::Analytics { name, format } => {
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let fail = |e: crate::error::AppError| anyhow::anyhow!("analytics: {}", e.code());
            match name {
                None => println!("{}", serde_json::to_string_pretty(&app.analytics_status().await.map_err(fail)?)?),
                Some(name) => {
                    let table = app.analytics_table(&name).await.map_err(fail)?;
                    match format {
                        OutputFormat::Csv => print!("{}", table.to_csv()),
                        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&table)?),
                    }
                }
            }
            Ok(0)
        }
        Command::Keygen => {
            println!("{}", Keys::generate_spec()?);
            Ok(0)
        }
        Command::Migrate => {
            let store = Store::connect(&settings.db, &settings.pool).await.context("cannot open the store")?;
            store.migrate().await.context("cannot apply the migrations")?;
            println!("migrations applied ({})", store.kind());
            Ok(0)
        }
        Command::Serve {
            addr,
            public_url,
            default_locale,
            allowed_hosts,
            allowed_origins,
            max_body_bytes,
            client_timeout_secs,
            oauth_issuer,
            oauth_jwks,
            oauth_audience,
        } => {
            if let (Some(issuer), Some(jwks)) = (oauth_issuer, oauth_jwks) {
                settings.external_idp = Some(crate::app::external_idp::ExternalIdpSettings {
                    issuer,
                    jwks: crate::app::external_idp::JwksSource::parse(&jwks),
                    audience: oauth_audience,
                    refetch_after: std::time::Duration::from_secs(30),
                });
            }
            settings.mcp = crate::mcp::McpSettings { allowed_hosts, allowed_origins, ..Default::default() };
            settings.http =
                crate::config::HttpSettings { max_body_bytes, client_timeout: std::time::Duration::from_secs(client_timeout_secs.max(1)) };
            settings.public_url = public_url.unwrap_or_else(|| format!("http://{addr}"));
            settings.addr = addr;
            settings.default_locale = default_locale;
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let service = Application::build(app.clone()).await?;
            tracing::info!(report = ?app.registry.report, refused = ?app.registry.refused(), "tool registry");
            tracing::info!(addr = %app.settings.addr, port = service.port(), store = app.store.kind(), "serving");
            service.run_until(shutdown_signal()).await?;
            Ok(0)
        }
        Command::Learner { command: LearnerCommand::Create { name } } => {
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let token = app.create_learner(&name).await.map_err(|e| anyhow::anyhow!("cannot create the learner: {}", e.code()))?;
            println!("learner created; bearer token (shown once):");
            println!("{token}");
            Ok(0)
        }
        Command::Token { command: TokenCommand::Create { role } } => {
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let role = match role {
                StaffRole::Operator => Role::Operator,
                StaffRole::Analyst => Role::Analyst,
            };
            let token = app.create_staff_token(role).await.map_err(|e| anyhow::anyhow!("cannot create the token: {}", e.code()))?;
            println!("{} token (shown once):", role.as_str());
            println!("{token}");
            Ok(0)
        }
        Command::Events { journey, event_type, since, until } => {
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let filter = EventFilter { journey_id: journey, event_type, since, until };
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            let mut failed = false;
            app.list_events(&filter, |v| failed |= writeln!(lock, "{v}").is_err())
                .await
                .map_err(|e| anyhow::anyhow!("cannot read the events: {}", e.code()))?;
            Ok(i32::from(failed))
        }
        Command::Audit { command: AuditCommand::Verify } => {
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let report = app
                .audit_verify_recorded(10_000, |n| eprintln!("audit verify: {n} events checked …"))
                .await
                .map_err(|e| anyhow::anyhow!("cannot read the events: {}", e.code()))?;
            match report.broken {
                None => {
                    println!("audit verify: ok — {} streams, {} events, every chain intact", report.streams, report.events);
                    Ok(0)
                }
                Some(b) => {
                    println!("audit verify: BROKEN — journey {} sequence {}: {}", b.journey_id, b.sequence, b.problem);
                    Ok(2)
                }
            }
        }
        Command::Replay { swap } => {
            let app = App::build(settings, Arc::new(SystemClock)).await?;
            let started = std::time::Instant::now();
            let report = app.replay().await.map_err(|e| anyhow::anyhow!("replay failed: {}", e.code()))?;
            let secs = started.elapsed().as_secs_f64();
            let rate = if secs > 0.0 { report.events as f64 / secs } else { 0.0 };
            if report.differing.is_empty() && report.analytics_differing.is_empty() {
                println!(
                    "replay: ok — {} journeys, {} events folded ({rate:.0} events/s), shadow views equal the live ones",
                    report.journeys, report.events
                );
                Ok(0)
            } else if swap {
                let n = app.store.swap_in_shadow_views().await.map_err(|e| anyhow::anyhow!("swap failed: {e}"))?;
                app.swap_in_replayed_analytics().await.map_err(|e| anyhow::anyhow!("swap failed: {}", e.code()))?;
                println!(
                    "replay: {} of {} journeys and the analytics {:?} differed; the rebuilt views ({n} context rows) are now live",
                    report.differing.len(),
                    report.journeys,
                    report.analytics_differing
                );
                Ok(0)
            } else {
                println!(
                    "replay: DIFFERENT — {} of {} journeys differ: {}; analytics differ: {:?} (run with --swap to put the rebuilt views live)",
                    report.differing.len(),
                    report.journeys,
                    report.differing.join(", "),
                    report.analytics_differing
                );
                Ok(3)
            }
        }
    }
}

fn print_bench(r: &serde_json::Value) {
    println!("store: {}", r["store"].as_str().unwrap_or(""));
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "coaches", "writes/s", "reads/s", "w p50 ms", "w p99 ms", "inserts/s", "ins p99 ms"
    );
    for l in r["levels"].as_array().into_iter().flatten() {
        println!(
            "{:>6} {:>10.0} {:>10.0} {:>10.2} {:>10.2} {:>12.0} {:>12.2}",
            l["concurrency"].as_u64().unwrap_or(0),
            l["load"]["writes"]["per_second"].as_f64().unwrap_or(0.0),
            l["load"]["reads"]["per_second"].as_f64().unwrap_or(0.0),
            l["load"]["writes"]["p50_ms"].as_f64().unwrap_or(0.0),
            l["load"]["writes"]["p99_ms"].as_f64().unwrap_or(0.0),
            l["baseline_insert"]["per_second"].as_f64().unwrap_or(0.0),
            l["baseline_insert"]["p99_ms"].as_f64().unwrap_or(0.0),
        );
    }
    println!("ratios at concurrency {}:", r["ratios_at_concurrency"]);
    for (k, v) in r["ratios"].as_object().into_iter().flatten() {
        println!("  {k:<34} {:.2}   (target {})", v.as_f64().unwrap_or(f64::NAN), r["targets"][k].as_str().unwrap_or(""));
    }
    println!("replay: {}", r["replay"]);
    println!("long stream: {}", r["long_stream"]);
    println!("rss: {}", r["rss"]);
}
