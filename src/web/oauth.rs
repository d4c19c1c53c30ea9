//! The authorization endpoint of the built-in authorization server: sign-in (the same learner
//! sign-in as `/start`) and consent on a web page. A request whose client or redirect URI cannot
//! be trusted gets an error page, never a redirect; everything else is answered by redirecting
//! to the client's exact registered redirect URI. The validated request is sealed into the
//! consent form, so the decision cannot be pointed at another client, URI or challenge.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use minijinja::context;

use super::text::texts;
use super::{lang_of, Web};
use crate::app::identity::Role;
use crate::app::oauth::{AuthorizationRequest, AuthorizeError, OAuthError};

fn redirect_with(redirect_uri: &str, params: &[(&str, &str)], state: Option<&str>) -> Response {
    let Ok(mut url) = reqwest::Url::parse(redirect_uri) else {
        return (StatusCode::BAD_REQUEST, "invalid redirect_uri").into_response();
    };
    {
        let mut query = url.query_pairs_mut();
        for (k, v) in params {
            query.append_pair(k, v);
        }
        if let Some(state) = state {
            query.append_pair("state", state);
        }
    }
    Redirect::to(url.as_str()).into_response()
}

fn error_redirect(redirect_uri: &str, error: &OAuthError, state: Option<&str>) -> Response {
    redirect_with(redirect_uri, &[("error", error.code), ("error_description", error.description)], state)
}

/// `GET /oauth/authorize`.
pub(super) async fn authorize(State(web): State<Arc<Web>>, Query(query): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    let lang = lang_of(query.get("lang").map(String::as_str), &headers);
    let t = texts(lang);
    if !web.app.builtin_authorization_server() {
        return web.message(&t, lang, StatusCode::NOT_FOUND, t.error_title, t.oauth_failed);
    }
    let request = match web.app.check_authorization(&query).await {
        Ok(r) => r,
        Err(AuthorizeError::Page(why)) => {
            return web.message(&t, lang, StatusCode::BAD_REQUEST, t.error_title, &format!("{} {why}", t.oauth_failed));
        }
        Err(AuthorizeError::Redirect { redirect_uri, state, error }) => return error_redirect(&redirect_uri, &error, state.as_deref()),
    };
    match web.principal(&headers).await {
        Some(p) if p.role == Role::Learner => {
            let (csrf, set) = web.csrf(&headers);
            let sealed = web.app.keys.seal_authorization(&request);
            // The self-chosen name proves nothing: the page also names where the learner will
            // be sent, and warns when that is not an https site on the internet.
            let (redirect_host, redirect_warning) = redirect_shown(&request.redirect_uri);
            // (Framing is refused for every page by the security headers.)
            web.render(
                "authorize.html",
                context! {
                    lang, t, title => t.consent_title, csrf, request => sealed, client_name => request.client_name,
                    redirect_host, redirect_warning, signed_in => true
                },
                set,
                StatusCode::OK,
            )
        }
        // Not signed in (or as staff): sign in as a learner, then come back to this request.
        _ => {
            let back = reqwest::Url::parse_with_params("http://back/oauth/authorize", &query)
                .map(|u| format!("/oauth/authorize?{}", u.query().unwrap_or_default()))
                .unwrap_or_else(|_| "/start".to_owned());
            web.sign_in_page(&headers, lang, &back, None)
        }
    }
}

/// The consent form: the sealed request it answers and the learner's decision.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct DecisionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    request: Option<String>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    lang: Option<String>,
}

/// `POST /oauth/authorize`: the learner's decision.
pub(super) async fn decide(State(web): State<Arc<Web>>, headers: HeaderMap, Form(form): Form<DecisionForm>) -> Response {
    let lang = lang_of(form.lang.as_deref(), &headers);
    let t = texts(lang);
    if !web.app.builtin_authorization_server() {
        return web.message(&t, lang, StatusCode::NOT_FOUND, t.error_title, t.oauth_failed);
    }
    if !web.csrf_ok(&headers, &form.csrf) {
        return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.csrf_failed);
    }
    let learner_id = match web.principal(&headers).await {
        Some(p) if p.role == Role::Learner => p.learner_id.unwrap_or_default(),
        _ => return web.message(&t, lang, StatusCode::FORBIDDEN, t.forbidden_title, t.learners_only),
    };
    let request: Option<AuthorizationRequest> = form.request.as_deref().and_then(|r| web.app.keys.open_authorization(r));
    let Some(request) = request.filter(|r| r.exp > web.app.clock.now().timestamp()) else {
        return web.message(&t, lang, StatusCode::BAD_REQUEST, t.error_title, t.oauth_failed);
    };
    if form.decision.as_deref() != Some("allow") {
        let denied = OAuthError { code: "access_denied", description: "the learner denied access" };
        return error_redirect(&request.redirect_uri, &denied, request.state.as_deref());
    }
    match web.app.issue_code(&request, &learner_id).await {
        Ok(code) => redirect_with(&request.redirect_uri, &[("code", &code)], request.state.as_deref()),
        Err(e) => error_redirect(&request.redirect_uri, &e, request.state.as_deref()),
    }
}

/// The host (with a non-default port) a redirect URI sends the browser to, and whether to warn:
/// plain http, or a loopback host (a program on this very computer).
fn redirect_shown(uri: &str) -> (String, bool) {
    let Ok(url) = reqwest::Url::parse(uri) else { return (uri.to_owned(), true) };
    let host = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => uri.to_owned(),
    };
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    (host, url.scheme() != "https" || loopback)
}
