//! Faults: the server is killed with SIGKILL in the middle of a load; after a restart every
//! write acknowledged to a client is in the log, the chains verify and the views equal a replay.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{content_dir, TestApp};

fn start(t: &TestApp, port: u16) -> std::process::Child {
    let db = match t.backend {
        crate::helpers::Backend::Sqlite => format!("sqlite://{}", t.db_url),
        crate::helpers::Backend::Postgres => t.db_url.clone(),
    };
    std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot"))
        .args(["--db", &db, "--content", content_dir().to_str().unwrap(), "serve", "--addr", &format!("127.0.0.1:{port}")])
        .env("SKILLPILOT_CAPABILITY_KEYS", &t.keys_spec)
        .env("RUST_LOG", "error")
        .spawn()
        .unwrap()
}

async fn wait_ready(base: &str) {
    for _ in 0..300 {
        if reqwest::get(format!("{base}/healthz")).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("server did not come up");
}

async fn rpc(http: &reqwest::Client, base: &str, token: &str, name: &str, args: Value) -> Option<Value> {
    let r = http
        .post(format!("{base}/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let body: Value = r.json().await.ok()?;
    Some(body["result"].clone())
}

async fn every_acknowledged_write_survives_a_kill_9(t: Arc<TestApp>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let mut server = start(&t, port);
    wait_ready(&base).await;
    let http = reqwest::Client::new();
    // The long variant (SKILLPILOT_LONG=1): more coaches, five kills, longer load before each.
    let (coach_count, rounds, load) =
        if crate::helpers::long_run() { (16, 5, Duration::from_secs(3)) } else { (4, 1, Duration::from_millis(1500)) };
    // Learners with sessions started through the server (its wall clock).
    let mut coaches = Vec::new();
    for _ in 0..coach_count {
        let token = t.learner("Ada").await;
        assert_eq!(
            http.post(format!("{base}/v1/learning-sessions")).bearer_auth(&token).json(&json!({})).send().await.unwrap().status(),
            201
        );
        let gate = rpc(&http, &base, &token, "get_skillpilot_learning_context", json!({})).await.unwrap();
        let sid = gate["structuredContent"]["learningSessionId"].as_str().unwrap().to_owned();
        let journey = t.app.store.latest_session(&t.principal(&token).await.learner_id.unwrap()).await.unwrap().unwrap().journey_id;
        coaches.push((token, sid, journey));
    }
    // Load: each coach toggles autopilot as fast as it can and records every acknowledged version.
    let acknowledged = Arc::new(tokio::sync::Mutex::new(BTreeMap::<String, Vec<u64>>::new()));
    for round in 0..rounds {
        let mut tasks = Vec::new();
        for (token, sid, journey) in coaches.clone() {
            let (http, base, acknowledged) = (http.clone(), base.clone(), acknowledged.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let Some(ctx) = rpc(&http, &base, &token, "get_skillpilot_learning_context", json!({"learningSessionId": sid})).await
                    else {
                        return;
                    };
                    let Some(options) = ctx["structuredContent"]["settings"]["options"].as_array().cloned() else { return };
                    let toggle = options.iter().find(|o| o["kind"] == "autopilot").unwrap()["payload"].clone();
                    let Some(r) =
                        rpc(&http, &base, &token, "choose_skillpilot_option", json!({"learningSessionId": sid, "option": toggle})).await
                    else {
                        return;
                    };
                    if r["isError"] == false {
                        let v = r["structuredContent"]["receipt"]["stateVersion"].as_u64().unwrap();
                        acknowledged.lock().await.entry(journey.clone()).or_default().push(v);
                    }
                }
            }));
        }
        tokio::time::sleep(load).await;
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        for task in tasks {
            task.await.unwrap();
        }
        let acknowledged = acknowledged.lock().await.clone();
        let total: usize = acknowledged.values().map(Vec::len).sum();
        assert!(total > 0, "the load made progress before kill {round}");

        // Restart on the same database: everything acknowledged so far is there.
        server = start(&t, port);
        wait_ready(&base).await;
        for (journey, versions) in &acknowledged {
            let events = t.app.store.events_after(journey, 0).await.unwrap();
            let sequences: Vec<u64> = events.iter().map(|e| e.sequence as u64).collect();
            for v in versions {
                assert!(sequences.contains(v), "acknowledged version {v} of {journey} is missing after kill {round}");
            }
            assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>(), "gapless");
        }
        assert_eq!(t.app.audit_verify().await.unwrap().broken, None);
    }
    // The restarted server caught the views up; a replay equals them.
    let report = t.app.replay().await.unwrap();
    assert!(report.differing.is_empty(), "{:?}", report.differing);
    server.kill().unwrap();
    server.wait().unwrap();
}

