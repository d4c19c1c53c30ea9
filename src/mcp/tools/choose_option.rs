//! `choose_skillpilot_option`: records the learner's choice among the options just offered.
//! The option token is the retry identity: the same token again returns the original result.

use aggregates::learning_journey::JourneyCommand;
use serde::de::IgnoredAny;
use serde::Deserialize;

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
            "choose_skillpilot_option",
            Kind::Write,
            Role::Other,
            manifest(
                "Record the learner's clear choice among the options just offered (next goal, mode, continue, language, autopilot), copying the offered option unchanged.",
                &["Do not call when the learner's words fit no offered option or fit several — ask instead."],
                "chooses nothing by itself and accepts no option that was not just offered",
                &[
                    SESSION_NEED,
                    Need { key: "options", assumes: "the choices of a decision point, each with a payload copied unchanged" },
                    Need { key: "settings.options", assumes: "the standing preferences with their payloads" },
                ],
                0,
                ALL_EXITS,
            ),
        ),
        title: "Choose an offered option",
        idempotent: true,
        input: Shape::Object(vec![session_id(), req("option", Shape::Object(vec![req("optionToken", Shape::String(Text::Token))]))]),
        widget: false,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Args {
    /// Resolved before the arguments are read.
    #[serde(rename = "learningSessionId")]
    _session: IgnoredAny,
    option: OptionArg,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OptionArg {
    option_token: String,
}

pub(super) async fn handle(call: &Call<'_>, args: Args) -> Result<ToolOutput, AppError> {
    let token = args.option.option_token;
    let claims = call.app.keys.open_option(&token, &call.session.row.session_id, call.journey_id(), call.app.clock.now())?;
    let identity = RequestIdentity {
        request_id: format!("opt:{}", blake3::hash(token.as_bytes()).to_hex()),
        replay_hash: replay_hash(&serde_json::to_value(&claims).map_err(|_| AppError::Internal)?),
    };
    let request = call.command(JourneyCommand::ChooseOption { choice: claims.choice.clone() }, Some(claims.ver), Some(identity));
    let executed = call.execute(request).await.map_err(|e| match e {
        // An option published at an older version is stale, not a version race.
        AppError::StateConflict { .. } => AppError::OptionInvalid,
        other => other,
    })?;
    write_result(call, &executed, WriteKind::Choice)
}
