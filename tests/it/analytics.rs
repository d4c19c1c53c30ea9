//! Analytics on both stores: the projector folds a seeded journey set into the views, the API
//! serves them as JSON and CSV to analysts only, and on PostgreSQL concurrent writers never make
//! the projector skip an event that was in flight.

use std::sync::Arc;

use aggregates::learning_journey::{Consent, Evidence, JourneyCommand, Mode, OptionChoice};
use serde_json::Value;
use skillpilot::app::identity::Role;
use skillpilot::app::journeys::{Actor, CommandRequest};

use crate::helpers::TestApp;

fn cmd(journey: &str, command: JourneyCommand) -> CommandRequest {
    CommandRequest {
        journey_id: journey.to_owned(),
        command,
        expected_version: None,
        identity: None,
        tool: "test",
        actor: Actor::Learner,
        call: None,
    }
}

/// Three learners: one completes a goal, one also runs a recall batch with one failure.
async fn seed(t: &TestApp) -> Vec<String> {
    let mut journeys = Vec::new();
    for i in 0..3 {
        let s = t.started().await;
        if i > 0 {
            t.app
                .execute(
                    cmd(
                        &s.journey_id,
                        JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseAndContinue },
                    ),
                    None,
                )
                .await
                .unwrap();
        }
        if i == 2 {
            let started = t
                .app
                .execute(
                    cmd(&s.journey_id, JourneyCommand::ChooseOption { choice: OptionChoice::Mode { mode: Mode::VerifiedRecall } }),
                    None,
                )
                .await
                .unwrap();
            let instance = started.state.workflow.as_ref().unwrap().instance();
            t.app.execute(cmd(&s.journey_id, JourneyCommand::ReleaseRecallAnswers { instance }), None).await.unwrap();
            t.app
                .execute(cmd(&s.journey_id, JourneyCommand::RecordRecallResults { instance, passed: vec![true, false, true] }), None)
                .await
                .unwrap();
        }
        journeys.push(s.journey_id);
    }
    journeys
}

