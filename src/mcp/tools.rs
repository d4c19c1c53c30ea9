//! The ten coach tools of SPEC §5: their published definitions and their handlers. Each
//! handler is a thin adapter: resolve the session → validate strictly → map to one command →
//! shape the result of SPEC §5.2a. Rules live in the aggregate, not here.

use std::sync::Arc;

use aggregates::learning_journey::{Consent, Evidence, JourneyCommand, JourneyEvent, NextStep, Workflow};
use projections::full_context::{CapabilityStep, FullContext};
use serde_json::{json, Value};

use super::schema::{json_schema, opt, req, validate, Shape, Text};
use crate::app::identity::Principal;
use crate::app::journeys::{receipt, Actor, CommandRequest, Executed, RequestIdentity};
use crate::app::sessions::ActiveSession;
use crate::app::tokens::SessionSealer;
use crate::app::App;
use crate::error::AppError;
use crate::store::chain::{canonical, replay_hash};

/// The UI resource the render tool is bound to.
pub const WIDGET_URI: &str = "ui://skillpilot/goal-picture.html";

/// Whether a tool reads or writes, for annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reads only.
    Read,
    /// Changes the journey.
    Write,
}

/// The exits a tool serves (SPEC §8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Exit {
    /// Done.
    Completed,
    /// A learner decision is needed first.
    Clarification,
    /// Judged wrong for the state, with a finding.
    Rejected,
    /// Could not run.
    Error,
}

/// A context key a tool reads, with the meaning the tool relies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Need {
    /// The key's name as the context publishes it.
    pub key: &'static str,
    /// What the tool takes it to mean (compared across tools by the whole-picture report).
    pub assumes: &'static str,
}

/// A tool's registration (SPEC §8.1), next to its code.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The description in the learner's language of intent (model-visible).
    pub intent: &'static str,
    /// Situations in which the tool must not be called (model-visible).
    pub negative_cases: &'static [&'static str],
    /// What the tool explicitly does not do.
    pub boundary: &'static str,
    /// Cost class.
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

/// A published tool.
pub struct ToolDef {
    /// Fixed name.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// Read or write.
    pub kind: Kind,
    /// Whether an exact repeat has no further effect.
    pub idempotent: bool,
    /// Input shape (validator and schema).
    pub input: Shape,
    /// The registration.
    pub manifest: Manifest,
}

impl ToolDef {
    /// The model-visible description: the intent, then the negative cases.
    pub fn description(&self) -> String {
        let mut d = self.manifest.intent.to_owned();
        for case in self.manifest.negative_cases {
            d.push(' ');
            d.push_str(case);
        }
        d
    }
}

const SESSION_NEED: Need =
    Need { key: "learningSessionId", assumes: "opaque capability addressing the learner's learning session in this chat" };
const ALL_EXITS: &[Exit] = &[Exit::Completed, Exit::Clarification, Exit::Rejected, Exit::Error];
const READ_EXITS: &[Exit] = &[Exit::Completed, Exit::Rejected, Exit::Error];

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

fn session_id() -> super::schema::Field {
    req("learningSessionId", Shape::String(Text::Token))
}

