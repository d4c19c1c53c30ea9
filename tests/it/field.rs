//! The built binary as a new user and an operator meet it: run from an empty directory with no
//! flags, backed up and restored while writes run, its keys rotated, its identities listed and
//! revoked (on every instance within the bearer cache's lifetime), its logs parsed as JSON, its
//! metrics scraped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::TestApp;

/// A `skillpilot serve` process of the built binary; killed when dropped.
struct Server {
    child: std::process::Child,
    base: String,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn empty_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sp_{tag}_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The built binary in `dir` with nothing inherited that could point it at the source tree.
fn binary(dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot"));
    command
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("SKILLPILOT_CONTENT")
        .env_remove("SKILLPILOT_CAPABILITY_KEYS")
        .env_remove("SKILLPILOT_CONFIG")
        .env_remove("SKILLPILOT_LOG_FORMAT")
        .env("RUST_LOG", "info");
    command
}

fn cli(dir: &Path, args: &[&str]) -> std::process::Output {
    tokio::task::block_in_place(|| binary(dir).args(args).output()).unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

async fn serve(dir: &Path, args: &[&str]) -> Server {
    serve_with(dir, args, &[]).await
}

/// `serve` with extra environment (`("RUST_LOG", None)` removes a variable).
async fn serve_with(dir: &Path, args: &[&str], env: &[(&str, Option<&str>)]) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = dir.join(format!("serve-{port}.log"));
    let mut command = binary(dir);
    for (k, v) in env {
        match v {
            Some(v) => command.env(k, v),
            None => command.env_remove(k),
        };
    }
    let child = command
        .args(args)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, base: format!("http://127.0.0.1:{port}"), log };
    for _ in 0..500 {
        if reqwest::get(format!("{}/readyz", server.base)).await.is_ok_and(|r| r.status() == 200) {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the server did not become ready: {}", std::fs::read_to_string(&server.log).unwrap_or_default());
}

fn last_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_owned()
}

/// Starts a learning session over HTTP; returns nothing (the context tool finds it).
async fn start_session(base: &str, token: &str) {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/learning-sessions"))
        .bearer_auth(token)
        .json(&json!({"locale": "de", "timeZone": "Europe/Berlin"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

async fn tool(base: &str, token: &str, name: &str, args: Value) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    body["result"].clone()
}

/// A fresh context; panics when the call fails.
async fn context(base: &str, token: &str, sid: Option<&str>) -> Value {
    let args = sid.map(|s| json!({"learningSessionId": s})).unwrap_or_else(|| json!({}));
    let result = tool(base, token, "get_skillpilot_learning_context", args).await;
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_binary_runs_from_an_empty_directory_with_its_shipped_curriculum() {
    let dir = empty_dir("empty");
    // A mistyped option creates nothing.
    for bad in [vec!["--content", "no-such-dir", "learner", "list"], vec!["--db", "sub/dir/x.db", "learner", "list"]] {
        let out = cli(&dir, &bad);
        assert!(!out.status.success());
        assert!(text(&out).contains("no-such-dir") || text(&out).contains("sub/dir"), "{}", text(&out));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "a refused start left files behind");
    }
    let server = serve(&dir, &[]).await;
    let created = cli(&dir, &["learner", "create", "--name", "Ada"]);
    assert!(created.status.success(), "{}", text(&created));
    let token = last_line(&created);
    start_session(&server.base, &token).await;
    let ctx = context(&server.base, &token, None).await;
    let sid = ctx["learningSessionId"].as_str().unwrap().to_owned();
    assert_eq!(ctx["progress"]["total"], 13, "the shipped fractions pack: {ctx}");
    context(&server.base, &token, Some(&sid)).await;
    let events = cli(&dir, &["events"]);
    assert!(events.status.success(), "{}", text(&events));
    let lines: Vec<Value> = String::from_utf8_lossy(&events.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty());
    let journey = lines[0]["aggregateId"].as_str().unwrap().to_owned();
    let of_journey = cli(&dir, &["events", &journey]);
    assert_eq!(String::from_utf8_lossy(&of_journey.stdout).lines().count(), lines.len());
    let unknown = cli(&dir, &["events", "no-such-journey"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown).contains("no journey `no-such-journey`"), "{}", text(&unknown));
    let verify = cli(&dir, &["audit", "verify"]);
    assert!(verify.status.success() && text(&verify).contains("every chain intact"), "{}", text(&verify));
    let replay = cli(&dir, &["replay"]);
    assert!(replay.status.success() && text(&replay).contains("shadow views equal the live ones"), "{}", text(&replay));
    let analytics = cli(&dir, &["analytics", "no-such-view"]);
    assert_eq!(analytics.status.code(), Some(2));
    assert!(text(&analytics).contains("goal-mastery") && text(&analytics).contains("tool-usage"), "{}", text(&analytics));
    drop(server);
    let mut files: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.retain(|f| !f.ends_with(".log"));
    files.sort();
    assert!(files.iter().all(|f| f.starts_with("skillpilot.")), "{files:?}");
    assert!(files.contains(&"skillpilot.capability-key".to_owned()) && files.contains(&"skillpilot.db".to_owned()), "{files:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_completions_and_keygen_answer_without_a_database() {
    let dir = empty_dir("meta");
    let version = cli(&dir, &["--version"]);
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let expected = format!("skillpilot {} ({})", env!("CARGO_PKG_VERSION"), commit.as_deref().unwrap_or("unknown"));
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), expected);
    for shell in ["bash", "zsh", "fish"] {
        let out = cli(&dir, &["completions", shell]);
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("backup"), "{shell}: {}", text(&out));
    }
    let key = cli(&dir, &["keygen", "--kid", "k2"]);
    assert!(last_line(&key).starts_with("k2:") && last_line(&key).len() > 40, "{}", text(&key));
    assert!(!cli(&dir, &["keygen", "--kid", "bad id"]).status.success());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_writes_run_restores_with_its_key_and_the_session_keeps_working() {
    let (live, vault, restored) = (empty_dir("live"), empty_dir("vault"), empty_dir("restored"));
    let server = serve(&live, &[]).await;
    let token = last_line(&cli(&live, &["learner", "create", "--name", "Ada"]));
    start_session(&server.base, &token).await;
    let sid = context(&server.base, &token, None).await["learningSessionId"].as_str().unwrap().to_owned();
    // Writes run while the backup is taken: learners created one after another.
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let (running, live) = (running.clone(), live.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while running.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(binary(&live).args(["learner", "create", "--name", "Writer"]).output().unwrap().status.success());
                n += 1;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let backup = vault.join("skillpilot-backup.db");
    let out = cli(&live, &["backup", "--to", backup.to_str().unwrap()]);
    running.store(false, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(writes >= 1, "no write ran during the backup");
    assert!(vault.join("skillpilot-backup.capability-key").is_file());
    // A second backup never overwrites the first.
    assert!(!cli(&live, &["backup", "--to", backup.to_str().unwrap()]).status.success());
    drop(server);

    let out = cli(&restored, &["restore", "--from", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!cli(&restored, &["restore", "--from", backup.to_str().unwrap()]).status.success(), "a restore overwrote a database");
    let server = serve(&restored, &[]).await;
    // The session id sealed before the backup opens with the restored key (a new key would
    // answer SESSION_INVALID, see the rotation scenario).
    let ctx = context(&server.base, &token, Some(&sid)).await;
    assert_eq!(ctx["outcome"], "completed", "{ctx}");
    drop(server);
    assert!(cli(&restored, &["audit", "verify"]).status.success());
    assert!(cli(&restored, &["replay"]).status.success());

    // Without its key file a backup does not restore, and the message names the file.
    let keyless = empty_dir("keyless");
    std::fs::remove_file(vault.join("skillpilot-backup.capability-key")).unwrap();
    let out = cli(&keyless, &["restore", "--from", backup.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out).contains("skillpilot-backup.capability-key"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(&keyless).unwrap().count(), 0);
    // Nor does a database start beside a missing key file.
    std::fs::remove_file(restored.join("skillpilot.capability-key")).unwrap();
    let out = cli(&restored, &["learner", "list"]);
    assert!(!out.status.success() && text(&out).contains("skillpilot.capability-key"), "{}", text(&out));
    for d in [live, vault, restored, keyless] {
        std::fs::remove_dir_all(d).ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_log_of_a_golden_journey_has_an_access_line_per_request_and_a_span_per_tool_call() {
    let dir = empty_dir("logs");
    // The default log filter, as an installed service runs it.
    let server = serve_with(&dir, &["--log-format", "json"], &[("RUST_LOG", None)]).await;
    let token = last_line(&cli(&dir, &["learner", "create", "--name", "Ada"]));
    start_session(&server.base, &token).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/golden.py");
    let out = tokio::process::Command::new(crate::mcp_journeys::python())
        .arg(script)
        .args(["--url", &format!("{}/mcp", server.base), "--token", &token, "--journey", "a"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unknown = tool(&server.base, &token, "no_such_tool", json!({})).await;
    assert!(unknown.is_null());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(!log.contains('\u{1b}'), "ANSI codes in a log file");
    assert!(!log.contains(&token), "a token reached the log");
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    let serving = lines.iter().find(|l| l["message"] == "serving").expect("start-up line");
    assert_eq!(serving["store"], "sqlite");
    assert!(serving["curricula"].as_str().unwrap().contains("fractions@"));
    let access: Vec<&Value> = lines.iter().filter(|l| l["target"] == "skillpilot::access").collect();
    assert!(access.iter().any(|l| l["path"] == "/v1/learning-sessions" && l["status"] == 201 && l["method"] == "POST"));
    assert!(access.iter().all(|l| l["request_id"].as_str().is_some_and(|id| !id.is_empty()) && l["duration_ms"].is_number()));
    let calls: Vec<&Value> = lines.iter().filter(|l| l["message"] == "tool call").collect();
    assert_eq!(calls.len(), 10, "journey a makes 10 tool calls");
    for call in &calls {
        let span = call["spans"].as_array().unwrap().iter().find(|s| s["name"] == "tool_call").expect("inside the tool-call span");
        assert!(
            span["call_id"].is_string() && span["tool"].is_string() && span["journey_id"].is_string() && span["outcome"].is_string(),
            "{call}"
        );
        assert_eq!(call["level"], "INFO");
    }
    let refused = lines.iter().find(|l| l["message"] == "tool call refused: no such tool").expect("the unknown tool is logged");
    assert_eq!(refused["level"], "INFO", "a client's mistake is no server warning");
    assert!(lines.iter().all(|l| l["level"] != "WARN" && l["level"] != "ERROR"), "warnings in a clean run: {log}");
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}

/// Settings of the lifecycle scenario: a one-second bearer cache, so the bound is tested.
fn short_bearer_cache(settings: &mut skillpilot::config::Settings) {
    settings.bearer_cache_ttl = Duration::from_secs(1);
}

async fn revoked_learners_tokens_and_clients_stop_working_within_the_bearer_cache_lifetime(t: Arc<TestApp>) {
    let other = t.another_process().await;
    let token = t.learner("Ada").await;
    let learner_id = t.principal(&token).await.learner_id.unwrap();
    other.authenticate(&token).await.unwrap();
    let listed = t.cli(&["learner", "list"]);
    let learners: Vec<Value> = String::from_utf8_lossy(&listed.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(learners.iter().any(|l| l["learnerId"] == learner_id.as_str() && l["activeTokens"] == 1 && l["revokedMs"].is_null()));
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&token));

    // Revoked through the CLI (a third process): this instance asks the store after its cache
    // entry ages out, so within bearer_cache_ttl (1 s here) the token stops working everywhere.
    let out = t.cli(&["learner", "revoke", &learner_id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(other.authenticate(&token).await.is_err(), "a revoked learner still works after the cache bound");
    assert!(t.app.authenticate(&token).await.is_err());
    assert_eq!(t.cli(&["learner", "revoke", &learner_id]).status.code(), Some(2), "revoking twice is reported");

    // Staff tokens by id.
    let staff = t.app.create_staff_token(skillpilot::app::identity::Role::Analyst).await.unwrap();
    t.app.authenticate(&staff).await.unwrap();
    let tokens = t.cli(&["token", "list"]);
    let listed: Vec<Value> = String::from_utf8_lossy(&tokens.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let id = listed.iter().find(|r| r["role"] == "analyst").unwrap()["tokenId"].as_str().unwrap().to_owned();
    assert!(!String::from_utf8_lossy(&tokens.stdout).contains(&staff));
    // Revoked in this process: at once here, no cache wait.
    t.app.revoke_token("test", &id).await.unwrap();
    assert!(t.app.authenticate(&staff).await.is_err());
    assert_eq!(t.cli(&["token", "revoke", "not-hex"]).status.code(), Some(2));

    // An OAuth client: its refresh tokens are revoked with it, its access tokens stop.
    let (client_id, access, refresh) = crate::oauth::granted(&t).await;
    t.app.authenticate(&access).await.unwrap();
    let clients = t.cli(&["oauth", "clients", "list"]);
    assert!(String::from_utf8_lossy(&clients.stdout).contains(&client_id));
    let out = t.cli(&["oauth", "clients", "revoke", &client_id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(t.app.authenticate(&access).await.is_err(), "an access token of a revoked client still works");
    let (status, body) = crate::oauth::refresh(&t, &client_id, &refresh).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "{body}");

    // (The CLI stamps the wall clock, this app the test clock: compare without order.)
    let actions = t.app.operator_actions(10).await.unwrap();
    let mut done: Vec<(&str, &str, &str)> = actions.iter().map(|a| (a.actor.as_str(), a.action.as_str(), a.target.as_str())).collect();
    done.sort();
    assert_eq!(
        done,
        vec![
            ("cli", "learner.revoke", learner_id.as_str()),
            ("cli", "oauth_client.revoke", client_id.as_str()),
            ("test", "token.revoke", id.as_str())
        ]
    );
}

async fn metrics_count_http_requests_by_route_and_can_require_a_bearer(t: Arc<TestApp>) {
    reqwest::get(format!("{}/healthz", t.base_url)).await.unwrap();
    let text = reqwest::get(format!("{}/metrics", t.base_url)).await.unwrap().text().await.unwrap();
    for needle in [
        "skillpilot_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"}",
        "skillpilot_http_request_duration_seconds_bucket{",
        "skillpilot_build_info{version=",
        "skillpilot_db_pool_connections{state=\"idle\"}",
        "process_resident_memory_bytes",
        "process_open_fds",
    ] {
        assert!(text.contains(needle), "missing {needle}");
    }
    let guarded = t.another_process_with(|s| s.metrics_token = Some("scrape-secret".into())).await;
    let base = serve_app(guarded).await;
    let http = reqwest::Client::new();
    assert_eq!(http.get(format!("{base}/metrics")).send().await.unwrap().status(), 401);
    assert_eq!(http.get(format!("{base}/metrics")).bearer_auth("wrong").send().await.unwrap().status(), 401);
    let ok = http.get(format!("{base}/metrics")).header("authorization", "bearer scrape-secret").send().await.unwrap();
    assert_eq!(ok.status(), 200);
}

/// Serves an application's router on a free loopback port; returns its base URL.
async fn serve_app(app: Arc<skillpilot::app::App>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, skillpilot::http::router(app)).await });
    base
}

async fn a_capability_sealed_with_the_old_key_verifies_until_the_old_key_is_removed(t: Arc<TestApp>) {
    let coach = crate::mcp_contract::coach(&t).await;
    let new_key = skillpilot::app::tokens::Keys::generate_spec_with("rotated").unwrap();
    let rotated = t.another_process_with(|s| s.capability_keys = Some(format!("{new_key},{}", t.keys_spec))).await;
    assert_eq!(rotated.keys.current_kid(), "rotated");
    let base = serve_app(rotated).await;
    // `context` asserts success: the session sealed with the old key still opens.
    let during = context(&base, &coach.token, Some(&coach.sid)).await;
    assert_eq!(during["outcome"], "completed");
    let removed = t.another_process_with(|s| s.capability_keys = Some(new_key.clone())).await;
    let base = serve_app(removed).await;
    let after = tool(&base, &coach.token, "get_skillpilot_learning_context", json!({"learningSessionId": coach.sid})).await;
    assert_eq!(after["isError"], true);
    assert_eq!(after["structuredContent"]["error"]["code"], "SESSION_INVALID", "{after}");
    // A key id given twice is a start-up error naming it.
    let mut settings = t.app.settings.clone();
    settings.capability_keys = Some(format!("{new_key},{new_key}"));
    let err = skillpilot::startup::build_app(settings, t.clock.clone()).await.err().expect("duplicate key ids refused");
    assert!(format!("{err:#}").contains("`rotated` is given twice"), "{err:#}");
}

/// A browser session driven over plain HTTP: the CSRF cookie and field, the sign-in cookie.
pub(crate) struct Browser {
    http: reqwest::Client,
    base: String,
    cookies: String,
    csrf: String,
}

fn set_cookies(r: &reqwest::Response) -> Vec<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next().map(str::to_owned))
        .collect()
}

impl Browser {
    pub(crate) async fn signed_in(t: &TestApp, token: &str) -> Self {
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let page = http.get(format!("{}/operator?lang=en", t.base_url)).send().await.unwrap();
        let csrf_cookie = set_cookies(&page).into_iter().find(|c| c.starts_with("sp_csrf=")).unwrap();
        let html = page.text().await.unwrap();
        let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        let r = http
            .post(format!("{}/sign-in", t.base_url))
            .header("cookie", &csrf_cookie)
            .form(&[("csrf", csrf.as_str()), ("token", token), ("next", "/operator")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "sign-in failed");
        let session = set_cookies(&r).into_iter().find(|c| c.starts_with("sp_web=")).unwrap();
        let mut browser = Self { http, base: t.base_url.clone(), cookies: format!("{csrf_cookie}; {session}"), csrf };
        // The form token is bound to the sign-in: read it again from a signed-in page.
        let html = browser.get("/start?lang=en").await;
        browser.csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        browser
    }

    pub(crate) async fn get(&self, path: &str) -> String {
        self.http.get(format!("{}{path}", self.base)).header("cookie", &self.cookies).send().await.unwrap().text().await.unwrap()
    }

    /// Posts a form with the CSRF field; follows one redirect.
    async fn post(&self, path: &str, form: &[(&str, &str)]) -> String {
        let mut fields = vec![("csrf", self.csrf.as_str())];
        fields.extend_from_slice(form);
        let r = self.http.post(format!("{}{path}", self.base)).header("cookie", &self.cookies).form(&fields).send().await.unwrap();
        match r.headers().get("location").and_then(|l| l.to_str().ok()) {
            Some(to) => self.get(to).await,
            None => r.text().await.unwrap(),
        }
    }
}

async fn sign_out_ends_the_web_session_on_the_server_and_the_operator_page_revokes(t: Arc<TestApp>) {
    let operator = t.app.create_staff_token(skillpilot::app::identity::Role::Operator).await.unwrap();
    let browser = Browser::signed_in(&t, &operator).await;
    assert!(browser.get("/operator?lang=en").await.contains("operator-actions"));
    let learner = t.learner("Bea").await;
    let learner_id = t.principal(&learner).await.learner_id.unwrap();
    let page = browser.post("/operator/revoke", &[("kind", "learner"), ("id", &learner_id), ("lang", "en")]).await;
    assert!(page.contains("revoke-notice") && page.contains("learner.revoke"), "{page}");
    assert!(t.app.authenticate(&learner).await.is_err());
    let action = &t.app.operator_actions(1).await.unwrap()[0];
    assert!(action.actor.starts_with("operator:web:") && action.target == learner_id, "{action:?}");
    let unknown = browser.post("/operator/revoke", &[("kind", "token"), ("id", "0123456789abcdef"), ("lang", "en")]).await;
    assert!(unknown.contains("Nothing active has that id"), "{unknown}");
    // Sign-out ends the session on the server: the same cookie, copied before, opens nothing.
    let copied = browser.cookies.clone();
    browser.post("/sign-out", &[]).await;
    let replayed = Browser { cookies: copied, ..browser };
    let page = replayed.get("/operator?lang=en").await;
    assert!(!page.contains("operator-actions") && page.contains("name=\"token\""), "a copied cookie still opens the page");
}

both_stores!(
    metrics_count_http_requests_by_route_and_can_require_a_bearer,
    a_capability_sealed_with_the_old_key_verifies_until_the_old_key_is_removed,
    sign_out_ends_the_web_session_on_the_server_and_the_operator_page_revokes,
);

mod short_cache {
    use super::*;
    both_stores!(settings = short_bearer_cache; revoked_learners_tokens_and_clients_stop_working_within_the_bearer_cache_lifetime);
    crate::through_pgbouncer!(settings = short_bearer_cache; revoked_learners_tokens_and_clients_stop_working_within_the_bearer_cache_lifetime);
}

/// A damaged SQLite file: the CLI's last line names the damage, not a bare `INTERNAL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_sqlite_file_is_named_as_the_cause_on_the_clis_last_line() {
    use sqlx::Connection;
    let t = crate::helpers::spawn(crate::helpers::Backend::Sqlite).await;
    t.started().await;
    t.raw_sql("PRAGMA wal_checkpoint(TRUNCATE)", "").await;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", t.db_url)).await.unwrap();
    let root: i64 = sqlx::query_scalar("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetch_one(&mut conn).await.unwrap();
    let page: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    t.app.store.close().await;
    {
        use std::io::{Seek, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(&t.db_url).unwrap();
        file.seek(std::io::SeekFrom::Start(((root - 1) * page) as u64)).unwrap();
        file.write_all(&vec![0xee; page as usize]).unwrap();
    }
    let out = t.cli(&["events"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("damaged SQLite database") && last.contains("malformed"), "{stderr}");
    t.teardown().await;
}

/// A NUL byte reaches PostgreSQL only as a refused value: a 4xx the client can act on, never
/// `STORE_UNAVAILABLE` or a server error; SQLite stores it and simply finds nothing.
async fn a_nul_byte_in_a_parameter_is_bad_input_on_both_stores(t: Arc<TestApp>) {
    let r = t
        .http
        .post(format!("{}/oauth/token", t.base_url))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", "x"), ("client_id", "client\u{0}id")])
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert!((400..500).contains(&status), "{status}: {body}");
    assert_ne!(body["error"], "server_error", "{body}");
    let authorize = t
        .http
        .get(format!("{}/oauth/authorize?response_type=code&client_id=a%00b&redirect_uri=https%3A%2F%2Fx.example%2Fcb", t.base_url))
        .header("accept-language", "en")
        .send()
        .await
        .unwrap();
    assert!(authorize.status().is_client_error(), "{}", authorize.status());
    let page = authorize.text().await.unwrap();
    assert!(page.contains("not registered") && !page.contains("unavailable"), "{page}");
}

both_stores!(a_nul_byte_in_a_parameter_is_bad_input_on_both_stores);

/// A form's CSRF token is bound to the browser's cookie and its sign-in (a planted pair is
/// worthless), and a post from another origin is refused even with a valid token.
async fn csrf_tokens_are_bound_and_cross_origin_posts_are_refused(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = http.get(format!("{}/start?lang=en", t.base_url)).send().await.unwrap();
    let cookie = set_cookies(&page).into_iter().find(|c| c.starts_with("sp_csrf=")).unwrap();
    let html = page.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let sign_in = |cookie: String, csrf: String, extra: Option<(&'static str, &'static str)>| {
        let mut r = http.post(format!("{}/sign-in", t.base_url)).header("cookie", cookie).form(&[
            ("csrf", csrf),
            ("token", token.clone()),
            ("next", "/start".to_owned()),
        ]);
        if let Some((k, v)) = extra {
            r = r.header(k, v);
        }
        r.send()
    };
    let planted = "a".repeat(64);
    assert_eq!(sign_in(format!("sp_csrf={planted}"), planted.clone(), None).await.unwrap().status(), 403, "a planted double-submit pair");
    assert_ne!(csrf, cookie.trim_start_matches("sp_csrf="), "the token is not the cookie");
    assert_eq!(sign_in(cookie.clone(), csrf.clone(), Some(("origin", "https://evil.example"))).await.unwrap().status(), 403);
    assert_eq!(sign_in(cookie.clone(), csrf.clone(), Some(("sec-fetch-site", "cross-site"))).await.unwrap().status(), 403);
    let ok = sign_in(cookie.clone(), csrf.clone(), Some(("origin", Box::leak(t.base_url.clone().into_boxed_str())))).await.unwrap();
    assert_eq!(ok.status(), 303);
    // Signed in, the pre-sign-in token no longer opens a form: it is bound to the sign-in too.
    let session = set_cookies(&ok).into_iter().find(|c| c.starts_with("sp_web=")).unwrap();
    let out = http
        .post(format!("{}/sign-out", t.base_url))
        .header("cookie", format!("{cookie}; {session}"))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 403);
}

fn https_public_url(settings: &mut skillpilot::config::Settings) {
    settings.public_url = "https://learn.example".into();
}

/// Behind https the cookies are `__Host-` prefixed and `Secure`.
async fn cookies_are_host_prefixed_and_secure_behind_https(t: Arc<TestApp>) {
    let page = t.http.get(format!("{}/start", t.base_url)).send().await.unwrap();
    let raw: Vec<String> = page.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let csrf = raw.iter().find(|c| c.starts_with("__Host-sp_csrf=")).unwrap_or_else(|| panic!("{raw:?}"));
    assert!(csrf.contains("; Secure") && csrf.contains("Path=/") && !csrf.contains("Domain"), "{csrf}");
}

both_stores!(csrf_tokens_are_bound_and_cross_origin_posts_are_refused);

mod behind_https {
    use super::*;
    both_stores!(settings = https_public_url; cookies_are_host_prefixed_and_secure_behind_https);
}
