//! Contract tests of the ten tools over `/mcp` (raw JSON-RPC over real HTTP): valid, invalid
//! and adversarial inputs. Every refusal asserts its code, that no event was written, and that
//! the database holds none of the rejected text.

use std::sync::Arc;

use serde_json::{json, Value};
use skillpilot::app::sessions::StartSession;
use skillpilot::mcp::{tool_list, SKILL_MD};

use crate::both_stores;
use crate::helpers::TestApp;

const SECRET: &str = "MY-PRIVATE-CHAT-TEXT-4711";

pub(crate) struct Coach {
    pub(crate) token: String,
    pub(crate) sid: String,
}

pub(crate) async fn rpc(t: &TestApp, token: Option<&str>, method: &str, params: Value) -> reqwest::Response {
    let mut req = t
        .http
        .post(format!("{}/mcp", t.base_url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if method != "initialize" {
        req = req.header("mcp-protocol-version", "2025-06-18");
    }
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    req.send().await.unwrap()
}

pub(crate) async fn call(t: &TestApp, token: &str, name: &str, args: Value) -> (bool, Value) {
    let r = rpc(t, Some(token), "tools/call", json!({"name": name, "arguments": args})).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let result = &body["result"];
    assert!(result.is_object(), "no result: {body}");
    (result["isError"] == true, result["structuredContent"].clone())
}

/// A coach for a learner whose fresh journey waits for the wish to begin.
pub(crate) async fn coach_at_start(t: &TestApp) -> Coach {
    let token = t.learner("Ada").await;
    let principal = t.principal(&token).await;
    t.app.start_session(&principal, StartSession::default()).await.unwrap();
    let (err, ctx) = call(t, &token, "get_skillpilot_learning_context", json!({})).await;
    assert!(!err, "{ctx}");
    Coach { token, sid: ctx["learningSessionId"].as_str().unwrap().to_owned() }
}

/// A coach whose learner has begun: the first goal is being taught.
pub(crate) async fn coach(t: &TestApp) -> Coach {
    let c = coach_at_start(t).await;
    c.begin(t).await;
    c
}

impl Coach {
    pub(crate) async fn ctx(&self, t: &TestApp) -> Value {
        let (err, ctx) = call(t, &self.token, "get_skillpilot_learning_context", json!({"learningSessionId": self.sid})).await;
        assert!(!err, "{ctx}");
        ctx
    }

    /// The learner wants to begin: the `continue` option of a fresh journey, when it waits for it.
    pub(crate) async fn begin(&self, t: &TestApp) -> Value {
        let ctx = self.ctx(t).await;
        if ctx["requiredAction"] != "awaitLearnerContinuation" {
            return ctx;
        }
        let (err, begun) = self.call(t, "choose_skillpilot_option", json!({"option": ctx["options"][0]["payload"]})).await;
        assert!(!err, "{begun}");
        begun
    }

    pub(crate) async fn call(&self, t: &TestApp, name: &str, mut args: Value) -> (bool, Value) {
        if args.get("learningSessionId").is_none() {
            args["learningSessionId"] = json!(self.sid);
        }
        call(t, &self.token, name, args).await
    }
}

/// Counts of all events and a dump of every stored text that could hold input.
async fn storage(t: &TestApp) -> (usize, String) {
    let mut all = String::new();
    let mut count = 0;
    t.app
        .list_events(&Default::default(), |v| {
            count += 1;
            all.push_str(&v.to_string());
        })
        .await
        .unwrap();
    for (_, _, payload) in t.app.store.views(skillpilot::store::ViewTable::Context).await.unwrap() {
        all.push_str(&payload.to_string());
    }
    for row in t.app.store.tool_calls().await.unwrap() {
        all.push_str(&format!("{row:?}"));
    }
    (count, all)
}

#[track_caller]
fn assert_code(result: &(bool, Value), code: &str) {
    assert!(result.0, "expected {code}, got success {}", result.1);
    assert_eq!(result.1["error"]["code"], code, "{}", result.1);
    assert!(!result.1.to_string().contains(SECRET), "the rejected value is echoed: {}", result.1);
}

async fn refused(t: &TestApp, c: &Coach, name: &str, args: Value, code: &str) {
    let before = storage(t).await.0;
    let result = c.call(t, name, args).await;
    assert_code(&result, code);
    let (after, stored) = storage(t).await;
    assert_eq!(after, before, "{name} wrote an event although refused with {code}");
    assert!(!stored.contains(SECRET), "rejected text reached storage");
}

async fn the_mcp_endpoint_refuses_callers_without_a_learner_bearer(t: Arc<TestApp>) {
    for token in [None, Some("spl_forged")] {
        let r = rpc(&t, token, "tools/list", json!({})).await;
        assert_eq!(r.status(), 401);
        assert!(r.headers().get("www-authenticate").is_some());
    }
    let operator = t.app.create_staff_token(skillpilot::app::identity::Role::Operator).await.unwrap();
    assert_eq!(rpc(&t, Some(&operator), "tools/list", json!({})).await.status(), 403);
    // A browser Origin that is not allowed (DNS rebinding, cross-site pages) is refused.
    let learner = t.learner("Ada").await;
    let r = t
        .http
        .post(format!("{}/mcp", t.base_url))
        .bearer_auth(&learner)
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_skillpilot_learning_context", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A Host that is not configured (DNS rebinding) is refused too.
    let r = t
        .http
        .post(format!("{}/mcp", t.base_url))
        .bearer_auth(&learner)
        .header("host", "evil.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(t.app.store.tool_calls().await.unwrap().is_empty(), "no tool ran");
}

async fn initialize_negotiates_and_carries_skill_md_as_instructions(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    for (asked, answered) in [("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"), ("2099-01-01", "2025-11-25")] {
        let r = rpc(
            &t,
            Some(&token),
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["result"]["protocolVersion"], answered, "{body}");
        assert_eq!(body["result"]["instructions"], SKILL_MD);
    }
    // The 2026-07-28 discovery call carries the same instructions.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let r = t
        .http
        .post(format!("{}/mcp", t.base_url))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["instructions"], SKILL_MD, "{body}");
    assert!(body["result"]["supportedVersions"].as_array().unwrap().contains(&json!("2025-06-18")));
}

async fn published_schemas_are_closed_and_free_of_free_text_fields(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let body: Value = rpc(&t, Some(&token), "tools/list", json!({})).await.json().await.unwrap();
    let tools = body["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 10);
    assert_eq!(tools.len(), tool_list().len());
    fn walk(schema: &Value, tool: &str) {
        if schema["type"] == "object" {
            assert_eq!(schema["additionalProperties"], false, "{tool}: {schema}");
            for (name, sub) in schema["properties"].as_object().unwrap() {
                assert!(!skillpilot::mcp::schema::is_forbidden(name), "{tool} publishes {name}");
                walk(sub, tool);
            }
        }
        if schema["type"] == "array" {
            walk(&schema["items"], tool);
        }
    }
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        walk(&tool["inputSchema"], name);
        let a = &tool["annotations"];
        assert_eq!(a["openWorldHint"], false, "{name}");
        assert_eq!(a["destructiveHint"], false, "{name}");
        let read = name == "get_skillpilot_learning_context" || name == "render_skillpilot_goal_visualization";
        assert_eq!(a["readOnlyHint"], read, "{name}");
        assert!(tool["title"].is_string() && tool["description"].as_str().unwrap().contains("Do not call"), "{name}");
        assert_eq!(tool["outputSchema"]["type"], "object");
        assert_eq!(tool["outputSchema"]["oneOf"].as_array().unwrap().len(), 2, "success and error exits");
        let ui = tool["_meta"]["ui"]["resourceUri"].as_str();
        assert_eq!(ui.is_some(), name == "render_skillpilot_goal_visualization", "{name}: only the renderer is UI-bound");
        if let Some(uri) = ui {
            assert_eq!(tool["_meta"]["openai/outputTemplate"], uri);
            let read: Value = rpc(&t, Some(&token), "resources/read", json!({"uri": uri})).await.json().await.unwrap();
            assert_eq!(read["result"]["contents"][0]["mimeType"], "text/html;profile=mcp-app");
        }
    }
}

async fn session_errors_send_the_learner_to_the_start_page_and_reveal_nothing(t: Arc<TestApp>) {
    let lonely = t.learner("Lone").await;
    let r = call(&t, &lonely, "get_skillpilot_learning_context", json!({})).await;
    assert_code(&r, "SESSION_REQUIRED");
    assert_eq!(r.1["error"]["recovery"]["url"], format!("{}/start", t.app.settings.public_url));
    assert_eq!(r.1["error"]["recovery"].as_object().unwrap().len(), 2, "only url and instruction");

    let a = coach(&t).await;
    let b = coach(&t).await;
    // B's session id under A's bearer: invalid, and nothing of B in the answer.
    let r = call(&t, &a.token, "get_skillpilot_learning_context", json!({"learningSessionId": b.sid})).await;
    assert_code(&r, "SESSION_INVALID");
    let r = call(&t, &a.token, "complete_skillpilot_goal", json!({"learningSessionId": "v4.local.forged"})).await;
    assert_code(&r, "SESSION_INVALID");
    let r = call(&t, &a.token, "start_skillpilot_verified_recall", json!({})).await;
    assert_code(&r, "SESSION_REQUIRED");

    // 13 idle hours: expired; the gate says so too.
    t.clock.advance(chrono::Duration::hours(13));
    assert_code(&call(&t, &a.token, "get_skillpilot_learning_context", json!({"learningSessionId": a.sid})).await, "SESSION_EXPIRED");
    assert_code(&call(&t, &a.token, "get_skillpilot_learning_context", json!({})).await, "SESSION_EXPIRED");
}

async fn repeated_gate_calls_return_the_same_session(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let (_, again) = call(&t, &c.token, "get_skillpilot_learning_context", json!({})).await;
    let other = again["learningSessionId"].as_str().unwrap();
    // Fresh nonce, same session: both ids work and address the same journey state.
    assert_ne!(other, c.sid);
    let (_, via_first) = call(&t, &c.token, "get_skillpilot_learning_context", json!({"learningSessionId": c.sid})).await;
    let (_, via_second) = call(&t, &c.token, "get_skillpilot_learning_context", json!({"learningSessionId": other})).await;
    assert_eq!(via_first["stateVersion"], via_second["stateVersion"]);
    assert_eq!(via_first["activeGoal"], via_second["activeGoal"]);
    // Only the gate call hands an id out: a call that names one gets none back.
    assert!(via_first.get("learningSessionId").is_none(), "{via_first}");
    assert_eq!(t.app.keys.open_session(other).unwrap(), t.app.keys.open_session(&c.sid).unwrap());
}

async fn unknown_and_forbidden_fields_are_refused_at_every_level_before_the_core(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let ctx = c.ctx(&t).await;
    let v = ctx["stateVersion"].clone();
    let good = |extra: Value| {
        let mut a = json!({"expectedStateVersion": v, "clientRequestId": "3f1c2a9e-8b7d-4c6e-9f0a-1b2c3d4e5f60", "decision": {"evidence": "guided", "consent": "closeOnly"}});
        if let Some(obj) = extra.as_object() {
            for (k, val) in obj {
                if k == "decision" {
                    for (dk, dv) in val.as_object().unwrap() {
                        a["decision"][dk] = dv.clone();
                    }
                } else {
                    a[k] = val.clone();
                }
            }
        }
        a
    };
    for name in [
        "workFeedback",
        "outcome_feedback",
        "FEEDBACK",
        "last-feedback",
        "explanation",
        "answer",
        "summary",
        "reason",
        "comment",
        "lastFeedbackText",
        "coachRationale",
    ] {
        refused(&t, &c, "complete_skillpilot_goal", good(json!({name: SECRET})), "FORBIDDEN_FIELD").await;
        refused(&t, &c, "complete_skillpilot_goal", good(json!({"decision": {name: SECRET}})), "FORBIDDEN_FIELD").await;
    }
    refused(&t, &c, "complete_skillpilot_goal", good(json!({"mood": SECRET})), "UNKNOWN_FIELD").await;
    refused(&t, &c, "complete_skillpilot_goal", good(json!({"decision": {"confidence": SECRET}})), "UNKNOWN_FIELD").await;
    let r = c.call(&t, "complete_skillpilot_goal", good(json!({SECRET: 1, "x": 2}))).await;
    assert_code(&r, "UNKNOWN_FIELD");
    assert_eq!(r.1["error"]["evidence"]["unknownFields"], 2, "unknown keys are counted, never named");
    refused(&t, &c, "get_skillpilot_learning_context", json!({"note": SECRET}), "UNKNOWN_FIELD").await;
    refused(&t, &c, "choose_skillpilot_option", json!({"option": {"optionToken": "x", "why": SECRET}}), "UNKNOWN_FIELD").await;
    refused(&t, &c, "choose_skillpilot_option", json!({"option": {"optionToken": "x", "reasonText": SECRET}}), "FORBIDDEN_FIELD").await;
    refused(
        &t,
        &c,
        "record_skillpilot_verified_recall_results",
        json!({"gradingCapability": "x", "assessments": [{"passed": true, "feedback": SECRET}]}),
        "FORBIDDEN_FIELD",
    )
    .await;
    refused(
        &t,
        &c,
        "record_skillpilot_exam_scores",
        json!({"scoringCapability": "x", "scores": [{"points": 1, "comment": SECRET}]}),
        "FORBIDDEN_FIELD",
    )
    .await;
}

async fn wrong_types_and_ranges_name_the_field_and_never_echo_the_value(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let v = c.ctx(&t).await["stateVersion"].clone();
    let cases = [
        (
            json!({"expectedStateVersion": v, "clientRequestId": SECRET, "decision": {"evidence": "guided", "consent": "closeOnly"}}),
            "clientRequestId",
        ),
        (
            json!({"expectedStateVersion": SECRET, "clientRequestId": "3f1c2a9e-8b7d-4c6e-9f0a-1b2c3d4e5f60", "decision": {"evidence": "guided", "consent": "closeOnly"}}),
            "expectedStateVersion",
        ),
        (
            json!({"expectedStateVersion": v, "clientRequestId": "3f1c2a9e-8b7d-4c6e-9f0a-1b2c3d4e5f60", "decision": {"evidence": SECRET, "consent": "closeOnly"}}),
            "decision.evidence",
        ),
        (json!({"expectedStateVersion": v, "clientRequestId": "3f1c2a9e-8b7d-4c6e-9f0a-1b2c3d4e5f60"}), "decision"),
    ];
    for (args, field) in cases {
        let before = storage(&t).await.0;
        let r = c.call(&t, "complete_skillpilot_goal", args).await;
        assert_code(&r, "VALIDATION_FAILED");
        assert_eq!(r.1["error"]["evidence"]["field"], field);
        assert_eq!(storage(&t).await.0, before);
    }
    refused(&t, &c, "record_skillpilot_exam_scores", json!({"scoringCapability": "x", "scores": [{"points": -1}]}), "VALIDATION_FAILED")
        .await;
    refused(&t, &c, "record_skillpilot_exam_scores", json!({"scoringCapability": "x", "scores": []}), "VALIDATION_FAILED").await;
}

/// Contract (idempotency): a client request id names one request for ever. Reused for another
/// request that the current state would accept — no version check or rule stands in the way —
/// it is refused by the commit itself (ADR 0006) and nothing is written; the same request under
/// a new id then succeeds, so the id alone was refused.
async fn a_request_id_reused_on_the_current_version_is_refused_and_writes_nothing(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let id = uuid::Uuid::new_v4().to_string();
    let complete = |version: &Value, id: &str| json!({"expectedStateVersion": version, "clientRequestId": id, "decision": {"evidence": "guided", "consent": "closeAndContinue"}});
    let first = c.call(&t, "complete_skillpilot_goal", complete(&c.ctx(&t).await["stateVersion"], &id)).await;
    assert!(!first.0, "{}", first.1);
    // The learner goes on learning: the next goal can be completed again.
    let (err, chosen) = c.call(&t, "choose_skillpilot_option", json!({"option": published(&first.1, "mode", "mode", "learn")})).await;
    assert!(!err, "{chosen}");
    let goals = c.ctx(&t).await;
    let goal = goals["options"].as_array().and_then(|o| o.iter().find(|x| x["kind"] == "goal")).map(|x| x["payload"].clone());
    let (err, chosen) = c.call(&t, "choose_skillpilot_option", json!({"option": goal.expect("a goal to choose")})).await;
    assert!(!err, "{chosen}");
    let now = c.ctx(&t).await;
    assert_eq!(now["requiredAction"], "teachActiveGoal", "a goal is being taught and can be completed: {now}");
    refused(&t, &c, "complete_skillpilot_goal", complete(&now["stateVersion"], &id), "IDEMPOTENCY_KEY_REUSED").await;
    let (err, second) = c.call(&t, "complete_skillpilot_goal", complete(&now["stateVersion"], &uuid::Uuid::new_v4().to_string())).await;
    assert!(!err, "the same request under a new id is accepted: {second}");
    assert_eq!(second["receipt"]["stored"], "goalCompleted", "{second}");
}

async fn complete_goal_retries_conflicts_and_key_reuse(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let v = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    let args = |evidence: &str, version: u64| json!({"expectedStateVersion": version, "clientRequestId": "5a0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": evidence, "consent": "closeOnly"}});
    refused(&t, &c, "complete_skillpilot_goal", json!({"expectedStateVersion": v - 1, "clientRequestId": "6a0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}}), "STATE_CONFLICT").await;
    let first = c.call(&t, "complete_skillpilot_goal", args("independent", v)).await;
    assert!(!first.0, "{}", first.1);
    let events = storage(&t).await.0;
    let retry = c.call(&t, "complete_skillpilot_goal", args("independent", v)).await;
    assert_eq!(retry.1["receipt"], first.1["receipt"], "an exact retry returns the original receipt");
    assert_eq!(storage(&t).await.0, events, "and writes nothing");
    refused(&t, &c, "complete_skillpilot_goal", args("guided", v), "IDEMPOTENCY_KEY_REUSED").await;
    let stale = c.call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": v, "clientRequestId": "7a0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}})).await;
    assert_code(&stale, "STATE_CONFLICT");
    assert_eq!(stale.1["outcome"], "rejected");
    // Contract: the rejection carries the fresh facts — the version and the action allowed now —
    // and the way on; no reload proposal when the facts fit in the result.
    let fresh = c.ctx(&t).await;
    let error = &stale.1["error"];
    assert_eq!(error["evidence"]["stateVersion"], fresh["stateVersion"], "{}", stale.1);
    assert_eq!(error["evidence"]["allowedAction"], fresh["requiredAction"], "{}", stale.1);
    assert_eq!(error["recovery"]["requiredAction"], fresh["requiredAction"], "{}", stale.1);
    assert_eq!(error["recovery"]["instruction"], fresh["instruction"], "{}", stale.1);
    assert_ne!(error["recovery"]["proposal"]["name"], "get_skillpilot_learning_context", "{}", stale.1);
    let offered: Vec<_> = error["recovery"]["options"].as_array().into_iter().flatten().map(|o| o["kind"].clone()).collect();
    let published: Vec<_> = fresh["options"].as_array().into_iter().flatten().map(|o| o["kind"].clone()).collect();
    assert_eq!(offered, published, "the options to offer now: {}", stale.1);
    // Nothing is active now: completing again is not allowed by the state.
    let now = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    refused(&t, &c, "complete_skillpilot_goal", json!({"expectedStateVersion": now, "clientRequestId": "8a0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}}), "NOT_ALLOWED").await;
}

async fn a_write_that_needs_the_learners_decision_is_a_clarification(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let v = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    c.call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": v, "clientRequestId": "ca0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeAndContinue"}})).await;
    let now = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    let events = storage(&t).await.0;
    let (err, clar) = c.call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": now, "clientRequestId": "da0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}})).await;
    assert!(!err, "{clar}");
    assert_eq!(clar["outcome"], "clarification");
    assert_eq!(clar["requiredAction"], "chooseOption");
    assert_eq!(clar["options"].as_array().unwrap().len(), 2, "the mode choice");
    assert_eq!(clar["stateVersion"], now);
    assert_eq!(storage(&t).await.0, events, "nothing changed");
}

