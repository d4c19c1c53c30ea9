//! Option tokens and workflow capabilities (docs/tool-contract.md, capabilities): PASETO v4.local (authenticated
//! encryption, pasetors), bound to session, journey, kind and state version, with an expiry and
//! a key id in the footer for rotation. The implicit assertion binds each token to its purpose,
//! so an option token never opens as a capability.

use std::collections::BTreeMap;
use std::path::Path;

use aggregates::learning_journey::OptionChoice;
use anyhow::Context;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use pasetors::keys::SymmetricKey;
use pasetors::token::UntrustedToken;
use pasetors::version4::{LocalToken, V4};
use pasetors::Local;
use projections::full_context::{CapabilityStep, Sealer};
use serde::{Deserialize, Serialize};

use crate::error::AppError;

const OPTION_PURPOSE: &[u8] = b"skillpilot:option:v1";
const CAPABILITY_PURPOSE: &[u8] = b"skillpilot:capability:v1";
const SESSION_PURPOSE: &[u8] = b"skillpilot:session:v1";
const WEB_PURPOSE: &[u8] = b"skillpilot:web:v1";
const ACCESS_PURPOSE: &[u8] = b"skillpilot:oauth-access:v1";
const AUTHORIZE_PURPOSE: &[u8] = b"skillpilot:oauth-authorize:v1";

/// What a `learningSessionId` says: which session, until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    /// The session row.
    pub sid: String,
    /// Absolute expiry, epoch seconds.
    pub exp: i64,
}

/// The keys tokens are sealed with; the first is current, the rest still open old tokens.
pub struct Keys {
    current: String,
    keys: BTreeMap<String, SymmetricKey<V4>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").field("current", &self.current).finish_non_exhaustive()
    }
}

