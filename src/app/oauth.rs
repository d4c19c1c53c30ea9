//! The built-in OAuth 2.1 authorization server and the resource server's token check (MCP
//! authorization, revisions 2025-06-18 and later): dynamic client registration (RFC 7591),
//! authorization code with PKCE S256 only, exact redirect-URI matching, resource indicators
//! (RFC 8707) as the audience, short-lived access tokens (PASETO v4.local, sealed with the
//! capability keys, so every instance checks them without a lookup) and rotating refresh tokens
//! whose reuse revokes their family. See `docs/adr/0003-built-in-authorization-server.md`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::identity::{Principal, Role};
use super::App;
use crate::error::AppError;
use crate::store::oauth::{CodeGrant, OAuthClient, RefreshGrant};

/// The scope of the coach tools.
pub const LEARN_SCOPE: &str = "skillpilot.learn";
/// Every scope the authorization server grants.
pub const SCOPES: &[&str] = &[LEARN_SCOPE];
/// Lifetime of an access token.
pub const ACCESS_TTL_SECS: i64 = 600;
/// Lifetime of a refresh token.
pub const REFRESH_TTL_SECS: i64 = 30 * 24 * 3600;
/// Lifetime of an authorization code.
pub const CODE_TTL_SECS: i64 = 60;

/// An OAuth error as RFC 6749 §5.2 names it, with the HTTP status it is sent with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {description}")]
pub struct OAuthError {
    pub code: &'static str,
    /// `error_description` (never echoes input).
    pub description: &'static str,
}

fn oauth_error(code: &'static str, description: &'static str) -> OAuthError {
    OAuthError { code, description }
}

impl OAuthError {
    /// The HTTP status of the token and registration endpoints for this error.
    pub fn status(&self) -> u16 {
        match self.code {
            "invalid_client" => 401,
            "temporarily_unavailable" => 429,
            "server_error" => 500,
            _ => 400,
        }
    }
}

/// Redirect URIs one client may register, and how long each may be.
const MAX_REDIRECT_URIS: usize = 5;
const MAX_REDIRECT_URI_LEN: usize = 512;
/// The largest client metadata document accepted by `/oauth/register`.
pub const MAX_REGISTRATION_BYTES: usize = 8 * 1024;

impl From<crate::store::StoreError> for OAuthError {
    fn from(e: crate::store::StoreError) -> Self {
        if let crate::store::StoreError::Rejected(detail) = &e {
            tracing::info!(%detail, "the database refused an input value");
            return oauth_error("invalid_request", "a parameter holds a value that cannot be stored (a NUL byte, say)");
        }
        tracing::error!(error = %e, "authorization server store error");
        oauth_error("server_error", "the store is unavailable")
    }
}

/// What a client sends to register (RFC 7591 §2); unknown members are ignored as the RFC says.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RegistrationRequest {
    /// Redirect URIs (required).
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    pub client_name: Option<String>,
    /// Requested client authentication at the token endpoint.
    pub token_endpoint_auth_method: Option<String>,
    /// Requested grant types.
    pub grant_types: Option<Vec<String>>,
    /// Requested response types.
    pub response_types: Option<Vec<String>>,
}

