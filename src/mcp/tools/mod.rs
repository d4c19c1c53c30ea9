//! The ten coach tools (docs/tool-contract.md). Each tool's file holds everything of it — name,
//! title, description, input shape, annotations, registration and handler; this module holds
//! the catalogue (built once), the dispatch (an exhaustive `match` on [`Tool`], never on a
//! name string) and what every handler shares. A handler is a thin adapter: resolve the session
//! → validate strictly → read the typed arguments → run one command → shape the result. Rules
//! live in the aggregate, not here.

mod capability;
mod choose_option;
mod complete_goal;
mod exam_scores;
mod exam_solutions;
mod learning_context;
mod recall_answers;
mod recall_results;
mod render_picture;
mod result;
mod start;
mod start_exam;
mod start_recall;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use aggregates::learning_journey::{JourneyCommand, LearningJourney};
use projections::full_context::{FullContext, RequiredAction};
use projections::text::Lang;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

pub use result::{Structured, ToolOutput};

use super::schema::{json_schema, req, validate, Field, Shape, Text};
use crate::app::identity::Principal;
pub use crate::app::journeys::CallAudit;
use crate::app::journeys::{Actor, CommandRequest, Executed, RequestIdentity};
use crate::app::sessions::ActiveSession;
use crate::app::tokens::SessionSealer;
use crate::app::App;
use crate::error::AppError;
use crate::registry::{Exit, Kind, Manifest, Need, Role, ToolMeta};
use crate::store::IfCurrent;

/// The UI resource the picture tool is bound to.
pub const WIDGET_URI: &str = "ui://skillpilot/goal-picture.html";

/// Every tool the service ships, in the order `tools/list` shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tool {
    LearningContext,
    ChooseOption,
    CompleteGoal,
    StartRecall,
    RecallAnswers,
    RecallResults,
    StartExam,
    ExamSolutions,
    ExamScores,
    RenderPicture,
}

impl Tool {
    /// All tools, in `tools/list` order.
    pub const ALL: [Self; 10] = [
        Self::LearningContext,
        Self::ChooseOption,
        Self::CompleteGoal,
        Self::StartRecall,
        Self::RecallAnswers,
        Self::RecallResults,
        Self::StartExam,
        Self::ExamSolutions,
        Self::ExamScores,
        Self::RenderPicture,
    ];

    /// The tool's definition, built once per process.
    pub fn def(self) -> &'static ToolDef {
        &CATALOGUE[self as usize]
    }

    /// The fixed name clients call it by.
    pub fn name(self) -> &'static str {
        self.def().meta.name
    }

    /// The tool of a name clients sent.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    fn definition(self) -> ToolDef {
        match self {
            Self::LearningContext => learning_context::definition(),
            Self::ChooseOption => choose_option::definition(),
            Self::CompleteGoal => complete_goal::definition(),
            Self::StartRecall => start_recall::definition(),
            Self::RecallAnswers => recall_answers::definition(),
            Self::RecallResults => recall_results::definition(),
            Self::StartExam => start_exam::definition(),
            Self::ExamSolutions => exam_solutions::definition(),
            Self::ExamScores => exam_scores::definition(),
            Self::RenderPicture => render_picture::definition(),
        }
    }

    async fn handle(self, call: &Call<'_>, args: Value) -> Result<ToolOutput, AppError> {
        match self {
            Self::LearningContext => learning_context::handle(call, parse(args)?).await,
            Self::ChooseOption => choose_option::handle(call, parse(args)?).await,
            Self::CompleteGoal => complete_goal::handle(call, parse(args)?).await,
            Self::StartRecall => start_recall::handle(call, parse(args)?).await,
            Self::RecallAnswers => recall_answers::handle(call, parse(args)?).await,
            Self::RecallResults => recall_results::handle(call, parse(args)?).await,
            Self::StartExam => start_exam::handle(call, parse(args)?).await,
            Self::ExamSolutions => exam_solutions::handle(call, parse(args)?).await,
            Self::ExamScores => exam_scores::handle(call, parse(args)?).await,
            Self::RenderPicture => render_picture::handle(call, parse(args)?).await,
        }
    }
}

/// A published tool: what the registry knows of it plus what only the transport needs.
pub struct ToolDef {
    /// Name, kind, role and registration, as handed to the registry.
    pub meta: ToolMeta,
    pub title: &'static str,
    /// Whether an exact repeat has no further effect.
    pub idempotent: bool,
    /// Input shape: the validator and the published schema, from one description.
    pub input: Shape,
    /// Whether its results are shown by the goal-picture widget.
    pub widget: bool,
}

