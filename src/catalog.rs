//! The installed curricula: every `*/pack.json` under the content directory, each validated
//! at load. A journey keeps the pack version it started with; new journeys get the newest.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use aggregates::curriculum::Pack;
use anyhow::Context;

/// Loaded packs by curriculum id and version.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    packs: BTreeMap<String, BTreeMap<u32, Arc<Pack>>>,
}

impl Catalog {
    /// Loads every pack below `dir` (one folder per pack version, each with `pack.json` and
    /// an `assets/` folder). Any invalid pack stops the load with its file and field.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let mut catalog = Self::default();
        let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read the content directory {}", dir.display()))?;
        let mut folders: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("pack.json").is_file()).collect();
        folders.sort();
        for folder in folders {
            let file = folder.join("pack.json");
            let json = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let assets = folder.join("assets");
            let name = file.strip_prefix(dir).unwrap_or(&file).display().to_string();
            let pack = Pack::from_json(&name, &json, |asset| std::fs::read_to_string(assets.join(asset)).ok())?;
            let versions = catalog.packs.entry(pack.id.clone()).or_default();
            anyhow::ensure!(!versions.contains_key(&pack.version), "{name}: version: {} of `{}` is installed twice", pack.version, pack.id);
            versions.insert(pack.version, Arc::new(pack));
        }
        anyhow::ensure!(!catalog.packs.is_empty(), "no curriculum found under {} (expected */pack.json)", dir.display());
        Ok(catalog)
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
}