/// The registration response (RFC 7591 §3.2.1).
#[derive(Clone, Debug, Serialize)]
pub struct Registration {
    /// Issued client id.
    pub client_id: String,
    /// When, epoch seconds.
    pub client_id_issued_at: i64,
    pub client_name: String,
    /// Redirect URIs, as registered.
    pub redirect_uris: Vec<String>,
    /// Always `none`: every client is public and proves itself with PKCE.
    pub token_endpoint_auth_method: &'static str,
    pub grant_types: [&'static str; 2],
    pub response_types: [&'static str; 1],
}

/// A validated authorization request, sealed into the consent form so nothing in it can be
/// changed between the consent page and the decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationRequest {
    pub client_id: String,
    /// Its display name.
    pub client_name: String,
    /// Exactly one of its registered redirect URIs.
    pub redirect_uri: String,
    /// PKCE S256 challenge.
    pub code_challenge: String,
    pub scope: String,
    /// The resource (audience).
    pub resource: String,
    /// Opaque client state, returned as is.
    pub state: Option<String>,
    /// Expiry of the consent form, epoch seconds.
    pub exp: i64,
}

/// How a bad authorization request is answered: an error page when the client or redirect URI
/// cannot be trusted (never a redirect to an unverified URI), else a redirect with `error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthorizeError {
    /// Show an error page.
    Page(&'static str),
    /// Redirect to the client's (verified) redirect URI with this error.
    Redirect {
        /// The verified redirect URI.
        redirect_uri: String,
        /// The client's state.
        state: Option<String>,
        error: OAuthError,
    },
}

/// What the token endpoint returns.
#[derive(Clone, Debug, Serialize)]
pub struct TokenResponse {
    /// The access token.
    pub access_token: String,
    pub token_type: &'static str,
    /// Seconds until the access token expires.
    pub expires_in: i64,
    /// The next refresh token (the one used is spent).
    pub refresh_token: String,
    pub scope: String,
}

/// What an access token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessClaims {
    pub iss: String,
    pub sub: String,
    /// The resource it is for.
    pub aud: String,
    pub scope: String,
    /// The client it was issued to.
    pub client_id: String,
    /// Expiry, epoch seconds.
    pub exp: i64,
}

fn random_secret() -> Result<String, OAuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| oauth_error("server_error", "no randomness"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn hash(secret: &str) -> String {
    blake3::hash(secret.as_bytes()).to_hex().to_string()
}

/// `BASE64URL(SHA-256(verifier)) == challenge` (RFC 7636 §4.6), verifier 43–128 unreserved characters.
pub fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    let well_formed = (43..=128).contains(&verifier.len())
        && verifier.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    well_formed && URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) == challenge
}

/// A redirect URI a client may register: absolute, no fragment, https — or http on a loopback
/// host (native and development clients, RFC 8252 §7.3).
fn acceptable_redirect(uri: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(uri) else { return false };
    if url.fragment().is_some() || url.cannot_be_a_base() {
        return false;
    }
    match url.scheme() {
        "https" => true,
        "http" => matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]")),
        _ => false,
    }
}

/// Where a client metadata document may be fetched from: a URL with a path and no fragment;
/// in production https on a public host, in development (the service on plain http) anything.
fn metadata_url_allowed(url: &reqwest::Url, development: bool) -> bool {
    let private_host = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost") || d.ends_with(".internal"),
        // One classification of addresses for every outbound fetch (the fetch checks what a
        // name resolves to as well).
        Some(url::Host::Ipv4(ip)) => !super::outbound::is_global(ip.into()),
        Some(url::Host::Ipv6(ip)) => !super::outbound::is_global(ip.into()),
        None => true,
    };
    let shaped = url.path() != "/" && url.fragment().is_none() && matches!(url.scheme(), "https" | "http");
    shaped && (development || (url.scheme() == "https" && !private_host))
}

/// The granted scope for a requested one: unknown scopes are refused, none means the default.
fn granted_scope(requested: Option<&str>) -> Result<String, OAuthError> {
    let requested: Vec<&str> = requested.unwrap_or("").split_whitespace().collect();
    if requested.is_empty() {
        return Ok(LEARN_SCOPE.to_owned());
    }
    if requested.iter().any(|s| !SCOPES.contains(s)) {
        return Err(oauth_error("invalid_scope", "a requested scope is not offered"));
    }
    Ok(requested.join(" "))
}

impl App {
    /// The issuer identifier (and base URL) of the built-in authorization server.
    pub fn oauth_issuer(&self) -> String {
        self.settings.public_url.trim_end_matches('/').to_owned()
    }

    /// The protected resource: the MCP endpoint's URL, the audience of every access token.
    pub fn mcp_resource(&self) -> String {
        format!("{}/mcp", self.oauth_issuer())
    }

    /// The authorization server clients are sent to: the external provider when one is
    /// configured, else the built-in one.
    pub fn authorization_server(&self) -> String {
        match &self.idp {
            Some(idp) => idp.settings.issuer.clone(),
            None => self.oauth_issuer(),
        }
    }