/// All tools, in the order `tools/list` shows them.
pub fn definitions() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "get_skillpilot_learning_context",
            title: "Load the learning state",
            manifest: manifest(
                "Load the learner's current learning state once at the start of every turn: language, active goal, progress, options and the one next action.",
                &["Do not call again after a successful change in the same turn — its result already is the new state."],
                "does not change anything and does not poll",
                &[],
                100,
                READ_EXITS,
            ),
            kind: Kind::Read,
            idempotent: true,
            input: Shape::Object(vec![opt("learningSessionId", Shape::String(Text::Token))]),
        },
        ToolDef {
            name: "choose_skillpilot_option",
            title: "Choose an offered option",
            manifest: manifest(
                "Record the learner's clear choice among the options just offered (next goal, mode, continue, language, autopilot), copying the offered option unchanged.",
                &["Do not call when the learner's words fit no offered option or fit several — ask instead."],
                "chooses nothing by itself and accepts no option that was not just offered",
                &[SESSION_NEED, Need { key: "options", assumes: "the choices of a decision point, each with a payload copied unchanged" }, Need { key: "settings.options", assumes: "the standing preferences with their payloads" }],
                0,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![session_id(), req("option", Shape::Object(vec![req("optionToken", Shape::String(Text::Token))]))]),
        },
        ToolDef {
            name: "complete_skillpilot_goal",
            title: "Complete the current goal",
            manifest: manifest(
                "Close the goal being taught once the learner has shown enough understanding and agreed to close it; say whether it was shown independently or with help, and whether to go on.",
                &["Do not call after a solved task alone, or before the learner agreed."],
                "does not grade answers and takes no text; mastery is computed, never sent",
                &[SESSION_NEED, Need { key: "stateVersion", assumes: "the journey's current version, copied as expectedStateVersion" }, Need { key: "activeGoal", assumes: "the goal being taught now" }],
                25,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![
                session_id(),
                req("expectedStateVersion", Shape::Count),
                req("clientRequestId", Shape::String(Text::Uuid)),
                req(
                    "decision",
                    Shape::Object(vec![
                        req("evidence", Shape::Enum(&["independent", "guided"])),
                        req("consent", Shape::Enum(&["closeOnly", "closeAndContinue"])),
                    ]),
                ),
            ]),
        },
        ToolDef {
            name: "start_skillpilot_verified_recall",
            title: "Start a recall check",
            manifest: manifest(
                "Start a check of what the learner has already learned, after the learner agreed to it; returns all questions at once.",
                &["Do not call without the learner's consent or while a goal is being taught."],
                "chooses the cards itself; the coach never picks, counts or orders them",
                &[SESSION_NEED, Need { key: "requiredAction", assumes: "the one next action of a full context" }],
                25,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![session_id()]),
        },
        ToolDef {
            name: "get_skillpilot_verified_recall_answers",
            title: "Reveal the recall answers",
            manifest: manifest(
                "Reveal the reference answers once the learner has answered every question of the current check.",
                &["Do not call before all questions are answered."],
                "reveals answers only for the open check's current step",
                &[SESSION_NEED, Need { key: "openWorkflow.batchCapability", assumes: "capability to release the reference answers of the open recall batch" }],
                25,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![session_id(), req("batchCapability", Shape::String(Text::Token))]),
        },
        ToolDef {
            name: "record_skillpilot_verified_recall_results",
            title: "Save the recall results",
            manifest: manifest(
                "Save whether each answer of the current check was right, in the order shown, after feedback and the learner's consent.",
                &["Do not call before the learner has seen the feedback and agreed."],
                "stores right or wrong per question only; never feedback text",
                &[SESSION_NEED, Need { key: "openWorkflow.gradingCapability", assumes: "capability to store the assessments of the released recall batch" }, Need { key: "openWorkflow.questions", assumes: "the open recall batch's questions in the order to show and assess" }],
                25,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![
                session_id(),
                req("gradingCapability", Shape::String(Text::Token)),
                req("assessments", Shape::Array(Box::new(Shape::Object(vec![req("passed", Shape::Bool)])), 1, 50)),
            ]),
        },
        ToolDef {
            name: "start_skillpilot_exam",
            title: "Start the exam",
            manifest: manifest(
                "Start the final exam after the learner agreed to take it; returns all tasks at once.",
                &["Do not call without the learner's consent."],
                "starts only when every goal of the exam is mastered",
                &[SESSION_NEED, Need { key: "exam.released", assumes: "whether every goal of the exam scope is mastered" }],
                0,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![session_id()]),
        },
        ToolDef {
            name: "get_skillpilot_exam_solutions",
            title: "Reveal the exam solutions",
            manifest: manifest(
                "Reveal the reference solutions once the learner has handed in work for every task.",
                &["Do not call before the work is complete."],
                "reveals solutions only for the open exam's current step",
                &[SESSION_NEED, Need { key: "openWorkflow.examCapability", assumes: "capability to release the reference solutions of the open exam" }],
                0,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![session_id(), req("examCapability", Shape::String(Text::Token))]),
        },
        ToolDef {
            name: "record_skillpilot_exam_scores",
            title: "Save the exam scores",
            manifest: manifest(
                "Save the points for each exam task, in the order shown, after feedback and the learner's consent; the total and the pass are computed for you.",
                &["Do not call before the learner has seen the feedback and agreed."],
                "stores points per task only; totals and the pass are computed",
                &[SESSION_NEED, Need { key: "openWorkflow.scoringCapability", assumes: "capability to store the scores of the released exam" }, Need { key: "openWorkflow.tasks", assumes: "the open exam's tasks with their maximum points" }],
                0,
                ALL_EXITS,
            ),
            kind: Kind::Write,
            idempotent: true,
            input: Shape::Object(vec![
                session_id(),
                req("scoringCapability", Shape::String(Text::Token)),
                req("scores", Shape::Array(Box::new(Shape::Object(vec![req("points", Shape::Points)])), 1, 50)),
            ]),
        },
        ToolDef {
            name: "render_skillpilot_goal_visualization",
            title: "Show the goal's picture",
            manifest: manifest(
                "Show the picture of the goal about to be taught, exactly once, with the arguments given by the previous result.",
                &["Do not call on your own, to retry, or during a pause."],
                "shows a picture only; changes nothing and teaches nothing",
                &[SESSION_NEED, Need { key: "continuation.toolCall", assumes: "a server-filled render call issued for the current state" }],
                0,
                READ_EXITS,
            ),
            kind: Kind::Read,
            idempotent: true,
            input: Shape::Object(vec![session_id(), req("goalId", Shape::String(Text::Ident)), req("expectedStateVersion", Shape::Count)]),
        },
    ]
}

