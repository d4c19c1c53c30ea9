//! The installed curricula: the packs shipped under `content/` are compiled into the binary, so
//! it serves from any working directory; an optional content directory adds packs or overrides a
//! shipped one (same curriculum id and version — allowed only while the content is the same as
//! what the database recorded for that version: [`Catalog::publish`]). Every pack is validated at
//! load. A journey keeps the pack version it started with; new journeys get the newest.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use aggregates::curriculum::Pack;
use anyhow::Context;
use include_dir::{include_dir, Dir};

use crate::canonical::canonical;
use crate::store::Store;

/// The packs shipped with this build (`content/<pack>/pack.json` and its `assets/`).
static SHIPPED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/content");

/// Loaded packs by curriculum id and version.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    packs: BTreeMap<String, BTreeMap<u32, Arc<Pack>>>,
}

/// Where a pack came from, for messages and the start-up summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Shipped,
    Directory,
}

impl Catalog {
    /// The shipped packs, then every pack below `extra` (one folder per pack version, each with
    /// `pack.json` and an `assets/` folder): a pack there with the id and version of a shipped
    /// one replaces it, any other is added. Any invalid pack stops the load with its file and
    /// field.
    pub fn load(extra: Option<&Path>) -> anyhow::Result<Self> {
        let mut catalog = Self::default();
        let mut shipped: Vec<_> = SHIPPED.dirs().filter(|d| d.get_file(d.path().join("pack.json")).is_some()).collect();
        shipped.sort_by_key(|d| d.path());
        for dir in shipped {
            let file = dir.path().join("pack.json");
            let json =
                dir.get_file(&file).and_then(|f| f.contents_utf8()).with_context(|| format!("shipped {} is not UTF-8", file.display()))?;
            let assets = dir.path().join("assets");
            let pack = Pack::from_json(&format!("(shipped) {}", file.display()), json, |asset| {
                dir.get_file(assets.join(asset)).and_then(|f| f.contents_utf8()).map(str::to_owned)
            })?;
            catalog.add(pack, Origin::Shipped, &file.display().to_string())?;
        }
        if let Some(dir) = extra {
            catalog.load_dir(dir)?;
        }
        anyhow::ensure!(!catalog.packs.is_empty(), "no curriculum installed (expected */pack.json)");
        Ok(catalog)
    }

    fn load_dir(&mut self, dir: &Path) -> anyhow::Result<()> {
        let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read the content directory {}", dir.display()))?;
        let mut folders: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("pack.json").is_file()).collect();
        anyhow::ensure!(!folders.is_empty(), "the content directory {} holds no pack (expected */pack.json)", dir.display());
        folders.sort();
        let mut seen = std::collections::BTreeSet::new();
        for folder in folders {
            let pack = load_pack_dir(&folder)?;
            let name = folder.join("pack.json").display().to_string();
            anyhow::ensure!(
                seen.insert((pack.id.clone(), pack.version)),
                "{name}: version: {} of `{}` is installed twice",
                pack.version,
                pack.id
            );
            self.add(pack, Origin::Directory, &name)?;
        }
        Ok(())
    }

    fn add(&mut self, pack: Pack, origin: Origin, name: &str) -> anyhow::Result<()> {
        let versions = self.packs.entry(pack.id.clone()).or_default();
        anyhow::ensure!(
            origin == Origin::Directory || !versions.contains_key(&pack.version),
            "{name}: version: {} of `{}` is installed twice",
            pack.version,
            pack.id
        );
        versions.insert(pack.version, Arc::new(pack));
        Ok(())
    }

    /// `id@version` of every installed pack, for the start-up summary.
    pub fn summary(&self) -> String {
        let all: Vec<String> = self.packs.iter().flat_map(|(id, v)| v.keys().map(move |n| format!("{id}@{n}"))).collect();
        all.join(",")
    }

    /// The newest version of a curriculum.
    pub fn latest(&self, id: &str) -> Option<Arc<Pack>> {
        self.packs.get(id).and_then(|v| v.values().next_back().cloned())
    }

    /// One version of a curriculum.
    pub fn version(&self, id: &str, version: u32) -> Option<Arc<Pack>> {
        self.packs.get(id).and_then(|v| v.get(&version).cloned())
    }

    /// The newest version of every installed curriculum.
    pub fn all_latest(&self) -> Vec<Arc<Pack>> {
        self.packs.values().filter_map(|v| v.values().next_back().cloned()).collect()
    }

    /// `(curriculum, version, content hash)` of every installed pack version.
    pub fn hashes(&self) -> Vec<(String, u32, String)> {
        self.packs.iter().flat_map(|(id, versions)| versions.iter().map(move |(v, pack)| (id.clone(), *v, content_hash(pack)))).collect()
    }

    /// Records every installed pack version in the store and refuses to go on when one that
    /// was loaded here before now has other content: a published version is never changed in
    /// place (the contract; docs/content.md).
    pub async fn publish(&self, store: &Store, now_ms: i64) -> anyhow::Result<()> {
        let edited = store.record_packs(&self.hashes(), now_ms).await.context("cannot record the installed content packs")?;
        if let Some(e) = edited.first() {
            anyhow::bail!(
                "content pack `{}` version {} was published with content {}; this installation holds {} for it: a published \
                 version is never changed in place — ship the change as version {}{}",
                e.curriculum_id,
                e.version,
                short(&e.recorded),
                short(&e.installed),
                self.packs
                    .get(&e.curriculum_id)
                    .and_then(|v| v.keys().next_back())
                    .map_or(e.version + 1, |newest| newest.max(&e.version) + 1),
                if edited.len() > 1 { format!(" ({} more packs edited)", edited.len() - 1) } else { String::new() }
            );
        }
        Ok(())
    }
}

