//! `start_skillpilot_verified_recall`: opens a recall batch of the cards the backend chose, and
//! hands all questions over at once.

use aggregates::learning_journey::JourneyCommand;

use super::{manifest, meta, start, Call, ToolDef, ToolOutput, ALL_EXITS, SESSION_NEED};
use crate::error::AppError;
use crate::registry::{Kind, Need, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "start_skillpilot_verified_recall",
            Kind::Write,
            Role::Recall,
            manifest(
                "Start a check of what the learner has already learned, after the learner agreed to it; returns all questions at once.",
                &["Do not call without the learner's consent or while a goal is being taught."],
                "chooses the cards itself; the coach never picks, counts or orders them",
                &[SESSION_NEED, Need { key: "requiredAction", assumes: "the one next action of a full context" }],
                25,
                ALL_EXITS,
            ),
        ),
        title: "Start a recall check",
        idempotent: true,
        input: start::input(),
        widget: false,
    }
}

pub(super) use start::Args;

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    start::handle(call, JourneyCommand::StartRecall, args).await
}
