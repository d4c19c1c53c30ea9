//! OAuth 2.1 for the MCP endpoint: discovery exactly as the MCP authorization spec says, the
//! official Python SDK's OAuth client provider through the built-in authorization server (the
//! proof), and the refusals — code reuse, wrong PKCE verifier, redirect-URI mismatch, expired,
//! tampered, foreign-audience and under-scoped tokens, refresh-token reuse after rotation —
//! each with its status and nothing changed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use skillpilot::app::oauth::{AccessClaims, LEARN_SCOPE};
use skillpilot::app::sessions::StartSession;

use crate::both_stores;
use crate::helpers::TestApp;
use crate::mcp_contract::rpc;

const REDIRECT: &str = "http://127.0.0.1:9/callback";

fn python() -> PathBuf {
    std::env::var("SKILLPILOT_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python"))
}

fn pkce() -> (String, String) {
    let verifier = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// Registers a client over HTTP; returns its id.
async fn register(t: &TestApp) -> String {
    let r = t
        .http
        .post(format!("{}/oauth/register", t.base_url))
        .json(&json!({"client_name": "Test coach", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["token_endpoint_auth_method"], "none");
    body["client_id"].as_str().unwrap().to_owned()
}

/// A learner with a started session who consents: the application service the consent page
/// posts to issues the code (the page itself is driven by the SDK proof).
async fn consented_code(t: &TestApp, client_id: &str, challenge: &str) -> (String, String) {
    let token = t.learner("Ada").await;
    let principal = t.principal(&token).await;
    t.app.start_session(&principal, StartSession::default()).await.unwrap();
    let params: HashMap<String, String> = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("state", "s1"),
        ("resource", &format!("{}/mcp", t.base_url)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let request = t.app.check_authorization(&params).await.unwrap();
    let code = t.app.issue_code(&request, principal.learner_id.as_deref().unwrap()).await.unwrap();
    (code, token)
}

async fn token_request(t: &TestApp, form: &[(&str, &str)]) -> (u16, Value) {
    let r = t.http.post(format!("{}/oauth/token", t.base_url)).form(form).send().await.unwrap();
    let status = r.status().as_u16();
    assert_eq!(r.headers().get("cache-control").map(|v| v.to_str().unwrap()), Some("no-store"));
    (status, r.json().await.unwrap())
}

async fn exchange(t: &TestApp, client_id: &str, code: &str, verifier: &str) -> (u16, Value) {
    token_request(
        t,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier),
        ],
    )
    .await
}

pub(crate) async fn refresh(t: &TestApp, client_id: &str, refresh_token: &str) -> (u16, Value) {
    token_request(t, &[("grant_type", "refresh_token"), ("refresh_token", refresh_token), ("client_id", client_id)]).await
}

/// A registered client with a granted authorization: (client id, access token, refresh token).
pub(crate) async fn granted(t: &TestApp) -> (String, String, String) {
    let client_id = register(t).await;
    let (verifier, challenge) = pkce();
    let (code, _) = consented_code(t, &client_id, &challenge).await;
    let (status, body) = exchange(t, &client_id, &code, &verifier).await;
    assert_eq!(status, 200, "{body}");
    (client_id, body["access_token"].as_str().unwrap().to_owned(), body["refresh_token"].as_str().unwrap().to_owned())
}

/// `tools/list` with a bearer: its status and `WWW-Authenticate`.
async fn mcp_status(t: &TestApp, bearer: Option<&str>) -> (u16, String) {
    let r = rpc(t, bearer, "tools/list", json!({})).await;
    let challenge = r.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (r.status().as_u16(), challenge)
}

async fn discovery_answers_as_the_mcp_authorization_spec_says(t: Arc<TestApp>) {
    let (status, challenge) = mcp_status(&t, None).await;
    assert_eq!(status, 401);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", t.base_url);
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"{LEARN_SCOPE}\""));
    for url in [metadata_url, format!("{}/.well-known/oauth-protected-resource", t.base_url)] {
        let prm: Value = t.http.get(url).send().await.unwrap().json().await.unwrap();
        assert_eq!(prm["resource"], format!("{}/mcp", t.base_url));
        assert_eq!(prm["authorization_servers"], json!([t.base_url]));
        assert_eq!(prm["scopes_supported"], json!([LEARN_SCOPE]));
    }
    let asm: Value =
        t.http.get(format!("{}/.well-known/oauth-authorization-server", t.base_url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(asm["issuer"], t.base_url.as_str());
    assert_eq!(asm["authorization_endpoint"], format!("{}/oauth/authorize", t.base_url));
    assert_eq!(asm["token_endpoint"], format!("{}/oauth/token", t.base_url));
    assert_eq!(asm["registration_endpoint"], format!("{}/oauth/register", t.base_url));
    assert_eq!(asm["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(asm["token_endpoint_auth_methods_supported"], json!(["none"]));
    // Registration refuses what it cannot honour.
    for bad in [
        json!({"redirect_uris": []}),
        json!({"redirect_uris": ["http://evil.example/cb"]}),
        json!({"redirect_uris": ["https://ok.example/cb#frag"]}),
        json!({"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]}),
    ] {
        let r = t.http.post(format!("{}/oauth/register", t.base_url)).json(&bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        let body: Value = r.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().starts_with("invalid_"), "{body}");
    }
}

async fn the_official_sdk_connects_through_the_built_in_authorization_server(t: Arc<TestApp>) {
    let key = t.learner("Ada").await;
    let principal = t.principal(&key).await;
    t.app.start_session(&principal, StartSession { time_zone: Some("Europe/Berlin".into()), ..Default::default() }).await.unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/oauth.py");
    let python = python();
    assert!(python.exists(), "the Python MCP SDK is needed: run scripts/test, which installs it into target/pyenv");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args(["--url", &format!("{}/mcp", t.base_url), "--sign-in-key", &key])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "the SDK's OAuth flow failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["pages"], json!(["sign-in", "consent"]));
    assert_eq!(seen["registered"], true);
    assert_eq!(seen["scope"], LEARN_SCOPE);
    assert_eq!(seen["calls"].as_array().unwrap().len(), 10, "golden journey a over OAuth: {seen}");
    assert_eq!(seen["refreshed"], true);
    // The journey ran on the signed-in learner's own journey.
    let journey = t.app.gate(&principal).await.unwrap().row.journey_id;
    assert!(t.app.load_journey(&journey).await.unwrap().state.version > 2);
    // The refresh token the SDK spent is refused, and its family with it.
    let (status, body) = refresh(&t, seen["client_id"].as_str().unwrap(), seen["spent_refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));
}

async fn codes_are_single_use_and_bound_to_client_redirect_and_verifier(t: Arc<TestApp>) {
    let client_id = register(&t).await;
    let other_client = register(&t).await;
    let (verifier, challenge) = pkce();
    let (code, _) = consented_code(&t, &client_id, &challenge).await;
    let heads = t.app.store.stream_heads().await.unwrap();

    // Wrong verifier, other client, other redirect URI: refused, and the code survives them.
    let (status, body) = exchange(&t, &client_id, &code, &pkce().0).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));
    let (status, _) = exchange(&t, &other_client, &code, &verifier).await;
    assert_eq!(status, 400);
    let (status, _) = token_request(
        &t,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client_id),
            ("redirect_uri", "http://127.0.0.1:9/other"),
            ("code_verifier", &verifier),
        ],
    )
    .await;
    assert_eq!(status, 400);
    let (status, tokens) = exchange(&t, &client_id, &code, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["token_type"], "Bearer");
    let access = tokens["access_token"].as_str().unwrap();
    assert_eq!(mcp_status(&t, Some(access)).await.0, 200);

    // The same code again: refused, and the tokens it produced are revoked.
    let (status, body) = exchange(&t, &client_id, &code, &verifier).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));
    let (status, _) = refresh(&t, &client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 400, "a replayed code revokes its refresh tokens");
    assert_eq!(t.app.store.stream_heads().await.unwrap(), heads, "no event was written");
}

async fn the_authorization_endpoint_never_redirects_to_an_unregistered_uri(t: Arc<TestApp>) {
    let client_id = register(&t).await;
    let (_, challenge) = pkce();
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let authorize = |redirect: &str, extra: &[(&str, &str)]| {
        let mut q: Vec<(String, String)> = vec![
            ("response_type".into(), "code".into()),
            ("client_id".into(), client_id.clone()),
            ("redirect_uri".into(), redirect.into()),
            ("code_challenge".into(), challenge.clone()),
            ("code_challenge_method".into(), "S256".into()),
            ("state".into(), "xyz".into()),
        ];
        for (k, v) in extra {
            q.retain(|(key, _)| key != k);
            q.push(((*k).into(), (*v).into()));
        }
        no_redirects.get(format!("{}/oauth/authorize", t.base_url)).query(&q).send()
    };
    // A redirect URI that is not registered exactly: an error page, no redirect.
    for uri in ["http://127.0.0.1:9/callback/", "http://127.0.0.1:9/callback?x=1", "https://evil.example/callback"] {
        let r = authorize(uri, &[]).await.unwrap();
        assert_eq!(r.status(), 400, "{uri}");
        assert!(r.headers().get("location").is_none(), "{uri}");
    }
    let r = authorize(REDIRECT, &[("client_id", "nobody")]).await.unwrap();
    assert_eq!(r.status(), 400);
    // With a verified redirect URI, errors go back to the client.
    for (extra, error) in [
        (vec![("code_challenge_method", "plain")], "invalid_request"),
        (vec![("code_challenge", "")], "invalid_request"),
        (vec![("response_type", "token")], "unsupported_response_type"),
        (vec![("resource", "https://other.example/mcp")], "invalid_target"),
        (vec![("scope", "admin")], "invalid_scope"),
    ] {
        let r = authorize(REDIRECT, &extra).await.unwrap();
        assert_eq!(r.status(), 303, "{extra:?}");
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.starts_with(&format!("{REDIRECT}?error={error}")), "{location}");
        assert!(location.ends_with("&state=xyz"), "{location}");
    }
    // A valid request without a signed-in learner shows the sign-in page.
    let r = authorize(REDIRECT, &[]).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("action=\"/sign-in\""));
}

