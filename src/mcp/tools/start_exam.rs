//! `start_skillpilot_exam`: opens an exam attempt once every goal of its scope is mastered, and
//! hands all tasks over at once.

use aggregates::learning_journey::JourneyCommand;

use super::{manifest, meta, start, Call, ToolDef, ToolOutput, ALL_EXITS, SESSION_NEED};
use crate::error::AppError;
use crate::registry::{Kind, Need, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "start_skillpilot_exam",
            Kind::Write,
            Role::Exam,
            manifest(
                "Start the final exam after the learner agreed to take it; returns all tasks at once.",
                &["Do not call without the learner's consent."],
                "starts only when every goal of the exam is mastered",
                &[SESSION_NEED, Need { key: "exam.released", assumes: "whether every goal of the exam scope is mastered" }],
                0,
                ALL_EXITS,
            ),
        ),
        title: "Start the exam",
        idempotent: true,
        input: start::input(),
        widget: false,
    }
}

pub(super) use start::Args;

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    start::handle(call, JourneyCommand::StartExam, args).await
}
