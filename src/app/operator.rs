//! Operator actions: list events as JSON lines, verify every hash chain, and replay the
//! log into the shadow view table to prove it equals the live one. Never MCP tools.

use std::collections::BTreeMap;

use aggregates::learning_journey::LearningJourney;
use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use serde_json::{json, Value};

use super::journeys::{decode_event, view_of};
use super::App;
use crate::error::AppError;
use crate::store::chain::{chain_hash, Link, GENESIS};
use crate::store::checkpoints::{checkpoint_hash, Checkpoint, Heads};
use crate::store::{KeyMismatch, StoredEvent, ViewTable};

const PAGE: i64 = 1000;

/// Filters for `skillpilot events`.
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    /// Only this journey.
    pub journey_id: Option<String>,
    /// Only these event types.
    pub event_type: Option<String>,
    /// Only events at or after.
    pub since: Option<DateTime<Utc>>,
    /// Only events before.
    pub until: Option<DateTime<Utc>>,
}

/// The first broken link of a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokenLink {
    pub journey_id: String,
    /// The sequence number of the first event that does not verify.
    pub sequence: u64,
    /// What is wrong.
    pub problem: String,
}

/// The result of `audit verify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditReport {
    pub streams: usize,
    pub events: usize,
    /// The first broken link, if any.
    pub broken: Option<BrokenLink>,
}

/// The result of `replay`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayReport {
    pub journeys: usize,
    pub events: usize,
    /// Journeys whose live view differs from the rebuilt one (missing, stale or different).
    pub differing: Vec<String>,
    /// Analytic tables whose live rows differ from the rebuilt ones.
    pub analytics_differing: Vec<String>,
}

fn event_json(e: &StoredEvent) -> Value {
    json!({
        "aggregateType": e.aggregate_type,
        "aggregateId": e.aggregate_id,
        "sequence": e.sequence,
        "eventType": e.event_type,
        "eventVersion": e.event_version,
        "payload": e.payload,
        "metadata": e.metadata,
    })
}

fn occurred_at(e: &StoredEvent) -> Option<DateTime<Utc>> {
    e.metadata.get("occurredAt").and_then(Value::as_str).and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|t| t.with_timezone(&Utc))
}

/// The first checkpoint whose link to its predecessor does not verify, or the newest one when
/// its content no longer matches its hash (only the newest one's content is ever compared).
fn broken_checkpoint_chain(links: &[(i64, String, String)], latest: Option<&Checkpoint>) -> Option<BrokenLink> {
    let broken = |seq: i64, problem: &str| BrokenLink {
        journey_id: "(chain checkpoints)".into(),
        sequence: u64::try_from(seq).unwrap_or(0),
        problem: format!("checkpoint {seq}: {problem}"),
    };
    let mut prev = GENESIS;
    for (seq, prev_hash, hash) in links {
        if prev_hash != prev {
            return Some(broken(*seq, "its prevHash is not the previous checkpoint's hash (a checkpoint was removed)"));
        }
        prev = hash;
    }
    latest
        .filter(|c| checkpoint_hash(&c.prev_hash, c.at_ms, &c.heads) != c.hash)
        .map(|c| broken(c.seq, "its content no longer matches its hash"))
}

/// A journey whose log ends before the version its view row reflects or the newest checkpoint
/// recorded: its newest events were deleted.
fn missing_tail(heads: &Heads, views: &BTreeMap<String, u64>, checkpoint: Option<&Checkpoint>) -> Option<BrokenLink> {
    let head = |journey: &str| heads.get(journey).map(|(v, _)| *v).unwrap_or(0);
    let recorded = views.iter().map(|(j, v)| (j, *v, "its view reflects".to_owned())).chain(
        checkpoint.into_iter().flat_map(|c| c.heads.iter().map(move |(j, (v, _))| (j, *v, format!("checkpoint {} recorded", c.seq)))),
    );
    for (journey, version, source) in recorded {
        let at = head(journey);
        if at < version {
            let problem = if at == 0 {
                format!("the journey has no events left, but {source} version {version}: its events were deleted")
            } else {
                format!("the log ends at version {at}, but {source} version {version}: events {}..={version} were deleted", at + 1)
            };
            return Some(BrokenLink { journey_id: journey.clone(), sequence: at + 1, problem });
        }
    }
    None
}

