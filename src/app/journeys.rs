//! The command service (docs/tool-contract.md, errors, §5.7): load the journey (snapshot + tail), look up the
//! idempotency record, check `expectedStateVersion`, let the aggregate decide, then commit the
//! events with their metadata and chain hashes, the view row of the state they reach, a due
//! snapshot and the tool call's audit rows in one transaction (ADR 0006). See
//! `docs/adr/0001-idempotency-and-chain-in-event-metadata.md` for why the idempotency record
//! and the chain ride in each event's metadata.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aggregates::curriculum::Pack;
use aggregates::learning_journey::{JourneyCommand, JourneyEvent, JourneyServices, LearningJourney, EVENT_VERSION};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use cqrs_es::persist::SerializedEvent;
use cqrs_es::{Aggregate, DomainEvent};
use projections::full_context::{full_context, persisted_view, ContextInput, FullContext, Sealer};
use serde_json::{json, Value};
use uuid::Uuid;

use super::tokens::NoTokens;
use super::App;
use crate::error::AppError;
use crate::store::chain::{chain_hash, Link, GENESIS};
use crate::store::{Commit, Snapshot, StoreError, StoredEvent, ToolCallRow, ViewTable};

/// A snapshot is written when this many events were appended since the last one.
pub const SNAPSHOT_EVERY: u64 = 25;

/// Who caused a command (metadata; never an identity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// A learner through a coach or the web GUI.
    Learner,
    /// An operator tool.
    Operator,
}

impl Actor {
    fn as_str(self) -> &'static str {
        match self {
            Self::Learner => "learner",
            Self::Operator => "operator",
        }
    }
}

/// The retry identity of a write: a request id and the blake3 hash of its canonical input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestIdentity {
    /// `clientRequestId`, or an id derived from an option token or capability.
    pub request_id: String,
    /// blake3 over the validated, canonicalised input.
    pub replay_hash: String,
}

/// The tool call a command runs in: its audit rows commit with the command's events.
#[derive(Clone, Debug)]
pub struct CallAudit {
    /// The call's `started` row, as its handler wrote it.
    pub started_row: ToolCallRow,
    pub started: std::time::Instant,
}

impl CallAudit {
    /// The call's `started` row and its `completed` exit, for a commit of `appended` events.
    pub fn rows(&self, journey_id: &str, appended: usize, now_ms: i64) -> Vec<ToolCallRow> {
        let mut exit = self.started_row.clone();
        exit.phase = "completed";
        exit.journey_id = Some(journey_id.to_owned());
        exit.events_appended = i64::try_from(appended).unwrap_or(i64::MAX);
        exit.duration_ms = i64::try_from(self.started.elapsed().as_millis()).ok();
        exit.at_ms = now_ms;
        vec![self.started_row.clone(), exit]
    }
}

/// One command to run.
#[derive(Clone, Debug)]
pub struct CommandRequest {
    pub journey_id: String,
    pub command: JourneyCommand,
    /// The version the caller saw; `None` where the version is derived (capabilities).
    pub expected_version: Option<u64>,
    pub identity: Option<RequestIdentity>,
    /// The tool or entry point (metadata).
    pub tool: &'static str,
    pub actor: Actor,
    /// The tool call, whose audit rows commit with the events; `None` outside tool calls.
    pub call: Option<CallAudit>,
}

/// A journey as loaded.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Shared with the journey cache: a load that finds no new events copies nothing.
    pub state: Arc<LearningJourney>,
    /// Chain hash of the last event (GENESIS for an empty stream).
    pub last_hash: String,
    /// The version the newest snapshot reflected (0 without).
    pub snapshot_version: u64,
    /// Until when this process treats the journey as written by others too: set when a load
    /// found events after the state this process last saw of it (another instance, or an
    /// operator's process, wrote them). Until then a write validates the cached state first.
    pub shared_until: Option<Instant>,
}

/// How long a journey another writer touched is validated before every write (ADR 0009): long
/// enough that a journey coached through several instances at once keeps paying one read rather
/// than a refused commit and a retry, short enough that a one-off write elsewhere is forgotten.
pub const SHARED_FOR: Duration = Duration::from_secs(300);

