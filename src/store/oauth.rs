//! Storage of the built-in authorization server: clients, single-use authorization codes and
//! rotating refresh tokens. Codes and tokens arrive here already hashed; "single use" is one
//! conditional `UPDATE`, so two concurrent redemptions cannot both succeed.

use sqlx::Row;

use super::{on_pool, on_writer, Store, StoreError};

/// A registered client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    /// Display name for the consent page.
    pub client_name: String,
    /// Registered redirect URIs, matched exactly.
    pub redirect_uris: Vec<String>,
}

/// What an authorization code was issued for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeGrant {
    pub client_id: String,
    /// The learner who consented.
    pub learner_id: String,
    /// The redirect URI of the authorization request.
    pub redirect_uri: String,
    /// PKCE S256 challenge.
    pub code_challenge: String,
    /// Granted scope (space-separated).
    pub scope: String,
    /// The resource (audience) the tokens are for.
    pub resource: String,
    /// Expiry, epoch milliseconds.
    pub expires_ms: i64,
}

/// A refresh token's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefreshGrant {
    /// The rotation family (all tokens descending from one authorization code).
    pub family_id: String,
    pub client_id: String,
    pub learner_id: String,
    pub scope: String,
    pub resource: String,
    /// Expiry, epoch milliseconds.
    pub expires_ms: i64,
}

impl Store {
    /// Registers a client.
    pub async fn insert_oauth_client(&self, client: &OAuthClient, now_ms: i64) -> Result<(), StoreError> {
        let uris = serde_json::to_string(&client.redirect_uris).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO oauth_clients (client_id, client_name, redirect_uris, created_ms) VALUES ($1, $2, $3, $4)")
                .bind(&client.client_id)
                .bind(&client.client_name)
                .bind(uris)
                .bind(now_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Stores or refreshes a client known by its metadata document (its id is the document's URL).
    pub async fn upsert_oauth_client(&self, client: &OAuthClient, now_ms: i64) -> Result<(), StoreError> {
        let uris = serde_json::to_string(&client.redirect_uris).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        on_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO oauth_clients (client_id, client_name, redirect_uris, created_ms) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (client_id) DO UPDATE SET client_name = excluded.client_name, redirect_uris = excluded.redirect_uris",
            )
            .bind(&client.client_id)
            .bind(&client.client_name)
            .bind(uris)
            .bind(now_ms)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// A registered client.
    pub async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT client_id, client_name, redirect_uris FROM oauth_clients WHERE client_id = $1 AND revoked_ms IS NULL")
                .bind(client_id)
                .fetch_optional(pool)
                .await?;
            let Some(row) = row else { return Ok(None) };
            let uris: String = row.try_get("redirect_uris")?;
            Ok(Some(OAuthClient {
                client_id: row.try_get("client_id")?,
                client_name: row.try_get("client_name")?,
                redirect_uris: serde_json::from_str(&uris).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            }))
        })
    }