impl Keys {
    /// Reads `kid:base64url[,kid:base64url…]`; a key id given twice is an error (a rotation
    /// that reused an id would silently drop one of the keys).
    pub fn parse(spec: &str) -> anyhow::Result<Self> {
        let mut keys = BTreeMap::new();
        let mut current = None;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (kid, b64) = part.split_once(':').context("a capability key must look like kid:base64url")?;
            anyhow::ensure!(is_key_id(kid), "capability key id `{kid}` must be 1 to 64 letters, digits, '-' or '_'");
            let bytes = URL_SAFE_NO_PAD.decode(b64.trim_end_matches('=')).context("a capability key is not base64url")?;
            anyhow::ensure!(bytes.len() == 32, "capability key `{kid}` must be 32 bytes");
            let key = SymmetricKey::<V4>::from(&bytes).map_err(|e| anyhow::anyhow!("capability key `{kid}`: {e:?}"))?;
            current.get_or_insert_with(|| kid.to_owned());
            anyhow::ensure!(keys.insert(kid.to_owned(), key).is_none(), "capability key id `{kid}` is given twice");
        }
        let current = current.context("no capability key given")?;
        Ok(Self { current, keys })
    }

    /// The id of the key new tokens are sealed with.
    pub fn current_kid(&self) -> &str {
        &self.current
    }

    /// A fresh random key spec `kid:base64url` (for `skillpilot keygen`).
    pub fn generate_spec_with(kid: &str) -> anyhow::Result<String> {
        anyhow::ensure!(is_key_id(kid), "key id `{kid}` must be 1 to 64 letters, digits, '-' or '_'");
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        Ok(format!("{kid}:{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// A fresh random key spec whose id is the current UTC time (`k20261203T0835`), so keys made
    /// on different days never share an id.
    pub fn generate_spec() -> anyhow::Result<String> {
        Self::generate_spec_with(&format!("k{}", Utc::now().format("%Y%m%dT%H%M%S")))
    }

    /// The file holding the key of a SQLite database when no keys are configured: beside it,
    /// `<db>.capability-key`. Backups carry it along.
    pub fn key_file_of(db_file: &Path) -> std::path::PathBuf {
        db_file.with_extension("capability-key")
    }

    /// The keys for a store: the configured ones; for a SQLite file without configured keys the
    /// key file beside it, created together with a new database. A database that exists without
    /// its key file is an error naming the file: a new key would silently invalidate every open
    /// learning session and outstanding capability.
    pub fn for_store(spec: Option<&str>, db: &crate::store::DbUrl) -> anyhow::Result<Self> {
        if let Some(spec) = spec {
            return Self::parse(spec).context("SKILLPILOT_CAPABILITY_KEYS");
        }
        let Some(db_file) = db.sqlite_path() else {
            anyhow::bail!(
                "SKILLPILOT_CAPABILITY_KEYS is required with PostgreSQL (several instances must share the keys); generate one with `skillpilot keygen`"
            )
        };
        let path = Self::key_file_of(db_file);
        match std::fs::read_to_string(&path) {
            Ok(spec) => Self::parse(spec.trim()).with_context(|| format!("the capability key file {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let db_exists = std::fs::metadata(db_file).is_ok_and(|m| m.len() > 0);
                anyhow::ensure!(
                    !db_exists,
                    "the database {} exists but its capability key file {} is missing: restore it from the backup (`skillpilot backup` copies it) or set SKILLPILOT_CAPABILITY_KEYS; a new key would invalidate every open learning session",
                    db_file.display(),
                    path.display()
                );
                let spec = Self::generate_spec()?;
                write_private(&path, &spec).with_context(|| format!("cannot write the capability key file {}", path.display()))?;
                Self::parse(&spec)
            }
            Err(e) => Err(e).with_context(|| format!("cannot read the capability key file {}", path.display())),
        }
    }

    fn seal(&self, claims: &impl Serialize, purpose: &[u8]) -> String {
        let Some(key) = self.keys.get(&self.current) else { return String::new() };
        let footer = format!("{{\"kid\":\"{}\"}}", self.current);
        let message = serde_json::to_vec(claims).unwrap_or_default();
        LocalToken::encrypt(key, &message, Some(footer.as_bytes()), Some(purpose)).unwrap_or_else(|e| {
            tracing::error!(error = ?e, "sealing a token failed");
            String::new()
        })
    }

    fn open<T: for<'de> Deserialize<'de>>(&self, token: &str, purpose: &[u8]) -> Option<T> {
        let untrusted = UntrustedToken::<Local, V4>::try_from(token).ok()?;
        #[derive(Deserialize)]
        struct Footer {
            kid: String,
        }
        let footer: Footer = serde_json::from_slice(untrusted.untrusted_footer()).ok()?;
        let key = self.keys.get(&footer.kid)?;
        let trusted = LocalToken::decrypt(key, &untrusted, None, Some(purpose)).ok()?;
        serde_json::from_str(trusted.payload()).ok()
    }
}

fn is_key_id(kid: &str) -> bool {
    (1..=64).contains(&kid.len()) && kid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Writes a secret readable by its owner only (created with mode 0600, never widened).
pub fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()
}

/// What an option token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionClaims {
    /// Session it was published to.
    pub sid: String,
    pub jid: String,
    /// State version it was published at.
    pub ver: u64,
    pub choice: OptionChoice,
    /// Expiry, epoch seconds.
    pub exp: i64,
}

/// What a capability says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityClaims {
    pub sid: String,
    pub jid: String,
    pub inst: u64,
    pub step: CapabilityStep,
    /// State version it was issued at.
    pub ver: u64,
    /// Expiry, epoch seconds.
    pub exp: i64,
}

/// Seals the tokens of one full context for one session.
pub struct SessionSealer<'a> {
    pub keys: &'a Keys,
    pub session_id: &'a str,
    pub journey_id: &'a str,
    pub now: DateTime<Utc>,
    pub ttl: Duration,
    /// The tokens this session was handed at its journey's current version, handed again
    /// instead of sealed anew; `None`: every token is sealed.
    pub reuse: Option<&'a SessionTokens>,
}

