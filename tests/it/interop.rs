//! Protocol interop at the HTTP edge of `/mcp`: JSON-RPC errors where the spec wants them, the
//! 2026-07-28 result fields, the case-insensitive bearer scheme, CORS for configured origins,
//! and OAuth errors for a token request in the wrong encoding.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::TestApp;

async fn post_raw(t: &TestApp, token: &str, body: &str, version: &str) -> (u16, Value) {
    let parsed = serde_json::from_str::<Value>(body).unwrap_or(Value::Null);
    let method = parsed["method"].as_str().unwrap_or_default().to_owned();
    // The 2026-07-28 headers: the method, and the tool name or resource URI it is about.
    let name = parsed["params"]["name"].as_str().or(parsed["params"]["uri"].as_str()).unwrap_or_default().to_owned();
    let r = t
        .http
        .post(format!("{}/mcp", t.base_url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", method)
        .header("mcp-name", name)
        .header("authorization", format!("bearer {token}"))
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn malformed_json_batches_and_non_object_arguments_get_json_rpc_errors(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let (status, body) = post_raw(&t, &token, "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", "2025-11-25").await;
    assert_eq!((status, body["error"]["code"].as_i64(), &body["id"]), (400, Some(-32700), &Value::Null), "{body}");
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]);
    let (status, body) = post_raw(&t, &token, &batch.to_string(), "2025-11-25").await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32600)), "{body}");
    for arguments in [json!([1, 2]), json!("text"), json!(7)] {
        let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "get_skillpilot_learning_context", "arguments": arguments}});
        let (status, body) = post_raw(&t, &token, &call.to_string(), "2025-11-25").await;
        assert_eq!((status, body["error"]["code"].as_i64(), body["id"].as_i64()), (200, Some(-32602), Some(9)), "{body}");
    }
    // Nothing of it reached the log.
    let mut events = 0;
    t.app.list_events(&Default::default(), |_| events += 1).await.unwrap();
    assert_eq!(events, 0);
}

async fn results_of_the_2026_07_28_revision_carry_their_result_type(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "interop-test", "version": "1"}
    });
    for (method, params) in [
        ("tools/list", json!({"_meta": meta})),
        ("resources/list", json!({"_meta": meta})),
        ("resources/read", json!({"_meta": meta, "uri": "ui://skillpilot/goal-picture.html"})),
        ("tools/call", json!({"_meta": meta, "name": "get_skillpilot_learning_context", "arguments": {}})),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params});
        let (status, body) = post_raw(&t, &token, &request.to_string(), "2026-07-28").await;
        assert_eq!(status, 200, "{method}: {body}");
        assert_eq!(body["result"]["resultType"], "complete", "{method}: {body}");
    }
    // The handshake-era revisions are answered as before: no field they do not know.
    let request = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}});
    for version in ["2025-11-25", "2025-06-18"] {
        let (status, body) = post_raw(&t, &token, &request.to_string(), version).await;
        assert_eq!(status, 200);
        assert!(body["result"]["tools"].is_array() && body["result"].get("resultType").is_none(), "{version}: {body}");
    }
}

async fn a_token_request_in_json_gets_an_oauth_error(t: Arc<TestApp>) {
    let r = t.http.post(format!("{}/oauth/token", t.base_url)).json(&json!({"grant_type": "refresh_token"})).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request", "{body}");
}

fn chat_origin(settings: &mut skillpilot::config::Settings) {
    settings.mcp.allowed_origins = vec!["https://chatgpt.com:443".into()];
}

async fn an_allowed_origin_gets_its_preflight_and_cors_headers_and_others_do_not(t: Arc<TestApp>) {
    let preflight = |origin: &str| {
        t.http
            .request(reqwest::Method::OPTIONS, format!("{}/mcp", t.base_url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization, content-type, mcp-protocol-version")
            .send()
    };
    let ok = preflight("https://chatgpt.com").await.unwrap();
    assert_eq!(ok.status(), 204, "the preflight carries no token and must not meet the 401");
    assert_eq!(ok.headers()["access-control-allow-origin"], "https://chatgpt.com");
    assert!(ok.headers()["access-control-allow-headers"].to_str().unwrap().contains("authorization"));
    assert_eq!(preflight("https://evil.example").await.unwrap().status(), 403);

    let token = t.learner("Ada").await;
    let call = |origin: &'static str| {
        t.http
            .post(format!("{}/mcp", t.base_url))
            .header("origin", origin)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .bearer_auth(&token)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
            .send()
    };
    let allowed = call("https://chatgpt.com").await.unwrap();
    assert_eq!(allowed.status(), 200);
    assert_eq!(allowed.headers()["access-control-allow-origin"], "https://chatgpt.com");
    let refused = call("https://evil.example").await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.headers().get("access-control-allow-origin").is_none());
    // In development the service's own loopback origin may call it.
    let own = t
        .http
        .post(format!("{}/mcp", t.base_url))
        .header("origin", &t.base_url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .bearer_auth(&token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
}

both_stores!(
    malformed_json_batches_and_non_object_arguments_get_json_rpc_errors,
    results_of_the_2026_07_28_revision_carry_their_result_type,
    a_token_request_in_json_gets_an_oauth_error,
);

mod with_origins {
    use super::*;
    both_stores!(settings = chat_origin; an_allowed_origin_gets_its_preflight_and_cors_headers_and_others_do_not);
}
