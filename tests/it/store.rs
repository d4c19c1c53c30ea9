//! The store suite (issue: event-sourced core), every scenario on SQLite and on PostgreSQL:
//! append/load, concurrent writers, retry storms, key reuse, tamper evidence, replay,
//! snapshots and view catch-up.

use std::sync::Arc;

use aggregates::learning_journey::{Consent, Evidence, JourneyCommand, LearningJourney, Mode, OptionChoice};
use projections::receipt::Receipt;
use serde_json::json;
use skillpilot::app::journeys::{Actor, CommandRequest, Executed, RequestIdentity};
use skillpilot::canonical::replay_hash;
use skillpilot::error::AppError;

use crate::both_stores;
use crate::helpers::TestApp;

fn complete(journey: &str, version: u64, request_id: &str, evidence: Evidence) -> CommandRequest {
    let input = json!({"expectedStateVersion": version, "clientRequestId": request_id, "decision": {"evidence": evidence, "consent": "closeAndContinue"}});
    CommandRequest {
        journey_id: journey.to_owned(),
        command: JourneyCommand::CompleteGoal { evidence, consent: Consent::CloseAndContinue },
        expected_version: Some(version),
        identity: Some(RequestIdentity { request_id: request_id.to_owned(), replay_hash: replay_hash(&input) }),
        tool: "complete_skillpilot_goal",
        actor: Actor::Learner,
        call: None,
    }
}

fn choose(journey: &str, choice: OptionChoice) -> CommandRequest {
    CommandRequest {
        journey_id: journey.to_owned(),
        command: JourneyCommand::ChooseOption { choice },
        expected_version: None,
        identity: None,
        tool: "choose_skillpilot_option",
        actor: Actor::Learner,
        call: None,
    }
}

async fn event_count(t: &TestApp, journey: &str) -> usize {
    t.app.store.events_after(journey, 0).await.unwrap().len()
}

async fn appended_events_load_back_into_the_same_state(t: Arc<TestApp>) {
    let s = t.started().await;
    let loaded = t.app.load_journey(&s.journey_id).await.unwrap();
    assert_eq!(loaded.state.version, 3, "started, begun and first goal activated");
    assert_eq!(loaded.state.active_goal.as_deref(), Some("part-of-whole"));

    let done =
        t.app.execute(complete(&s.journey_id, 3, "6f1c1f7e-0000-4000-8000-000000000001", Evidence::Independent), None).await.unwrap();
    assert!(!done.replayed);
    assert_eq!(done.committed.first().map(|(seq, _)| *seq), Some(4));
    let again = t.app.load_journey(&s.journey_id).await.unwrap();
    assert_eq!(again.state, done.state);
    assert_eq!(again.state.goals["part-of-whole"].mastery, 0.8);
    let r = serde_json::to_value(receipt(&done)).unwrap();
    assert_eq!(r["stored"], "goalCompleted");
    assert_eq!(r["goal"], "Was ein Bruch bedeutet");
    assert_eq!(r["stateVersion"], done.state.version);
}

async fn thirty_two_concurrent_writers_on_one_version_produce_exactly_one_success(t: Arc<TestApp>) {
    let s = t.started().await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let t = t.clone();
        let journey = s.journey_id.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("00000000-0000-4000-8000-{i:012}");
            t.app.execute(complete(&journey, 3, &id, Evidence::Independent), None).await
        }));
    }
    let mut ok = 0;
    let mut conflicts = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(AppError::StateConflict { .. }) => conflicts += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((ok, conflicts), (1, 31));
    let events = t.app.store.events_after(&s.journey_id, 0).await.unwrap();
    let sequences: Vec<usize> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=events.len()).collect::<Vec<_>>(), "gapless");
    assert_eq!(events.iter().filter(|e| e.event_type == "GoalCompleted").count(), 1);
}

