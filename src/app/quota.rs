//! Quota reconciliation (docs/registry.md): each tool's declared share of learner turns against the
//! calls the audit saw. The denominator is learner turns, reconstructed from the call trace by
//! a documented heuristic (see [`turns`]); verdicts follow the ratio bands of the registration
//! convention, with minimum samples and a visible "no statement yet".

use std::collections::BTreeMap;

use serde::Serialize;

use super::App;
use crate::error::AppError;
use crate::registry::Registry;
use crate::store::AuditRow;

/// Fewer turns than this: no error verdict yet.
pub(crate) const MIN_TURNS_ERROR: usize = 30;
/// Fewer turns than this: no warning verdict yet.
pub(crate) const MIN_TURNS_WARNING: usize = 100;

/// A verdict on one tool's quota.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `ok`, `warning`, `error` or `noStatementYet`.
    pub level: &'static str,
    /// measured / declared (none at 0 % or without turns).
    pub ratio: Option<f64>,
    /// The diagnosis by direction.
    pub diagnosis: Option<&'static str>,
}

/// The verdict for a declared quota (percent) given delivered calls in `turns` learner turns.
pub(crate) fn verdict(declared: u8, delivered: usize, turns: usize, rejected: usize, processed: usize) -> Verdict {
    if turns < MIN_TURNS_ERROR {
        return Verdict { level: "noStatementYet", ratio: None, diagnosis: None };
    }
    let measured = delivered as f64 / turns as f64;
    let warn_decidable = turns >= MIN_TURNS_WARNING;
    let (level, ratio) = if declared == 0 {
        let level = if measured > 0.25 {
            "error"
        } else if warn_decidable && measured > 0.125 {
            "warning"
        } else {
            "ok"
        };
        (level, None)
    } else {
        let ratio = measured / (f64::from(declared) / 100.0);
        // At 75 % and 100 % the scale ends: no upper bound.
        let capped = declared >= 75;
        let level = if ratio < 0.5 || (!capped && ratio > 2.0) {
            "error"
        } else if warn_decidable && (ratio < 0.75 || (!capped && ratio > 1.33)) {
            "warning"
        } else {
            "ok"
        };
        (level, Some(ratio))
    };
    let diagnosis = if delivered == 0 && declared > 0 {
        Some("unreachable: no seam, no description that speaks to the situation, or a stale registration")
    } else if delivered == 0 {
        Some("consistent, yet a finding: an unusable description or an unneeded tool look alike")
    } else if level != "ok" && (ratio.is_some_and(|r| r < 1.0)) {
        Some("overlooked: the description is too narrow, a negative case too broad, or a neighbour catches its turns")
    } else if level != "ok" {
        Some("too broad: the description claims too much or negative cases are missing")
    } else if processed >= 10 && rejected * 10 > processed * 3 {
        Some("quota matches, rejection rate high: the boundary declaration is missing")
    } else {
        None
    };
    Verdict { level, ratio, diagnosis }
}

/// One tool's row in the quota table.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaRow {
    pub tool: String,
    /// Declared share, percent.
    pub declared: Option<u8>,
    /// Calls received in the window.
    pub delivered: usize,
    /// Calls that reached an exit.
    pub processed: usize,
    /// Delivery loss (`delivered − processed`), reported on its own.
    pub delivery_loss: usize,
    pub rejected: usize,
    /// delivered / turns.
    pub measured: Option<f64>,
    pub verdict: Verdict,
}

/// A suspected anti-pattern seen in the trace (suspected, never fact).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Suspicion {
    pub kind: &'static str,
    pub count: usize,
}

/// The quota table over the window.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaReport {
    /// Learner turns in the window (the denominator).
    pub turns: usize,
    /// Window size in turns.
    pub window: usize,
    pub rows: Vec<QuotaRow>,
    pub suspected: Vec<Suspicion>,
}

#[derive(Debug)]
struct Call {
    tool: String,
    journey: String,
    started: Option<i64>,
    exit: Option<(String, Option<String>, i64)>,
}

