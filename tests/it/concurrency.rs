//! Concurrency and retries over real HTTP: 64 coaches racing on one version, retry storms, and
//! two server processes writing to one PostgreSQL database.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::helpers::{content_dir, Backend, TestApp};
use crate::mcp_contract::{call, coach, coach_at_start};

async fn sixty_four_clients_on_one_version_get_exactly_one_success(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let v = c.ctx(&t).await["stateVersion"].as_u64().unwrap();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (t, token, sid) = (t.clone(), c.token.clone(), c.sid.clone());
        tasks.push(tokio::spawn(async move {
            let args = json!({"learningSessionId": sid, "expectedStateVersion": v, "clientRequestId": format!("00000000-0000-4000-8000-{i:012}"),
                              "decision": {"evidence": "guided", "consent": "closeOnly"}});
            call(&t, &token, "complete_skillpilot_goal", args).await
        }));
    }
    let (mut ok, mut conflicts) = (0, 0);
    for task in tasks {
        let (err, body) = task.await.unwrap();
        if !err {
            ok += 1;
        } else {
            assert_eq!(body["error"]["code"], "STATE_CONFLICT", "{body}");
            conflicts += 1;
        }
    }
    assert_eq!((ok, conflicts), (1, 63));
    let mut completed = 0;
    t.app.list_events(&Default::default(), |e| completed += usize::from(e["eventType"] == "GoalCompleted")).await.unwrap();
    assert_eq!(completed, 1);
}

async fn a_retry_storm_over_http_has_one_effect_per_key(t: Arc<TestApp>) {
    let c = coach_at_start(&t).await;
    // Five successive writes, each sent three times at once (the first: the wish to begin).
    for step in 0..5 {
        let ctx = c.ctx(&t).await;
        let args = match ctx["requiredAction"].as_str().unwrap() {
            "teachActiveGoal" => (
                "complete_skillpilot_goal",
                json!({"learningSessionId": c.sid, "expectedStateVersion": ctx["stateVersion"],
                "clientRequestId": format!("11111111-0000-4000-8000-{step:012}"), "decision": {"evidence": "independent", "consent": "closeAndContinue"}}),
            ),
            _ => ("choose_skillpilot_option", json!({"learningSessionId": c.sid, "option": ctx["options"][0]["payload"]})),
        };
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (t, token, (tool, a)) = (t.clone(), c.token.clone(), args.clone());
            tasks.push(tokio::spawn(async move { call(&t, &token, tool, a).await }));
        }
        let mut receipts = Vec::new();
        for task in tasks {
            let (err, body) = task.await.unwrap();
            assert!(!err, "{body}");
            receipts.push(body["receipt"].clone());
        }
        assert!(receipts.iter().all(|r| *r == receipts[0]), "one receipt for all copies: {receipts:?}");
    }
    // Exactly one commit per key: request ids never repeat across commits.
    let mut commits: std::collections::BTreeMap<String, std::collections::BTreeSet<u64>> = Default::default();
    t.app
        .list_events(&Default::default(), |e| {
            if let Some(id) = e["metadata"]["requestId"].as_str() {
                commits.entry(id.to_owned()).or_default().insert(e["sequence"].as_u64().unwrap());
            }
        })
        .await
        .unwrap();
    assert_eq!(commits.len(), 5);
    for sequences in commits.values() {
        let (first, last) = (*sequences.iter().next().unwrap(), *sequences.iter().next_back().unwrap());
        assert_eq!(last - first + 1, sequences.len() as u64, "one contiguous commit per key");
    }
}

/// A hold on the database's write path from outside the app: PostgreSQL's `events` table locked,
/// SQLite's write lock taken; released on `release`.
enum WriteHold {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl WriteHold {
    async fn take(t: &TestApp) -> Self {
        use sqlx::Connection;
        match t.backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&t.db_url).await.unwrap();
                for statement in ["BEGIN", "LOCK TABLE events IN ACCESS EXCLUSIVE MODE"] {
                    sqlx::query(statement).execute(&mut conn).await.unwrap();
                }
                Self::Postgres(conn)
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", t.db_url)).await.unwrap();
                sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await.unwrap();
                Self::Sqlite(conn)
            }
        }
    }

    async fn release(self) {
        match self {
            Self::Postgres(mut conn) => drop(sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap()),
            Self::Sqlite(mut conn) => drop(sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap()),
        }
    }
}

