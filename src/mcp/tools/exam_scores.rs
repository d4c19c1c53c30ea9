//! `record_skillpilot_exam_scores`: stores the points per task of the released exam, in the
//! order shown; the total and the pass are computed.

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
            "record_skillpilot_exam_scores",
            Kind::Write,
            Role::Exam,
            manifest(
                "Save the points for each exam task, in the order shown, after feedback and the learner's consent; the total and the pass are computed for you.",
                &["Do not call before the learner has seen the feedback and agreed."],
                "stores points per task only; totals and the pass are computed",
                &[
                    SESSION_NEED,
                    Need { key: "openWorkflow.scoringCapability", assumes: "capability to store the scores of the released exam" },
                    Need { key: "openWorkflow.tasks", assumes: "the open exam's tasks with their maximum points" },
                ],
                0,
                ALL_EXITS,
            ),
        ),
        title: "Save the exam scores",
        idempotent: true,
        input: Shape::Object(vec![
            session_id(),
            req("scoringCapability", Shape::String(Text::Token)),
            req("scores", Shape::Array(Box::new(Shape::Object(vec![req("points", Shape::Points)])), 1, 50)),
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
    scoring_capability: String,
    scores: Vec<Score>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Score {
    points: f64,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let points: Vec<f64> = args.scores.iter().map(|s| s.points).collect();
    let executed = advance(call, &args.scoring_capability, CapabilityStep::ExamScoring, json!(points), |instance| {
        JourneyCommand::RecordExamScores { instance, points }
    })
    .await?;
    write_result(call, &executed, WriteKind::ExamScores)
}
