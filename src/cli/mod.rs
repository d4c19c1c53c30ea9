//! The command line (clap): `serve`, `migrate`, `learner`, `token`, `oauth clients`, `keygen`,
//! `backup`, `restore`, `events`, `audit verify`, `replay`, `analytics`, `bench`, `registry`,
//! `content check`, `completions`. Every command takes `--db` (or `DATABASE_URL`); each checks its configuration
//! before it creates any file.

mod content;
mod identity;
mod ops;
mod report;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use crate::app::operator::EventFilter;
use crate::app::tokens::Keys;
use crate::clock::SystemClock;
use crate::config::Settings;
use crate::registry::{relock, Lock};
use crate::startup::{shutdown_signal, Application};
use crate::store::DbUrl;

/// SkillPilot: the event-sourced backend of AI learning coaches.
#[derive(Debug, Parser)]
#[command(name = "skillpilot", version = crate::VERSION, about)]
pub struct Cli {
    /// Database: a SQLite file (default ./skillpilot.db) or a postgres:// URL.
    #[arg(long, global = true, env = "DATABASE_URL", default_value = "sqlite://skillpilot.db")]
    db: String,
    /// A directory of curriculum packs added to the shipped ones, e.g. new versions of them (a
    /// published version is never changed in place: docs/content.md).
    #[arg(long = "content", global = true, env = "SKILLPILOT_CONTENT")]
    content: Option<PathBuf>,
    /// A PostgreSQL read replica (streaming standby of --db) for the analysts' reads.
    #[arg(long = "analytics-db", global = true, env = "SKILLPILOT_ANALYTICS_DB")]
    analytics_db: Option<String>,
    /// How PostgreSQL is reached: none (directly, or a pooler in session mode) or transaction
    /// (a pooler such as pgbouncer in transaction mode: every statement in a transaction, none
    /// named on the server).
    #[arg(long = "db-pooler", global = true, env = "SKILLPILOT_DB_POOLER", value_enum, default_value = "none")]
    db_pooler: crate::store::Pooler,
    /// A TOML config file (every key: docs/operations.md and packaging/config.toml); flags and
    /// environment variables take precedence.
    #[arg(long, global = true, env = "SKILLPILOT_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: text (colour only on a terminal) or json (one object per line).
    #[arg(long, global = true, env = "SKILLPILOT_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve(Box<ServeArgs>),
    /// Apply the migrations and exit.
    Migrate,
    /// Create, list and revoke learners (and print a new learner's bearer token).
    Learner {
        #[command(subcommand)]
        command: LearnerCommand,
    },
    /// Manage operator and analyst tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Manage registered OAuth clients.
    Oauth {
        #[command(subcommand)]
        command: OauthCommand,
    },
    /// Print a new capability key spec `kid:key` for SKILLPILOT_CAPABILITY_KEYS.
    Keygen {
        /// The key id (letters, digits, '-', '_'); default: `k` and the current UTC time.
        #[arg(long)]
        kid: Option<String>,
    },
    /// Copy the SQLite database consistently while the service runs (VACUUM INTO), together
    /// with its capability key file. PostgreSQL: use pg_dump (docs/operations.md).
    Backup {
        /// The backup file to create (must not exist); the key goes beside it as
        /// `<name>.capability-key`.
        #[arg(long)]
        to: PathBuf,
    },
    /// Restore a backup made by `backup` into the database named by --db (which must not exist
    /// yet), key file included. Run it with the service stopped.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell to print the completion script for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
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
    #[cfg(feature = "bench")]
    Bench(BenchArgs),
    /// Print an analyst view (or, without a name, the views with their lag).
    Analytics {
        /// View name (goal-mastery, recall-outcomes, exam-results, daily-activity, tool-usage).
        name: Option<String>,
        /// How to print the view: `json` or `csv`.
        #[arg(long, value_enum, default_value = "json")]
        format: OutputFormat,
    },
    /// The tool registry: regenerate the seam lock (offline) or print the registry report.
    Registry {
        #[command(subcommand)]
        command: RegistryCommand,
    },
    /// Curriculum packs: check one before publishing it (docs/content.md).
    Content {
        #[command(subcommand)]
        command: ContentCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ContentCommand {
    /// Validate a pack folder (or a folder of pack folders) as the server loads it, with no
    /// database: the first problem as `file: field: problem`, else the goal graph. Exit code 1
    /// on a problem.
    Check {
        /// The pack folder (`pack.json` and `assets/`), or a folder holding several.
        dir: PathBuf,
    },
}

/// The options of `serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free port).
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
    /// Curriculum of new journeys when the learner names none and several are installed.
    #[arg(long, env = "SKILLPILOT_DEFAULT_CURRICULUM", default_value = crate::config::DEFAULT_CURRICULUM)]
    default_curriculum: String,
    /// Largest accepted request body in bytes; larger ones get 413 before parsing.
    #[arg(long, env = "SKILLPILOT_MAX_BODY_BYTES", default_value_t = 262_144)]
    max_body_bytes: usize,
    /// Seconds a client has to send its request headers, and then its body; also how long
    /// an idle connection (HTTP/1 keep-alive or HTTP/2) stays open.
    #[arg(long, env = "SKILLPILOT_CLIENT_TIMEOUT_SECS", default_value_t = 30)]
    client_timeout_secs: u64,
    /// Open connections at most (beyond it a new connection is closed at once).
    #[arg(long, env = "SKILLPILOT_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
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
    /// Dynamic client registrations one address may make per hour (0: no limit).
    #[arg(long, env = "SKILLPILOT_OAUTH_REGISTER_PER_HOUR", default_value_t = 20)]
    oauth_register_per_hour: u32,
    /// Hours after which a registered OAuth client that never completed an authorization is
    /// deleted.
    #[arg(long, env = "SKILLPILOT_OAUTH_UNUSED_CLIENT_HOURS", default_value_t = 24)]
    oauth_unused_client_hours: u32,
    /// Extra CA certificates (PEM) trusted for outbound HTTPS: a private identity provider's
    /// JWKS, client metadata documents.
    #[arg(long, env = "SKILLPILOT_OUTBOUND_CA_FILE")]
    outbound_ca_file: Option<PathBuf>,
    /// When set, `/metrics` answers only requests with `Authorization: Bearer <this>`.
    #[arg(long, env = "SKILLPILOT_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
}

/// The options of `bench`.
#[cfg(feature = "bench")]
#[derive(Debug, clap::Args)]
struct BenchArgs {
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
    /// Exit with status 4 when any ratio misses its target or cannot be judged.
    #[arg(long)]
    check: bool,
    /// Instead of the load levels: grow the log by this many events (e.g. 1000000) and compare
    /// write and read medians and the projector's rate with the empty database.
    #[arg(long)]
    growth: Option<usize>,
    /// Journeys the grown events are spread across.
    #[arg(long, default_value_t = 10_000)]
    growth_journeys: usize,
    /// The server under test reaches PostgreSQL through a pooler in transaction mode at
    /// HOST:PORT (e.g. pgbouncer forwarding to --db's server), with `--db-pooler transaction`;
    /// the bench's own connections and baselines stay direct.
    #[arg(long)]
    pooler: Option<String>,
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
        /// A display name for the new learner.
        #[arg(long)]
        name: String,
    },
    /// List learners (id, name, created, revoked, active tokens) as JSON lines.
    List,
    /// Revoke a learner: its tokens, OAuth grants and web sessions stop working.
    Revoke {
        /// The learner id (from `learner list`).
        learner_id: String,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token; the last line printed is the token.
    Create {
        /// Whether the token is for an operator or an analyst.
        #[arg(long, value_enum)]
        role: StaffRole,
    },
    /// List development and staff tokens by id (never the token) as JSON lines.
    List,
    /// Revoke a token by its id (from `token list`).
    Revoke {
        /// The token id: 16 hex digits.
        token_id: String,
    },
}

#[derive(Debug, Subcommand)]
enum OauthCommand {
    /// Registered OAuth clients.
    Clients {
        #[command(subcommand)]
        command: ClientsCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ClientsCommand {
    /// List registered clients as JSON lines.
    List,
    /// Revoke a client and every refresh token issued to it.
    Revoke {
        /// The client id (from `oauth clients list`).
        client_id: String,
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
/// When it fails on the store and the store is a SQLite file, the file is checked, so a damaged
/// database is named as the cause instead of a bare `INTERNAL`.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let db = DbUrl::parse(&cli.db);
    match run_command(cli).await {
        Err(e) => {
            let text = format!("{e:#}");
            if text.contains("INTERNAL") || text.contains("STORE_UNAVAILABLE") {
                Err(diagnose(&db, e).await)
            } else {
                Err(e)
            }
        }
        ok => ok,
    }
}

async fn diagnose(db: &DbUrl, error: anyhow::Error) -> anyhow::Error {
    let Some(path) = db.sqlite_path().filter(|p| p.is_file()) else { return error };
    match crate::store::backup::sqlite_integrity(path).await {
        Ok(()) => error,
        // The cause last: it is what the operator acts on.
        Err(found) => anyhow::anyhow!("{error:#} — caused by a damaged SQLite database {}: {found}", path.display()),
    }
}

async fn run_command(cli: Cli) -> anyhow::Result<i32> {
    let mut settings = Settings::for_db(DbUrl::parse(&cli.db));
    settings.content_dir = cli.content.clone();
    settings.analytics_db = cli.analytics_db.as_deref().map(DbUrl::parse);
    settings.pool.pooler = cli.db_pooler;
    settings.capability_keys = std::env::var("SKILLPILOT_CAPABILITY_KEYS").ok().filter(|s| !s.trim().is_empty());
    match cli.command {
        Command::Serve(args) => serve(settings, *args).await,
        Command::Migrate => migrate(settings).await,
        Command::Learner { command } => identity::learner(&open(settings).await?, command).await,
        Command::Token { command } => identity::token(&open(settings).await?, command).await,
        Command::Oauth { command: OauthCommand::Clients { command } } => identity::clients(&open(settings).await?, command).await,
        Command::Keygen { kid } => keygen(kid),
        Command::Backup { to } => ops::backup(&settings, &to).await,
        Command::Restore { from } => ops::restore(&settings, &from).await,
        Command::Completions { shell } => completions(shell),
        Command::Events { journey, event_type, since, until } => {
            events(settings, EventFilter { journey_id: journey, event_type, since, until }).await
        }
        Command::Audit { command: AuditCommand::Verify } => report::audit_verify(open(settings).await?.as_ref()).await,
        Command::Replay { swap } => report::replay(open(settings).await?.as_ref(), swap).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench(&cli.db, cli.content, args).await,
        Command::Analytics { name, format } => analytics(settings, name, format).await,
        Command::Registry { command: RegistryCommand::Lock { path } } => registry_lock(&path),
        Command::Content { command: ContentCommand::Check { dir } } => content::check(&dir),
        Command::Registry { command: RegistryCommand::Report { seams_lock } } => {
            settings.seams_lock = seams_lock;
            registry_report(settings).await
        }
    }
}

/// The application on the configured store, with the system clock.
async fn open(settings: Settings) -> anyhow::Result<Arc<crate::app::App>> {
    crate::startup::build_app(settings, Arc::new(SystemClock)).await
}

async fn serve(mut settings: Settings, args: ServeArgs) -> anyhow::Result<i32> {
    let ServeArgs {
        addr,
        public_url,
        default_locale,
        default_curriculum,
        allowed_hosts,
        allowed_origins,
        max_body_bytes,
        client_timeout_secs,
        max_connections,
        oauth_issuer,
        oauth_jwks,
        oauth_audience,
        outbound_ca_file,
        oauth_register_per_hour,
        oauth_unused_client_hours,
        metrics_token,
    } = args;
    settings.outbound_ca_file = outbound_ca_file;
    settings.oauth_register_per_hour = oauth_register_per_hour;
    settings.oauth_unused_client_ttl = chrono::Duration::hours(i64::from(oauth_unused_client_hours.max(1)));
    if let (Some(issuer), Some(jwks)) = (oauth_issuer, oauth_jwks) {
        settings.external_idp = Some(crate::config::ExternalIdpSettings {
            issuer,
            jwks: crate::config::JwksSource::parse(&jwks),
            audience: oauth_audience,
            refetch_after: std::time::Duration::from_secs(30),
        });
    }
    settings.mcp = crate::config::McpSettings { allowed_hosts, allowed_origins, ..Default::default() };
    settings.http = crate::config::HttpSettings {
        max_body_bytes,
        client_timeout: std::time::Duration::from_secs(client_timeout_secs.max(1)),
        max_connections: max_connections.max(1),
    };
    settings.public_url = public_url.unwrap_or_else(|| format!("http://{addr}"));
    settings.addr = addr;
    settings.default_locale = default_locale;
    settings.default_curriculum = default_curriculum;
    settings.metrics_token = metrics_token.filter(|t| !t.trim().is_empty());
    let app = open(settings).await?;
    let service = Application::build(app.clone()).await?;
    let registry = &app.registry;
    tracing::info!(bound = registry.bound_count(), refused = %registry.refused().join(","), "tool registry");
    tracing::info!(
        version = crate::VERSION,
        addr = %app.settings.addr,
        port = service.port(),
        public_url = %app.settings.public_url,
        store = app.store_kind(),
        curricula = %app.catalog.summary(),
        key_id = app.keys.current_kid(),
        oauth = if app.idp.is_some() { "external" } else { "built-in" },
        metrics_protected = app.settings.metrics_token.is_some(),
        "serving"
    );
    service.run_until(shutdown_signal()).await?;
    Ok(0)
}

async fn migrate(settings: Settings) -> anyhow::Result<i32> {
    let app = open(settings).await?;
    println!("migrations applied ({})", app.store_kind());
    Ok(0)
}

fn keygen(kid: Option<String>) -> anyhow::Result<i32> {
    let spec = match kid {
        Some(kid) => Keys::generate_spec_with(&kid)?,
        None => Keys::generate_spec()?,
    };
    println!("{spec}");
    Ok(0)
}

fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "skillpilot", &mut std::io::stdout());
    Ok(0)
}

/// Prints the matching events as JSON lines; exit 2 for a journey the log does not know.
async fn events(settings: Settings, filter: EventFilter) -> anyhow::Result<i32> {
    let app = open(settings).await?;
    let journey = filter.journey_id.clone();
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let mut failed = false;
    let printed = app
        .list_events(&filter, |v| failed |= writeln!(lock, "{v}").is_err())
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the events: {}", e.code()))?;
    if let Some(journey) = journey.filter(|_| printed == 0) {
        let known = app.journey_exists(&journey).await.map_err(|e| anyhow::anyhow!("cannot read the events: {}", e.code()))?;
        if !known {
            eprintln!("events: no journey `{journey}` in the log");
            return Ok(2);
        }
    }
    Ok(i32::from(failed))
}

/// Runs the benchmark on a scratch database; exit 4 under `--check` when a ratio misses or,
/// on a contended host, cannot be judged.
#[cfg(feature = "bench")]
async fn bench(db: &str, content: Option<PathBuf>, args: BenchArgs) -> anyhow::Result<i32> {
    let BenchArgs { concurrency, duration, long_journey_events, rss_journeys, json, plot, check, growth, growth_journeys, pooler } = args;
    anyhow::ensure!(!concurrency.is_empty() && concurrency.iter().all(|c| *c > 0), "--concurrency needs positive numbers");
    let db = std::env::args()
        .any(|a| a == "--db" || a.starts_with("--db="))
        .then(|| db.to_owned())
        .or_else(|| std::env::var("DATABASE_URL").ok());
    let options = crate::bench::BenchOptions {
        db,
        concurrency,
        duration,
        long_journey_events,
        rss_journeys,
        content,
        plot,
        growth,
        growth_journeys,
        pooler,
    };
    let report = crate::bench::run(options).await?;
    if json || growth.is_some() {
        println!("{report}");
    } else {
        report::print_bench(&report);
    }
    Ok(if check && crate::bench::unmet(&report) > 0 { 4 } else { 0 })
}

/// Prints an analyst view (or the views with their lag); exit 2 for an unknown view.
async fn analytics(settings: Settings, name: Option<String>, format: OutputFormat) -> anyhow::Result<i32> {
    let app = open(settings).await?;
    let fail = |e: crate::error::AppError| anyhow::anyhow!("analytics: {}", e.code());
    let Some(name) = name else {
        println!("{}", serde_json::to_string_pretty(&app.analytics_overview().await.map_err(fail)?)?);
        return Ok(0);
    };
    let table = match app.analytics_table(&name).await {
        Err(crate::error::AppError::NotFound { .. }) => {
            eprintln!("analytics: no view `{name}`; the views are: {}", crate::app::analytics::view_names().join(", "));
            return Ok(2);
        }
        other => other.map_err(fail)?,
    };
    match format {
        OutputFormat::Csv => print!("{}", table.to_csv()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&table)?),
    }
    Ok(0)
}

async fn registry_report(settings: Settings) -> anyhow::Result<i32> {
    let app = open(settings).await?;
    let report = app.registry_report().await.map_err(|e| anyhow::anyhow!("cannot read the tool-call audit: {}", e.code()))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(0)
}

fn registry_lock(path: &std::path::Path) -> anyhow::Result<i32> {
    let previous = if path.exists() { Lock::read(path)? } else { Lock::default() };
    match relock(&crate::mcp::tools::registrations(), &previous) {
        Ok(lock) => {
            let text = serde_json::to_string_pretty(&lock)? + "\n";
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
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
