//! The small web GUI (docs/operations.md): sign in, start a learning session (the page every session error
//! points to), see progress as a goal graph, and — for operators — the registry, quota and audit
//! at a glance. Server-rendered with minijinja; every form carries a CSRF token (double submit:
//! a `SameSite=Strict` cookie and a hidden field); the sign-in cookie is sealed, `HttpOnly`,
//! `SameSite=Lax`, and `Secure` when the public URL is https. Pages call the same application
//! services as the JSON API.

mod graph;
mod oauth;
mod text;

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use minijinja::{context, Environment};
use serde::{Deserialize, Serialize};

use crate::app::identity::{Principal, Role};
use crate::app::sessions::StartSession;
use crate::app::tokens::NoTokens;
use crate::app::App;
use crate::error::AppError;
use projections::text::Lang;
use text::{texts, Texts};

const SESSION_COOKIE: &str = "sp_web";
const CSRF_COOKIE: &str = "sp_csrf";

/// Every page's security headers: no framing, no sniffing, no referrer to other origins (codes
/// and states travel in URLs during OAuth; `no-referrer` would make Chrome send `Origin: null`
/// on our own form posts), and a CSP that allows only this origin's scripts and styles (the
/// inline style attributes of the progress graph included). No `form-action`: Chrome applies
/// it to the redirect after the consent form, which goes to the client.
const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, header::HeaderValue::from_static(CSP));
    headers.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, header::HeaderValue::from_static("same-origin"));
    response
}

/// The start page's one script (sets the browser's time zone), served from this origin so the
/// CSP needs no `unsafe-inline` for scripts.
async fn start_script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=3600")],
        include_str!("templates/start.js"),
    )
        .into_response()
}

fn templates() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, source) in [
        ("base.html", include_str!("templates/base.html")),
        ("sign_in.html", include_str!("templates/sign_in.html")),
        ("start.html", include_str!("templates/start.html")),
        ("started.html", include_str!("templates/started.html")),
        ("progress.html", include_str!("templates/progress.html")),
        ("operator.html", include_str!("templates/operator.html")),
        ("message.html", include_str!("templates/message.html")),
        ("authorize.html", include_str!("templates/authorize.html")),
    ] {
        if let Err(e) = env.add_template(name, source) {
            tracing::error!(template = name, error = %e, "web template does not compile");
        }
    }
    env
}

/// The web routes.
pub(crate) fn router(app: Arc<App>) -> Router {
    let state = Arc::new(Web { app, env: templates() });
    Router::new()
        .route("/start", get(start_page).post(start_submit))
        .route("/sign-in", post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/progress", get(progress))
        .route("/operator", get(operator))
        .route("/operator/audit", post(operator_audit))
        .route("/operator/revoke", post(operator_revoke))
        .route("/oauth/authorize", get(oauth::authorize).post(oauth::decide))
        .route("/static/start.js", get(start_script))
        .with_state(state)
        .layer(axum::middleware::from_fn(security_headers))
}

struct Web {
    app: Arc<App>,
    env: Environment<'static>,
}

/// What the sealed sign-in cookie holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct WebClaims {
    /// The server-side web session (sign-out and revocation end it).
    wsid: String,
    role: String,
    lid: Option<String>,
    exp: i64,
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The page language a page or form asks for (`?lang=` or a form field).
#[derive(Debug, Default, Deserialize)]
struct LangQuery {
    #[serde(default)]
    lang: Option<String>,
}

/// A form that only proves where it came from: sign-out, the operator's audit run.
#[derive(Debug, Default, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    lang: Option<String>,
}

/// The sign-in form.
#[derive(Debug, Default, Deserialize)]
struct SignInForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    lang: Option<String>,
}

/// The form that starts a learning session.
#[derive(Debug, Default, Deserialize)]
struct StartForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    curriculum: Option<String>,
    #[serde(default)]
    locale: Option<String>,
    #[serde(default)]
    time_zone: Option<String>,
}

