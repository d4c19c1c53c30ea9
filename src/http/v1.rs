//! `/v1` JSON API: installed curricula and starting a learning session (docs/domain.md).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::auth::Bearer;
use crate::app::sessions::StartSession;
use crate::app::App;
use crate::error::AppError;

pub(super) async fn curricula(State(app): State<Arc<App>>) -> Json<Value> {
    let items: Vec<Value> = app
        .catalog
        .all_latest()
        .iter()
        .map(|p| json!({"id": p.id, "version": p.version, "title": p.title, "locales": p.locales}))
        .collect();
    Json(json!({ "curricula": items }))
}

/// Reads the strict body: only `curriculumId`, `locale`, `timeZone`, all optional strings.
fn parse_start(body: &[u8]) -> Result<StartSession, AppError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(StartSession::default());
    }
    let value: Value = serde_json::from_slice(body).map_err(|_| AppError::ValidationFailed { field: "body".into() })?;
    let obj = value.as_object().ok_or(AppError::ValidationFailed { field: "body".into() })?;
    const KNOWN: [&str; 3] = ["curriculumId", "locale", "timeZone"];
    let unknown = obj.keys().filter(|k| !KNOWN.contains(&k.as_str())).count();
    if unknown > 0 {
        return Err(AppError::UnknownField { count: unknown });
    }
    let text = |field: &str| -> Result<Option<String>, AppError> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 64 => Ok(Some(s.clone())),
            Some(_) => Err(AppError::ValidationFailed { field: field.to_owned() }),
        }
    };
    Ok(StartSession { curriculum_id: text("curriculumId")?, locale: text("locale")?, time_zone: text("timeZone")? })
}

pub(super) async fn start_session(
    State(app): State<Arc<App>>,
    Bearer(principal): Bearer,
    body: axum::body::Bytes,
) -> Result<Response, AppError> {
    let request = parse_start(&body)?;
    let started = app.start_session(&principal, request).await?;
    let loc = started.locale.as_str();
    let body = json!({
        "expiresAt": started.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "curriculum": {"id": started.pack.id, "title": started.pack.text(&started.pack.title, loc)},
        "communicationLocale": started.locale,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
