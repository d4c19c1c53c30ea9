//! What the two start tools share (a recall batch, an exam): an optional `clientRequestId` as
//! retry identity — a late exact retry returns the original batch or exam even after it
//! closed — and an optional `expectedStateVersion`. A start while the workflow is open returns
//! that open workflow, so two identical starts racing for one version give one start and one
//! answer with the same batch, never a `STATE_CONFLICT`.

use aggregates::learning_journey::JourneyCommand;
use serde_json::json;

use super::Call;
use crate::app::journeys::{Executed, RequestIdentity};
use crate::canonical::replay_hash;
use crate::error::AppError;

/// Runs a start command with its retry identity.
pub(super) async fn start(
    call: &Call<'_>,
    command: JourneyCommand,
    client_request_id: Option<String>,
    expected: Option<u64>,
) -> Result<Executed, AppError> {
    let identity = client_request_id.map(|id| RequestIdentity {
        request_id: id.to_ascii_lowercase(),
        replay_hash: replay_hash(&json!({"tool": call.tool.name(), "expectedStateVersion": expected})),
    });
    match call.execute(call.command(command.clone(), expected, identity.clone())).await {
        // Lost the race for the version to an identical start: on the fresh state the start
        // finds the batch the winner opened and returns it.
        Err(AppError::StateConflict { .. }) if expected.is_none() => call.app.execute(call.command(command, None, identity), None).await,
        other => other,
    }
}
