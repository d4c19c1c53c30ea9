//! Test harness: a fresh database per test (a SQLite file, or a throwaway PostgreSQL
//! database), the application on it, the HTTP service on port 0, and a manual clock. Each
//! scenario is written once and run on both stores by `both_stores!`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use skillpilot::app::identity::Principal;
use skillpilot::app::sessions::{SessionStarted, StartSession};
use skillpilot::app::tokens::Keys;
use skillpilot::app::App;
use skillpilot::clock::ManualClock;
use skillpilot::config::Settings;
use skillpilot::startup::Application;
use skillpilot::store::DbUrl;
use sqlx::Connection;

/// Which store a scenario runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A running application on a fresh database.
pub struct TestApp {
    pub backend: Backend,
    pub app: Arc<App>,
    pub clock: Arc<ManualClock>,
    pub db_url: String,
    pub base_url: String,
    pub keys_spec: String,
    pub http: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// The pgbouncer the app reaches PostgreSQL through, in the runs through a pooler.
    pub pgbouncer: Option<Pgbouncer>,
}

/// `SKILLPILOT_LONG=1`: the fault and concurrency tests run their long variants (more
/// clients, more rounds; see docs/reliability.md).
pub fn long_run() -> bool {
    std::env::var("SKILLPILOT_LONG").is_ok_and(|v| v == "1")
}

pub fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z").map(|t| t.with_timezone(&Utc)).unwrap()
}

pub fn content_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("content")
}

fn admin_postgres_url() -> String {
    std::env::var("SKILLPILOT_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The same server URL with another database name.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let prefix = base.rsplit_once('/').map(|(p, _)| p).unwrap_or(base);
    format!("{prefix}/{db}{query}")
}

async fn fresh_database(backend: Backend) -> (String, String) {
    let name = format!("sp_test_{}", uuid::Uuid::new_v4().simple());
    match backend {
        Backend::Sqlite => {
            let path = std::env::temp_dir().join(format!("{name}.db"));
            (path.display().to_string(), name)
        }
        Backend::Postgres => {
            let admin = admin_postgres_url();
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL is required for the store suite (run scripts/test, which finds or starts it): {e}"));
            sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&mut conn).await.unwrap();
            (with_database(&admin, &name), name)
        }
    }
}

pub async fn spawn(backend: Backend) -> TestApp {
    spawn_with(backend, |_| {}).await
}

/// A running application whose settings `adjust` changes first.
pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_on(backend, false, adjust).await
}

/// A private pgbouncer in transaction pooling mode in front of the shared PostgreSQL, on a spare
/// port, with fewer server connections than the app's pool, so clients share them; stopped when
/// dropped.
pub struct Pgbouncer {
    child: std::process::Child,
    dir: PathBuf,
    pub port: u16,
}

/// Server connections pgbouncer keeps per database and user: below the app's pool of 10.
pub const PGBOUNCER_POOL: u32 = 3;

impl Pgbouncer {
    pub fn start() -> Self {
        let bin = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("pgbouncer is needed for the runs through a pooler: install it (Debian: apt-get install pgbouncer); scripts/test does");
        let admin = url::Url::parse(&admin_postgres_url()).unwrap();
        let (host, port, user) =
            (admin.host_str().unwrap_or("127.0.0.1").to_owned(), admin.port().unwrap_or(5432), admin.username().to_owned());
        let dir = std::env::temp_dir().join(format!("sp-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        std::fs::write(dir.join("users.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {users}\npool_mode = transaction\ndefault_pool_size = {PGBOUNCER_POOL}\nmax_client_conn = 500\n\
                 admin_users = {user}\nstats_period = 1\nlogfile = {log}\n",
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        let mut command = std::process::Command::new(bin);
        // pgbouncer refuses to run as root: it switches to the postgres user, who must read its files.
        if std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0) {
            assert!(std::process::Command::new("chown").args(["-R", "postgres", dir.to_str().unwrap()]).status().unwrap().success());
            command.args(["-u", "postgres"]);
        }
        let child = command.arg(dir.join("pgbouncer.ini")).stdout(std::process::Stdio::null()).spawn().unwrap();
        // Owned at once, so a pgbouncer that never listens is still stopped (by the drop).
        let pgbouncer = Self { child, dir, port: listen };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok() {
                return pgbouncer;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!(
            "pgbouncer did not listen on {listen}: {}",
            std::fs::read_to_string(pgbouncer.dir.join("pgbouncer.log")).unwrap_or_default()
        );
    }

    /// `url` (a database on the shared PostgreSQL) through this pooler.
    pub fn url_for(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.port)).unwrap();
        url.to_string()
    }

