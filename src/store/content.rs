//! The content hashes of the curriculum pack versions loaded against this database: the record
//! that makes "a published version is never changed in place" checkable at start-up.

use sqlx::Row;

use super::{on_writer, Store, StoreError};

/// A pack version whose installed content differs from the content recorded for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EditedPack {
    /// The curriculum id.
    pub curriculum_id: String,
    /// The pack version.
    pub version: u32,
    /// The hash recorded when the version was first loaded here.
    pub recorded: String,
    /// The hash of the installed content.
    pub installed: String,
}

impl Store {
    /// Records `(curriculum, version, content hash)` of every installed pack not recorded yet and
    /// returns the installed packs whose hash differs from the recorded one. Recording and
    /// comparing are one statement each per pack, safe when several instances start at once:
    /// the first to record a version wins, the others compare against it.
    pub async fn record_packs(&self, packs: &[(String, u32, String)], now_ms: i64) -> Result<Vec<EditedPack>, StoreError> {
        let mut edited = Vec::new();
        on_writer!(self, pool => {
            for (id, version, hash) in packs {
                sqlx::query(
                    "INSERT INTO content_packs (curriculum_id, version, content_hash, first_loaded_ms) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (curriculum_id, version) DO NOTHING",
                )
                .bind(id)
                .bind(i64::from(*version))
                .bind(hash)
                .bind(now_ms)
                .execute(pool)
                .await?;
                let row = sqlx::query("SELECT content_hash FROM content_packs WHERE curriculum_id = $1 AND version = $2")
                    .bind(id)
                    .bind(i64::from(*version))
                    .fetch_one(pool)
                    .await?;
                let recorded: String = row.try_get("content_hash")?;
                if recorded != *hash {
                    edited.push(EditedPack { curriculum_id: id.clone(), version: *version, recorded, installed: hash.clone() });
                }
            }
            Ok(edited)
        })
    }
}