async fn options_must_be_fresh_unaltered_and_the_learners_own(t: Arc<TestApp>) {
    let a = coach(&t).await;
    let b = coach(&t).await;
    let ctx = a.ctx(&t).await;
    let token = ctx["settings"]["options"][1]["payload"]["optionToken"].as_str().unwrap().to_owned();
    // Altered: one character changed.
    let mut altered = token.clone().into_bytes();
    altered[30] = if altered[30] == b'a' { b'b' } else { b'a' };
    refused(&t, &a, "choose_skillpilot_option", json!({"option": {"optionToken": String::from_utf8(altered).unwrap()}}), "OPTION_INVALID")
        .await;
    refused(&t, &a, "choose_skillpilot_option", json!({"option": {"optionToken": "v4.local.invented"}}), "OPTION_INVALID").await;
    // Another learner's session cannot use A's option.
    refused(&t, &b, "choose_skillpilot_option", json!({"option": {"optionToken": token}}), "OPTION_INVALID").await;
    // Used once; an exact retry gets the original result; after the state moved on, an older option is stale.
    let older = ctx["settings"]["options"][0]["payload"]["optionToken"].as_str().unwrap().to_owned();
    let first = a.call(&t, "choose_skillpilot_option", json!({"option": {"optionToken": token}})).await;
    assert!(!first.0, "{}", first.1);
    let events = storage(&t).await.0;
    let retry = a.call(&t, "choose_skillpilot_option", json!({"option": {"optionToken": token}})).await;
    assert_eq!(retry.1["receipt"], first.1["receipt"]);
    assert_eq!(storage(&t).await.0, events);
    refused(&t, &a, "choose_skillpilot_option", json!({"option": {"optionToken": older}}), "OPTION_INVALID").await;
}