async fn expired_tampered_foreign_and_underscoped_tokens_are_refused(t: Arc<TestApp>) {
    let client_id = register(&t).await;
    let (verifier, challenge) = pkce();
    let (code, _) = consented_code(&t, &client_id, &challenge).await;
    let (_, tokens) = exchange(&t, &client_id, &code, &verifier).await;
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    let audit_before = t.app.store.tool_calls().await.unwrap().len();
    assert_eq!(mcp_status(&t, Some(&access)).await.0, 200);

    // Tampered: one character changed.
    let mut tampered = access.clone().into_bytes();
    let i = tampered.len() - 5;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let (status, challenge_header) = mcp_status(&t, Some(&String::from_utf8(tampered).unwrap())).await;
    assert_eq!(status, 401);
    assert!(challenge_header.contains("resource_metadata="), "{challenge_header}");

    // Sealed by us but for another resource, or without the learn scope.
    let learner = t.app.authenticate(&access).await.unwrap().learner_id.unwrap();
    let claims = |aud: String, scope: &str| AccessClaims {
        iss: t.base_url.clone(),
        sub: learner.clone(),
        aud,
        scope: scope.to_owned(),
        client_id: client_id.clone(),
        exp: t.app.clock.now().timestamp() + 300,
    };
    let foreign = t.app.keys.seal_access(&claims("https://other.example/mcp".into(), LEARN_SCOPE));
    assert_eq!(mcp_status(&t, Some(&foreign)).await.0, 401);
    let underscoped = t.app.keys.seal_access(&claims(format!("{}/mcp", t.base_url), "profile"));
    let (status, challenge_header) = mcp_status(&t, Some(&underscoped)).await;
    assert_eq!(status, 403);
    assert!(challenge_header.starts_with("Bearer error=\"insufficient_scope\""), "{challenge_header}");
    assert!(challenge_header.contains(&format!("scope=\"{LEARN_SCOPE}\"")), "{challenge_header}");

    // Expired: ten minutes and a second later.
    t.clock.advance(chrono::Duration::seconds(601));
    assert_eq!(mcp_status(&t, Some(&access)).await.0, 401);
    // None of the refused calls reached a tool.
    assert_eq!(t.app.store.tool_calls().await.unwrap().len(), audit_before);
    // A development token keeps working beside OAuth.
    let dev = t.learner("Dev").await;
    assert_eq!(mcp_status(&t, Some(&dev)).await.0, 200);
}