impl App {
    /// Calls `visit` with every event in (journey, sequence) order, page by page.
    async fn each_event(&self, journey: Option<&str>, mut visit: impl FnMut(&StoredEvent) -> Result<(), AppError>) -> Result<(), AppError> {
        if let Some(id) = journey {
            for e in self.store.events_after(id, 0).await? {
                visit(&e)?;
            }
            return Ok(());
        }
        let mut after: Option<(String, u64)> = None;
        loop {
            let page = self.store.scan_events(after.as_ref().map(|(id, s)| (id.as_str(), *s)), PAGE).await?;
            for e in &page {
                visit(e)?;
            }
            match page.last() {
                Some(last) if page.len() as i64 == PAGE => after = Some((last.aggregate_id.clone(), last.sequence as u64)),
                _ => return Ok(()),
            }
        }
    }

    /// Streams matching events as JSON values.
    pub async fn list_events(&self, filter: &EventFilter, mut out: impl FnMut(Value)) -> Result<usize, AppError> {
        let mut count = 0;
        self.each_event(filter.journey_id.as_deref(), |e| {
            if filter.event_type.as_deref().is_some_and(|t| t != e.event_type) {
                return Ok(());
            }
            let at = occurred_at(e);
            if filter.since.is_some_and(|s| at.is_none_or(|a| a < s)) || filter.until.is_some_and(|u| at.is_none_or(|a| a >= u)) {
                return Ok(());
            }
            count += 1;
            out(event_json(e));
            Ok(())
        })
        .await?;
        Ok(count)
    }

    /// Whether any event of this journey is in the log.
    pub async fn journey_exists(&self, journey_id: &str) -> Result<bool, AppError> {
        Ok(!self.store.events_upto(journey_id, 1).await?.is_empty())
    }

    /// Verifies every chain, reports progress every `every` events, and records the run; a
    /// clean run also records a chain checkpoint of every journey's head.
    pub async fn audit_verify_recorded(&self, every: usize, progress: impl FnMut(usize)) -> Result<AuditReport, AppError> {
        let (report, heads) = self.audit_verify_with(every, progress).await?;
        let now = self.clock.now().timestamp_millis();
        let run = crate::store::AuditRun {
            finished_ms: now,
            streams: i64::try_from(report.streams).unwrap_or(i64::MAX),
            events: i64::try_from(report.events).unwrap_or(i64::MAX),
            intact: report.broken.is_none(),
            broken_at: report.broken.as_ref().map(|b| format!("journey {} sequence {}: {}", b.journey_id, b.sequence, b.problem)),
        };
        self.store.record_audit_run(&run).await?;
        if report.broken.is_none() {
            self.store.record_checkpoint(now, &heads).await?;
        }
        Ok(report)
    }

    /// Recomputes every chain: sequence gapless from 1, each `prevHash` the previous event's
    /// `chainHash`, each `chainHash` the hash of the event as stored — and checks that no
    /// journey's log ends before the version its view row or the newest checkpoint recorded
    /// (a deleted tail leaves the remaining chain intact, so only these notice it), and that
    /// every commit's idempotency key agrees with the request ids its events carry (ADR 0010).
    pub async fn audit_verify(&self) -> Result<AuditReport, AppError> {
        Ok(self.audit_verify_with(usize::MAX, |_| {}).await?.0)
    }

