//! `/v1/analytics`: the analyst views with their lag, and each view as JSON or CSV (analyst or
//! operator role).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::auth::Bearer;
use crate::app::identity::{Principal, Role};
use crate::app::App;
use crate::error::AppError;

fn staff(principal: &Principal) -> Result<(), AppError> {
    match principal.role {
        Role::Analyst | Role::Operator => Ok(()),
        Role::Learner => Err(AppError::Forbidden),
    }
}

pub(super) async fn list(State(app): State<Arc<App>>, Bearer(principal): Bearer) -> Result<Response, AppError> {
    staff(&principal)?;
    Ok(Json(app.analytics_overview().await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Format {
    format: Option<String>,
}

pub(super) async fn view(
    State(app): State<Arc<App>>,
    Bearer(principal): Bearer,
    Path(name): Path<String>,
    query: Result<Query<Format>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, AppError> {
    staff(&principal)?;
    let Query(Format { format }) = query.map_err(|_| AppError::ValidationFailed { field: "format".into() })?;
    let table = app.analytics_table(&name).await?;
    match format.as_deref() {
        None | Some("json") => Ok(Json(json!({ "view": name, "columns": table.columns, "rows": table.rows })).into_response()),
        Some("csv") => Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], table.to_csv()).into_response()),
        Some(_) => Err(AppError::ValidationFailed { field: "format".into() }),
    }
}
