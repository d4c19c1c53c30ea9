//! The full context (R-7a, docs/tool-contract.md, wire shapes): the read model a coach receives, folded from the
//! aggregate state, the journey's pack, the locale, the time and the learner's time zone.
//! Field names are normative. Opaque tokens (option payloads, workflow capabilities) come from
//! a [`Sealer`] the caller injects, so this fold stays free of keys and randomness.

use aggregates::curriculum::Pack;
use aggregates::learning_journey::{ExamStep, LearningJourney, Mode, NextStep, OptionChoice, RecallStep, Workflow};
use aggregates::plan::plan_counts;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::receipt::Receipt;
use crate::text::{self, Lang};

/// The step of an open workflow a capability is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CapabilityStep {
    /// Recall: release the answers.
    RecallAnswers,
    /// Recall: record the assessments.
    RecallGrading,
    /// Exam: release the solutions.
    ExamSolutions,
    /// Exam: record the scores.
    ExamScoring,
}

/// Turns claims into opaque tokens. Implemented with authenticated encryption by the service
/// and deterministically in tests.
pub trait Sealer {
    /// A token for a published option at a state version.
    fn seal_option(&self, state_version: u64, choice: &OptionChoice) -> String;
    /// A token for the current step of a workflow instance.
    fn seal_capability(&self, instance: u64, step: CapabilityStep, state_version: u64) -> String;
}

/// The one imperative of a full context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RequiredAction {
    /// Present the options; map the learner's answer to one.
    ChooseOption,
    /// Teach the active goal.
    TeachActiveGoal,
    /// Due cards exist; offer verified recall.
    OfferVerifiedRecall,
    /// A batch is open; wait for all answers.
    AnswerVerifiedRecall,
    /// Answers are released; feedback, consent, then record.
    RecordVerifiedRecall,
    /// The exam is released; offer it.
    OfferExam,
    /// The exam is open; wait for the work.
    AnswerExam,
    /// Solutions are released; feedback, consent, then record.
    RecordExam,
    /// A successor waits for the learner's wish to go on.
    AwaitLearnerContinuation,
    /// Nothing left in the focus; confirm the completion.
    ConfirmCompletion,
}

/// The goal being taught.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActiveGoal {
    /// The goal's title in the learner's language.
    pub title: String,
    /// Localized teaching text.
    pub teaching: String,
}

/// Mastered leaf goals out of all, and of the focus when one is set.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Progress {
    /// Leaf goals mastered so far.
    pub mastered: usize,
    /// Leaf goals in the curriculum.
    pub total: usize,
    /// The focus and its counts; absent while the whole curriculum is the focus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focus: Option<FocusProgress>,
}

/// The area the learner focuses on, with the goals it covers (its own and those it builds on).
/// Named by its title only: goal ids never reach the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FocusProgress {
    /// The area's title in the learner's language.
    pub title: String,
    /// Goals of the focus mastered so far.
    pub mastered: usize,
    /// Goals the focus covers.
    pub total: usize,
}

/// What is due for verified recall now.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecallFacts {
    /// Cards due now.
    pub due_cards: usize,
}

/// Whether the exam is released.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExamFacts {
    /// Whether the exam is released.
    pub released: bool,
}

/// Done against target.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Count {
    /// Goals completed in the period.
    pub done: u32,
    /// Goals the plan asks for in the period.
    pub target: u32,
}

/// The unified plan status (R-3e).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// One factual, localized line (never an instruction).
    pub status_line: String,
    /// The learner's day, in their time zone.
    pub today: Count,
    /// The learner's week, in their time zone.
    pub week: Count,
}

/// A numbered text of an open workflow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Item {
    /// The position in the order shown, from 1.
    pub position: usize,
    /// The text in the learner's language.
    pub text: String,
}

/// An exam task as shown.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskItem {
    /// The position in the order shown, from 1.
    pub position: usize,
    /// The task's prompt in the learner's language.
    pub text: String,
    /// Largest number of points.
    pub max_points: u32,
}