async fn capabilities_are_bound_to_their_step_session_and_payload(t: Arc<TestApp>) {
    let a = coach(&t).await;
    let b = coach(&t).await;
    let v = a.ctx(&t).await["stateVersion"].as_u64().unwrap();
    a.call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": v, "clientRequestId": "aa0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "independent", "consent": "closeAndContinue"}})).await;
    let (_, started) = a.call(&t, "start_skillpilot_verified_recall", json!({})).await;
    let batch = started["batchCapability"].as_str().unwrap().to_owned();
    // Start again while open: the same batch.
    let (_, again) = a.call(&t, "start_skillpilot_verified_recall", json!({})).await;
    assert_eq!(again["questions"], started["questions"]);
    // Wrong step, wrong session, forged.
    refused(
        &t,
        &a,
        "record_skillpilot_verified_recall_results",
        json!({"gradingCapability": batch, "assessments": [{"passed": true}]}),
        "CAPABILITY_INVALID",
    )
    .await;
    refused(&t, &b, "get_skillpilot_verified_recall_answers", json!({"batchCapability": batch}), "CAPABILITY_INVALID").await;
    refused(&t, &a, "get_skillpilot_verified_recall_answers", json!({"batchCapability": "v4.local.forged"}), "CAPABILITY_INVALID").await;
    let (_, answers) = a.call(&t, "get_skillpilot_verified_recall_answers", json!({"batchCapability": batch})).await;
    let grading = answers["gradingCapability"].as_str().unwrap().to_owned();
    // Incomplete assessments are refused by the backend.
    refused(
        &t,
        &a,
        "record_skillpilot_verified_recall_results",
        json!({"gradingCapability": grading, "assessments": [{"passed": true}]}),
        "INCOMPLETE_ASSESSMENTS",
    )
    .await;
    let ok = a
        .call(
            &t,
            "record_skillpilot_verified_recall_results",
            json!({"gradingCapability": grading, "assessments": [{"passed": true}, {"passed": true}, {"passed": true}]}),
        )
        .await;
    assert!(!ok.0, "{}", ok.1);
    let events = storage(&t).await.0;
    let retry = a
        .call(
            &t,
            "record_skillpilot_verified_recall_results",
            json!({"gradingCapability": grading, "assessments": [{"passed": true}, {"passed": true}, {"passed": true}]}),
        )
        .await;
    assert_eq!(retry.1["receipt"], ok.1["receipt"], "exact retry: original receipt");
    assert_eq!(storage(&t).await.0, events);
    refused(
        &t,
        &a,
        "record_skillpilot_verified_recall_results",
        json!({"gradingCapability": grading, "assessments": [{"passed": false}, {"passed": true}, {"passed": true}]}),
        "CAPABILITY_USED",
    )
    .await;
    // The release step retried exactly, even after the batch was stored: its original result, no write.
    let events = storage(&t).await.0;
    let (err, again) = a.call(&t, "get_skillpilot_verified_recall_answers", json!({"batchCapability": batch})).await;
    assert!(!err, "{again}");
    assert_eq!(again["answers"], answers["answers"]);
    assert_eq!(storage(&t).await.0, events);
}

