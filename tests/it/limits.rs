//! What the server takes from a client: bodies above the configured limit are refused with 413
//! before anything parses them, and a client that stalls its headers or its body is cut off
//! after the configured client timeout while everyone else is served.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::both_stores;
use crate::helpers::TestApp;
use crate::mcp_contract::coach;

const LIMIT: usize = 4096;
const CLIENT_TIMEOUT: Duration = Duration::from_secs(1);

fn small_limits(settings: &mut skillpilot::config::Settings) {
    settings.http = skillpilot::config::HttpSettings { max_body_bytes: LIMIT, client_timeout: CLIENT_TIMEOUT, max_connections: 64 };
}

async fn oversized_bodies_get_413_before_parsing_and_change_nothing(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let heads = t.app.store.stream_heads().await.unwrap();
    // Valid JSON-RPC, a real tool and session, but above the limit: refused, the tool never runs.
    let padding = "x".repeat(LIMIT * 2);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "complete_skillpilot_goal",
        "arguments": {"learningSessionId": c.sid, "decision": {"evidence": "independent", "consent": "closeOnly"}, "note": padding}}});
    let mcp = |body: reqwest::Body| {
        t.http
            .post(format!("{}/mcp", t.base_url))
            .bearer_auth(&c.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
    };
    let r = mcp(call.to_string().into()).send().await.unwrap();
    assert_eq!(r.status(), 413);
    // Not even valid JSON: 413, not a parse error, so nothing read the body before the limit.
    let r = mcp("{".repeat(LIMIT + 1).into()).send().await.unwrap();
    assert_eq!(r.status(), 413);
    // Chunked, without a Content-Length to trust.
    let addr = t.base_url.trim_start_matches("http://").to_owned();
    let mut chunked = TcpStream::connect(&addr).await.unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        c.token
    );
    for _ in 0..8 {
        request.push_str(&format!("{:x}\r\n{}\r\n", LIMIT / 2, "[".repeat(LIMIT / 2)));
    }
    request.push_str("0\r\n\r\n");
    chunked.write_all(request.as_bytes()).await.ok();
    let mut answer = [0u8; 12];
    chunked.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413");
    // The REST and the web routes share the limit.
    let r = t
        .http
        .post(format!("{}/v1/learning-sessions", t.base_url))
        .bearer_auth(&c.token)
        .header("content-type", "application/json")
        .body("{".repeat(LIMIT + 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = t
        .http
        .post(format!("{}/start", t.base_url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("curriculum={}", "a".repeat(LIMIT)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(t.app.store.stream_heads().await.unwrap(), heads, "no event was written");
    // Just under the limit is served.
    let (is_error, _) = c.call(&t, "get_skillpilot_learning_context", json!({})).await;
    assert!(!is_error);
}

/// Reads until the server closes the connection; returns what it sent and when it closed.
async fn read_until_closed(stream: &mut TcpStream, what: &str) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(CLIENT_TIMEOUT * 10, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the {what} open for {:?}", started.elapsed()),
        }
    }
    (String::from_utf8_lossy(&received).into_owned(), started.elapsed())
}

async fn stalled_clients_are_cut_off_while_others_are_served(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let heads = t.app.store.stream_heads().await.unwrap();
    let addr = t.base_url.trim_start_matches("http://").to_owned();

    // A dead client: connects and sends nothing.
    let mut dead = TcpStream::connect(&addr).await.unwrap();
    // A slow client: half a request line and header, then silence.
    let mut slow_headers = TcpStream::connect(&addr).await.unwrap();
    slow_headers.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty").await.unwrap();
    // A slow body: complete headers announcing 1000 bytes, then 10 of them.
    let mut slow_body = TcpStream::connect(&addr).await.unwrap();
    let headers = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\"",
        c.token
    );
    slow_body.write_all(headers.as_bytes()).await.unwrap();

    // Meanwhile the service answers everyone else.
    let (is_error, _) = c.call(&t, "get_skillpilot_learning_context", json!({})).await;
    assert!(!is_error);

    let ((_, dead_after), (slow_answer, slow_after), (body_answer, body_after)) = tokio::join!(
        read_until_closed(&mut dead, "dead client"),
        read_until_closed(&mut slow_headers, "client with slow headers"),
        read_until_closed(&mut slow_body, "client with a slow body")
    );
    for after in [dead_after, slow_after, body_after] {
        assert!(after >= CLIENT_TIMEOUT / 2 && after < CLIENT_TIMEOUT * 5, "cut off after {after:?}");
    }
    assert!(!slow_answer.contains(" 200 "), "{slow_answer}");
    assert!(body_answer.starts_with("HTTP/1.1 408"), "{body_answer}");
    assert_eq!(t.app.store.stream_heads().await.unwrap(), heads, "no event was written");
    assert_eq!(health_on_a_new_connection(&t).await, 200);
}

both_stores!(settings = small_limits;
    oversized_bodies_get_413_before_parsing_and_change_nothing,
    stalled_clients_are_cut_off_while_others_are_served
);

/// `/healthz` over a new connection: the test's pooled one may have sat idle past the client
/// timeout, and the service cuts idle connections too — reusing it races that close (seen once
/// in CI as an incomplete message).
async fn health_on_a_new_connection(t: &TestApp) -> u16 {
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    fresh.get(format!("{}/healthz", t.base_url)).send().await.unwrap().status().as_u16()
}

/// HTTP/2 and protocol detection get the same deadline as HTTP/1: a partial preface, an idle
/// HTTP/2 connection after its handshake, and a half HTTP/1 request line are all closed by the
/// server within a few client timeouts.
async fn idle_and_partial_http2_connections_are_cut_off_too(t: Arc<TestApp>) {
    let addr = t.base_url.trim_start_matches("http://").to_owned();
    let mut partial_preface = TcpStream::connect(&addr).await.unwrap();
    partial_preface.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut idle_h2 = TcpStream::connect(&addr).await.unwrap();
    // The full preface and an empty SETTINGS frame, then silence (pings go unanswered).
    idle_h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
    let mut partial_h1 = TcpStream::connect(&addr).await.unwrap();
    partial_h1.write_all(b"GET /healthz HT").await.unwrap();
    let ((_, a), (_, b), (_, c)) = tokio::join!(
        read_until_closed(&mut partial_preface, "partial HTTP/2 preface"),
        read_until_closed(&mut idle_h2, "idle HTTP/2 connection"),
        read_until_closed(&mut partial_h1, "partial HTTP/1 request")
    );
    for after in [a, b, c] {
        assert!(after < CLIENT_TIMEOUT * 5, "cut off after {after:?}");
    }
    // A real HTTP/2 client is served (prior knowledge, no TLS).
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let r = h2.get(format!("{}/healthz", t.base_url)).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.version()), (200, reqwest::Version::HTTP_2));
}

fn few_connections(settings: &mut skillpilot::config::Settings) {
    small_limits(settings);
    settings.http.max_connections = 8;
}

/// Beyond `max_connections` a new connection is closed at once; when the held ones time out,
/// the service answers again.
async fn connections_beyond_the_cap_are_closed_at_once(t: Arc<TestApp>) {
    let addr = t.base_url.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(&addr).await.unwrap();
    let (_, after) = read_until_closed(&mut extra, "connection beyond the cap").await;
    assert!(after < CLIENT_TIMEOUT / 2, "the ninth connection was kept for {after:?}");
    // The held ones are cut off by their idle deadline; then the service answers again.
    for mut stream in held {
        read_until_closed(&mut stream, "held connection").await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(health_on_a_new_connection(&t).await, 200);
}

both_stores!(settings = small_limits; idle_and_partial_http2_connections_are_cut_off_too);

mod capped {
    use super::*;
    both_stores!(settings = few_connections; connections_beyond_the_cap_are_closed_at_once);
}
