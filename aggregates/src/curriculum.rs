//! The curriculum model: a versioned content pack of goals, recall cards and an exam.
//!
//! A pack is read from JSON with every unknown key rejected, then validated as a whole
//! ([`Pack::validate`]): unique ids, prerequisites that form a DAG, every text present in
//! every supported locale, assets that exist. Validation names the file and the field of
//! the first problem, because a teacher fixing a pack needs the place, not a stack trace.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// A text in every supported locale, keyed by locale tag (`de`, `en`).
pub type Localized = BTreeMap<String, String>;

/// Numbers of the domain rules (docs/domain.md); a pack may override any of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Rules {
    /// Mastery reached when a goal is completed with independent evidence.
    pub mastery_independent: f64,
    /// Mastery reached when a goal is completed with guided evidence.
    pub mastery_guided: f64,
    /// Mastery added per passed recall card (capped at 1.0).
    pub recall_pass_gain: f64,
    /// Mastery removed per failed recall card (floored at 0.0).
    pub recall_fail_loss: f64,
    /// Below this mastery a goal becomes available again, to be re-taught.
    pub reteach_below: f64,
    /// Largest number of cards in one verified-recall batch.
    pub recall_batch_size: usize,
    /// Goals completed per day the plan aims at.
    pub daily_target: u32,
    /// Goals completed per week the plan aims at.
    pub weekly_target: u32,
    /// Retention the FSRS scheduler aims at.
    pub desired_retention: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            mastery_independent: 0.8,
            mastery_guided: 0.6,
            recall_pass_gain: 0.1,
            recall_fail_loss: 0.2,
            reteach_below: 0.5,
            recall_batch_size: 5,
            daily_target: 2,
            weekly_target: 8,
            desired_retention: 0.9,
        }
    }
}

/// A picture a goal is allowed to show, with its alternative text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Visualization {
    /// File name of the SVG asset, relative to the pack's `assets/` folder.
    pub asset: String,
    /// Alternative text, per locale.
    pub alt: Localized,
    /// The SVG markup, filled in by the loader; never part of the pack file.
    #[serde(skip)]
    pub svg: String,
}

/// A recall card: a question and the reference answer the coach compares by meaning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Card {
    /// Stable id, unique in the pack.
    pub id: String,
    /// The question, per locale.
    pub question: Localized,
    /// The reference answer, per locale.
    pub answer: Localized,
}

/// A goal of the curriculum. Goals with children are parents; only leaves are taught.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Goal {
    /// Stable id, unique in the pack.
    pub id: String,
    /// Title, per locale.
    pub title: Localized,
    /// Teaching text, per locale (required for leaves).
    #[serde(default)]
    pub teaching: Option<Localized>,
    /// The parent goal, if any.
    #[serde(default)]
    pub parent: Option<String>,
    /// Goals that must be mastered first.
    #[serde(default)]
    pub prerequisites: Vec<String>,
    /// An authorized picture.
    #[serde(default)]
    pub visualization: Option<Visualization>,
    /// Recall cards (leaves only).
    #[serde(default)]
    pub cards: Vec<Card>,
}

/// One exam task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExamTask {
    /// Stable id, unique in the pack.
    pub id: String,
    /// The task, per locale.
    pub prompt: Localized,
    /// Largest number of points for the task.
    pub max_points: u32,
    /// The reference solution, per locale.
    pub solution: Localized,
}

/// The exam of a pack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Exam {
    /// Goals that must all be mastered before the exam is released.
    pub scope: Vec<String>,
    /// Points needed to pass.
    pub pass_mark: u32,
    /// The tasks, in the order they are shown.
    pub tasks: Vec<ExamTask>,
}

/// A versioned content pack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Pack {
    /// Curriculum id, stable across versions.
    pub id: String,
    /// Pack version; a published version is never changed in place.
    pub version: u32,
    /// Supported locales; every text must exist in each.
    pub locales: Vec<String>,
    /// Title, per locale.
    pub title: Localized,
    /// Rule numbers, overriding the defaults.
    #[serde(default)]
    pub rules: Rules,
    /// Goals, in curriculum order.
    pub goals: Vec<Goal>,
    /// The final exam: its tasks and pass mark.
    pub exam: Exam,
    /// Where each goal is and which are leaves, built on the first query: every context asks
    /// these questions many times, and a scan of the goals per question was a measured share
    /// of a call's CPU. A pack is not changed once queried (a published version never is).
    #[serde(skip)]
    index: Indexed,
}