async fn a_capability_past_its_expiry_is_expired(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let v = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    c.call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": v, "clientRequestId": "ba0c7c4e-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "independent", "consent": "closeAndContinue"}})).await;
    let (_, started) = c.call(&t, "start_skillpilot_verified_recall", json!({})).await;
    let cap = started["batchCapability"].as_str().unwrap().to_owned();
    // Keep the session alive with other writes (a setting may change while a batch is open).
    for _ in 0..2 {
        t.clock.advance(chrono::Duration::hours(11));
        let ctx = c.ctx(&t).await;
        let toggle = ctx["settings"]["options"].as_array().unwrap().iter().find(|o| o["kind"] == "autopilot").unwrap()["payload"].clone();
        let (err, r) = c.call(&t, "choose_skillpilot_option", json!({"option": toggle})).await;
        assert!(!err, "{r}");
    }
    t.clock.advance(chrono::Duration::hours(3));
    refused(&t, &c, "get_skillpilot_verified_recall_answers", json!({"batchCapability": cap}), "CAPABILITY_EXPIRED").await;
    // The fresh context republishes a current capability for the same step.
    let fresh = c.ctx(&t).await["openWorkflow"]["batchCapability"].as_str().unwrap().to_owned();
    let (err, r) = c.call(&t, "get_skillpilot_verified_recall_answers", json!({"batchCapability": fresh})).await;
    assert!(!err, "{r}");
}

async fn the_exam_refuses_early_starts_and_out_of_range_points(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let r = c.call(&t, "start_skillpilot_exam", json!({})).await;
    assert_code(&r, "NOT_ELIGIBLE");
    assert_eq!(r.1["outcome"], "rejected");
    assert_eq!(r.1["error"]["evidence"]["missingGoals"], 13);
    assert!(r.1["error"]["recovery"]["instruction"].is_string());
    refused(&t, &c, "get_skillpilot_exam_solutions", json!({"examCapability": "v4.local.forged"}), "CAPABILITY_INVALID").await;
}

/// Contract: the first goal's picture is offered when the learner consents at session start —
/// a continuation like the others; and the renderer accepts only `(goalId,
/// expectedStateVersion)` pairs the backend issued in a render call for the current state, never
/// a pair derived from the state alone.
async fn the_first_goals_picture_follows_the_wish_to_begin_and_only_issued_pairs_render(t: Arc<TestApp>) {
    let c = coach_at_start(&t).await;
    let start = c.ctx(&t).await;
    assert_eq!(start["requiredAction"], "awaitLearnerContinuation", "nothing is presented before the learner wants to begin: {start}");
    assert!(start.get("activeGoal").is_none(), "{start}");
    let (v, goal) = (start["stateVersion"].as_u64().unwrap(), "part-of-whole");
    // A pair derived from the state (the only goal on the frontier, the current version) was never issued.
    refused(&t, &c, "render_skillpilot_goal_visualization", json!({"goalId": goal, "expectedStateVersion": v}), "NOT_ALLOWED").await;
    let (err, begun) = c.call(&t, "choose_skillpilot_option", json!({"option": published(&start, "continue", "", "")})).await;
    assert!(!err, "{begun}");
    let issued = begun["continuation"]["toolCall"].clone();
    assert_eq!(begun["continuation"]["action"], "renderGoalVisualizationThenTeachActiveGoal", "{begun}");
    assert_eq!(issued["name"], "render_skillpilot_goal_visualization", "a render call was issued: {begun}");
    assert_eq!(issued["arguments"]["goalId"], goal);
    assert_eq!(begun["context"]["activeGoal"]["title"], "Was ein Bruch bedeutet", "the goal is taught right after: {begun}");
    let args = issued["arguments"].clone();
    let (err, ok) = c.call(&t, "render_skillpilot_goal_visualization", args.clone()).await;
    assert!(!err, "{ok}");
    assert_eq!(ok, json!({"outcome": "completed", "rendered": true}));
    // Another goal at the issued version was never issued.
    refused(
        &t,
        &c,
        "render_skillpilot_goal_visualization",
        json!({"goalId": "number-line", "expectedStateVersion": args["expectedStateVersion"]}),
        "NOT_ALLOWED",
    )
    .await;
    // Once the state moved on, the issued pair is stale.
    complete_now(&t, &c, &args["expectedStateVersion"]).await;
    refused(&t, &c, "render_skillpilot_goal_visualization", args, "STATE_CONFLICT").await;
}