async fn a_retry_storm_has_exactly_one_effect_and_every_retry_gets_the_original_receipt(t: Arc<TestApp>) {
    let s = t.started().await;
    let before = event_count(&t, &s.journey_id).await;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let t = t.clone();
        let journey = s.journey_id.clone();
        tasks.push(tokio::spawn(async move {
            t.app.execute(complete(&journey, 3, "1b4e28ba-2fa1-4d2e-8b3e-000000000042", Evidence::Guided), None).await
        }));
    }
    let mut receipts = Vec::new();
    for task in tasks {
        let done = task.await.unwrap().unwrap();
        receipts.push(receipt(&done));
    }
    assert!(receipts.iter().all(|r| *r == receipts[0]), "{receipts:?}");
    let after = event_count(&t, &s.journey_id).await;
    let goal_completed =
        t.app.store.events_after(&s.journey_id, 0).await.unwrap().iter().filter(|e| e.event_type == "GoalCompleted").count();
    assert_eq!(goal_completed, 1);
    assert!(after > before);

    // Later, after other writes, an exact retry still returns the original result and writes nothing.
    t.app.execute(choose(&s.journey_id, OptionChoice::Autopilot { autopilot: true }), None).await.unwrap();
    let count = event_count(&t, &s.journey_id).await;
    let retry = t.app.execute(complete(&s.journey_id, 3, "1b4e28ba-2fa1-4d2e-8b3e-000000000042", Evidence::Guided), None).await.unwrap();
    assert!(retry.replayed);
    assert_eq!(receipt(&retry), receipts[0]);
    assert_eq!(event_count(&t, &s.journey_id).await, count);
}

/// ADR 0010: a commit's request id became a key of its own (migration 0015). A commit written
/// before that upgrade keeps its exactly-once effect: the migration derives the keys from the log,
/// so a retry after it gets the original result and writes nothing.
async fn a_retry_of_a_commit_written_before_the_commit_key_migration_gets_its_original_result(t: Arc<TestApp>) {
    let s = t.started().await;
    let id = "5b1f0d3e-8c7a-4e2b-9f6d-000000000015";
    let original = t.app.execute(complete(&s.journey_id, 3, id, Evidence::Guided), None).await.unwrap();
    // The schema as migration 0014 left it: no key table, the expression index, 0015 not applied.
    t.raw_sql("DROP TABLE commit_requests", "DROP TABLE commit_requests").await;
    let old_index = "CREATE INDEX events_request_id ON events (aggregate_type, aggregate_id, (metadata ->> 'requestId'))";
    t.raw_sql(old_index, old_index).await;
    t.raw_sql("DELETE FROM _sqlx_migrations WHERE version = 15", "DELETE FROM _sqlx_migrations WHERE version = 15").await;

    // An upgraded process migrates the database on start-up.
    let upgraded = t.another_process().await;
    let count = event_count(&t, &s.journey_id).await;
    let retry = upgraded.execute(complete(&s.journey_id, 3, id, Evidence::Guided), None).await.unwrap();
    assert!(retry.replayed, "the retry is answered from the original commit");
    assert_eq!(receipt(&retry), receipt(&original));
    assert_eq!(event_count(&t, &s.journey_id).await, count, "the retry wrote nothing");
    let reused = upgraded.execute(complete(&s.journey_id, 3, id, Evidence::Independent), None).await;
    assert!(matches!(reused, Err(AppError::IdempotencyKeyReused)), "{reused:?}");
    assert_eq!(event_count(&t, &s.journey_id).await, count);
}

