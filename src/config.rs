//! Typed settings: defaults (the embedded SQLite file, loopback, the shipped curriculum),
//! overridden by environment variables and flags (clap reads both).

use std::path::PathBuf;

use chrono::Duration;

use crate::mcp::McpSettings;
use crate::store::{DbUrl, PoolSettings};

/// Everything the service needs to start.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The store.
    pub db: DbUrl,
    /// Listen address, `HOST:PORT` (port 0 picks a free one).
    pub addr: String,
    /// The content directory with the curricula.
    pub content_dir: PathBuf,
    /// The externally visible base URL (start URLs, OAuth metadata).
    pub public_url: String,
    /// Locale of a new journey when the learner names none.
    pub default_locale: String,
    /// Idle expiry of a learning session.
    pub session_idle: Duration,
    /// Absolute expiry of a learning session.
    pub session_absolute: Duration,
    /// Lifetime of option tokens and capabilities.
    pub capability_ttl: Duration,
    /// Capability keys, `kid:base64url-32-bytes[,kid:…]`, the first one current.
    pub capability_keys: Option<String>,
    /// Pool sizes.
    pub pool: PoolSettings,
    /// Allowed hosts and origins of the MCP endpoint.
    pub mcp: McpSettings,
    /// A seam lock file to read instead of the committed one (never written by the service).
    pub seams_lock: Option<PathBuf>,
    /// Quota window in learner turns (≥ 100).
    pub quota_window: usize,
    /// A context read within this many milliseconds after a successful write is a suspected
    /// redundant reload.
    pub reload_gap_ms: i64,
}

impl Settings {
    /// Defaults for a database.
    pub fn for_db(db: DbUrl) -> Self {
        Self {
            db,
            addr: "127.0.0.1:8080".into(),
            content_dir: PathBuf::from("content"),
            public_url: "http://127.0.0.1:8080".into(),
            default_locale: "de".into(),
            session_idle: Duration::hours(12),
            session_absolute: Duration::days(7),
            capability_ttl: Duration::hours(24),
            capability_keys: None,
            pool: PoolSettings::default(),
            mcp: McpSettings::default(),
            seams_lock: None,
            quota_window: 1000,
            reload_gap_ms: 2000,
        }
    }

    /// The web-GUI start URL every session error points to.
    pub fn start_url(&self) -> String {
        format!("{}/start", self.public_url.trim_end_matches('/'))
    }
}
