//! Learners and bearer tokens. Tokens are random, shown once, and stored only as blake3 hashes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

use super::App;
use crate::error::AppError;
use crate::store::identity::{ClientRow, LearnerRow, OperatorAction, TokenRow, TOKEN_ID_LEN};

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
    pub role: Role,
    /// The learner, for learner tokens.
    pub learner_id: Option<String>,
}

/// The token of an `Authorization: Bearer …` value; the scheme is case-insensitive (RFC 6750
/// §2.1 with RFC 9110 §11.1).
pub fn bearer_of(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The key a secret token is kept under (its BLAKE3 hash, never the token).
pub(crate) fn hash_token(token: &str) -> String {
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
    /// from memory for `Settings::bearer_cache_ttl`; unknown tokens always ask the store). A revoked learner,
    /// token or OAuth client stops working on every instance within `Settings::bearer_cache_ttl`.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, AppError> {
        // OAuth access tokens are self-contained; only the standing of their learner and client
        // is looked up (and remembered for `Settings::bearer_cache_ttl`).
        if token.starts_with("v4.local.") {
            let (principal, client_id) = self.authenticate_access(token)?;
            self.still_standing(Standing::Client(&client_id)).await?;
            if let Some(learner) = &principal.learner_id {
                self.still_standing(Standing::Learner(learner)).await?;
            }
            return Ok(principal);
        }
        if let Some(idp) = &self.idp {
            if token.split('.').count() == 3 {
                let principal = self.authenticate_external(idp, token).await?;
                if let Some(learner) = &principal.learner_id {
                    self.still_standing(Standing::Learner(learner)).await?;
                }
                return Ok(principal);
            }
        }
        let hash = hash_token(token);
        if let Some((principal, at)) = self.principals.get(&hash) {
            if at.elapsed() < self.settings.bearer_cache_ttl {
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

    async fn still_standing(&self, who: Standing<'_>) -> Result<(), AppError> {
        let key = match who {
            Standing::Learner(id) => format!("learner:{id}"),
            Standing::Client(id) => format!("client:{id}"),
        };
        let active = match self.standing.get(&key) {
            Some((active, at)) if at.elapsed() < self.settings.bearer_cache_ttl => active,
            _ => {
                let active = match who {
                    Standing::Learner(id) => self.store.learner_active(id).await?,
                    Standing::Client(id) => self.store.oauth_client_active(id).await?,
                };
                self.standing.put(key, (active, std::time::Instant::now()));
                active
            }
        };
        if active {
            Ok(())
        } else {
            Err(AppError::Unauthorized)
        }
    }

    /// Every learner (never a token).
    pub async fn list_learners(&self) -> Result<Vec<LearnerRow>, AppError> {
        Ok(self.store.learners().await?)
    }

    /// Revokes a learner: its development tokens, OAuth refresh tokens and web sessions end at
    /// once; its OAuth access tokens and cached bearer tokens within `Settings::bearer_cache_ttl` on every
    /// instance. Recorded in the operator audit.
    pub async fn revoke_learner(&self, actor: &str, learner_id: &str) -> Result<(), AppError> {
        let learner_id = learner_id.trim();
        if !self.store.revoke_learner(learner_id, self.clock.now().timestamp_millis()).await? {
            return Err(AppError::NotFound { what: "learner" });
        }
        self.forget_standing();
        self.record_action(actor, "learner.revoke", learner_id).await
    }

    /// Every development token (by id, never the token).
    pub async fn list_tokens(&self) -> Result<Vec<TokenRow>, AppError> {
        Ok(self.store.tokens().await?)
    }

    /// Revokes a development token by its id (the first 16 hex digits of its hash, as listed).
    pub async fn revoke_token(&self, actor: &str, token_id: &str) -> Result<(), AppError> {
        let token_id = token_id.trim().to_ascii_lowercase();
        if token_id.len() != TOKEN_ID_LEN || !token_id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(AppError::ValidationFailed { field: "tokenId".into() });
        }
        let Some(hash) = self.store.revoke_token(&token_id, self.clock.now().timestamp_millis()).await? else {
            return Err(AppError::NotFound { what: "token" });
        };
        self.principals.forget(&hash);
        self.record_action(actor, "token.revoke", &token_id).await
    }

    /// Every registered OAuth client.
    pub async fn list_oauth_clients(&self) -> Result<Vec<ClientRow>, AppError> {
        Ok(self.store.oauth_clients().await?)
    }

    /// Revokes an OAuth client and its refresh-token families; its access tokens stop within
    /// `Settings::bearer_cache_ttl`.
    pub async fn revoke_oauth_client(&self, actor: &str, client_id: &str) -> Result<(), AppError> {
        let client_id = client_id.trim();
        if !self.store.revoke_oauth_client(client_id, self.clock.now().timestamp_millis()).await? {
            return Err(AppError::NotFound { what: "OAuth client" });
        }
        self.forget_standing();
        self.record_action(actor, "oauth_client.revoke", client_id).await
    }

    /// The newest operator actions.
    pub async fn operator_actions(&self, limit: i64) -> Result<Vec<OperatorAction>, AppError> {
        Ok(self.store.operator_actions(limit).await?)
    }

    /// Records an operator action in the audit.
    pub async fn record_action(&self, actor: &str, action: &str, target: &str) -> Result<(), AppError> {
        let action = OperatorAction {
            at_ms: self.clock.now().timestamp_millis(),
            actor: actor.to_owned(),
            action: action.to_owned(),
            target: target.to_owned(),
        };
        tracing::info!(actor = %action.actor, action = %action.action, target = %action.target, "operator action");
        Ok(self.store.record_operator_action(&action).await?)
    }

    /// This instance drops what it remembers of bearers and standings, so its own revocations
    /// take effect at once (other instances follow within `Settings::bearer_cache_ttl`).
    fn forget_standing(&self) {
        self.principals.clear();
        self.standing.clear();
    }
}

/// Whose standing an access token depends on.
#[derive(Clone, Copy)]
enum Standing<'a> {
    Learner(&'a str),
    Client(&'a str),
}
