//! `/v1/operator/…`: the registry state, the whole-picture report and the quota table, for the
//! operator role only.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::auth::Bearer;
use crate::app::identity::Role;
use crate::app::App;
use crate::error::AppError;

pub(super) async fn registry(State(app): State<Arc<App>>, Bearer(principal): Bearer) -> Result<Json<Value>, AppError> {
    if principal.role != Role::Operator {
        return Err(AppError::Forbidden);
    }
    let report = app.registry_report().await?;
    Ok(Json(serde_json::to_value(report).map_err(|_| AppError::Internal)?))
}

fn operator(principal: &crate::app::identity::Principal) -> Result<(), AppError> {
    if principal.role == Role::Operator {
        Ok(())
    } else {
        Err(AppError::Forbidden)
    }
}

/// Runs `audit verify` and records it.
pub(super) async fn verify(State(app): State<Arc<App>>, Bearer(principal): Bearer) -> Result<Json<Value>, AppError> {
    operator(&principal)?;
    app.audit_verify_recorded(usize::MAX, |_| {}).await?;
    last_audit(State(app), Bearer(principal)).await
}

/// The latest recorded `audit verify`.
pub(super) async fn last_audit(State(app): State<Arc<App>>, Bearer(principal): Bearer) -> Result<Json<Value>, AppError> {
    operator(&principal)?;
    Ok(Json(serde_json::json!({ "lastVerify": app.last_audit_run().await? })))
}

/// Rebuilds the views into the shadow table and compares (never swaps: that is a CLI decision).
pub(super) async fn replay(State(app): State<Arc<App>>, Bearer(principal): Bearer) -> Result<Json<Value>, AppError> {
    operator(&principal)?;
    let report = app.replay().await?;
    Ok(Json(
        serde_json::json!({"journeys": report.journeys, "events": report.events, "differing": report.differing, "analyticsDiffering": report.analytics_differing}),
    ))
}