async fn a_refresh_token_works_once_and_its_reuse_revokes_the_family(t: Arc<TestApp>) {
    let client_id = register(&t).await;
    let (verifier, challenge) = pkce();
    let (code, _) = consented_code(&t, &client_id, &challenge).await;
    let (_, first) = exchange(&t, &client_id, &code, &verifier).await;
    let spent = first["refresh_token"].as_str().unwrap().to_owned();
    let (status, second) = refresh(&t, &client_id, &spent).await;
    assert_eq!(status, 200, "{second}");
    assert_ne!(second["refresh_token"], first["refresh_token"], "rotated");
    assert_eq!(mcp_status(&t, second["access_token"].as_str()).await.0, 200);
    // Another client cannot use it.
    let other = register(&t).await;
    let (status, _) = refresh(&t, &other, second["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 400);
    // Reuse of the spent one: refused, and the current one is revoked with it.
    let (status, body) = refresh(&t, &client_id, &spent).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));
    let (status, _) = refresh(&t, &client_id, second["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 400, "the family is revoked");
    let (status, body) = token_request(&t, &[("grant_type", "password"), ("username", "a")]).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("unsupported_grant_type")));
}

/// Serves client metadata documents on a loopback port: `/good.json` names itself, `/liar.json`
/// names another client id. Returns the base URL.
async fn serve_client_documents() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let docs = {
        let base = base.clone();
        axum::Router::new()
            .route(
                "/good.json",
                axum::routing::get({
                    let base = base.clone();
                    move || async move {
                        axum::Json(
                            json!({"client_id": format!("{base}/good.json"), "client_name": "Doc coach", "redirect_uris": [REDIRECT]}),
                        )
                    }
                }),
            )
            .route(
                "/liar.json",
                axum::routing::get(move || async move {
                    axum::Json(json!({"client_id": "https://someone.else/client.json", "redirect_uris": [REDIRECT]}))
                }),
            )
    };
    tokio::spawn(async move { axum::serve(listener, docs).await.ok() });
    base
}