async fn every_tool_writes_its_own_started_and_one_exit(t: Arc<TestApp>) {
    let c = coach(&t).await;
    for tool in tool_list() {
        c.call(&t, tool["name"].as_str().unwrap(), json!({})).await;
    }
    let rows = t.app.store.tool_calls().await.unwrap();
    for tool in tool_list() {
        let name = tool["name"].as_str().unwrap();
        assert!(rows.iter().any(|(t, p, w, _)| t == name && p == "started" && w == "handler"), "{name} has no own started");
    }
    let started = rows.iter().filter(|r| r.1 == "started").count();
    let exits = rows.iter().filter(|r| r.1 != "started").count();
    assert_eq!(started, exits);
    assert!(rows.iter().filter(|r| r.1 != "started").all(|r| r.2 == "handler"));
    // A call that names no tool: the dispatcher writes the error exit.
    let r = rpc(&t, Some(&c.token), "tools/call", json!({"name": "delete_everything", "arguments": {}})).await;
    let body: Value = r.json().await.unwrap();
    assert!(body["error"].is_object(), "{body}");
    let rows = t.app.store.tool_calls().await.unwrap();
    assert!(rows.iter().any(|r| r.1 == "error" && r.2 == "dispatcher"));
}

/// The payload of the first published option of `kind` whose `key` is `value`.
fn published(ctx: &Value, kind: &str, key: &str, value: &str) -> Value {
    let all = ctx["options"].as_array().into_iter().flatten().chain(ctx["settings"]["options"].as_array().into_iter().flatten());
    all.filter(|o| o["kind"] == kind && (key.is_empty() || o[key] == value))
        .map(|o| o["payload"].clone())
        .next()
        .unwrap_or_else(|| panic!("no {kind} option with {key}={value} in {ctx}"))
}

async fn complete_now(t: &TestApp, c: &Coach, version: &Value) -> Value {
    let args = json!({
        "expectedStateVersion": version,
        "clientRequestId": uuid::Uuid::new_v4().to_string(),
        "decision": {"evidence": "independent", "consent": "closeAndContinue"}
    });
    let (err, done) = c.call(t, "complete_skillpilot_goal", args).await;
    assert!(!err, "{done}");
    done
}

/// Contract: the result of a write is the fresh state; a second mutation in the same turn uses
/// its values (version, options) without reloading the context.
async fn a_second_mutation_in_the_same_turn_uses_the_successor_state_without_a_reload(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let ctx = c.ctx(&t).await;
    let done = complete_now(&t, &c, &ctx["stateVersion"]).await;
    assert_eq!(done["requiredAction"], "chooseOption", "{done}");
    let reloads = |calls: Vec<(String, String, String, Option<String>)>| {
        calls.into_iter().filter(|r| r.0 == "get_skillpilot_learning_context" && r.1 == "started").count()
    };
    let before = reloads(t.app.store.tool_calls().await.unwrap());
    let (err, chosen) = c.call(&t, "choose_skillpilot_option", json!({"option": published(&done, "mode", "mode", "learn")})).await;
    assert!(!err, "the successor state's option works without a reload: {chosen}");
    let version = chosen["stateVersion"].as_u64().or(chosen["context"]["stateVersion"].as_u64()).unwrap();
    assert!(version > done["stateVersion"].as_u64().unwrap(), "{chosen}");
    assert_eq!(reloads(t.app.store.tool_calls().await.unwrap()), before, "no context call in between");
}

