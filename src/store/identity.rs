//! The identity lifecycle in the store: listing and revoking learners, development tokens and
//! OAuth clients, server-side web sessions, and the operator-action audit. Revocation keeps the
//! rows (journeys and the audit keep their references) and stamps `revoked_ms`.

use sqlx::Row;

use super::{on_pool, on_writer, Store, StoreError};

/// A learner as the operator sees it (never a token).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LearnerRow {
    pub learner_id: String,
    pub name: String,
    /// Created, epoch ms.
    pub created_ms: i64,
    /// Revoked, epoch ms.
    pub revoked_ms: Option<i64>,
    /// Development tokens not revoked.
    pub active_tokens: i64,
}

/// A development token as the operator sees it: its id is the start of its hash.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRow {
    /// The first 16 hex digits of the token's hash.
    pub token_id: String,
    pub role: String,
    /// The learner, for learner tokens.
    pub learner_id: Option<String>,
    /// Created, epoch ms.
    pub created_ms: i64,
    /// Revoked, epoch ms.
    pub revoked_ms: Option<i64>,
}

/// A registered OAuth client as the operator sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientRow {
    pub client_id: String,
    /// Its self-chosen name.
    pub client_name: String,
    /// Registered redirect URIs (JSON array).
    pub redirect_uris: serde_json::Value,
    /// Registered, epoch ms.
    pub created_ms: i64,
    /// Revoked, epoch ms.
    pub revoked_ms: Option<i64>,
    /// Refresh tokens still usable.
    pub active_refresh_tokens: i64,
}

/// One recorded operator action.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorAction {
    /// When, epoch ms.
    pub at_ms: i64,
    /// Who: `cli`, or `operator:<token id>`.
    pub actor: String,
    /// What, e.g. `learner.revoke`.
    pub action: String,
    /// On what (an id).
    pub target: String,
}

/// Length of a token id: enough to be unique among any realistic number of tokens, too short
/// to be mistaken for a token.
pub(crate) const TOKEN_ID_LEN: usize = 16;