/// `?lang=` when it names a language, else the browser's first `Accept-Language`.
fn lang_of(asked: Option<&str>, headers: &HeaderMap) -> &'static str {
    match asked {
        Some("en") => "en",
        Some("de") => "de",
        _ => {
            let accept = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or("");
            Lang::of(accept.trim_start()).tag()
        }
    }
}

impl Web {
    fn secure(&self) -> &'static str {
        if self.app.settings.public_url.starts_with("https://") {
            "; Secure"
        } else {
            ""
        }
    }

    /// The signed-in principal and its web session id: the sealed cookie must open, be
    /// unexpired, and name a web session the server still holds open (sign-out, a revoked
    /// learner or expiry end it; a copied cookie then opens nothing).
    async fn session(&self, headers: &HeaderMap) -> Option<(Principal, String)> {
        let sealed = cookie(headers, &self.cookie_name(SESSION_COOKIE))?;
        let claims: WebClaims = self.app.keys.open_web(&sealed)?;
        let now = self.app.clock.now();
        if claims.exp < now.timestamp() {
            return None;
        }
        let role = match claims.role.as_str() {
            "learner" => Role::Learner,
            "operator" => Role::Operator,
            "analyst" => Role::Analyst,
            _ => return None,
        };
        if !self.app.web_session_open(&claims.wsid).await.ok()? {
            return None;
        }
        Some((Principal { role, learner_id: claims.lid }, claims.wsid))
    }

    async fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        self.session(headers).await.map(|(p, _)| p)
    }

    /// A cookie's name: `__Host-` prefixed when the service is on https (the browser then
    /// insists on `Secure`, `Path=/` and no `Domain`, so no sibling host can plant it).
    fn cookie_name(&self, base: &str) -> String {
        if self.app.settings.public_url.starts_with("https://") {
            format!("__Host-{base}")
        } else {
            base.to_owned()
        }
    }

    /// What a CSRF token is bound to: this browser's random CSRF cookie and, once signed in,
    /// its server-side web session.
    fn csrf_binding(&self, browser: &str, headers: &HeaderMap) -> String {
        let wsid = cookie(headers, &self.cookie_name(SESSION_COOKIE))
            .and_then(|sealed| self.app.keys.open_web::<WebClaims>(&sealed))
            .map(|c| c.wsid)
            .unwrap_or_default();
        format!("{browser}|{wsid}")
    }

    /// The CSRF token for this browser's forms, and the cookie to set when it has none yet. The
    /// token is a MAC over the binding, so a planted cookie/field pair is worthless.
    fn csrf(&self, headers: &HeaderMap) -> (String, Option<String>) {
        let name = self.cookie_name(CSRF_COOKIE);
        let (browser, set) = match cookie(headers, &name).filter(|c| c.len() >= 32) {
            Some(existing) => (existing, None),
            None => {
                // Two random UUIDs: 244 bits from the OS generator, never a predictable fallback.
                let id = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
                let set = format!("{name}={id}; Path=/; HttpOnly; SameSite=Strict{}", self.secure());
                (id, Some(set))
            }
        };
        (self.app.keys.mac("csrf", &self.csrf_binding(&browser, headers)), set)
    }

    /// A form post is accepted when it comes from this origin (its `Origin` and
    /// `Sec-Fetch-Site`, where the browser sends them) and carries the token bound to this
    /// browser and its sign-in.
    fn csrf_ok(&self, headers: &HeaderMap, token: &str) -> bool {
        let own = self.app.settings.public_url.trim_end_matches('/');
        let origin_ok = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()).is_none_or(|o| o.eq_ignore_ascii_case(own));
        let site_ok = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).is_none_or(|s| s == "same-origin" || s == "none");
        let Some(browser) = cookie(headers, &self.cookie_name(CSRF_COOKIE)).filter(|c| c.len() >= 32) else { return false };
        let expected = self.app.keys.mac("csrf", &self.csrf_binding(&browser, headers));
        let token_ok = blake3::hash(token.as_bytes()) == blake3::hash(expected.as_bytes());
        origin_ok && site_ok && token_ok
    }

    fn render(&self, name: &str, ctx: minijinja::Value, set_cookie: Option<String>, status: StatusCode) -> Response {
        let body = match self.env.get_template(name).and_then(|t| t.render(ctx)) {
            Ok(html) => html,
            Err(e) => {
                tracing::error!(template = name, error = %e, "web template failed");
                return (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response();
            }
        };
        let mut response = (status, Html(body)).into_response();
        if let Some(c) = set_cookie.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
            response.headers_mut().append(header::SET_COOKIE, c);
        }
        response
    }

    fn message(&self, t: &Texts, lang: &str, status: StatusCode, title: &str, message: &str) -> Response {
        self.render("message.html", context! { lang, t, title, message, signed_in => false, csrf => "" }, None, status)
    }

    fn sign_in_page(&self, headers: &HeaderMap, lang: &'static str, next: &str, error: Option<&str>) -> Response {
        let t = texts(lang);
        let (csrf, set) = self.csrf(headers);
        let status = if error.is_some() { StatusCode::UNAUTHORIZED } else { StatusCode::OK };
        self.render("sign_in.html", context! { lang, t, title => t.sign_in_title, csrf, next, error, signed_in => false }, set, status)
    }
}