/// ADR 0010: `audit verify` finds a commit whose idempotency key is gone (a retry of it would be
/// written again) and a key that names an event not carrying its request id.
async fn a_lost_or_wrong_idempotency_key_is_named_by_audit_verify(t: Arc<TestApp>) {
    let s = t.started().await;
    t.app.execute(complete(&s.journey_id, 3, "ab000000-0000-4000-8000-000000000010", Evidence::Guided), None).await.unwrap();
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None, "a log written by the command path agrees with its keys");

    let moved = format!("UPDATE commit_requests SET first_sequence = 1, last_sequence = 1 WHERE aggregate_id = '{}'", s.journey_id);
    t.raw_sql(&moved, &moved).await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("a key naming other events is found");
    assert_eq!((broken.journey_id.as_str(), broken.sequence), (s.journey_id.as_str(), 1), "{broken:?}");
    assert!(broken.problem.contains("does not carry its request id"), "{broken:?}");

    let deleted = format!("DELETE FROM commit_requests WHERE aggregate_id = '{}'", s.journey_id);
    t.raw_sql(&deleted, &deleted).await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("a lost key is found");
    assert_eq!((broken.journey_id.as_str(), broken.sequence), (s.journey_id.as_str(), 4), "{broken:?}");
    assert!(broken.problem.contains("without its idempotency key"), "{broken:?}");
}

async fn reusing_a_request_id_with_another_input_is_refused_and_writes_nothing(t: Arc<TestApp>) {
    let s = t.started().await;
    let id = "7d444840-9dc0-41d9-8a3c-000000000007";
    t.app.execute(complete(&s.journey_id, 3, id, Evidence::Independent), None).await.unwrap();
    let count = event_count(&t, &s.journey_id).await;
    let state = t.app.load_journey(&s.journey_id).await.unwrap().state;
    let reused = t.app.execute(complete(&s.journey_id, 3, id, Evidence::Guided), None).await;
    assert!(matches!(reused, Err(AppError::IdempotencyKeyReused)), "{reused:?}");
    assert_eq!(event_count(&t, &s.journey_id).await, count);
    assert_eq!(t.app.load_journey(&s.journey_id).await.unwrap().state, state);
}

async fn a_stale_expected_version_is_a_state_conflict_checked_after_the_idempotency_lookup(t: Arc<TestApp>) {
    let s = t.started().await;
    let stale = t.app.execute(complete(&s.journey_id, 2, "0d6f8a8e-1111-4000-8000-000000000001", Evidence::Independent), None).await;
    assert!(matches!(stale, Err(AppError::StateConflict { current: 3 })), "{stale:?}");
    let ok = t.app.execute(complete(&s.journey_id, 3, "0d6f8a8e-1111-4000-8000-000000000002", Evidence::Independent), None).await.unwrap();
    // The same request again names a version that is stale by now, yet gets its original result.
    let retry =
        t.app.execute(complete(&s.journey_id, 3, "0d6f8a8e-1111-4000-8000-000000000002", Evidence::Independent), None).await.unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.state, ok.state);
}

async fn a_modified_event_payload_is_named_by_audit_verify(t: Arc<TestApp>) {
    let s = t.started().await;
    t.app.execute(complete(&s.journey_id, 3, "aa000000-0000-4000-8000-000000000001", Evidence::Independent), None).await.unwrap();
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);
    let out = t.cli(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let last = t.app.store.last_audit_run().await.unwrap().expect("the CLI run is recorded");
    assert!(last.intact && last.events >= 3);

    let sql = |cast: &str| {
        format!(
            "UPDATE events SET payload = {} WHERE aggregate_id = '{}' AND sequence = 4",
            cast.replace("P", "replace(CAST(payload AS TEXT), '0.8', '1.0')"),
            s.journey_id
        )
    };
    t.raw_sql(&sql("P"), &sql("CAST(P AS json)")).await;
    let report = t.app.audit_verify().await.unwrap();
    let broken = report.broken.expect("the tampering is found");
    assert_eq!((broken.journey_id.as_str(), broken.sequence), (s.journey_id.as_str(), 4));
    let out = t.cli(&["audit", "verify"]);
    assert_ne!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&s.journey_id) && stdout.contains("sequence 4"), "{stdout}");
    // The operator API runs and records it too.
    let operator = t.app.create_staff_token(skillpilot::app::identity::Role::Operator).await.unwrap();
    let body: serde_json::Value =
        t.http.post(format!("{}/v1/operator/audit/verify", t.base_url)).bearer_auth(&operator).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["lastVerify"]["intact"], false);
    assert!(body["lastVerify"]["brokenAt"].as_str().unwrap().contains("sequence 4"));
}

