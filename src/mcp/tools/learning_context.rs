//! `get_skillpilot_learning_context`: the learner's full context, loaded once at the start of
//! every turn. Without a session id it is the gate: it opens (or resumes) the learner's
//! session and hands its id over.

use serde::Deserialize;

use super::result::Note;
use super::{manifest, meta, Call, Structured, ToolDef, ToolOutput, READ_EXITS};
use crate::error::AppError;
use crate::mcp::schema::{opt, Shape, Text};
use crate::registry::{Kind, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "get_skillpilot_learning_context",
            Kind::Read,
            Role::Context,
            manifest(
                "Load the learner's current learning state once at the start of every turn: language, active goal, progress, options and the one next action.",
                &["Do not call again after a successful change in the same turn — its result already is the new state."],
                "does not change anything and does not poll",
                &[],
                100,
                READ_EXITS,
            ),
        ),
        title: "Load the learning state",
        idempotent: true,
        input: Shape::Object(vec![opt("learningSessionId", Shape::String(Text::Token))]),
        widget: false,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    learning_session_id: Option<String>,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let mut ctx = call.context(call.state());
    if args.learning_session_id.is_none() {
        ctx.learning_session_id = Some(call.app.session_token(&call.session.row));
    }
    Ok(call.output(Structured::Context(Box::new(ctx)), Note::StateLoaded.text(call.lang()), 0))
}