    /// Whether the built-in authorization server answers (not when an external provider is set).
    pub fn builtin_authorization_server(&self) -> bool {
        self.idp.is_none()
    }

    /// The resource server's check of an external provider's JWT; its subject becomes (or
    /// finds) a learner.
    pub(crate) async fn authenticate_external(&self, idp: &super::external_idp::ExternalIdp, token: &str) -> Result<Principal, AppError> {
        let audience = idp.settings.audience.clone().unwrap_or_else(|| self.mcp_resource());
        let now = self.clock.now();
        let verified = idp.verify(token, &audience, now.timestamp()).await?;
        if !verified.scopes.iter().any(|s| s == LEARN_SCOPE) {
            return Err(AppError::InsufficientScope);
        }
        // The mapping never changes once made: remembered, so a request costs no lookup.
        let learner_id = match self.subjects.get(&verified.subject) {
            Some(known) => known,
            None => {
                let id = self.store.learner_for_subject(&idp.settings.issuer, &verified.subject, now.timestamp_millis()).await?;
                self.subjects.put(verified.subject, id.clone());
                id
            }
        };
        Ok(Principal { role: Role::Learner, learner_id: Some(learner_id) })
    }

    /// Dynamic client registration (RFC 7591).
    /// Registers a client for `peer` (its address, for the per-address limit). Clients that never
    /// completed an authorization within `Settings::oauth_unused_client_ttl` are deleted first.
    pub async fn register_client(&self, request: RegistrationRequest, peer: Option<std::net::IpAddr>) -> Result<Registration, OAuthError> {
        if let Some(peer) = peer {
            self.count_registration(peer)?;
        }
        if request.redirect_uris.is_empty() || request.redirect_uris.len() > MAX_REDIRECT_URIS {
            return Err(oauth_error("invalid_redirect_uri", "one to five redirect_uris are required"));
        }
        if !request.redirect_uris.iter().all(|u| u.len() <= MAX_REDIRECT_URI_LEN && acceptable_redirect(u)) {
            return Err(oauth_error(
                "invalid_redirect_uri",
                "redirect URIs must be absolute https URIs (http only on loopback) without fragment",
            ));
        }
        if request.grant_types.as_ref().is_some_and(|g| g.iter().any(|g| g != "authorization_code" && g != "refresh_token")) {
            return Err(oauth_error("invalid_client_metadata", "only authorization_code and refresh_token are offered"));
        }
        if request.response_types.as_ref().is_some_and(|r| r.iter().any(|r| r != "code")) {
            return Err(oauth_error("invalid_client_metadata", "only the code response type is offered"));
        }
        let name: String = request.client_name.unwrap_or_default().chars().filter(|c| !c.is_control()).take(100).collect();
        let client = OAuthClient {
            client_id: uuid::Uuid::new_v4().to_string(),
            client_name: if name.trim().is_empty() { "MCP client".to_owned() } else { name },
            redirect_uris: request.redirect_uris,
        };
        let now = self.clock.now();
        let expired = self.store.delete_unused_oauth_clients((now - self.settings.oauth_unused_client_ttl).timestamp_millis()).await?;
        if expired > 0 {
            tracing::info!(expired, "unused OAuth client registrations deleted");
        }
        self.store.insert_oauth_client(&client, now.timestamp_millis()).await?;
        Ok(Registration {
            client_id: client.client_id,
            client_id_issued_at: now.timestamp(),
            client_name: client.client_name,
            redirect_uris: client.redirect_uris,
            token_endpoint_auth_method: "none",
            grant_types: ["authorization_code", "refresh_token"],
            response_types: ["code"],
        })
    }

    /// Counts a registration against its address's hourly allowance.
    fn count_registration(&self, peer: std::net::IpAddr) -> Result<(), OAuthError> {
        let limit = self.settings.oauth_register_per_hour;
        if limit == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        let (count, since) = match self.registrations.get(&peer) {
            Some((count, since)) if now - since < chrono::Duration::hours(1) => (count, since),
            _ => (0, now),
        };
        if count >= limit {
            return Err(oauth_error(
                "temporarily_unavailable",
                "too many client registrations from this address; try again within the hour",
            ));
        }
        self.registrations.put(peer, (count + 1, since));
        Ok(())
    }