static CATALOGUE: LazyLock<Vec<ToolDef>> = LazyLock::new(|| Tool::ALL.iter().map(|t| t.definition()).collect());

static LISTING: LazyLock<Vec<Value>> = LazyLock::new(|| Tool::ALL.iter().map(|t| listing(t.def())).collect());

/// What the registry is handed at start-up: every shipped tool's name, kind, role and
/// registration.
pub fn registrations() -> Vec<ToolMeta> {
    CATALOGUE.iter().map(|d| d.meta.clone()).collect()
}

/// Every shipped tool as `tools/list` shows it when bound, in order.
pub fn listed() -> &'static [Value] {
    &LISTING
}

fn listing(d: &ToolDef) -> Value {
    let mut tool = json!({
        "name": d.meta.name,
        "title": d.title,
        "description": d.meta.manifest.description(),
        "inputSchema": json_schema(&d.input),
        "outputSchema": output_schema(d),
        "annotations": {
            "title": d.title,
            "readOnlyHint": d.meta.kind == Kind::Read,
            "destructiveHint": false,
            "idempotentHint": d.idempotent,
            "openWorldHint": false
        }
    });
    if d.widget {
        tool["_meta"] = json!({"ui": {"resourceUri": WIDGET_URI}, "openai/outputTemplate": WIDGET_URI});
    }
    tool
}

/// The published `outputSchema` of a tool: every exit, the error shape included.
fn output_schema(def: &ToolDef) -> Value {
    let error = json!({
        "type": "object",
        "properties": {
            "outcome": {"type": "string", "enum": ["rejected", "error"]},
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "finding": {"type": "string"},
                    "evidence": {"type": "object"},
                    "recovery": {"type": "object"}
                },
                "required": ["code", "finding"]
            }
        },
        "required": ["outcome", "error"]
    });
    let success = if def.widget {
        json!({"type": "object", "properties": {"outcome": {"const": "completed"}, "rendered": {"type": "boolean"}}, "required": ["outcome", "rendered"]})
    } else {
        json!({
            "type": "object",
            "properties": {
                "outcome": {"type": "string", "enum": ["completed", "clarification"]},
                "learningSessionId": {"type": "string"},
                "communicationLocale": {"type": "string"},
                "stateVersion": {"type": "integer"},
                "requiredAction": {"type": "string"},
                "instruction": {"type": "string"},
                "receipt": {"type": "object"},
                "context": {"type": "object"},
                "continuation": {"type": "object"}
            },
            "required": ["outcome"]
        })
    };
    json!({"type": "object", "oneOf": [success, error]})
}

// What the definitions share.

const SESSION_NEED: Need =
    Need { key: "learningSessionId", assumes: "opaque capability addressing the learner's learning session in this chat" };
const ALL_EXITS: &[Exit] = &[Exit::Completed, Exit::Clarification, Exit::Rejected, Exit::Error];
const READ_EXITS: &[Exit] = &[Exit::Completed, Exit::Rejected, Exit::Error];

/// A registration with the properties every coach tool shares.
fn manifest(
    intent: &'static str,
    negative_cases: &'static [&'static str],
    boundary: &'static str,
    needs: &'static [Need],
    quota: u8,
    exits: &'static [Exit],
) -> Manifest {
    Manifest {
        intent,
        negative_cases,
        boundary,
        cost: "one database round trip; no model call",
        cadence: "only when the coach calls it in a learner turn",
        scope: "the calling learner's own learning session",
        data_ownership: "the learner's own journey; nothing of other learners",
        needs,
        quota: Some(quota),
        retry: "an exact retry returns the original result and changes nothing",
        exits,
        registration_version: 1,
    }
}

/// The meta of a tool of the coach.
fn meta(name: &'static str, kind: Kind, role: Role, manifest: Manifest) -> ToolMeta {
    ToolMeta { name, kind, role, manifest }
}

/// The required session field of every tool but the context loader.
fn session_id() -> Field {
    req("learningSessionId", Shape::String(Text::Token))
}