    async fn audit_verify_with(&self, every: usize, mut progress: impl FnMut(usize)) -> Result<(AuditReport, Heads), AppError> {
        let mut report = AuditReport { streams: 0, events: 0, broken: None };
        // Read before the log: views and checkpoints only ever lag it, so a write racing this
        // scan can never look like a deletion.
        let views = self.store.view_versions(ViewTable::Context).await?;
        let links = self.store.checkpoint_links().await?;
        let latest = self.store.latest_checkpoint().await?;
        if let Some(broken) = broken_checkpoint_chain(&links, latest.as_ref()) {
            return Ok((AuditReport { broken: Some(broken), ..report }, Heads::new()));
        }
        let checkpoint = latest.as_ref();
        let mut heads = Heads::new();
        let mut current: Option<(String, u64, String)> = None;
        self.each_event(None, |e| {
            if report.broken.is_some() {
                return Ok(());
            }
            let (expected_seq, prev) = match &current {
                Some((id, seq, hash)) if *id == e.aggregate_id => (seq + 1, hash.clone()),
                _ => {
                    report.streams += 1;
                    (1, GENESIS.to_owned())
                }
            };
            report.events += 1;
            if report.events % every.max(1) == 0 {
                progress(report.events);
            }
            let sequence = e.sequence as u64;
            let broken = |problem: String| Some(BrokenLink { journey_id: e.aggregate_id.clone(), sequence, problem });
            let stored_prev = e.metadata.get("prevHash").and_then(Value::as_str).unwrap_or_default();
            let stored_hash = e.metadata.get("chainHash").and_then(Value::as_str).unwrap_or_default();
            let computed = chain_hash(&Link {
                aggregate_type: &e.aggregate_type,
                aggregate_id: &e.aggregate_id,
                sequence,
                event_type: &e.event_type,
                event_version: &e.event_version,
                payload: &e.payload,
                metadata: &e.metadata,
            });
            let recorded = checkpoint.and_then(|c| c.heads.get(&e.aggregate_id)).filter(|(v, _)| *v == sequence);
            if sequence != expected_seq {
                report.broken = broken(format!("sequence gap: expected {expected_seq}"));
            } else if stored_prev != prev {
                report.broken = broken("prevHash does not match the previous event's chainHash".into());
            } else if stored_hash != computed {
                report.broken = broken("the event was altered: its content no longer matches its chainHash".into());
            } else if let Some((_, hash)) = recorded.filter(|(_, h)| *h != stored_hash) {
                report.broken = broken(format!(
                    "the event differs from the one checkpoint {} recorded (chainHash {hash})",
                    checkpoint.map(|c| c.seq).unwrap_or(0)
                ));
            }
            heads.insert(e.aggregate_id.clone(), (sequence, stored_hash.to_owned()));
            current = Some((e.aggregate_id.clone(), sequence, stored_hash.to_owned()));
            Ok(())
        })
        .await?;
        if report.broken.is_none() {
            report.broken = missing_tail(&heads, &views, checkpoint);
        }
        if report.broken.is_none() {
            report.broken = self.store.commit_key_mismatch().await?.map(|(journey_id, sequence, kind)| BrokenLink {
                journey_id,
                sequence,
                problem: match kind {
                    KeyMismatch::Unkeyed => {
                        "the commit starting here carries a request id without its idempotency key (commit_requests): a retry of it would be written again".into()
                    }
                    KeyMismatch::Orphaned => "an idempotency key (commit_requests) names this event, which does not carry its request id".into(),
                },
            });
        }
        Ok((report, heads))
    }

    /// Journeys whose log ends before the version their live view reflects (their newest events
    /// were deleted): a rebuilt view must never replace theirs.
    pub async fn journeys_behind_their_views(&self) -> Result<Vec<String>, AppError> {
        // Views first: they only lag the log, so a concurrent write is never mistaken for this.
        let views = self.store.view_versions(ViewTable::Context).await?;
        let heads: BTreeMap<String, u64> = self.store.stream_heads().await?.into_iter().collect();
        Ok(views.into_iter().filter(|(j, v)| heads.get(j).copied().unwrap_or(0) < *v).map(|(j, _)| j).collect())
    }

    /// Rebuilds the full-context view of every journey from the log into the shadow table
    /// and compares it with the live table.
    pub async fn replay(&self) -> Result<ReplayReport, AppError> {
        let started = std::time::Instant::now();
        self.store.clear_view(ViewTable::ContextShadow).await?;
        let mut states: BTreeMap<String, LearningJourney> = BTreeMap::new();
        let mut events = 0;
        let mut failure = None;
        self.each_event(None, |e| {
            match decode_event(e) {
                Ok(event) => states.entry(e.aggregate_id.clone()).or_default().apply(event),
                Err(err) => failure = Some(err),
            }
            events += 1;
            Ok(())
        })
        .await?;
        if let Some(err) = failure {
            return Err(err);
        }
        let folded = started.elapsed();
        let live: BTreeMap<String, (u64, Value)> =
            self.store.views(ViewTable::Context).await?.into_iter().map(|(id, v, p)| (id, (v, p))).collect();
        let mut differing = Vec::new();
        let mut rebuilt = Vec::with_capacity(states.len());
        for (journey_id, state) in &states {
            let pack = self.pack_of(state)?;
            let view = view_of(state, &pack);
            if live.get(journey_id).is_none_or(|(version, payload)| *version != state.version || *payload != view) {
                differing.push(journey_id.clone());
            }
            rebuilt.push((journey_id.clone(), state.version, view));
        }
        self.store.save_views(ViewTable::ContextShadow, &rebuilt).await?;
        differing.extend(live.keys().filter(|id| !states.contains_key(*id)).cloned());
        let views_done = started.elapsed();
        let analytics_differing = self.replay_analytics().await?;
        tracing::info!(
            events,
            journeys = states.len(),
            fold_ms = folded.as_millis() as u64,
            views_ms = (views_done - folded).as_millis() as u64,
            analytics_ms = (started.elapsed() - views_done).as_millis() as u64,
            "replay finished"
        );
        Ok(ReplayReport { journeys: states.len(), events, differing, analytics_differing })
    }
}