async fn start_page(State(web): State<Arc<Web>>, Query(query): Query<LangQuery>, headers: HeaderMap) -> Response {
    let lang = lang_of(query.lang.as_deref(), &headers);
    let t = texts(lang);
    match web.principal(&headers).await {
        Some(p) if p.role == Role::Learner => {
            let (csrf, set) = web.csrf(&headers);
            let curricula: Vec<_> = web
                .app
                .catalog
                .all_latest()
                .iter()
                .map(|p| context! { id => p.id.clone(), title => p.text(&p.title, lang).to_owned() })
                .collect();
            web.render(
                "start.html",
                context! { lang, t, title => t.start_title, csrf, curricula, signed_in => true, error => None::<String> },
                set,
                StatusCode::OK,
            )
        }
        _ => web.sign_in_page(&headers, lang, "/start", None),
    }
}

async fn sign_in(State(web): State<Arc<Web>>, headers: HeaderMap, Form(form): Form<SignInForm>) -> Response {
    let lang = lang_of(form.lang.as_deref(), &headers);
    let t = texts(lang);
    if !web.csrf_ok(&headers, &form.csrf) {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.csrf_failed);
    }
    // Only our own pages, never an address a form could smuggle in.
    let next = match form.next.as_deref() {
        Some("/progress") => "/progress".to_owned(),
        Some("/operator") => "/operator".to_owned(),
        Some(back) if back.starts_with("/oauth/authorize?") && !back.chars().any(char::is_control) => back.to_owned(),
        _ => "/start".to_owned(),
    };
    let next = next.as_str();
    let token = form.token.trim();
    let principal = match web.app.authenticate(token).await {
        Ok(p) => p,
        Err(_) => return web.sign_in_page(&headers, lang, next, Some(t.sign_in_failed)),
    };
    let Ok((wsid, expires)) = web.app.open_web_session(&principal).await else {
        return web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable);
    };
    let claims = WebClaims { wsid, role: principal.role.as_str().to_owned(), lid: principal.learner_id, exp: expires.timestamp() };
    let sealed = web.app.keys.seal_web(&claims);
    let target = if next.contains('?') { next.to_owned() } else { format!("{next}?lang={lang}") };
    let mut response = Redirect::to(&target).into_response();
    if let Ok(v) = header::HeaderValue::from_str(&format!(
        "{}={sealed}; Path=/; HttpOnly; SameSite=Lax; Max-Age=43200{}",
        web.cookie_name(SESSION_COOKIE),
        web.secure()
    )) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

async fn sign_out(State(web): State<Arc<Web>>, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    let lang = lang_of(form.lang.as_deref(), &headers);
    let t = texts(lang);
    if !web.csrf_ok(&headers, &form.csrf) {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.csrf_failed);
    }
    // Ended on the server: the cookie, wherever a copy of it lives, opens nothing any more.
    if let Some((_, wsid)) = web.session(&headers).await {
        if web.app.end_web_session(&wsid).await.is_err() {
            return web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable);
        }
    }
    let mut response = Redirect::to("/start").into_response();
    if let Ok(v) = header::HeaderValue::from_str(&format!(
        "{}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
        web.cookie_name(SESSION_COOKIE),
        web.secure()
    )) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

