//! HTTP routes: health, readiness, the curricula list and learning-session start. Handlers
//! only translate between HTTP and the application layer.

mod analytics;
pub mod auth;
mod operator;
mod v1;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

use crate::app::App;

/// The service's router.
pub fn router(app: Arc<App>) -> Router {
    let mcp = crate::mcp::router(app.clone(), &app.settings.mcp);
    let app_for_web = app.clone();
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
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024))
        .with_state(app)
        .merge(mcp)
        .merge(crate::web::router(app_for_web))
}

/// Prometheus text exposition; the projector lag is refreshed on each scrape.
async fn metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    if let Ok(status) = app.analytics_status().await {
        app.metrics.set_projection_lag(status.iter().map(|s| s.lag).max().unwrap_or(0));
    }
    ([(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], app.metrics.render())
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the store answers and the context tool is bound; refused tools are listed
/// (a refused tool other than the context tool does not make the service unready).
async fn readyz(State(app): State<Arc<App>>) -> impl IntoResponse {
    let store_ok = app.store.ping().await.is_ok();
    let context_bound = app.registry.is_bound(crate::app::quota::CONTEXT_TOOL);
    let status = if store_ok && context_bound { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = serde_json::json!({
        "status": if status == StatusCode::OK { "ready" } else { "unavailable" },
        "store": {"kind": app.store.kind(), "reachable": store_ok},
        "refusedTools": app.registry.refused(),
    });
    (status, axum::Json(body))
}
