//! A simulated coach's connection to the server under test: one kept-alive HTTP/1.1
//! connection, its request headers built once.
//!
//! The load generator runs on the machine it measures, so every microsecond it spends is taken
//! from the server and the database. A general-purpose client (connection pool, per-request URL
//! parsing and header maps, redirect and proxy handling) cost the load generator a third to a
//! half more CPU per request than this (docs/performance.md); `pgbench`, the baseline the
//! service is held to, is a lean C client as well.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

/// One coach's connection to `/mcp` with its bearer token: opened at the first request and
/// again after the server closed it.
pub(super) struct Wire {
    authority: String,
    host: HeaderValue,
    bearer: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Wire {
    /// A connection to the server at `base` (`http://host:port`) for the learner with `token`.
    pub(super) fn new(base: &str, token: &str) -> Self {
        let authority = base.trim_start_matches("http://").trim_end_matches('/').to_owned();
        Self {
            host: HeaderValue::from_str(&authority).unwrap_or(HeaderValue::from_static("localhost")),
            bearer: bearer(token),
            authority,
            sender: None,
        }
    }

    /// Sends `token` as the bearer from now on.
    pub(super) fn set_token(&mut self, token: &str) {
        self.bearer = bearer(token);
    }

    /// POSTs `body` (a JSON-RPC message) to `/mcp` and returns the answer's body, or `None`
    /// when the request failed. A connection that broke is dropped and the next call opens a
    /// new one; the failed request is not retried (a write must not be sent twice).
    pub(super) async fn post(&mut self, body: Vec<u8>) -> Option<Bytes> {
        let sender = match self.sender.as_mut() {
            Some(s) if !s.is_closed() => s,
            _ => self.sender.insert(self.connect().await?),
        };
        if sender.ready().await.is_err() {
            self.sender = None;
            return None;
        }
        let request = Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header(HOST, self.host.clone())
            .header(AUTHORIZATION, self.bearer.clone())
            .header(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("mcp-protocol-version", HeaderValue::from_static("2025-11-25"))
            .body(Full::new(Bytes::from(body)))
            .ok()?;
        let answered = match sender.send_request(request).await {
            Ok(response) => response.into_body().collect().await.ok().map(|b| b.to_bytes()),
            Err(_) => None,
        };
        if answered.is_none() {
            self.sender = None;
        }
        answered
    }

    async fn connect(&self) -> Option<SendRequest<Full<Bytes>>> {
        let stream = tokio::net::TcpStream::connect(&self.authority).await.ok()?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
        tokio::spawn(async move {
            // The connection ends when the coach drops its sender or the server closes it.
            let _ = connection.await;
        });
        Some(sender)
    }
}

/// The `authorization` header for `token` (a token is base64url text, always a valid value).
fn bearer(token: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("Bearer {token}")).unwrap_or(HeaderValue::from_static("Bearer"))
}
