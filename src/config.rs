//! Typed settings: defaults (the embedded SQLite file, loopback, the shipped curriculum),
//! overridden by environment variables and flags (clap reads both).

use std::path::PathBuf;

use chrono::Duration;

use crate::store::{DbUrl, PoolSettings};

/// Everything the service needs to start.
#[derive(Clone, Debug)]
pub struct Settings {
    pub db: DbUrl,
    /// Listen address, `HOST:PORT` (port 0 picks a free one).
    pub addr: String,
    /// A directory of curriculum packs added to (or overriding) the shipped ones.
    pub content_dir: Option<PathBuf>,
    /// A read replica (PostgreSQL streaming standby) the analyst reads go to; writes never do.
    pub analytics_db: Option<DbUrl>,
    /// The externally visible base URL (start URLs, OAuth metadata).
    pub public_url: String,
    /// Locale of a new journey when the learner names none.
    pub default_locale: String,
    /// Curriculum of a new journey when the learner names none and several are installed.
    pub default_curriculum: String,
    /// Idle expiry of a learning session.
    pub session_idle: Duration,
    /// Absolute expiry of a learning session.
    pub session_absolute: Duration,
    /// Lifetime of option tokens and capabilities.
    pub capability_ttl: Duration,
    /// Capability keys, `kid:base64url-32-bytes[,kid:…]`, the first one current.
    pub capability_keys: Option<String>,
    pub pool: PoolSettings,
    /// Allowed hosts and origins of the MCP endpoint.
    pub mcp: McpSettings,
    /// Request size and client time limits.
    pub http: HttpSettings,
    /// Journeys (and bearer tokens) kept in memory between requests.
    pub journey_cache: usize,
    /// An external identity provider whose JWT access tokens the MCP endpoint accepts; when set,
    /// the built-in authorization server is off.
    pub external_idp: Option<ExternalIdpSettings>,
    /// A seam lock file to read instead of the committed one (never written by the service).
    pub seams_lock: Option<PathBuf>,
    /// Quota window in learner turns (≥ 100).
    pub quota_window: usize,
    /// A context read within this many milliseconds after a successful write is a suspected
    /// redundant reload.
    pub reload_gap_ms: i64,
    /// How long a resolved bearer token and a learner's or client's standing are trusted from
    /// memory: the bound on how late a revocation reaches another instance.
    pub bearer_cache_ttl: std::time::Duration,
    /// When set, `/metrics` requires this bearer token.
    pub metrics_token: Option<String>,
    /// Dynamic client registrations one address may make per hour (0: no limit).
    pub oauth_register_per_hour: u32,
    /// Registered OAuth clients that never completed an authorization are deleted after this.
    pub oauth_unused_client_ttl: chrono::Duration,
    /// Extra CA certificates (PEM) trusted for outbound HTTPS (a private identity provider).
    pub outbound_ca_file: Option<PathBuf>,
}

/// What the HTTP server takes from a client before it gives up on it.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// Largest request body; a larger one is answered 413 before it is parsed.
    pub max_body_bytes: usize,
    /// A client must send its request headers, and then its body, each within this time;
    /// a slow or dead client is disconnected (headers) or answered 408 (body).
    pub client_timeout: std::time::Duration,
    /// Open connections at most; a connection beyond it is closed at once.
    pub max_connections: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self { max_body_bytes: 256 * 1024, client_timeout: std::time::Duration::from_secs(30), max_connections: 1024 }
    }
}

impl Settings {
    /// Defaults for a database.
    pub fn for_db(db: DbUrl) -> Self {
        Self {
            db,
            addr: "127.0.0.1:8080".into(),
            content_dir: None,
            analytics_db: None,
            public_url: "http://127.0.0.1:8080".into(),
            default_locale: "de".into(),
            default_curriculum: DEFAULT_CURRICULUM.into(),
            session_idle: Duration::hours(12),
            session_absolute: Duration::days(7),
            capability_ttl: Duration::hours(24),
            capability_keys: None,
            pool: PoolSettings::default(),
            mcp: McpSettings::default(),
            http: HttpSettings::default(),
            journey_cache: 1024,
            external_idp: None,
            seams_lock: None,
            quota_window: 1000,
            reload_gap_ms: 2000,
            metrics_token: None,
            outbound_ca_file: None,
            oauth_register_per_hour: 20,
            oauth_unused_client_ttl: Duration::hours(24),
            bearer_cache_ttl: PRINCIPAL_TTL,
        }
    }

    /// The web-GUI start URL every session error points to.
    pub fn start_url(&self) -> String {
        format!("{}/start", self.public_url.trim_end_matches('/'))
    }
}

/// The curriculum a learner who names none starts on: the shipped fractions course.
pub const DEFAULT_CURRICULUM: &str = "fractions";

