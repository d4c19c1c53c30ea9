//! What the operator commands print: `audit verify`, `replay` and the `bench` table with its
//! verdict.

use crate::app::App;

/// `audit verify`: 0 when every chain is intact, 2 naming the first broken link.
pub(super) async fn audit_verify(app: &App) -> anyhow::Result<i32> {
    let report = app
        .audit_verify_recorded(10_000, |n| eprintln!("audit verify: {n} events checked …"))
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the events: {}", e.code()))?;
    match report.broken {
        None => {
            println!("audit verify: ok — {} streams, {} events, every chain intact", report.streams, report.events);
            Ok(0)
        }
        Some(b) => {
            println!("audit verify: BROKEN — journey {} sequence {}: {}", b.journey_id, b.sequence, b.problem);
            Ok(2)
        }
    }
}

/// `replay`: 0 when the rebuilt views equal the live ones (or were swapped in), 3 otherwise.
pub(super) async fn replay(app: &App, swap: bool) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let report = app.replay().await.map_err(|e| anyhow::anyhow!("replay failed: {}", e.code()))?;
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { report.events as f64 / secs } else { 0.0 };
    if report.differing.is_empty() && report.analytics_differing.is_empty() {
        println!(
            "replay: ok — {} journeys, {} events folded ({rate:.0} events/s), shadow views equal the live ones",
            report.journeys, report.events
        );
        Ok(0)
    } else if swap {
        let behind = app.journeys_behind_their_views().await.map_err(|e| anyhow::anyhow!("replay failed: {}", e.code()))?;
        if !behind.is_empty() {
            println!(
                "replay: REFUSING --swap — the log of {} journeys ends before their live views ({}): their newest events were deleted, and swapping would make the loss live. Run `skillpilot audit verify` and restore from a backup.",
                behind.len(),
                behind.join(", ")
            );
            return Ok(5);
        }
        let n = app.swap_in_shadow_views().await.map_err(|e| anyhow::anyhow!("swap failed: {}", e.code()))?;
        app.swap_in_replayed_analytics().await.map_err(|e| anyhow::anyhow!("swap failed: {}", e.code()))?;
        println!(
            "replay: {} of {} journeys and the analytics {:?} differed; the rebuilt views ({n} context rows) are now live",
            report.differing.len(),
            report.journeys,
            report.analytics_differing
        );
        Ok(0)
    } else {
        println!(
            "replay: DIFFERENT — {} of {} journeys differ: {}; analytics differ: {:?} (run with --swap to put the rebuilt views live)",
            report.differing.len(),
            report.journeys,
            report.differing.join(", "),
            report.analytics_differing
        );
        Ok(3)
    }
}

/// The bench table, then every ratio against its target with met/missed.
#[cfg(feature = "bench")]
pub(super) fn print_bench(r: &serde_json::Value) {
    println!("store: {}", r["store"].as_str().unwrap_or(""));
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10} {:>12} {:>12} {:>10}",
        "coaches",
        "writes/s",
        "reads/s",
        "w p50 ms",
        "w p99 ms",
        "inserts/s",
        "ins p99 ms",
        "pgbench/s",
        "cpu/w+r ms",
        "cpu/ins ms",
        "flush/w"
    );
    let num = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
    for l in r["levels"].as_array().into_iter().flatten() {
        println!(
            "{:>6} {:>10.0} {:>10.0} {:>10.2} {:>10.2} {:>12.0} {:>12.2} {:>10} {:>12} {:>12} {:>10}",
            l["concurrency"].as_u64().unwrap_or(0),
            l["load"]["writes"]["per_second"].as_f64().unwrap_or(0.0),
            l["load"]["reads"]["per_second"].as_f64().unwrap_or(0.0),
            l["load"]["writes"]["p50_ms"].as_f64().unwrap_or(0.0),
            l["load"]["writes"]["p99_ms"].as_f64().unwrap_or(0.0),
            l["baseline_insert"]["per_second"].as_f64().unwrap_or(0.0),
            l["baseline_insert"]["p99_ms"].as_f64().unwrap_or(0.0),
            l["pgbench_insert"]["per_second"].as_f64().map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into()),
            num(&l["cost_per_write_with_its_read"]["cpu_ms"]),
            num(&l["cost_per_insert"]["cpu_ms"]),
            num(&l["cost_per_write_with_its_read"]["wal_flushes"]),
        );
    }
    println!("per write at concurrency {} (with its read): {}", r["ratios_at_concurrency"], r["cost_per_write_with_its_read"]);
    println!("per read alone: {}", r["cost_per_read"]);
    println!("per insert: {}", r["cost_per_insert"]);
    println!("ratios at concurrency {}:", r["ratios_at_concurrency"]);
    let verdicts = crate::bench::verdicts(&r["ratios"], &r["targets"]);
    for v in &verdicts {
        let judged = match r["verdict"][&v.name].as_str() {
            Some("met") => "met".to_owned(),
            Some("missed") | None => "MISSED".to_owned(),
            Some(other) => other.to_owned(),
        };
        println!("  {:<34} {:>8.2}   target {:<7} {judged}", v.name, v.value, v.target);
    }
    let missed = crate::bench::unmet(r);
    println!(
        "verdict: {} of {} targets met{}",
        verdicts.len() - missed,
        verdicts.len(),
        if missed > 0 { " (--check exits 4)" } else { "" }
    );
    println!("replay: {}", r["replay"]);
    println!("long stream: {}", r["long_stream"]);
    println!("rss: {}", r["rss"]);
}
