//! The golden journeys of the contract, played over real HTTP by a client we did not write
//! (the official Python MCP SDK, `tests/mcp/golden.py`), on both stores; then a privacy scan of
//! every result they produced.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use skillpilot::app::sessions::StartSession;

use crate::both_stores;
use crate::helpers::{content_dir, TestApp};

pub(crate) fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SKILLPILOT_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python");
    assert!(venv.exists(), "the Python MCP SDK is needed for the golden journeys: run scripts/test, which installs it into target/pyenv");
    venv
}

/// Runs one journey for a fresh learner with a started session, with the SDK's `Client` in its
/// default mode (`auto`: 2026-07-28) or with the initialize handshake (`legacy`); returns the
/// trace.
async fn play(t: &TestApp, journey: &str, mode: &str) -> (Value, String, String) {
    let token = t.learner("Ada").await;
    let principal = t.principal(&token).await;
    t.app.start_session(&principal, StartSession { time_zone: Some("Europe/Berlin".into()), ..Default::default() }).await.unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/golden.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .args(["--url", &format!("{}/mcp", t.base_url), "--token", &token, "--journey", journey, "--mode", mode])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "journey {journey} ({mode}) failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let trace: Value = serde_json::from_slice(&out.stdout).unwrap();
    (trace, token, principal.learner_id.unwrap())
}

/// Nothing secret, permanent or unreleased in any result.
fn privacy_scan(t: &TestApp, trace: &Value, token: &str, learner_id: &str) {
    let pack = t.app.catalog.latest("fractions").unwrap();
    let key_material = t.keys_spec.split_once(':').unwrap().1;
    let answers: Vec<String> =
        pack.leaves().flat_map(|g| g.cards.iter()).flat_map(|c| c.answer.values().cloned()).filter(|a| a.len() >= 30).collect();
    let solutions: Vec<String> = pack.exam.tasks.iter().flat_map(|task| task.solution.values().cloned()).collect();
    for result in trace["results"].as_array().unwrap() {
        let text = result.to_string();
        let tool = result["tool"].as_str().unwrap();
        for secret in [token, learner_id, key_material, &t.db_url, content_dir().to_str().unwrap()] {
            assert!(!text.contains(secret), "{tool} result leaks a secret or path: {text}");
        }
        let step = result["structured"]["openWorkflow"]["step"].as_str().unwrap_or_default();
        let answers_released = tool == "get_skillpilot_verified_recall_answers" || step == "answersReleased";
        let solutions_released = tool == "get_skillpilot_exam_solutions" || step == "solutionsReleased";
        for answer in &answers {
            assert!(answers_released || !text.contains(answer.as_str()), "{tool} shows an unreleased answer");
        }
        for solution in &solutions {
            assert!(solutions_released || !text.contains(solution.as_str()), "{tool} shows an unreleased solution");
        }
        // Goal ids appear only as server-filled render arguments.
        for goal in &pack.goals {
            let quoted = format!("\"{}\"", goal.id);
            let in_render_call = result["structured"]["continuation"]["toolCall"]["arguments"]["goalId"] == goal.id.as_str();
            assert!(in_render_call || !text.contains(&quoted), "{tool} shows the goal id {}", goal.id);
        }
    }
}

macro_rules! journey {
    ($name:ident, $j:literal, $calls:expr) => {
        journey!($name, $j, $calls, "auto");
    };
    ($name:ident, $j:literal, $calls:expr, $mode:literal) => {
        async fn $name(t: Arc<TestApp>) {
            let (trace, token, learner) = play(&t, $j, $mode).await;
            let calls = trace["calls"].as_array().unwrap().len();
            assert_eq!(calls, $calls, "tool calls of journey {}: {:?}", $j, trace["turns"]);
            privacy_scan(&t, &trace, &token, &learner);
            // Every tool call was audited by its own handler: a started row and one exit.
            let audit = t.app.store.tool_calls().await.unwrap();
            assert_eq!(audit.iter().filter(|(_, phase, writer, _)| phase == "started" && writer == "handler").count(), calls);
            assert_eq!(audit.iter().filter(|(_, phase, _, _)| phase != "started").count(), calls);
        }
    };
}

journey!(journey_a_teach_complete_mode_choice_learn_and_taught_successor, "a", 10);
journey!(journey_b_close_only_then_an_explicit_continue, "b", 7);
journey!(journey_c_verified_recall_over_three_turns_ending_in_a_picture, "c", 14);
journey!(journey_d_exam_released_after_mastery_and_scored_by_the_backend, "d", 121);
journey!(journey_e_a_locale_switch_turns_every_text_english, "e", 6);
journey!(journey_a_over_the_initialize_handshake, "a", 10, "legacy");
journey!(journey_b_over_the_initialize_handshake, "b", 7, "legacy");
journey!(journey_c_over_the_initialize_handshake, "c", 14, "legacy");
journey!(journey_d_over_the_initialize_handshake, "d", 121, "legacy");
journey!(journey_e_over_the_initialize_handshake, "e", 6, "legacy");

both_stores!(
    journey_a_teach_complete_mode_choice_learn_and_taught_successor,
    journey_b_close_only_then_an_explicit_continue,
    journey_c_verified_recall_over_three_turns_ending_in_a_picture,
    journey_d_exam_released_after_mastery_and_scored_by_the_backend,
    journey_e_a_locale_switch_turns_every_text_english,
    journey_a_over_the_initialize_handshake,
    journey_b_over_the_initialize_handshake,
    journey_c_over_the_initialize_handshake,
    journey_d_over_the_initialize_handshake,
    journey_e_over_the_initialize_handshake,
);
crate::through_pgbouncer!(
    journey_a_teach_complete_mode_choice_learn_and_taught_successor,
    journey_b_close_only_then_an_explicit_continue,
    journey_c_verified_recall_over_three_turns_ending_in_a_picture,
    journey_d_exam_released_after_mastery_and_scored_by_the_backend,
    journey_e_a_locale_switch_turns_every_text_english,
);