impl Store {
    /// Every learner, oldest first.
    pub async fn learners(&self) -> Result<Vec<LearnerRow>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query(
                "SELECT l.learner_id, l.name, l.created_ms, l.revoked_ms, \
                 (SELECT COUNT(*) FROM tokens t WHERE t.learner_id = l.learner_id AND t.revoked_ms IS NULL) AS active_tokens \
                 FROM learners l ORDER BY l.created_ms, l.learner_id",
            )
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(LearnerRow {
                        learner_id: r.try_get("learner_id")?,
                        name: r.try_get("name")?,
                        created_ms: r.try_get("created_ms")?,
                        revoked_ms: r.try_get("revoked_ms")?,
                        active_tokens: r.try_get("active_tokens")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// Revokes a learner with its tokens, refresh tokens and web sessions, in one transaction.
    /// Returns false when there is no such learner (or it was revoked already).
    pub async fn revoke_learner(&self, learner_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let n = sqlx::query("UPDATE learners SET revoked_ms = $2 WHERE learner_id = $1 AND revoked_ms IS NULL")
                .bind(learner_id).bind(now_ms).execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                return Ok(false);
            }
            sqlx::query("UPDATE tokens SET revoked_ms = $2 WHERE learner_id = $1 AND revoked_ms IS NULL")
                .bind(learner_id).bind(now_ms).execute(&mut *tx).await?;
            sqlx::query("UPDATE oauth_refresh_tokens SET revoked_ms = $2 WHERE learner_id = $1 AND revoked_ms IS NULL")
                .bind(learner_id).bind(now_ms).execute(&mut *tx).await?;
            sqlx::query("UPDATE web_sessions SET ended_ms = $2 WHERE learner_id = $1 AND ended_ms IS NULL")
                .bind(learner_id).bind(now_ms).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Whether a learner exists and is not revoked.
    pub async fn learner_active(&self, learner_id: &str) -> Result<bool, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT 1 FROM learners WHERE learner_id = $1 AND revoked_ms IS NULL")
                .bind(learner_id).fetch_optional(pool).await?;
            Ok(row.is_some())
        })
    }

    /// Every development token (never the token itself), oldest first.
    pub async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query("SELECT token_hash, role, learner_id, created_ms, revoked_ms FROM tokens ORDER BY created_ms, token_hash")
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|r| {
                    let hash: String = r.try_get("token_hash")?;
                    Ok(TokenRow {
                        token_id: hash.chars().take(TOKEN_ID_LEN).collect(),
                        role: r.try_get("role")?,
                        learner_id: r.try_get("learner_id")?,
                        created_ms: r.try_get("created_ms")?,
                        revoked_ms: r.try_get("revoked_ms")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// Revokes the token whose hash starts with `token_id` (exactly [`TOKEN_ID_LEN`] hex digits).
    /// Returns the full hash of the revoked token, or None when none (still active) matches.
    pub async fn revoke_token(&self, token_id: &str, now_ms: i64) -> Result<Option<String>, StoreError> {
        let pattern = format!("{token_id}%");
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let hashes: Vec<String> = sqlx::query_scalar("SELECT token_hash FROM tokens WHERE token_hash LIKE $1 AND revoked_ms IS NULL")
                .bind(&pattern).fetch_all(&mut *tx).await?;
            let [hash] = hashes.as_slice() else { return Ok(None) };
            sqlx::query("UPDATE tokens SET revoked_ms = $2 WHERE token_hash = $1").bind(hash).bind(now_ms).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Some(hash.clone()))
        })
    }

    /// Every registered OAuth client, oldest first.
    pub async fn oauth_clients(&self) -> Result<Vec<ClientRow>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query(
                "SELECT c.client_id, c.client_name, c.redirect_uris, c.created_ms, c.revoked_ms, \
                 (SELECT COUNT(*) FROM oauth_refresh_tokens r WHERE r.client_id = c.client_id AND r.revoked_ms IS NULL AND r.used_ms IS NULL) AS active \
                 FROM oauth_clients c ORDER BY c.created_ms, c.client_id",
            )
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| {
                    let uris: String = r.try_get("redirect_uris")?;
                    Ok(ClientRow {
                        client_id: r.try_get("client_id")?,
                        client_name: r.try_get("client_name")?,
                        redirect_uris: serde_json::from_str(&uris).unwrap_or(serde_json::Value::Null),
                        created_ms: r.try_get("created_ms")?,
                        revoked_ms: r.try_get("revoked_ms")?,
                        active_refresh_tokens: r.try_get("active")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// Revokes an OAuth client and every refresh token issued to it, in one transaction.
    /// Returns false when there is no such (active) client.
    pub async fn revoke_oauth_client(&self, client_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let n = sqlx::query("UPDATE oauth_clients SET revoked_ms = $2 WHERE client_id = $1 AND revoked_ms IS NULL")
                .bind(client_id).bind(now_ms).execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                return Ok(false);
            }
            sqlx::query("UPDATE oauth_refresh_tokens SET revoked_ms = $2 WHERE client_id = $1 AND revoked_ms IS NULL")
                .bind(client_id).bind(now_ms).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Deletes registered clients created before `before_ms` that never completed an
    /// authorization (no code, no refresh token was ever issued to them). Returns how many.
    pub async fn delete_unused_oauth_clients(&self, before_ms: i64) -> Result<u64, StoreError> {
        on_writer!(self, pool => {
            let n = sqlx::query(
                "DELETE FROM oauth_clients WHERE created_ms < $1 \
                 AND NOT EXISTS (SELECT 1 FROM oauth_codes c WHERE c.client_id = oauth_clients.client_id) \
                 AND NOT EXISTS (SELECT 1 FROM oauth_refresh_tokens r WHERE r.client_id = oauth_clients.client_id)",
            )
            .bind(before_ms)
            .execute(pool)
            .await?
            .rows_affected();
            Ok(n)
        })
    }

    /// Whether an OAuth client is registered and not revoked.
    pub async fn oauth_client_active(&self, client_id: &str) -> Result<bool, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT 1 FROM oauth_clients WHERE client_id = $1 AND revoked_ms IS NULL")
                .bind(client_id).fetch_optional(pool).await?;
            Ok(row.is_some())
        })
    }

    /// Records a web sign-in.
    pub async fn insert_web_session(
        &self,
        session_id: &str,
        role: &str,
        learner_id: Option<&str>,
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO web_sessions (session_id, role, learner_id, created_ms, expires_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(session_id).bind(role).bind(learner_id).bind(now_ms).bind(expires_ms)
                .execute(pool).await?;
            Ok(())
        })
    }

    /// Whether a web session is open: not ended, not expired, its learner not revoked.
    pub async fn web_session_open(&self, session_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT 1 FROM web_sessions w LEFT JOIN learners l ON l.learner_id = w.learner_id \
                 WHERE w.session_id = $1 AND w.ended_ms IS NULL AND w.expires_ms > $2 AND l.revoked_ms IS NULL",
            )
            .bind(session_id).bind(now_ms).fetch_optional(pool).await?;
            Ok(row.is_some())
        })
    }

    /// Ends a web session (sign-out).
    pub async fn end_web_session(&self, session_id: &str, now_ms: i64) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("UPDATE web_sessions SET ended_ms = $2 WHERE session_id = $1 AND ended_ms IS NULL")
                .bind(session_id).bind(now_ms).execute(pool).await?;
            Ok(())
        })
    }

    /// Records an operator action.
    pub async fn record_operator_action(&self, action: &OperatorAction) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO operator_actions (action_id, at_ms, actor, action, target) VALUES ($1, $2, $3, $4, $5)")
                .bind(uuid::Uuid::new_v4().to_string()).bind(action.at_ms).bind(&action.actor).bind(&action.action).bind(&action.target)
                .execute(pool).await?;
            Ok(())
        })
    }

    /// The newest operator actions, newest first.
    pub async fn operator_actions(&self, limit: i64) -> Result<Vec<OperatorAction>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query("SELECT at_ms, actor, action, target FROM operator_actions ORDER BY at_ms DESC, action_id LIMIT $1")
                .bind(limit).fetch_all(pool).await?;
            rows.iter()
                .map(|r| Ok(OperatorAction { at_ms: r.try_get("at_ms")?, actor: r.try_get("actor")?, action: r.try_get("action")?, target: r.try_get("target")? }))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }
}