impl SessionSealer<'_> {
    fn sealed(&self, version: u64, claim: Claim, seal: impl FnOnce() -> String) -> String {
        match self.reuse {
            Some(tokens) => tokens.reuse_or_seal(version, claim, self.now, self.ttl, seal),
            None => seal(),
        }
    }
}

impl Sealer for SessionSealer<'_> {
    fn seal_option(&self, state_version: u64, choice: &OptionChoice) -> String {
        self.sealed(state_version, Claim::Option(choice.clone()), || {
            self.keys.seal(
                &OptionClaims {
                    sid: self.session_id.to_owned(),
                    jid: self.journey_id.to_owned(),
                    ver: state_version,
                    choice: choice.clone(),
                    exp: (self.now + self.ttl).timestamp(),
                },
                OPTION_PURPOSE,
            )
        })
    }

    fn seal_capability(&self, instance: u64, step: CapabilityStep, state_version: u64) -> String {
        self.sealed(state_version, Claim::Capability(instance, step), || {
            self.keys.seal(
                &CapabilityClaims {
                    sid: self.session_id.to_owned(),
                    jid: self.journey_id.to_owned(),
                    inst: instance,
                    step,
                    ver: state_version,
                    exp: (self.now + self.ttl).timestamp(),
                },
                CAPABILITY_PURPOSE,
            )
        })
    }
}

/// The longest a sealed token is handed out again (at most an eighth of its lifetime): a token
/// handed again expires at most this much before a fresh one would.
const REUSE_WITHIN: Duration = Duration::seconds(60);

/// What a token of a session claims besides the session, the journey, the version and the
/// expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    Option(OptionChoice),
    Capability(u64, CapabilityStep),
}

/// The tokens one session was handed at one state version of its journey. Sealing a token
/// (PASETO: a random nonce, two key derivations, encryption and a MAC) was ~9 % of the server's
/// CPU under load, and a context read after a write hands out the same tokens the write's
/// answer did: they are handed again while the version stands, for at most [`REUSE_WITHIN`].
/// A token says nothing its claims do not, so handing one twice tells the coach nothing new.
#[derive(Debug, Default)]
pub struct SessionTokens(std::sync::Mutex<Generation>);

#[derive(Debug, Default)]
struct Generation {
    version: u64,
    sealed_at: Option<DateTime<Utc>>,
    tokens: Vec<(Claim, String)>,
}

impl SessionTokens {
    fn reuse_or_seal(&self, version: u64, claim: Claim, now: DateTime<Utc>, ttl: Duration, seal: impl FnOnce() -> String) -> String {
        let window = REUSE_WITHIN.min(ttl / 8);
        let current = |g: &Generation| g.version == version && g.sealed_at.is_some_and(|at| now >= at && now - at < window);
        if let Ok(generation) = self.0.lock() {
            if current(&generation) {
                if let Some((_, token)) = generation.tokens.iter().find(|(c, _)| *c == claim) {
                    return token.clone();
                }
            }
        }
        let token = seal();
        if let Ok(mut generation) = self.0.lock() {
            if !current(&generation) {
                *generation = Generation { version, sealed_at: Some(now), tokens: Vec::new() };
            }
            if !token.is_empty() {
                generation.tokens.push((claim, token.clone()));
            }
        }
        token
    }
}

/// A sealer for views, where tokens are left out anyway.
pub struct NoTokens;

impl Sealer for NoTokens {
    fn seal_option(&self, _: u64, _: &OptionChoice) -> String {
        String::new()
    }
    fn seal_capability(&self, _: u64, _: CapabilityStep, _: u64) -> String {
        String::new()
    }
}

impl Keys {
    /// Seals the web GUI's sign-in cookie.
    pub fn seal_web(&self, claims: &impl Serialize) -> String {
        self.seal(claims, WEB_PURPOSE)
    }

    /// A keyed MAC (blake3, with a key derived from the current capability key) over `data`
    /// for `purpose`: every instance sharing the keys computes the same value, nobody else can.
    pub fn mac(&self, purpose: &str, data: &str) -> String {
        let Some(key) = self.keys.get(&self.current) else { return String::new() };
        let derived = blake3::derive_key(&format!("skillpilot {purpose} v1"), key.as_bytes());
        blake3::keyed_hash(&derived, data.as_bytes()).to_hex().to_string()
    }

