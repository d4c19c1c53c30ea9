//! Bearer authentication for HTTP handlers: a missing or unknown token is a 401 with
//! `WWW-Authenticate`, before any handler logic runs.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::app::identity::Principal;
use crate::app::App;
use crate::error::AppError;

/// The authenticated caller.
pub(crate) struct Bearer(pub Principal);

impl FromRequestParts<Arc<App>> for Bearer {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).ok_or(AppError::Unauthorized)?;
        let token = crate::app::identity::bearer_of(header).ok_or(AppError::Unauthorized)?;
        Ok(Self(app.authenticate(token).await?))
    }
}
