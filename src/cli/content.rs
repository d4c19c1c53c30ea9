//! `skillpilot content check DIR`: the content author's check of a pack folder (or a folder of
//! pack folders) exactly as the server loads it, with no database: the first problem as
//! `file: field: problem`, or the pack's goal graph and the hash its version is published with.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use aggregates::curriculum::Pack;

use crate::catalog::{content_hash, load_pack_dir};

/// Checks every pack below `dir`; the exit code is 0 when all load, 1 otherwise.
pub(super) fn check(dir: &Path) -> anyhow::Result<i32> {
    let folders = pack_folders(dir)?;
    let mut failed = 0;
    for folder in &folders {
        match load_pack_dir(folder) {
            Ok(pack) => {
                print!("{}", summary(&pack));
                for unused in unused_assets(folder, &pack) {
                    println!("  warning: {} is used by no goal", unused.display());
                }
            }
            Err(e) => {
                failed += 1;
                println!("error: {e:#}");
            }
        }
    }
    println!("{} pack(s) checked, {} with errors", folders.len(), failed);
    Ok(i32::from(failed > 0))
}

/// `dir` itself when it holds a `pack.json`, else its sub-folders that do.
fn pack_folders(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if dir.join("pack.json").is_file() {
        return Ok(vec![dir.to_owned()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?;
    let mut folders: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("pack.json").is_file()).collect();
    folders.sort();
    anyhow::ensure!(!folders.is_empty(), "{} holds no pack: expected {0}/pack.json or {0}/<pack>/pack.json", dir.display());
    Ok(folders)
}

/// The pack's figures and its goal graph: areas with their goals, each goal's prerequisites,
/// cards and picture.
fn summary(pack: &Pack) -> String {
    use std::fmt::Write;
    let loc = pack.locales.first().map(String::as_str).unwrap_or("en");
    let leaves: Vec<_> = pack.leaves().collect();
    let cards: usize = leaves.iter().map(|g| g.cards.len()).sum();
    let pictures = pack.goals.iter().filter(|g| g.visualization.is_some()).count();
    let points: u32 = pack.exam.tasks.iter().map(|t| t.max_points).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}@{} \"{}\" ({}) content {}",
        pack.id,
        pack.version,
        pack.text(&pack.title, loc),
        pack.locales.join(", "),
        content_hash(pack)
    );
    let _ = writeln!(
        out,
        "  {} goals taught, prerequisite depth {}, {} recall cards, {} pictures; exam: {} tasks, {} points, pass mark {}",
        leaves.len(),
        pack.prerequisite_depth(),
        cards,
        pictures,
        pack.exam.tasks.len(),
        points,
        pack.exam.pass_mark
    );
    let line = |out: &mut String, goal: &aggregates::curriculum::Goal, indent: &str| {
        let needs = pack.prerequisite_leaves(&goal.id);
        let _ = writeln!(
            out,
            "{indent}{} \"{}\" — {} cards{}{}",
            goal.id,
            pack.text(&goal.title, loc),
            goal.cards.len(),
            if goal.visualization.is_some() { ", picture" } else { "" },
            if needs.is_empty() { String::new() } else { format!("; needs {}", needs.join(", ")) }
        );
    };
    for goal in pack.goals.iter().filter(|g| g.parent.is_none()) {
        if pack.is_parent(&goal.id) {
            let _ = writeln!(out, "  area {} \"{}\"", goal.id, pack.text(&goal.title, loc));
            for leaf in pack.leaves_under(&goal.id) {
                line(&mut out, leaf, "    ");
            }
        } else {
            line(&mut out, goal, "  ");
        }
    }
    out
}

/// Files in `assets/` no goal shows: usually a typo in a goal's `asset`.
fn unused_assets(folder: &Path, pack: &Pack) -> Vec<PathBuf> {
    let used: BTreeSet<&str> = pack.goals.iter().filter_map(|g| g.visualization.as_ref()).map(|v| v.asset.as_str()).collect();
    let Ok(entries) = std::fs::read_dir(folder.join("assets")) else { return Vec::new() };
    let mut unused: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| !used.contains(n)))
        .collect();
    unused.sort();
    unused
}