async fn a_replay_rebuilds_views_equal_to_the_live_ones_and_spots_a_wrong_one(t: Arc<TestApp>) {
    let a = t.started().await;
    let b = t.started().await;
    t.app.execute(complete(&a.journey_id, 3, "bb000000-0000-4000-8000-000000000001", Evidence::Independent), None).await.unwrap();
    t.app.execute(choose(&a.journey_id, OptionChoice::Mode { mode: Mode::VerifiedRecall }), None).await.unwrap();
    t.app.execute(choose(&b.journey_id, OptionChoice::Locale { locale: "en".into() }), None).await.unwrap();
    let report = t.app.replay().await.unwrap();
    assert_eq!(report.journeys, 2);
    assert!(report.differing.is_empty(), "{:?}", report.differing);
    assert!(report.analytics_differing.is_empty(), "{:?}", report.analytics_differing);
    let out = t.cli(&["replay"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    t.raw_sql(
        &format!("UPDATE journey_context_view SET payload = '{{}}' WHERE view_id = '{}'", b.journey_id),
        &format!("UPDATE journey_context_view SET payload = '{{}}' WHERE view_id = '{}'", b.journey_id),
    )
    .await;
    let report = t.app.replay().await.unwrap();
    assert_eq!(report.differing, vec![b.journey_id.clone()]);
    // The operator swaps the rebuilt view in; then live equals the log again.
    let out = t.cli(&["replay"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stdout));
    let out = t.cli(&["replay", "--swap"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(t.app.replay().await.unwrap().differing.is_empty());

    // The analytics are rebuilt into their shadow tables too: a wrong count is spotted and swapped out.
    let bump = "UPDATE analytics_daily_activity SET events = events + 1";
    t.raw_sql(bump, bump).await;
    assert_eq!(t.app.replay().await.unwrap().analytics_differing, vec!["daily_activity".to_owned()]);
    let out = t.cli(&["replay", "--swap"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report = t.app.replay().await.unwrap();
    assert!(report.analytics_differing.is_empty() && report.differing.is_empty(), "{report:?}");
}

async fn a_snapshot_loads_to_the_same_state_as_the_full_fold(t: Arc<TestApp>) {
    let s = t.started().await;
    // 120 autopilot switches: well past one snapshot interval.
    for i in 0..120 {
        t.app.execute(choose(&s.journey_id, OptionChoice::Autopilot { autopilot: i % 2 == 0 }), None).await.unwrap();
    }
    // A fresh process has nothing cached: it starts from the snapshot.
    let fresh = t.another_process().await;
    let loaded = fresh.load_journey(&s.journey_id).await.unwrap();
    assert!(loaded.snapshot_version >= 100, "a snapshot was taken: {}", loaded.snapshot_version);
    let folded: LearningJourney = t.app.fold_upto(&s.journey_id, loaded.state.version).await.unwrap();
    assert_eq!(*loaded.state, folded);
    assert_eq!(loaded.state.version, 123);
    fresh.store.close().await;
}

async fn a_cached_journey_equals_the_full_fold_after_another_process_wrote_and_the_cache_is_bounded(t: Arc<TestApp>) {
    let s = t.started().await;
    t.app.execute(choose(&s.journey_id, OptionChoice::Autopilot { autopilot: true }), None).await.unwrap();
    let cached = t.app.load_journey(&s.journey_id).await.unwrap();
    // Another instance behind the same load balancer writes; this one must see it.
    let other = t.another_process().await;
    for i in 0..30 {
        other.execute(choose(&s.journey_id, OptionChoice::Autopilot { autopilot: i % 2 == 1 }), None).await.unwrap();
    }
    let loaded = t.app.load_journey(&s.journey_id).await.unwrap();
    assert_eq!(loaded.state.version, cached.state.version + 30);
    assert_eq!(*loaded.state, t.app.fold_upto(&s.journey_id, loaded.state.version).await.unwrap());
    assert_eq!(loaded.last_hash, other.load_journey(&s.journey_id).await.unwrap().last_hash);
    // A write from here on the state the other process left.
    t.app.execute(choose(&s.journey_id, OptionChoice::Autopilot { autopilot: false }), None).await.unwrap();
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);
    other.store.close().await;

    let bounded = t.another_process_with(|settings| settings.journey_cache = 3).await;
    for _ in 0..5 {
        let j = t.started().await;
        bounded.load_journey(&j.journey_id).await.unwrap();
        assert!(bounded.journeys_cached() <= 3, "{} > 3", bounded.journeys_cached());
    }
    assert_eq!(bounded.journeys_cached(), 3);
    bounded.store.close().await;
}

async fn a_view_lost_between_commit_and_update_is_caught_up(t: Arc<TestApp>) {
    let s = t.started().await;
    t.app.execute(complete(&s.journey_id, 3, "cc000000-0000-4000-8000-000000000001", Evidence::Independent), None).await.unwrap();
    // Simulate a crash after the commit: the view still shows the begun journey.
    t.raw_sql(
        &format!("UPDATE journey_context_view SET version = 3, payload = '{{}}' WHERE view_id = '{}'", s.journey_id),
        &format!("UPDATE journey_context_view SET version = 3, payload = '{{}}' WHERE view_id = '{}'", s.journey_id),
    )
    .await;
    assert_eq!(t.app.catch_up_views().await.unwrap(), 1);
    assert!(t.app.replay().await.unwrap().differing.is_empty());
}

async fn starting_a_session_never_changes_the_state_version(t: Arc<TestApp>) {
    let token = t.learner("Bo").await;
    let principal = t.principal(&token).await;
    let first = t.app.start_session(&principal, Default::default()).await.unwrap();
    let v1 = t.app.load_journey(&first.journey_id).await.unwrap().state.version;
    let second = t.app.start_session(&principal, Default::default()).await.unwrap();
    assert_eq!(first.journey_id, second.journey_id, "one journey per learner and curriculum");
    assert_ne!(first.session_id, second.session_id);
    assert_eq!(t.app.load_journey(&first.journey_id).await.unwrap().state.version, v1);
}

async fn concurrent_first_sessions_create_one_started_journey(t: Arc<TestApp>) {
    let token = t.learner("Cy").await;
    let principal = t.principal(&token).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let t = t.clone();
        let p = principal.clone();
        tasks.push(tokio::spawn(async move { t.app.start_session(&p, Default::default()).await }));
    }
    let mut journeys = std::collections::BTreeSet::new();
    for task in tasks {
        journeys.insert(task.await.unwrap().unwrap().journey_id);
    }
    assert_eq!(journeys.len(), 1);
    let journey = journeys.into_iter().next().unwrap();
    let events = t.app.store.events_after(&journey, 0).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.event_type == "JourneyStarted").count(), 1);
}

/// Deletes the newest `n` events of a journey (or, with `None`, all of them).
async fn delete_tail(t: &TestApp, journey: &str, n: Option<u64>) {
    let sql = match n {
        Some(n) => format!(
            "DELETE FROM events WHERE aggregate_id = '{journey}' AND sequence > (SELECT MAX(sequence) - {n} FROM events WHERE aggregate_id = '{journey}')"
        ),
        None => format!("DELETE FROM events WHERE aggregate_id = '{journey}'"),
    };
    t.raw_sql(&sql, &sql).await;
}

/// Removes what is left of a journey, so the next case starts from an intact log.
async fn forget_journey(t: &TestApp, journey: &str) {
    for table in ["events WHERE aggregate_id", "commit_requests WHERE aggregate_id", "journey_context_view WHERE view_id"] {
        let sql = format!("DELETE FROM {table} = '{journey}'");
        t.raw_sql(&sql, &sql).await;
    }
}

async fn a_deleted_tail_is_found_by_audit_verify_and_replay_refuses_to_swap_it_live(t: Arc<TestApp>) {
    // The newest event deleted: the remaining chain is intact, but the view is ahead of it.
    let a = t.started().await;
    t.app.execute(complete(&a.journey_id, 3, "cc000000-0000-4000-8000-000000000001", Evidence::Independent), None).await.unwrap();
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);
    delete_tail(&t, &a.journey_id, Some(1)).await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("a deleted newest event is found");
    assert_eq!(broken.journey_id, a.journey_id);
    assert!(broken.problem.contains("were deleted"), "{}", broken.problem);
    let out = t.cli(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    let out = t.cli(&["replay", "--swap"]);
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("REFUSING --swap"));
    forget_journey(&t, &a.journey_id).await;
    assert_eq!(t.app.audit_verify().await.unwrap().broken, None);

    // The newest two deleted.
    let b = t.started().await;
    t.app.execute(complete(&b.journey_id, 3, "cc000000-0000-4000-8000-000000000002", Evidence::Independent), None).await.unwrap();
    delete_tail(&t, &b.journey_id, Some(2)).await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("two deleted events are found");
    assert_eq!(broken.journey_id, b.journey_id);
    forget_journey(&t, &b.journey_id).await;

    // A whole journey truncated.
    let c = t.started().await;
    delete_tail(&t, &c.journey_id, None).await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("a truncated journey is found");
    assert_eq!(broken.journey_id, c.journey_id);
    assert!(broken.problem.contains("no events left"), "{}", broken.problem);
    forget_journey(&t, &c.journey_id).await;

    // Tail and view row deleted together: the checkpoint of the last clean verify still knows.
    let d = t.started().await;
    t.app.execute(complete(&d.journey_id, 3, "cc000000-0000-4000-8000-000000000003", Evidence::Independent), None).await.unwrap();
    assert_eq!(t.app.audit_verify_recorded(usize::MAX, |_| {}).await.unwrap().broken, None);
    delete_tail(&t, &d.journey_id, Some(1)).await;
    let sql = format!("DELETE FROM journey_context_view WHERE view_id = '{}'", d.journey_id);
    t.raw_sql(&sql, &sql).await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("the checkpoint finds the deletion");
    assert_eq!(broken.journey_id, d.journey_id);
    assert!(broken.problem.contains("checkpoint 1 recorded"), "{}", broken.problem);
    // And a removed checkpoint breaks the checkpoint chain itself.
    forget_journey(&t, &d.journey_id).await;
    t.app.store.record_checkpoint(1, &Default::default()).await.unwrap();
    t.raw_sql("DELETE FROM chain_checkpoints WHERE seq = 1", "DELETE FROM chain_checkpoints WHERE seq = 1").await;
    let broken = t.app.audit_verify().await.unwrap().broken.expect("a removed checkpoint is found");
    assert!(broken.problem.contains("a checkpoint was removed"), "{}", broken.problem);
}

both_stores!(
    a_deleted_tail_is_found_by_audit_verify_and_replay_refuses_to_swap_it_live,
    appended_events_load_back_into_the_same_state,
    thirty_two_concurrent_writers_on_one_version_produce_exactly_one_success,
    a_retry_storm_has_exactly_one_effect_and_every_retry_gets_the_original_receipt,
    reusing_a_request_id_with_another_input_is_refused_and_writes_nothing,
    a_retry_of_a_commit_written_before_the_commit_key_migration_gets_its_original_result,
    a_lost_or_wrong_idempotency_key_is_named_by_audit_verify,
    a_stale_expected_version_is_a_state_conflict_checked_after_the_idempotency_lookup,
    a_modified_event_payload_is_named_by_audit_verify,
    a_replay_rebuilds_views_equal_to_the_live_ones_and_spots_a_wrong_one,
    a_snapshot_loads_to_the_same_state_as_the_full_fold,
    a_cached_journey_equals_the_full_fold_after_another_process_wrote_and_the_cache_is_bounded,
    a_view_lost_between_commit_and_update_is_caught_up,
    starting_a_session_never_changes_the_state_version,
    concurrent_first_sessions_create_one_started_journey,
);
crate::through_pgbouncer!(
    a_deleted_tail_is_found_by_audit_verify_and_replay_refuses_to_swap_it_live,
    a_retry_storm_has_exactly_one_effect_and_every_retry_gets_the_original_receipt,
    a_cached_journey_equals_the_full_fold_after_another_process_wrote_and_the_cache_is_bounded,
);

mod extra {
    //! Context equality after a mutation (R-7a) and reading old event versions (R-6c).
    use std::sync::Arc;

    use aggregates::learning_journey::OptionChoice;
    use projections::full_context::{CapabilityStep, Sealer};
    use skillpilot::app::journeys::view_of;

    use super::{choose, complete};
    use crate::both_stores;
    use crate::helpers::TestApp;
    use aggregates::learning_journey::{Evidence, Mode};

    /// Tokens as their claims, so contexts compare by decoded claims.
    struct Claims;
    impl Sealer for Claims {
        fn seal_option(&self, v: u64, choice: &OptionChoice) -> String {
            format!("{v}:{choice:?}")
        }
        fn seal_capability(&self, instance: u64, step: CapabilityStep, v: u64) -> String {
            format!("{instance}:{step:?}:{v}")
        }
    }

    async fn the_context_after_a_mutation_equals_a_fresh_read_of_that_version(t: Arc<TestApp>) {
        let s = t.started().await;
        let tz = chrono_tz::Tz::Europe__Berlin;
        let steps = [
            complete(&s.journey_id, 3, "dd000000-0000-4000-8000-000000000001", Evidence::Independent),
            choose(&s.journey_id, OptionChoice::Mode { mode: Mode::VerifiedRecall }),
        ];
        for step in steps {
            let done = t.app.execute(step, None).await.unwrap();
            let fresh = t.app.load_journey(&s.journey_id).await.unwrap();
            assert_eq!(fresh.state.version, done.state.version);
            let pack = t.app.pack_of(&fresh.state).unwrap();
            assert_eq!(t.app.context_of(&done.state, &done.pack, tz, &Claims), t.app.context_of(&fresh.state, &pack, tz, &Claims));
            assert_eq!(view_of(&done.state, &done.pack), view_of(&fresh.state, &pack));
        }
        // The plan status follows the injected clock in the learner's time zone.
        let state = t.app.load_journey(&s.journey_id).await.unwrap().state;
        let pack = t.app.pack_of(&state).unwrap();
        assert_eq!(t.app.context_of(&state, &pack, tz, &Claims).plan_status.today.done, 1);
        t.clock.advance(chrono::Duration::days(1));
        let next_day = t.app.context_of(&state, &pack, tz, &Claims).plan_status;
        assert_eq!((next_day.today.done, next_day.week.done), (0, 1));
    }

    async fn an_event_of_an_old_schema_version_is_still_read(t: Arc<TestApp>) {
        let s = t.started().await;
        // Rewrite the stored GoalActivated as its version-0 form (no `at`), as an old release wrote it.
        let sql = |cast: &str| {
            format!(
                "UPDATE events SET event_version = '0', payload = {} WHERE aggregate_id = '{}' AND sequence = 3",
                cast.replace("P", "'{\"GoalActivated\":{\"goalId\":\"part-of-whole\"}}'"),
                s.journey_id
            )
        };
        t.raw_sql(&sql("P"), &sql("CAST(P AS json)")).await;
        let loaded = t.app.load_journey(&s.journey_id).await.unwrap();
        assert_eq!(loaded.state.active_goal.as_deref(), Some("part-of-whole"));
        assert_eq!(loaded.state.version, 3);
    }

    both_stores!(the_context_after_a_mutation_equals_a_fresh_read_of_that_version, an_event_of_an_old_schema_version_is_still_read);
}

fn receipt(executed: &Executed) -> Receipt {
    Receipt::of_commit(executed.committed.first().map(|(_, e)| e), &executed.state, &executed.pack)
}