    /// Stores an authorization code (by hash).
    pub async fn insert_oauth_code(&self, code_hash: &str, grant: &CodeGrant) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO oauth_codes (code_hash, client_id, learner_id, redirect_uri, code_challenge, scope, resource, expires_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(code_hash)
            .bind(&grant.client_id)
            .bind(&grant.learner_id)
            .bind(&grant.redirect_uri)
            .bind(&grant.code_challenge)
            .bind(&grant.scope)
            .bind(&grant.resource)
            .bind(grant.expires_ms)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// An authorization code's grant and whether it was used already.
    pub async fn oauth_code(&self, code_hash: &str) -> Result<Option<(CodeGrant, bool)>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT client_id, learner_id, redirect_uri, code_challenge, scope, resource, expires_ms, used_ms FROM oauth_codes WHERE code_hash = $1",
            )
            .bind(code_hash)
            .fetch_optional(pool)
            .await?;
            let Some(row) = row else { return Ok(None) };
            let used: Option<i64> = row.try_get("used_ms")?;
            Ok(Some((
                CodeGrant {
                    client_id: row.try_get("client_id")?,
                    learner_id: row.try_get("learner_id")?,
                    redirect_uri: row.try_get("redirect_uri")?,
                    code_challenge: row.try_get("code_challenge")?,
                    scope: row.try_get("scope")?,
                    resource: row.try_get("resource")?,
                    expires_ms: row.try_get("expires_ms")?,
                },
                used.is_some(),
            )))
        })
    }

    /// Marks a code used; false when another redemption was first.
    pub async fn claim_oauth_code(&self, code_hash: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.spend_once("UPDATE oauth_codes SET used_ms = $2 WHERE code_hash = $1 AND used_ms IS NULL", code_hash, now_ms).await
    }

    /// Runs a conditional "mark used" update; true when this call was the one that changed it.
    async fn spend_once(&self, sql: &str, hash: &str, now_ms: i64) -> Result<bool, StoreError> {
        on_writer!(self, pool => {
            Ok(sqlx::query(sql).bind(hash).bind(now_ms).execute(pool).await?.rows_affected() == 1)
        })
    }

    /// Stores a refresh token (by hash).
    pub async fn insert_refresh_token(&self, token_hash: &str, grant: &RefreshGrant) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO oauth_refresh_tokens (token_hash, family_id, client_id, learner_id, scope, resource, expires_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(token_hash)
            .bind(&grant.family_id)
            .bind(&grant.client_id)
            .bind(&grant.learner_id)
            .bind(&grant.scope)
            .bind(&grant.resource)
            .bind(grant.expires_ms)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// A refresh token's grant and whether it is spent (used or revoked).
    pub async fn refresh_token(&self, token_hash: &str) -> Result<Option<(RefreshGrant, bool)>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT family_id, client_id, learner_id, scope, resource, expires_ms, used_ms, revoked_ms FROM oauth_refresh_tokens WHERE token_hash = $1",
            )
            .bind(token_hash)
            .fetch_optional(pool)
            .await?;
            let Some(row) = row else { return Ok(None) };
            let used: Option<i64> = row.try_get("used_ms")?;
            let revoked: Option<i64> = row.try_get("revoked_ms")?;
            Ok(Some((
                RefreshGrant {
                    family_id: row.try_get("family_id")?,
                    client_id: row.try_get("client_id")?,
                    learner_id: row.try_get("learner_id")?,
                    scope: row.try_get("scope")?,
                    resource: row.try_get("resource")?,
                    expires_ms: row.try_get("expires_ms")?,
                },
                used.is_some() || revoked.is_some(),
            )))
        })
    }

    /// Spends a refresh token (rotation); false when it was spent meanwhile.
    pub async fn claim_refresh_token(&self, token_hash: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.spend_once(
            "UPDATE oauth_refresh_tokens SET used_ms = $2 WHERE token_hash = $1 AND used_ms IS NULL AND revoked_ms IS NULL",
            token_hash,
            now_ms,
        )
        .await
    }

    /// Revokes every refresh token of a family (a replayed code or refresh token).
    pub async fn revoke_refresh_family(&self, family_id: &str, now_ms: i64) -> Result<u64, StoreError> {
        on_writer!(self, pool => {
            Ok(sqlx::query("UPDATE oauth_refresh_tokens SET revoked_ms = $2 WHERE family_id = $1 AND revoked_ms IS NULL")
                .bind(family_id)
                .bind(now_ms)
                .execute(pool)
                .await?
                .rows_affected())
        })
    }
}

impl Store {
    /// The learner an external identity provider's subject maps to, created on first sight
    /// (concurrent first requests agree on one).
    pub async fn learner_for_subject(&self, issuer: &str, subject: &str, now_ms: i64) -> Result<String, StoreError> {
        let find = "SELECT learner_id FROM oauth_subjects WHERE issuer = $1 AND subject = $2";
        let mapped = || async {
            on_pool!(self, pool => {
                match sqlx::query(find).bind(issuer).bind(subject).fetch_optional(pool).await? {
                    Some(row) => Ok::<_, StoreError>(Some(row.try_get::<String, _>("learner_id")?)),
                    None => Ok(None),
                }
            })
        };
        if let Some(learner_id) = mapped().await? {
            return Ok(learner_id);
        }
        let learner_id = uuid::Uuid::new_v4().to_string();
        let created = on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO learners (learner_id, name, created_ms) VALUES ($1, $2, $3)")
                .bind(&learner_id)
                .bind("external learner")
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            let inserted = sqlx::query(
                "INSERT INTO oauth_subjects (issuer, subject, learner_id, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (issuer, subject) DO NOTHING",
            )
            .bind(issuer)
            .bind(subject)
            .bind(&learner_id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 1 {
                tx.commit().await?;
                true
            } else {
                tx.rollback().await?;
                false
            }
        });
        if created {
            return Ok(learner_id);
        }
        // Another request mapped the subject first: its learner is the one.
        mapped().await?.ok_or(StoreError::Conflict)
    }
}