/// Contract: a follow-up recall batch is the one continuation — no successor content competes
/// with it (no render call, no teaching, no goal choice).
async fn a_follow_up_recall_batch_carries_no_competing_successor(t: Arc<TestApp>) {
    let c = coach(&t).await;
    // Two goals completed without recall in between: more due cards than one batch holds.
    let ctx = c.ctx(&t).await;
    let done = complete_now(&t, &c, &ctx["stateVersion"]).await;
    c.call(&t, "choose_skillpilot_option", json!({"option": published(&done, "mode", "mode", "learn")})).await;
    let mut next = c.ctx(&t).await;
    if next["requiredAction"] == "chooseOption" {
        c.call(&t, "choose_skillpilot_option", json!({"option": published(&next, "goal", "", "")})).await;
        next = c.ctx(&t).await;
    }
    assert_eq!(next["requiredAction"], "teachActiveGoal", "{next}");
    let done = complete_now(&t, &c, &next["stateVersion"]).await;
    let (err, started) =
        c.call(&t, "choose_skillpilot_option", json!({"option": published(&done, "mode", "mode", "verifiedRecall")})).await;
    assert!(!err, "{started}");
    let ctx = c.ctx(&t).await;
    let questions = ctx["openWorkflow"]["questions"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(questions, 5, "a full batch: {ctx}");
    let (_, _answers) =
        c.call(&t, "get_skillpilot_verified_recall_answers", json!({"batchCapability": ctx["openWorkflow"]["batchCapability"]})).await;
    let ctx = c.ctx(&t).await;
    let (err, stored) = c
        .call(
            &t,
            "record_skillpilot_verified_recall_results",
            json!({"gradingCapability": ctx["openWorkflow"]["gradingCapability"], "assessments": vec![json!({"passed": true}); questions]}),
        )
        .await;
    assert!(!err, "{stored}");
    assert_eq!(stored["continuation"], json!({"action": "offerNextRecallBatch", "consentRequired": true}), "{stored}");
    let context = &stored["context"];
    assert!(context.get("activeGoal").is_none() && context.get("options").is_none(), "competing successor content: {stored}");
}

async fn batches_started(t: &TestApp) -> usize {
    t.app.store.scan_events(None, 100_000).await.unwrap().iter().filter(|e| e.event_type == "RecallBatchStarted").count()
}

/// Contract (retry identity of every mutation): identical starts racing for one version give
/// one start and the same batch, with or without a `clientRequestId`; an exact late retry
/// returns the original batch even after it closed, and starts nothing new.
async fn identical_starts_give_one_batch_and_a_late_exact_retry_returns_it(t: Arc<TestApp>) {
    let start = "start_skillpilot_verified_recall";
    for with_id in [true, false] {
        let c = coach(&t).await;
        let ctx = c.ctx(&t).await;
        complete_now(&t, &c, &ctx["stateVersion"]).await;
        let before = batches_started(&t).await;
        let id = uuid::Uuid::new_v4().to_string();
        let args = if with_id { json!({"clientRequestId": id}) } else { json!({}) };
        let ((err_a, a), (err_b, b)) = tokio::join!(c.call(&t, start, args.clone()), c.call(&t, start, args.clone()));
        assert!(!err_a && !err_b, "no STATE_CONFLICT for identical starts (id: {with_id}): {a} {b}");
        assert_eq!(a["receipt"], b["receipt"], "the same batch");
        assert_eq!(a["questions"], b["questions"]);
        assert_eq!(batches_started(&t).await, before + 1, "one start");
        if !with_id {
            continue;
        }
        // The batch runs to its end; the coach's late exact retry gets the original batch back.
        let answers = c.call(&t, "get_skillpilot_verified_recall_answers", json!({"batchCapability": a["batchCapability"]})).await.1;
        let n = a["questions"].as_array().unwrap().len();
        let (err, stored) = c
            .call(
                &t,
                "record_skillpilot_verified_recall_results",
                json!({"gradingCapability": answers["gradingCapability"], "assessments": vec![json!({"passed": true}); n]}),
            )
            .await;
        assert!(!err, "{stored}");
        let (err, late) = c.call(&t, start, args.clone()).await;
        assert!(!err, "{late}");
        assert_eq!(late["receipt"], a["receipt"], "the original result");
        assert_eq!(late["questions"], a["questions"]);
        assert_eq!(batches_started(&t).await, before + 1, "nothing new started");
        // The same id with other arguments is refused and changes nothing.
        let other = json!({"clientRequestId": id, "expectedStateVersion": 1});
        refused(&t, &c, start, other, "IDEMPOTENCY_KEY_REUSED").await;
    }
}

/// A learner in Berlin with a session started there; returns the coach for it.
async fn berlin_coach(t: &TestApp, token: &str) -> Coach {
    let principal = t.principal(token).await;
    let zone = StartSession { time_zone: Some("Europe/Berlin".into()), ..Default::default() };
    t.app.start_session(&principal, zone).await.unwrap();
    let (err, ctx) = call(t, token, "get_skillpilot_learning_context", json!({})).await;
    assert!(!err, "{ctx}");
    Coach { token: token.to_owned(), sid: ctx["learningSessionId"].as_str().unwrap().to_owned() }
}

/// Contract: a returning learner gets their due recall. The curriculum is finished (the exam
/// declined: completion to confirm); weeks pass — across the change to summer time in the
/// learner's zone — and the cards fall due: the next context offers the recall as a published
/// option in the learner's language, and choosing it starts the batch.
async fn a_returning_learner_after_the_end_is_offered_the_due_recall(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let c = berlin_coach(&t, &token).await;
    let ctx = c.ctx(&t).await;
    c.call(&t, "choose_skillpilot_option", json!({"option": published(&ctx, "autopilot", "", "")})).await;
    let mut ctx = c.ctx(&t).await;
    for _ in 0..200 {
        if ctx["requiredAction"] == "offerExam" {
            break;
        }
        let workflow = ctx["openWorkflow"].clone();
        let (tool, args) = match ctx["requiredAction"].as_str().unwrap() {
            "teachActiveGoal" => (
                "complete_skillpilot_goal",
                json!({"expectedStateVersion": ctx["stateVersion"], "clientRequestId": uuid::Uuid::new_v4(), "decision": {"evidence": "independent", "consent": "closeAndContinue"}}),
            ),
            "offerVerifiedRecall" => ("start_skillpilot_verified_recall", json!({})),
            "answerVerifiedRecall" => ("get_skillpilot_verified_recall_answers", json!({"batchCapability": workflow["batchCapability"]})),
            "recordVerifiedRecall" => {
                let n = workflow["questions"].as_array().unwrap().len();
                (
                    "record_skillpilot_verified_recall_results",
                    json!({"gradingCapability": workflow["gradingCapability"], "assessments": vec![json!({"passed": true}); n]}),
                )
            }
            "chooseOption" | "awaitLearnerContinuation" => ("choose_skillpilot_option", json!({"option": ctx["options"][0]["payload"]})),
            other => panic!("unexpected {other}: {ctx}"),
        };
        let (err, result) = c.call(&t, tool, args).await;
        assert!(!err, "{tool}: {result}");
        ctx = c.ctx(&t).await;
    }
    assert_eq!(ctx["requiredAction"], "offerExam", "{ctx}");
    let (err, declined) = c.call(&t, "choose_skillpilot_option", json!({"option": published(&ctx, "declineExam", "", "")})).await;
    assert!(!err, "{declined}");
    assert_eq!(declined["requiredAction"], "confirmCompletion", "nothing due yet: {declined}");
    // Four weeks later, past the last Sunday of March (summer time in Berlin).
    t.clock.advance(chrono::Duration::days(28));
    let c = berlin_coach(&t, &token).await;
    let back = c.ctx(&t).await;
    assert!(back["recall"]["dueCards"].as_u64().unwrap() > 0, "cards fell due: {back}");
    assert_eq!(back["requiredAction"], "chooseOption", "the due recall is the decision to present: {back}");
    let recall = back["options"].as_array().unwrap().iter().find(|o| o["kind"] == "mode" && o["mode"] == "verifiedRecall").cloned();
    let recall = recall.unwrap_or_else(|| panic!("a recall option: {back}"));
    assert_eq!(recall["label"], "Gelerntes abfragen", "in the learner's language");
    let (err, started) = c.call(&t, "choose_skillpilot_option", json!({"option": recall["payload"]})).await;
    assert!(!err, "{started}");
    assert_eq!(started["receipt"]["stored"], "recallStarted", "{started}");
    assert!(!started["questions"].as_array().unwrap().is_empty(), "{started}");
}

fn focus_options(ctx: &Value) -> Vec<Value> {
    ctx["settings"]["options"].as_array().into_iter().flatten().filter(|o| o["kind"] == "focus").cloned().collect()
}

/// Contract (the backend owns the focus): the learner focuses on one top-level area through a
/// published option — one per area, and the whole curriculum back — never while a goal is taught;
/// the choice is a `FocusChanged` event, the next step is decided inside the focus, and the focus
/// with its counts shows in the context and on `/progress` (its goals outlined in the graph).
async fn a_focus_chosen_by_the_learner_limits_the_journey_and_shows_in_context_and_on_progress(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let ctx = c.ctx(&t).await;
    assert_eq!(ctx["requiredAction"], "teachActiveGoal", "{ctx}");
    assert!(focus_options(&ctx).is_empty(), "no focus choice while a goal is taught: {ctx}");
    let args = json!({
        "expectedStateVersion": ctx["stateVersion"],
        "clientRequestId": uuid::Uuid::new_v4().to_string(),
        "decision": {"evidence": "independent", "consent": "closeOnly"}
    });
    let (err, done) = c.call(&t, "complete_skillpilot_goal", args).await;
    assert!(!err, "{done}");
    let titles: Vec<Value> = focus_options(&done).iter().map(|o| o["title"].clone()).collect();
    assert_eq!(titles, ["Grundlagen der Brüche", "Brüche vergleichen", "Mit Brüchen rechnen"], "one choice per area: {done}");
    assert!(done["progress"].get("focus").is_none(), "the whole curriculum is no focus: {done}");
    let before = storage(&t).await.0;
    let (err, focused) =
        c.call(&t, "choose_skillpilot_option", json!({"option": published(&done, "focus", "title", "Grundlagen der Brüche")})).await;
    assert!(!err, "{focused}");
    assert_eq!(focused["progress"]["focus"], json!({"title": "Grundlagen der Brüche", "mastered": 1, "total": 4}), "{focused}");
    let events = t.app.store.scan_events(None, 100_000).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.event_type == "FocusChanged").count(), 1);
    assert!(storage(&t).await.0 > before);
    // A wish to go on inside the focus: cards are due and the basics hold next goals.
    assert_eq!(focused["requiredAction"], "chooseOption", "{focused}");
    let (err, learn) = c.call(&t, "choose_skillpilot_option", json!({"option": published(&focused, "mode", "mode", "learn")})).await;
    assert!(!err, "{learn}");
    let goals: Vec<Value> = learn["options"].as_array().unwrap().iter().map(|o| o["title"].clone()).collect();
    assert_eq!(goals, ["Brüche auf dem Zahlenstrahl", "Gleichwertige Brüche (Erweitern)"], "the focus's frontier: {learn}");
    crate::web::browser(&t, "progress-focus", &c.token, &["Grundlagen der Brüche", "1 / 4"]).await;
    // The whole curriculum again: the focus leaves the context.
    let whole = focus_options(&learn).into_iter().find(|o| o.get("title").is_none()).expect("a whole-curriculum option");
    assert_eq!(whole["label"], "Fokus: das ganze Curriculum");
    let (err, back) = c.call(&t, "choose_skillpilot_option", json!({"option": whole["payload"]})).await;
    assert!(!err, "{back}");
    assert!(back["progress"].get("focus").is_none(), "{back}");
}