    /// Opens the web GUI's sign-in cookie.
    pub fn open_web<T: for<'de> Deserialize<'de>>(&self, token: &str) -> Option<T> {
        self.open(token, WEB_PURPOSE)
    }

    /// Seals an OAuth access token.
    pub fn seal_access(&self, claims: &impl Serialize) -> String {
        self.seal(claims, ACCESS_PURPOSE)
    }

    /// Opens an OAuth access token (its claims still need checking).
    pub fn open_access<T: for<'de> Deserialize<'de>>(&self, token: &str) -> Option<T> {
        self.open(token, ACCESS_PURPOSE)
    }

    /// Seals a validated authorization request into the consent form.
    pub fn seal_authorization(&self, claims: &impl Serialize) -> String {
        self.seal(claims, AUTHORIZE_PURPOSE)
    }

    /// Opens the authorization request of a consent form.
    pub fn open_authorization<T: for<'de> Deserialize<'de>>(&self, token: &str) -> Option<T> {
        self.open(token, AUTHORIZE_PURPOSE)
    }

    /// Seals a session id into the opaque `learningSessionId` (fresh nonce each time).
    pub fn seal_session(&self, claims: &SessionClaims) -> String {
        self.seal(claims, SESSION_PURPOSE)
    }

    /// Opens a `learningSessionId`; anything that does not decode is invalid.
    pub fn open_session(&self, token: &str) -> Result<SessionClaims, AppError> {
        self.open(token, SESSION_PURPOSE).ok_or(AppError::SessionInvalid)
    }

    /// Opens an option token for a session: invalid when it does not decode or belongs to
    /// another session or journey, expired past its expiry.
    pub fn open_option(&self, token: &str, session_id: &str, journey_id: &str, now: DateTime<Utc>) -> Result<OptionClaims, AppError> {
        let claims: OptionClaims = self.open(token, OPTION_PURPOSE).ok_or(AppError::OptionInvalid)?;
        if claims.sid != session_id || claims.jid != journey_id || claims.exp < now.timestamp() {
            return Err(AppError::OptionInvalid);
        }
        Ok(claims)
    }

