//! The tool registry (docs/registry.md): the start-up handshake of every tool's needs against the
//! context keys the full context publishes, the seam signatures kept in `tool-seams.lock`, the
//! three grades (refused / restricted / reported) and the whole-picture report for the author.
//! The report never becomes a routing rule; the running service never writes the lock file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use projections::full_context::{ContextKey, CONTEXT_KEYS};
use serde::{Deserialize, Serialize};
use serde_json::json;

use aggregates::learning_journey::Features;

use crate::canonical::canonical;

/// The lock file as committed (compiled in; `--seams-lock` reads another one).
pub const COMMITTED_LOCK: &str = include_str!("../tool-seams.lock");

/// Words of the implementation that must not appear in model-visible descriptions.
const INTERNAL_TERMS: &[&str] = &[
    "capability",
    "aggregate",
    "event",
    "projection",
    "idempotenc",
    "payload",
    "token",
    "backend",
    "database",
    "schema",
    "endpoint",
    "json",
    "stateversion",
    "uuid",
];

/// Whether a tool reads or writes, for annotations and the restricted grade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    /// Changes the journey.
    Write,
}

/// The exits a tool serves (docs/registry.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Exit {
    Completed,
    /// A learner decision is needed first.
    Clarification,
    /// Judged wrong for the state, with a finding.
    Rejected,
    /// Could not run.
    Error,
}

/// The part a tool plays for the service around it: the context loader makes the service
/// ready; a workflow is offered only while every tool of its steps is bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Loads the learner's full context (readiness, reload accounting).
    Context,
    /// One step of the verified-recall workflow.
    Recall,
    /// One step of the exam workflow.
    Exam,
    /// Shows a goal's authorized picture.
    Picture,
    Other,
}

/// A context key a tool reads, with the meaning the tool relies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Need {
    /// The key's name as the context publishes it.
    pub key: &'static str,
    /// What the tool takes it to mean (compared across tools by the whole-picture report).
    pub assumes: &'static str,
}

/// A tool's registration (docs/registry.md), declared next to its code.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The description in the learner's language of intent (model-visible).
    pub intent: &'static str,
    /// Situations in which the tool must not be called (model-visible).
    pub negative_cases: &'static [&'static str],
    /// What the tool explicitly does not do.
    pub boundary: &'static str,
    pub cost: &'static str,
    /// Whether it runs without a learner turn.
    pub cadence: &'static str,
    /// Where it may run.
    pub scope: &'static str,
    /// Whose data it touches.
    pub data_ownership: &'static str,
    /// Context keys it reads.
    pub needs: &'static [Need],
    /// Declared share of learner turns in percent (0, 25, 50, 75, 100); `None` if undeclared.
    pub quota: Option<u8>,
    /// What a second identical call does.
    pub retry: &'static str,
    /// Exits it serves.
    pub exits: &'static [Exit],
    /// Bumped whenever the tool accepts a changed seam (then `skillpilot registry lock`).
    pub registration_version: u32,
}

impl Manifest {
    /// The model-visible description: the intent, then the negative cases.
    pub fn description(&self) -> String {
        let mut d = self.intent.to_owned();
        for case in self.negative_cases {
            d.push(' ');
            d.push_str(case);
        }
        d
    }
}

/// What the registry knows of a tool: the transport that ships the tool hands these over at
/// start-up, so the registry never depends on it.
#[derive(Clone, Debug)]
pub struct ToolMeta {
    /// The fixed name.
    pub name: &'static str,
    /// Read or write.
    pub kind: Kind,
    /// The part it plays.
    pub role: Role,
    pub manifest: Manifest,
}

/// One tool's entry in the lock file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockEntry {
    /// The registration version the signature was recorded under.
    pub registration_version: u32,
    /// blake3 over the four parts of every met need.
    pub signature: String,
}

/// `tool-seams.lock`: the seam signature each tool was last registered with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub tools: BTreeMap<String, LockEntry>,
}

impl Lock {
    /// Parses the lock file.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        serde_json::from_str(text).context("tool-seams.lock is not valid")
    }

    /// Reads a lock file from disk.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        Self::parse(&std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?)
    }
}

/// The grade of a tool after the handshake, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Grade {
    /// Not bound: a need has no provider or the seam changed without re-registration.
    Refused,
    /// Bound, but a write tool without a `rejected` exit is never used as a proposal.
    Restricted,
    /// Bound; a quality defect (internal terms, no quota) is reported.
    Reported,
    Bound,
}

/// One tool's state.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolState {
    pub name: &'static str,
    pub grade: Grade,
    /// Why (empty when bound).
    pub reasons: Vec<String>,
    /// The signature formed at this start (none when a need has no provider).
    pub signature: Option<String>,
    /// Declared registration version.
    pub registration_version: u32,
    /// Declared share of learner turns.
    pub quota: Option<u8>,
}