/// Contract (retry identity, journey start): two first session starts racing over real HTTP for
/// a journey that does not exist yet both succeed, on one journey with one `JourneyStarted` —
/// the loser's start finds the journey started, never a `STATE_CONFLICT`.
async fn identical_first_session_starts_begin_one_journey(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let start = || t.http.post(format!("{}/v1/learning-sessions", t.base_url)).bearer_auth(&token).json(&json!({"timeZone": "UTC"})).send();
    let (a, b) = tokio::join!(start(), start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (201, 201));
    let events = t.app.store.scan_events(None, 100_000).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.event_type == "JourneyStarted").count(), 1, "one journey started");
    let journeys: std::collections::BTreeSet<_> = events.iter().map(|e| e.aggregate_id.clone()).collect();
    assert_eq!(journeys.len(), 1, "one journey");
}

/// A command of `other` on a journey: switching autopilot over, which any begun journey allows.
async fn switch_autopilot_elsewhere(other: &skillpilot::app::App, journey_id: &str) {
    let on = !other.load_journey(journey_id).await.unwrap().state.autopilot;
    use aggregates::learning_journey::{JourneyCommand, OptionChoice};
    use skillpilot::app::journeys::{Actor, CommandRequest};
    let request = CommandRequest {
        journey_id: journey_id.to_owned(),
        command: JourneyCommand::ChooseOption { choice: OptionChoice::Autopilot { autopilot: on } },
        expected_version: None,
        identity: None,
        tool: "test",
        actor: Actor::Learner,
        call: None,
    };
    other.execute(request, None).await.unwrap();
}

async fn journey_of(t: &TestApp, c: &Coach) -> String {
    t.app.gate(&t.principal(&c.token).await).await.unwrap().row.journey_id
}

/// ADR 0009: a write decides on this instance's cached journey without reading the log first.
/// When another instance has moved the journey on, the caller still gets what the log's state
/// decides — never a refusal or an expiry that only the stale copy would give, never an option
/// the log's state no longer offers.
async fn a_write_is_decided_on_the_logs_state_when_another_instance_moved_the_journey_past_this_ones_cache(t: Arc<TestApp>) {
    let other = t.another_process().await;

    // The caller saw the other instance's state: the version it expects is newer than the copy here.
    let c = coach(&t).await;
    let journey = journey_of(&t, &c).await;
    let v = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    switch_autopilot_elsewhere(&other, &journey).await;
    switch_autopilot_elsewhere(&other, &journey).await;
    let seen = other.load_journey(&journey).await.unwrap().state.version;
    assert_eq!(seen, v + 2);
    let (err, done) = c
        .call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": seen, "clientRequestId": "e1b2c3d4-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}}))
        .await;
    assert!(!err, "decided on the log's state, not on this instance's older copy: {done}");
    let now = c.ctx(&t).await;
    assert_eq!(done["stateVersion"], now["stateVersion"], "the result is the committed state: {done}");
    assert!(now["stateVersion"].as_u64().unwrap() > seen);
    // Having seen another writer, this instance reads the log before each write on the journey.
    assert!(t.app.cached_copy(&journey).is_none(), "a journey written elsewhere is validated before writes");
    // And a caller whose version is behind the log's is refused with the log's facts.
    switch_autopilot_elsewhere(&other, &journey).await;
    let head = other.load_journey(&journey).await.unwrap().state.version;
    let stale = c
        .call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": now["stateVersion"], "clientRequestId": "e2b2c3d4-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}}))
        .await;
    assert!(stale.0, "{}", stale.1);
    assert_eq!(stale.1["error"]["code"], "STATE_CONFLICT", "{}", stale.1);
    assert_eq!(stale.1["error"]["evidence"]["stateVersion"], head, "{}", stale.1);

    // An option issued on the copy here and overtaken elsewhere is stale, as on the log.
    let b = coach(&t).await;
    let journey_b = journey_of(&t, &b).await;
    let ctx = b.ctx(&t).await;
    assert!(t.app.cached_copy(&journey_b).is_some(), "an unshared journey is written on the cached copy");
    let token = ctx["settings"]["options"][1]["payload"]["optionToken"].as_str().unwrap().to_owned();
    switch_autopilot_elsewhere(&other, &journey_b).await;
    refused(&t, &b, "choose_skillpilot_option", json!({"option": {"optionToken": token}}), "OPTION_INVALID").await;

    // A session the copy here would call idle is active by the log: another instance wrote lately.
    let e = coach(&t).await;
    let journey_e = journey_of(&t, &e).await;
    let at = e.ctx(&t).await;
    t.clock.advance(chrono::Duration::hours(11));
    switch_autopilot_elsewhere(&other, &journey_e).await;
    t.clock.advance(chrono::Duration::hours(2));
    let (err, done) = e
        .call(&t, "complete_skillpilot_goal", json!({"expectedStateVersion": at["stateVersion"].as_u64().unwrap() + 1, "clientRequestId": "e3b2c3d4-1e4b-4b1a-9a57-6f3c1d2e3f40", "decision": {"evidence": "guided", "consent": "closeOnly"}}))
        .await;
    assert!(!err, "the session is active by the log's last event: {done}");

    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);
    other.store.close().await;
}

