//! The MCP endpoint (`/mcp`): rmcp's Streamable HTTP server in stateless JSON mode, mounted in
//! axum behind bearer authentication. `call_tool` takes the raw arguments so our own strict
//! validator answers with our own error result (rmcp's typed parameters would answer a
//! malformed call with a JSON-RPC protocol error instead, which a coach cannot act on). The dispatcher writes the tool-call audit's
//! `error` exit only for a panic, a timeout or an unknown tool; each handler writes its own
//! `started` and exit — in its command's commit when it appended events, else together once
//! it finishes (ADR 0006).

pub(crate) mod gate;
pub mod schema;
pub mod tools;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::FutureExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tracing::Instrument;

use crate::app::identity::{Principal, Role};
use crate::app::App;
pub use crate::config::McpSettings;
use crate::error::AppError;
use crate::store::ToolCallRow;
use tools::{Tool, ToolOutput, WIDGET_URI};

/// The coach behaviour, the single source of `initialize` `instructions`.
pub const SKILL_MD: &str = include_str!("../../docs/SKILL.md");

const WIDGET_HTML: &str = include_str!("widget.html");

/// The tool server: one per request (stateless), sharing the application.
#[derive(Clone)]
pub struct CoachServer {
    app: Arc<App>,
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, McpError> {
    serde_json::from_value(value).map_err(|e| McpError::internal_error(format!("result shape: {e}"), None))
}

/// The tool definitions as `tools/list` shows them (refused tools are absent).
pub fn tool_list_of(registry: &crate::registry::Registry) -> Vec<Value> {
    Tool::ALL.iter().zip(tools::listed()).filter(|(t, _)| registry.is_bound(t.name())).map(|(_, listed)| listed.clone()).collect()
}

/// Every shipped tool definition as `tools/list` would show it when bound.
pub fn tool_list() -> Vec<Value> {
    tools::listed().to_vec()
}

fn error_result(app: &App, err: &AppError, locale: &str, fresh: Option<&projections::full_context::FullContext>) -> Value {
    let mut body = err.body(locale);
    // Evidence of a refusal the state decided: the version and the one action allowed now.
    if let Some(ctx) = fresh {
        let mut evidence = body["error"].get("evidence").cloned().unwrap_or_else(|| json!({}));
        evidence["stateVersion"] = json!(ctx.state_version);
        evidence["allowedAction"] = json!(ctx.required_action);
        body["error"]["evidence"] = evidence;
    }
    if let Some(recovery) = tools::recovery(app, err, locale, &app.settings.start_url(), fresh) {
        body["error"]["recovery"] = recovery;
    }
    body
}

fn call_result(structured: Value, summary: &str, is_error: bool, meta: Option<Value>) -> Result<CallToolResult, McpError> {
    // Built directly rather than as JSON read back into rmcp's type (that round trip was 4 % of
    // the server's CPU under load); `resultType` stays absent as before (ADR 0004 sets it at the
    // HTTP gate for the protocol versions that carry it).
    let content = vec![rmcp::model::ContentBlock::text(summary)];
    let mut result = if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    result.result_type = None;
    result.structured_content = Some(structured);
    result.is_error = Some(is_error);
    result.meta = match meta {
        Some(Value::Object(map)) => Some(rmcp::model::MetaObject(map)),
        Some(other) => return Err(McpError::internal_error(format!("result meta is not an object: {other}"), None)),
        None => None,
    };
    Ok(result)
}

impl CoachServer {
    /// Writes audit rows of no commit (ADR 0006): the call's `started` and exit together, or
    /// the dispatcher's exit.
    async fn audit(&self, rows: Vec<ToolCallRow>) {
        let what: Vec<(String, &'static str)> = rows.iter().map(|r| (r.tool.clone(), r.phase)).collect();
        if let Err(e) = self.app.writer.audit(rows).await {
            tracing::warn!(error = %e, rows = ?what, "tool-call audit rows not written");
        }
    }

    fn row(&self, call_id: &str, phase: &'static str, writer: &'static str, tool: &str) -> ToolCallRow {
        ToolCallRow {
            call_id: call_id.to_owned(),
            phase,
            writer,
            tool: tool.to_owned(),
            journey_id: None,
            code: None,
            events_appended: 0,
            duration_ms: None,
            at_ms: self.app.clock.now().timestamp_millis(),
        }
    }

    /// A tool handler with its own audit rows: `started`, then exactly one exit.
    async fn handle(self, principal: Principal, call_id: String, name: String, args: Value) -> Option<Result<CallToolResult, McpError>> {
        let started = Instant::now();
        // A refused tool is no tool for the coach: the dispatcher answers as for an unknown name.
        let tool = Tool::named(&name).filter(|t| self.app.registry.is_bound(t.name()))?;
        let tool_name = tool.name();
        let started_row = self.row(&call_id, "started", "handler", tool_name);
        let audit = tools::CallAudit { started_row: started_row.clone(), started };
        let mut validated = false;
        let (exit, result) = loop {
            let outcome = tools::dispatch(&self.app, &principal, tool, args.clone(), Some(audit.clone()), validated).await;
            let (exit, result, if_current) = self.exit_of(&call_id, tool_name, started, outcome);
            // A call that committed events wrote its `started` and exit in that commit.
            if exit.events_appended > 0 {
                break (exit, result);
            }
            let rows = vec![started_row.clone(), exit.clone()];
            let Some(check) = if_current else {
                self.audit(rows).await;
                break (exit, result);
            };
            // A read answered from this process's copy stands only if the log still ends there
            // (ADR 0011); else — or if that cannot be told — it is answered again from the log.
            match self.app.writer.audit_if_current(rows, check).await {
                Ok(true) => break (exit, result),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "a read's audit rows not written; reading the log"),
            }
            validated = true;
        };
        self.app.metrics.tool(tool_name, exit.phase, started.elapsed().as_secs_f64());
        let span = tracing::Span::current();
        if let Some(journey) = &exit.journey_id {
            span.record("journey_id", journey.as_str());
        }
        span.record("outcome", exit.code.unwrap_or(exit.phase));
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        // A server fault is a warning for the operator; anything the client caused is not.
        if exit.code.is_some_and(|c| c == "INTERNAL" || c == "STORE_UNAVAILABLE") {
            tracing::warn!(duration_ms, events = exit.events_appended, "tool call failed");
        } else {
            tracing::info!(duration_ms, events = exit.events_appended, "tool call");
        }
        Some(result)
    }