/// The published `inputSchema` of a tool.
pub fn input_schema(def: &ToolDef) -> Value {
    json_schema(&def.input)
}

/// The published `outputSchema` of a tool: every exit, the error shape included.
pub fn output_schema(def: &ToolDef) -> Value {
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
    let success = if def.name == "render_skillpilot_goal_visualization" {
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

/// What a handler produced: the structured result, a short summary, widget data, and what
/// the audit records.
pub struct ToolOutput {
    /// `structuredContent`.
    pub structured: Value,
    /// The one-line localized summary for `content`.
    pub summary: String,
    /// Widget-private `_meta`.
    pub meta: Option<Value>,
    /// Events appended by this call.
    pub events_appended: usize,
    /// The journey, for the audit.
    pub journey_id: Option<String>,
}

fn de(locale: &str) -> bool {
    !locale.starts_with("en")
}

fn summary(locale: &str, d: &str, e: &str) -> String {
    if de(locale) { d } else { e }.to_owned()
}

/// Resolves the session for a write tool: the id is required.
async fn session_of(app: &App, principal: &Principal, args: &Value) -> Result<ActiveSession, AppError> {
    match args.get("learningSessionId") {
        None | Some(Value::Null) => Err(AppError::SessionRequired),
        Some(Value::String(token)) => app.resolve_session(principal, token).await,
        Some(_) => Err(AppError::SessionInvalid),
    }
}

fn sealer<'a>(app: &'a App, session: &'a ActiveSession) -> SessionSealer<'a> {
    SessionSealer {
        keys: &app.keys,
        session_id: &session.row.session_id,
        journey_id: &session.row.journey_id,
        now: app.clock.now(),
        ttl: app.settings.capability_ttl,
    }
}

fn context_json(app: &App, session: &ActiveSession, state: &aggregates::learning_journey::LearningJourney) -> FullContext {
    app.context_of(state, &session.pack, session.tz, &sealer(app, session))
}

/// The factual context inside a special-workflow result: the full context minus its
/// imperative fields (and minus successor content where the learner must first consent).
fn factual(mut context: Value, keep_successor: bool) -> Value {
    if let Some(obj) = context.as_object_mut() {
        obj.remove("requiredAction");
        obj.remove("instruction");
        obj.remove("receipt");
        obj.remove("outcome");
        if !keep_successor {
            obj.remove("activeGoal");
            obj.remove("options");
        }
    }
    context
}

fn continuation(action: &str, consent_required: bool) -> Value {
    json!({"action": action, "consentRequired": consent_required})
}

/// Runs a tool by name. `Ok(None)` means the name is no tool.
pub async fn dispatch(
    app: &Arc<App>,
    principal: &Principal,
    name: &str,
    args: Value,
) -> Option<Result<ToolOutput, (AppError, String, Option<String>)>> {
    let def = definitions().into_iter().find(|d| d.name == name)?;
    Some(run(app, principal, &def, args).await)
}

type HandlerResult = Result<ToolOutput, (AppError, String, Option<String>)>;

async fn run(app: &Arc<App>, principal: &Principal, def: &ToolDef, args: Value) -> HandlerResult {
    let default_locale = app.settings.default_locale.clone();
    let fail = |e: AppError, locale: &str, journey: Option<String>| (e, locale.to_owned(), journey);

    // Session first (SPEC §5.3 order), the gate only for the context tool without an id.
    let session = if def.name == "get_skillpilot_learning_context" && args.get("learningSessionId").is_none() {
        app.gate(principal).await
    } else {
        session_of(app, principal, &args).await
    }
    .map_err(|e| fail(e, &default_locale, None))?;
    let locale = session.loaded.state.locale.clone();
    let journey = Some(session.row.journey_id.clone());
    validate(&args, &def.input).map_err(|e| fail(e, &locale, journey.clone()))?;
    match handle(app, def, &session, &args).await {
        // A write that cannot proceed without the learner's decision: the current decision
        // point, unchanged, as a clarification (SPEC §5.3) rather than a rejection.
        Err(AppError::NotAllowed) if def.kind == Kind::Write => {
            clarification(app, &session).await.map_err(|e| fail(e, &locale, journey.clone()))
        }
        other => other.map_err(|e| fail(e, &locale, journey)),
    }
}

async fn clarification(app: &App, session: &ActiveSession) -> Result<ToolOutput, AppError> {
    let loaded = app.load_journey(&session.row.journey_id).await?;
    let ctx = context_json(app, session, &loaded.state);
    if ctx.options.is_empty() || ctx.required_action != projections::full_context::RequiredAction::ChooseOption {
        return Err(AppError::NotAllowed);
    }
    let mut structured = serde_json::to_value(ctx).map_err(|_| AppError::Internal)?;
    structured["outcome"] = json!("clarification");
    let locale = loaded.state.locale.as_str();
    Ok(ToolOutput {
        structured,
        summary: summary(locale, "Erst ist eine Entscheidung nötig.", "A decision is needed first."),
        meta: None,
        events_appended: 0,
        journey_id: Some(session.row.journey_id.clone()),
    })
}

async fn handle(app: &Arc<App>, def: &ToolDef, session: &ActiveSession, args: &Value) -> Result<ToolOutput, AppError> {
    let journey_id = session.row.journey_id.clone();
    let locale = session.loaded.state.locale.as_str();
    let now = app.clock.now();
    let command = |command: JourneyCommand, expected: Option<u64>, identity: Option<RequestIdentity>| CommandRequest {
        journey_id: journey_id.clone(),
        command,
        expected_version: expected,
        identity,
        tool: def.name,
        actor: Actor::Learner,
    };
    match def.name {
        "get_skillpilot_learning_context" => {
            let mut ctx = serde_json::to_value(context_json(app, session, &session.loaded.state)).map_err(|_| AppError::Internal)?;
            if args.get("learningSessionId").is_none() {
                ctx["learningSessionId"] = Value::String(session.token.clone());
            }
            Ok(ToolOutput {
                structured: ctx,
                summary: summary(locale, "Lernstand geladen.", "Learning state loaded."),
                meta: None,
                events_appended: 0,
                journey_id: Some(journey_id),
            })
        }
        "choose_skillpilot_option" => {
            let token = args["option"]["optionToken"].as_str().unwrap_or_default();
            let claims = app.keys.open_option(token, &session.row.session_id, &journey_id, now)?;
            let identity = RequestIdentity {
                request_id: format!("opt:{}", blake3::hash(token.as_bytes()).to_hex()),
                replay_hash: replay_hash(&serde_json::to_value(&claims).map_err(|_| AppError::Internal)?),
            };
            let request = command(JourneyCommand::ChooseOption { choice: claims.choice.clone() }, Some(claims.ver), Some(identity));
            let executed = app.execute_seen(request, session.loaded.clone()).await.map_err(|e| match e {
                // An option published at an older version is stale, not a version race.
                AppError::StateConflict { .. } => AppError::OptionInvalid,
                other => other,
            })?;
            write_result(app, session, &executed, WriteKind::Choice)
        }
        "complete_skillpilot_goal" => {
            let decision = &args["decision"];
            let evidence = if decision["evidence"] == "independent" { Evidence::Independent } else { Evidence::Guided };
            let consent = if decision["consent"] == "closeOnly" { Consent::CloseOnly } else { Consent::CloseAndContinue };
            let expected = args["expectedStateVersion"].as_u64();
            let canonical_input = json!({"expectedStateVersion": expected, "decision": decision});
            let identity = RequestIdentity {
                request_id: args["clientRequestId"].as_str().unwrap_or_default().to_ascii_lowercase(),
                replay_hash: replay_hash(&canonical_input),
            };
            let executed = app
                .execute_seen(command(JourneyCommand::CompleteGoal { evidence, consent }, expected, Some(identity)), session.loaded.clone())
                .await?;
            write_result(app, session, &executed, WriteKind::Complete)
        }
        "start_skillpilot_verified_recall" => {
            let executed = app.execute_seen(command(JourneyCommand::StartRecall, None, None), session.loaded.clone()).await?;
            workflow_result(app, session, &executed, locale)
        }
        "start_skillpilot_exam" => {
            let executed = app.execute_seen(command(JourneyCommand::StartExam, None, None), session.loaded.clone()).await?;
            workflow_result(app, session, &executed, locale)
        }
        "get_skillpilot_verified_recall_answers"
        | "get_skillpilot_exam_solutions"
        | "record_skillpilot_verified_recall_results"
        | "record_skillpilot_exam_scores" => {
            let (field, step) = match def.name {
                "get_skillpilot_verified_recall_answers" => ("batchCapability", CapabilityStep::RecallAnswers),
                "get_skillpilot_exam_solutions" => ("examCapability", CapabilityStep::ExamSolutions),
                "record_skillpilot_verified_recall_results" => ("gradingCapability", CapabilityStep::RecallGrading),
                _ => ("scoringCapability", CapabilityStep::ExamScoring),
            };
            let token = args[field].as_str().unwrap_or_default();
            let claims = app.keys.open_capability(token, &session.row.session_id, &journey_id, now)?;
            if claims.step != step {
                return Err(AppError::CapabilityInvalid);
            }
            let instance = claims.inst;
            let (cmd, payload) = match step {
                CapabilityStep::RecallAnswers => (JourneyCommand::ReleaseRecallAnswers { instance }, Value::Null),
                CapabilityStep::ExamSolutions => (JourneyCommand::ReleaseExamSolutions { instance }, Value::Null),
                CapabilityStep::RecallGrading => {
                    let passed: Vec<bool> =
                        args["assessments"].as_array().into_iter().flatten().map(|a| a["passed"].as_bool().unwrap_or(false)).collect();
                    let payload = json!(passed);
                    (JourneyCommand::RecordRecallResults { instance, passed }, payload)
                }
                CapabilityStep::ExamScoring => {
                    let points: Vec<f64> =
                        args["scores"].as_array().into_iter().flatten().map(|s| s["points"].as_f64().unwrap_or(-1.0)).collect();
                    let payload = json!(points);
                    (JourneyCommand::RecordExamScores { instance, points }, payload)
                }
            };
            // The retry identity is the workflow step itself: any token for it, same payload →
            // the original result; another payload on a used step → CAPABILITY_USED.
            let identity = RequestIdentity {
                request_id: format!("cap:{instance}:{}", canonical(&json!(step))),
                replay_hash: replay_hash(&json!({"step": step, "instance": instance, "payload": payload})),
            };
            let executed = app.execute_seen(command(cmd, None, Some(identity)), session.loaded.clone()).await.map_err(|e| match e {
                AppError::IdempotencyKeyReused => AppError::CapabilityUsed,
                other => other,
            })?;
            match step {
                CapabilityStep::RecallAnswers | CapabilityStep::ExamSolutions => workflow_result(app, session, &executed, locale),
                CapabilityStep::RecallGrading => write_result(app, session, &executed, WriteKind::RecallResults),
                CapabilityStep::ExamScoring => write_result(app, session, &executed, WriteKind::ExamScores),
            }
        }
        "render_skillpilot_goal_visualization" => render(session, args),
        _ => Err(AppError::Internal),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Choice,
    Complete,
    RecallResults,
    ExamScores,
}

/// The render continuation when this commit activated a goal with an authorized picture and
/// the renderer is bound (without it the successor is taught without a picture).
fn render_call(app: &App, executed: &Executed) -> Option<Value> {
    if !app.registry.is_bound("render_skillpilot_goal_visualization") {
        return None;
    }
    let state = &executed.state;
    let activated = executed.committed.iter().any(|(_, e)| matches!(e, JourneyEvent::GoalActivated { .. }));
    let goal = state.active_goal.as_deref()?;
    let has_picture = executed.pack.goal(goal).is_some_and(|g| g.visualization.is_some());
    (activated && has_picture && state.next == NextStep::Teach && state.workflow.is_none()).then(|| {
        json!({
            "action": "renderGoalVisualizationThenTeachActiveGoal",
            "consentRequired": false,
            "toolCall": {"name": "render_skillpilot_goal_visualization", "arguments": {"goalId": goal, "expectedStateVersion": state.version}}
        })
    })
}

fn write_result(app: &App, session: &ActiveSession, executed: &Executed, kind: WriteKind) -> Result<ToolOutput, AppError> {
    let state = &executed.state;
    let locale = state.locale.as_str();
    // Choosing the recall mode starts the batch at once: that result is the recall start result.
    if executed.committed.iter().any(|(_, e)| matches!(e, JourneyEvent::RecallBatchStarted { .. })) {
        return workflow_result(app, session, executed, locale);
    }
    let ctx = serde_json::to_value(context_json(app, session, state)).map_err(|_| AppError::Internal)?;
    let rec = receipt(executed).unwrap_or_else(|| json!({"stored": "nothing", "stateVersion": state.version}));
    let events_appended = if executed.replayed { 0 } else { executed.committed.len() };
    let text = match rec["stored"].as_str().unwrap_or_default() {
        "goalCompleted" => summary(locale, "Ziel abgeschlossen und gespeichert.", "Goal completed and saved."),
        "recallResults" => summary(locale, "Abfrage-Ergebnisse gespeichert.", "Recall results saved."),
        "examScores" => summary(locale, "Prüfungspunkte gespeichert.", "Exam scores saved."),
        _ => summary(locale, "Auswahl gespeichert.", "Choice saved."),
    };
    let output = |structured: Value| ToolOutput {
        structured,
        summary: text.clone(),
        meta: None,
        events_appended,
        journey_id: Some(session.row.journey_id.clone()),
    };

    if let Some(render) = render_call(app, executed) {
        return Ok(output(json!({"outcome": "completed", "receipt": rec, "context": factual(ctx, true), "continuation": render})));
    }
    match kind {
        WriteKind::Choice | WriteKind::Complete => {
            let mut full = ctx;
            full["receipt"] = rec;
            Ok(output(full))
        }
        WriteKind::RecallResults => {
            let (action, consent, keep) = match &state.next {
                NextStep::OfferNextRecallBatch | NextStep::OfferRecall => ("offerNextRecallBatch", true, false),
                NextStep::Teach => ("teachActiveGoal", false, true),
                NextStep::ChooseGoal { .. } | NextStep::ChooseMode => ("chooseOption", false, true),
                NextStep::AwaitContinuation => ("awaitLearnerContinuation", false, false),
                // Contract: at the end, the exam still open is the one continuation; completion
                // is confirmed only when nothing is left.
                NextStep::OfferExam => ("offerExam", true, false),
                _ => ("confirmCompletion", false, false),
            };
            Ok(output(
                json!({"outcome": "completed", "receipt": rec, "context": factual(ctx, keep), "continuation": continuation(action, consent)}),
            ))
        }
        WriteKind::ExamScores => Ok(output(
            json!({"outcome": "completed", "receipt": rec, "context": factual(ctx, false), "continuation": continuation("reportExamResult", false)}),
        )),
    }
}

/// Results of the workflow steps that open or advance a batch or exam.
fn workflow_result(app: &App, session: &ActiveSession, executed: &Executed, locale: &str) -> Result<ToolOutput, AppError> {
    let state = &executed.state;
    let ctx = serde_json::to_value(context_json(app, session, state)).map_err(|_| AppError::Internal)?;
    let workflow = ctx.get("openWorkflow").cloned().ok_or(AppError::NotAllowed)?;
    let events_appended = if executed.replayed { 0 } else { executed.committed.len() };
    let version = state.version;
    use aggregates::learning_journey::{ExamStep, RecallStep};
    // Per step: what the receipt says, which items and capability it hands over, what follows.
    let (stored, items, capability, action, consent, de, en) = match state.workflow.as_ref() {
        Some(Workflow::VerifiedRecall { step: RecallStep::AwaitingAnswers, .. }) => (
            "recallStarted",
            "questions",
            "batchCapability",
            "presentQuestionsAndAwaitAnswers",
            false,
            "Abfrage gestartet.",
            "Recall check started.",
        ),
        Some(Workflow::VerifiedRecall { step: RecallStep::AnswersReleased, .. }) => (
            "recallAnswersReleased",
            "answers",
            "gradingCapability",
            "gradeGiveFeedbackAwaitConsent",
            true,
            "Sollantworten freigegeben.",
            "Reference answers released.",
        ),
        Some(Workflow::Exam { step: ExamStep::AwaitingWork, .. }) => {
            ("examStarted", "tasks", "examCapability", "presentTasksAndAwaitWork", false, "Prüfung gestartet.", "Exam started.")
        }
        Some(Workflow::Exam { step: ExamStep::SolutionsReleased, .. }) => (
            "examSolutionsReleased",
            "solutions",
            "scoringCapability",
            "scoreGiveFeedbackAwaitConsent",
            true,
            "Lösungen freigegeben.",
            "Solutions released.",
        ),
        None => return Err(AppError::NotAllowed),
    };
    let mut receipt = json!({"stored": stored, "stateVersion": version});
    if let Some(Workflow::VerifiedRecall { cards, step: RecallStep::AwaitingAnswers, .. }) = state.workflow.as_ref() {
        receipt["questions"] = json!(cards.len());
    }
    let mut structured = json!({
        "outcome": "completed",
        "receipt": receipt,
        "context": factual(ctx, false),
        "continuation": continuation(action, consent),
    });
    structured[items] = workflow[items].clone();
    structured[capability] = workflow[capability].clone();
    let text = summary(locale, de, en);
    // The open workflow's capabilities appear once, at the top level of a step result.
    if let Some(ctx) = structured.get_mut("context").and_then(Value::as_object_mut) {
        ctx.remove("openWorkflow");
    }
    Ok(ToolOutput { structured, summary: text, meta: None, events_appended, journey_id: Some(session.row.journey_id.clone()) })
}

fn render(session: &ActiveSession, args: &Value) -> Result<ToolOutput, AppError> {
    let state = &session.loaded.state;
    let goal_id = args["goalId"].as_str().unwrap_or_default();
    let version = args["expectedStateVersion"].as_u64().unwrap_or(u64::MAX);
    if version != state.version {
        return Err(AppError::StateConflict { current: state.version });
    }
    // Only the pair the backend issued for the current state: the active goal being taught.
    let issued = state.active_goal.as_deref() == Some(goal_id) && state.next == NextStep::Teach && state.workflow.is_none();
    let goal = session.pack.goal(goal_id).filter(|_| issued).ok_or(AppError::NotAllowed)?;
    let vis = goal.visualization.as_ref().ok_or(AppError::NotAllowed)?;
    let locale = state.locale.as_str();
    let meta = json!({
        "skillpilot/goalPicture": {
            "svg": vis.svg,
            "alt": session.pack.text(&vis.alt, locale),
            "title": session.pack.text(&goal.title, locale),
        }
    });
    Ok(ToolOutput {
        structured: json!({"outcome": "completed", "rendered": true}),
        summary: summary(locale, "Bild angezeigt.", "Picture shown."),
        meta: Some(meta),
        events_appended: 0,
        journey_id: Some(session.row.journey_id.clone()),
    })
}

/// The recovery of an error (SPEC §5.3 table): the start URL for session errors, a reload
/// proposal where that is the safe recovery, nothing for malformed calls.
pub fn recovery(app: &App, err: &AppError, locale: &str, start_url: &str) -> Option<Value> {
    let reload = || {
        let mut r = json!({
            "instruction": summary(locale, "Lade den Lernstand einmal neu und entscheide dann erneut.", "Reload the learning state once, then decide again."),
        });
        // Never a proposal that names a refused or restricted tool.
        if app.registry.may_propose("get_skillpilot_learning_context") {
            r["proposal"] = json!({"name": "get_skillpilot_learning_context", "arguments": {}});
        }
        r
    };
    match err {
        AppError::SessionRequired | AppError::SessionExpired | AppError::SessionInvalid => Some(json!({
            "instruction": summary(locale, "Bitte starte unter diesem Link eine Lernsitzung und komm dann zurück in den Chat.", "Please start a learning session at this link, then come back to the chat."),
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
            "instruction": summary(
                locale,
                "Ob der Aufruf gespeichert wurde, ist unbekannt. Wiederhole ihn genau einmal mit denselben Argumenten (dieselbe clientRequestId bzw. dasselbe Options-Payload): Wurde der erste Versuch gespeichert, kommt sein ursprüngliches Ergebnis zurück, nichts wird doppelt gespeichert.",
                "Whether the call was stored is unknown. Retry it exactly once with the same arguments (the same clientRequestId or option payload): if the first attempt was stored, its original result comes back and nothing is stored twice."
            ),
        })),
        AppError::NotEligible { .. } => Some(json!({
            "instruction": summary(locale, "Die Prüfung wird freigegeben, sobald alle Ziele gemeistert sind; lerne zuerst die offenen Ziele.", "The exam is released once every goal is mastered; learn the open goals first."),
        })),
        _ => None,
    }
}