/// Turn reconstruction (docs/registry.md): per journey, calls in start order; a turn is the first
/// context read after the previous turn's last call, so a context read that follows any other
/// call starts a new turn and consecutive context reads (polling) stay in one. A context read
/// within `gap_ms` after a successful write is also counted as a suspected redundant reload.
/// The context tool's first read after the previous turn's last call starts a turn.
/// Returns per call its turn number and the suspicions.
fn turns(calls: &[&Call], context_tool: &str, gap_ms: i64) -> (Vec<usize>, usize, usize) {
    let mut turn_of = Vec::with_capacity(calls.len());
    let mut turn = 0usize;
    let mut started_any = false;
    let mut last_tool: Option<&str> = None;
    let mut last_write_success_at: Option<i64> = None;
    let mut reload_after_write = 0;
    let mut conflicts_in_turn = 0;
    let mut second_conflicts = 0;
    for call in calls {
        let at = call.started.unwrap_or(0);
        if call.tool == context_tool {
            // Suspected, never fact: a reload right after a successful write.
            if last_write_success_at.is_some_and(|t| at - t <= gap_ms) && last_tool != Some(context_tool) {
                reload_after_write += 1;
            }
            if !started_any || last_tool != Some(context_tool) {
                turn += 1;
                started_any = true;
                conflicts_in_turn = 0;
            }
        }
        turn_of.push(turn.max(1));
        if let Some((phase, code, exit_at)) = &call.exit {
            if call.tool != context_tool && phase == "completed" {
                last_write_success_at = Some(*exit_at);
            }
            if code.as_deref() == Some("STATE_CONFLICT") {
                conflicts_in_turn += 1;
                if conflicts_in_turn == 2 {
                    second_conflicts += 1;
                }
            }
        }
        last_tool = Some(call.tool.as_str());
    }
    (turn_of, reload_after_write, second_conflicts)
}

/// Builds the quota report from audit rows.
pub(crate) fn reconcile(rows: &[AuditRow], registry: &Registry, window: usize, gap_ms: i64) -> QuotaReport {
    let mut calls: BTreeMap<&str, Call> = BTreeMap::new();
    for r in rows {
        let call = calls.entry(r.call_id.as_str()).or_insert_with(|| Call {
            tool: r.tool.clone(),
            journey: r.journey_id.clone().unwrap_or_default(),
            started: None,
            exit: None,
        });
        if r.phase == "started" {
            call.started = Some(r.at_ms);
        } else {
            call.exit = Some((r.phase.clone(), r.code.clone(), r.at_ms));
            if call.journey.is_empty() {
                call.journey = r.journey_id.clone().unwrap_or_default();
            }
        }
    }
    let mut by_journey: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for call in calls.values().filter(|c| c.started.is_some()) {
        by_journey.entry(call.journey.as_str()).or_default().push(call);
    }
    // (turn start time, journey, turn) for every turn, to cut the window over the last N turns.
    let mut all_turns: Vec<(i64, &str, usize)> = Vec::new();
    let mut assigned: Vec<(&Call, &str, usize)> = Vec::new();
    let (mut reloads, mut conflicts) = (0, 0);
    for (journey, list) in by_journey.iter_mut() {
        list.sort_by_key(|c| c.started);
        let (turn_of, r, c) = turns(list, registry.context_tool.unwrap_or_default(), gap_ms);
        reloads += r;
        conflicts += c;
        let mut seen = 0;
        for (call, t) in list.iter().zip(&turn_of) {
            if *t > seen {
                seen = *t;
                all_turns.push((call.started.unwrap_or(0), journey, *t));
            }
            assigned.push((call, journey, *t));
        }
    }
    all_turns.sort();
    let keep: std::collections::BTreeSet<(&str, usize)> = all_turns.iter().rev().take(window).map(|(_, j, t)| (*j, *t)).collect();
    let turns_in_window = keep.len();
    let rows = registry
        .tools
        .iter()
        .map(|tool| {
            let mine: Vec<&&Call> =
                assigned.iter().filter(|(c, j, t)| c.tool == tool.name && keep.contains(&(*j, *t))).map(|(c, _, _)| c).collect();
            let delivered = mine.len();
            let processed = mine.iter().filter(|c| c.exit.is_some()).count();
            let rejected = mine.iter().filter(|c| c.exit.as_ref().is_some_and(|(p, _, _)| p == "rejected")).count();
            let measured = (turns_in_window > 0).then(|| delivered as f64 / turns_in_window as f64);
            let verdict = match tool.quota {
                Some(q) => verdict(q, delivered, turns_in_window, rejected, processed),
                None => Verdict {
                    level: "noStatementYet",
                    ratio: None,
                    diagnosis: Some("no declared quota: it is measured over the first full window"),
                },
            };
            QuotaRow {
                tool: tool.name.to_owned(),
                declared: tool.quota,
                delivered,
                processed,
                delivery_loss: delivered - processed,
                rejected,
                measured,
                verdict,
            }
        })
        .collect();
    QuotaReport {
        turns: turns_in_window,
        window,
        rows,
        suspected: vec![
            Suspicion { kind: "contextReadRightAfterASuccessfulMutation", count: reloads },
            Suspicion { kind: "secondConflictReloadInOneTurn", count: conflicts },
        ],
    }
}

