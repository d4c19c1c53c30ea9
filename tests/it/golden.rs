//! Golden files of the wire shapes the contract fixes: `tools/list` as published, and the whole
//! `tools/call` result (summary text, structured content, `_meta`) of every tool and of the
//! typical refusals, captured along one journey from the first goal to the scored exam. They
//! pin the shapes across refactorings of the tool layer; a deliberate change is re-recorded with
//! `SKILLPILOT_BLESS=1` and reviewed in the diff. Tokens are normalized (they are sealed with a
//! random nonce); everything else — versions, counts, texts, times of the manual clock — is
//! compared byte for byte, and the same file holds on both stores.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use skillpilot::mcp::tool_list;

use crate::both_stores;
use crate::helpers::TestApp;
use crate::mcp_contract::{coach, rpc, Coach};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

/// Compares `actual` with the golden file, or records it under `SKILLPILOT_BLESS=1`.
fn assert_golden(name: &str, actual: &Value) {
    let path = golden_path(name);
    let text = format!("{}\n", serde_json::to_string_pretty(actual).unwrap());
    if std::env::var("SKILLPILOT_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (record it with SKILLPILOT_BLESS=1)", path.display()));
    if expected != text {
        let first =
            expected.lines().zip(text.lines()).position(|(a, b)| a != b).unwrap_or(expected.lines().count().min(text.lines().count()));
        let show = |s: &str| s.lines().skip(first.saturating_sub(3)).take(8).collect::<Vec<_>>().join("\n");
        panic!(
            "{} differs from the golden file at line {}:\n--- golden\n{}\n--- actual\n{}\n(re-record deliberate changes with SKILLPILOT_BLESS=1)",
            path.display(),
            first + 1,
            show(&expected),
            show(&text)
        );
    }
}