async fn start_submit(State(web): State<Arc<Web>>, headers: HeaderMap, Form(form): Form<StartForm>) -> Response {
    let lang = match form.locale.as_deref() {
        Some("en") => "en",
        _ => "de",
    };
    let t = texts(lang);
    if !web.csrf_ok(&headers, &form.csrf) {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.csrf_failed);
    }
    let Some(principal) = web.principal(&headers).await.filter(|p| p.role == Role::Learner) else {
        return web.sign_in_page(&headers, lang, "/start", None);
    };
    let request = StartSession {
        curriculum_id: form.curriculum,
        locale: Some(lang.to_owned()),
        time_zone: form.time_zone.filter(|z| z.parse::<chrono_tz::Tz>().is_ok()).or_else(|| Some("UTC".into())),
    };
    match web.app.start_session(&principal, request).await {
        Ok(started) => {
            let lang = Lang::of(&started.locale).tag();
            let t = texts(lang);
            let (csrf, set) = web.csrf(&headers);
            web.render("started.html", context! { lang, t, title => t.started_title, csrf, signed_in => true }, set, StatusCode::CREATED)
        }
        Err(AppError::StoreUnavailable) => web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable),
        Err(_) => web.message(&t, lang, StatusCode::BAD_REQUEST, t.error_title, t.start_failed),
    }
}

async fn progress(State(web): State<Arc<Web>>, Query(query): Query<LangQuery>, headers: HeaderMap) -> Response {
    let lang = lang_of(query.lang.as_deref(), &headers);
    let t = texts(lang);
    let Some(principal) = web.principal(&headers).await else {
        return web.sign_in_page(&headers, lang, "/progress", None);
    };
    let Some(learner_id) = principal.learner_id.clone().filter(|_| principal.role == Role::Learner) else {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.learners_only);
    };
    // Only the signed-in learner's own journey: the id comes from the sealed cookie, never from the request.
    let session = match web.app.latest_session(&learner_id).await {
        Ok(Some(row)) => row,
        Ok(None) => return web.message(&t, lang, StatusCode::NOT_FOUND, t.progress_title, t.no_journey),
        Err(_) => return web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable),
    };
    let loaded = match web.app.load_journey(&session.journey_id).await {
        Ok(l) => l,
        Err(_) => return web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable),
    };
    let Ok(pack) = web.app.pack_of(&loaded.state) else {
        return web.message(&t, lang, StatusCode::INTERNAL_SERVER_ERROR, t.error_title, t.start_failed);
    };
    let state = &loaded.state;
    let lang = Lang::of(&state.locale).tag();
    let t = texts(lang);
    let tz = session.time_zone.parse::<chrono_tz::Tz>().unwrap_or(chrono_tz::UTC);
    let ctx = web.app.context_of(state, &pack, tz, &NoTokens);
    let active = state.active_goal.as_deref().and_then(|g| pack.goal(g)).map(|g| pack.text(&g.title, lang).to_owned());
    let svg = graph::goal_graph(&pack, state, lang, &t);
    let (csrf, set) = web.csrf(&headers);
    web.render(
        "progress.html",
        context! {
            lang, t, title => t.progress_title, csrf, signed_in => true,
            curriculum => pack.text(&pack.title, lang).to_owned(),
            status_line => ctx.plan_status.status_line,
            mastered => ctx.progress.mastered, total => ctx.progress.total,
            focus => ctx.progress.focus,
            active, graph => svg,
        },
        set,
        StatusCode::OK,
    )
}

/// The operator page's query: its language and the outcome of a revoke it was sent back from.
#[derive(Debug, Default, Deserialize)]
struct OperatorQuery {
    #[serde(default)]
    lang: Option<String>,
    #[serde(default)]
    revoked: Option<String>,
    #[serde(default)]
    unknown: Option<String>,
}