/// A pack's index, once built. It is derived from the goals, so it takes no part in a pack's
/// equality: a queried pack equals its unqueried copy.
#[derive(Clone, Debug, Default)]
struct Indexed(OnceLock<PackIndex>);

impl PartialEq for Indexed {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The goals' positions by id (the first, as a scan would find it), which are parents, and
/// the leaves under each goal.
#[derive(Clone, Debug)]
struct PackIndex {
    position: HashMap<String, usize>,
    parent: Vec<bool>,
    /// By a goal's position: the leaves within it (itself when a leaf), in curriculum order.
    under: Vec<Vec<usize>>,
}

impl PackIndex {
    fn of(goals: &[Goal]) -> Self {
        let mut position = HashMap::with_capacity(goals.len());
        for (i, goal) in goals.iter().enumerate() {
            position.entry(goal.id.clone()).or_insert(i);
        }
        let parent: Vec<bool> = goals.iter().map(|c| goals.iter().any(|g| g.parent.as_deref() == Some(c.id.as_str()))).collect();
        let mut under = vec![Vec::new(); goals.len()];
        for leaf in (0..goals.len()).filter(|&i| !parent[i]) {
            // The leaf and its ancestors, as `Pack::is_within` walks them (a cycle ends the walk).
            let mut at = Some(leaf);
            let mut steps = 0;
            while let Some(i) = at {
                if !under[i].contains(&leaf) {
                    under[i].push(leaf);
                }
                steps += 1;
                if steps > goals.len() {
                    break;
                }
                at = goals[i].parent.as_deref().and_then(|p| position.get(p).copied());
            }
        }
        Self { position, parent, under }
    }
}

/// Why a pack refused to load: the file and the field, then what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {field}: {problem}")]
pub struct PackError {
    /// The pack file (as given to the loader).
    pub file: String,
    /// The field path inside the file, e.g. `goals[3].prerequisites[0]`.
    pub field: String,
    /// What is wrong there.
    pub problem: String,
}

impl Pack {
    /// Parses a pack from JSON (unknown keys rejected) and validates it.
    ///
    /// `read_asset` returns the SVG markup of an asset name, or `None` when it does not exist.
    pub fn from_json(file: &str, json: &str, read_asset: impl Fn(&str) -> Option<String>) -> Result<Self, PackError> {
        let mut pack: Pack = serde_json::from_str(json).map_err(|e| PackError {
            file: file.to_owned(),
            field: format!("line {} column {}", e.line(), e.column()),
            problem: e.to_string(),
        })?;
        pack.validate(file)?;
        for (i, goal) in pack.goals.iter_mut().enumerate() {
            if let Some(vis) = goal.visualization.as_mut() {
                vis.svg = read_asset(&vis.asset).ok_or_else(|| PackError {
                    file: file.to_owned(),
                    field: format!("goals[{i}].visualization.asset"),
                    problem: format!("asset `{}` does not exist", vis.asset),
                })?;
                if !vis.svg.trim_start().starts_with("<svg") && !vis.svg.contains("<svg") {
                    return Err(PackError {
                        file: file.to_owned(),
                        field: format!("goals[{i}].visualization.asset"),
                        problem: format!("asset `{}` is not an SVG document", vis.asset),
                    });
                }
            }
        }
        Ok(pack)
    }