/// Reads validated arguments into the tool's type. Validation already proved the shape, so a
/// failure here is a drift between a tool's shape and its type: a fault, never the caller's.
fn parse<A: DeserializeOwned>(args: Value) -> Result<A, AppError> {
    serde_json::from_value(args).map_err(|e| {
        tracing::error!(error = %e, "validated arguments do not fit their type");
        AppError::Internal
    })
}

// Running a call.

/// One tool call in progress: the application, the caller's session and the tool.
pub(crate) struct Call<'a> {
    app: &'a Arc<App>,
    session: &'a ActiveSession,
    tool: Tool,
    /// The call's audit identity: a command's commit carries its `started` and exit rows.
    audit: Option<CallAudit>,
    /// Whether the call's command committed (or found its original commit): its outcome is
    /// then settled by the log, whatever state it was decided on.
    settled: AtomicBool,
}

impl Call<'_> {
    fn journey_id(&self) -> &str {
        &self.session.row.journey_id
    }

    fn state(&self) -> &LearningJourney {
        &self.session.loaded.state
    }

    fn lang(&self) -> Lang {
        Lang::of(&self.state().locale)
    }

    /// A command of this tool on the caller's journey.
    fn command(&self, command: JourneyCommand, expected: Option<u64>, identity: Option<RequestIdentity>) -> CommandRequest {
        CommandRequest {
            journey_id: self.journey_id().to_owned(),
            command,
            expected_version: expected,
            identity,
            tool: self.tool.name(),
            actor: Actor::Learner,
            call: self.audit.clone(),
        }
    }

    /// Runs a command on the journey as the session check loaded it.
    async fn execute(&self, request: CommandRequest) -> Result<Executed, AppError> {
        let executed = self.app.execute_seen(request, self.session.loaded.clone(), self.session.validated).await?;
        if executed.replayed || !executed.committed.is_empty() {
            self.settled.store(true, Ordering::Relaxed);
        }
        Ok(executed)
    }

    /// The full context of a state, with tokens sealed for this session.
    fn context(&self, state: &LearningJourney) -> FullContext {
        let reuse = self.app.session_tokens(&self.session.row.session_id);
        let sealer = SessionSealer {
            keys: &self.app.keys,
            session_id: &self.session.row.session_id,
            journey_id: self.journey_id(),
            now: self.app.clock.now(),
            ttl: self.app.settings.capability_ttl,
            reuse: Some(&reuse),
        };
        self.app.context_of(state, &self.session.pack, self.session.tz, &sealer)
    }

    fn output(&self, structured: Structured, summary: &'static str, events_appended: usize) -> ToolOutput {
        ToolOutput { structured, summary, meta: None, events_appended, journey_id: Some(self.journey_id().to_owned()), if_current: None }
    }
}

/// Why a call failed, in the learner's language where the session was known.
pub struct Failure {
    /// What failed.
    pub error: AppError,
    /// The locale its texts are written in.
    pub locale: String,
    /// The journey, once the session was resolved.
    pub journey_id: Option<String>,
    /// For a refusal the state decided: the full context now, whose facts the rejection
    /// carries instead of a reload proposal.
    pub fresh: Option<Box<FullContext>>,
}

/// Whether a refusal was decided by the state, so the fresh facts explain it and show the way on.
fn decided_by_state(err: &AppError) -> bool {
    matches!(
        err,
        AppError::NotAllowed
            | AppError::StateConflict { .. }
            | AppError::OptionInvalid
            | AppError::CapabilityUsed
            | AppError::CapabilityInvalid
            | AppError::CapabilityExpired
            | AppError::NotEligible { .. }
    )
}

/// Resolves the session for a tool that requires the id.
async fn session_of(app: &App, principal: &Principal, args: &Value, unread: bool) -> Result<ActiveSession, AppError> {
    match args.get("learningSessionId") {
        None | Some(Value::Null) => Err(AppError::SessionRequired),
        Some(Value::String(token)) => app.resolve_session(principal, token, unread).await,
        Some(_) => Err(AppError::SessionInvalid),
    }
}

