//! `get_skillpilot_exam_solutions`: releases the reference solutions of the open exam, once the
//! learner handed in work for every task.

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
            "get_skillpilot_exam_solutions",
            Kind::Write,
            Role::Exam,
            manifest(
                "Reveal the reference solutions once the learner has handed in work for every task.",
                &["Do not call before the work is complete."],
                "reveals solutions only for the open exam's current step",
                &[
                    SESSION_NEED,
                    Need { key: "openWorkflow.examCapability", assumes: "capability to release the reference solutions of the open exam" },
                ],
                0,
                ALL_EXITS,
            ),
        ),
        title: "Reveal the exam solutions",
        idempotent: true,
        input: Shape::Object(vec![session_id(), req("examCapability", Shape::String(Text::Token))]),
        widget: false,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    /// Resolved before the arguments are read.
    #[serde(rename = "learningSessionId")]
    _session: IgnoredAny,
    exam_capability: String,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let executed = advance(call, &args.exam_capability, CapabilityStep::ExamSolutions, Value::Null, |instance| {
        JourneyCommand::ReleaseExamSolutions { instance }
    })
    .await?;
    workflow_result(call, &executed)
}
