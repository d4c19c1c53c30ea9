//! `render_skillpilot_goal_visualization`: hands the picture of the goal about to be taught to
//! the widget — only for the (goal, version) pair the backend issued for the current state.

use aggregates::learning_journey::{JourneyEvent, NextStep};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::json;

use super::result::Note;
use super::{manifest, meta, session_id, Call, Structured, Tool, ToolDef, ToolOutput, READ_EXITS, SESSION_NEED};
use crate::error::AppError;
use crate::mcp::schema::{req, Shape, Text};
use crate::registry::{Kind, Need, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "render_skillpilot_goal_visualization",
            Kind::Read,
            Role::Picture,
            manifest(
                "Show the picture of the goal about to be taught, exactly once, with the arguments given by the previous result.",
                &["Do not call on your own, to retry, or during a pause."],
                "shows a picture only; changes nothing and teaches nothing",
                &[SESSION_NEED, Need { key: "continuation.toolCall", assumes: "a server-filled render call issued for the current state" }],
                0,
                READ_EXITS,
            ),
        ),
        title: "Show the goal's picture",
        idempotent: true,
        input: Shape::Object(vec![session_id(), req("goalId", Shape::String(Text::Ident)), req("expectedStateVersion", Shape::Count)]),
        widget: true,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    /// Resolved before the arguments are read.
    #[serde(rename = "learningSessionId")]
    _session: IgnoredAny,
    goal_id: String,
    expected_state_version: u64,
}

/// The tools whose results issue a render call: a write that activated a goal with a picture.
const ISSUERS: [Tool; 3] = [Tool::ChooseOption, Tool::CompleteGoal, Tool::RecallResults];

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let state = call.state();
    if args.expected_state_version != state.version {
        return Err(AppError::StateConflict { current: state.version });
    }
    // Contract: only a pair the backend issued in a render call for the current state — the
    // commit that produced this version activated exactly this goal through a coach tool, and
    // the goal is still being taught. A pair derived from the state alone (the goal activated
    // at session start, say) was never issued.
    let activated_here = match call.app.event_at(call.journey_id(), state.version).await? {
        Some((JourneyEvent::GoalActivated { goal_id, .. }, tool)) => goal_id == args.goal_id && ISSUERS.iter().any(|t| t.name() == tool),
        _ => false,
    };
    let issued = activated_here
        && state.active_goal.as_deref() == Some(args.goal_id.as_str())
        && state.next == NextStep::Teach
        && state.workflow.is_none();
    let pack = &call.session.pack;
    let goal = pack.goal(&args.goal_id).filter(|_| issued).ok_or(AppError::NotAllowed)?;
    let vis = goal.visualization.as_ref().ok_or(AppError::NotAllowed)?;
    let locale = state.locale.as_str();
    let mut output = call.output(Structured::Rendered { outcome: "completed", rendered: true }, Note::PictureShown.text(call.lang()), 0);
    output.meta = Some(json!({
        "skillpilot/goalPicture": {
            "svg": vis.svg,
            "alt": pack.text(&vis.alt, locale),
            "title": pack.text(&goal.title, locale),
        }
    }));
    Ok(output)
}
