//! Arbitrary JSON as tool arguments, through the real dispatcher on a real store, with a live
//! session: no panic, every rejection a stable input or state code (never `INTERNAL` or a store
//! failure), and a call that appends no event leaves the log as it was. The number of cases is
//! `SKILLPILOT_FUZZ_CASES` (CI runs the default), or it runs for `SKILLPILOT_FUZZ_SECS`
//! seconds (the long run reported in docs/reliability.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use skillpilot::error::AppError;
use skillpilot::mcp::tool_list;
use skillpilot::mcp::tools::{dispatch, Failure, Tool};

use crate::both_stores;
use crate::helpers::TestApp;
use crate::mcp_contract::coach;

/// Codes a refusal of bad input may carry; anything else (INTERNAL, STORE_UNAVAILABLE, …) is a
/// defect this test reports.
const INPUT_CODES: &[&str] = &[
    "SESSION_REQUIRED",
    "SESSION_INVALID",
    "UNKNOWN_FIELD",
    "FORBIDDEN_FIELD",
    "VALIDATION_FAILED",
    "INCOMPLETE_ASSESSMENTS",
    "IDEMPOTENCY_KEY_REUSED",
    "CAPABILITY_INVALID",
    "CAPABILITY_EXPIRED",
    "CAPABILITY_USED",
    "OPTION_INVALID",
    "STATE_CONFLICT",
    "NOT_ALLOWED",
    "NOT_ELIGIBLE",
    "NOT_FOUND",
];

const KEYS: &[&str] = &[
    "learningSessionId",
    "expectedStateVersion",
    "clientRequestId",
    "decision",
    "evidence",
    "consent",
    "assessments",
    "passed",
    "scores",
    "points",
    "optionToken",
    "batchCapability",
    "gradingCapability",
    "examCapability",
    "scoringCapability",
    "goalId",
];

fn arbitrary_json(session_id: String) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        any::<i64>().prop_map(|i| json!(i)),
        (0i64..40).prop_map(|i| json!(i)),
        "[ -~]{0,40}".prop_map(Value::String),
        // The attack run's inputs: NUL and other control bytes, bidi overrides, SQL and path
        // fragments, an IPv4-mapped loopback URL.
        "[\\x00-\\x1f]{1,8}".prop_map(Value::String),
        prop_oneof![
            Just("a\u{0}b"),
            Just("\u{202e}gnp.exe"),
            Just("'; DROP TABLE events; --"),
            Just("../../etc/passwd"),
            Just("https://[::ffff:127.0.0.1]/c.json")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
        // Token-shaped strings reach the capability and option decoders.
        "v4\\.local\\.[A-Za-z0-9_-]{0,120}".prop_map(Value::String),
        prop_oneof![Just("independent"), Just("guided"), Just("closeOnly"), Just("closeAndContinue"), Just("goal"), Just("mode")]
            .prop_map(|s| Value::String(s.to_owned())),
        Just(Value::String(session_id)),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![proptest::sample::select(KEYS).prop_map(str::to_owned), "[a-zA-Z_-]{1,16}"],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A tool and its arguments: mostly objects with the live session id and the tool's own
/// fields (with arbitrary values, some left out), so most cases get past the session lookup
/// and the unknown-field check into the validator, the token decoders and the domain.
fn tool_call(tools: Vec<(&'static str, Vec<String>)>, session_id: String) -> impl Strategy<Value = (&'static str, Value)> {
    proptest::sample::select(tools).prop_flat_map(move |(tool, own)| {
        let sid = session_id.clone();
        let with_session = move |fields: Vec<(String, Value)>| {
            let mut args: serde_json::Map<String, Value> = fields.into_iter().collect();
            args.insert("learningSessionId".into(), Value::String(sid.clone()));
            Value::Object(args)
        };
        let any_names = prop_oneof![6 => proptest::sample::select(KEYS).prop_map(str::to_owned), 1 => "[a-zA-Z_-]{1,16}"];
        let n = own.len();
        let own_fields = (proptest::sample::subsequence(own, 0..=n), proptest::collection::vec(arbitrary_json(session_id.clone()), n))
            .prop_map(|(names, values)| names.into_iter().zip(values).collect::<Vec<_>>());
        let args = prop_oneof![
            1 => arbitrary_json(session_id.clone()),
            2 => proptest::collection::vec((any_names, arbitrary_json(session_id.clone())), 0..6).prop_map(with_session.clone()),
            5 => own_fields.prop_map(with_session),
        ];
        (Just(tool), args)
    })
}

async fn arbitrary_tool_arguments_get_a_stable_code_and_change_nothing(t: Arc<TestApp>) {
    let c = coach(&t).await;
    let principal = t.principal(&c.token).await;
    let listed = tool_list();
    let tools: Vec<(&'static str, Vec<String>)> = Tool::ALL
        .iter()
        .zip(&listed)
        .map(|(t, d)| (t.name(), d["inputSchema"]["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()))
        .collect();
    let cases: u32 = std::env::var("SKILLPILOT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let deadline = std::env::var("SKILLPILOT_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).map(|s| Instant::now() + Duration::from_secs(s));
    let sid = c.sid.clone();
    let handle = tokio::runtime::Handle::current();
    let (app, started) = (t.app.clone(), Instant::now());
    let total = std::sync::atomic::AtomicU64::new(0);
    // proptest drives the cases synchronously; each case blocks on the async dispatcher.
    let tally = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<&'static str, u64>::new()));
    let codes = tally.clone();
    let outcome = tokio::task::spawn_blocking(move || loop {
        let strategy = tool_call(tools.clone(), sid.clone());
        let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
        let result = runner.run(&strategy, |(tool, args)| {
            total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            handle.block_on(async {
                let before = app.store.stream_heads().await.map_err(|e| TestCaseError::fail(format!("{e}")))?;
                let outcome = dispatch(&app, &principal, Tool::named(tool).expect("a listed tool"), args.clone(), None, false).await;
                let after = app.store.stream_heads().await.map_err(|e| TestCaseError::fail(format!("{e}")))?;
                match outcome {
                    Err(Failure { error, .. }) => {
                        let code = AppError::code(&error);
                        *codes.lock().unwrap().entry(code).or_default() += 1;
                        prop_assert!(INPUT_CODES.contains(&code), "{tool} answered {code} to {args}");
                        prop_assert_eq!(&before, &after, "{} was refused ({}) yet the log changed", tool, code);
                    }
                    Ok(out) => {
                        *codes.lock().unwrap().entry(if out.events_appended > 0 { "appended" } else { "answered" }).or_default() += 1;
                        prop_assert_eq!(out.events_appended == 0, before == after, "{} on {}", tool, args)
                    }
                }
                Ok(())
            })
        });
        if result.is_err() || deadline.is_none_or(|d| Instant::now() >= d) {
            break (result, total.load(std::sync::atomic::Ordering::Relaxed));
        }
    })
    .await
    .unwrap();
    let (result, total) = outcome;
    eprintln!("bad input: {total} tool calls in {:?} on {:?}, answered {:?}", started.elapsed(), t.backend, tally.lock().unwrap());
    if let Err(e) = result {
        panic!("{e}");
    }
}

both_stores!(arbitrary_tool_arguments_get_a_stable_code_and_change_nothing);