    /// Validates an authorization request's parameters.
    pub async fn check_authorization(
        &self,
        params: &std::collections::HashMap<String, String>,
    ) -> Result<AuthorizationRequest, AuthorizeError> {
        let get = |k: &str| params.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let client_id = get("client_id").ok_or(AuthorizeError::Page("client_id is missing"))?;
        let client = if client_id.starts_with("https://") || client_id.starts_with("http://") {
            self.client_from_metadata_document(client_id).await.map_err(AuthorizeError::Page)?
        } else {
            match self.store.oauth_client(client_id).await {
                Ok(Some(c)) => c,
                // A value the database refuses (a NUL byte) names no registered client either.
                Ok(None) | Err(crate::store::StoreError::Rejected(_)) => return Err(AuthorizeError::Page("the client is not registered")),
                Err(_) => return Err(AuthorizeError::Page("the store is unavailable")),
            }
        };
        let redirect_uri = match get("redirect_uri") {
            Some(uri) if client.redirect_uris.iter().any(|r| r == uri) => uri.to_owned(),
            Some(_) => return Err(AuthorizeError::Page("redirect_uri does not match a registered one exactly")),
            None => return Err(AuthorizeError::Page("redirect_uri is missing")),
        };
        let state = get("state").map(str::to_owned);
        let fail = |error: OAuthError| AuthorizeError::Redirect { redirect_uri: redirect_uri.clone(), state: state.clone(), error };
        if get("response_type") != Some("code") {
            return Err(fail(oauth_error("unsupported_response_type", "only response_type=code is offered")));
        }
        let challenge = get("code_challenge").ok_or_else(|| fail(oauth_error("invalid_request", "code_challenge is required (PKCE)")))?;
        if get("code_challenge_method") != Some("S256") || challenge.len() != 43 {
            return Err(fail(oauth_error("invalid_request", "PKCE with code_challenge_method=S256 is required")));
        }
        let resource = self.mcp_resource();
        if get("resource").is_some_and(|r| r.trim_end_matches('/') != resource) {
            return Err(fail(oauth_error("invalid_target", "tokens are only issued for this server's MCP endpoint")));
        }
        let scope = granted_scope(get("scope")).map_err(fail)?;
        Ok(AuthorizationRequest {
            client_id: client.client_id,
            client_name: client.client_name,
            redirect_uri: redirect_uri.clone(),
            code_challenge: challenge.to_owned(),
            scope,
            resource,
            state,
            exp: self.clock.now().timestamp() + 600,
        })
    }