    /// Checks the whole pack; the first problem found is returned.
    pub fn validate(&self, file: &str) -> Result<(), PackError> {
        let err = |field: String, problem: String| PackError { file: file.to_owned(), field, problem };
        if self.id.trim().is_empty() {
            return Err(err("id".into(), "must not be empty".into()));
        }
        if self.locales.is_empty() {
            return Err(err("locales".into(), "at least one locale is required".into()));
        }
        check_localized(&self.locales, &self.title, "title").map_err(|(f, p)| err(f, p))?;

        let mut ids = BTreeSet::new();
        for (i, goal) in self.goals.iter().enumerate() {
            if !ids.insert(goal.id.as_str()) {
                return Err(err(format!("goals[{i}].id"), format!("duplicate goal id `{}`", goal.id)));
            }
        }
        if self.goals.is_empty() {
            return Err(err("goals".into(), "at least one goal is required".into()));
        }
        let parents: BTreeSet<&str> = self.goals.iter().filter_map(|g| g.parent.as_deref()).collect();
        let mut card_ids = BTreeSet::new();
        for (i, goal) in self.goals.iter().enumerate() {
            let at = |f: &str| format!("goals[{i}].{f}");
            check_localized(&self.locales, &goal.title, &at("title")).map_err(|(f, p)| err(f, p))?;
            if let Some(parent) = &goal.parent {
                if !ids.contains(parent.as_str()) {
                    return Err(err(at("parent"), format!("unknown goal `{parent}`")));
                }
            }
            for (j, pre) in goal.prerequisites.iter().enumerate() {
                if !ids.contains(pre.as_str()) {
                    return Err(err(at(&format!("prerequisites[{j}]")), format!("unknown goal `{pre}`")));
                }
            }
            let is_leaf = !parents.contains(goal.id.as_str());
            if is_leaf {
                match &goal.teaching {
                    Some(t) => check_localized(&self.locales, t, &at("teaching")).map_err(|(f, p)| err(f, p))?,
                    None => return Err(err(at("teaching"), "a leaf goal needs teaching text".into())),
                }
            } else if !goal.cards.is_empty() {
                return Err(err(at("cards"), "only leaf goals carry recall cards".into()));
            }
            if let Some(vis) = &goal.visualization {
                check_localized(&self.locales, &vis.alt, &at("visualization.alt")).map_err(|(f, p)| err(f, p))?;
                if vis.asset.contains("..") || vis.asset.contains('/') || !vis.asset.ends_with(".svg") {
                    return Err(err(at("visualization.asset"), "must be a plain `*.svg` file name".into()));
                }
            }
            for (j, card) in goal.cards.iter().enumerate() {
                let cat = |f: &str| format!("goals[{i}].cards[{j}].{f}");
                if !card_ids.insert(card.id.as_str()) {
                    return Err(err(cat("id"), format!("duplicate card id `{}`", card.id)));
                }
                check_localized(&self.locales, &card.question, &cat("question")).map_err(|(f, p)| err(f, p))?;
                check_localized(&self.locales, &card.answer, &cat("answer")).map_err(|(f, p)| err(f, p))?;
            }
        }
        self.check_hierarchy_acyclic(file)?;
        self.check_prerequisites_acyclic(file)?;

        let exam = &self.exam;
        if exam.tasks.is_empty() {
            return Err(err("exam.tasks".into(), "an exam needs at least one task".into()));
        }
        for (j, s) in exam.scope.iter().enumerate() {
            if !ids.contains(s.as_str()) {
                return Err(err(format!("exam.scope[{j}]"), format!("unknown goal `{s}`")));
            }
        }
        let mut task_ids = BTreeSet::new();
        let mut max_total = 0u32;
        for (j, task) in exam.tasks.iter().enumerate() {
            let tat = |f: &str| format!("exam.tasks[{j}].{f}");
            if !task_ids.insert(task.id.as_str()) {
                return Err(err(tat("id"), format!("duplicate task id `{}`", task.id)));
            }
            if task.max_points == 0 {
                return Err(err(tat("maxPoints"), "must be at least 1".into()));
            }
            max_total += task.max_points;
            check_localized(&self.locales, &task.prompt, &tat("prompt")).map_err(|(f, p)| err(f, p))?;
            check_localized(&self.locales, &task.solution, &tat("solution")).map_err(|(f, p)| err(f, p))?;
        }
        if exam.pass_mark == 0 || exam.pass_mark > max_total {
            return Err(err("exam.passMark".into(), format!("must be between 1 and {max_total}")));
        }
        let r = &self.rules;
        let unit = |v: f64| (0.0..=1.0).contains(&v);
        if !(unit(r.mastery_independent)
            && unit(r.mastery_guided)
            && unit(r.recall_pass_gain)
            && unit(r.recall_fail_loss)
            && unit(r.reteach_below))
        {
            return Err(err("rules".into(), "mastery numbers must lie in [0, 1]".into()));
        }
        if r.recall_batch_size == 0 || r.daily_target == 0 || r.weekly_target == 0 {
            return Err(err("rules".into(), "batch size and plan targets must be at least 1".into()));
        }
        if !(r.desired_retention > 0.0 && r.desired_retention < 1.0) {
            return Err(err("rules.desiredRetention".into(), "must lie in (0, 1)".into()));
        }
        Ok(())
    }