/// The pack in one folder (`pack.json` and its `assets/`), validated; errors name the file and
/// the field.
pub(crate) fn load_pack_dir(folder: &Path) -> anyhow::Result<Pack> {
    let file = folder.join("pack.json");
    let json = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
    let assets = folder.join("assets");
    Ok(Pack::from_json(&file.display().to_string(), &json, |asset| std::fs::read_to_string(assets.join(asset)).ok())?)
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The hash of a pack's content: its parsed form (so re-indenting the file changes nothing) and
/// the markup of every picture it shows.
pub(crate) fn content_hash(pack: &Pack) -> String {
    let mut hasher = blake3::Hasher::new();
    let parsed = serde_json::to_value(pack).unwrap_or_default();
    hasher.update(canonical(&parsed).as_bytes());
    for goal in &pack.goals {
        if let Some(vis) = &goal.visualization {
            hasher.update(b"\n");
            hasher.update(vis.asset.as_bytes());
            hasher.update(b"\n");
            hasher.update(vis.svg.as_bytes());
        }
    }
    hasher.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_curriculum_loads_without_any_directory() {
        let catalog = Catalog::load(None).unwrap();
        let pack = catalog.latest("fractions").unwrap();
        assert!(pack.goals.iter().any(|g| g.visualization.as_ref().is_some_and(|v| v.svg.contains("<svg"))));
    }

    #[test]
    fn a_directory_pack_with_the_same_version_replaces_the_shipped_one_and_a_new_version_is_added() {
        let shipped = Catalog::load(None).unwrap().latest("fractions").unwrap();
        let tmp = std::env::temp_dir().join(format!("sp_catalog_{}", uuid::Uuid::new_v4().simple()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("content/fractions");
        for (folder, version, title) in [("same", shipped.version, "Replaced"), ("next", shipped.version + 1, "Next")] {
            let dir = tmp.join(folder);
            std::fs::create_dir_all(dir.join("assets")).unwrap();
            for asset in std::fs::read_dir(src.join("assets")).unwrap() {
                let asset = asset.unwrap().path();
                std::fs::copy(&asset, dir.join("assets").join(asset.file_name().unwrap())).unwrap();
            }
            let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("pack.json")).unwrap()).unwrap();
            json["version"] = version.into();
            json["title"]["en"] = title.into();
            std::fs::write(dir.join("pack.json"), json.to_string()).unwrap();
        }
        let catalog = Catalog::load(Some(&tmp)).unwrap();
        std::fs::remove_dir_all(&tmp).ok();
        assert_eq!(catalog.version("fractions", shipped.version).unwrap().title.get("en").map(String::as_str), Some("Replaced"));
        assert_eq!(catalog.latest("fractions").unwrap().version, shipped.version + 1);
    }

    #[test]
    fn a_content_directory_without_packs_is_an_error_naming_it() {
        let tmp = std::env::temp_dir().join(format!("sp_catalog_{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&tmp).unwrap();
        let err = Catalog::load(Some(&tmp)).unwrap_err().to_string();
        std::fs::remove_dir_all(&tmp).ok();
        assert!(err.contains(&tmp.display().to_string()), "{err}");
    }
}