    /// Transactions pgbouncer ran for `database` (its admin console's `SHOW STATS`).
    pub async fn transactions(&self, database: &str) -> i64 {
        use sqlx::Row;
        // pgbouncer folds its totals every `stats_period` (1 s here).
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let admin = url::Url::parse(&admin_postgres_url()).unwrap();
        let url = format!("postgres://{}@127.0.0.1:{}/pgbouncer", admin.username(), self.port);
        let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
        let mut conn = sqlx::PgConnection::connect_with(&options.extra_float_digits(None).statement_cache_capacity(0)).await.unwrap();
        let rows = sqlx::raw_sql("SHOW STATS").fetch_all(&mut conn).await.unwrap();
        rows.iter()
            .filter(|r| r.try_get_unchecked::<String, _>("database").is_ok_and(|d| d == database))
            // The console answers in text (its counters typed numeric): read the text.
            .map(|r| r.try_get_unchecked::<String, _>("total_xact_count").unwrap().parse::<i64>().unwrap())
            .sum()
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `spawn_with`, with the app reaching PostgreSQL through a private pgbouncer in transaction
/// pooling mode when `pooled` (and `db_pooler = transaction`).
pub async fn spawn_on(backend: Backend, pooled: bool, adjust: impl FnOnce(&mut Settings)) -> TestApp {
    let (db_url, _) = fresh_database(backend).await;
    let pgbouncer = pooled.then(Pgbouncer::start);
    let clock = Arc::new(ManualClock::at(t0()));
    let keys_spec = Keys::generate_spec().unwrap();
    let mut settings = Settings::for_db(DbUrl::parse(&pgbouncer.as_ref().map_or_else(|| db_url.clone(), |p| p.url_for(&db_url))));
    if pgbouncer.is_some() {
        settings.pool.pooler = skillpilot::store::Pooler::Transaction;
    }
    // Bound first, so the public URL (OAuth issuer and resource) names the real port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    settings.addr = "127.0.0.1:0".into();
    settings.public_url = base_url.clone();
    settings.content_dir = Some(content_dir());
    settings.capability_keys = Some(keys_spec.clone());
    adjust(&mut settings);
    let app = skillpilot::startup::build_app(settings, clock.clone()).await.unwrap();
    let service = Application::on(listener, app.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(service.run_until(async move {
        rx.await.ok();
    }));
    TestApp { backend, app, clock, db_url, base_url, keys_spec, http: reqwest::Client::new(), shutdown: Some(tx), pgbouncer }
}

impl TestApp {
    /// Stops the service and drops the test database.
    pub async fn teardown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            tx.send(()).ok();
        }
        self.app.store.close().await;
        drop(self.pgbouncer.take());
        match self.backend {
            Backend::Sqlite => {
                for suffix in ["", "-wal", "-shm"] {
                    std::fs::remove_file(format!("{}{suffix}", self.db_url)).ok();
                }
            }
            Backend::Postgres => {
                let name = self.db_url.split('?').next().and_then(|b| b.rsplit('/').next()).unwrap_or_default().to_owned();
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin_postgres_url()).await {
                    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).execute(&mut conn).await.ok();
                }
            }
        }
    }

    /// A new learner; returns its bearer token.
    pub async fn learner(&self, name: &str) -> String {
        self.app.create_learner(name).await.unwrap()
    }

    pub async fn principal(&self, token: &str) -> Principal {
        self.app.authenticate(token).await.unwrap()
    }

    /// A learner with a started session whose first goal is being taught (the learner's wish to
    /// begin is taken).
    pub async fn started(&self) -> SessionStarted {
        let token = self.learner("Ada").await;
        let principal = self.principal(&token).await;
        let s = self
            .app
            .start_session(&principal, StartSession { time_zone: Some("Europe/Berlin".into()), ..Default::default() })
            .await
            .unwrap();
        self.begin(&s.journey_id).await;
        s
    }

    /// The learner's wish to begin a fresh journey that waits for it (the first goal has a
    /// picture): the published `continue` option. Nothing when the journey waits for nothing.
    pub async fn begin(&self, journey_id: &str) {
        use aggregates::learning_journey::{JourneyCommand, NextStep, OptionChoice};
        use skillpilot::app::journeys::{Actor, CommandRequest};
        let state = self.app.load_journey(journey_id).await.unwrap().state;
        if state.next != NextStep::AwaitContinuation || state.version != 2 {
            return;
        }
        let begin = CommandRequest {
            journey_id: journey_id.to_owned(),
            command: JourneyCommand::ChooseOption { choice: OptionChoice::Continue },
            expected_version: Some(2),
            identity: None,
            tool: "test",
            actor: Actor::Learner,
            call: None,
        };
        self.app.execute(begin, None).await.unwrap();
    }

    /// A second application instance on the same database, with its own caches (another
    /// process behind the same load balancer), not serving HTTP.
    pub async fn another_process(&self) -> Arc<App> {
        self.another_process_with(|_| {}).await
    }

    /// `another_process` with adjusted settings.
    pub async fn another_process_with(&self, adjust: impl FnOnce(&mut Settings)) -> Arc<App> {
        let mut settings = self.app.settings.clone();
        adjust(&mut settings);
        skillpilot::startup::build_app(settings, self.clock.clone()).await.unwrap()
    }

    /// Runs raw SQL against the test database (tampering and crash simulations only).
    pub async fn raw_sql(&self, sqlite: &str, postgres: &str) {
        match self.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", self.db_url)).await.unwrap();
                sqlx::query(sqlite).execute(&mut conn).await.unwrap();
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.db_url).await.unwrap();
                sqlx::query(postgres).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// The `--db` and `--db-pooler` arguments of a `skillpilot` process that reaches this test's
    /// database the way the app does (through the pooler, when there is one).
    pub fn db_args(&self) -> Vec<String> {
        match (&self.pgbouncer, self.backend) {
            (Some(p), _) => vec!["--db".into(), p.url_for(&self.db_url), "--db-pooler".into(), "transaction".into()],
            (None, Backend::Sqlite) => vec!["--db".into(), format!("sqlite://{}", self.db_url)],
            (None, Backend::Postgres) => vec!["--db".into(), self.db_url.clone()],
        }
    }

    /// The name of this test's database (PostgreSQL) or file stem.
    pub fn db_name(&self) -> String {
        self.db_url.split('?').next().and_then(|b| b.rsplit('/').next()).unwrap_or_default().trim_end_matches(".db").to_owned()
    }

    /// Runs the `skillpilot` binary against this test's database.
    ///
    /// The wait blocks this thread, so it runs in `block_in_place`: a task of this app parked
    /// on the blocked worker (the background projector mid-transaction, say) moves to another
    /// thread instead of holding its row lock while the CLI process waits for that lock.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot"));
        command
            .args(self.db_args())
            .arg("--content")
            .arg(content_dir())
            .args(args)
            .env("SKILLPILOT_CAPABILITY_KEYS", &self.keys_spec)
            .env("RUST_LOG", "warn");
        tokio::task::block_in_place(|| command.output()).unwrap()
    }
}