/// Runs one call of a tool: session first (docs/tool-contract.md, errors order; the gate only for the context
/// loader without an id), then the strict validator, then the tool's handler.
/// `audit` is the call's audit identity: a commit the call makes carries its `started` and
/// `completed` rows ([`ToolOutput::events_appended`] > 0 says they are written).
///
/// A write first decides on this process's cached journey without reading the log (ADR 0009):
/// a commit on it proves it current (the commit's sequence numbers are taken otherwise); any
/// other outcome — a refusal, a no-op — stands only if the log's tail agrees, else the call runs
/// once more on the state read from the log. A read with an audit identity answers from the copy
/// too (ADR 0011): its answer carries [`ToolOutput::if_current`], which the audit write checks —
/// unless `validated`, when the caller wants the log read first (a checked read came back refused).
pub async fn dispatch(
    app: &Arc<App>,
    principal: &Principal,
    tool: Tool,
    args: Value,
    audit: Option<CallAudit>,
    validated: bool,
) -> Result<ToolOutput, Failure> {
    let may_use_copy = tool.def().meta.kind == Kind::Write || audit.is_some();
    if may_use_copy && !validated {
        if let Some(outcome) = dispatch_once(app, principal, tool, args.clone(), audit.clone(), true).await {
            return outcome;
        }
    }
    dispatch_once(app, principal, tool, args, audit, false).await.unwrap_or_else(|| {
        tracing::error!(tool = tool.name(), "a call on a validated journey asked to be run again");
        Err(Failure { error: AppError::Internal, locale: app.settings.default_locale.clone(), journey_id: None, fresh: None })
    })
}

/// One run of a call; `None` when it decided on a cached state the log has since moved past
/// without committing anything (only possible with `cached`).
async fn dispatch_once(
    app: &Arc<App>,
    principal: &Principal,
    tool: Tool,
    args: Value,
    audit: Option<CallAudit>,
    cached: bool,
) -> Option<Result<ToolOutput, Failure>> {
    let fail =
        |error: AppError, locale: &str, journey_id: Option<String>| Failure { error, locale: locale.to_owned(), journey_id, fresh: None };
    let session = if tool == Tool::LearningContext && args.get("learningSessionId").is_none() {
        app.gate(principal).await
    } else {
        session_of(app, principal, &args, cached).await
    };
    let session = match session {
        Ok(session) => session,
        Err(e) => return Some(Err(fail(e, &app.settings.default_locale, None))),
    };
    let locale = session.loaded.state.locale.clone();
    let journey = Some(session.row.journey_id.clone());
    if let Err(e) = validate(&args, &tool.def().input) {
        return Some(Err(fail(e, &locale, journey)));
    }
    let call = Call { app, session: &session, tool, audit, settled: AtomicBool::new(false) };
    let mut handled = tool.handle(&call, args).await;
    let unread = !session.validated && !call.settled.load(Ordering::Relaxed);
    if let (true, Kind::Read, Ok(output)) = (unread, tool.def().meta.kind, &mut handled) {
        // A read's answer from the copy: the audit write checks the log's head (ADR 0011).
        output.if_current = Some(IfCurrent { journey_id: session.row.journey_id.clone(), version: session.loaded.state.version });
    } else if unread {
        // Decided on an unread state and committed nothing: that outcome holds only if the log
        // is where the state was (a read error leaves the outcome as it is).
        if let Ok(now) = app.load_journey(&session.row.journey_id).await {
            if now.state.version != session.loaded.state.version {
                return None;
            }
        }
    }
    let outcome = match handled {
        // A write that cannot proceed without the learner's decision: the current decision
        // point, unchanged, as a clarification (docs/tool-contract.md, errors) rather than a rejection.
        Err(AppError::NotAllowed) if tool.def().meta.kind == Kind::Write => result::clarification(&call).await,
        other => other,
    };
    Some(match outcome {
        Ok(output) => Ok(output),
        Err(error) if decided_by_state(&error) => {
            // The facts as they are now (a refusal may follow another writer's commit).
            let fresh = match app.load_journey(&session.row.journey_id).await {
                Ok(loaded) => Some(Box::new(call.context(&loaded.state))),
                Err(_) => None,
            };
            let locale = fresh.as_ref().map_or(locale, |f| f.communication_locale.clone());
            Err(Failure { error, locale, journey_id: journey, fresh })
        }
        Err(error) => Err(fail(error, &locale, journey)),
    })
}