    /// The exit row and the MCP result of one run of a call, and the check a read answered
    /// from this process's copy needs.
    fn exit_of(
        &self,
        call_id: &str,
        tool_name: &str,
        started: Instant,
        outcome: Result<ToolOutput, tools::Failure>,
    ) -> (ToolCallRow, Result<CallToolResult, McpError>, Option<crate::store::IfCurrent>) {
        let mut exit = self.row(call_id, "completed", "handler", tool_name);
        exit.duration_ms = i64::try_from(started.elapsed().as_millis()).ok();
        match outcome {
            Ok(ToolOutput { structured, summary, meta, events_appended, journey_id, if_current }) => {
                exit.phase = if structured.is_clarification() { "clarification" } else { "completed" };
                exit.events_appended = i64::try_from(events_appended).unwrap_or(0);
                exit.journey_id = journey_id;
                let result = serde_json::to_value(&structured)
                    .map_err(|e| McpError::internal_error(format!("result shape: {e}"), None))
                    .and_then(|structured| call_result(structured, summary, false, meta));
                (exit, result, if_current)
            }
            Err(tools::Failure { error, locale, journey_id, fresh }) => {
                exit.phase = if error.outcome() == "rejected" { "rejected" } else { "error" };
                exit.code = Some(error.code());
                exit.journey_id = journey_id;
                let finding = error.finding(&locale);
                (exit, call_result(error_result(&self.app, &error, &locale, fresh.as_deref()), &finding, true, None), None)
            }
        }
    }
}

impl ServerHandler for CoachServer {
    fn get_info(&self) -> ServerConfig {
        // rmcp asks for this on every request, not only at `initialize`: built once.
        static INFO: std::sync::OnceLock<ServerConfig> = std::sync::OnceLock::new();
        INFO.get_or_init(|| {
            serde_json::from_value(json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": false}, "resources": {}},
                "serverInfo": {"name": "skillpilot", "title": "SkillPilot", "version": env!("CARGO_PKG_VERSION")},
                "instructions": SKILL_MD,
            }))
            .unwrap_or_default()
        })
        .clone()
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        from_json(json!({ "tools": tool_list_of(&self.app.registry) }))
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>().cloned())
            .ok_or_else(|| McpError::invalid_request("unauthenticated", None))?;
        let call_id = uuid::Uuid::now_v7().to_string();
        let name = request.name.to_string();
        let args = request.arguments.map(Value::Object).unwrap_or_else(|| json!({}));
        // One span per call: every line logged inside it carries the call, the tool, and (once
        // known) the journey and the outcome code.
        let span = tracing::info_span!(
            "tool_call",
            call_id = %call_id,
            tool = %name,
            journey_id = tracing::field::Empty,
            outcome = tracing::field::Empty
        );
        let handler = std::panic::AssertUnwindSafe(self.clone().handle(principal, call_id.clone(), name.clone(), args)).catch_unwind();
        let handler = RunsToEnd(Some(Box::pin(handler.instrument(span.clone()))));
        let outcome = tokio::time::timeout(self.app.settings.mcp.handler_timeout, handler).instrument(span.clone()).await;
        let locale = self.app.settings.default_locale.clone();
        let dispatcher_error = |tool: &str, code: &'static str| {
            let mut row = self.row(&call_id, "error", "dispatcher", tool);
            row.code = Some(code);
            row
        };
        // Instrumented, never `span.enter()`: an entered guard held across the audit's await
        // leaves the span current on a worker thread after it closed, and the next
        // `Span::current()` there (sqlx's connection worker) panics in tracing's registry.
        let exit = async {
            match outcome {
                Ok(Ok(Some(result))) => result.map(CallToolResponse::from),
                Ok(Ok(None)) => {
                    // The client's mistake, not a server fault.
                    span.record("outcome", "UNKNOWN_TOOL");
                    tracing::info!("tool call refused: no such tool");
                    self.audit(vec![dispatcher_error("unknown", "VALIDATION_FAILED")]).await;
                    Err(McpError::invalid_params("unknown tool", None))
                }
                Ok(Err(_)) | Err(_) => {
                    // The handler panicked or timed out: its outcome is unknown, so this exit never
                    // claims "not stored"; a late handler's own exit is refused by the audit table.
                    span.record("outcome", "INTERNAL");
                    tracing::error!("tool handler panicked or timed out");
                    self.audit(vec![dispatcher_error(&name, "INTERNAL")]).await;
                    let err = AppError::Internal;
                    call_result(error_result(&self.app, &err, &locale, None), &err.finding(&locale), true, None).map(CallToolResponse::from)
                }
            }
        };
        exit.instrument(span.clone()).await
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        from_json(json!({"resources": [{
            "uri": WIDGET_URI,
            "name": "goal-picture",
            "title": "Goal picture",
            "mimeType": "text/html;profile=mcp-app"
        }]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri != WIDGET_URI {
            return Err(McpError::resource_not_found("no such resource", None));
        }
        let result: ReadResourceResult =
            from_json(json!({"contents": [{"uri": WIDGET_URI, "mimeType": "text/html;profile=mcp-app", "text": WIDGET_HTML}]}))?;
        Ok(result.into())
    }
}

/// Bearer authentication in front of rmcp: no tool runs without a learner token.
async fn require_learner(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::app::identity::bearer_of)
        .map(str::to_owned);
    let Some(token) = token else { return challenge(&app, AppError::Unauthorized) };
    match app.authenticate(&token).await {
        Ok(principal) if principal.role == Role::Learner => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Ok(_) => AppError::Forbidden.into_response(),
        Err(e @ (AppError::Unauthorized | AppError::InsufficientScope)) => challenge(&app, e),
        Err(e) => e.into_response(),
    }
}

