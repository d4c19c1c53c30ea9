//! `complete_skillpilot_goal`: closes the goal being taught with the coach's evidence and the
//! learner's consent; the mastery is computed. `clientRequestId` is the retry identity.

use aggregates::learning_journey::{Consent, Evidence, JourneyCommand};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::result::{write_result, WriteKind};
use super::{manifest, meta, session_id, Call, ToolDef, ToolOutput, ALL_EXITS, SESSION_NEED};
use crate::app::journeys::RequestIdentity;
use crate::canonical::replay_hash;
use crate::error::AppError;
use crate::mcp::schema::{req, Shape, Text};
use crate::registry::{Kind, Need, Role};

pub(super) fn definition() -> ToolDef {
    ToolDef {
        meta: meta(
            "complete_skillpilot_goal",
            Kind::Write,
            Role::Other,
            manifest(
                "Close the goal being taught once the learner has shown enough understanding and agreed to close it; say whether it was shown independently or with help, and whether to go on.",
                &["Do not call after a solved task alone, or before the learner agreed."],
                "does not grade answers and takes no text; mastery is computed, never sent",
                &[
                    SESSION_NEED,
                    Need { key: "stateVersion", assumes: "the journey's current version, copied as expectedStateVersion" },
                    Need { key: "activeGoal", assumes: "the goal being taught now" },
                ],
                25,
                ALL_EXITS,
            ),
        ),
        title: "Complete the current goal",
        idempotent: true,
        input: Shape::Object(vec![
            session_id(),
            req("expectedStateVersion", Shape::Count),
            req("clientRequestId", Shape::String(Text::Uuid)),
            req(
                "decision",
                Shape::Object(vec![
                    req("evidence", Shape::Enum(&["independent", "guided"])),
                    req("consent", Shape::Enum(&["closeOnly", "closeAndContinue"])),
                ]),
            ),
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
    expected_state_version: u64,
    client_request_id: String,
    decision: Decision,
}

/// The decision as sent; serialized back unchanged it is part of the retry identity.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    evidence: EvidenceArg,
    consent: ConsentArg,
}

#[derive(Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
enum EvidenceArg {
    Independent,
    Guided,
}

#[derive(Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
enum ConsentArg {
    CloseOnly,
    CloseAndContinue,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let evidence = match args.decision.evidence {
        EvidenceArg::Independent => Evidence::Independent,
        EvidenceArg::Guided => Evidence::Guided,
    };
    let consent = match args.decision.consent {
        ConsentArg::CloseOnly => Consent::CloseOnly,
        ConsentArg::CloseAndContinue => Consent::CloseAndContinue,
    };
    let expected = args.expected_state_version;
    let identity = RequestIdentity {
        request_id: args.client_request_id.to_ascii_lowercase(),
        replay_hash: replay_hash(&json!({"expectedStateVersion": expected, "decision": args.decision})),
    };
    let executed = call.execute(call.command(JourneyCommand::CompleteGoal { evidence, consent }, Some(expected), Some(identity))).await?;
    write_result(call, &executed, WriteKind::Complete)
}
