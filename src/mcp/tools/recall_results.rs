//! `record_skillpilot_verified_recall_results`: stores right or wrong per question of the
//! released batch, in the order shown; never any feedback text.

use aggregates::learning_journey::JourneyCommand;
use projections::full_context::CapabilityStep;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::json;

use super::capability::advance;
use super::result::{write_result, WriteKind};
use super::{manifest, meta, session_id, Call, ToolDef, ToolOutput, ALL_EXITS, SESSION_NEED};
use crate::error::AppError;
use crate::mcp::schema::{req, Shape, Text};
use crate::registry::{Kind, Need, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "record_skillpilot_verified_recall_results",
            Kind::Write,
            Role::Recall,
            manifest(
                "Save whether each answer of the current check was right, in the order shown, after feedback and the learner's consent.",
                &["Do not call before the learner has seen the feedback and agreed."],
                "stores right or wrong per question only; never feedback text",
                &[
                    SESSION_NEED,
                    Need {
                        key: "openWorkflow.gradingCapability",
                        assumes: "capability to store the assessments of the released recall batch",
                    },
                    Need { key: "openWorkflow.questions", assumes: "the open recall batch's questions in the order to show and assess" },
                ],
                25,
                ALL_EXITS,
            ),
        ),
        title: "Save the recall results",
        idempotent: true,
        input: Shape::Object(vec![
            session_id(),
            req("gradingCapability", Shape::String(Text::Token)),
            req("assessments", Shape::Array(Box::new(Shape::Object(vec![req("passed", Shape::Bool)])), 1, 50)),
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
    grading_capability: String,
    assessments: Vec<Assessment>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Assessment {
    passed: bool,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let passed: Vec<bool> = args.assessments.iter().map(|a| a.passed).collect();
    let executed = advance(call, &args.grading_capability, CapabilityStep::RecallGrading, json!(passed), |instance| {
        JourneyCommand::RecordRecallResults { instance, passed }
    })
    .await?;
    write_result(call, &executed, WriteKind::RecallResults)
}
