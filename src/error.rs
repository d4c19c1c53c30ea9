//! `AppError`: every domain and infrastructure failure mapped once to a stable code
//! (docs/tool-contract.md, errors), an outcome (`error` or `rejected`), an HTTP status and a localized finding. HTTP and
//! MCP both render from here; internal details are logged once and never shown.

use aggregates::learning_journey::JourneyError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::store::StoreError;

/// Why a request failed. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No or an unknown bearer token.
    #[error("unauthorized")]
    Unauthorized,
    /// The bearer's role may not do this.
    #[error("forbidden")]
    Forbidden,
    /// A valid access token without the scope this needs.
    #[error("insufficient scope")]
    InsufficientScope,
    /// No learning session was given where one is needed.
    #[error("session required")]
    SessionRequired,
    /// The learning session has expired.
    #[error("session expired")]
    SessionExpired,
    /// The learning session is unknown or belongs to someone else.
    #[error("session invalid")]
    SessionInvalid,
    /// Keys that are not part of the input; only counted, never named.
    #[error("{count} unknown fields")]
    UnknownField { count: usize },
    /// A field that would carry chat free text.
    #[error("forbidden field")]
    ForbiddenField,
    /// A known field with a wrong type, a missing required field or a value out of range.
    #[error("validation failed: {field}")]
    ValidationFailed {
        /// The known field's name.
        field: String,
    },
    /// The number of assessments or scores does not match.
    #[error("incomplete assessments")]
    IncompleteAssessments { expected: usize, got: usize },
    /// The request id was used before with another input.
    #[error("idempotency key reused")]
    IdempotencyKeyReused,
    /// A token that does not decode.
    #[error("capability invalid")]
    CapabilityInvalid,
    /// A token past its expiry or naming a workflow that no longer exists.
    #[error("capability expired")]
    CapabilityExpired,
    /// A finished workflow step.
    #[error("capability used")]
    CapabilityUsed,
    /// A stale, altered or invented option.
    #[error("option invalid")]
    OptionInvalid,
    /// `expectedStateVersion` is not the current version.
    #[error("state conflict")]
    StateConflict {
        /// The current version.
        current: u64,
    },
    /// The state allows another action.
    #[error("not allowed")]
    NotAllowed,
    /// The exam is not released.
    #[error("not eligible")]
    NotEligible {
        /// Goals of the scope not yet mastered.
        missing_goals: usize,
    },
    /// Nothing found (curriculum, journey).
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for (a known name, never input).
        what: &'static str,
    },
    /// The store cannot be reached; an exact retry is safe.
    #[error("store unavailable")]
    StoreUnavailable,
    /// A defect; logged with detail, shown without.
    #[error("internal error")]
    Internal,
}

