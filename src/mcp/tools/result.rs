//! The results of the tools, typed until the transport edge serializes them: the full context
//! (reads, choices, completions, clarifications), the step result of a workflow step or of a
//! write whose successor needs the learner's consent, and the rendered picture. The full
//! context is computed once per call and reused for the result.

use aggregates::learning_journey::{JourneyEvent, NextStep};
use projections::full_context::{Facts, FullContext, Item, RequiredAction, TaskItem};
use projections::receipt::Receipt;
use projections::text::Lang;
use serde::Serialize;
use serde_json::Value;

use super::{Call, Tool};
use crate::app::journeys::Executed;
use crate::error::AppError;
use crate::store::IfCurrent;

/// What a handler produced: the structured result, a short summary, widget data, and what
/// the audit records.
pub struct ToolOutput {
    pub structured: Structured,
    /// The one-line localized summary for `content`.
    pub summary: &'static str,
    pub meta: Option<Value>,
    /// Events appended by this call.
    pub events_appended: usize,
    /// The journey, for the audit.
    pub journey_id: Option<String>,
    /// A read answered from this process's copy of the journey: its audit rows, and so the
    /// answer, stand only if the log still ends there (ADR 0011).
    pub if_current: Option<IfCurrent>,
}

/// The kinds of `structuredContent`.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Structured {
    /// A full context (`outcome` `completed` or `clarification`).
    Context(Box<FullContext>),
    /// A step result: receipt, facts, one continuation.
    Step(Box<StepResult>),
    /// The picture was handed to the widget.
    Rendered { outcome: &'static str, rendered: bool },
}

impl Structured {
    /// Whether the learner must decide before anything is stored.
    pub fn is_clarification(&self) -> bool {
        matches!(self, Self::Context(ctx) if ctx.outcome == "clarification")
    }
}

/// The result of a workflow step, or of a write whose successor needs consent or a picture
/// first: what was stored, the facts, and the one continuation.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    outcome: &'static str,
    receipt: Receipt,
    context: Facts,
    continuation: Continuation,
    #[serde(flatten)]
    handover: Handover,
}

/// What a workflow step hands over at the top level: its items and its one capability.
#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Handover {
    #[serde(skip_serializing_if = "Option::is_none")]
    questions: Option<Vec<Item>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answers: Option<Vec<Item>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tasks: Option<Vec<TaskItem>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    solutions: Option<Vec<Item>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_capability: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grading_capability: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exam_capability: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scoring_capability: Option<String>,
}

/// The one thing the coach does next.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Continuation {
    action: &'static str,
    consent_required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call: Option<RenderCall>,
}

impl Continuation {
    fn to(action: &'static str, consent_required: bool) -> Self {
        Self { action, consent_required, tool_call: None }
    }
}

/// The server-filled call of the picture tool.
#[derive(Serialize)]
struct RenderCall {
    name: &'static str,
    arguments: RenderArguments,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RenderArguments {
    goal_id: String,
    expected_state_version: u64,
}

/// Summaries of the results that store nothing.
#[derive(Clone, Copy)]
pub(super) enum Note {
    StateLoaded,
    DecisionNeeded,
    PictureShown,
}

impl Note {
    pub(super) fn text(self, lang: Lang) -> &'static str {
        match (self, lang) {
            (Self::StateLoaded, Lang::De) => "Lernstand geladen.",
            (Self::StateLoaded, Lang::En) => "Learning state loaded.",
            (Self::DecisionNeeded, Lang::De) => "Erst ist eine Entscheidung nötig.",
            (Self::DecisionNeeded, Lang::En) => "A decision is needed first.",
            (Self::PictureShown, Lang::De) => "Bild angezeigt.",
            (Self::PictureShown, Lang::En) => "Picture shown.",
        }
    }
}

/// Which write produced a result: it decides the continuation after the commit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteKind {
    Choice,
    Complete,
    RecallResults,
    ExamScores,
}

fn appended(executed: &Executed) -> usize {
    if executed.replayed {
        0
    } else {
        executed.committed.len()
    }
}

/// The facts of a context; the successor content (the next goal, the options) only where the
/// learner needs no consent before it.
fn facts(ctx: FullContext, keep_successor: bool) -> Facts {
    let mut facts = ctx.into_facts();
    if !keep_successor {
        facts.active_goal = None;
        facts.options = Vec::new();
    }
    facts
}

/// The render continuation when this commit activated a goal with a picture and the picture
/// tool is bound (without it the successor is taught without a picture).
fn render_call(call: &Call<'_>, executed: &Executed) -> Option<Continuation> {
    let picture = Tool::RenderPicture;
    if !call.app.registry.is_bound(picture.name()) {
        return None;
    }
    let state = &executed.state;
    let activated = executed.committed.iter().any(|(_, e)| matches!(e, JourneyEvent::GoalActivated { .. }));
    let goal = state.active_goal.as_deref()?;
    let has_picture = executed.pack.goal(goal).is_some_and(|g| g.visualization.is_some());
    (activated && has_picture && state.next == NextStep::Teach && state.workflow.is_none()).then(|| Continuation {
        action: "renderGoalVisualizationThenTeachActiveGoal",
        consent_required: false,
        tool_call: Some(RenderCall {
            name: picture.name(),
            arguments: RenderArguments { goal_id: goal.to_owned(), expected_state_version: state.version },
        }),
    })
}