    fn check_hierarchy_acyclic(&self, file: &str) -> Result<(), PackError> {
        for (i, goal) in self.goals.iter().enumerate() {
            let mut seen = BTreeSet::new();
            let mut cur = goal.parent.as_deref();
            while let Some(p) = cur {
                if p == goal.id || !seen.insert(p) {
                    return Err(PackError {
                        file: file.to_owned(),
                        field: format!("goals[{i}].parent"),
                        problem: format!("the parent chain of `{}` forms a cycle", goal.id),
                    });
                }
                cur = self.goal(p).and_then(|g| g.parent.as_deref());
            }
        }
        Ok(())
    }

    /// Prerequisites form a DAG once a parent prerequisite is read as "all its leaves".
    fn check_prerequisites_acyclic(&self, file: &str) -> Result<(), PackError> {
        // Kahn's algorithm over the direct prerequisite edges; whatever cannot be ordered lies on a cycle.
        let mut indegree: BTreeMap<&str, usize> = self.goals.iter().map(|g| (g.id.as_str(), 0)).collect();
        let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for goal in &self.goals {
            let mut edges: Vec<&str> = goal.prerequisites.iter().map(String::as_str).collect();
            // A parent depends on its children: a parent is mastered only through them.
            edges.extend(self.goals.iter().filter(|c| c.parent.as_deref() == Some(goal.id.as_str())).map(|c| c.id.as_str()));
            for pre in edges {
                *indegree.entry(goal.id.as_str()).or_default() += 1;
                dependents.entry(pre).or_default().push(goal.id.as_str());
            }
        }
        let mut ready: Vec<&str> = indegree.iter().filter(|(_, d)| **d == 0).map(|(g, _)| *g).collect();
        let mut done = 0;
        while let Some(g) = ready.pop() {
            done += 1;
            for d in dependents.get(g).into_iter().flatten() {
                if let Some(n) = indegree.get_mut(d) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push(d);
                    }
                }
            }
        }
        if done == self.goals.len() {
            return Ok(());
        }
        let (i, goal) = self
            .goals
            .iter()
            .enumerate()
            .find(|(_, g)| indegree.get(g.id.as_str()).copied().unwrap_or(0) > 0 && !g.prerequisites.is_empty())
            .or_else(|| self.goals.iter().enumerate().find(|(_, g)| indegree.get(g.id.as_str()).copied().unwrap_or(0) > 0))
            .unwrap_or((0, &self.goals[0]));
        Err(PackError {
            file: file.to_owned(),
            field: format!("goals[{i}].prerequisites"),
            problem: format!("prerequisites of `{}` form a cycle", goal.id),
        })
    }

    fn index(&self) -> &PackIndex {
        self.index.0.get_or_init(|| PackIndex::of(&self.goals))
    }

    /// The goal with this id.
    pub fn goal(&self, id: &str) -> Option<&Goal> {
        self.index().position.get(id).and_then(|&i| self.goals.get(i))
    }

    /// Whether the goal has children.
    pub fn is_parent(&self, id: &str) -> bool {
        let index = self.index();
        // A child may name a parent id that no goal has (validation refuses such a pack).
        index.position.get(id).map_or_else(|| self.goals.iter().any(|g| g.parent.as_deref() == Some(id)), |&i| index.parent[i])
    }

    /// Leaf goals (the taught ones), in curriculum order.
    pub fn leaves(&self) -> impl Iterator<Item = &Goal> {
        self.goals.iter().zip(&self.index().parent).filter(|(_, &parent)| !parent).map(|(goal, _)| goal)
    }

    /// The leaves under a goal (the goal itself when it is a leaf), in curriculum order.
    pub fn leaves_under<'a>(&'a self, id: &'a str) -> Vec<&'a Goal> {
        let index = self.index();
        match index.position.get(id) {
            Some(&i) => index.under[i].iter().filter_map(|&l| self.goals.get(l)).collect(),
            // An id no goal has: only a leaf naming it as a parent could lie below it.
            None => self.leaves().filter(|leaf| self.is_within(&leaf.id, id)).collect(),
        }
    }

    /// Whether `goal` is `ancestor` or lies below it.
    pub fn is_within(&self, goal: &str, ancestor: &str) -> bool {
        let mut cur = Some(goal);
        let mut steps = 0;
        while let Some(g) = cur {
            if g == ancestor {
                return true;
            }
            steps += 1;
            if steps > self.goals.len() {
                return false;
            }
            cur = self.goal(g).and_then(|x| x.parent.as_deref());
        }
        false
    }

    /// The leaf goals a goal needs mastered, prerequisites on parents expanded to their leaves.
    pub fn prerequisite_leaves(&self, id: &str) -> Vec<&str> {
        let mut out = BTreeSet::new();
        if let Some(goal) = self.goal(id) {
            for pre in &goal.prerequisites {
                for leaf in self.leaves_under(pre) {
                    out.insert(leaf.id.as_str());
                }
            }
            // A goal inside a parent inherits the parent's prerequisites.
            if let Some(parent) = &goal.parent {
                out.extend(self.prerequisite_leaves(parent));
            }
        }
        out.into_iter().collect()
    }

    /// The card with this id and the leaf goal it belongs to.
    pub fn card(&self, id: &str) -> Option<(&Goal, &Card)> {
        self.goals.iter().find_map(|g| g.cards.iter().find(|c| c.id == id).map(|c| (g, c)))
    }

    /// The longest chain of prerequisites among leaves (a single goal has depth 1).
    pub fn prerequisite_depth(&self) -> usize {
        fn depth(pack: &Pack, id: &str, memo: &mut BTreeMap<String, usize>) -> usize {
            if let Some(d) = memo.get(id) {
                return *d;
            }
            let d = 1 + pack.prerequisite_leaves(id).iter().map(|p| depth(pack, p, memo)).max().unwrap_or(0);
            memo.insert(id.to_owned(), d);
            d
        }
        let mut memo = BTreeMap::new();
        self.leaves().map(|g| depth(self, &g.id, &mut memo)).max().unwrap_or(0)
    }

    /// A localized text for `locale`, falling back to the pack's first locale.
    pub fn text<'a>(&self, text: &'a Localized, locale: &str) -> &'a str {
        text.get(locale).or_else(|| self.locales.first().and_then(|l| text.get(l))).map(String::as_str).unwrap_or("")
    }
}

