//! `start_skillpilot_verified_recall`: opens a recall batch of the cards the backend chose, and
//! hands all questions over at once.

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
    let executed = start(call, JourneyCommand::StartRecall, args.client_request_id, args.expected_state_version).await?;
    workflow_result(call, &executed)
}