/// Catches the analytics up until nothing is left to fold. PostgreSQL's projector may not pass
/// a transaction in flight anywhere in the cluster, and a parallel test holds one open on
/// purpose (`an_in_flight_transaction_is_waited_for_not_skipped`) longer than one catch-up's
/// bounded wait; the tests below check the views' content, so they wait as an analyst watching
/// the reported lag would. A projector that never catches up fails here.
async fn caught_up(t: &TestApp) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        t.app.catch_up_analytics().await.unwrap();
        if t.app.analytics_status().await.unwrap().iter().all(|v| v.lag == 0) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the analytics never caught up");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn analytics_views_serve_a_seeded_journey_set_as_json_and_csv(t: Arc<TestApp>) {
    let journeys = seed(&t).await;
    caught_up(&t).await;
    let analyst = t.app.create_staff_token(Role::Analyst).await.unwrap();
    let get = |path: &str| t.http.get(format!("{}{path}", t.base_url)).bearer_auth(&analyst).send();

    let mastery: Value = get("/v1/analytics/goal-mastery").await.unwrap().json().await.unwrap();
    let rows = mastery["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "two journeys completed a goal: {mastery}");
    let third = rows.iter().find(|r| r[0] == journeys[2].as_str()).unwrap();
    // 0.8 + 0.1 − 0.2 + 0.1 after the recall batch.
    assert_eq!(
        (third[1].as_str(), third[2].as_f64(), third[3].as_i64(), third[4].as_i64()),
        (Some("part-of-whole"), Some(0.8), Some(1), Some(1))
    );

    let recall: Value = get("/v1/analytics/recall-outcomes").await.unwrap().json().await.unwrap();
    let passed: i64 = recall["rows"].as_array().unwrap().iter().map(|r| r[2].as_i64().unwrap()).sum();
    let failed: i64 = recall["rows"].as_array().unwrap().iter().map(|r| r[3].as_i64().unwrap()).sum();
    assert_eq!((passed, failed), (2, 1));

    let daily: Value = get("/v1/analytics/daily-activity").await.unwrap().json().await.unwrap();
    let day = &daily["rows"][0];
    let total_events: usize = {
        let mut n = 0;
        t.app.list_events(&Default::default(), |_| n += 1).await.unwrap();
        n
    };
    assert_eq!(
        (day[0].as_str(), day[1].as_u64(), day[2].as_u64(), day[3].as_u64()),
        (Some("2026-03-02"), Some(total_events as u64), Some(2), Some(3))
    );

    let csv = get("/v1/analytics/recall-outcomes?format=csv").await.unwrap();
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let text = csv.text().await.unwrap();
    assert!(text.starts_with("card_id,goal_id,passed,failed\r\n"), "{text}");
    assert_eq!(text.lines().count(), 4);

    let list: Value = get("/v1/analytics").await.unwrap().json().await.unwrap();
    let views = list["views"].as_array().unwrap();
    assert_eq!(views.len(), 5);
    assert!(views.iter().all(|v| v["lag"] == 0), "{list}");
    assert_eq!(get("/v1/analytics/nope").await.unwrap().status(), 404);
    assert_eq!(get("/v1/analytics/exam-results?format=xml").await.unwrap().status(), 400);

    let learner = t.learner("Eve").await;
    let r = t.http.get(format!("{}/v1/analytics/goal-mastery", t.base_url)).bearer_auth(&learner).send().await.unwrap();
    assert_eq!(r.status(), 403);

    // The CLI prints the same view.
    let out = t.cli(&["analytics", "recall-outcomes", "--format", "csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), text);
}

async fn a_projector_racing_concurrent_writers_never_skips_an_event(t: Arc<TestApp>) {
    let mut journeys = Vec::new();
    for _ in 0..8 {
        journeys.push(t.started().await.journey_id);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let projector = {
        let (t, stop) = (t.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                t.app.catch_up_analytics().await.unwrap();
            }
        })
    };
    let mut writers = Vec::new();
    for journey in journeys {
        let t = t.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..25 {
                t.app
                    .execute(
                        cmd(&journey, JourneyCommand::ChooseOption { choice: OptionChoice::Autopilot { autopilot: i % 2 == 0 } }),
                        None,
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    projector.await.unwrap();
    caught_up(&t).await;
    let daily = t.app.analytics_table("daily-activity").await.unwrap();
    let projected: i64 = daily.rows.iter().map(|r| r[1].as_i64().unwrap()).sum();
    let mut total = 0;
    t.app.list_events(&Default::default(), |_| total += 1).await.unwrap();
    assert_eq!(projected, total, "every event projected exactly once");
}

crate::both_stores!(analytics_views_serve_a_seeded_journey_set_as_json_and_csv, a_projector_racing_concurrent_writers_never_skips_an_event);

/// Issue 15: of several instances on one database one runs the background projector (a lease
/// row, no session lock); the others' ticks fold nothing. When the holder stops renewing (it
/// died), another instance takes over once the lease ran out, and the old holder, back, does
/// not run a second projector.
async fn the_background_projector_runs_on_one_instance_and_moves_when_its_lease_runs_out(t: Arc<TestApp>) {
    // Two more instances on the test's database with their own clock, a day ahead: the test's
    // serving instance (which ticks in the background on the test clock) cannot outbid them.
    let clock = Arc::new(skillpilot::clock::ManualClock::at(crate::helpers::t0() + chrono::Duration::days(1)));
    let instance = || skillpilot::startup::build_app(t.app.settings.clone(), clock.clone());
    let (a, b) = (instance().await.unwrap(), instance().await.unwrap());
    assert!(a.project_as_leader().await.unwrap(), "the first instance takes the lease");
    assert!(!b.project_as_leader().await.unwrap(), "the second one does not run the projector");
    assert!(a.is_projector_leader().await.unwrap() && !b.is_projector_leader().await.unwrap());
    let lag = |app: Arc<skillpilot::app::App>| async move { app.store.projector_lag("analytics").await.unwrap() };
    // The holder's ticks until it folded `total` events (at most 5 s): a tick stops before a
    // transaction still in flight anywhere in the cluster — another test's, under a parallel run
    // (through a pooler its transactions last a round trip longer) — and the next tick goes on.
    let folded_by_holder = |app: Arc<skillpilot::app::App>, total: i64| async move {
        for _ in 0..50 {
            if app.store.projector_lag("analytics").await.unwrap().0 == total {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            assert!(app.project_as_leader().await.unwrap(), "the holder keeps its lease");
        }
        app.store.projector_lag("analytics").await.unwrap().0
    };
    a.project_as_leader().await.unwrap();
    t.started().await;
    let (before, total) = lag(a.clone()).await;
    assert!(before < total, "new events wait for the projector");
    assert!(!b.project_as_leader().await.unwrap());
    assert_eq!(lag(b.clone()).await.0, before, "a follower's tick folds nothing");
    assert!(a.project_as_leader().await.unwrap(), "the holder renews");
    assert_eq!(folded_by_holder(a.clone(), total).await, total, "the holder's ticks fold everything");

    // The holder stops renewing (it died): within the lease nobody takes over, after it the next tick does.
    clock.advance(chrono::Duration::seconds(4));
    assert!(!b.project_as_leader().await.unwrap(), "not before the lease ran out");
    clock.advance(chrono::Duration::seconds(2));
    t.started().await;
    assert!(b.project_as_leader().await.unwrap(), "taken over once the lease ran out");
    let total = lag(b.clone()).await.1;
    assert_eq!(folded_by_holder(b.clone(), total).await, total, "the new holder folds what the old one left");
    assert!(!a.project_as_leader().await.unwrap(), "the old holder, back, does not run a second projector");
    assert!(b.is_projector_leader().await.unwrap() && !a.is_projector_leader().await.unwrap());
    a.store.close().await;
    b.store.close().await;
}

crate::both_stores!(the_background_projector_runs_on_one_instance_and_moves_when_its_lease_runs_out);
crate::through_pgbouncer!(
    analytics_views_serve_a_seeded_journey_set_as_json_and_csv,
    a_projector_racing_concurrent_writers_never_skips_an_event,
    the_background_projector_runs_on_one_instance_and_moves_when_its_lease_runs_out,
);

/// The known hole of PostgreSQL event stores: a position taken by a transaction that commits
/// later than a higher one. The projector must wait for it, never skip it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_transaction_is_waited_for_not_skipped() {
    use sqlx::Connection;
    let t = crate::helpers::spawn(crate::helpers::Backend::Postgres).await;
    let a = t.started().await;
    t.app.catch_up_analytics().await.unwrap();
    let projected = |t: &TestApp| {
        let app = t.app.clone();
        async move { app.analytics_table("daily-activity").await.unwrap().rows.iter().map(|r| r[1].as_i64().unwrap()).sum::<i64>() }
    };
    // Started, waiting for the wish to begin, begun.
    assert_eq!(projected(&t).await, 3);

    // A writer takes the next position and stays in flight.
    let mut slow = sqlx::PgConnection::connect(&t.db_url).await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut slow).await.unwrap();
    sqlx::query(&format!(
        "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
         SELECT aggregate_type, 'in-flight', sequence, event_type, event_version, payload, metadata FROM events WHERE aggregate_id = '{}' AND sequence = 1",
        a.journey_id
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    // Another journey commits a higher position meanwhile.
    t.started().await;
    let seen = projected(&t).await;
    assert_eq!(seen, 3, "nothing past the in-flight transaction is applied yet");
    tx.commit().await.unwrap();
    assert_eq!(projected(&t).await, 7, "after its commit every event is applied exactly once");
    t.teardown().await;
}

/// Issue 15: analysts read from a streaming standby (`analytics_db`, created here with
/// `pg_basebackup -R`). Their views are answered by the standby — while its replay is paused
/// they show what it has, not what the primary has — the reported lag includes its replay lag,
/// and every write still goes to the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analysts_read_from_a_streaming_standby_whose_replay_lag_is_reported() {
    use crate::faults::PrivateCluster;
    use skillpilot::store::DbUrl;
    use sqlx::Connection;
    let (primary, standby) = tokio::task::spawn_blocking(|| {
        let primary = PrivateCluster::create();
        let standby = PrivateCluster::standby_of(&primary);
        (primary, standby)
    })
    .await
    .unwrap();
    let mut settings = skillpilot::config::Settings::for_db(DbUrl::parse(&primary.url()));
    settings.analytics_db = Some(DbUrl::parse(&standby.url()));
    settings.content_dir = Some(crate::helpers::content_dir());
    settings.capability_keys = Some(skillpilot::app::tokens::Keys::generate_spec().unwrap());
    let clock = Arc::new(skillpilot::clock::ManualClock::at(crate::helpers::t0()));
    let app = skillpilot::startup::build_app(settings, clock).await.unwrap();
    let start = |name: &'static str| {
        let app = app.clone();
        async move {
            let token = app.create_learner(name).await.unwrap();
            let principal = app.authenticate(&token).await.unwrap();
            let s = app.start_session(&principal, Default::default()).await.unwrap();
            app.execute(cmd(&s.journey_id, JourneyCommand::ChooseOption { choice: OptionChoice::Continue }), None).await.unwrap();
            app.execute(
                cmd(&s.journey_id, JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseOnly }),
                None,
            )
            .await
            .unwrap();
        }
    };
    let events = |rows: &[Vec<Value>]| rows.iter().map(|r| r[1].as_i64().unwrap()).sum::<i64>();
    let on_primary = || {
        let app = app.clone();
        async move { app.store.projector_lag("analytics").await.unwrap().0 }
    };
    start("Ada").await;
    let seen = events(&app.analytics_table("daily-activity").await.unwrap().rows);
    assert_eq!(seen, 5, "started, waiting, begun, completed, waiting again: as the standby replayed them");
    assert_eq!(on_primary().await, 5);
    let overview = app.analytics_overview().await.unwrap();
    let replica = overview.replica.clone().expect("the replica is reported");
    assert!(replica.standby, "the analytics store is a standby in recovery");
    assert!(overview.views.iter().all(|v| v.lag == 0), "{overview:?}");

    // Replay paused: the primary moves on, the standby does not.
    let mut on_standby = sqlx::PgConnection::connect(&standby.url()).await.unwrap();
    sqlx::query("SELECT pg_wal_replay_pause()").execute(&mut on_standby).await.unwrap();
    start("Grace").await;
    app.catch_up_analytics().await.unwrap();
    assert_eq!(on_primary().await, 10, "the primary projected the new journey");
    let answered = events(&app.analytics_table("daily-activity").await.unwrap().rows);
    assert_eq!(answered, 5, "the analysts' read was answered by the paused standby");
    let behind = app.analytics_overview().await.unwrap();
    let daily = behind.views.iter().find(|v| v.name == "daily-activity").unwrap();
    assert_eq!(daily.lag, 5, "the lag counts the events the standby has not replayed: {behind:?}");
    assert!(behind.replica.unwrap().replay_lag_bytes > 0, "and its WAL replay lag in bytes");

    // Replay resumed: the standby catches up and the lag goes back to zero.
    sqlx::query("SELECT pg_wal_replay_resume()").execute(&mut on_standby).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while app.analytics_overview().await.unwrap().views.iter().any(|v| v.lag > 0) {
        assert!(std::time::Instant::now() < deadline, "the standby never caught up");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(events(&app.analytics_table("daily-activity").await.unwrap().rows), 10);
    // Writes never go to the standby: it is read-only, and every command above succeeded.
    let refused = sqlx::query("CREATE TABLE nope (x int)").execute(&mut on_standby).await;
    assert!(refused.is_err(), "a standby refuses writes");
    app.store.close().await;
    if let Some(replica) = &app.analytics_store {
        replica.close().await;
    }
    drop(standby);
    drop(primary);
}
