//! What the four workflow-step tools share: a step runs only with the capability issued for
//! exactly that step of this session's open workflow, and the step itself is the retry
//! identity — any token for it with the same payload returns the original result, another
//! payload on a used step is `CAPABILITY_USED`.

use aggregates::learning_journey::JourneyCommand;
use projections::full_context::CapabilityStep;
use serde_json::{json, Value};

use super::Call;
use crate::app::journeys::{Executed, RequestIdentity};
use crate::canonical::{canonical, replay_hash};
use crate::error::AppError;

/// Opens `token` for `step` and runs the command `command` builds for the workflow instance.
pub(super) async fn advance(
    call: &Call<'_>,
    token: &str,
    step: CapabilityStep,
    payload: Value,
    command: impl FnOnce(u64) -> JourneyCommand,
) -> Result<Executed, AppError> {
    let claims = call.app.keys.open_capability(token, &call.session.row.session_id, call.journey_id(), call.app.clock.now())?;
    if claims.step != step {
        return Err(AppError::CapabilityInvalid);
    }
    let instance = claims.inst;
    let identity = RequestIdentity {
        request_id: format!("cap:{instance}:{}", canonical(&json!(step))),
        replay_hash: replay_hash(&json!({"step": step, "instance": instance, "payload": payload})),
    };
    call.execute(call.command(command(instance), None, Some(identity))).await.map_err(|e| match e {
        AppError::IdempotencyKeyReused => AppError::CapabilityUsed,
        other => other,
    })
}
