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