/// What a command did.
#[derive(Clone, Debug)]
pub struct Executed {
    /// The state after the command (for an exact retry: the state the original reached).
    pub state: Arc<LearningJourney>,
    /// The events of the commit, with their sequence numbers (empty when nothing changed).
    pub committed: Vec<(u64, JourneyEvent)>,
    /// Whether this is the original result of an earlier identical request.
    pub replayed: bool,
    /// The pack the journey runs on.
    pub pack: Arc<Pack>,
}

/// Parses a stored event, upcasting old schema versions first (R-6c).
pub fn decode_event(stored: &StoredEvent) -> Result<JourneyEvent, AppError> {
    let upcasted = upcast(stored.clone());
    serde_json::from_value(upcasted.payload).map_err(|e| {
        tracing::error!(sequence = stored.sequence, event_type = %stored.event_type, error = %e, "undecodable event");
        AppError::Internal
    })
}

/// Upcasters, oldest first. `GoalActivated` version 0 (pre-release) had no `at`; it is read as
/// happening at the time its metadata records.
pub fn upcast(mut event: SerializedEvent) -> SerializedEvent {
    if event.event_type == "GoalActivated" && event.event_version == "0" {
        let at = event.metadata.get("occurredAt").cloned().unwrap_or(Value::Null);
        if let Some(inner) = event.payload.get_mut("GoalActivated").and_then(Value::as_object_mut) {
            inner.entry("at").or_insert(at);
        }
        event.event_version = EVENT_VERSION.to_owned();
    }
    event
}

fn chain_of(stored: &StoredEvent) -> String {
    stored.metadata.get("chainHash").and_then(Value::as_str).unwrap_or(GENESIS).to_owned()
}

impl App {
    /// Loads a journey: from the state this process last saw of it, else from its snapshot,
    /// and in both cases the events after that (so writes by other processes are seen).
    pub async fn load_journey(&self, journey_id: &str) -> Result<Loaded, AppError> {
        let (start, from_cache) = match self.journeys.get(&journey_id.to_owned()) {
            Some(cached) => (cached, true),
            None => (self.load_from_snapshot(journey_id).await?, false),
        };
        let Loaded { mut state, mut last_hash, snapshot_version, mut shared_until } = start;
        let tail = self.store.events_after(journey_id, state.version).await?;
        // This process puts every commit of its own into the cache, so events after a cached
        // state were written by another process (or by a concurrent call here, a harmless
        // false alarm): writes validate this journey for a while.
        if from_cache && !tail.is_empty() {
            shared_until = Some(Instant::now() + SHARED_FOR);
        }
        for stored in tail {
            Arc::make_mut(&mut state).apply(decode_event(&stored)?);
            last_hash = chain_of(&stored);
        }
        let loaded = Loaded { state, last_hash, snapshot_version, shared_until };
        self.journeys.put(journey_id.to_owned(), loaded.clone());
        Ok(loaded)
    }

    /// This process's last state of a journey, unread, for a write to decide on (ADR 0009: the
    /// commit's sequence numbers refuse it should the log have moved on) or a read to answer
    /// from (ADR 0011: its audit rows are written only while the log ends where the copy does).
    /// `None` when the journey is not cached or was written by another process lately.
    pub fn cached_copy(&self, journey_id: &str) -> Option<Loaded> {
        self.journeys.get(&journey_id.to_owned()).filter(|l| l.shared_until.is_none_or(|until| Instant::now() >= until))
    }

    async fn load_from_snapshot(&self, journey_id: &str) -> Result<Loaded, AppError> {
        let empty = || Loaded { state: Arc::default(), last_hash: GENESIS.to_owned(), snapshot_version: 0, shared_until: None };
        Ok(match self.store.snapshot(journey_id).await? {
            Some(s) => match serde_json::from_value::<LearningJourney>(s.state) {
                Ok(state) if state.version == s.version => {
                    Loaded { state: Arc::new(state), last_hash: s.chain_hash, snapshot_version: s.version, shared_until: None }
                }
                Ok(_) => {
                    tracing::warn!(journey_id, "ignoring a snapshot whose state disagrees with its version");
                    empty()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring an unreadable snapshot");
                    empty()
                }
            },
            None => empty(),
        })
    }

