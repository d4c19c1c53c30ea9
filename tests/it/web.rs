//! The web GUI in a real browser (Debian's headless Chromium driven by playwright-core):
//! starting a session through the page (then confirmed over MCP), the progress page after a
//! seeded journey, the operator page with a refused tool, and forms without CSRF tokens.
//! Screenshots land in `target/web-artifacts/` (not committed).

use std::path::PathBuf;
use std::sync::Arc;

use aggregates::learning_journey::{Consent, Evidence, JourneyCommand};
use serde_json::json;
use skillpilot::app::identity::Role;
use skillpilot::app::journeys::{Actor, CommandRequest};
use skillpilot::app::sessions::StartSession;

use crate::helpers::{spawn_with, Backend, TestApp};
use crate::mcp_contract::call;

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/web-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn browser(t: &TestApp, scenario: &str, token: &str, expect: &[&str]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/web/browser.mjs");
    assert!(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/web/node_modules/playwright-core").exists(),
        "playwright-core is missing: run scripts/test, which installs it (and Chromium)"
    );
    let dir = shots().join(format!("{:?}", t.backend).to_lowercase());
    std::fs::create_dir_all(&dir).unwrap();
    let out = tokio::process::Command::new("node")
        .arg(script)
        .args([scenario, &t.base_url, token, dir.to_str().unwrap()])
        .args(expect)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "browser scenario {scenario}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn a_session_started_through_the_page_is_the_one_the_gate_returns(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let (_, before) = call(&t, &token, "get_skillpilot_learning_context", json!({})).await;
    assert_eq!(before["error"]["code"], "SESSION_REQUIRED");
    browser(&t, "start", &token, &[]).await;
    let (err, ctx) = call(&t, &token, "get_skillpilot_learning_context", json!({})).await;
    assert!(!err, "{ctx}");
    assert!(ctx["learningSessionId"].is_string());
    assert_eq!(ctx["communicationLocale"], "en", "the language chosen on the page");
}

async fn the_progress_page_shows_the_mastered_goals_and_the_active_goal(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let principal = t.principal(&token).await;
    let s = t.app.start_session(&principal, StartSession { locale: Some("de".into()), ..Default::default() }).await.unwrap();
    t.begin(&s.journey_id).await;
    let run = |command| CommandRequest {
        journey_id: s.journey_id.clone(),
        command,
        expected_version: None,
        identity: None,
        tool: "test",
        actor: Actor::Learner,
        call: None,
    };
    t.app
        .execute(run(JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseAndContinue }), None)
        .await
        .unwrap();
    t.app
        .execute(
            run(JourneyCommand::ChooseOption {
                choice: aggregates::learning_journey::OptionChoice::Mode { mode: aggregates::learning_journey::Mode::Learn },
            }),
            None,
        )
        .await
        .unwrap();
    t.app
        .execute(
            run(JourneyCommand::ChooseOption {
                choice: aggregates::learning_journey::OptionChoice::Goal { goal_id: "number-line".into() },
            }),
            None,
        )
        .await
        .unwrap();
    t.app
        .execute(run(JourneyCommand::CompleteGoal { evidence: Evidence::Guided, consent: Consent::CloseAndContinue }), None)
        .await
        .unwrap();
    let state = t.app.load_journey(&s.journey_id).await.unwrap().state;
    let mut next = state.clone();
    // Walk the published choices until a goal is active (mode → learn → first goal).
    while next.active_goal.is_none() {
        let choice = next
            .decision_options()
            .into_iter()
            .find(|c| {
                !matches!(c, aggregates::learning_journey::OptionChoice::Mode { mode: aggregates::learning_journey::Mode::VerifiedRecall })
            })
            .unwrap();
        next = t.app.execute(run(JourneyCommand::ChooseOption { choice }), None).await.unwrap().state;
    }
    let pack = t.app.pack_of(&next).unwrap();
    let active = pack.text(&pack.goal(next.active_goal.as_deref().unwrap()).unwrap().title, "de").to_owned();
    browser(&t, "progress", &token, &["2", &active]).await;
}

async fn forms_without_their_csrf_token_are_refused(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    browser(&t, "csrf", &token, &[]).await;
    // Nothing was started by the refused form.
    assert!(t.app.store.latest_session(&t.principal(&token).await.learner_id.unwrap()).await.unwrap().is_none());
}

async fn the_operator_page_refuses_learners_and_analysts(t: Arc<TestApp>) {
    let learner = t.learner("Ada").await;
    browser(&t, "operator-refuses", &learner, &[]).await;
    let analyst = t.app.create_staff_token(Role::Analyst).await.unwrap();
    browser(&t, "operator-refuses", &analyst, &[]).await;
}

async fn every_page_carries_its_security_headers_and_works_under_its_csp(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    browser(&t, "headers", &token, &[]).await;
}

/// The widget as an MCP host gets it (`resources/read`), in a real browser inside a host page.
async fn the_widget_takes_pictures_only_from_its_host_and_never_runs_their_markup(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let r =
        crate::mcp_contract::rpc(&t, Some(&token), "resources/read", serde_json::json!({"uri": "ui://skillpilot/goal-picture.html"})).await;
    let body: serde_json::Value = r.json().await.unwrap();
    let html = body["result"]["contents"][0]["text"].as_str().unwrap().to_owned();
    let file = std::env::temp_dir().join(format!("sp_widget_{}.html", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, html).unwrap();
    browser(&t, "widget", &token, &[file.to_str().unwrap()]).await;
    std::fs::remove_file(file).ok();
}

crate::both_stores!(
    every_page_carries_its_security_headers_and_works_under_its_csp,
    the_widget_takes_pictures_only_from_its_host_and_never_runs_their_markup,
    a_session_started_through_the_page_is_the_one_the_gate_returns,
    the_progress_page_shows_the_mastered_goals_and_the_active_goal,
    forms_without_their_csrf_token_are_refused,
    the_operator_page_refuses_learners_and_analysts,
);

/// After a drifted seam lock the operator page shows the refused tool (and runs the audit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_page_shows_a_refused_tool_after_a_drifted_seam_lock() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let mut lock = skillpilot::registry::Lock::parse(skillpilot::registry::COMMITTED_LOCK).unwrap();
        lock.tools.get_mut("render_skillpilot_goal_visualization").unwrap().signature = "e".repeat(64);
        let path = std::env::temp_dir().join(format!("seams-{}.lock", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, serde_json::to_string(&lock).unwrap()).unwrap();
        let t = spawn_with(backend, |s| s.seams_lock = Some(path)).await;
        let operator = t.app.create_staff_token(Role::Operator).await.unwrap();
        browser(&t, "operator", &operator, &["render_skillpilot_goal_visualization"]).await;
        assert!(t.app.store.last_audit_run().await.unwrap().unwrap().intact);
        t.teardown().await;
    }
}
