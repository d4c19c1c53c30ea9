//! What the two start tools share (a recall batch, an exam): an optional `clientRequestId` as
//! retry identity — a late exact retry returns the original batch or exam even after it
//! closed — and an optional `expectedStateVersion`. A start while the workflow is open returns
//! that open workflow, so two identical starts racing for one version give one start and one
//! answer with the same batch, never a `STATE_CONFLICT`.

use aggregates::learning_journey::JourneyCommand;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::json;

use super::result::workflow_result;
use super::{session_id, Call, ToolOutput};
use crate::app::journeys::{Executed, RequestIdentity};
use crate::canonical::replay_hash;
use crate::error::AppError;
use crate::mcp::schema::{opt, Shape, Text};

/// The input of both start tools: the session, and the optional retry identity and version.
pub(super) fn input() -> Shape {
    Shape::Object(vec![session_id(), opt("clientRequestId", Shape::String(Text::Uuid)), opt("expectedStateVersion", Shape::Count)])
}

/// The arguments of both start tools, as `input` describes them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    /// Resolved before the arguments are read.
    #[serde(rename = "learningSessionId")]
    _session: IgnoredAny,
    client_request_id: Option<String>,
    expected_state_version: Option<u64>,
}

/// Runs a start tool: the command with its retry identity, answered with the workflow's step.
pub(super) async fn handle(call: &Call<'_>, command: JourneyCommand, args: Args) -> Result<ToolOutput, AppError> {
    let executed = start(call, command, args.client_request_id, args.expected_state_version).await?;
    workflow_result(call, &executed)
}

/// Runs a start command with its retry identity.
async fn start(
    call: &Call<'_>,
    command: JourneyCommand,
    client_request_id: Option<String>,
    expected: Option<u64>,
) -> Result<Executed, AppError> {
    let identity = client_request_id.map(|id| RequestIdentity {
        request_id: id.to_ascii_lowercase(),
        replay_hash: replay_hash(&json!({"tool": call.tool.name(), "expectedStateVersion": expected})),
    });
    // Losing a race to an identical start is the command service's to settle: it decides once
    // more on the fresh state, where the start finds the batch the winner opened.
    call.execute(call.command(command, expected, identity)).await
}