/// 401 and 403 of the MCP endpoint as the MCP authorization spec wants them: the
/// `WWW-Authenticate` challenge names the protected-resource metadata and the scope, so a client
/// can discover the authorization server (RFC 9728 §5.1) or step up its scope.
fn challenge(app: &App, error: AppError) -> Response {
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", app.oauth_issuer());
    let scope = crate::app::oauth::LEARN_SCOPE;
    let value = match error {
        AppError::InsufficientScope => format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{metadata}\""),
        _ => format!("Bearer resource_metadata=\"{metadata}\", scope=\"{scope}\""),
    };
    let mut response = error.into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
        response.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, v);
    }
    response
}

/// A tool handler polled in the request's own task — no task of its own, no hop between
/// threads for each call — that still runs to its end when its caller stops waiting (the
/// handler timeout, a client gone): dropped unfinished, it goes on as a task of its own,
/// exactly as a spawned handler would.
struct RunsToEnd<F: std::future::Future + Send + 'static>(Option<std::pin::Pin<Box<F>>>);

impl<F: std::future::Future + Send + 'static> std::future::Future for RunsToEnd<F> {
    type Output = F::Output;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let Some(handler) = self.0.as_mut() else { return std::task::Poll::Pending };
        let output = std::task::ready!(handler.as_mut().poll(cx));
        self.0 = None;
        std::task::Poll::Ready(output)
    }
}

