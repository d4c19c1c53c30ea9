//! Curriculum packs over time (docs/content.md): two versions side by side, the refusal of an
//! in-place edit of a published version, the second shipped curriculum, and the authors' check.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use skillpilot::app::sessions::StartSession;

use crate::both_stores;
use crate::helpers::{content_dir, TestApp};
use crate::mcp_contract::call;

/// A copy of the shipped fractions pack in `root/<folder>`, its `pack.json` changed by `edit`.
fn fractions_copy(root: &Path, folder: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let src = content_dir().join("fractions");
    let dir = root.join(folder);
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    for asset in std::fs::read_dir(src.join("assets")).unwrap() {
        let asset = asset.unwrap().path();
        std::fs::copy(&asset, dir.join("assets").join(asset.file_name().unwrap())).unwrap();
    }
    let mut pack: Value = serde_json::from_str(&std::fs::read_to_string(src.join("pack.json")).unwrap()).unwrap();
    edit(&mut pack);
    std::fs::write(dir.join("pack.json"), serde_json::to_string_pretty(&pack).unwrap()).unwrap();
    dir
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sp_content_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const V2_TEACHING: &str = "Version 2: Ein Bruch beschreibt gleich große Teile eines Ganzen.";

/// Contract: published packs stay unchanged; a correction ships as a new version. A journey
/// keeps the version it started on; a journey started after version 2 is installed gets it.
async fn running_journeys_keep_their_pack_version_and_new_ones_get_the_newest(t: Arc<TestApp>) {
    let old = t.started().await;
    let root = scratch();
    fractions_copy(&root, "fractions-v2", |p| {
        p["version"] = json!(2);
        p["goals"][1]["teaching"]["de"] = json!(V2_TEACHING);
    });
    // Another instance on the same database, with version 2 installed beside the shipped 1.
    let next = t.another_process_with(|s| s.content_dir = Some(root.clone())).await;
    std::fs::remove_dir_all(&root).ok();
    let kept = next.load_journey(&old.journey_id).await.unwrap().state;
    assert_eq!(kept.info.as_ref().unwrap().pack_version, 1, "the running journey keeps version 1");
    let tz = chrono_tz::UTC;
    let teaching = |app: &skillpilot::app::App, state: &aggregates::learning_journey::LearningJourney| {
        let pack = app.pack_of(state).unwrap();
        app.context_of(state, &pack, tz, &skillpilot::app::tokens::NoTokens).active_goal.map(|g| g.teaching).unwrap_or_default()
    };
    assert!(!teaching(&next, &kept).starts_with("Version 2"), "its text is version 1's");

    let token = t.learner("Grace").await;
    let principal = next.authenticate(&token).await.unwrap();
    let fresh = next.start_session(&principal, StartSession::default()).await.unwrap();
    let mut state = next.load_journey(&fresh.journey_id).await.unwrap().state;
    assert_eq!(state.info.as_ref().unwrap().pack_version, 2, "a new journey starts on the newest version");
    let begin = skillpilot::app::journeys::CommandRequest {
        journey_id: fresh.journey_id.clone(),
        command: aggregates::learning_journey::JourneyCommand::ChooseOption {
            choice: aggregates::learning_journey::OptionChoice::Continue,
        },
        expected_version: Some(state.version),
        identity: None,
        tool: "test",
        actor: skillpilot::app::journeys::Actor::Learner,
        call: None,
    };
    state = next.execute(begin, None).await.unwrap().state;
    assert_eq!(teaching(&next, &state), V2_TEACHING);
    next.store.close().await;
}

/// Contract: a published version is never changed in place. Start-up refuses an installed pack
/// whose content differs from what this database recorded for its id and version, naming both;
/// the same content in another layout is no change.
async fn an_in_place_edit_of_a_published_version_is_refused_at_start_up(t: Arc<TestApp>) {
    let root = scratch();
    fractions_copy(&root, "fractions-edited", |p| p["goals"][1]["cards"][1]["answer"]["en"] = json!("3/8 (edited)"));
    let err = skillpilot::startup::build_app(
        {
            let mut s = t.app.settings.clone();
            s.content_dir = Some(root.clone());
            s
        },
        t.clock.clone(),
    )
    .await
    .err()
    .expect("an edited published version is refused");
    let message = format!("{err:#}");
    assert!(message.contains("content pack `fractions` version 1"), "{message}");
    assert!(message.contains("never changed in place") && message.contains("version 2"), "{message}");
    std::fs::remove_dir_all(&root).ok();

    // Re-indented, same content: accepted.
    let root = scratch();
    fractions_copy(&root, "fractions-reindented", |_| {});
    let same = t.another_process_with(|s| s.content_dir = Some(root.clone())).await;
    std::fs::remove_dir_all(&root).ok();
    assert_eq!(same.catalog.latest("fractions").unwrap().version, 1);
    same.store.close().await;
}

/// The second shipped curriculum is real: a learner starts on it by id over HTTP, the coach
/// begins it over MCP, and its first goal is taught in the learner's language.
async fn the_second_curriculum_runs_beside_the_first(t: Arc<TestApp>) {
    let token = t.learner("Ada").await;
    let r = t
        .http
        .post(format!("{}/v1/learning-sessions", t.base_url))
        .bearer_auth(&token)
        .json(&json!({"curriculumId": "percentages", "locale": "en", "timeZone": "UTC"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let (err, ctx) = call(&t, &token, "get_skillpilot_learning_context", json!({})).await;
    assert!(!err, "{ctx}");
    assert_eq!(ctx["requiredAction"], "awaitLearnerContinuation", "its first goal has a picture: {ctx}");
    let sid = ctx["learningSessionId"].clone();
    let (err, begun) =
        call(&t, &token, "choose_skillpilot_option", json!({"learningSessionId": sid, "option": ctx["options"][0]["payload"]})).await;
    assert!(!err, "{begun}");
    assert_eq!(begun["context"]["activeGoal"]["title"], "Percent as hundredths", "{begun}");
    assert_eq!(begun["context"]["progress"], json!({"mastered": 0, "total": 5}));
    assert_eq!(begun["continuation"]["toolCall"]["arguments"]["goalId"], "hundredths");
    // A learner naming no curriculum gets the default one.
    let other = t.learner("Bo").await;
    let principal = t.principal(&other).await;
    let s = t.app.start_session(&principal, StartSession::default()).await.unwrap();
    let state = t.app.load_journey(&s.journey_id).await.unwrap().state;
    assert_eq!(state.info.as_ref().unwrap().curriculum_id, "fractions");
}

both_stores!(
    running_journeys_keep_their_pack_version_and_new_ones_get_the_newest,
    an_in_place_edit_of_a_published_version_is_refused_at_start_up,
    the_second_curriculum_runs_beside_the_first,
);

fn content_check(dir: &Path) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skillpilot")).args(["content", "check"]).arg(dir).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// `skillpilot content check` needs no database: the shipped packs pass with their goal graph;
/// a broken pack fails with the file, the field and the reason.
#[test]
fn content_check_prints_the_goal_graph_or_the_first_problem_with_file_and_field() {
    let (code, out) = content_check(&content_dir());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("fractions@1") && out.contains("percentages@1"), "{out}");
    assert!(out.contains("area basics") && out.contains("simplify \"Brüche kürzen\" — 3 cards; needs equivalent"), "{out}");
    assert!(out.contains("2 pack(s) checked, 0 with errors"), "{out}");

    let root = scratch();
    let broken = fractions_copy(&root, "broken", |p| {
        p["goals"][2]["cards"][1]["answer"].as_object_mut().unwrap().remove("en");
    });
    std::fs::write(broken.join("assets/unused.svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\"/>").unwrap();
    let (code, out) = content_check(&broken);
    assert_eq!(code, 1, "{out}");
    let file = broken.join("pack.json").display().to_string();
    assert!(out.contains(&format!("error: {file}: goals[2].cards[1].answer.en: missing text for locale `en`")), "{out}");
    let fine = fractions_copy(&root, "fine", |_| {});
    std::fs::write(fine.join("assets/unused.svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\"/>").unwrap();
    let (code, out) = content_check(&fine);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("unused.svg is used by no goal"), "{out}");
    std::fs::remove_dir_all(&root).ok();
}
