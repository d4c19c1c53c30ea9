//! `backup` and `restore` of the embedded store. A database is only as good as its capability
//! key (every learning session, option token and capability is sealed with it), so the key file
//! travels with the database both ways, and a restore never proceeds without one.

use std::path::Path;

use anyhow::Context;

use crate::app::tokens::{write_private, Keys};
use crate::config::Settings;
use crate::store::backup::{sqlite_backup, sqlite_integrity};

const PG_HINT: &str = "on PostgreSQL use pg_dump -Fc and pg_restore (docs/operations.md, \"Backup and restore\") and keep SKILLPILOT_CAPABILITY_KEYS with your secrets";

fn ensure_new(paths: &[&Path]) -> anyhow::Result<()> {
    for path in paths {
        anyhow::ensure!(!path.exists(), "{} exists: backup and restore never overwrite (move it away first)", path.display());
    }
    Ok(())
}

fn ensure_folder(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        anyhow::ensure!(dir.is_dir(), "the folder {} does not exist", dir.display());
    }
    Ok(())
}

/// `-wal` and `-shm` beside a SQLite file.
fn sidecars(db: &Path) -> [std::path::PathBuf; 2] {
    let name = db.as_os_str().to_owned();
    let with = |suffix: &str| {
        let mut n = name.clone();
        n.push(suffix);
        std::path::PathBuf::from(n)
    };
    [with("-wal"), with("-shm")]
}

pub(super) async fn backup(settings: &Settings, to: &Path) -> anyhow::Result<i32> {
    settings.db.validate()?;
    let Some(db) = settings.db.sqlite_path() else { anyhow::bail!("`backup` copies the embedded SQLite store; {PG_HINT}") };
    anyhow::ensure!(db.is_file(), "no database at {}", db.display());
    let key_to = Keys::key_file_of(to);
    ensure_new(&[to, &key_to])?;
    ensure_folder(to)?;
    // The key is read first: a backup that could not be opened again is no backup.
    let key = match &settings.capability_keys {
        Some(_) => None,
        None => {
            let file = Keys::key_file_of(db);
            let spec = std::fs::read_to_string(&file).with_context(|| {
                format!("cannot read the capability key file {}: without it the backup would open no learning session", file.display())
            })?;
            Keys::parse(spec.trim()).with_context(|| format!("the capability key file {}", file.display()))?;
            Some(spec)
        }
    };
    sqlite_backup(db, to).await.with_context(|| format!("cannot back up {} into {}", db.display(), to.display()))?;
    sqlite_integrity(to).await.with_context(|| format!("the backup {} does not pass its integrity check", to.display()))?;
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    match key {
        Some(spec) => {
            write_private(&key_to, &spec).with_context(|| format!("cannot write {}", key_to.display()))?;
            println!("backup: {} ({bytes} bytes) and its capability key {}", to.display(), key_to.display());
        }
        None => println!(
            "backup: {} ({bytes} bytes); the capability keys come from SKILLPILOT_CAPABILITY_KEYS: keep them with this backup",
            to.display()
        ),
    }
    Ok(0)
}

pub(super) async fn restore(settings: &Settings, from: &Path) -> anyhow::Result<i32> {
    settings.db.validate()?;
    let Some(db) = settings.db.sqlite_path() else { anyhow::bail!("`restore` restores the embedded SQLite store; {PG_HINT}") };
    anyhow::ensure!(from.is_file(), "no backup at {}", from.display());
    let key_to = Keys::key_file_of(db);
    let [wal, shm] = sidecars(db);
    ensure_new(&[db, &wal, &shm, &key_to])?;
    let key = match &settings.capability_keys {
        Some(_) => None,
        None => {
            let file = Keys::key_file_of(from);
            let spec = std::fs::read_to_string(&file).with_context(|| {
                format!(
                    "the backup's capability key file {} is missing: restore it beside the backup, or set SKILLPILOT_CAPABILITY_KEYS",
                    file.display()
                )
            })?;
            Keys::parse(spec.trim()).with_context(|| format!("the capability key file {}", file.display()))?;
            Some(spec)
        }
    };
    sqlite_integrity(from).await.with_context(|| format!("the backup {} does not pass its integrity check", from.display()))?;
    // Copied under a temporary name and renamed, so a crash never leaves a half database at
    // the path the service opens.
    let partial = db.with_extension("restoring");
    ensure_new(&[&partial])?;
    std::fs::copy(from, &partial).with_context(|| format!("cannot copy {} to {}", from.display(), partial.display()))?;
    std::fs::File::open(&partial).and_then(|f| f.sync_all()).with_context(|| format!("cannot flush {}", partial.display()))?;
    if let Some(spec) = key {
        write_private(&key_to, &spec).with_context(|| format!("cannot write {}", key_to.display()))?;
    }
    std::fs::rename(&partial, db).with_context(|| format!("cannot move {} to {}", partial.display(), db.display()))?;
    println!(
        "restore: {} restored from {}{}",
        db.display(),
        from.display(),
        if settings.capability_keys.is_none() { ", with its capability key" } else { "" }
    );
    Ok(0)
}