    /// A client identified by the URL of its metadata document (the MCP spec's client-ID
    /// metadata documents): fetched on every authorization request — https only, no redirects,
    /// 5 s, 64 KiB — and accepted when it names itself with exactly that URL and lists valid
    /// redirect URIs. Plain http and loopback hosts only while the service itself runs on plain
    /// http (development), so a deployed server never fetches from its own network by request.
    async fn client_from_metadata_document(&self, url: &str) -> Result<OAuthClient, &'static str> {
        #[derive(Deserialize)]
        struct Document {
            client_id: String,
            #[serde(default)]
            client_name: Option<String>,
            #[serde(default)]
            redirect_uris: Vec<String>,
            #[serde(default)]
            token_endpoint_auth_method: Option<String>,
        }
        let parsed = reqwest::Url::parse(url).map_err(|_| "client_id is not a URL")?;
        if !metadata_url_allowed(&parsed, self.settings.public_url.starts_with("http://")) {
            return Err("a client metadata document must be an https URL with a path on a public host");
        }
        // One message for every failure (refused address, closed port, timeout, size, status).
        let body = self
            .outbound
            .get(url, 65_536, std::time::Duration::from_secs(5))
            .await
            .map_err(|_| "the client metadata document cannot be fetched")?;
        let document: Document = serde_json::from_slice(&body).map_err(|_| "the client metadata document is not valid JSON metadata")?;
        if document.client_id != url {
            return Err("the client metadata document names another client_id");
        }
        if document.token_endpoint_auth_method.as_deref().is_some_and(|m| m != "none") {
            return Err("only public clients (token_endpoint_auth_method none) are supported");
        }
        if document.redirect_uris.is_empty() || !document.redirect_uris.iter().all(|u| acceptable_redirect(u)) {
            return Err("the client metadata document lists no acceptable redirect_uris");
        }
        let name: String = document.client_name.unwrap_or_default().chars().filter(|c| !c.is_control()).take(100).collect();
        let client = OAuthClient {
            client_id: url.to_owned(),
            client_name: if name.trim().is_empty() { parsed.host_str().unwrap_or("MCP client").to_owned() } else { name },
            redirect_uris: document.redirect_uris,
        };
        // Recorded so codes and tokens can refer to it; refreshed on every fetch.
        self.store.upsert_oauth_client(&client, self.clock.now().timestamp_millis()).await.map_err(|_| "the store is unavailable")?;
        Ok(client)
    }

    /// Issues a single-use authorization code for a consented request; returns the code.
    pub async fn issue_code(&self, request: &AuthorizationRequest, learner_id: &str) -> Result<String, OAuthError> {
        let code = random_secret()?;
        let grant = CodeGrant {
            client_id: request.client_id.clone(),
            learner_id: learner_id.to_owned(),
            redirect_uri: request.redirect_uri.clone(),
            code_challenge: request.code_challenge.clone(),
            scope: request.scope.clone(),
            resource: request.resource.clone(),
            expires_ms: (self.clock.now() + chrono::Duration::seconds(CODE_TTL_SECS)).timestamp_millis(),
        };
        self.store.insert_oauth_code(&hash(&code), &grant).await?;
        Ok(code)
    }

    /// The token endpoint's `authorization_code` grant.
    pub async fn exchange_code(
        &self,
        code: &str,
        client_id: &str,
        redirect_uri: &str,
        verifier: &str,
        resource: Option<&str>,
    ) -> Result<TokenResponse, OAuthError> {
        let now = self.clock.now();
        let invalid = || oauth_error("invalid_grant", "the authorization code is invalid, expired, used, or was issued to another client");
        let code_hash = hash(code);
        let replayed = || async {
            // A code presented twice was stolen or replayed: what it produced is revoked too.
            let revoked = self.store.revoke_refresh_family(&code_hash, now.timestamp_millis()).await?;
            tracing::warn!(revoked, "an authorization code was presented again; its tokens are revoked");
            Err::<TokenResponse, OAuthError>(invalid())
        };
        let grant = match self.store.oauth_code(&code_hash).await? {
            Some((_, true)) => return replayed().await,
            Some((grant, false)) => grant,
            None => return Err(invalid()),
        };
        // Checked before the code is spent: a wrong guess by someone else does not burn it.
        if grant.expires_ms < now.timestamp_millis() || grant.client_id != client_id || grant.redirect_uri != redirect_uri {
            return Err(invalid());
        }
        if !pkce_matches(verifier, &grant.code_challenge) {
            return Err(oauth_error("invalid_grant", "the code_verifier does not match the code_challenge"));
        }
        if resource.is_some_and(|r| r.trim_end_matches('/') != grant.resource) {
            return Err(oauth_error("invalid_target", "the resource differs from the authorized one"));
        }
        if !self.store.claim_oauth_code(&code_hash, now.timestamp_millis()).await? {
            return replayed().await;
        }
        self.issue_tokens(RefreshGrant {
            family_id: code_hash,
            client_id: grant.client_id,
            learner_id: grant.learner_id,
            scope: grant.scope,
            resource: grant.resource,
            expires_ms: 0,
        })
        .await
    }

    /// The token endpoint's `refresh_token` grant: the token is spent and replaced.
    pub async fn refresh(&self, refresh_token: &str, client_id: &str, resource: Option<&str>) -> Result<TokenResponse, OAuthError> {
        let now = self.clock.now();
        let invalid = || oauth_error("invalid_grant", "the refresh token is invalid, expired or already used");
        let token_hash = hash(refresh_token);
        let grant = match self.store.refresh_token(&token_hash).await? {
            Some((grant, true)) => {
                // A spent refresh token came back: someone holds a copy. The family goes.
                let revoked = self.store.revoke_refresh_family(&grant.family_id, now.timestamp_millis()).await?;
                tracing::warn!(revoked, "a spent refresh token was presented again; its family is revoked");
                return Err(invalid());
            }
            Some((grant, false)) => grant,
            None => return Err(invalid()),
        };
        if grant.expires_ms < now.timestamp_millis() || grant.client_id != client_id {
            return Err(invalid());
        }
        if resource.is_some_and(|r| r.trim_end_matches('/') != grant.resource) {
            return Err(oauth_error("invalid_target", "the resource differs from the authorized one"));
        }
        if !self.store.claim_refresh_token(&token_hash, now.timestamp_millis()).await? {
            let revoked = self.store.revoke_refresh_family(&grant.family_id, now.timestamp_millis()).await?;
            tracing::warn!(revoked, "a refresh token was spent twice at once; its family is revoked");
            return Err(invalid());
        }
        self.issue_tokens(grant).await
    }

    async fn issue_tokens(&self, grant: RefreshGrant) -> Result<TokenResponse, OAuthError> {
        let now = self.clock.now();
        let claims = AccessClaims {
            iss: self.oauth_issuer(),
            sub: grant.learner_id.clone(),
            aud: grant.resource.clone(),
            scope: grant.scope.clone(),
            client_id: grant.client_id.clone(),
            exp: now.timestamp() + ACCESS_TTL_SECS,
        };
        let access_token = self.keys.seal_access(&claims);
        if access_token.is_empty() {
            return Err(oauth_error("server_error", "cannot seal the access token"));
        }
        let refresh_token = random_secret()?;
        let scope = grant.scope.clone();
        let next = RefreshGrant { expires_ms: (now + chrono::Duration::seconds(REFRESH_TTL_SECS)).timestamp_millis(), ..grant };
        self.store.insert_refresh_token(&hash(&refresh_token), &next).await?;
        Ok(TokenResponse { access_token, token_type: "Bearer", expires_in: ACCESS_TTL_SECS, refresh_token, scope })
    }

    /// The resource server's check of an OAuth access token: sealed by us, unexpired, issued
    /// for this resource and carrying the learn scope. A valid token without the scope is
    /// `InsufficientScope` (403), anything else `Unauthorized` (401).
    /// Returns the principal and the client the token was issued to.
    pub fn authenticate_access(&self, token: &str) -> Result<(Principal, String), AppError> {
        let claims: AccessClaims = self.keys.open_access(token).ok_or(AppError::Unauthorized)?;
        if claims.iss != self.oauth_issuer() || claims.aud != self.mcp_resource() || claims.exp <= self.clock.now().timestamp() {
            return Err(AppError::Unauthorized);
        }
        if !claims.scope.split_whitespace().any(|s| s == LEARN_SCOPE) {
            return Err(AppError::InsufficientScope);
        }
        Ok((Principal { role: Role::Learner, learner_id: Some(claims.sub) }, claims.client_id))
    }
}

#[cfg(test)]
mod tests {
    use super::{metadata_url_allowed, pkce_matches};

    #[test]
    fn a_deployed_server_fetches_client_documents_only_from_public_https_urls() {
        let allowed = |u: &str, dev: bool| metadata_url_allowed(&reqwest::Url::parse(u).unwrap(), dev);
        assert!(allowed("https://app.example/oauth/client.json", false));
        for refused in [
            "http://app.example/client.json",
            "https://127.0.0.1/client.json",
            "https://10.0.0.7/client.json",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/client.json",
            "https://[::1]/client.json",
            "https://app.example/",
            "https://app.example/client.json#x",
            "file:///etc/passwd",
        ] {
            assert!(!allowed(refused, false), "{refused}");
        }
        assert!(allowed("http://127.0.0.1:9/client.json", true));
        assert!(!allowed("file:///etc/passwd", true));
    }

    #[test]
    fn pkce_accepts_only_the_matching_s256_verifier() {
        // RFC 7636 appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert!(pkce_matches(verifier, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
        assert!(!pkce_matches(verifier, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cN"));
        assert!(!pkce_matches("short", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
    }
}
