//! Learning sessions (docs/domain.md): created beside the journey, never in its stream. Starting one
//! creates the learner's journey on first use and starts it; expiry is computed, not written.

use std::sync::Arc;

use aggregates::curriculum::Pack;
use aggregates::learning_journey::JourneyCommand;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use uuid::Uuid;

use super::identity::{Principal, Role};
use super::journeys::{Actor, CommandRequest, Loaded};
use super::tokens::SessionClaims;
use super::App;
use crate::error::AppError;
use crate::store::SessionRow;

/// What a learner asks for when starting a session (already shape-checked).
#[derive(Clone, Debug, Default)]
pub struct StartSession {
    /// Curriculum; may be omitted when exactly one is installed.
    pub curriculum_id: Option<String>,
    /// Locale of a new journey.
    pub locale: Option<String>,
    /// IANA time zone (default UTC).
    pub time_zone: Option<String>,
}

/// A started session, as shown to the learner (never a learner id).
#[derive(Clone, Debug)]
pub struct SessionStarted {
    /// The opaque session id (for the gate; not shown by the web API).
    pub session_id: String,
    /// When it expires if the learner stays idle.
    pub expires_at: DateTime<Utc>,
    pub pack: Arc<Pack>,
    /// The journey's communication locale.
    pub locale: String,
    pub journey_id: String,
}

/// A resolved, unexpired session with its journey loaded.
#[derive(Clone, Debug)]
pub struct ActiveSession {
    pub row: SessionRow,
    /// The learner's time zone.
    pub tz: Tz,
    /// The journey's pack.
    pub pack: Arc<Pack>,
    /// The journey as loaded now.
    pub loaded: Loaded,
    /// Whether `loaded` was read against the log; `false` when the call took this process's
    /// copy unread ([`App::cached_copy`]).
    pub validated: bool,
}