/// The whole-picture report (a report for the author, never a routing rule).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WholePicture {
    /// Sum of the declared quotas, in percent.
    pub quota_sum: u32,
    /// A verdict on the sum.
    pub quota_sum_finding: Option<String>,
    /// Pairs of tools whose descriptions overlap while one of them names no negative case.
    pub overlapping_descriptions: Vec<(String, String)>,
    /// Keys needed with different meanings by different tools.
    pub keys_with_different_meanings: Vec<String>,
    /// Provided keys no tool needs.
    pub unneeded_keys: Vec<String>,
}

/// The registry after the handshake.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Registry {
    /// Every tool, in `tools/list` order.
    pub tools: Vec<ToolState>,
    /// The whole-picture report.
    pub report: WholePicture,
    /// The workflows whose every step is bound, computed once at the handshake.
    #[serde(skip)]
    pub features: Features,
    /// The context loader's name, if one is registered.
    #[serde(skip)]
    pub context_tool: Option<&'static str>,
}

/// The seam signature of a tool: blake3 over the four parts of all its met needs, or the
/// names of the needs no key provides.
pub fn seam_signature(def: &ToolMeta, keys: &[ContextKey]) -> Result<String, Vec<&'static str>> {
    let mut parts = Vec::new();
    let mut missing = Vec::new();
    let mut needs: Vec<_> = def.manifest.needs.iter().map(|n| n.key).collect();
    needs.sort_unstable();
    needs.dedup();
    for need in needs {
        match keys.iter().find(|k| k.name == need) {
            Some(k) => parts.push(json!({"name": k.name, "type": k.ty, "meaning": k.meaning, "lifetime": k.lifetime})),
            None => missing.push(need),
        }
    }
    if missing.is_empty() {
        Ok(blake3::hash(canonical(&json!(parts)).as_bytes()).to_hex().to_string())
    } else {
        Err(missing)
    }
}

fn content_words(text: &str) -> BTreeSet<String> {
    const STOP: &[&str] = &[
        "the", "and", "a", "an", "of", "to", "it", "is", "in", "at", "once", "all", "has", "with", "for", "or", "each", "any", "that",
        "this", "by",
    ];
    text.split(|c: char| !c.is_alphanumeric()).map(str::to_lowercase).filter(|w| w.len() > 2 && !STOP.contains(&w.as_str())).collect()
}

/// Runs the handshake of `defs` against `keys` and `lock`.
pub fn handshake(defs: &[ToolMeta], keys: &[ContextKey], lock: &Lock) -> Registry {
    let mut tools = Vec::with_capacity(defs.len());
    for def in defs {
        let m = &def.manifest;
        let mut reasons = Vec::new();
        let mut grade = Grade::Bound;
        let signature = match seam_signature(def, keys) {
            Ok(sig) => {
                match lock.tools.get(def.name) {
                    None => {
                        grade = Grade::Refused;
                        reasons.push("not registered in tool-seams.lock".to_owned());
                    }
                    Some(entry) if entry.signature == sig => {}
                    Some(entry) if entry.registration_version < m.registration_version => {
                        grade = Grade::Refused;
                        reasons.push("re-registered, but tool-seams.lock was not regenerated (`skillpilot registry lock`)".to_owned());
                    }
                    Some(_) => {
                        grade = Grade::Refused;
                        reasons.push(
                            "the seam signature changed without re-registration: a needed key changed its name, type, meaning or lifetime"
                                .to_owned(),
                        );
                    }
                }
                Some(sig)
            }
            Err(missing) => {
                grade = Grade::Refused;
                reasons.push(format!("needs without a provider: {}", missing.join(", ")));
                None
            }
        };
        if def.kind == Kind::Write && !m.exits.contains(&Exit::Rejected) {
            grade = grade.min(Grade::Restricted);
            reasons.push("a write tool without a `rejected` exit: never used as a proposal".to_owned());
        }
        let visible = m.description().to_lowercase();
        let terms: Vec<&str> = INTERNAL_TERMS.iter().copied().filter(|t| visible.contains(t)).collect();
        if !terms.is_empty() {
            grade = grade.min(Grade::Reported);
            reasons.push(format!("the description uses internal terms: {}", terms.join(", ")));
        }
        if m.quota.is_none() {
            grade = grade.min(Grade::Reported);
            reasons.push("no declared quota".to_owned());
        }
        tools.push(ToolState { name: def.name, grade, reasons, signature, registration_version: m.registration_version, quota: m.quota });
    }
    let workflow = |role: Role| {
        let mut steps = defs.iter().filter(|d| d.role == role).peekable();
        steps.peek().is_some() && steps.all(|d| tools.iter().any(|t| t.name == d.name && t.grade != Grade::Refused))
    };
    let features = Features { recall: workflow(Role::Recall), exam: workflow(Role::Exam), picture: workflow(Role::Picture) };
    let context_tool = defs.iter().find(|d| d.role == Role::Context).map(|d| d.name);
    Registry { report: whole_picture(defs, keys), tools, features, context_tool }
}