    /// Folds a journey's events up to a version, from the start (no snapshot).
    pub async fn fold_upto(&self, journey_id: &str, version: u64) -> Result<LearningJourney, AppError> {
        let mut state = LearningJourney::default();
        for stored in self.store.events_upto(journey_id, version).await? {
            state.apply(decode_event(&stored)?);
        }
        Ok(state)
    }

    /// The event at `version` of a journey and the tool (or entry point) whose command wrote it;
    /// `None` for version 0 or a version not in the log.
    pub async fn event_at(&self, journey_id: &str, version: u64) -> Result<Option<(JourneyEvent, String)>, AppError> {
        let Some(after) = version.checked_sub(1) else { return Ok(None) };
        let stored = self.store.events_after(journey_id, after).await?;
        let Some(first) = stored.first().filter(|e| e.sequence as u64 == version) else { return Ok(None) };
        let tool = first.metadata.get("tool").and_then(Value::as_str).unwrap_or_default().to_owned();
        Ok(Some((decode_event(first)?, tool)))
    }

    /// The pack a journey runs on.
    pub fn pack_of(&self, state: &LearningJourney) -> Result<Arc<Pack>, AppError> {
        let info = state.info.as_ref().ok_or(AppError::NotFound { what: "journey" })?;
        self.catalog.version(&info.curriculum_id, info.pack_version).ok_or_else(|| {
            tracing::error!(curriculum = %info.curriculum_id, version = info.pack_version, "a journey's pack version is not installed");
            AppError::Internal
        })
    }

    /// Runs a command. `start_pack` is the pack a `StartJourney` starts on.
    pub async fn execute(&self, request: CommandRequest, start_pack: Option<Arc<Pack>>) -> Result<Executed, AppError> {
        self.execute_measured(request, start_pack, None, true).await
    }

    /// Runs a command on the journey as the caller has it (a tool call's session check), saving
    /// a second read; should it be stale, the append's sequence numbers refuse the commit
    /// exactly as they would a concurrent writer's. `validated`: the caller read the state
    /// against the log; a lost race is then decided once more here. An unread state (ADR 0009)
    /// answers a lost race with `STATE_CONFLICT`, so the caller checks its own input (an option
    /// token, a capability) against the log's state before deciding again.
    pub async fn execute_seen(&self, request: CommandRequest, seen: Loaded, validated: bool) -> Result<Executed, AppError> {
        self.execute_measured(request, None, Some(seen), validated).await
    }

    async fn execute_measured(
        &self,
        request: CommandRequest,
        start_pack: Option<Arc<Pack>>,
        seen: Option<Loaded>,
        retry_lost_race: bool,
    ) -> Result<Executed, AppError> {
        let started = std::time::Instant::now();
        let name = request.command.name();
        let result = match self.execute_inner(request.clone(), start_pack.clone(), seen).await {
            // A command without a version the caller saw (a start, say) that lost a race decides
            // once more on the fresh state: a start then finds the batch the winner opened.
            Err(AppError::StateConflict { .. }) if request.expected_version.is_none() && retry_lost_race => {
                self.execute_inner(request, start_pack, None).await
            }
            other => other,
        };
        let outcome = match &result {
            Ok(e) if e.replayed => "replayed",
            Ok(_) => "applied",
            Err(AppError::StateConflict { .. }) => "conflict",
            Err(e) if e.outcome() == "rejected" => "rejected",
            Err(_) => "error",
        };
        self.metrics.command(name, outcome, started.elapsed().as_secs_f64());
        result
    }

