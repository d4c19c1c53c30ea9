//! Application services: the one layer every transport (HTTP, MCP, CLI, web GUI) calls. It
//! owns the store, the catalog, the clock and the token keys; transports only translate.

pub(crate) mod analytics;
pub mod external_idp;
pub mod identity;
pub mod journeys;
pub mod oauth;
pub(crate) mod operator;
pub(crate) mod outbound;
pub(crate) mod quota;
pub mod sessions;
pub mod tokens;
pub(crate) mod writer;

use std::sync::Arc;

use anyhow::Context;

use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::config::Settings;
use crate::error::AppError;
use crate::registry::{Lock, Registry, ToolMeta, COMMITTED_LOCK};
use crate::store::{DbUrl, Store};
use tokens::Keys;

/// The application: shared by every request.
pub struct App {
    pub store: Arc<Store>,
    /// The read replica the analysts read from (`analytics_db`); `None`: `store` answers.
    pub analytics_store: Option<Arc<Store>>,
    /// The write path's commits (one per command) and the audit rows of no commit.
    pub writer: writer::Writer,
    pub catalog: Catalog,
    /// The injected clock.
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub keys: Keys,
    /// The tool registry after the start-up handshake.
    pub registry: Registry,
    /// Serializes this process's analytics projector runs.
    pub projector_lock: tokio::sync::Mutex<()>,
    /// This process among the instances on one database (the holder of the projector lease).
    pub instance_id: String,
    pub metrics: crate::metrics::Metrics,
    /// The last loaded state of recently used journeys, validated against the log on every
    /// load (only the events after it are read); bounded by `Settings::journey_cache`.
    pub(crate) journeys: Bounded<String, journeys::Loaded>,
    /// The external identity provider, when configured (then the built-in authorization server
    /// is off).
    pub idp: Option<external_idp::ExternalIdp>,
    /// Outbound HTTPS (client metadata documents, the provider's JWKS).
    pub outbound: std::sync::Arc<outbound::Outbound>,
    /// The external provider's subjects and the learners they map to (a mapping never changes).
    pub(crate) subjects: Bounded<String, String>,
    /// Recently resolved bearer tokens (by hash), each for `identity::Settings::bearer_cache_ttl`.
    pub(crate) principals: Bounded<String, (identity::Principal, std::time::Instant)>,
    /// Whether a learner or OAuth client is still active (not revoked), each for
    /// `identity::Settings::bearer_cache_ttl`.
    pub(crate) standing: Bounded<String, (bool, std::time::Instant)>,
    /// Learning sessions by id: a session row is written once and never changed (its expiry
    /// follows from the journey, which is read anyway), so a call naming its session needs no
    /// read of it after the first.
    pub(crate) sessions: Bounded<String, crate::store::SessionRow>,
    /// Client registrations per address in the current hour (`oauth_register_per_hour`).
    pub(crate) registrations: Bounded<std::net::IpAddr, (u32, chrono::DateTime<chrono::Utc>)>,
    /// The tokens each learning session was last handed, by session id, handed again while its
    /// journey's version stands (`tokens::SessionTokens`).
    pub(crate) session_tokens: Bounded<String, Arc<tokens::SessionTokens>>,
    /// `learningSessionId`s opened before, by their BLAKE3 hash: the keys do not change while
    /// the process runs, so a token that opened once opens the same way again.
    pub(crate) opened_sessions: Bounded<String, tokens::SessionClaims>,
}

impl App {
    /// Journeys held in memory (never more than `Settings::journey_cache`).
    pub fn journeys_cached(&self) -> usize {
        self.journeys.len()
    }

    /// The tokens a learning session was last handed (a new, empty set the first time).
    pub(crate) fn session_tokens(&self, session_id: &str) -> Arc<tokens::SessionTokens> {
        self.session_tokens.get_or_insert_with(session_id.to_owned(), Default::default)
    }
}