/// The open workflow with its current step's capability (R-5h).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenWorkflow {
    /// `verifiedRecall` or `exam`.
    pub kind: &'static str,
    /// The step the workflow stands at.
    pub step: &'static str,
    /// The batch's questions, in the order to show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<Item>>,
    /// Released reference answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<Vec<Item>>,
    /// The exam's tasks with their maximum points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskItem>>,
    /// Released reference solutions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solutions: Option<Vec<Item>>,
    /// Capability to release the answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_capability: Option<String>,
    /// Capability to record the assessments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grading_capability: Option<String>,
    /// Capability to release the solutions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exam_capability: Option<String>,
    /// Capability to record the scores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scoring_capability: Option<String>,
}

/// The payload a coach copies unchanged into `choose_skillpilot_option`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionPayload {
    /// A sealed token naming the choice; copied unchanged.
    pub option_token: String,
}

/// A published option.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OptionView {
    /// `goal`, `mode`, `continue`, `declineExam`, `locale`, `autopilot` or `focus`.
    pub kind: &'static str,
    /// The option's label in the learner's language.
    pub label: String,
    /// The goal's title (goal options) or the area's (focus options; absent for the whole
    /// curriculum).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The mode (mode options).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The locale (locale options).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    /// The autopilot value (autopilot options).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autopilot: Option<bool>,
    /// What to copy.
    pub payload: OptionPayload,
    /// The decoded choice (never serialized).
    #[serde(skip)]
    pub choice: OptionChoice,
}

/// The learner's standing preferences (language, autopilot, focus) with their options.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// Whether autopilot is on.
    pub autopilot: bool,
    /// Locale and autopilot options, always published; focus options while nothing is being
    /// taught or checked.
    pub options: Vec<OptionView>,
}

/// The full context of docs/tool-contract.md, wire shapes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FullContext {
    /// Always `completed` for a full context.
    pub outcome: &'static str,
    /// The session id, on the gate call only (filled by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learning_session_id: Option<String>,
    /// The interaction language.
    pub communication_locale: String,
    /// The aggregate's sequence number.
    pub state_version: u64,
    /// The goal being taught.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_goal: Option<ActiveGoal>,
    /// Mastered out of all.
    pub progress: Progress,
    /// What is due for verified recall now.
    pub recall: RecallFacts,
    /// Whether the exam is released.
    pub exam: ExamFacts,
    /// Progress against today's and this week's targets.
    pub plan_status: PlanStatus,
    /// The open workflow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_workflow: Option<OpenWorkflow>,
    /// The choices of the current decision point.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<OptionView>,
    /// The learner's standing preferences (language, autopilot) with their options.
    pub settings: Settings,
    /// The one imperative.
    pub required_action: RequiredAction,
    /// Localized instruction for it.
    pub instruction: String,
    /// Proof of what a mutation stored (filled by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
}

/// The factual part of a full context, as a workflow step result carries it: everything but
/// the imperative fields (`outcome`, `requiredAction`, `instruction`, `receipt`), which the
/// step result's own continuation replaces.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Facts {
    /// As in the full context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learning_session_id: Option<String>,
    /// The interaction language.
    pub communication_locale: String,
    /// The aggregate's sequence number.
    pub state_version: u64,
    /// The goal being taught (left out where the learner must first consent to go on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_goal: Option<ActiveGoal>,
    /// Mastered out of all.
    pub progress: Progress,
    /// What is due for verified recall now.
    pub recall: RecallFacts,
    /// Whether the exam is released.
    pub exam: ExamFacts,
    /// Progress against today's and this week's targets.
    pub plan_status: PlanStatus,
    /// The open workflow (left out where the step result hands its items over itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_workflow: Option<OpenWorkflow>,
    /// Decision-point options (left out where the learner must first consent to go on).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<OptionView>,
    /// The learner's standing preferences (language, autopilot) with their options.
    pub settings: Settings,
}

impl FullContext {
    /// The facts without the imperatives.
    pub fn into_facts(self) -> Facts {
        Facts {
            learning_session_id: self.learning_session_id,
            communication_locale: self.communication_locale,
            state_version: self.state_version,
            active_goal: self.active_goal,
            progress: self.progress,
            recall: self.recall,
            exam: self.exam,
            plan_status: self.plan_status,
            open_workflow: self.open_workflow,
            options: self.options,
            settings: self.settings,
        }
    }
}

/// What the full context is folded from.
pub struct ContextInput<'a> {
    /// The aggregate state.
    pub state: &'a LearningJourney,
    /// The journey's pack version.
    pub pack: &'a Pack,
    /// The time due cards and plans are computed at.
    pub now: DateTime<Utc>,
    /// The learner's time zone.
    pub tz: Tz,
    /// Whether verified recall can run (its tools are bound).
    pub recall: bool,
}