    async fn execute_inner(
        &self,
        request: CommandRequest,
        start_pack: Option<Arc<Pack>>,
        seen: Option<Loaded>,
    ) -> Result<Executed, AppError> {
        let now = self.clock.now();
        let loaded = match seen {
            Some(loaded) => loaded,
            None => self.load_journey(&request.journey_id).await?,
        };

        // The idempotency record is looked up only off the common path: a retry of a request
        // that was committed fails the version check or the rules on the state it produced, or
        // changes nothing, and then its original result answers it; on the path to a commit the
        // commit itself refuses a request id already in the stream (ADR 0006).
        let (pack, events) = match self.decide_on(&request, &loaded, start_pack, now) {
            Ok((pack, events)) if !events.is_empty() => (pack, events),
            other => {
                if let Some(identity) = &request.identity {
                    if let Some(original) = self.original_result(&request.journey_id, identity).await? {
                        return Ok(original);
                    }
                }
                let (pack, _) = other?;
                return Ok(Executed { state: loaded.state, committed: Vec::new(), replayed: false, pack });
            }
        };

        let serialized = self.serialize(&request, &loaded, &events, now)?;
        let mut state = loaded.state.clone();
        let mut committed = Vec::with_capacity(events.len());
        for (event, stored) in events.into_iter().zip(&serialized) {
            Arc::make_mut(&mut state).apply(event.clone());
            committed.push((stored.sequence as u64, event));
        }
        let last_hash = serialized.last().map(chain_of).unwrap_or_else(|| loaded.last_hash.clone());
        let snapshot = (state.version - loaded.snapshot_version >= SNAPSHOT_EVERY)
            .then(|| serde_json::to_value(&state).map_err(|e| tracing::error!(error = %e, "cannot serialize a snapshot")).ok())
            .flatten()
            .map(|value| (request.journey_id.clone(), Snapshot { version: state.version, chain_hash: last_hash.clone(), state: value }));
        let snapshot_version = if snapshot.is_some() { state.version } else { loaded.snapshot_version };
        let commit = Commit {
            request_id: request.identity.as_ref().map(|i| i.request_id.clone()),
            audit: request.call.as_ref().map(|c| c.rows(&request.journey_id, serialized.len(), now.timestamp_millis())).unwrap_or_default(),
            events: serialized,
            view: Some((request.journey_id.clone(), state.version, view_of(&state, &pack))),
            snapshot,
        };
        match self.writer.commit(commit).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => {
                // Of two concurrent calls with the same key, one writes and the other gets the
                // original result (as does a request whose id the stream already holds);
                // anything else lost the race for this version.
                if let Some(identity) = &request.identity {
                    if let Some(original) = self.original_result(&request.journey_id, identity).await? {
                        return Ok(original);
                    }
                }
                let current = self.load_journey(&request.journey_id).await.map(|l| l.state.version).unwrap_or(0);
                return Err(AppError::StateConflict { current });
            }
            Err(other) => return Err(other.into()),
        }
        self.journeys.put(
            request.journey_id.clone(),
            Loaded { state: state.clone(), last_hash, snapshot_version, shared_until: loaded.shared_until },
        );
        Ok(Executed { state, committed, replayed: false, pack })
    }

    /// The pack and the events the aggregate decides for a request on a loaded state, after the
    /// caller's version check.
    fn decide_on(
        &self,
        request: &CommandRequest,
        loaded: &Loaded,
        start_pack: Option<Arc<Pack>>,
        now: DateTime<Utc>,
    ) -> Result<(Arc<Pack>, Vec<JourneyEvent>), AppError> {
        if let Some(expected) = request.expected_version {
            if expected != loaded.state.version {
                return Err(AppError::StateConflict { current: loaded.state.version });
            }
        }
        let pack = match (&request.command, start_pack) {
            (JourneyCommand::StartJourney { .. }, Some(pack)) => pack,
            _ => self.pack_of(&loaded.state)?,
        };
        let features = self.registry.features;
        let events = loaded.state.decide(request.command.clone(), &JourneyServices { pack: pack.clone(), now, features })?;
        Ok((pack, events))
    }

    /// The original result of an earlier request with this id, if any; another input under the
    /// same id is refused.
    async fn original_result(&self, journey_id: &str, identity: &RequestIdentity) -> Result<Option<Executed>, AppError> {
        let commit = self.store.find_commit(journey_id, &identity.request_id).await?;
        let Some(last) = commit.last() else { return Ok(None) };
        let stored_hash = last.metadata.get("replayHash").and_then(Value::as_str).unwrap_or_default();
        if stored_hash != identity.replay_hash {
            return Err(AppError::IdempotencyKeyReused);
        }
        let state = self.fold_upto(journey_id, last.sequence as u64).await?;
        let pack = self.pack_of(&state)?;
        let committed = commit.iter().map(|s| decode_event(s).map(|e| (s.sequence as u64, e))).collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Executed { state: Arc::new(state), committed, replayed: true, pack }))
    }

    fn serialize(
        &self,
        request: &CommandRequest,
        loaded: &Loaded,
        events: &[JourneyEvent],
        now: DateTime<Utc>,
    ) -> Result<Vec<SerializedEvent>, AppError> {
        let mut prev = loaded.last_hash.clone();
        let mut out = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            let sequence = loaded.state.version + 1 + i as u64;
            let payload = serde_json::to_value(event).map_err(|_| AppError::Internal)?;
            let mut metadata = json!({
                "eventId": Uuid::new_v4().to_string(),
                "occurredAt": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "command": request.command.name(),
                "tool": request.tool,
                "actor": request.actor.as_str(),
                "prevHash": prev,
            });
            if let Some(identity) = &request.identity {
                metadata["requestId"] = Value::String(identity.request_id.clone());
                metadata["replayHash"] = Value::String(identity.replay_hash.clone());
            }
            let event_type = event.event_type();
            let hash = chain_hash(&Link {
                aggregate_type: LearningJourney::TYPE,
                aggregate_id: &request.journey_id,
                sequence,
                event_type: &event_type,
                event_version: EVENT_VERSION,
                payload: &payload,
                metadata: &metadata,
            });
            metadata["chainHash"] = Value::String(hash.clone());
            prev = hash;
            out.push(SerializedEvent {
                aggregate_id: request.journey_id.clone(),
                sequence: sequence as usize,
                aggregate_type: LearningJourney::TYPE.to_owned(),
                event_type,
                event_version: EVENT_VERSION.to_owned(),
                payload,
                metadata,
            });
        }
        Ok(out)
    }

    /// Brings every view row up to its stream's head (after a crash between commit and view).
    pub async fn catch_up_views(&self) -> Result<usize, AppError> {
        let views: std::collections::BTreeMap<String, u64> =
            self.store.views(ViewTable::Context).await?.into_iter().map(|(id, v, _)| (id, v)).collect();
        let mut repaired = 0;
        for (journey_id, head) in self.store.stream_heads().await? {
            if views.get(&journey_id).copied().unwrap_or(0) < head {
                let loaded = self.load_journey(&journey_id).await?;
                let pack = self.pack_of(&loaded.state)?;
                self.store.save_view(ViewTable::Context, &journey_id, loaded.state.version, &view_of(&loaded.state, &pack)).await?;
                repaired += 1;
            }
        }
        if repaired > 0 {
            tracing::info!(repaired, "views caught up");
        }
        Ok(repaired)
    }

    /// The full context of a journey now, with tokens sealed by `sealer`.
    pub fn context_of(&self, state: &LearningJourney, pack: &Pack, tz: Tz, sealer: &dyn Sealer) -> FullContext {
        full_context(&ContextInput { state, pack, now: self.clock.now(), tz, recall: self.registry.features.recall }, sealer)
    }
}

/// The persisted (time-independent, token-free) full context of a state.
pub fn view_of(state: &LearningJourney, pack: &Pack) -> Value {
    // Time and zone do not reach the persisted part; any fixed values do.
    persisted_view(&full_context(
        &ContextInput { state, pack, now: DateTime::<Utc>::UNIX_EPOCH, tz: chrono_tz::UTC, recall: true },
        &NoTokens,
    ))
}