    /// Opens a capability for a session.
    pub fn open_capability(
        &self,
        token: &str,
        session_id: &str,
        journey_id: &str,
        now: DateTime<Utc>,
    ) -> Result<CapabilityClaims, AppError> {
        let claims: CapabilityClaims = self.open(token, CAPABILITY_PURPOSE).ok_or(AppError::CapabilityInvalid)?;
        if claims.sid != session_id || claims.jid != journey_id {
            return Err(AppError::CapabilityInvalid);
        }
        if claims.exp < now.timestamp() {
            return Err(AppError::CapabilityExpired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer<'a>(keys: &'a Keys, now: DateTime<Utc>) -> SessionSealer<'a> {
        SessionSealer { keys, session_id: "s1", journey_id: "j1", now, ttl: Duration::hours(24), reuse: None }
    }

    #[test]
    fn an_option_token_opens_only_for_its_session_and_before_expiry() {
        let keys = Keys::parse(&Keys::generate_spec().unwrap()).unwrap();
        let now = Utc::now();
        let token = sealer(&keys, now).seal_option(7, &OptionChoice::Continue);
        assert!(token.starts_with("v4.local."));
        let claims = keys.open_option(&token, "s1", "j1", now).unwrap();
        assert_eq!((claims.ver, claims.choice), (7, OptionChoice::Continue));
        assert!(keys.open_option(&token, "s2", "j1", now).is_err());
        assert!(keys.open_option(&token, "s1", "j1", now + Duration::hours(25)).is_err());
        // Same claims, fresh nonce: different bytes.
        assert_ne!(token, sealer(&keys, now).seal_option(7, &OptionChoice::Continue));
    }

    #[test]
    fn a_session_is_handed_the_same_token_again_only_while_its_version_stands_and_briefly() {
        let keys = Keys::parse(&Keys::generate_spec().unwrap()).unwrap();
        let tokens = SessionTokens::default();
        let now = Utc::now();
        let at = |now, ttl| SessionSealer { keys: &keys, session_id: "s1", journey_id: "j1", now, ttl, reuse: Some(&tokens) };
        let day = Duration::hours(24);
        let first = at(now, day).seal_option(7, &OptionChoice::Continue);
        assert_eq!(first, at(now + Duration::seconds(59), day).seal_option(7, &OptionChoice::Continue));
        // Another claim, another version, or past the window: sealed anew, and each still opens.
        let other = at(now, day).seal_option(7, &OptionChoice::DeclineExam);
        assert_ne!(other, first);
        assert_eq!(keys.open_option(&other, "s1", "j1", now).unwrap().choice, OptionChoice::DeclineExam);
        let next = at(now, day).seal_option(8, &OptionChoice::Continue);
        assert_ne!(next, first);
        assert_eq!(keys.open_option(&next, "s1", "j1", now).unwrap().ver, 8);
        let later = at(now + Duration::seconds(61), day).seal_option(8, &OptionChoice::Continue);
        assert_ne!(later, next);
        // A short lifetime shortens the window: a token is never handed out near its expiry.
        let short = Duration::seconds(8);
        let brief = at(now, short).seal_option(9, &OptionChoice::Continue);
        assert_eq!(brief, at(now + Duration::milliseconds(900), short).seal_option(9, &OptionChoice::Continue));
        assert_ne!(brief, at(now + Duration::seconds(2), short).seal_option(9, &OptionChoice::Continue));
        // A capability is handed again for its own instance and step only.
        let cap = at(now, short).seal_capability(3, CapabilityStep::RecallAnswers, 9);
        assert_eq!(cap, at(now, short).seal_capability(3, CapabilityStep::RecallAnswers, 9));
        assert_ne!(cap, at(now, short).seal_capability(4, CapabilityStep::RecallAnswers, 9));
    }

    #[test]
    fn a_tampered_or_cross_purpose_token_is_refused() {
        let keys = Keys::parse(&Keys::generate_spec().unwrap()).unwrap();
        let now = Utc::now();
        let token = sealer(&keys, now).seal_option(1, &OptionChoice::Continue);
        let mut bytes = token.clone().into_bytes();
        let i = 20;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        assert!(keys.open_option(&String::from_utf8(bytes).unwrap(), "s1", "j1", now).is_err());
        assert!(matches!(keys.open_capability(&token, "s1", "j1", now), Err(AppError::CapabilityInvalid)));
    }

    #[test]
    fn an_old_key_still_opens_after_rotation_until_it_is_removed() {
        let old = Keys::generate_spec_with("k1").unwrap();
        let new = Keys::generate_spec_with("k2").unwrap();
        let before = Keys::parse(&old).unwrap();
        let during = Keys::parse(&format!("{new},{old}")).unwrap();
        let after = Keys::parse(&new).unwrap();
        assert_eq!(during.current_kid(), "k2");
        let now = Utc::now();
        let token = sealer(&before, now).seal_capability(3, CapabilityStep::RecallAnswers, 3);
        assert_eq!(during.open_capability(&token, "s1", "j1", now).unwrap().inst, 3);
        assert!(matches!(after.open_capability(&token, "s1", "j1", now), Err(AppError::CapabilityInvalid)));
    }

    #[test]
    fn a_key_id_given_twice_or_malformed_is_refused() {
        let a = Keys::generate_spec_with("k1").unwrap();
        let b = Keys::generate_spec_with("k1").unwrap();
        let err = Keys::parse(&format!("{a},{b}")).unwrap_err().to_string();
        assert!(err.contains("`k1` is given twice"), "{err}");
        assert!(Keys::generate_spec_with("no spaces").is_err());
        assert!(Keys::generate_spec().unwrap().starts_with('k'));
    }
}
