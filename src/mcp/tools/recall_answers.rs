//! `get_skillpilot_verified_recall_answers`: releases the reference answers of the open recall
//! batch, once the learner answered every question.

use aggregates::learning_journey::JourneyCommand;
use projections::full_context::CapabilityStep;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::capability::advance;
use super::result::workflow_result;
use super::{manifest, meta, session_id, Call, ToolDef, ToolOutput, ALL_EXITS, SESSION_NEED};
use crate::error::AppError;
use crate::mcp::schema::{req, Shape, Text};
use crate::registry::{Kind, Need, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "get_skillpilot_verified_recall_answers",
            Kind::Write,
            Role::Recall,
            manifest(
                "Reveal the reference answers once the learner has answered every question of the current check.",
                &["Do not call before all questions are answered."],
                "reveals answers only for the open check's current step",
                &[
                    SESSION_NEED,
                    Need {
                        key: "openWorkflow.batchCapability",
                        assumes: "capability to release the reference answers of the open recall batch",
                    },
                ],
                25,
                ALL_EXITS,
            ),
        ),
        title: "Reveal the recall answers",
        idempotent: true,
        input: Shape::Object(vec![session_id(), req("batchCapability", Shape::String(Text::Token))]),
        widget: false,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    /// Resolved before the arguments are read.
    #[serde(rename = "learningSessionId")]
    _session: IgnoredAny,
    batch_capability: String,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let executed = advance(call, &args.batch_capability, CapabilityStep::RecallAnswers, Value::Null, |instance| {
        JourneyCommand::ReleaseRecallAnswers { instance }
    })
    .await?;
    workflow_result(call, &executed)
}