async fn a_client_metadata_document_identifies_a_client_without_registration(t: Arc<TestApp>) {
    let asm: Value =
        t.http.get(format!("{}/.well-known/oauth-authorization-server", t.base_url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(asm["client_id_metadata_document_supported"], true);
    let docs = serve_client_documents().await;
    let client_id = format!("{docs}/good.json");
    let (verifier, challenge) = pkce();
    let params = |client_id: &str, redirect: &str| -> HashMap<String, String> {
        [
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    };
    // The document's own URL as client id, its redirect URI: accepted, named as the document says.
    let request = t.app.check_authorization(&params(&client_id, REDIRECT)).await.unwrap();
    assert_eq!(request.client_name, "Doc coach");
    // A redirect URI the document does not list, a document naming someone else, a missing one.
    use skillpilot::app::oauth::AuthorizeError;
    for (id, redirect) in [
        (client_id.clone(), "http://127.0.0.1:9/other"),
        (format!("{docs}/liar.json"), REDIRECT),
        (format!("{docs}/missing.json"), REDIRECT),
        (format!("{docs}/"), REDIRECT),
    ] {
        let refused = t.app.check_authorization(&params(&id, redirect)).await;
        assert!(matches!(refused, Err(AuthorizeError::Page(_))), "{id} {redirect}: {refused:?}");
    }
    // The whole grant works with the document's URL as client id.
    let token = t.learner("Ada").await;
    let learner = t.principal(&token).await.learner_id.unwrap();
    let code = t.app.issue_code(&request, &learner).await.unwrap();
    let (status, tokens) = exchange(&t, &client_id, &code, &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(mcp_status(&t, tokens["access_token"].as_str()).await.0, 200);
}

both_stores!(
    discovery_answers_as_the_mcp_authorization_spec_says,
    a_client_metadata_document_identifies_a_client_without_registration,
    the_official_sdk_connects_through_the_built_in_authorization_server,
    codes_are_single_use_and_bound_to_client_redirect_and_verifier,
    the_authorization_endpoint_never_redirects_to_an_unregistered_uri,
    expired_tampered_foreign_and_underscoped_tokens_are_refused,
    a_refresh_token_works_once_and_its_reuse_revokes_the_family,
);

/// An external identity provider for the test: an RSA key made by `openssl` in a fresh
/// directory, published as a JWKS file beside it (key id `k1`).
fn external_idp(settings: &mut skillpilot::config::Settings) {
    let dir = std::env::temp_dir().join(format!("sp_idp_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    write_rsa_key(&dir, "k1");
    publish_jwks(&dir, &["k1"]);
    settings.external_idp = Some(skillpilot::app::external_idp::ExternalIdpSettings {
        issuer: "https://idp.example".into(),
        jwks: skillpilot::app::external_idp::JwksSource::File(dir.join("jwks.json")),
        audience: None,
        refetch_after: std::time::Duration::ZERO,
    });
}

fn write_rsa_key(dir: &std::path::Path, kid: &str) {
    let key = dir.join(format!("{kid}.pem"));
    let ok = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out"])
        .arg(&key)
        .output()
        .expect("openssl is needed to make a test key")
        .status
        .success();
    assert!(ok);
}

fn publish_jwks(dir: &std::path::Path, kids: &[&str]) {
    let keys: Vec<Value> = kids
        .iter()
        .map(|kid| {
            let out = std::process::Command::new("openssl")
                .args(["rsa", "-noout", "-modulus", "-in"])
                .arg(dir.join(format!("{kid}.pem")))
                .output()
                .unwrap();
            let hex = String::from_utf8(out.stdout).unwrap().trim().trim_start_matches("Modulus=").to_owned();
            let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": URL_SAFE_NO_PAD.encode(bytes), "e": "AQAB"})
        })
        .collect();
    std::fs::write(dir.join("jwks.json"), json!({ "keys": keys }).to_string()).unwrap();
}

fn idp_dir(t: &TestApp) -> PathBuf {
    match &t.app.settings.external_idp.as_ref().unwrap().jwks {
        skillpilot::app::external_idp::JwksSource::File(path) => path.parent().unwrap().to_owned(),
        other => panic!("{other:?}"),
    }
}

fn jwt(t: &TestApp, kid: &str, claims: Value) -> String {
    let pem = std::fs::read(idp_dir(t).join(format!("{kid}.pem"))).unwrap();
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

async fn an_external_providers_jwts_are_checked_against_its_jwks(t: Arc<TestApp>) {
    let now = t.app.clock.now().timestamp();
    let resource = format!("{}/mcp", t.base_url);
    let claims =
        |sub: &str, aud: &str, iss: &str, exp: i64, scope: &str| json!({"sub": sub, "aud": aud, "iss": iss, "exp": exp, "scope": scope});
    let good = jwt(&t, "k1", claims("alice", &resource, "https://idp.example", now + 300, "openid skillpilot.learn"));
    assert_eq!(mcp_status(&t, Some(&good)).await.0, 200);
    // The subject became a learner, the same one on every token.
    let first = t.app.authenticate(&good).await.unwrap();
    let again = jwt(&t, "k1", claims("alice", &resource, "https://idp.example", now + 600, "skillpilot.learn"));
    assert_eq!(t.app.authenticate(&again).await.unwrap(), first);
    let other = jwt(&t, "k1", claims("bob", &resource, "https://idp.example", now + 300, "skillpilot.learn"));
    assert_ne!(t.app.authenticate(&other).await.unwrap().learner_id, first.learner_id);

    // The resource metadata sends clients to the provider; the built-in server is off.
    let prm: Value =
        t.http.get(format!("{}/.well-known/oauth-protected-resource/mcp", t.base_url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(prm["authorization_servers"], json!(["https://idp.example"]));
    for path in ["/.well-known/oauth-authorization-server", "/oauth/authorize"] {
        assert_eq!(t.http.get(format!("{}{path}", t.base_url)).send().await.unwrap().status(), 404, "{path}");
    }

    // Refusals: foreign audience, foreign issuer, expired, missing scope, bad signature, HS256.
    let audit_before = t.app.store.tool_calls().await.unwrap().len();
    for (token, status) in [
        (jwt(&t, "k1", claims("alice", "https://other.example/mcp", "https://idp.example", now + 300, "skillpilot.learn")), 401),
        (jwt(&t, "k1", claims("alice", &resource, "https://evil.example", now + 300, "skillpilot.learn")), 401),
        (jwt(&t, "k1", claims("alice", &resource, "https://idp.example", now - 120, "skillpilot.learn")), 401),
        (jwt(&t, "k1", claims("alice", &resource, "https://idp.example", now + 300, "openid")), 403),
        (format!("{}x", &good[..good.len() - 1]), 401),
        (
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &claims("alice", &resource, "https://idp.example", now + 300, "skillpilot.learn"),
                &jsonwebtoken::EncodingKey::from_secret(b"guess"),
            )
            .unwrap(),
            401,
        ),
    ] {
        assert_eq!(mcp_status(&t, Some(&token)).await.0, status, "{token}");
    }
    assert_eq!(t.app.store.tool_calls().await.unwrap().len(), audit_before);

    // Key rotation: a token signed with a new key id is accepted once the JWKS publishes it.
    let dir = idp_dir(&t);
    write_rsa_key(&dir, "k2");
    let rotated = jwt(&t, "k2", claims("alice", &resource, "https://idp.example", now + 300, "skillpilot.learn"));
    assert_eq!(mcp_status(&t, Some(&rotated)).await.0, 401, "not yet published");
    publish_jwks(&dir, &["k1", "k2"]);
    assert_eq!(mcp_status(&t, Some(&rotated)).await.0, 200);
    assert_eq!(t.app.authenticate(&rotated).await.unwrap(), first);
    // Development tokens keep working beside the provider.
    let dev = t.learner("Dev").await;
    assert_eq!(mcp_status(&t, Some(&dev)).await.0, 200);
    std::fs::remove_dir_all(dir).ok();
}

both_stores!(settings = external_idp; an_external_providers_jwts_are_checked_against_its_jwks);

/// A throwaway CA and a certificate for `localhost`/127.0.0.1 signed by it, made by openssl in
/// `dir` (ca.pem, server.pem, server.key).
fn throwaway_ca(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl is needed");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=SkillPilot test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        "server.pem",
        "-copy_extensions",
        "copy",
    ]);
}

/// An identity provider whose JWKS is served over https (openssl s_server) with a certificate
/// of a private CA: trusted through `outbound_ca_file` the keys load and its tokens work;
/// without it the TLS handshake fails and every token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_jwks_of_a_private_ca_is_fetched_when_the_ca_file_trusts_it() {
    let dir = std::env::temp_dir().join(format!("sp_https_idp_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    write_rsa_key(&dir, "k1");
    publish_jwks(&dir, &["k1"]);
    throwaway_ca(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = std::process::Command::new("openssl")
        .args(["s_server", "-quiet", "-WWW", "-accept", &port.to_string(), "-cert", "server.pem", "-key", "server.key"])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let idp = |ca: Option<PathBuf>| {
        let jwks = format!("https://localhost:{port}/jwks.json");
        move |s: &mut skillpilot::config::Settings| {
            s.external_idp = Some(skillpilot::app::external_idp::ExternalIdpSettings {
                issuer: "https://idp.example".into(),
                jwks: skillpilot::app::external_idp::JwksSource::Url(jwks),
                audience: None,
                refetch_after: std::time::Duration::ZERO,
            });
            s.outbound_ca_file = ca;
        }
    };
    for (backend, ca, expected) in [
        (crate::helpers::Backend::Sqlite, Some(dir.join("ca.pem")), 200),
        (crate::helpers::Backend::Postgres, Some(dir.join("ca.pem")), 200),
        (crate::helpers::Backend::Sqlite, None, 401),
    ] {
        let t = crate::helpers::spawn_with(backend, idp(ca.clone())).await;
        let now = t.app.clock.now().timestamp();
        let claims = json!({"sub": "alice", "aud": format!("{}/mcp", t.base_url), "iss": "https://idp.example", "exp": now + 300, "scope": "skillpilot.learn"});
        let pem = std::fs::read(dir.join("k1.pem")).unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some("k1".into());
        let token = jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap();
        assert_eq!(mcp_status(&t, Some(&token)).await.0, expected, "{backend:?}, CA trusted: {}", ca.is_some());
        t.teardown().await;
    }
    server.kill().ok();
    server.wait().ok();
    std::fs::remove_dir_all(&dir).ok();
}

fn three_registrations(settings: &mut skillpilot::config::Settings) {
    settings.oauth_register_per_hour = 3;
}

async fn register_with(t: &TestApp, body: Value) -> (u16, Value) {
    let r = t.http.post(format!("{}/oauth/register", t.base_url)).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Dynamic registration is bounded: per address and hour, in redirect URIs and size; clients
/// that never completed an authorization expire; the consent page names the redirect host.
async fn client_registration_is_bounded_and_unused_clients_expire(t: Arc<TestApp>) {
    let client = |uris: Value| json!({"client_name": "Coach", "redirect_uris": uris, "token_endpoint_auth_method": "none"});
    // Limits of one registration.
    let six: Vec<String> = (0..6).map(|i| format!("https://app.example/cb{i}")).collect();
    assert_eq!(register_with(&t, client(json!(six))).await.0, 400);
    assert_eq!(register_with(&t, client(json!([format!("https://app.example/{}", "x".repeat(600))]))).await.0, 400);
    let big = json!({"client_name": "x".repeat(9000), "redirect_uris": [REDIRECT]});
    let (status, body) = register_with(&t, big).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_client_metadata")), "{body}");

    // Three per hour from this address (the refused ones above were counted too: fresh hour).
    t.clock.advance(chrono::Duration::minutes(61));
    let unused = register_with(&t, client(json!(["https://app.example/cb"]))).await.1["client_id"].as_str().unwrap().to_owned();
    let used = register(&t).await;
    register(&t).await;
    let (status, body) = register_with(&t, client(json!([REDIRECT]))).await;
    assert_eq!((status, body["error"].as_str()), (429, Some("temporarily_unavailable")), "{body}");
    // The one that is used completes an authorization.
    let (verifier, challenge) = pkce();
    let (code, _) = consented_code(&t, &used, &challenge).await;
    assert_eq!(exchange(&t, &used, &code, &verifier).await.0, 200);

    // A day later the unused registration is gone at the next registration; the used one stays.
    t.clock.advance(chrono::Duration::hours(25));
    register(&t).await;
    assert!(t.app.store.oauth_client(&unused).await.unwrap().is_none(), "an unused client outlived its expiry");
    assert!(t.app.store.oauth_client(&used).await.unwrap().is_some());

    // The consent page names where the learner goes next, and warns for a loopback redirect.
    let learner = t.learner("Cleo").await;
    let browser = crate::field::Browser::signed_in(&t, &learner).await;
    let (_, challenge) = pkce();
    let page = |client_id: String, redirect: &'static str| {
        let query = [
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", redirect),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", "s"),
        ];
        format!("/oauth/authorize?{}&lang=en", serde_urlencoded_pairs(&query))
    };
    let loopback = browser.get(&page(used.clone(), REDIRECT)).await;
    let host = REDIRECT.split('/').nth(2).unwrap();
    assert!(loopback.contains("consent-redirect") && loopback.contains(host), "{loopback}");
    assert!(loopback.contains("consent-warning"), "no warning for a loopback redirect");
    let https_client = register_with(&t, client(json!(["https://app.example/cb"]))).await.1["client_id"].as_str().unwrap().to_owned();
    let https = browser.get(&page(https_client, "https://app.example/cb")).await;
    assert!(https.contains("<strong>app.example</strong>") && !https.contains("consent-warning"), "{https}");
}

fn serde_urlencoded_pairs(pairs: &[(&str, &str)]) -> String {
    reqwest::Url::parse_with_params("http://x/", pairs).unwrap().query().unwrap_or_default().to_owned()
}

mod bounded_registration {
    use super::*;
    both_stores!(settings = three_registrations; client_registration_is_bounded_and_unused_clients_expire);
}