crate::both_stores!(every_acknowledged_write_survives_a_kill_9);

/// A private PostgreSQL cluster (never the shared server), started by the test as the
/// `postgres` OS user on a spare port.
pub(crate) struct PrivateCluster {
    dir: String,
    port: u16,
    bin: std::path::PathBuf,
}

impl PrivateCluster {
    pub(crate) fn pg_ctl(&self, args: &str) -> std::process::Output {
        // `-l`: the postmaster must not inherit this process's pipes, or waiting for its output never ends.
        let cmd = format!(
            "{}/pg_ctl -D {} -l {}/server.log -w -o '-p {} -k {} -c listen_addresses=127.0.0.1' {args}",
            self.bin.display(),
            self.dir,
            self.dir,
            self.port,
            self.dir
        );
        std::process::Command::new("su").args(["postgres", "-c", &cmd]).output().unwrap()
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started on its own spare port.
    pub(crate) fn standby_of(primary: &PrivateCluster) -> Self {
        let dir = format!("/tmp/sp-private-pg-{}", uuid::Uuid::new_v4().simple());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = std::process::Command::new("su")
            .args([
                "postgres",
                "-c",
                &format!(
                    "{}/pg_basebackup -h 127.0.0.1 -p {} -U postgres -D {dir} -R -X stream --no-sync",
                    primary.bin.display(),
                    primary.port
                ),
            ])
            .output()
            .unwrap();
        assert!(base.status.success(), "pg_basebackup: {}", String::from_utf8_lossy(&base.stderr));
        let standby = Self { dir, port, bin: primary.bin.clone() };
        let started = standby.pg_ctl("start");
        assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
        standby
    }

    pub(crate) fn create() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries (Debian: /usr/lib/postgresql/<version>/bin) are needed for the store-outage test")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists())
            .expect("initdb not found under /usr/lib/postgresql");
        let dir = format!("/tmp/sp-private-pg-{}", uuid::Uuid::new_v4().simple());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        std::fs::create_dir_all(&dir).unwrap();
        assert!(std::process::Command::new("chown").args(["postgres:postgres", &dir]).status().unwrap().success());
        let init = std::process::Command::new("su")
            .args(["postgres", "-c", &format!("{}/initdb -D {dir} -A trust -U postgres --no-sync", bin.display())])
            .output()
            .unwrap();
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        let cluster = Self { dir, port, bin };
        let started = cluster.pg_ctl("start");
        assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
        cluster
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl("stop -m immediate");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// PostgreSQL stops during load and comes back: calls meanwhile get `STORE_UNAVAILABLE` (never a
/// success that was not stored), and the same server process serves again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_gives_store_unavailable_and_the_server_recovers_without_restart() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::create).await.unwrap();
    let keys = skillpilot::app::tokens::Keys::generate_spec().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot"))
        .args(["--db", &cluster.url(), "--content", content_dir().to_str().unwrap(), "serve", "--addr", &format!("127.0.0.1:{port}")])
        .env("SKILLPILOT_CAPABILITY_KEYS", &keys)
        .env("RUST_LOG", "error")
        .spawn()
        .unwrap();
    wait_ready(&base).await;
    let token = String::from_utf8(
        std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot"))
            .args(["--db", &cluster.url(), "--content", content_dir().to_str().unwrap(), "learner", "create", "--name", "Ada"])
            .env("SKILLPILOT_CAPABILITY_KEYS", &keys)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .lines()
    .last()
    .unwrap()
    .to_owned();
    let http = reqwest::Client::new();
    assert_eq!(http.post(format!("{base}/v1/learning-sessions")).bearer_auth(&token).json(&json!({})).send().await.unwrap().status(), 201);
    let ctx = rpc(&http, &base, &token, "get_skillpilot_learning_context", json!({})).await.unwrap();
    let sid = ctx["structuredContent"]["learningSessionId"].as_str().unwrap().to_owned();

    let stop = cluster.pg_ctl("stop -m fast");
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    // During the outage: STORE_UNAVAILABLE (as an HTTP 503 from the bearer check, or as a tool
    // result), never a success.
    let r = http
        .post(format!("{base}/mcp"))
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_skillpilot_learning_context", "arguments": {"learningSessionId": sid}}}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    let code =
        body["error"]["code"].as_str().or(body["result"]["structuredContent"]["error"]["code"].as_str()).unwrap_or_default().to_owned();
    assert_eq!(code, "STORE_UNAVAILABLE", "{status} {body}");
    assert_ne!(body["result"]["isError"], false);
    // As a tool result it carries the unknown-outcome recovery: retry exactly.
    let recovery = &body["result"]["structuredContent"]["error"]["recovery"];
    assert!(body["result"].is_null() || recovery["retry"] == "exact", "{body}");
    assert_eq!(reqwest::get(format!("{base}/readyz")).await.unwrap().status(), 503);

    let start = cluster.pg_ctl("start");
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    // The same process recovers.
    let mut recovered = None;
    for _ in 0..50 {
        if let Some(r) = rpc(&http, &base, &token, "get_skillpilot_learning_context", json!({"learningSessionId": sid})).await {
            if r["isError"] == false {
                recovered = Some(r);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recovered = recovered.expect("the server serves again after the store came back");
    // The fresh journey as it was: waiting for the learner's wish to begin.
    assert_eq!(recovered["structuredContent"]["requiredAction"], "awaitLearnerContinuation");
    assert_eq!(reqwest::get(format!("{base}/readyz")).await.unwrap().status(), 200);
    server.kill().unwrap();
    server.wait().unwrap();
}

async fn readyz(http: &reqwest::Client, base: &str) -> Option<Value> {
    http.get(format!("{base}/readyz")).timeout(Duration::from_secs(2)).send().await.ok()?.json().await.ok()
}

/// The instance among `bases` whose `/readyz` says it holds the projector lease, waiting up to
/// `within` for one to say so.
async fn projector_leader(http: &reqwest::Client, bases: &[String], within: Duration) -> usize {
    let deadline = std::time::Instant::now() + within;
    loop {
        for (i, base) in bases.iter().enumerate() {
            if readyz(http, base).await.is_some_and(|r| r["instance"]["projectorLeader"] == true) {
                return i;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no instance holds the projector lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 15: three instances on one PostgreSQL database, sharing nothing but it. A learner's
/// calls go round-robin over them; the instance running the background projector is killed
/// with -9 in the middle of the load. The other two carry on, nothing acknowledged is lost, every
/// chain verifies, and another instance takes the projector over once the lease ran out — the
/// events written after the kill reach the analytics without any analytics read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_a_learner_and_survive_losing_the_projector_leader() {
    let t = crate::helpers::spawn(crate::helpers::Backend::Postgres).await;
    let ports: Vec<u16> = (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    let mut servers: Vec<Option<std::process::Child>> = ports.iter().map(|p| Some(start(&t, *p))).collect();
    let bases: Vec<String> = ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
    for base in &bases {
        wait_ready(base).await;
    }
    let http = reqwest::Client::new();
    let leader = projector_leader(&http, &bases, Duration::from_secs(10)).await;

    let mut coaches = Vec::new();
    for i in 0..4 {
        let token = t.learner("Ada").await;
        let start_on = &bases[i % 3];
        assert_eq!(
            http.post(format!("{start_on}/v1/learning-sessions")).bearer_auth(&token).json(&json!({})).send().await.unwrap().status(),
            201
        );
        let gate = rpc(&http, &bases[(i + 1) % 3], &token, "get_skillpilot_learning_context", json!({})).await.unwrap();
        let sid = gate["structuredContent"]["learningSessionId"].as_str().unwrap().to_owned();
        let journey = t.app.store.latest_session(&t.principal(&token).await.learner_id.unwrap()).await.unwrap().unwrap().journey_id;
        coaches.push((token, sid, journey));
    }
    // Each coach reads and writes round-robin over the instances still alive (as a load balancer
    // would route), recording every acknowledged version and which instance acknowledged it.
    let alive = Arc::new(std::sync::RwLock::new(vec![true; 3]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acknowledged = Arc::new(tokio::sync::Mutex::new(BTreeMap::<String, Vec<(u64, usize)>>::new()));
    let mut tasks = Vec::new();
    for (token, sid, journey) in coaches.clone() {
        let (http, bases, alive, stop, acknowledged) = (http.clone(), bases.clone(), alive.clone(), stop.clone(), acknowledged.clone());
        tasks.push(tokio::spawn(async move {
            let mut turn = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                turn += 1;
                let pick = |k: usize| {
                    let alive = alive.read().unwrap();
                    (0..3).map(|d| (k + d) % 3).find(|i| alive[*i]).unwrap()
                };
                let (read_on, write_on) = (pick(turn), pick(turn + 1));
                let Some(ctx) =
                    rpc(&http, &bases[read_on], &token, "get_skillpilot_learning_context", json!({"learningSessionId": sid})).await
                else {
                    continue;
                };
                let Some(options) = ctx["structuredContent"]["settings"]["options"].as_array().cloned() else { continue };
                let toggle = options.iter().find(|o| o["kind"] == "autopilot").unwrap()["payload"].clone();
                let Some(r) =
                    rpc(&http, &bases[write_on], &token, "choose_skillpilot_option", json!({"learningSessionId": sid, "option": toggle}))
                        .await
                else {
                    continue;
                };
                if r["isError"] == false {
                    let v = r["structuredContent"]["receipt"]["stateVersion"].as_u64().unwrap();
                    acknowledged.lock().await.entry(journey.clone()).or_default().push((v, write_on));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut killed = servers[leader].take().unwrap();
    killed.kill().unwrap(); // SIGKILL
    killed.wait().unwrap();
    alive.write().unwrap()[leader] = false;
    let before_kill = acknowledged.lock().await.values().flatten().count();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let acknowledged = acknowledged.lock().await.clone();
    let all: Vec<&(u64, usize)> = acknowledged.values().flatten().collect();
    assert!(all.len() > before_kill, "the two other instances carried on after the kill");
    for i in 0..3 {
        assert!(all.iter().any(|(_, on)| *on == i), "instance {i} acknowledged writes: the calls were spread");
    }
    for (journey, versions) in &acknowledged {
        let events = t.app.store.events_after(journey, 0).await.unwrap();
        let sequences: Vec<u64> = events.iter().map(|e| e.sequence as u64).collect();
        for (v, on) in versions {
            assert!(sequences.contains(v), "version {v} of {journey}, acknowledged by instance {on}, is missing");
        }
        assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>(), "gapless");
    }
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);

    // The projector moved to a surviving instance once the dead one's lease (5 s) ran out.
    let survivors: Vec<String> = (0..3).filter(|i| *i != leader).map(|i| bases[i].clone()).collect();
    projector_leader(&http, &survivors, Duration::from_secs(15)).await;
    let (_, total) = t.app.store.projector_lag("analytics").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while t.app.store.projector_lag("analytics").await.unwrap().0 < total {
        assert!(std::time::Instant::now() < deadline, "the new leader never projected the events written after the kill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for server in servers.iter_mut().flatten() {
        server.kill().unwrap();
        server.wait().unwrap();
    }
    t.teardown().await;
}