async fn operator(State(web): State<Arc<Web>>, Query(query): Query<OperatorQuery>, headers: HeaderMap) -> Response {
    let lang = lang_of(query.lang.as_deref(), &headers);
    let t = texts(lang);
    let Some(principal) = web.principal(&headers).await else {
        return web.sign_in_page(&headers, lang, "/operator", None);
    };
    if principal.role != Role::Operator {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.operators_only);
    }
    let (report, audit, actions) =
        match (web.app.registry_report().await, web.app.last_audit_run().await, web.app.operator_actions(20).await) {
            (Ok(r), Ok(a), Ok(actions)) => (r, a, actions),
            _ => return web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable),
        };
    let actions: Vec<_> = actions
        .iter()
        .map(|a| {
            let at = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(a.at_ms).map(|d| d.format("%Y-%m-%d %H:%M UTC").to_string());
            context! { at, actor => a.actor, action => a.action, target => a.target }
        })
        .collect();
    let notice = query.revoked.map(|_| t.revoke_done).or_else(|| query.unknown.map(|_| t.revoke_unknown));
    let report = serde_json::to_value(&report).unwrap_or_default();
    let audit_time = audit
        .as_ref()
        .and_then(|a| chrono::DateTime::<chrono::Utc>::from_timestamp_millis(a.finished_ms))
        .map(|d| d.format("%Y-%m-%d %H:%M UTC").to_string());
    let (csrf, set) = web.csrf(&headers);
    web.render(
        "operator.html",
        context! {
            lang, t, title => t.operator_title, csrf, signed_in => true,
            tools => minijinja::Value::from_serialize(&report["registry"]["tools"]),
            quota => minijinja::Value::from_serialize(&report["quota"]["rows"]),
            turns => minijinja::Value::from_serialize(&report["quota"]["turns"]),
            suspected => minijinja::Value::from_serialize(&report["quota"]["suspected"]),
            audit => minijinja::Value::from_serialize(&audit),
            audit_time, actions, notice,
        },
        set,
        StatusCode::OK,
    )
}

async fn operator_audit(State(web): State<Arc<Web>>, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    let lang = lang_of(form.lang.as_deref(), &headers);
    let t = texts(lang);
    if !web.csrf_ok(&headers, &form.csrf) {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.csrf_failed);
    }
    match web.principal(&headers).await {
        Some(p) if p.role == Role::Operator => {
            if web.app.audit_verify_recorded(usize::MAX, |_| {}).await.is_err() {
                return web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable);
            }
            Redirect::to("/operator").into_response()
        }
        _ => web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.operators_only),
    }
}

/// The revoke form of the operator page: a learner, a token (by id) or an OAuth client.
#[derive(Debug, Deserialize)]
struct RevokeForm {
    csrf: String,
    kind: String,
    id: String,
    #[serde(default)]
    lang: Option<String>,
}

async fn operator_revoke(State(web): State<Arc<Web>>, headers: HeaderMap, Form(form): Form<RevokeForm>) -> Response {
    let lang = if form.lang.as_deref() == Some("en") { "en" } else { "de" };
    let t = texts(lang);
    if !web.csrf_ok(&headers, &form.csrf) {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.csrf_failed);
    }
    let Some((principal, wsid)) = web.session(&headers).await else {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.operators_only);
    };
    if principal.role != Role::Operator {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.operators_only);
    }
    let actor = format!("operator:web:{}", wsid.chars().take(8).collect::<String>());
    let result = match form.kind.as_str() {
        "learner" => web.app.revoke_learner(&actor, &form.id).await,
        "token" => web.app.revoke_token(&actor, &form.id).await,
        "oauth_client" => web.app.revoke_oauth_client(&actor, &form.id).await,
        _ => Err(crate::error::AppError::ValidationFailed { field: "kind".into() }),
    };
    match result {
        Ok(()) => Redirect::to(&format!("/operator?lang={lang}&revoked=1")).into_response(),
        Err(crate::error::AppError::NotFound { .. } | crate::error::AppError::ValidationFailed { .. }) => {
            Redirect::to(&format!("/operator?lang={lang}&unknown=1")).into_response()
        }
        Err(_) => web.message(&t, lang, StatusCode::SERVICE_UNAVAILABLE, t.error_title, t.store_unavailable),
    }
}