/// Registry state, whole-picture report and quota table in one document.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryReport {
    /// The handshake result and the whole picture.
    pub registry: Registry,
    /// The quota table.
    pub quota: QuotaReport,
}

impl App {
    /// The operator's registry report.
    pub async fn registry_report(&self) -> Result<RegistryReport, AppError> {
        let window = self.settings.quota_window;
        // Enough rows for the window: a turn rarely has more than a handful of calls.
        let limit = i64::try_from(window.saturating_mul(40)).unwrap_or(i64::MAX);
        let rows = self.store.tool_call_log(limit).await?;
        Ok(RegistryReport { registry: self.registry.clone(), quota: reconcile(&rows, &self.registry, window, self.settings.reload_gap_ms) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_thirty_turns_there_is_no_statement_yet() {
        assert_eq!(verdict(25, 0, 29, 0, 0).level, "noStatementYet");
        assert_eq!(verdict(25, 0, 30, 0, 0).level, "error");
    }

    #[test]
    fn errors_need_thirty_turns_and_warnings_a_hundred() {
        // 25 % declared, 40 % measured: ratio 1.6 — a warning, decidable only from 100 turns.
        assert_eq!(verdict(25, 24, 60, 0, 24).level, "ok");
        assert_eq!(verdict(25, 40, 100, 0, 40).level, "warning");
        // Ratio 2.4: an error already at 50 turns.
        assert_eq!(verdict(25, 30, 50, 0, 30).level, "error");
    }

    #[test]
    fn the_band_edges_are_ratios() {
        let at = |delivered| verdict(50, delivered, 100, 0, delivered);
        assert_eq!(at(50).level, "ok");
        assert_eq!(at(38).level, "ok"); // 0.76
        assert_eq!(at(37).level, "warning"); // 0.74
        assert_eq!(at(66).level, "ok"); // 1.32
        assert_eq!(at(67).level, "warning"); // 1.34
        assert_eq!(at(25).level, "warning"); // 0.50 exactly: not below
        assert_eq!(at(24).level, "error"); // 0.48
        assert_eq!(verdict(25, 50, 100, 0, 50).level, "warning"); // 2.0 exactly
        assert_eq!(verdict(25, 51, 100, 0, 51).level, "error"); // 2.04
    }

    #[test]
    fn zero_percent_uses_absolute_bounds() {
        assert_eq!(verdict(0, 12, 100, 0, 12).level, "ok");
        assert_eq!(verdict(0, 13, 100, 0, 13).level, "warning");
        assert_eq!(verdict(0, 26, 100, 0, 26).level, "error");
        assert_eq!(verdict(0, 0, 100, 0, 0).diagnosis.map(|d| d.starts_with("consistent")), Some(true));
    }

    #[test]
    fn at_seventy_five_and_a_hundred_there_is_no_upper_bound() {
        assert_eq!(verdict(100, 100, 100, 0, 100).level, "ok");
        assert_eq!(verdict(75, 100, 100, 0, 100).level, "ok");
        assert_eq!(verdict(100, 74, 100, 0, 74).level, "warning");
        assert_eq!(verdict(100, 49, 100, 0, 49).level, "error");
    }

    #[test]
    fn the_diagnosis_follows_the_direction() {
        assert!(verdict(50, 0, 100, 0, 0).diagnosis.unwrap().starts_with("unreachable"));
        assert!(verdict(50, 20, 100, 0, 20).diagnosis.unwrap().starts_with("overlooked"));
        assert!(verdict(25, 60, 100, 0, 60).diagnosis.unwrap().starts_with("too broad"));
        assert!(verdict(25, 25, 100, 12, 25).diagnosis.unwrap().contains("boundary declaration is missing"));
    }

    fn row(call: &str, phase: &str, tool: &str, code: Option<&str>, at: i64) -> AuditRow {
        AuditRow {
            call_id: call.into(),
            phase: phase.into(),
            tool: tool.into(),
            journey_id: Some("j".into()),
            code: code.map(Into::into),
            at_ms: at,
        }
    }

    #[test]
    fn turns_are_counted_from_the_trace_and_suspicions_reported() {
        use crate::registry::{relock, Exit, Kind, Lock, Manifest, Role, ToolMeta};
        // Three tools of the coach's shape, registered here so the test needs no transport.
        let tool = |name: &'static str, kind: Kind, role: Role, quota: u8| ToolMeta {
            name,
            kind,
            role,
            manifest: Manifest {
                intent: "Does one thing for the learner.",
                negative_cases: &["Not otherwise."],
                boundary: "nothing else",
                cost: "one round trip",
                cadence: "per turn",
                scope: "own session",
                data_ownership: "own journey",
                needs: &[],
                quota: Some(quota),
                retry: "same result",
                exits: &[Exit::Completed, Exit::Rejected, Exit::Error],
                registration_version: 1,
            },
        };
        let tools = [
            tool("get_skillpilot_learning_context", Kind::Read, Role::Context, 100),
            tool("choose_skillpilot_option", Kind::Write, Role::Other, 0),
            tool("complete_skillpilot_goal", Kind::Write, Role::Other, 25),
        ];
        let registry = crate::registry::Registry::start(&tools, &relock(&tools, &Lock::default()).unwrap());
        let context_tool = registry.context_tool.unwrap();
        let mut rows = Vec::new();
        let mut t = 0;
        let mut call = |tool: &str, phase_exit: &str, code: Option<&str>, rows: &mut Vec<AuditRow>| {
            t += 10_000;
            let id = format!("c{t}");
            rows.push(row(&id, "started", tool, None, t));
            rows.push(row(&id, phase_exit, tool, code, t + 5));
        };
        // Turn 1: context + complete; then an immediate reload (suspected).
        call(context_tool, "completed", None, &mut rows);
        call("complete_skillpilot_goal", "completed", None, &mut rows);
        let last = rows.last().unwrap().at_ms;
        rows.push(row("reload", "started", context_tool, None, last + 100));
        rows.push(row("reload", "completed", context_tool, None, last + 105));
        // Turn 2: context, two conflicts.
        call(context_tool, "completed", None, &mut rows);
        call("complete_skillpilot_goal", "rejected", Some("STATE_CONFLICT"), &mut rows);
        call("complete_skillpilot_goal", "rejected", Some("STATE_CONFLICT"), &mut rows);
        // A call that never reached an exit.
        rows.push(row("lost", "started", "choose_skillpilot_option", None, 999_999));
        let report = reconcile(&rows, &registry, 1000, 2_000);
        assert_eq!(report.turns, 2);
        let complete = report.rows.iter().find(|r| r.tool == "complete_skillpilot_goal").unwrap();
        assert_eq!((complete.delivered, complete.processed, complete.rejected), (3, 3, 2));
        let choose = report.rows.iter().find(|r| r.tool == "choose_skillpilot_option").unwrap();
        assert_eq!(choose.delivery_loss, 1);
        assert_eq!(report.suspected[0].count, 1);
        assert_eq!(report.suspected[1].count, 1);
        assert!(report.rows.iter().all(|r| r.verdict.level == "noStatementYet"));
    }
}