/// ADR 0011: a context read answers from this instance's copy of the journey, and its audit rows
/// are written only while the log still ends where the copy does. When another instance has moved
/// the journey on, the read is answered once more from the log — and audited once, not twice.
async fn a_context_read_shows_another_instances_write_though_this_one_holds_an_older_copy(t: Arc<TestApp>) {
    let other = t.another_process().await;
    let c = coach(&t).await;
    let journey = journey_of(&t, &c).await;
    let v = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    assert!(t.app.cached_copy(&journey).is_some(), "this instance holds a copy of the journey");
    let audited = |calls: &[(String, String, String, Option<String>)], phase: &str| {
        calls.iter().filter(|(tool, p, _, _)| tool == "get_skillpilot_learning_context" && p == phase).count()
    };
    let before = t.app.store.tool_calls().await.unwrap();

    switch_autopilot_elsewhere(&other, &journey).await;
    let head = other.load_journey(&journey).await.unwrap();
    assert_eq!(head.state.version, v + 1);
    let now = c.ctx(&t).await;
    assert_eq!(now["stateVersion"], head.state.version, "the read shows the log, not the older copy here: {now}");
    let after = t.app.store.tool_calls().await.unwrap();
    assert_eq!(audited(&after, "started"), audited(&before, "started") + 1, "one call, one `started`");
    assert_eq!(audited(&after, "completed"), audited(&before, "completed") + 1, "one call, one exit");

    // A read on a copy the log agrees with answers from it, as before.
    let again = c.ctx(&t).await;
    assert_eq!(again["stateVersion"], head.state.version);
    assert_eq!(audited(&t.app.store.tool_calls().await.unwrap(), "started"), audited(&before, "started") + 2);
    other.store.close().await;
}

both_stores!(
    a_focus_chosen_by_the_learner_limits_the_journey_and_shows_in_context_and_on_progress,
    identical_first_session_starts_begin_one_journey,
    a_returning_learner_after_the_end_is_offered_the_due_recall,
    identical_starts_give_one_batch_and_a_late_exact_retry_returns_it,
    a_second_mutation_in_the_same_turn_uses_the_successor_state_without_a_reload,
    a_follow_up_recall_batch_carries_no_competing_successor,
    the_mcp_endpoint_refuses_callers_without_a_learner_bearer,
    initialize_negotiates_and_carries_skill_md_as_instructions,
    published_schemas_are_closed_and_free_of_free_text_fields,
    session_errors_send_the_learner_to_the_start_page_and_reveal_nothing,
    repeated_gate_calls_return_the_same_session,
    unknown_and_forbidden_fields_are_refused_at_every_level_before_the_core,
    wrong_types_and_ranges_name_the_field_and_never_echo_the_value,
    complete_goal_retries_conflicts_and_key_reuse,
    a_request_id_reused_on_the_current_version_is_refused_and_writes_nothing,
    options_must_be_fresh_unaltered_and_the_learners_own,
    a_write_that_needs_the_learners_decision_is_a_clarification,
    capabilities_are_bound_to_their_step_session_and_payload,
    a_capability_past_its_expiry_is_expired,
    the_exam_refuses_early_starts_and_out_of_range_points,
    the_first_goals_picture_follows_the_wish_to_begin_and_only_issued_pairs_render,
    every_tool_writes_its_own_started_and_one_exit,
    a_write_is_decided_on_the_logs_state_when_another_instance_moved_the_journey_past_this_ones_cache,
    a_context_read_shows_another_instances_write_though_this_one_holds_an_older_copy,
);

/// A handler stuck behind a database lock: the dispatcher answers `INTERNAL` after the timeout
/// and writes the only exit; the handler, finishing late, writes no second one. PostgreSQL only:
/// there a lock on `events` blocks the handler but not the audit table (SQLite has one writer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_handler_gets_one_dispatcher_exit_and_no_second_one() {
    use sqlx::Connection;
    let t =
        crate::helpers::spawn_with(crate::helpers::Backend::Postgres, |s| s.mcp.handler_timeout = std::time::Duration::from_millis(500))
            .await;
    let c = coach(&t).await;
    let mut locker = sqlx::PgConnection::connect(&t.db_url).await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE events IN ACCESS EXCLUSIVE MODE").execute(&mut *tx).await.unwrap();
    let r = c.call(&t, "start_skillpilot_verified_recall", json!({})).await;
    assert_code(&r, "INTERNAL");
    // Contract: a timeout proves neither storage nor non-storage; an unambiguous technical
    // recovery says so (outcome unknown, retry exactly) — no claim, no promised later save.
    let recovery = &r.1["error"]["recovery"];
    assert_eq!((recovery["outcome"].as_str(), recovery["retry"].as_str()), (Some("unknown"), Some("exact")), "{}", r.1);
    assert!(
        recovery["instruction"].as_str().unwrap().contains("Retry it exactly once")
            || recovery["instruction"].as_str().unwrap().contains("genau einmal")
    );
    tx.rollback().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let rows = t.app.store.tool_calls().await.unwrap();
    let recall: Vec<_> = rows.iter().filter(|r| r.0 == "start_skillpilot_verified_recall").collect();
    assert!(recall.iter().any(|r| r.1 == "started" && r.2 == "handler"), "{recall:?}");
    let exits: Vec<_> = recall.iter().filter(|r| r.1 != "started").collect();
    assert_eq!(exits.len(), 1, "{recall:?}");
    assert_eq!((exits[0].1.as_str(), exits[0].2.as_str(), exits[0].3.as_deref()), ("error", "dispatcher", Some("INTERNAL")));
    t.teardown().await;
}

/// Contract (unknown outcome): a write whose events were committed but whose result never
/// reached the coach (the coach sends the call and never reads the answer) is retried exactly:
/// the retry returns the stored original result and stores nothing twice. With one transaction
/// per command (ADR 0006) nothing is written after the commit, so a lost result is one lost on
/// the way back; the raw connection here holds the request's answer unread. PostgreSQL only (it
/// is the store a coach reaches over a network; the command path is the same on SQLite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_retry_after_a_lost_result_returns_the_stored_result() {
    let t = Arc::new(crate::helpers::spawn(crate::helpers::Backend::Postgres).await);
    let c = Arc::new(coach(&t).await);
    let ctx = c.ctx(&t).await;
    let args = json!({
        "expectedStateVersion": ctx["stateVersion"],
        "clientRequestId": uuid::Uuid::new_v4().to_string(),
        "decision": {"evidence": "guided", "consent": "closeAndContinue"}
    });
    let completed = |t: &TestApp| {
        let store = t.app.store.clone();
        async move { store.scan_events(None, 100_000).await.unwrap().iter().filter(|e| e.event_type == "GoalCompleted").count() }
    };
    // The first attempt over a raw connection whose answer is never read.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "complete_skillpilot_goal", "arguments": {
        "learningSessionId": c.sid, "expectedStateVersion": args["expectedStateVersion"], "clientRequestId": args["clientRequestId"],
        "decision": args["decision"]}}})
    .to_string();
    let host = t.base_url.trim_start_matches("http://").to_owned();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-06-18\r\ncontent-length: {}\r\n\r\n{body}",
        c.token,
        body.len()
    );
    let mut raw = tokio::net::TcpStream::connect(&host).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut raw, request.as_bytes()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while completed(&t).await == 0 {
        assert!(std::time::Instant::now() < deadline, "the first attempt never committed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Committed; its answer was never read: the coach gives up on it.
    drop(raw);
    let (err, retry) = c.call(&t, "complete_skillpilot_goal", args).await;
    assert!(!err, "the exact retry succeeds: {retry}");
    assert_eq!(retry["receipt"]["stored"], "goalCompleted", "the original result: {retry}");
    assert!(retry["receipt"]["mastery"].is_number(), "{retry}");
    assert_eq!(completed(&t).await, 1, "stored once");
    drop(c);
    if let Ok(t) = Arc::try_unwrap(t) {
        t.teardown().await;
    }
}