fn check_localized(locales: &[String], text: &Localized, field: &str) -> Result<(), (String, String)> {
    for locale in locales {
        match text.get(locale) {
            Some(t) if !t.trim().is_empty() => {}
            _ => return Err((format!("{field}.{locale}"), format!("missing text for locale `{locale}`"))),
        }
    }
    if let Some(extra) = text.keys().find(|k| !locales.contains(k)) {
        return Err((format!("{field}.{extra}"), format!("locale `{extra}` is not listed in `locales`")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../content/fractions")
    }

    fn json() -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir().join("pack.json")).unwrap()).unwrap()
    }

    fn load(value: &serde_json::Value) -> Result<Pack, PackError> {
        Pack::from_json("pack.json", &value.to_string(), |a| std::fs::read_to_string(dir().join("assets").join(a)).ok())
    }

    #[test]
    fn the_shipped_pack_loads_and_is_as_rich_as_promised() {
        let pack = load(&json()).unwrap();
        assert_eq!(pack.locales, vec!["de", "en"]);
        assert!(pack.leaves().count() >= 12);
        assert!(pack.prerequisite_depth() >= 3, "depth {}", pack.prerequisite_depth());
        assert!(pack.leaves().all(|g| g.cards.len() >= 3));
        assert!(pack.goals.iter().filter(|g| g.visualization.is_some()).count() >= 4);
        assert!(pack.goals.iter().filter_map(|g| g.visualization.as_ref()).all(|v| v.svg.contains("<svg")));
        assert!(pack.exam.tasks.len() >= 4);
    }

    #[test]
    fn the_pack_index_answers_as_a_scan_of_the_goals_does() {
        let pack = load(&json()).unwrap();
        assert!(pack.goals.iter().any(|g| g.parent.is_some()), "the shipped pack has parents to test with");
        let scan_parent = |id: &str| pack.goals.iter().any(|g| g.parent.as_deref() == Some(id));
        let scan_leaves: Vec<&str> = pack.goals.iter().filter(|g| !scan_parent(&g.id)).map(|g| g.id.as_str()).collect();
        assert_eq!(pack.leaves().map(|g| g.id.as_str()).collect::<Vec<_>>(), scan_leaves);
        for goal in &pack.goals {
            assert_eq!(pack.goal(&goal.id).map(|g| g.id.as_str()), Some(goal.id.as_str()));
            assert_eq!(pack.is_parent(&goal.id), scan_parent(&goal.id), "{}", goal.id);
            let scanned: Vec<&str> = scan_leaves.iter().copied().filter(|leaf| pack.is_within(leaf, &goal.id)).collect();
            assert_eq!(pack.leaves_under(&goal.id).iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), scanned, "{}", goal.id);
        }
        assert!(pack.goal("no-such-goal").is_none());
        assert!(pack.leaves_under("no-such-goal").is_empty());
    }

    #[test]
    fn a_queried_pack_equals_its_unqueried_copy() {
        let pack: Pack = serde_json::from_value(json()).unwrap();
        let copy: Pack = serde_json::from_value(json()).unwrap();
        assert!(pack.leaves().count() > 0);
        assert_eq!(pack, copy);
        assert_eq!(copy, pack);
    }

    #[test]
    fn a_cyclic_pack_fails_naming_the_prerequisites_field() {
        let mut v = json();
        // part-of-whole (goal 1) now needs simplify, which needs it transitively.
        v["goals"][1]["prerequisites"] = serde_json::json!(["simplify"]);
        let err = load(&v).unwrap_err();
        assert_eq!(err.file, "pack.json");
        assert!(err.field.contains("prerequisites"), "{err}");
        assert!(err.problem.contains("cycle"), "{err}");
    }

    #[test]
    fn a_missing_locale_fails_naming_the_text_and_the_locale() {
        let mut v = json();
        v["goals"][2]["cards"][1]["answer"].as_object_mut().unwrap().remove("en");
        let err = load(&v).unwrap_err();
        assert_eq!(err.field, "goals[2].cards[1].answer.en", "{err}");
    }

    #[test]
    fn an_unknown_key_fails_naming_the_key_and_the_place() {
        let mut v = json();
        v["goals"][3]["difficulty"] = serde_json::json!("hard");
        let err = load(&v).unwrap_err();
        assert!(err.problem.contains("unknown field `difficulty`"), "{err}");
        assert!(err.field.starts_with("line "), "{err}");
    }

    #[test]
    fn a_missing_asset_fails_naming_the_asset_field() {
        let mut v = json();
        v["goals"][1]["visualization"]["asset"] = serde_json::json!("nope.svg");
        let err = load(&v).unwrap_err();
        assert_eq!(err.field, "goals[1].visualization.asset", "{err}");
    }

    #[test]
    fn duplicate_goal_ids_fail() {
        let mut v = json();
        v["goals"][2]["id"] = serde_json::json!("part-of-whole");
        assert_eq!(load(&v).unwrap_err().field, "goals[2].id");
    }
}
