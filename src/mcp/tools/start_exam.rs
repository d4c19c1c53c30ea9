//! `start_skillpilot_exam`: opens an exam attempt once every goal of its scope is mastered, and
//! hands all tasks over at once.

use aggregates::learning_journey::JourneyCommand;
use serde::de::IgnoredAny;
use serde::Deserialize;

use super::result::workflow_result;
use super::start::start;
use super::{manifest, meta, session_id, Call, ToolDef, ToolOutput, ALL_EXITS, SESSION_NEED};
use crate::error::AppError;
use crate::mcp::schema::{opt, Shape, Text};
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
        input: Shape::Object(vec![
            session_id(),
            opt("clientRequestId", Shape::String(Text::Uuid)),
            opt("expectedStateVersion", Shape::Count),
        ]),
        widget: false,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    /// Resolved before the arguments are read.
    #[serde(rename = "learningSessionId")]
    _session: IgnoredAny,
    client_request_id: Option<String>,
    expected_state_version: Option<u64>,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let executed = start(call, JourneyCommand::StartExam, args.client_request_id, args.expected_state_version).await?;
    workflow_result(call, &executed)
}