fn whole_picture(defs: &[ToolMeta], keys: &[ContextKey]) -> WholePicture {
    let quota_sum: u32 = defs.iter().filter_map(|d| d.manifest.quota).map(u32::from).sum();
    let quota_sum_finding = if quota_sum < 75 {
        Some(format!("the declared quotas add up to {quota_sum} %: many turns would reach no tool"))
    } else if quota_sum > 400 {
        Some(format!("the declared quotas add up to {quota_sum} %: several tools claim the same turns"))
    } else {
        None
    };
    let mut overlapping = Vec::new();
    for (i, a) in defs.iter().enumerate() {
        for b in &defs[i + 1..] {
            if !a.manifest.negative_cases.is_empty() && !b.manifest.negative_cases.is_empty() {
                continue;
            }
            let (wa, wb) = (content_words(a.manifest.intent), content_words(b.manifest.intent));
            let union = wa.union(&wb).count();
            let shared = wa.intersection(&wb).count();
            if union > 0 && shared * 100 / union >= 35 {
                overlapping.push((a.name.to_owned(), b.name.to_owned()));
            }
        }
    }
    let mut meanings: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for d in defs {
        for n in d.manifest.needs {
            meanings.entry(n.key).or_default().insert(n.assumes);
        }
    }
    let keys_with_different_meanings = meanings.iter().filter(|(_, m)| m.len() > 1).map(|(k, _)| (*k).to_owned()).collect();
    let unneeded_keys = keys.iter().filter(|k| !meanings.contains_key(k.name)).map(|k| k.name.to_owned()).collect();
    WholePicture { quota_sum, quota_sum_finding, overlapping_descriptions: overlapping, keys_with_different_meanings, unneeded_keys }
}

impl Registry {
    /// The registry of the shipped tools against the shipped keys and a lock.
    pub fn start(tools: &[ToolMeta], lock: &Lock) -> Self {
        let registry = handshake(tools, CONTEXT_KEYS, lock);
        for t in &registry.tools {
            match t.grade {
                Grade::Refused => {
                    tracing::error!(tool = t.name, reasons = ?t.reasons, "TOOL REFUSED at the handshake: it is not offered to any coach")
                }
                Grade::Restricted | Grade::Reported => {
                    tracing::warn!(tool = t.name, grade = ?t.grade, reasons = ?t.reasons, "tool registered with findings")
                }
                Grade::Bound => {}
            }
        }
        tracing::debug!(report = ?registry.report, "tool registry whole-picture report");
        registry
    }

    /// Whether a tool is bound (possibly restricted or reported).
    pub fn is_bound(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name && t.grade != Grade::Refused)
    }

    /// Whether a tool may be named in a proposal.
    pub fn may_propose(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name && t.grade > Grade::Restricted)
    }

    /// Whether the context loader is bound (without it no coach can work: the service is not ready).
    pub fn context_bound(&self) -> bool {
        self.context_tool.is_some_and(|name| self.is_bound(name))
    }

    /// How many tools are bound.
    pub fn bound_count(&self) -> usize {
        self.tools.iter().filter(|t| t.grade != Grade::Refused).count()
    }

    /// Names of refused tools.
    pub fn refused(&self) -> Vec<&'static str> {
        self.tools.iter().filter(|t| t.grade == Grade::Refused).map(|t| t.name).collect()
    }
}

/// Builds the lock for the shipped tools, refusing to record a changed signature of a tool
/// whose registration version was not bumped. Returns the new lock or the offending tools.
pub fn relock(tools: &[ToolMeta], previous: &Lock) -> Result<Lock, Vec<String>> {
    let mut lock = Lock::default();
    let mut refused = Vec::new();
    for def in tools {
        let Ok(sig) = seam_signature(def, CONTEXT_KEYS) else {
            refused.push(format!("{}: a need has no provider", def.name));
            continue;
        };
        if let Some(old) = previous.tools.get(def.name) {
            if old.signature != sig && old.registration_version >= def.manifest.registration_version {
                refused.push(format!("{}: the seam changed; bump its registration version first", def.name));
                continue;
            }
        }
        lock.tools.insert(def.name.to_owned(), LockEntry { registration_version: def.manifest.registration_version, signature: sig });
    }
    if refused.is_empty() {
        Ok(lock)
    } else {
        Err(refused)
    }
}
