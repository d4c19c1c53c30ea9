//! What stands between HTTP and rmcp on `/mcp`: CORS for the configured browser origins (the
//! preflight answers before authentication), JSON-RPC errors where rmcp would answer with a bare
//! HTTP status (malformed JSON, a batch, non-object tool arguments), and the result fields of the
//! 2026-07-28 revision (`resultType`) that rmcp 3.11 leaves out.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// The stateless revision whose results must name their `resultType`.
pub(crate) const MODERN_VERSION: &str = "2026-07-28";
const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// Browser origins the endpoint answers, with explicit ports (`https://chatgpt.com:443`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Origins(pub Vec<String>);

impl Origins {
    fn allows(&self, origin: &str) -> bool {
        self.0.iter().any(|o| o.eq_ignore_ascii_case(origin) || o.eq_ignore_ascii_case(&with_default_port(origin)))
    }
}

/// `https://host` → `https://host:443`, so a browser's port-less Origin matches a configured entry.
fn with_default_port(origin: &str) -> String {
    let Ok(url) = url::Url::parse(origin) else { return origin.to_owned() };
    match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) if url.port().is_none() => format!("{}://{host}:{port}", url.scheme()),
        _ => origin.to_owned(),
    }
}

fn cors_headers(headers: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    headers
        .insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("mcp-session-id, mcp-protocol-version, www-authenticate"));
}

/// CORS, outermost on `/mcp`: a preflight from an allowed origin is answered here (it carries
/// no credentials, so it must not meet the 401); every response to an allowed origin names it.
/// A preflight from any other origin is 403; rmcp refuses the actual request of such an origin.
pub(crate) async fn cors(State(origins): State<Origins>, request: Request, next: Next) -> Response {
    let origin = request.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Some(origin) = origin.filter(|o| origins.allows(o)) else {
        if request.method() == Method::OPTIONS {
            return StatusCode::FORBIDDEN.into_response();
        }
        return next.run(request).await;
    };
    if request.method() == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        cors_headers(headers, &origin);
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST, GET, DELETE, OPTIONS"));
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, accept, mcp-protocol-version, mcp-session-id, last-event-id"),
        );
        headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        return response;
    }
    let mut response = next.run(request).await;
    cors_headers(response.headers_mut(), &origin);
    response
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Whether a request speaks the 2026-07-28 revision: its `MCP-Protocol-Version` header, the
/// version in its `_meta`, or `server/discover` (which only that revision has).
fn is_modern(headers: &HeaderMap, message: &Value) -> bool {
    let header = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    header == Some(MODERN_VERSION)
        || message["params"]["_meta"][VERSION_META].as_str() == Some(MODERN_VERSION)
        || message["method"].as_str() == Some("server/discover")
}

/// The JSON-RPC gate, inside authentication: a POST body that is not JSON gets -32700, a batch
/// -32600 (the revisions since 2025-06-18 have no batches), `tools/call` arguments that are not
/// an object -32602 — each a JSON-RPC error instead of rmcp's bare 415/422. On the 2026-07-28
/// revision every result then gets `resultType: "complete"` when rmcp left it out (this server
/// never answers `input_required`).
pub(crate) async fn json_rpc(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // The body was read whole (and size-checked) by the outer body middleware.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32700, "Parse error: the body could not be read");
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32700, "Parse error: the body is not JSON"),
    };
    if message.is_array() {
        return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32600, "Invalid Request: JSON-RPC batches are not supported");
    }
    let Some(object) = message.as_object() else {
        return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32600, "Invalid Request: a JSON-RPC message is an object");
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    if object.get("method").and_then(Value::as_str) == Some("tools/call") {
        let arguments = &message["params"]["arguments"];
        if !(arguments.is_null() || arguments.is_object()) {
            return rpc_error(StatusCode::OK, id, -32602, "Invalid params: tool arguments must be an object");
        }
    }
    let modern = is_modern(&parts.headers, &message);
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    if !modern {
        return response;
    }
    stamp_result_type(response).await
}

async fn stamp_result_type(response: Response) -> Response {
    let is_json =
        response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut message: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return Response::from_parts(parts, Body::from(bytes)),
    };
    match message.get_mut("result").and_then(Value::as_object_mut) {
        Some(result) if !result.contains_key("resultType") => {
            result.insert("resultType".into(), json!("complete"));
        }
        _ => return Response::from_parts(parts, Body::from(bytes)),
    }
    let body = message.to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_less_browser_origin_matches_its_configured_default_port() {
        let origins = Origins(vec!["https://chatgpt.com:443".into(), "http://127.0.0.1:8080".into()]);
        assert!(origins.allows("https://chatgpt.com"));
        assert!(origins.allows("https://chatgpt.com:443"));
        assert!(origins.allows("http://127.0.0.1:8080"));
        assert!(!origins.allows("https://chatgpt.com.evil.example"));
        assert!(!origins.allows("http://127.0.0.1:8081"));
        assert!(!origins.allows("null"));
    }
}