impl App {
    /// Starts a learning session for a learner.
    pub async fn start_session(&self, principal: &Principal, request: StartSession) -> Result<SessionStarted, AppError> {
        let learner_id = match (principal.role, &principal.learner_id) {
            (Role::Learner, Some(id)) => id.clone(),
            _ => return Err(AppError::Forbidden),
        };
        let pack = match &request.curriculum_id {
            Some(id) => self.catalog.latest(id).ok_or(AppError::ValidationFailed { field: "curriculumId".into() })?,
            None => match self.catalog.all_latest().as_slice() {
                [only] => only.clone(),
                _ => self
                    .catalog
                    .latest(&self.settings.default_curriculum)
                    .ok_or(AppError::ValidationFailed { field: "curriculumId".into() })?,
            },
        };
        let tz_name = request.time_zone.clone().unwrap_or_else(|| "UTC".to_owned());
        tz_name.parse::<Tz>().map_err(|_| AppError::ValidationFailed { field: "timeZone".into() })?;
        if let Some(locale) = &request.locale {
            if !pack.locales.contains(locale) {
                return Err(AppError::ValidationFailed { field: "locale".into() });
            }
        }
        let now = self.clock.now();
        let (journey_id, _) = self.store.journey_for(&learner_id, &pack.id, &Uuid::new_v4().to_string(), now.timestamp_millis()).await?;

        let mut loaded = self.load_journey(&journey_id).await?;
        if loaded.state.info.is_none() {
            let locale = request.locale.clone().unwrap_or_else(|| {
                if pack.locales.contains(&self.settings.default_locale) {
                    self.settings.default_locale.clone()
                } else {
                    pack.locales[0].clone()
                }
            });
            let start = CommandRequest {
                journey_id: journey_id.clone(),
                command: JourneyCommand::StartJourney { locale },
                expected_version: Some(0),
                identity: None,
                tool: "start_learning_session",
                actor: Actor::Learner,
                call: None,
            };
            match self.execute(start, Some(pack.clone())).await {
                // A concurrent first start won the race: the journey is started either way.
                Ok(_) | Err(AppError::StateConflict { .. }) | Err(AppError::NotAllowed) => {}
                Err(e) => return Err(e),
            }
            loaded = self.load_journey(&journey_id).await?;
        }
        let journey_pack = self.pack_of(&loaded.state)?;

        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|_| AppError::Internal)?;
        let row = SessionRow {
            session_id: format!("sls_{}", URL_SAFE_NO_PAD.encode(bytes)),
            learner_id,
            journey_id: journey_id.clone(),
            time_zone: tz_name,
            started_ms: now.timestamp_millis(),
        };
        self.store.insert_session(&row).await?;
        Ok(SessionStarted {
            expires_at: self.session_expiry(&row, loaded.state.last_event_at),
            session_id: row.session_id,
            pack: journey_pack,
            locale: loaded.state.locale.clone(),
            journey_id,
        })
    }

    /// The session gate (docs/tool-contract.md, session gate): the learner's current started, unexpired session.
    pub async fn gate(&self, principal: &Principal) -> Result<ActiveSession, AppError> {
        let learner_id = principal.learner_id.as_deref().ok_or(AppError::Forbidden)?;
        let row = self.store.latest_session(learner_id).await?.ok_or(AppError::SessionRequired)?;
        self.active(row, false).await
    }

    /// Resolves a `learningSessionId` for its owner: another learner's id is invalid and
    /// reveals nothing; an expired one is expired. `unread`: the call may take this process's
    /// copy of the journey without reading the log — a write, whose commit proves the copy
    /// current (ADR 0009), or a read whose audit row is written only against it (ADR 0011).
    pub async fn resolve_session(&self, principal: &Principal, token: &str, unread: bool) -> Result<ActiveSession, AppError> {
        let digest = super::identity::hash_token(token);
        let claims = match self.opened_sessions.get(&digest) {
            Some(claims) => claims,
            None => {
                let claims = self.keys.open_session(token)?;
                self.opened_sessions.put(digest, claims.clone());
                claims
            }
        };
        let row = match self.sessions.get(&claims.sid) {
            Some(row) => row,
            None => {
                let row = self.store.session(&claims.sid).await?.ok_or(AppError::SessionInvalid)?;
                self.sessions.put(claims.sid.clone(), row.clone());
                row
            }
        };
        if principal.learner_id.as_deref() != Some(row.learner_id.as_str()) {
            return Err(AppError::SessionInvalid);
        }
        self.active(row, unread).await
    }

    async fn active(&self, row: SessionRow, unread: bool) -> Result<ActiveSession, AppError> {
        let (mut loaded, mut validated) = match unread.then(|| self.cached_copy(&row.journey_id)).flatten() {
            Some(cached) => (cached, false),
            None => (self.load_journey(&row.journey_id).await?, true),
        };
        let now = self.clock.now();
        // An unread state can only be older than the log, so its last event is no later and the
        // session it computes expires no later: only "expired" needs the log's word.
        if !validated && now >= self.session_expiry(&row, loaded.state.last_event_at) {
            loaded = self.load_journey(&row.journey_id).await?;
            validated = true;
        }
        let expires_at = self.session_expiry(&row, loaded.state.last_event_at);
        if now >= expires_at {
            return Err(AppError::SessionExpired);
        }
        let tz = row.time_zone.parse::<Tz>().unwrap_or(chrono_tz::UTC);
        let pack = self.pack_of(&loaded.state)?;
        Ok(ActiveSession { row, tz, pack, loaded, validated })
    }

    /// A freshly sealed `learningSessionId` for a session: only the gate call hands one out
    /// (docs/tool-contract.md), so it is sealed there and not on every call that resolves the
    /// session (that was ~3 % of the server's CPU under load).
    pub fn session_token(&self, row: &SessionRow) -> String {
        let started = DateTime::<Utc>::from_timestamp_millis(row.started_ms).unwrap_or_else(|| self.clock.now());
        self.keys.seal_session(&SessionClaims { sid: row.session_id.clone(), exp: (started + self.settings.session_absolute).timestamp() })
    }

    /// When a session expires: idle time counts from the later of its start and the journey's
    /// last event, capped by the absolute lifetime.
    pub fn session_expiry(&self, row: &SessionRow, last_event_at: Option<DateTime<Utc>>) -> DateTime<Utc> {
        let started = DateTime::<Utc>::from_timestamp_millis(row.started_ms).unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
        let active = last_event_at.map_or(started, |t| t.max(started));
        (active + self.settings.session_idle).min(started + self.settings.session_absolute)
    }
}
