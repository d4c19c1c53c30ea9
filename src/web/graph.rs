//! The goal graph as SVG: leaves in rows by prerequisite depth (top: no prerequisites), arrows
//! from prerequisite to dependent, colours by state, the active goal marked, the focus outlined.

use std::collections::BTreeMap;
use std::fmt::Write;

use aggregates::curriculum::Pack;
use aggregates::learning_journey::{GoalStatus, LearningJourney};

use super::text::Texts;

const W: usize = 230;
const H: usize = 54;
const GAP_X: usize = 40;
const GAP_Y: usize = 36;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn depth<'a>(pack: &'a Pack, id: &'a str, memo: &mut BTreeMap<&'a str, usize>) -> usize {
    if let Some(d) = memo.get(id) {
        return *d;
    }
    let d = pack.prerequisite_leaves(id).into_iter().map(|p| 1 + depth(pack, p, memo)).max().unwrap_or(0);
    memo.insert(id, d);
    d
}

/// The SVG of a journey's goals.
pub(super) fn goal_graph(pack: &Pack, state: &LearningJourney, lang: &str, t: &Texts) -> String {
    let mut memo = BTreeMap::new();
    // The focus as the journey reads it: its area and the goals the area builds on.
    let scope = state.focus_scope(pack);
    let mut columns: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for leaf in pack.leaves() {
        let d = depth(pack, &leaf.id, &mut memo);
        columns.entry(d).or_default().push(&leaf.id);
    }
    let widest = columns.values().map(Vec::len).max().unwrap_or(1);
    let width = 20 + widest * (W + GAP_X);
    let mut pos: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (level, ids) in &columns {
        // Centre each level.
        let offset = (widest - ids.len()) * (W + GAP_X) / 2;
        for (i, id) in ids.iter().enumerate() {
            pos.insert(id, (20 + offset + i * (W + GAP_X), 20 + level * (H + GAP_Y)));
        }
    }
    let height = 30 + columns.len() * (H + GAP_Y);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" style="max-width:{width}px" role="img" aria-label="{}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>"##,
        escape(t.graph_label)
    );
    for leaf in pack.leaves() {
        let Some(&(x2, y2)) = pos.get(leaf.id.as_str()) else { continue };
        for pre in pack.prerequisite_leaves(&leaf.id) {
            // Only direct edges: skip a prerequisite implied by another one.
            let implied =
                pack.prerequisite_leaves(&leaf.id).iter().any(|other| *other != pre && pack.prerequisite_leaves(other).contains(&pre));
            if implied {
                continue;
            }
            if let Some(&(x1, y1)) = pos.get(pre) {
                let _ = write!(
                    svg,
                    r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#555" stroke-width="1.5" marker-end="url(#arrow)"/>"##,
                    x1 + W / 2,
                    y1 + H,
                    x2 + W / 2,
                    y2
                );
            }
        }
    }
    for leaf in pack.leaves() {
        let Some(&(x, y)) = pos.get(leaf.id.as_str()) else { continue };
        let status = state.status(pack, &leaf.id);
        let (fill, ink, word) = match status {
            GoalStatus::Mastered => ("#3d7a3d", "#fff", t.legend_mastered),
            GoalStatus::Active => ("#f0a202", "#1d1d1b", t.legend_active),
            GoalStatus::Available => ("#4a78b5", "#fff", t.legend_available),
            GoalStatus::Locked => ("#b8b8b2", "#1d1d1b", t.legend_locked),
        };
        let in_focus = scope.as_ref().is_some_and(|s| s.contains(leaf.id.as_str()));
        let stroke =
            if status == GoalStatus::Active { r##"stroke="#1d1d1b" stroke-width="4""## } else { r##"stroke="#333" stroke-width="1""## };
        let title = pack.text(&leaf.title, lang);
        let mastery = state.goals.get(&leaf.id).map(|g| g.mastery).unwrap_or(0.0);
        let short: String =
            if title.chars().count() > 30 { title.chars().take(29).chain(std::iter::once('…')).collect() } else { title.to_owned() };
        let _ = write!(
            svg,
            r##"<g class="goal goal-{status:?}" data-status="{status:?}"><title>{} — {word} ({:.0} %)</title><rect x="{x}" y="{y}" width="{W}" height="{H}" rx="8" fill="{fill}" {stroke}/>"##,
            escape(title),
            mastery * 100.0
        );
        if in_focus {
            let _ = write!(
                svg,
                r##"<rect class="focus" x="{}" y="{}" width="{}" height="{}" rx="11" fill="none" stroke="#1f3a5f" stroke-dasharray="5 3" stroke-width="2"><title>{}</title></rect>"##,
                x - 4,
                y - 4,
                W + 8,
                H + 8,
                escape(t.focus)
            );
        }
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" font-family="system-ui, sans-serif" font-size="13" fill="{ink}">{}</text><text x="{}" y="{}" font-family="system-ui, sans-serif" font-size="11" fill="{ink}">{word} · {:.0} %</text></g>"##,
            x + 10,
            y + 22,
            escape(&short),
            x + 10,
            y + 41,
            mastery * 100.0
        );
    }
    svg.push_str("</svg>");
    svg
}