impl AppError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::InsufficientScope => "INSUFFICIENT_SCOPE",
            Self::SessionRequired => "SESSION_REQUIRED",
            Self::SessionExpired => "SESSION_EXPIRED",
            Self::SessionInvalid => "SESSION_INVALID",
            Self::UnknownField { .. } => "UNKNOWN_FIELD",
            Self::ForbiddenField => "FORBIDDEN_FIELD",
            Self::ValidationFailed { .. } => "VALIDATION_FAILED",
            Self::IncompleteAssessments { .. } => "INCOMPLETE_ASSESSMENTS",
            Self::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Self::CapabilityInvalid => "CAPABILITY_INVALID",
            Self::CapabilityExpired => "CAPABILITY_EXPIRED",
            Self::CapabilityUsed => "CAPABILITY_USED",
            Self::OptionInvalid => "OPTION_INVALID",
            Self::StateConflict { .. } => "STATE_CONFLICT",
            Self::NotAllowed => "NOT_ALLOWED",
            Self::NotEligible { .. } => "NOT_ELIGIBLE",
            Self::NotFound { .. } => "NOT_FOUND",
            Self::StoreUnavailable => "STORE_UNAVAILABLE",
            Self::Internal => "INTERNAL",
        }
    }

    /// `rejected` when the backend judged the call wrong for the state, `error` when it could not run.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::StateConflict { .. } | Self::OptionInvalid | Self::CapabilityUsed | Self::NotAllowed | Self::NotEligible { .. } => {
                "rejected"
            }
            _ => "error",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::InsufficientScope => StatusCode::FORBIDDEN,
            Self::SessionRequired | Self::SessionExpired | Self::SessionInvalid => StatusCode::FORBIDDEN,
            Self::UnknownField { .. } | Self::ForbiddenField | Self::ValidationFailed { .. } | Self::IncompleteAssessments { .. } => {
                StatusCode::BAD_REQUEST
            }
            Self::CapabilityInvalid | Self::CapabilityExpired => StatusCode::BAD_REQUEST,
            Self::IdempotencyKeyReused | Self::StateConflict { .. } | Self::CapabilityUsed | Self::OptionInvalid => StatusCode::CONFLICT,
            Self::NotAllowed | Self::NotEligible { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Counts and labels that back the finding (never ids, never echoed input).
    pub fn evidence(&self) -> Option<Value> {
        match self {
            Self::UnknownField { count } => Some(json!({ "unknownFields": count })),
            Self::ValidationFailed { field } => Some(json!({ "field": field })),
            Self::IncompleteAssessments { expected, got } => Some(json!({ "expected": expected, "received": got })),
            Self::StateConflict { current } => Some(json!({ "currentStateVersion": current })),
            Self::NotEligible { missing_goals } => Some(json!({ "missingGoals": missing_goals })),
            _ => None,
        }
    }

    /// A short factual finding in the learner's language.
    pub fn finding(&self, locale: &str) -> String {
        let lang = projections::text::Lang::of(locale);
        let s = |d: &str, e: &str| if lang == projections::text::Lang::De { d.to_owned() } else { e.to_owned() };
        match self {
            Self::Unauthorized => s("Anmeldung fehlt oder ist ungültig.", "Authentication is missing or invalid."),
            Self::Forbidden => s("Diese Rolle darf das nicht.", "This role may not do that."),
            Self::InsufficientScope => s("Dem Zugriffstoken fehlt die nötige Berechtigung.", "The access token lacks the needed scope."),
            Self::SessionRequired => s("Es gibt keine gestartete Lernsitzung.", "There is no started learning session."),
            Self::SessionExpired => s("Die Lernsitzung ist abgelaufen.", "The learning session has expired."),
            Self::SessionInvalid => s("Die Lernsitzung ist ungültig.", "The learning session is invalid."),
            Self::UnknownField { .. } => s("Die Eingabe enthält unbekannte Felder.", "The input contains unknown fields."),
            Self::ForbiddenField => s("Die Eingabe enthält ein nicht erlaubtes Feld.", "The input contains a forbidden field."),
            Self::ValidationFailed { .. } => s("Ein Feld hat einen ungültigen Wert.", "A field has an invalid value."),
            Self::IncompleteAssessments { .. } => s("Die Anzahl der Bewertungen passt nicht.", "The number of assessments does not match."),
            Self::IdempotencyKeyReused => {
                s("Diese Anfrage-ID wurde schon für eine andere Eingabe benutzt.", "This request id was already used for another input.")
            }
            Self::CapabilityInvalid => s("Das Arbeitszeichen ist ungültig.", "The workflow token is invalid."),
            Self::CapabilityExpired => s("Das Arbeitszeichen ist abgelaufen.", "The workflow token has expired."),
            Self::CapabilityUsed => s("Dieser Schritt ist bereits erledigt.", "This step is already done."),
            Self::OptionInvalid => s("Diese Option ist nicht mehr aktuell.", "This option is no longer current."),
            Self::StateConflict { .. } => {
                s("Der Lernstand hat sich inzwischen geändert.", "The learning state has changed in the meantime.")
            }
            Self::NotAllowed => s("Der aktuelle Stand erlaubt eine andere Aktion.", "The current state allows another action."),
            Self::NotEligible { .. } => s("Die Prüfung ist noch nicht freigegeben.", "The exam is not released yet."),
            Self::NotFound { .. } => s("Nicht gefunden.", "Not found."),
            Self::StoreUnavailable => s("Der Speicher ist gerade nicht erreichbar.", "Storage is unavailable right now."),
            Self::Internal => s("Ein interner Fehler ist aufgetreten.", "An internal error occurred."),
        }
    }

    /// The `structuredContent` of an error or rejection (docs/tool-contract.md, wire shapes), without recovery.
    pub fn body(&self, locale: &str) -> Value {
        let mut error = json!({ "code": self.code(), "finding": self.finding(locale) });
        if let Some(e) = self.evidence() {
            error["evidence"] = e;
        }
        json!({ "outcome": self.outcome(), "error": error })
    }
}

impl From<JourneyError> for AppError {
    fn from(err: JourneyError) -> Self {
        match err {
            JourneyError::NotStarted => Self::NotFound { what: "journey" },
            JourneyError::AlreadyStarted | JourneyError::NotAllowed | JourneyError::NothingDue => Self::NotAllowed,
            JourneyError::UnsupportedLocale => Self::ValidationFailed { field: "locale".into() },
            JourneyError::OptionInvalid => Self::OptionInvalid,
            JourneyError::NotEligible { missing_goals } => Self::NotEligible { missing_goals },
            JourneyError::IncompleteAssessments { expected, got } => Self::IncompleteAssessments { expected, got },
            JourneyError::PointsOutOfRange { position } => Self::ValidationFailed { field: format!("scores[{}].points", position - 1) },
            JourneyError::CapabilityUsed => Self::CapabilityUsed,
            JourneyError::CapabilityExpired => Self::CapabilityExpired,
            JourneyError::Scheduler => {
                tracing::error!("recall scheduler failed");
                Self::Internal
            }
        }
    }
}

impl From<StoreError> for AppError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Unavailable(detail) => {
                tracing::warn!(%detail, "store unavailable");
                Self::StoreUnavailable
            }
            StoreError::Conflict => Self::StateConflict { current: 0 },
            StoreError::Rejected(detail) => {
                tracing::info!(%detail, "the database refused an input value");
                Self::ValidationFailed { field: "input".into() }
            }
            StoreError::Corrupt(detail) | StoreError::Database(detail) => {
                tracing::error!(%detail, "store error");
                Self::Internal
            }
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, axum::Json(self.body("en"))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            if let Ok(v) = axum::http::HeaderValue::from_str("Bearer realm=\"skillpilot\"") {
                response.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, v);
            }
        }
        response
    }
}
