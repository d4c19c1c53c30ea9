//! HTTP routes: health, readiness, the curricula list and learning-session start. Handlers
//! only translate between HTTP and the application layer.

pub mod auth;
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
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/curricula", get(v1::curricula))
        .route("/v1/learning-sessions", post(v1::start_session))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024))
        .with_state(app)
        .merge(mcp)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(app): State<Arc<App>>) -> impl IntoResponse {
    match app.store.ping().await {
        Ok(()) => (StatusCode::OK, axum::Json(serde_json::json!({"status": "ready", "store": app.store.kind()}))),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, axum::Json(serde_json::json!({"status": "unavailable", "store": app.store.kind()}))),
    }
}