/// Where a refusal leaves the coach: the instruction and the one action of the current state,
/// its open workflow and options, and — where the next step is a start the learner consents
/// to — the server-filled call.
fn way_on(app: &App, ctx: &FullContext) -> Value {
    let mut way = json!({"instruction": ctx.instruction, "requiredAction": ctx.required_action});
    let start = match ctx.required_action {
        RequiredAction::OfferVerifiedRecall => Some(Tool::StartRecall),
        RequiredAction::OfferExam => Some(Tool::StartExam),
        _ => None,
    };
    if let Some(tool) = start.filter(|t| app.registry.may_propose(t.name())) {
        way["proposal"] = json!({"name": tool.name(), "arguments": {"expectedStateVersion": ctx.state_version}, "consentRequired": true});
    }
    if let Some(workflow) = &ctx.open_workflow {
        way["openWorkflow"] = json!(workflow);
    }
    if !ctx.options.is_empty() {
        way["options"] = json!(ctx.options);
    }
    way
}

/// The recovery of an error (docs/tool-contract.md, errors table): the start URL for session errors, a reload
/// proposal where that is the safe recovery, nothing for malformed calls.
pub fn recovery(app: &App, err: &AppError, locale: &str, start_url: &str, fresh: Option<&FullContext>) -> Option<Value> {
    // The fresh facts fit in the result: they, not a reload, show the way on.
    if let Some(ctx) = fresh.filter(|_| decided_by_state(err)) {
        let mut way = way_on(app, ctx);
        // What makes the exam eligible comes first, then what to do now.
        if matches!(err, AppError::NotEligible { .. }) {
            let lead = match Lang::of(locale) {
                Lang::De => "Die Prüfung wird freigegeben, sobald alle Ziele gemeistert sind.",
                Lang::En => "The exam is released once every goal is mastered.",
            };
            way["instruction"] = json!(format!("{lead} {}", ctx.instruction));
        }
        return Some(way);
    }
    let lang = Lang::of(locale);
    let say = |de: &str, en: &str| match lang {
        Lang::De => de.to_owned(),
        Lang::En => en.to_owned(),
    };
    let reload = || {
        let mut r = json!({
            "instruction": say("Lade den Lernstand einmal neu und entscheide dann erneut.", "Reload the learning state once, then decide again."),
        });
        // Never a proposal that names a refused or restricted tool.
        if app.registry.may_propose(Tool::LearningContext.name()) {
            r["proposal"] = json!({"name": Tool::LearningContext.name(), "arguments": {}});
        }
        r
    };
    match err {
        AppError::SessionRequired | AppError::SessionExpired | AppError::SessionInvalid => Some(json!({
            "instruction": say("Bitte starte unter diesem Link eine Lernsitzung und komm dann zurück in den Chat.", "Please start a learning session at this link, then come back to the chat."),
            "url": start_url,
        })),
        AppError::CapabilityInvalid
        | AppError::CapabilityExpired
        | AppError::StateConflict { .. }
        | AppError::OptionInvalid
        | AppError::CapabilityUsed
        | AppError::NotAllowed => Some(reload()),
        // A write may have been stored before the store or the handler failed: the coach must
        // neither claim it was saved nor promise a later save, only retry exactly (the retry
        // identity returns the stored result instead of storing twice).
        AppError::StoreUnavailable | AppError::Internal => Some(json!({
            "outcome": "unknown",
            "retry": "exact",
            "instruction": say(
                "Ob der Aufruf gespeichert wurde, ist unbekannt. Wiederhole ihn genau einmal mit denselben Argumenten (dieselbe clientRequestId bzw. dasselbe Options-Payload): Wurde der erste Versuch gespeichert, kommt sein ursprüngliches Ergebnis zurück, nichts wird doppelt gespeichert.",
                "Whether the call was stored is unknown. Retry it exactly once with the same arguments (the same clientRequestId or option payload): if the first attempt was stored, its original result comes back and nothing is stored twice."
            ),
        })),
        AppError::NotEligible { .. } => Some(json!({
            "instruction": say("Die Prüfung wird freigegeben, sobald alle Ziele gemeistert sind; lerne zuerst die offenen Ziele.", "The exam is released once every goal is mastered; learn the open goals first."),
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use projections::full_context::{ContextKey, CONTEXT_KEYS};
    use proptest::prelude::*;

    use super::*;
    use crate::registry::{handshake, relock, seam_signature, Grade, Lock, LockEntry, COMMITTED_LOCK};

    fn definitions() -> Vec<ToolMeta> {
        registrations()
    }

    fn lock_now() -> Lock {
        relock(&definitions(), &Lock::default()).unwrap()
    }

    #[test]
    fn the_committed_lock_binds_every_shipped_tool() {
        let registry = handshake(&definitions(), CONTEXT_KEYS, &Lock::parse(COMMITTED_LOCK).unwrap());
        assert!(registry.refused().is_empty(), "{:?}", registry.tools);
        assert!(registry.tools.iter().all(|t| t.grade == Grade::Bound), "{:?}", registry.tools);
    }

    #[test]
    fn a_changed_meaning_refuses_exactly_the_tools_that_need_the_key() {
        let mut keys = CONTEXT_KEYS.to_vec();
        let k = keys.iter_mut().find(|k| k.name == "openWorkflow.batchCapability").unwrap();
        k.meaning = "capability to release the answers AND record the results";
        let registry = handshake(&definitions(), &keys, &lock_now());
        assert_eq!(registry.refused(), vec!["get_skillpilot_verified_recall_answers"]);
    }

    #[test]
    fn re_registration_binds_again_and_the_lock_refuses_an_unbumped_change() {
        let mut keys = CONTEXT_KEYS.to_vec();
        keys.iter_mut().find(|k| k.name == "stateVersion").unwrap().lifetime = "forever";
        let old = lock_now();
        // The tool that needs the key, re-registered with a bumped version and a new lock entry.
        let defs = definitions();
        let def = defs.iter().find(|d| d.name == "complete_skillpilot_goal").unwrap();
        let mut lock = old.clone();
        lock.tools.insert(def.name.to_owned(), LockEntry { registration_version: 2, signature: seam_signature(def, &keys).unwrap() });
        assert!(handshake(&defs, &keys, &lock).refused().is_empty());
        // Without re-registration the new signature is refused.
        assert_eq!(handshake(&defs, &keys, &old).refused(), vec!["complete_skillpilot_goal"]);
        // And `registry lock` will not record a changed signature under the old version.
        let mut stale = old.clone();
        stale.tools.get_mut("complete_skillpilot_goal").unwrap().signature = "0".repeat(64);
        assert!(relock(&defs, &stale).is_err());
    }

    #[test]
    fn a_need_without_a_provider_is_refused() {
        let keys: Vec<ContextKey> = CONTEXT_KEYS.iter().copied().filter(|k| k.name != "continuation.toolCall").collect();
        let registry = handshake(&definitions(), &keys, &lock_now());
        assert_eq!(registry.refused(), vec!["render_skillpilot_goal_visualization"]);
        let render = registry.tools.iter().find(|t| t.name == "render_skillpilot_goal_visualization").unwrap();
        assert!(render.reasons[0].contains("continuation.toolCall"));
    }

    #[test]
    fn a_write_tool_without_a_rejected_exit_is_restricted_and_internal_terms_or_no_quota_are_reported() {
        let mut defs = definitions();
        let lock = lock_now();
        defs[2].manifest.exits = &[Exit::Completed, Exit::Error];
        defs[3].manifest.intent = "Start the recall capability of the aggregate.";
        defs[4].manifest.quota = None;
        let registry = handshake(&defs, CONTEXT_KEYS, &lock);
        let grade = |i: usize| registry.tools[i].grade;
        assert_eq!(grade(2), Grade::Restricted);
        assert!(!registry.may_propose(defs[2].name) && registry.is_bound(defs[2].name));
        assert_eq!(grade(3), Grade::Reported);
        assert!(registry.tools[3].reasons[0].contains("capability") && registry.tools[3].reasons[0].contains("aggregate"));
        assert_eq!(grade(4), Grade::Reported);
        assert_eq!(registry.tools[4].reasons, vec!["no declared quota".to_owned()]);
        assert!(registry.refused().is_empty());
    }

    #[test]
    fn the_whole_picture_reports_unneeded_keys_and_the_quota_sum() {
        let registry = handshake(&definitions(), CONTEXT_KEYS, &lock_now());
        assert!(registry.report.unneeded_keys.contains(&"communicationLocale".to_owned()));
        assert_eq!(registry.report.quota_sum, definitions().iter().filter_map(|d| d.manifest.quota).map(u32::from).sum::<u32>());
        assert!(registry.report.keys_with_different_meanings.is_empty(), "{:?}", registry.report);
    }

    /// Whether validated arguments read into the tool's type.
    fn read_as(tool: Tool, args: Value) -> Result<(), String> {
        fn reads<A: DeserializeOwned>(value: Value) -> Result<(), String> {
            serde_json::from_value::<A>(value).map(|_| ()).map_err(|e| e.to_string())
        }
        match tool {
            Tool::LearningContext => reads::<learning_context::Args>(args),
            Tool::ChooseOption => reads::<choose_option::Args>(args),
            Tool::CompleteGoal => reads::<complete_goal::Args>(args),
            Tool::StartRecall => reads::<start_recall::Args>(args),
            Tool::RecallAnswers => reads::<recall_answers::Args>(args),
            Tool::RecallResults => reads::<recall_results::Args>(args),
            Tool::StartExam => reads::<start_exam::Args>(args),
            Tool::ExamSolutions => reads::<exam_solutions::Args>(args),
            Tool::ExamScores => reads::<exam_scores::Args>(args),
            Tool::RenderPicture => reads::<render_picture::Args>(args),
        }
    }

    fn arbitrary_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| serde_json::json!(f)),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            "[ -~]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("learningSessionId".to_owned()),
                        Just("decision".to_owned()),
                        Just("evidence".to_owned()),
                        Just("assessments".to_owned()),
                        Just("passed".to_owned()),
                        Just("scores".to_owned()),
                        Just("points".to_owned()),
                        Just("option".to_owned()),
                        Just("optionToken".to_owned()),
                        "[a-zA-Z_-]{1,16}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Arbitrary JSON against every tool: no panic, every refusal one of the stable input
        /// codes, and whatever the validator lets through reads into the tool's type.
        #[test]
        fn arbitrary_arguments_get_a_stable_code_or_read_into_the_tools_type(args in arbitrary_json()) {
            for tool in Tool::ALL {
                match validate(&args, &tool.def().input) {
                    Ok(()) => proptest::prop_assert_eq!(read_as(tool, args.clone()), Ok(()), "{}", tool.name()),
                    Err(AppError::ForbiddenField | AppError::UnknownField { .. } | AppError::ValidationFailed { .. }) => {}
                    Err(other) => proptest::prop_assert!(false, "unexpected code {}", other.code()),
                }
            }
        }
    }

    /// The typed arguments and the strict shape come from one file per tool; this proves they
    /// agree: a maximal and a minimal instance of every shape read into the tool's type.
    #[test]
    fn every_tools_arguments_type_reads_every_instance_of_its_shape() {
        fn instance(shape: &Shape, full: bool) -> Value {
            match shape {
                Shape::Object(fields) => Value::Object(
                    fields.iter().filter(|f| full || f.required).map(|f| (f.name.to_owned(), instance(&f.shape, full))).collect(),
                ),
                Shape::Array(item, min, _) => Value::Array(vec![instance(item, full); (*min).max(1)]),
                Shape::String(Text::Uuid) => json!("7d3c1b8e-52a4-4c1e-9a57-0c9e8f1d2b3a"),
                Shape::String(_) => json!("x"),
                Shape::Bool => json!(true),
                Shape::Count => json!(3),
                Shape::Points => json!(1.5),
                Shape::Enum(values) => json!(values[0]),
            }
        }
        for tool in Tool::ALL {
            for full in [true, false] {
                let args = instance(&tool.def().input, full);
                assert!(validate(&args, &tool.def().input).is_ok(), "{}: the instance is valid", tool.name());
                assert_eq!(read_as(tool, args), Ok(()), "{} (full: {full}): its type and its shape drifted apart", tool.name());
            }
        }
    }

    #[test]
    fn every_tool_is_found_by_its_name_and_names_are_unique() {
        for tool in Tool::ALL {
            assert_eq!(Tool::named(tool.name()), Some(tool));
        }
        let names: std::collections::BTreeSet<_> = Tool::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names.len(), Tool::ALL.len());
        assert_eq!(Tool::named("no_such_tool"), None);
    }

    #[test]
    fn the_registry_offers_a_workflow_only_while_every_step_is_bound() {
        let lock = Lock::parse(COMMITTED_LOCK).unwrap();
        let registry = handshake(&definitions(), CONTEXT_KEYS, &lock);
        assert!(registry.features.recall && registry.features.exam);
        assert_eq!(registry.context_tool, Some(Tool::LearningContext.name()));
        let mut without_answers = lock.clone();
        without_answers.tools.remove(Tool::RecallAnswers.name());
        let registry = handshake(&definitions(), CONTEXT_KEYS, &without_answers);
        assert!(!registry.features.recall && registry.features.exam, "{:?}", registry.features);
    }
}
