//! The OAuth endpoints that speak JSON: protected-resource metadata (RFC 9728, also in the
//! path-suffixed form for `/mcp`), authorization-server metadata (RFC 8414), dynamic client
//! registration (RFC 7591) and the token endpoint. The interactive authorization endpoint
//! (sign-in and consent) is a web page: `src/web/oauth.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use serde_json::json;

use crate::app::oauth::{OAuthError, RegistrationRequest, SCOPES};
use crate::app::App;

fn no_store(status: StatusCode, body: serde_json::Value) -> Response {
    (status, [(header::CACHE_CONTROL, "no-store"), (header::PRAGMA, "no-cache")], Json(body)).into_response()
}

fn oauth_failure(e: &OAuthError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    no_store(status, json!({"error": e.code, "error_description": e.description}))
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`.
pub(super) async fn protected_resource(State(app): State<Arc<App>>) -> Response {
    Json(json!({
        "resource": app.mcp_resource(),
        "authorization_servers": [app.authorization_server()],
        "scopes_supported": SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "SkillPilot",
        "resource_documentation": format!("{}/start", app.oauth_issuer()),
    }))
    .into_response()
}

/// `GET /.well-known/oauth-authorization-server`.
pub(super) async fn authorization_server(State(app): State<Arc<App>>) -> Response {
    if !app.builtin_authorization_server() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let issuer = app.oauth_issuer();
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/oauth/authorize"),
        "token_endpoint": format!("{issuer}/oauth/token"),
        "registration_endpoint": format!("{issuer}/oauth/register"),
        "scopes_supported": SCOPES,
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": true,
    }))
    .into_response()
}

/// `POST /oauth/register` (RFC 7591).
pub(super) async fn register(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<super::PeerAddr>>,
    body: axum::body::Bytes,
) -> Response {
    if !app.builtin_authorization_server() {
        return StatusCode::NOT_FOUND.into_response();
    }
    if body.len() > crate::app::oauth::MAX_REGISTRATION_BYTES {
        return oauth_failure(&OAuthError { code: "invalid_client_metadata", description: "the client metadata is larger than 8 KiB" });
    }
    let request: RegistrationRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(_) => {
            return oauth_failure(&OAuthError { code: "invalid_client_metadata", description: "the body is not a client metadata object" })
        }
    };
    match app.register_client(request, peer.map(|p| p.0 .0)).await {
        Ok(registration) => no_store(StatusCode::CREATED, serde_json::to_value(registration).unwrap_or_default()),
        Err(e) => oauth_failure(&e),
    }
}

/// `POST /oauth/token`: `authorization_code` and `refresh_token` grants for public clients.
pub(super) async fn token(
    State(app): State<Arc<App>>,
    form: Result<Form<HashMap<String, String>>, axum::extract::rejection::FormRejection>,
) -> Response {
    if !app.builtin_authorization_server() {
        return StatusCode::NOT_FOUND.into_response();
    }
    // RFC 6749 §3.2: form-encoded only; anything else is an OAuth error a client can read.
    let Ok(Form(form)) = form else {
        return oauth_failure(&OAuthError {
            code: "invalid_request",
            description: "the token endpoint takes application/x-www-form-urlencoded",
        });
    };
    let get = |k: &str| form.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let missing = |what: &'static str| OAuthError { code: "invalid_request", description: what };
    let result = match get("grant_type") {
        Some("authorization_code") => match (get("code"), get("client_id"), get("redirect_uri"), get("code_verifier")) {
            (Some(code), Some(client_id), Some(redirect_uri), Some(verifier)) => {
                app.exchange_code(code, client_id, redirect_uri, verifier, get("resource")).await
            }
            _ => Err(missing("code, client_id, redirect_uri and code_verifier are required")),
        },
        Some("refresh_token") => match (get("refresh_token"), get("client_id")) {
            (Some(refresh), Some(client_id)) => app.refresh(refresh, client_id, get("resource")).await,
            _ => Err(missing("refresh_token and client_id are required")),
        },
        Some(_) => Err(OAuthError { code: "unsupported_grant_type", description: "only authorization_code and refresh_token" }),
        None => Err(missing("grant_type is required")),
    };
    match result {
        Ok(tokens) => no_store(StatusCode::OK, serde_json::to_value(tokens).unwrap_or_default()),
        Err(e) => oauth_failure(&e),
    }
}