/// ADR 0012: commands that wait while a commit is being written share the next transaction. A
/// command refused in it — here one that lost its version to the commit ahead — is refused
/// alone; every other command of the shared transaction is committed, exactly once.
async fn a_command_refused_in_a_shared_commit_rejects_only_itself(t: Arc<TestApp>) {
    let mut coaches = Vec::new();
    for _ in 0..8 {
        let c = coach(&t).await;
        let v = c.ctx(&t).await["stateVersion"].clone();
        coaches.push((c, v));
    }
    let complete = |i: usize, key: u64| {
        let (t, token, sid, v) = (t.clone(), coaches[i].0.token.clone(), coaches[i].0.sid.clone(), coaches[i].1.clone());
        tokio::spawn(async move {
            let args = json!({"learningSessionId": sid, "expectedStateVersion": v, "clientRequestId": format!("22222222-0000-4000-8000-{key:012}"),
                              "decision": {"evidence": "guided", "consent": "closeOnly"}});
            call(&t, &token, "complete_skillpilot_goal", args).await
        })
    };
    let hold = WriteHold::take(&t).await;
    // The first learner's command is decided and waits in the store behind the hold...
    let ahead = complete(0, 0);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    // ...a second one on the same version, and one of each other learner, queue behind it.
    let racer = complete(0, 1);
    let others: Vec<_> = (1..8).map(|i| complete(i, 10 + i as u64)).collect();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    hold.release().await;

    let (err, body) = ahead.await.unwrap();
    assert!(!err, "{body}");
    let (err, body) = racer.await.unwrap();
    assert!(err, "{body}");
    assert_eq!(body["error"]["code"], "STATE_CONFLICT", "{body}");
    for other in others {
        let (err, body) = other.await.unwrap();
        assert!(!err, "every other command of the shared commit is committed: {body}");
    }
    let mut completed = std::collections::BTreeMap::<String, usize>::new();
    t.app
        .list_events(&Default::default(), |e| {
            if e["eventType"] == "GoalCompleted" {
                *completed.entry(e["aggregateId"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
            }
        })
        .await
        .unwrap();
    assert_eq!(completed.len(), 8, "one completion per learner: {completed:?}");
    assert!(completed.values().all(|n| *n == 1), "{completed:?}");
    // The queued commands did share one transaction, and only the racer was refused in it.
    let text = t.http.get(format!("{}/metrics", t.base_url)).send().await.unwrap().text().await.unwrap();
    let series = |name: &str| -> f64 {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert_eq!(series("skillpilot_commit_batch_refused_commands_total "), 1.0);
    assert!(
        series("skillpilot_commit_transaction_commands_bucket{le=\"+Inf\"} ")
            > series("skillpilot_commit_transaction_commands_bucket{le=\"4.0\"} "),
        "a transaction of more than four commands: {text}"
    );
}

crate::both_stores!(
    sixty_four_clients_on_one_version_get_exactly_one_success,
    a_retry_storm_over_http_has_one_effect_per_key,
    a_command_refused_in_a_shared_commit_rejects_only_itself
);
crate::through_pgbouncer!(sixty_four_clients_on_one_version_get_exactly_one_success, a_retry_storm_over_http_has_one_effect_per_key);

struct Server(std::process::Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn server(t: &TestApp) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot"))
        .args(t.db_args())
        .args(["--content", content_dir().to_str().unwrap(), "serve", "--addr", &format!("127.0.0.1:{port}")])
        .env("SKILLPILOT_CAPABILITY_KEYS", &t.keys_spec)
        .env("RUST_LOG", "error")
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if reqwest::get(format!("{base}/healthz")).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Server(child, base)
}

/// Two `skillpilot serve` processes on one PostgreSQL database, both writing to the same
/// journeys at once: no duplicate, no gap, every chain intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_server_processes_racing_on_one_database_keep_every_stream_whole() {
    two_server_processes_race(false).await;
}

/// The same race with both processes reaching PostgreSQL through pgbouncer in transaction
/// pooling mode, with fewer server connections than either process's pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_server_processes_racing_through_pgbouncer_keep_every_stream_whole() {
    two_server_processes_race(true).await;
}

async fn two_server_processes_race(pooled: bool) {
    let t = crate::helpers::spawn_on(Backend::Postgres, pooled, |_| {}).await;
    let (a, b) = (server(&t).await, server(&t).await);
    let http = reqwest::Client::new();
    // Sessions are started through a server process (its wall clock, not the test's manual one).
    let (learner_count, writes_each) = if crate::helpers::long_run() { (8, 200) } else { (4, 15) };
    let mut learners = Vec::new();
    for _ in 0..learner_count {
        let token = t.learner("Ada").await;
        let r = http.post(format!("{}/v1/learning-sessions", a.1)).bearer_auth(&token).json(&json!({})).send().await.unwrap();
        assert_eq!(r.status(), 201);
        let gate: Value = http
            .post(format!("{}/mcp", b.1))
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_skillpilot_learning_context", "arguments": {}}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let sid = gate["result"]["structuredContent"]["learningSessionId"].as_str().unwrap().to_owned();
        learners.push(crate::mcp_contract::Coach { token, sid });
    }
    let mut tasks = Vec::new();
    for c in &learners {
        for (round, base) in [(0, a.1.clone()), (1, b.1.clone())] {
            let (http, token, sid) = (http.clone(), c.token.clone(), c.sid.clone());
            tasks.push(tokio::spawn(async move {
                let mut ok = 0;
                for i in 0..writes_each {
                    let rpc = |name: &str, args: Value| {
                        http.post(format!("{base}/mcp"))
                            .bearer_auth(&token)
                            .header("accept", "application/json, text/event-stream")
                            .header("mcp-protocol-version", "2025-11-25")
                            .json(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}}))
                            .send()
                    };
                    let ctx: Value =
                        rpc("get_skillpilot_learning_context", json!({"learningSessionId": sid})).await.unwrap().json().await.unwrap();
                    assert!(ctx["result"]["structuredContent"]["settings"].is_object(), "{ctx}");
                    let ctx = &ctx["result"]["structuredContent"];
                    let toggle = ctx["settings"]["options"].as_array().unwrap().iter().find(|o| o["kind"] == "autopilot").unwrap()
                        ["payload"]
                        .clone();
                    let r: Value = rpc("choose_skillpilot_option", json!({"learningSessionId": sid, "option": toggle}))
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    if r["result"]["isError"] == false {
                        ok += 1;
                    } else {
                        let code = r["result"]["structuredContent"]["error"]["code"].as_str().unwrap().to_owned();
                        assert!(code == "OPTION_INVALID" || code == "STATE_CONFLICT", "{round}: {r}");
                    }
                }
                ok
            }));
        }
    }
    let mut successes = 0;
    for task in tasks {
        successes += task.await.unwrap();
    }
    // Every success is exactly one event; streams are gapless from 1; chains verify.
    let mut per_journey: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    t.app
        .list_events(&Default::default(), |e| {
            per_journey.entry(e["aggregateId"].as_str().unwrap().to_owned()).or_default().push(e["sequence"].as_u64().unwrap())
        })
        .await
        .unwrap();
    let toggles: usize = per_journey.values().map(|s| s.len() - 2).sum();
    assert_eq!(toggles, successes, "one event per acknowledged write, none lost, none doubled");
    for sequences in per_journey.values() {
        assert_eq!(*sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
    }
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);
    assert!(successes >= 4, "progress was made: {successes}");
    drop((a, b));
    if let Some(p) = &t.pgbouncer {
        assert!(p.transactions(&t.db_name()).await > 0, "the processes' transactions went through pgbouncer");
    }
    t.teardown().await;
}
