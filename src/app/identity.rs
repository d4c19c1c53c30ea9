//! Learners and bearer tokens. Tokens are random, shown once, and stored only as blake3 hashes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

use super::App;
use crate::error::AppError;

/// The roles a bearer can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A learner (coach tools, learning sessions).
    Learner,
    /// An operator (registry, audit, replay).
    Operator,
    /// An analyst (read-only projections).
    Analyst,
}

impl Role {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Learner => "learner",
            Self::Operator => "operator",
            Self::Analyst => "analyst",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "learner" => Some(Self::Learner),
            "operator" => Some(Self::Operator),
            "analyst" => Some(Self::Analyst),
            _ => None,
        }
    }
}

/// Who a bearer token belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Role.
    pub role: Role,
    /// The learner, for learner tokens.
    pub learner_id: Option<String>,
}

/// How long a resolved bearer token is trusted from memory: the longest a token removed from
/// the store keeps working on an instance that resolved it just before.
pub const PRINCIPAL_TTL: std::time::Duration = std::time::Duration::from_secs(10);

fn hash_token(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

fn new_token(prefix: &str) -> Result<String, AppError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| AppError::Internal)?;
    Ok(format!("{prefix}_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

impl App {
    /// Creates a learner and returns a new bearer token for it (shown once).
    pub async fn create_learner(&self, name: &str) -> Result<String, AppError> {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(AppError::ValidationFailed { field: "name".into() });
        }
        let now = self.clock.now().timestamp_millis();
        let learner_id = Uuid::new_v4().to_string();
        self.store.create_learner(&learner_id, name, now).await?;
        let token = new_token("spl")?;
        self.store.insert_token(&hash_token(&token), Role::Learner.as_str(), Some(&learner_id), now).await?;
        Ok(token)
    }

    /// Creates an operator or analyst token (shown once).
    pub async fn create_staff_token(&self, role: Role) -> Result<String, AppError> {
        if role == Role::Learner {
            return Err(AppError::ValidationFailed { field: "role".into() });
        }
        let token = new_token(if role == Role::Operator { "spo" } else { "spa" })?;
        self.store.insert_token(&hash_token(&token), role.as_str(), None, self.clock.now().timestamp_millis()).await?;
        Ok(token)
    }

    /// Resolves a bearer token: an OAuth access token, or a development token (a known one
    /// from memory for `PRINCIPAL_TTL`; unknown tokens always ask the store).
    pub async fn authenticate(&self, token: &str) -> Result<Principal, AppError> {
        // OAuth access tokens are self-contained and checked without a lookup.
        if token.starts_with("v4.local.") {
            return self.authenticate_access(token);
        }
        if let Some(idp) = &self.idp {
            if token.split('.').count() == 3 {
                return self.authenticate_external(idp, token).await;
            }
        }
        let hash = hash_token(token);
        if let Some((principal, at)) = self.principals.get(&hash) {
            if at.elapsed() < PRINCIPAL_TTL {
                return Ok(principal);
            }
            self.principals.forget(&hash);
        }
        let (role, learner_id) = self.store.token(&hash).await?.ok_or(AppError::Unauthorized)?;
        let role = Role::parse(&role).ok_or(AppError::Unauthorized)?;
        let principal = Principal { role, learner_id };
        self.principals.put(hash, (principal.clone(), std::time::Instant::now()));
        Ok(principal)
    }
}