/// A bounded least-recently-used map shared across requests. A poisoned lock only disables
/// the cache: every caller can fall back to the store.
pub struct Bounded<K: std::hash::Hash + Eq, V>(std::sync::Mutex<lru::LruCache<K, V>>);

impl<K: std::hash::Hash + Eq, V: Clone> Bounded<K, V> {
    fn new(capacity: usize) -> Self {
        Self(std::sync::Mutex::new(lru::LruCache::new(std::num::NonZeroUsize::new(capacity.max(1)).unwrap_or(std::num::NonZeroUsize::MIN))))
    }

    /// A copy of the entry, marked as recently used.
    pub fn get(&self, key: &K) -> Option<V> {
        self.0.lock().ok()?.get(key).cloned()
    }

    /// Stores an entry, evicting the least recently used one when full.
    pub fn put(&self, key: K, value: V) {
        if let Ok(mut cache) = self.0.lock() {
            cache.put(key, value);
        }
    }

    /// A copy of the entry, made and stored first when there is none.
    pub fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> V {
        match self.0.lock() {
            Ok(mut cache) => cache.get_or_insert(key, make).clone(),
            Err(_) => make(),
        }
    }

    /// Drops an entry.
    pub fn forget(&self, key: &K) {
        if let Ok(mut cache) = self.0.lock() {
            cache.pop(key);
        }
    }

    /// Drops every entry.
    pub fn clear(&self) {
        if let Ok(mut cache) = self.0.lock() {
            cache.clear();
        }
    }

    /// How many entries the cache holds now.
    pub fn len(&self) -> usize {
        self.0.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl App {
    /// Connects, migrates and loads the content, and registers `tools` (handed over by the
    /// composition root, `startup::build_app`). Errors name what failed.
    pub async fn build(settings: Settings, clock: Arc<dyn Clock>, tools: &[ToolMeta]) -> anyhow::Result<Arc<Self>> {
        // Everything that can be checked without touching the disk is checked first, so a
        // mistyped option never leaves a database or a key file behind.
        let catalog = Catalog::load(settings.content_dir.as_deref())?;
        anyhow::ensure!(
            catalog.all_latest().len() < 2 || catalog.latest(&settings.default_curriculum).is_some(),
            "the default curriculum `{}` is not installed (installed: {}): set default_curriculum to one of them",
            settings.default_curriculum,
            catalog.summary()
        );
        let lock = match &settings.seams_lock {
            Some(path) => Lock::read(path)?,
            None => Lock::parse(COMMITTED_LOCK)?,
        };
        settings.db.validate()?;
        if let Some(replica) = &settings.analytics_db {
            replica.validate()?;
            anyhow::ensure!(
                matches!((&settings.db, replica), (DbUrl::Postgres(_), DbUrl::Postgres(_))),
                "analytics_db is a PostgreSQL read replica of db: both must be postgres:// URLs"
            );
        }
        // Development (the service on plain http): outbound fetches may reach private hosts.
        let development = settings.public_url.starts_with("http://");
        let outbound = Arc::new(outbound::Outbound::new(settings.outbound_ca_file.as_deref(), development)?);
        let keys = Keys::for_store(settings.capability_keys.as_deref(), &settings.db)?;
        let store = Store::connect(&settings.db, &settings.pool)
            .await
            .with_context(|| format!("cannot open the {} store", kind_of(&settings.db)))?;
        store.migrate().await.context("cannot apply the migrations")?;
        // The replica gets the schema by replication: never migrated, never written.
        let analytics_store = match &settings.analytics_db {
            Some(url) => {
                Some(Arc::new(Store::connect(url, &settings.pool).await.context("cannot open the analytics replica (analytics_db)")?))
            }
            None => None,
        };
        catalog.publish(&store, clock.now().timestamp_millis()).await?;
        let store = Arc::new(store);
        let metrics = crate::metrics::Metrics::default();
        let writer = writer::Writer::start(store.clone(), metrics.commits());
        let registry = Registry::start(tools, &lock);
        let settings_cache = settings.journey_cache;
        let (journeys, principals) = (Bounded::new(settings_cache), Bounded::new(settings_cache));
        let idp = match &settings.external_idp {
            Some(idp) => Some(external_idp::ExternalIdp::start(idp.clone(), outbound.clone()).await),
            None => None,
        };
        let app = Arc::new(Self {
            store,
            analytics_store,
            writer,
            catalog,
            clock,
            settings,
            keys,
            registry,
            projector_lock: tokio::sync::Mutex::new(()),
            instance_id: uuid::Uuid::new_v4().to_string(),
            metrics,
            journeys,
            idp,
            outbound,
            subjects: Bounded::new(settings_cache),
            principals,
            standing: Bounded::new(settings_cache),
            sessions: Bounded::new(settings_cache),
            registrations: Bounded::new(4096),
            session_tokens: Bounded::new(settings_cache),
            opened_sessions: Bounded::new(settings_cache),
        });
        app.catch_up_views().await.context("cannot bring the views up to date")?;
        // Analytics are caught up by every read and by the server's background projector; a
        // start (or a CLI command) is not refused because another process holds the projector.
        if let Err(e) = app.catch_up_analytics().await {
            tracing::warn!(error = %e, "analytics not caught up at start; the projector will retry");
        }
        Ok(app)
    }
}

fn kind_of(db: &DbUrl) -> &'static str {
    match db {
        DbUrl::Sqlite(_) => "SQLite",
        DbUrl::Postgres(_) => "PostgreSQL",
    }
}

/// What the transports may know of the store, asked through the application (HTTP, the web
/// pages and the CLI never hold the store themselves).
impl App {
    /// `sqlite` or `postgres`.
    pub fn store_kind(&self) -> &'static str {
        self.store.kind()
    }