impl<F: std::future::Future + Send + 'static> Drop for RunsToEnd<F> {
    fn drop(&mut self) {
        if let (Some(handler), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                handler.await;
            });
        }
    }
}

/// The `/mcp` router.
pub fn router(app: Arc<App>, settings: &McpSettings, max_body_bytes: usize) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(max_body_bytes);
    if !settings.allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(settings.allowed_hosts.clone());
    }
    let origins = gate::Origins(allowed_origins(settings, &app.settings.public_url));
    config = config.with_allowed_origins(origins.0.clone()).enforce_origin_validation();
    let server = CoachServer { app: app.clone() };
    let service = StreamableHttpService::new(move || Ok(server.clone()), Arc::new(LocalSessionManager::default()), config);
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(gate::json_rpc))
        .layer(axum::middleware::from_fn_with_state(app, require_learner))
        .layer(axum::middleware::from_fn_with_state(origins, gate::cors))
}

/// The configured origins, plus — when the service's own public URL is on loopback (a
/// development set-up) — that URL's own origin, so a page it serves may call it.
fn allowed_origins(settings: &McpSettings, public_url: &str) -> Vec<String> {
    let mut origins = settings.allowed_origins.clone();
    if let Ok(url) = url::Url::parse(public_url) {
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if let (true, Some(host), Some(port)) = (loopback, url.host_str(), url.port_or_known_default()) {
            origins.push(format!("{}://{host}:{port}", url.scheme()));
        }
    }
    origins
}

#[cfg(test)]
mod tests {
    use super::{RunsToEnd, SKILL_MD};

    #[tokio::test]
    async fn a_handler_its_caller_stops_waiting_for_still_runs_to_its_end() {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<&str>();
        let handler = RunsToEnd(Some(Box::pin(async move {
            let _ = wait.await;
            let _ = done.send("finished");
        })));
        // The caller's timeout drops it half-way.
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), handler).await.is_err());
        go.send(()).unwrap();
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), finished).await;
        assert_eq!(outcome.unwrap().unwrap(), "finished");
    }

    #[tokio::test]
    async fn a_handler_polled_to_its_end_answers_its_caller() {
        let handler = RunsToEnd(Some(Box::pin(async { 42 })));
        assert_eq!(handler.await, 42);
    }

    /// Shorter texts must never weaken privacy, grading or state rules (docs/SKILL.md).
    #[test]
    fn skill_md_keeps_the_privacy_grading_and_state_rules() {
        let rules = [
            "exactly one fresh context",
            "at most one unambiguous change",
            "Do not reload after it",
            "reload once and re-evaluate",
            "`communicationLocale` of the latest full result",
            "wait for the answer",
            "judge each answer by its meaning",
            "only with the matching receipt",
            "retry exactly",
            "no technical workaround, no promised later save",
            "start instruction only",
            "Never explain, reconstruct or ask for the `learningSessionId`",
            "never ask the learner for technical values",
            "Chat texts, feedback and rationales are never sent",
            "copy the option payload unchanged",
            "called exactly once, at once",
            "A pause triggers neither the next content nor its picture",
        ];
        // Line breaks are layout, not content.
        let text = SKILL_MD.split_whitespace().collect::<Vec<_>>().join(" ");
        for rule in rules {
            assert!(text.contains(rule), "SKILL.md lost the rule: {rule}");
        }
    }
}