/// The result of a write that stored a choice, a completion or an assessment.
pub(super) fn write_result(call: &Call<'_>, executed: &Executed, kind: WriteKind) -> Result<ToolOutput, AppError> {
    let state = &executed.state;
    // Choosing the recall mode starts the batch at once: that result is the recall start result.
    if executed.committed.iter().any(|(_, e)| matches!(e, JourneyEvent::RecallBatchStarted { .. })) {
        return workflow_result(call, executed);
    }
    let mut ctx = call.context(state);
    let receipt = Receipt::of_commit(executed.committed.first().map(|(_, e)| e), state, &executed.pack);
    let summary = receipt.summary(Lang::of(&state.locale));
    let step = |receipt, context, continuation| {
        Structured::Step(Box::new(StepResult { outcome: "completed", receipt, context, continuation, handover: Handover::default() }))
    };
    let structured = if let Some(render) = render_call(call, executed) {
        step(receipt, facts(ctx, true), render)
    } else {
        match kind {
            WriteKind::Choice | WriteKind::Complete => {
                ctx.receipt = Some(receipt);
                Structured::Context(Box::new(ctx))
            }
            WriteKind::RecallResults => {
                let (action, consent, keep) = match &state.next {
                    NextStep::OfferNextRecallBatch | NextStep::OfferRecall => ("offerNextRecallBatch", true, false),
                    NextStep::Teach => ("teachActiveGoal", false, true),
                    NextStep::ChooseGoal { .. } | NextStep::ChooseMode => ("chooseOption", false, true),
                    NextStep::AwaitContinuation => ("awaitLearnerContinuation", false, false),
                    // Contract: at the end, the exam still open is the one continuation;
                    // completion is confirmed only when nothing is left.
                    NextStep::OfferExam => ("offerExam", true, false),
                    NextStep::ConfirmCompletion | NextStep::None => ("confirmCompletion", false, false),
                };
                step(receipt, facts(ctx, keep), Continuation::to(action, consent))
            }
            WriteKind::ExamScores => step(receipt, facts(ctx, false), Continuation::to("reportExamResult", false)),
        }
    };
    Ok(call.output(structured, summary, appended(executed)))
}

/// The result of a step that opens or advances a recall batch or an exam: the step's items and
/// capability at the top level, the facts without the open workflow, and what follows.
pub(super) fn workflow_result(call: &Call<'_>, executed: &Executed) -> Result<ToolOutput, AppError> {
    let state = &executed.state;
    let receipt = Receipt::of_workflow(state).ok_or(AppError::NotAllowed)?;
    let mut ctx = call.context(state);
    let workflow = ctx.open_workflow.take().ok_or(AppError::NotAllowed)?;
    use projections::receipt::Stored;
    let (handover, action, consent) = match receipt.stored {
        Stored::RecallStarted { .. } => (
            Handover { questions: workflow.questions, batch_capability: workflow.batch_capability, ..Handover::default() },
            "presentQuestionsAndAwaitAnswers",
            false,
        ),
        Stored::RecallAnswersReleased => (
            Handover { answers: workflow.answers, grading_capability: workflow.grading_capability, ..Handover::default() },
            "gradeGiveFeedbackAwaitConsent",
            true,
        ),
        Stored::ExamStarted => (
            Handover { tasks: workflow.tasks, exam_capability: workflow.exam_capability, ..Handover::default() },
            "presentTasksAndAwaitWork",
            false,
        ),
        Stored::ExamSolutionsReleased => (
            Handover { solutions: workflow.solutions, scoring_capability: workflow.scoring_capability, ..Handover::default() },
            "scoreGiveFeedbackAwaitConsent",
            true,
        ),
        _ => return Err(AppError::NotAllowed),
    };
    let summary = receipt.summary(Lang::of(&state.locale));
    let result =
        StepResult { outcome: "completed", receipt, context: facts(ctx, false), continuation: Continuation::to(action, consent), handover };
    Ok(call.output(Structured::Step(Box::new(result)), summary, appended(executed)))
}

/// The current decision point, unchanged, as a clarification.
pub(super) async fn clarification(call: &Call<'_>) -> Result<ToolOutput, AppError> {
    let loaded = call.app.load_journey(call.journey_id()).await?;
    let mut ctx = call.context(&loaded.state);
    if ctx.options.is_empty() || ctx.required_action != RequiredAction::ChooseOption {
        return Err(AppError::NotAllowed);
    }
    ctx.outcome = "clarification";
    let summary = Note::DecisionNeeded.text(Lang::of(&loaded.state.locale));
    Ok(call.output(Structured::Context(Box::new(ctx)), summary, 0))
}