/// The required action the state stands at.
pub fn required_action(state: &LearningJourney) -> RequiredAction {
    match &state.workflow {
        Some(Workflow::VerifiedRecall { step: RecallStep::AwaitingAnswers, .. }) => RequiredAction::AnswerVerifiedRecall,
        Some(Workflow::VerifiedRecall { step: RecallStep::AnswersReleased, .. }) => RequiredAction::RecordVerifiedRecall,
        Some(Workflow::Exam { step: ExamStep::AwaitingWork, .. }) => RequiredAction::AnswerExam,
        Some(Workflow::Exam { step: ExamStep::SolutionsReleased, .. }) => RequiredAction::RecordExam,
        None => match &state.next {
            NextStep::Teach => RequiredAction::TeachActiveGoal,
            NextStep::ChooseGoal { .. } | NextStep::ChooseMode => RequiredAction::ChooseOption,
            NextStep::OfferRecall | NextStep::OfferNextRecallBatch => RequiredAction::OfferVerifiedRecall,
            NextStep::AwaitContinuation => RequiredAction::AwaitLearnerContinuation,
            NextStep::OfferExam => RequiredAction::OfferExam,
            NextStep::ConfirmCompletion | NextStep::None => RequiredAction::ConfirmCompletion,
        },
    }
}

/// Fold the full context.
pub fn full_context(input: &ContextInput<'_>, sealer: &dyn Sealer) -> FullContext {
    let ContextInput { state, pack, now, tz, recall } = input;
    let lang = Lang::of(&state.locale);
    let loc = state.locale.as_str();
    let version = state.version;

    let active_goal = match (&state.next, &state.workflow, &state.active_goal) {
        (NextStep::Teach, None, Some(goal)) => pack.goal(goal).map(|g| ActiveGoal {
            title: pack.text(&g.title, loc).to_owned(),
            teaching: g.teaching.as_ref().map(|t| pack.text(t, loc).to_owned()).unwrap_or_default(),
        }),
        _ => None,
    };
    let total = pack.leaves().count();
    let mastered = pack.leaves().filter(|g| state.is_mastered(&g.id)).count();
    let focus = state.focus.as_deref().zip(state.focus_progress(pack)).map(|(area, (mastered, total))| FocusProgress {
        title: pack.goal(area).map(|g| pack.text(&g.title, loc).to_owned()).unwrap_or_default(),
        mastered,
        total,
    });
    let counts = plan_counts(state, *now, *tz);
    let option_view = |choice: &OptionChoice| option_view(pack, loc, lang, version, choice, sealer);

    let open_workflow = state.workflow.as_ref().map(|w| open_workflow(pack, loc, w, version, sealer));
    let options = state.options_at(pack, *now, *recall);
    // At a finished curriculum with due cards the recall option is the decision to present.
    let action = match required_action(state) {
        RequiredAction::ConfirmCompletion if !options.is_empty() => RequiredAction::ChooseOption,
        action => action,
    };
    FullContext {
        outcome: "completed",
        learning_session_id: None,
        communication_locale: state.locale.clone(),
        state_version: version,
        active_goal,
        progress: Progress { mastered, total, focus },
        recall: RecallFacts { due_cards: state.due_cards(pack, *now).len() },
        exam: ExamFacts { released: state.exam_released(pack) },
        plan_status: PlanStatus {
            status_line: text::status_line(lang, counts.today_done, counts.today_target, counts.week_done, counts.week_target),
            today: Count { done: counts.today_done, target: counts.today_target },
            week: Count { done: counts.week_done, target: counts.week_target },
        },
        open_workflow,
        options: options.iter().map(option_view).collect(),
        settings: Settings { autopilot: state.autopilot, options: state.setting_options(pack).iter().map(option_view).collect() },
        required_action: action,
        instruction: text::instruction(lang, action).to_owned(),
        receipt: None,
    }
}