    /// Whether the store answers a trivial query now.
    pub async fn store_reachable(&self) -> bool {
        self.store.ping().await.is_ok()
    }

    /// The database pool's figures, for `/metrics`.
    pub fn pool_sample(&self) -> crate::metrics::PoolSample {
        self.store.pool_sample(self.settings.pool.max_connections)
    }

    /// The newest `audit verify` run, if any.
    pub async fn last_audit_run(&self) -> Result<Option<crate::store::AuditRun>, AppError> {
        Ok(self.store.last_audit_run().await?)
    }

    /// Opens a server-side web session for a signed-in principal, for 12 hours; returns its id
    /// and its expiry.
    pub async fn open_web_session(&self, principal: &identity::Principal) -> Result<(String, chrono::DateTime<chrono::Utc>), AppError> {
        let now = self.clock.now();
        let expires = now + chrono::Duration::hours(12);
        let id = uuid::Uuid::new_v4().to_string();
        let learner = principal.learner_id.as_deref();
        self.store.insert_web_session(&id, principal.role.as_str(), learner, now.timestamp_millis(), expires.timestamp_millis()).await?;
        Ok((id, expires))
    }

    /// Whether a web session is open (not signed out, not expired) now.
    pub async fn web_session_open(&self, web_session_id: &str) -> Result<bool, AppError> {
        Ok(self.store.web_session_open(web_session_id, self.clock.now().timestamp_millis()).await?)
    }

    /// Ends a web session now (sign-out): its cookie opens nothing any more.
    pub async fn end_web_session(&self, web_session_id: &str) -> Result<(), AppError> {
        Ok(self.store.end_web_session(web_session_id, self.clock.now().timestamp_millis()).await?)
    }

    /// A learner's newest learning session, if any.
    pub async fn latest_session(&self, learner_id: &str) -> Result<Option<crate::store::SessionRow>, AppError> {
        Ok(self.store.latest_session(learner_id).await?)
    }

    /// Makes the replayed context views live (`replay --swap`); returns the rows swapped in.
    pub async fn swap_in_shadow_views(&self) -> Result<u64, AppError> {
        Ok(self.store.swap_in_shadow_views().await?)
    }
}
