//! The resource server's second mode: access tokens issued by an external identity provider,
//! as JWTs checked against the provider's JWKS with `jsonwebtoken` — signature (asymmetric
//! algorithms only), issuer, audience (this server's MCP resource unless configured), expiry
//! (against the injected clock), and the learn scope. The JWKS comes from a URL or a local file,
//! is cached, and is fetched again when a token names a key id it does not hold (key rotation),
//! at most once per `refetch_after`.

pub use crate::config::{ExternalIdpSettings, JwksSource};

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::error::AppError;

/// What the resource server reads from a provider's token.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
}

/// A verified token: who, and with which scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The provider's subject.
    pub subject: String,
    pub scopes: Vec<String>,
}

/// The provider's verifier with its cached keys.
pub struct ExternalIdp {
    pub settings: ExternalIdpSettings,
    keys: tokio::sync::RwLock<(JwkSet, Option<Instant>)>,
    outbound: std::sync::Arc<super::outbound::Outbound>,
}

impl std::fmt::Debug for ExternalIdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalIdp").field("issuer", &self.settings.issuer).finish_non_exhaustive()
    }
}

const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl ExternalIdp {
    /// A verifier; the keys are fetched at once, and a failure is reported, not fatal (the
    /// provider may come up later).
    pub async fn start(settings: ExternalIdpSettings, outbound: std::sync::Arc<super::outbound::Outbound>) -> Self {
        let idp = Self { settings, keys: tokio::sync::RwLock::new((JwkSet { keys: Vec::new() }, None)), outbound };
        if let Err(e) = idp.refresh_keys().await {
            tracing::warn!(issuer = %idp.settings.issuer, error = %e, "cannot load the identity provider's keys yet");
        }
        idp
    }

    async fn fetch(&self) -> anyhow::Result<JwkSet> {
        let body = match &self.settings.jwks {
            JwksSource::File(path) => tokio::fs::read(path).await?,
            JwksSource::Url(url) => self.outbound.get(url, 256 * 1024, Duration::from_secs(5)).await?,
        };
        Ok(serde_json::from_slice(&body)?)
    }

    async fn refresh_keys(&self) -> anyhow::Result<()> {
        let set = self.fetch().await?;
        tracing::info!(issuer = %self.settings.issuer, keys = set.keys.len(), "identity provider keys loaded");
        *self.keys.write().await = (set, Some(Instant::now()));
        Ok(())
    }

    async fn key_for(&self, kid: Option<&str>) -> Option<jsonwebtoken::jwk::Jwk> {
        let find = |set: &JwkSet| match kid {
            Some(kid) => set.find(kid).cloned(),
            None if set.keys.len() == 1 => set.keys.first().cloned(),
            None => None,
        };
        let (found, fetched) = {
            let guard = self.keys.read().await;
            (find(&guard.0), guard.1)
        };
        if found.is_some() {
            return found;
        }
        // An unknown key id: the provider may have rotated. Fetch again, but not on every
        // request a forger sends.
        if fetched.is_none_or(|at| at.elapsed() >= self.settings.refetch_after) {
            if let Err(e) = self.refresh_keys().await {
                tracing::warn!(error = %e, "cannot refresh the identity provider's keys");
                // Remember the attempt so a dead provider is not hammered.
                self.keys.write().await.1 = Some(Instant::now());
            }
        }
        find(&self.keys.read().await.0)
    }

    /// Verifies a token: `Unauthorized` for anything not valid for us now.
    pub async fn verify(&self, token: &str, audience: &str, now_epoch: i64) -> Result<Verified, AppError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AppError::Unauthorized)?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(AppError::Unauthorized);
        }
        let jwk = self.key_for(header.kid.as_deref()).await.ok_or(AppError::Unauthorized)?;
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| AppError::Unauthorized)?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[audience]);
        // Expiry is checked below against the service's clock, like every other expiry here.
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|_| AppError::Unauthorized)?;
        let claims = data.claims;
        if claims.exp + 30 < now_epoch || claims.sub.is_empty() {
            return Err(AppError::Unauthorized);
        }
        let mut scopes: Vec<String> = claims.scope.unwrap_or_default().split_whitespace().map(str::to_owned).collect();
        scopes.extend(claims.scp.unwrap_or_default());
        Ok(Verified { subject: claims.sub, scopes })
    }
}