/// Runs a scenario on a fresh app and tears it down afterwards (also when it panics).
pub async fn run<F, Fut>(backend: Backend, scenario: F)
where
    F: FnOnce(Arc<TestApp>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_with(backend, |_| {}, scenario).await
}

/// `run` on an app whose settings `adjust` changes first.
pub async fn run_with<F, Fut>(backend: Backend, adjust: impl FnOnce(&mut Settings), scenario: F)
where
    F: FnOnce(Arc<TestApp>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_on(backend, false, adjust, scenario).await
}

/// `run_with`, through a private pgbouncer in transaction pooling mode when `pooled`; then checks
/// that the scenario's transactions really went through it.
pub async fn run_on<F, Fut>(backend: Backend, pooled: bool, adjust: impl FnOnce(&mut Settings), scenario: F)
where
    F: FnOnce(Arc<TestApp>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let t = Arc::new(spawn_on(backend, pooled, adjust).await);
    let result = tokio::spawn(scenario(t.clone())).await;
    if let (Ok(()), Some(p)) = (&result, &t.pgbouncer) {
        assert!(t.app.store.pooled());
        let through = p.transactions(&t.db_name()).await;
        assert!(through > 0, "the scenario's transactions went through pgbouncer ({through})");
    }
    if let Ok(t) = Arc::try_unwrap(t) {
        t.teardown().await;
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Declares each scenario once more, on PostgreSQL through a private pgbouncer in transaction
/// pooling mode (`db_pooler = transaction`), in a module `through_pgbouncer`.
#[macro_export]
macro_rules! through_pgbouncer {
    (settings = $adjust:ident; $($name:ident),* $(,)?) => {
        mod through_pgbouncer {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::helpers::run_on($crate::helpers::Backend::Postgres, true, super::$adjust, super::$name).await
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        mod through_pgbouncer {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::helpers::run_on($crate::helpers::Backend::Postgres, true, |_| {}, super::$name).await
                }
            )*
        }
    };
}

/// Declares each scenario as two tests: one on SQLite, one on PostgreSQL; with
/// `settings = f;` first, on apps whose settings `f` adjusts.
#[macro_export]
macro_rules! both_stores {
    (settings = $adjust:ident; $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    $crate::helpers::run_with($crate::helpers::Backend::Sqlite, super::$adjust, super::$name).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    $crate::helpers::run_with($crate::helpers::Backend::Postgres, super::$adjust, super::$name).await
                }
            }
        )*
    };
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    $crate::helpers::run($crate::helpers::Backend::Sqlite, super::$name).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    $crate::helpers::run($crate::helpers::Backend::Postgres, super::$name).await
                }
            }
        )*
    };
}