fn option_view(pack: &Pack, loc: &str, lang: Lang, version: u64, choice: &OptionChoice, sealer: &dyn Sealer) -> OptionView {
    let mut view = OptionView {
        kind: "continue",
        label: String::new(),
        title: None,
        mode: None,
        locale: None,
        autopilot: None,
        payload: OptionPayload { option_token: sealer.seal_option(version, choice) },
        choice: choice.clone(),
    };
    match choice {
        OptionChoice::Goal { goal_id } => {
            let title = pack.goal(goal_id).map(|g| pack.text(&g.title, loc).to_owned()).unwrap_or_default();
            view.kind = "goal";
            view.label = title.clone();
            view.title = Some(title);
        }
        OptionChoice::Mode { mode } => {
            view.kind = "mode";
            view.label = text::mode_label(lang, *mode).to_owned();
            view.mode = Some(*mode);
        }
        OptionChoice::Continue => view.label = text::continue_label(lang).to_owned(),
        OptionChoice::DeclineExam => {
            view.kind = "declineExam";
            view.label = text::decline_exam_label(lang).to_owned();
        }
        OptionChoice::Locale { locale } => {
            view.kind = "locale";
            view.label = text::locale_label(lang, locale);
            view.locale = Some(locale.clone());
        }
        OptionChoice::Autopilot { autopilot } => {
            view.kind = "autopilot";
            view.label = text::autopilot_label(lang, *autopilot).to_owned();
            view.autopilot = Some(*autopilot);
        }
        OptionChoice::Focus { goal_id } => {
            let title = goal_id.as_deref().and_then(|g| pack.goal(g)).map(|g| pack.text(&g.title, loc).to_owned());
            view.kind = "focus";
            view.label = text::focus_label(lang, title.as_deref());
            view.title = title;
        }
    }
    view
}

fn open_workflow(pack: &Pack, loc: &str, workflow: &Workflow, version: u64, sealer: &dyn Sealer) -> OpenWorkflow {
    let mut view = OpenWorkflow {
        kind: "verifiedRecall",
        step: "awaitingAnswers",
        questions: None,
        answers: None,
        tasks: None,
        solutions: None,
        batch_capability: None,
        grading_capability: None,
        exam_capability: None,
        scoring_capability: None,
    };
    match workflow {
        Workflow::VerifiedRecall { instance, cards, step } => {
            let cards: Vec<_> = cards.iter().filter_map(|c| pack.card(c).map(|(_, card)| card)).collect();
            view.questions = Some(
                cards.iter().enumerate().map(|(i, c)| Item { position: i + 1, text: pack.text(&c.question, loc).to_owned() }).collect(),
            );
            match step {
                RecallStep::AwaitingAnswers => {
                    view.batch_capability = Some(sealer.seal_capability(*instance, CapabilityStep::RecallAnswers, version));
                }
                RecallStep::AnswersReleased => {
                    view.step = "answersReleased";
                    view.answers = Some(
                        cards
                            .iter()
                            .enumerate()
                            .map(|(i, c)| Item { position: i + 1, text: pack.text(&c.answer, loc).to_owned() })
                            .collect(),
                    );
                    view.grading_capability = Some(sealer.seal_capability(*instance, CapabilityStep::RecallGrading, version));
                }
            }
        }
        Workflow::Exam { instance, step } => {
            view.kind = "exam";
            view.tasks = Some(
                pack.exam
                    .tasks
                    .iter()
                    .enumerate()
                    .map(|(i, t)| TaskItem { position: i + 1, text: pack.text(&t.prompt, loc).to_owned(), max_points: t.max_points })
                    .collect(),
            );
            match step {
                ExamStep::AwaitingWork => {
                    view.step = "awaitingWork";
                    view.exam_capability = Some(sealer.seal_capability(*instance, CapabilityStep::ExamSolutions, version));
                }
                ExamStep::SolutionsReleased => {
                    view.step = "solutionsReleased";
                    view.solutions = Some(
                        pack.exam
                            .tasks
                            .iter()
                            .enumerate()
                            .map(|(i, t)| Item { position: i + 1, text: pack.text(&t.solution, loc).to_owned() })
                            .collect(),
                    );
                    view.scoring_capability = Some(sealer.seal_capability(*instance, CapabilityStep::ExamScoring, version));
                }
            }
        }
    }
    view
}

