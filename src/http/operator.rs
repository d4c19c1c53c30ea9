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