/// Keys of the config file and the environment variables they fill.
pub const FILE_KEYS: &[(&str, &str)] = &[
    ("db", "DATABASE_URL"),
    ("addr", "SKILLPILOT_ADDR"),
    ("public_url", "SKILLPILOT_PUBLIC_URL"),
    ("content", "SKILLPILOT_CONTENT"),
    ("analytics_db", "SKILLPILOT_ANALYTICS_DB"),
    ("db_pooler", "SKILLPILOT_DB_POOLER"),
    ("default_locale", "SKILLPILOT_DEFAULT_LOCALE"),
    ("default_curriculum", "SKILLPILOT_DEFAULT_CURRICULUM"),
    ("allowed_hosts", "SKILLPILOT_ALLOWED_HOSTS"),
    ("allowed_origins", "SKILLPILOT_ALLOWED_ORIGINS"),
    ("capability_keys", "SKILLPILOT_CAPABILITY_KEYS"),
    ("max_body_bytes", "SKILLPILOT_MAX_BODY_BYTES"),
    ("client_timeout_secs", "SKILLPILOT_CLIENT_TIMEOUT_SECS"),
    ("max_connections", "SKILLPILOT_MAX_CONNECTIONS"),
    ("oauth_issuer", "SKILLPILOT_OAUTH_ISSUER"),
    ("oauth_jwks", "SKILLPILOT_OAUTH_JWKS"),
    ("oauth_audience", "SKILLPILOT_OAUTH_AUDIENCE"),
    ("log_format", "SKILLPILOT_LOG_FORMAT"),
    ("metrics_token", "SKILLPILOT_METRICS_TOKEN"),
    ("outbound_ca_file", "SKILLPILOT_OUTBOUND_CA_FILE"),
    ("oauth_register_per_hour", "SKILLPILOT_OAUTH_REGISTER_PER_HOUR"),
    ("oauth_unused_client_hours", "SKILLPILOT_OAUTH_UNUSED_CLIENT_HOURS"),
];

/// Reads the TOML file named by `SKILLPILOT_CONFIG` (or `--config FILE` on the command line)
/// and sets every environment variable it names that is not set already. Unknown keys are an
/// error naming the key; lists become comma-separated values.
pub fn apply_config_file() -> anyhow::Result<()> {
    use anyhow::Context;
    let args: Vec<String> = std::env::args().collect();
    let from_flag = args.iter().position(|a| a == "--config").and_then(|i| args.get(i + 1)).cloned();
    let Some(path) = from_flag.or_else(|| std::env::var("SKILLPILOT_CONFIG").ok()) else { return Ok(()) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read the config file {path}"))?;
    let table: toml::Table = text.parse().with_context(|| format!("{path} is not valid TOML"))?;
    for (key, value) in table {
        let env = FILE_KEYS.iter().find(|(k, _)| *k == key).map(|(_, e)| *e).with_context(|| format!("{path}: unknown key `{key}`"))?;
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Array(items) => items.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(","),
            other => other.to_string(),
        };
        if std::env::var_os(env).is_none() {
            std::env::set_var(env, value);
        }
    }
    Ok(())
}

/// How long a resolved bearer token, and the standing of a learner or OAuth client, is trusted
/// from memory by default (`Settings::bearer_cache_ttl`): the longest a revoked token keeps
/// working on an instance that resolved it just before.
pub const PRINCIPAL_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// MCP settings a deployment changes.
#[derive(Clone, Debug)]
pub struct McpSettings {
    /// Allowed `Host` values (loopback by default; a reverse proxy names its public host).
    pub allowed_hosts: Vec<String>,
    /// Allowed browser origins (`https://chatgpt.com:443`, …); empty rejects every Origin.
    pub allowed_origins: Vec<String>,
    /// How long a tool handler may run before the dispatcher answers `INTERNAL` for it.
    pub handler_timeout: std::time::Duration,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self { allowed_hosts: Vec::new(), allowed_origins: Vec::new(), handler_timeout: std::time::Duration::from_secs(30) }
    }
}

/// Where the provider's keys are published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// An https (or, for development, http) URL.
    Url(String),
    /// A local JWKS file.
    File(PathBuf),
}

impl JwksSource {
    /// A URL when it looks like one, else a file path.
    pub fn parse(spec: &str) -> Self {
        if spec.starts_with("https://") || spec.starts_with("http://") {
            Self::Url(spec.to_owned())
        } else {
            Self::File(PathBuf::from(spec))
        }
    }
}

/// The external identity provider's settings.
#[derive(Clone, Debug)]
pub struct ExternalIdpSettings {
    /// Its issuer identifier (the `iss` of its tokens, and what the resource metadata names).
    pub issuer: String,
    pub jwks: JwksSource,
    /// The `aud` tokens must carry; `None` means this server's MCP resource URL.
    pub audience: Option<String>,
    /// The shortest time between two fetches of the JWKS for an unknown key id.
    pub refetch_after: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::FILE_KEYS;

    #[test]
    fn the_packaged_example_config_and_the_operations_table_name_every_key() {
        let example = include_str!("../packaging/config.toml");
        let operations = include_str!("../docs/operations.md");
        for (key, env) in FILE_KEYS {
            let listed = example.lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{key} = ")));
            assert!(listed, "packaging/config.toml does not list `{key}`");
            assert!(operations.contains(&format!("| `{key}` |")) && operations.contains(env), "docs/operations.md misses `{key}` / {env}");
        }
        // And nothing it lists is unknown to the service.
        for line in example.lines().map(|l| l.trim_start_matches(['#', ' '])) {
            if let Some((key, _)) = line.split_once(" = ") {
                if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    assert!(FILE_KEYS.iter().any(|(k, _)| *k == key), "packaging/config.toml lists an unknown key `{key}`");
                }
            }
        }
    }
}