/// The time-independent part of a full context, as persisted in the view and compared by
/// replay: the time-dependent blocks (`recall`, `planStatus`) and the opaque tokens (fresh
/// nonces) are left out.
pub fn persisted_view(context: &FullContext) -> Value {
    let mut value = serde_json::to_value(context).unwrap_or(Value::Null);
    if let Some(obj) = value.as_object_mut() {
        obj.remove("recall");
        obj.remove("planStatus");
        obj.remove("receipt");
        obj.remove("learningSessionId");
        if let Some(Value::Object(w)) = obj.get_mut("openWorkflow") {
            for cap in ["batchCapability", "gradingCapability", "examCapability", "scoringCapability"] {
                w.remove(cap);
            }
        }
        strip_payloads(obj.get_mut("options"));
        if let Some(Value::Object(s)) = obj.get_mut("settings") {
            strip_payloads(s.get_mut("options"));
        }
    }
    value
}

fn strip_payloads(options: Option<&mut Value>) {
    if let Some(Value::Array(items)) = options {
        for item in items {
            if let Value::Object(o) = item {
                o.remove("payload");
            }
        }
    }
}

/// One published context key with its four parts (docs/registry.md): what a tool may rely on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ContextKey {
    /// Path in the result, e.g. `openWorkflow.batchCapability`.
    pub name: &'static str,
    /// The key's JSON type.
    #[serde(rename = "type")]
    pub ty: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// How long it stays valid.
    pub lifetime: &'static str,
}

/// Every key the full context and the step results publish, with its four parts. A change of
/// any part changes the seam signature of every tool that needs the key.
pub const CONTEXT_KEYS: &[ContextKey] = &[
    ContextKey {
        name: "learningSessionId",
        ty: "string",
        meaning: "opaque capability addressing the learner's learning session in this chat; copied unchanged into every call",
        lifetime: "the session: 12 h idle, 7 days absolute",
    },
    ContextKey {
        name: "communicationLocale",
        ty: "string",
        meaning: "the language of every visible answer",
        lifetime: "until a locale option is chosen",
    },
    ContextKey {
        name: "stateVersion",
        ty: "integer",
        meaning: "sequence number of the journey's last stored event; copied as expectedStateVersion",
        lifetime: "until the next stored change",
    },
    ContextKey {
        name: "activeGoal",
        ty: "object",
        meaning: "the goal being taught now, by title and teaching text",
        lifetime: "until the goal is completed",
    },
    ContextKey { name: "requiredAction", ty: "string", meaning: "the one next action of a full context", lifetime: "this state version" },
    ContextKey {
        name: "options",
        ty: "array",
        meaning: "the choices of a decision point, each with a payload copied unchanged",
        lifetime: "this state version, at most 24 h",
    },
    ContextKey {
        name: "settings.options",
        ty: "array",
        meaning: "the standing preferences (locale, autopilot) with their payloads",
        lifetime: "this state version, at most 24 h",
    },
    ContextKey {
        name: "exam.released",
        ty: "boolean",
        meaning: "whether every goal of the exam scope is mastered",
        lifetime: "until mastery changes",
    },
    ContextKey {
        name: "openWorkflow.questions",
        ty: "array",
        meaning: "the open recall batch's questions in the order to show and assess",
        lifetime: "the open batch",
    },
    ContextKey {
        name: "openWorkflow.batchCapability",
        ty: "string",
        meaning: "capability to release the reference answers of the open recall batch",
        lifetime: "the awaitingAnswers step, at most 24 h",
    },
    ContextKey {
        name: "openWorkflow.gradingCapability",
        ty: "string",
        meaning: "capability to store the assessments of the released recall batch",
        lifetime: "the answersReleased step, at most 24 h",
    },
    ContextKey {
        name: "openWorkflow.tasks",
        ty: "array",
        meaning: "the open exam's tasks with their maximum points, in the order to show and score",
        lifetime: "the open exam",
    },
    ContextKey {
        name: "openWorkflow.examCapability",
        ty: "string",
        meaning: "capability to release the reference solutions of the open exam",
        lifetime: "the awaitingWork step, at most 24 h",
    },
    ContextKey {
        name: "openWorkflow.scoringCapability",
        ty: "string",
        meaning: "capability to store the scores of the released exam",
        lifetime: "the solutionsReleased step, at most 24 h",
    },
    ContextKey {
        name: "continuation.toolCall",
        ty: "object",
        meaning: "a server-filled render call issued for the current state, called once at once",
        lifetime: "this state version",
    },
];
