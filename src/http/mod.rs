//! The HTTP router: health, readiness and metrics; the `/v1` API (curricula, learning-session
//! start, operator and analyst endpoints); OAuth discovery, registration and tokens; and, merged
//! in, `/mcp` and the web pages. Every request passes the access log, the metrics and the body
//! limits. Handlers only translate between HTTP and the application layer.

mod analytics;
pub(crate) mod auth;
mod oauth;
mod operator;
mod v1;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::app::App;

/// The address a request came from (the TCP peer: behind a reverse proxy, the proxy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub std::net::IpAddr);

/// The service's router.
pub fn router(app: Arc<App>) -> Router {
    let limits = app.settings.http.clone();
    let mcp = crate::mcp::router(app.clone(), &app.settings.mcp, limits.max_body_bytes);
    let app_for_web = app.clone();
    let app_for_log = app.clone();
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/curricula", get(v1::curricula))
        .route("/v1/learning-sessions", post(v1::start_session))
        .route("/v1/operator/registry", get(operator::registry))
        .route("/v1/operator/audit", get(operator::last_audit))
        .route("/v1/operator/audit/verify", post(operator::verify))
        .route("/v1/operator/replay", post(operator::replay))
        .route("/v1/analytics", get(analytics::list))
        .route("/v1/analytics/{name}", get(analytics::view))
        .route("/.well-known/oauth-protected-resource", get(oauth::protected_resource))
        .route("/.well-known/oauth-protected-resource/mcp", get(oauth::protected_resource))
        .route("/.well-known/oauth-authorization-server", get(oauth::authorization_server))
        .route("/oauth/register", post(oauth::register))
        .route("/oauth/token", post(oauth::token))
        .with_state(app)
        .merge(mcp)
        .merge(crate::web::router(app_for_web))
        .layer(axum::middleware::from_fn_with_state(limits, read_body))
        .layer(axum::middleware::from_fn_with_state(app_for_log, access_log))
}

/// One access-log line and one metrics sample per request: method, path (never the query,
/// which can carry codes and states), route pattern, status, duration and a request id (the
/// client's `X-Request-Id` when it is a plain token, else a new one; echoed in the response).
/// Never a header value or a body.
async fn access_log(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| (1..=64).contains(&v.len()) && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let method = request.method().clone();
    let path = request.uri().path().chars().take(200).collect::<String>();
    let route = request.extensions().get::<axum::extract::MatchedPath>().map(|m| m.as_str().to_owned());
    if let Ok(v) = header::HeaderValue::from_str(&request_id) {
        request.headers_mut().insert("x-request-id", v);
    }
    let mut response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    let status = response.status().as_u16();
    let route = route.unwrap_or_else(|| if path.starts_with("/mcp") { "/mcp".to_owned() } else { "unmatched".to_owned() });
    app.metrics.http(&route, method.as_str(), status, seconds);
    tracing::info!(
        target: "skillpilot::access",
        method = %method,
        path = %path,
        status,
        duration_ms = seconds * 1000.0,
        request_id = %request_id,
        "request"
    );
    if let Ok(v) = header::HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}

/// Reads every request body whole, within the size limit and the client timeout, before any
/// handler (rmcp's included) sees it: an oversized body is 413 unread, a client that stops
/// sending mid-way gets 408 instead of holding a task.
async fn read_body(State(limits): State<crate::config::HttpSettings>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    }
    match tokio::time::timeout(limits.client_timeout, axum::body::to_bytes(body, limits.max_body_bytes)).await {
        Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
        Ok(Err(e)) if is_length_limit(&e) => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
        Ok(Err(_)) => StatusCode::BAD_REQUEST.into_response(),
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// Prometheus text exposition; the projector lag, the pool and the process are sampled on each
/// scrape. With a configured metrics token only a request bearing it is answered.
async fn metrics(State(app): State<Arc<App>>, headers: axum::http::HeaderMap) -> Response {
    if let Some(expected) = &app.settings.metrics_token {
        let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(crate::app::identity::bearer_of);
        // Compared as hashes: equal-length digests, so the comparison time says nothing of the token.
        if given.map(|g| blake3::hash(g.as_bytes())) != Some(blake3::hash(expected.as_bytes())) {
            return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")]).into_response();
        }
    }
    if let Ok(status) = app.analytics_status().await {
        app.metrics.set_projection_lag(status.iter().map(|s| s.lag).max().unwrap_or(0));
    }
    app.metrics.sample(app.pool_sample());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], app.metrics.render()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the store answers and the context tool is bound; refused tools are listed
/// (a refused tool other than the context tool does not make the service unready).
async fn readyz(State(app): State<Arc<App>>) -> impl IntoResponse {
    let store_ok = app.store_reachable().await;
    let context_bound = app.registry.context_bound();
    let status = if store_ok && context_bound { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = serde_json::json!({
        "status": if status == StatusCode::OK { "ready" } else { "unavailable" },
        "store": {"kind": app.store_kind(), "reachable": store_ok},
        "refusedTools": app.registry.refused(),
        "instance": {"id": app.instance_id, "projectorLeader": app.is_projector_leader().await.unwrap_or(false)},
    });
    (status, axum::Json(body))
}