/// A learner's learning session row.
#[derive(Clone, Debug)]
pub struct SessionRow {
    /// Opaque session id.
    pub session_id: String,
    pub learner_id: String,
    pub journey_id: String,
    /// IANA time zone.
    pub time_zone: String,
    /// Start, epoch milliseconds.
    pub started_ms: i64,
}

fn session_row<R: Row>(r: &R) -> Result<SessionRow, sqlx::Error>
where
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    Ok(SessionRow {
        session_id: r.try_get("session_id")?,
        learner_id: r.try_get("learner_id")?,
        journey_id: r.try_get("journey_id")?,
        time_zone: r.try_get("time_zone")?,
        started_ms: r.try_get("started_ms")?,
    })
}

impl Store {
    /// Creates a learner and returns its id.
    pub async fn create_learner(&self, learner_id: &str, name: &str, now_ms: i64) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO learners (learner_id, name, created_ms) VALUES ($1, $2, $3)")
                .bind(learner_id)
                .bind(name)
                .bind(now_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Stores a bearer token's hash with its role.
    pub async fn insert_token(&self, token_hash: &str, role: &str, learner_id: Option<&str>, now_ms: i64) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO tokens (token_hash, role, learner_id, created_ms) VALUES ($1, $2, $3, $4)")
                .bind(token_hash)
                .bind(role)
                .bind(learner_id)
                .bind(now_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The role and learner of a token hash.
    pub async fn token(&self, token_hash: &str) -> Result<Option<(String, Option<String>)>, StoreError> {
        on_pool!(self, pool => {
            // A revoked token, or any token of a revoked learner, is unknown.
            let row = sqlx::query(
                "SELECT t.role, t.learner_id FROM tokens t LEFT JOIN learners l ON l.learner_id = t.learner_id \
                 WHERE t.token_hash = $1 AND t.revoked_ms IS NULL AND l.revoked_ms IS NULL",
            )
            .bind(token_hash)
            .fetch_optional(pool)
            .await?;
            match row {
                None => Ok(None),
                Some(r) => Ok(Some((r.try_get("role")?, r.try_get("learner_id")?))),
            }
        })
    }

    /// The learner's journey on a curriculum, created with `new_id` if there is none yet.
    /// Returns the id and whether it was created now.
    pub async fn journey_for(
        &self,
        learner_id: &str,
        curriculum_id: &str,
        new_id: &str,
        now_ms: i64,
    ) -> Result<(String, bool), StoreError> {
        on_writer!(self, pool => {
            let inserted = sqlx::query(
                "INSERT INTO journeys (journey_id, learner_id, curriculum_id, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (learner_id, curriculum_id) DO NOTHING",
            )
            .bind(new_id)
            .bind(learner_id)
            .bind(curriculum_id)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected();
            let row = sqlx::query("SELECT journey_id FROM journeys WHERE learner_id = $1 AND curriculum_id = $2")
                .bind(learner_id)
                .bind(curriculum_id)
                .fetch_one(pool)
                .await?;
            Ok((row.try_get("journey_id")?, inserted == 1))
        })
    }

    /// Records a learning session.
    pub async fn insert_session(&self, s: &SessionRow) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO learning_sessions (session_id, learner_id, journey_id, time_zone, started_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(&s.session_id)
                .bind(&s.learner_id)
                .bind(&s.journey_id)
                .bind(&s.time_zone)
                .bind(s.started_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The learner's most recently started session.
    pub async fn latest_session(&self, learner_id: &str) -> Result<Option<SessionRow>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT session_id, learner_id, journey_id, time_zone, started_ms FROM learning_sessions WHERE learner_id = $1 ORDER BY started_ms DESC, session_id DESC LIMIT 1",
            )
            .bind(learner_id)
            .fetch_optional(pool)
            .await?;
            row.map(|r| session_row(&r)).transpose().map_err(StoreError::from)
        })
    }

    /// A session by id.
    pub async fn session(&self, session_id: &str) -> Result<Option<SessionRow>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT session_id, learner_id, journey_id, time_zone, started_ms FROM learning_sessions WHERE session_id = $1")
                .bind(session_id)
                .fetch_optional(pool)
                .await?;
            row.map(|r| session_row(&r)).transpose().map_err(StoreError::from)
        })
    }
}
