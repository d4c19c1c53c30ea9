//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, run on the Node.js 22
//! that `scripts/test` installs from the npm package `node@22`) against the server, for the
//! scenarios that apply to it. The suite cannot send a bearer token, so a loopback proxy in this
//! test adds a learner's and forwards everything else unchanged (Host and Origin included); the
//! server's public URL is the proxy's, as behind any reverse proxy.
//!
//! Scenarios that do not apply (docs/reliability.md lists them with the reason): they call
//! fixture tools, prompts or resources of the suite's reference server (`test_simple_text`,
//! `test_image_content`, prompts, resource templates, subscriptions), or features this server
//! does not offer (logging, completion, sampling, elicitation, SSE streams: it answers JSON).

use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;

use crate::helpers::{spawn_with, Backend};

/// The scenarios that apply to this server.
const SCENARIOS: &[&str] = &["server-initialize", "ping", "tools-list", "resources-list", "dns-rebinding-protection"];

fn suite() -> PathBuf {
    let dir = std::env::var("SKILLPILOT_TEST_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/node_modules/.bin"));
    assert!(
        dir.join("conformance").exists() && dir.join("node").exists(),
        "the MCP conformance suite and Node.js 22 are needed: run scripts/test, which installs them into tests/conformance"
    );
    dir
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    token: String,
    http: reqwest::Client,
}

/// Forwards a request as it came (method, path, headers — Host and Origin too — and body) and
/// adds the learner's bearer token.
async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
    let url = format!("{}{}", proxy.upstream, parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut outgoing = proxy.http.request(parts.method.clone(), url).body(body);
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_LENGTH && name != axum::http::header::AUTHORIZATION {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.bearer_auth(&proxy.token).send().await;
    let Ok(answer) = answer else { return Response::builder().status(502).body(Body::empty()).unwrap_or_default() };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != axum::http::header::CONTENT_LENGTH && name != axum::http::header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(answer.bytes().await.unwrap_or_default())).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_every_scenario_that_applies() {
    let bin = suite();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", listener.local_addr().unwrap());
    let public = proxy_url.clone();
    let t = spawn_with(Backend::Sqlite, move |s| s.public_url = public).await;
    let token = t.learner("Conformance").await;
    // A host never resolves through a proxy Host header rewrite: reqwest would send the
    // upstream's own Host, so the proxy keeps the client's.
    let http = reqwest::Client::builder().build().unwrap();
    let proxy = Proxy { upstream: t.base_url.clone(), token, http };
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let out_dir = std::env::temp_dir().join(format!("sp_conformance_{}", uuid::Uuid::new_v4().simple()));
    let mut failures = Vec::new();
    for scenario in SCENARIOS {
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let out = tokio::process::Command::new(bin.join("conformance"))
            .args(["server", "--url", &format!("{proxy_url}/mcp"), "--scenario", scenario, "-o"])
            .arg(&out_dir)
            .env("PATH", path)
            .output()
            .await
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            failures.push(format!("{scenario}:\n{text}"));
        }
    }
    std::fs::remove_dir_all(&out_dir).ok();
    t.teardown().await;
    assert!(failures.is_empty(), "conformance failures:\n{}", failures.join("\n"));
}
