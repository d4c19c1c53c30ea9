//! The tool registry at runtime: a drifted seam lock refuses exactly the affected tool, which
//! then disappears from `tools/list`, is listed by `/readyz` and the operator API, and is never
//! offered in a continuation; the operator report carries the quota table.

use std::sync::Arc;

use serde_json::{json, Value};
use skillpilot::registry::{Lock, COMMITTED_LOCK};

use crate::helpers::{spawn_with, Backend, TestApp};
use crate::mcp_contract::{coach_at_start, rpc};

/// A copy of the committed lock with one tool's signature altered, as after a key's meaning
/// changed under it without re-registration.
fn drifted_lock(tool: &str) -> std::path::PathBuf {
    let mut lock = Lock::parse(COMMITTED_LOCK).unwrap();
    lock.tools.get_mut(tool).unwrap().signature = "f".repeat(64);
    let path = std::env::temp_dir().join(format!("seams-{}.lock", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, serde_json::to_string(&lock).unwrap()).unwrap();
    path
}

async fn with_drift(backend: Backend, tool: &str) -> TestApp {
    let path = drifted_lock(tool);
    spawn_with(backend, |s| s.seams_lock = Some(path)).await
}

async fn a_refused_renderer_is_absent_and_successors_are_taught_without_a_picture(t: &TestApp) {
    let operator = t.app.create_staff_token(skillpilot::app::identity::Role::Operator).await.unwrap();
    let c = coach_at_start(t).await;
    // Without the renderer there is no picture to offer at the start: the first goal is taught at once.
    let first = c.ctx(t).await;
    assert_eq!((first["requiredAction"].as_str(), first["stateVersion"].as_u64()), (Some("teachActiveGoal"), Some(2)), "{first}");
    let listed: Value = rpc(t, Some(&c.token), "tools/list", json!({})).await.json().await.unwrap();
    let names: Vec<&str> = listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 9);
    assert!(!names.contains(&"render_skillpilot_goal_visualization"));

    let ready = t.http.get(format!("{}/readyz", t.base_url)).send().await.unwrap();
    assert_eq!(ready.status(), 200, "a refused renderer does not make the service unready");
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["refusedTools"], json!(["render_skillpilot_goal_visualization"]));

    let report: Value =
        t.http.get(format!("{}/v1/operator/registry", t.base_url)).bearer_auth(&operator).send().await.unwrap().json().await.unwrap();
    let render =
        report["registry"]["tools"].as_array().unwrap().iter().find(|x| x["name"] == "render_skillpilot_goal_visualization").unwrap();
    assert_eq!(render["grade"], "refused");
    assert!(render["reasons"][0].as_str().unwrap().contains("without re-registration"));
    assert_eq!(t.http.get(format!("{}/v1/operator/registry", t.base_url)).bearer_auth(&c.token).send().await.unwrap().status(), 403);

    // Learn → choose the goal with a picture: taught at once, no render continuation.
    let v = c.ctx(t).await["stateVersion"].as_u64().unwrap();
    c.call(t, "complete_skillpilot_goal", json!({"expectedStateVersion": v, "clientRequestId": "ea0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "independent", "consent": "closeAndContinue"}})).await;
    let ctx = c.ctx(t).await;
    let learn = ctx["options"].as_array().unwrap().iter().find(|o| o["mode"] == "learn").unwrap()["payload"].clone();
    c.call(t, "choose_skillpilot_option", json!({"option": learn})).await;
    let ctx = c.ctx(t).await;
    let goal =
        ctx["options"].as_array().unwrap().iter().find(|o| o["title"].as_str().unwrap().contains("Erweitern")).unwrap()["payload"].clone();
    let (err, result) = c.call(t, "choose_skillpilot_option", json!({"option": goal})).await;
    assert!(!err, "{result}");
    assert!(result.get("continuation").is_none(), "no render continuation: {result}");
    assert_eq!(result["requiredAction"], "teachActiveGoal");
    assert!(result["activeGoal"]["title"].as_str().unwrap().contains("Erweitern"));
    // Calling it anyway: no such tool.
    let r: Value = rpc(t, Some(&c.token), "tools/call", json!({"name": "render_skillpilot_goal_visualization", "arguments": {}}))
        .await
        .json()
        .await
        .unwrap();
    assert!(r["error"].is_object(), "{r}");
}

async fn a_refused_context_tool_makes_the_service_unready_but_it_still_starts(t: &TestApp) {
    let ready = t.http.get(format!("{}/readyz", t.base_url)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["store"]["reachable"], true);
    assert_eq!(body["refusedTools"], json!(["get_skillpilot_learning_context"]));
    assert_eq!(t.http.get(format!("{}/healthz", t.base_url)).send().await.unwrap().status(), 200);
}

async fn the_operator_report_carries_the_quota_table_after_real_calls(t: Arc<TestApp>) {
    let operator = t.app.create_staff_token(skillpilot::app::identity::Role::Operator).await.unwrap();
    let c = coach_at_start(&t).await;
    c.ctx(&t).await;
    let report: Value =
        t.http.get(format!("{}/v1/operator/registry", t.base_url)).bearer_auth(&operator).send().await.unwrap().json().await.unwrap();
    let quota = &report["quota"];
    assert_eq!(quota["window"], 1000);
    assert!(quota["turns"].as_u64().unwrap() >= 1);
    let context = quota["rows"].as_array().unwrap().iter().find(|r| r["tool"] == "get_skillpilot_learning_context").unwrap();
    assert_eq!(context["delivered"], 2);
    assert_eq!(context["deliveryLoss"], 0);
    assert_eq!(context["verdict"]["level"], "noStatementYet");
    assert!(report["registry"]["report"]["unneededKeys"].as_array().unwrap().iter().any(|k| k == "communicationLocale"));
    let analyst = t.app.create_staff_token(skillpilot::app::identity::Role::Analyst).await.unwrap();
    assert_eq!(t.http.get(format!("{}/v1/operator/registry", t.base_url)).bearer_auth(&analyst).send().await.unwrap().status(), 403);
}

macro_rules! drift_test {
    ($name:ident, $tool:literal, $body:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let t = super::with_drift(crate::helpers::Backend::Sqlite, $tool).await;
                super::$body(&t).await;
                t.teardown().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let t = super::with_drift(crate::helpers::Backend::Postgres, $tool).await;
                super::$body(&t).await;
                t.teardown().await;
            }
        }
    };
}

drift_test!(
    drifted_renderer,
    "render_skillpilot_goal_visualization",
    a_refused_renderer_is_absent_and_successors_are_taught_without_a_picture
);
drift_test!(drifted_context_tool, "get_skillpilot_learning_context", a_refused_context_tool_makes_the_service_unready_but_it_still_starts);
crate::both_stores!(the_operator_report_carries_the_quota_table_after_real_calls);