/// Sealed tokens carry a random nonce: they are replaced by a placeholder naming their kind.
fn normalized(value: &Value) -> Value {
    match value {
        Value::String(s) if s.starts_with("v4.local.") || s.starts_with("v4.public.") => json!("<token>"),
        Value::String(s) if uuid::Uuid::parse_str(s).is_ok() => json!("<uuid>"),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), normalized(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

async fn raw_call(t: &TestApp, c: &Coach, name: &str, mut args: Value) -> Value {
    if args.get("learningSessionId").is_none() {
        args["learningSessionId"] = json!(c.sid);
    }
    let r = rpc(t, Some(&c.token), "tools/call", json!({"name": name, "arguments": args})).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert!(body["result"].is_object(), "no result: {body}");
    body["result"].clone()
}

/// Records the first result seen under each label.
#[derive(Default)]
struct Seen(BTreeMap<String, Value>);

impl Seen {
    fn keep(&mut self, label: &str, result: &Value) {
        self.0.entry(label.to_owned()).or_insert_with(|| normalized(result));
    }
}

/// `tools/list` is the published contract of every tool: names, descriptions, schemas,
/// annotations and the widget binding.
async fn tools_list_matches_its_golden_file(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let r = rpc(&t, Some(&c.token), "tools/list", json!({})).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["tools"], json!(tool_list()), "the endpoint publishes every shipped tool");
    assert_golden("tools-list.json", &body["result"]);
}

/// One journey from the first goal to the scored exam, following the one required action of
/// each context; the first result of every tool and of the typical refusals is compared.
async fn every_tools_result_matches_its_golden_file(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let mut seen = Seen::default();
    let early_exam = raw_call(&t, &c, "start_skillpilot_exam", json!({})).await;
    seen.keep("start_skillpilot_exam NOT_ELIGIBLE", &early_exam);
    let bad = raw_call(&t, &c, "complete_skillpilot_goal", json!({"expectedStateVersion": -1})).await;
    seen.keep("complete_skillpilot_goal VALIDATION_FAILED", &bad);
    let mut finished = false;
    // At the exam offer the learner first declines (completion is confirmed), then changes
    // their mind and takes the exam, which stays available.
    let (mut declined, mut exam_started) = (false, false);
    for _ in 0..300 {
        let ctx = raw_call(&t, &c, "get_skillpilot_learning_context", json!({})).await;
        seen.keep("get_skillpilot_learning_context", &ctx);
        let ctx = ctx["structuredContent"].clone();
        let action = ctx["requiredAction"].as_str().unwrap_or_default().to_owned();
        seen.keep(&format!("get_skillpilot_learning_context {action}"), &json!({"structuredContent": normalized(&ctx)}));
        let workflow = &ctx["openWorkflow"];
        let mut label = None;
        let (tool, args) = match action.as_str() {
            "teachActiveGoal" => {
                let stale = json!({"expectedStateVersion": ctx["stateVersion"].as_u64().unwrap() + 7, "clientRequestId": uuid::Uuid::new_v4(),
                                   "decision": {"evidence": "independent", "consent": "closeAndContinue"}});
                let conflict = raw_call(&t, &c, "complete_skillpilot_goal", stale).await;
                seen.keep("complete_skillpilot_goal STATE_CONFLICT", &conflict);
                let args = json!({"expectedStateVersion": ctx["stateVersion"], "clientRequestId": uuid::Uuid::new_v4(),
                                  "decision": {"evidence": "independent", "consent": "closeAndContinue"}});
                ("complete_skillpilot_goal", args)
            }
            "chooseOption" | "awaitLearnerContinuation" => {
                let early = json!({"expectedStateVersion": ctx["stateVersion"], "clientRequestId": uuid::Uuid::new_v4(),
                                   "decision": {"evidence": "guided", "consent": "closeOnly"}});
                let early = raw_call(&t, &c, "complete_skillpilot_goal", early).await;
                seen.keep(&format!("complete_skillpilot_goal during {action}"), &early);
                ("choose_skillpilot_option", json!({"option": ctx["options"][0]["payload"]}))
            }
            "offerVerifiedRecall" => ("start_skillpilot_verified_recall", json!({})),
            "answerVerifiedRecall" => ("get_skillpilot_verified_recall_answers", json!({"batchCapability": workflow["batchCapability"]})),
            "recordVerifiedRecall" => {
                let n = workflow["questions"].as_array().map_or(0, Vec::len);
                let assessments: Vec<Value> = (0..n).map(|i| json!({"passed": i % 4 != 3})).collect();
                (
                    "record_skillpilot_verified_recall_results",
                    json!({"gradingCapability": workflow["gradingCapability"], "assessments": assessments}),
                )
            }
            "offerExam" if !declined => {
                declined = true;
                label = Some("choose_skillpilot_option declineExam");
                let decline = ctx["options"].as_array().into_iter().flatten().find(|o| o["kind"] == "declineExam");
                ("choose_skillpilot_option", json!({"option": decline.expect("the exam offer publishes a decline option")["payload"]}))
            }
            "offerExam" => ("start_skillpilot_exam", json!({})),
            "confirmCompletion" if declined && !exam_started => {
                assert_eq!(ctx["exam"]["released"], true, "declined, the exam stays available: {ctx}");
                exam_started = true;
                ("start_skillpilot_exam", json!({}))
            }
            "answerExam" => ("get_skillpilot_exam_solutions", json!({"examCapability": workflow["examCapability"]})),
            "recordExam" => {
                let n = workflow["tasks"].as_array().map_or(0, Vec::len);
                (
                    "record_skillpilot_exam_scores",
                    json!({"scoringCapability": workflow["scoringCapability"], "scores": vec![json!({"points": 4}); n]}),
                )
            }
            _ => {
                finished = true;
                break;
            }
        };
        let result = raw_call(&t, &c, tool, args).await;
        assert_ne!(result["isError"], true, "{tool}: {result}");
        seen.keep(label.unwrap_or(tool), &result);
        if label == Some("choose_skillpilot_option declineExam") {
            assert_eq!(result["structuredContent"]["requiredAction"], "confirmCompletion", "declining confirms completion: {result}");
        }
        if let Some(call) = result["structuredContent"]["continuation"]["toolCall"].as_object().cloned() {
            let name = call["name"].as_str().unwrap().to_owned();
            let rendered = raw_call(&t, &c, &name, call["arguments"].clone()).await;
            seen.keep(&name, &rendered);
            let again = raw_call(
                &t,
                &c,
                &name,
                json!({"goalId": "no-such-goal", "expectedStateVersion": call["arguments"]["expectedStateVersion"]}),
            )
            .await;
            seen.keep(&format!("{name} NOT_ALLOWED"), &again);
        }
    }
    assert!(finished && declined && exam_started, "the journey reaches its end, through a declined and then a taken exam");
    for tool in tool_list() {
        let name = tool["name"].as_str().unwrap();
        assert!(seen.0.contains_key(name), "the journey never called {name}: {:?}", seen.0.keys().collect::<Vec<_>>());
    }
    assert_golden("tool-results.json", &json!(seen.0));
}

both_stores!(tools_list_matches_its_golden_file, every_tools_result_matches_its_golden_file);
crate::through_pgbouncer!(every_tools_result_matches_its_golden_file);
