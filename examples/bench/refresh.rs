//! Refresh of 1, 100, 1000 and 5000 active (held) jobs: time, bytes, round trips, slurmctld RPCs;
//! on a queue of only ours, then again with 1,000 other held jobs of the same Slurm user queued
//! (`BENCH_FOREIGN`, issue 38), whose floor is then the cheaper of two local queries that give our
//! jobs: all the user's jobs, or ours by id (`-j`).

use crate::common::*;
use crate::report::at_most;
use serde_json::{json, Value};
use std::time::Instant;
use tao_slurm::ops::refresh::{refresh_script, RefreshTarget};
use tao_slurm::slurm::query::SQUEUE_FORMAT;
use tao_slurm::Client;
use tao_slurm_engine::remote::{self, Idempotency};
use tao_slurm_engine::store::Store;

const RUNS: usize = 7;
pub const SIZES: [usize; 4] = [1, 100, 1000, 5000];

fn local_squeue(args: &[&str]) -> f64 {
    let t = Instant::now();
    let out = local_slurm("squeue").args(args).output().unwrap();
    assert!(out.status.success());
    ms(t.elapsed())
}

pub fn refresh() -> Value {
    let foreign: usize = std::env::var("BENCH_FOREIGN").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let mut runs = vec![refresh_with(0)];
    if foreign > 0 {
        runs.push(refresh_with(foreign));
    }
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    let mut leftover = Vec::new();
    for r in runs {
        rows.extend(r["rows"].as_array().unwrap().iter().cloned());
        targets.extend(r["targets"].as_array().unwrap().iter().cloned());
        leftover.push(r["jobs_of_others_listed_at_start"].clone());
    }
    json!({"rows": rows, "targets": targets, "jobs_of_others_listed_at_start": leftover})
}

/// The refresh rows with `foreign` held jobs of the same Slurm user queued that are not ours.
fn refresh_with(foreign: usize) -> Value {
    // One state file that grows: 1, then 100, ... jobs, all held, all recorded.
    let user = User::new(Some(300));
    let settings = user.settings();
    let client = Client::new(settings.clone()).unwrap();
    let mut all_ids: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    let slurm_user = settings.slurm_user.clone().unwrap();
    let leftover = wait_for_empty_queue(&settings, std::time::Duration::from_secs(300));
    let others = held_jobs(&settings, foreign);
    for n in SIZES {
        let add = held_jobs(&settings, n - all_ids.len());
        record_jobs(&settings, &add);
        all_ids.extend(add);
        // Warm: the master is up and the first refresh has stored the jobs' pending state. Then wait
        // until the controller has settled (it sends the new jobs' records to slurmdbd for a while,
        // which slows every squeue): floor and refresh are timed under the same conditions.
        assert_eq!(client.refresh(&[]).unwrap().len(), n);
        wait_for_idle_controller(std::time::Duration::from_secs(60));
        let before = client.transport_stats();
        sdiag_reset();
        let rpc_before = sdiag_counts();
        // These runs are counted (round trips, bytes, RPCs); the timed ones follow, interleaved.
        let mut times = Vec::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            let views = client.refresh(&[]).unwrap();
            times.push(ms(t.elapsed()));
            assert_eq!(views.len(), n);
            assert!(views.iter().all(|v| !v.status.is_terminal()), "a held job reached a verdict");
        }
        let rpc_after = sdiag_counts();
        let after = client.transport_stats();
        let rpcs = rpc_delta(&rpc_before, &rpc_after, RUNS as f64);
        // Where the time goes: the same remote script alone, squeue alone (both over the same
        // transport), one load of the N summaries; and the floor, one squeue of all the user's jobs on
        // the login node itself with the same fields. Each run times all of them in turn, so that a
        // drift of the shared machine affects them alike.
        let store = Store::open(&settings.state_path).unwrap();
        let jobs = store.list_summaries(true).unwrap();
        let targets: Vec<RefreshTarget> = jobs.iter().map(RefreshTarget::of).collect();
        let script = refresh_script(&targets);
        let squeue_alone = format!("squeue --me -t all -h -O '{SQUEUE_FORMAT}' >/dev/null");
        let transport = remote::connect(&settings).unwrap();
        transport.run_script(&script, Idempotency::Idempotent).unwrap();
        let timed = |f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            ms(t.elapsed())
        };
        let (mut floor, mut short, mut script_ms, mut squeue_ms, mut list_ms, mut again) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        // With other jobs of the user queued, the floor is the cheaper of two local queries that give
        // our jobs: all the user's jobs, or ours by id (squeue matches each job against each id).
        let all_args = vec!["-u", slurm_user.as_str(), "-t", "all", "-h", "-O", SQUEUE_FORMAT];
        let ours = if all_ids.len() == 1 { format!("{0},{0}", all_ids[0]) } else { all_ids.join(",") };
        let mut by_id_args = all_args.clone();
        by_id_args.extend(["-j", ours.as_str()]);
        let mut by_id = Vec::new();
        for _ in 0..RUNS {
            floor.push(local_squeue(&all_args));
            if foreign > 0 {
                by_id.push(local_squeue(&by_id_args));
            }
            short.push(local_squeue(&["-h", "-o", "%i|%T|%r"]));
            script_ms.push(timed(&mut || drop(transport.run_script(&script, Idempotency::Idempotent).unwrap())));
            squeue_ms.push(timed(&mut || drop(transport.run_script(&squeue_alone, Idempotency::Idempotent).unwrap())));
            list_ms.push(timed(&mut || assert_eq!(store.list_summaries(true).unwrap().len(), n)));
            again.push(timed(&mut || assert_eq!(client.refresh(&[]).unwrap().len(), n)));
        }
        let script_ms = median(script_ms);
        let squeue_ms = median(squeue_ms);
        let list_ms = median(list_ms);
        rows.push(json!({
            "jobs": n,
            "foreign_jobs": foreign,
            "refresh_ms_median": median(again.clone()),
            "refresh_ms_all": again,
            "refresh_ms_counted_runs": times,
            "floor_squeue_ms_median": if foreign > 0 { median(floor).min(median(by_id)) } else { median(floor) },
            "floor_squeue_short_ms_median": median(short),
            "round_trips_per_refresh": (after.round_trips - before.round_trips) as f64 / RUNS as f64,
            "bytes_sent_per_refresh": (after.bytes_sent - before.bytes_sent) / RUNS as u64,
            "bytes_received_per_refresh": (after.bytes_received - before.bytes_received) / RUNS as u64,
            "remote_script_ms_median": script_ms,
            "remote_squeue_ms_median": squeue_ms,
            "store_list_ms": list_ms,
            "slurmctld_rpcs_total_per_refresh": rpc_total(&rpcs),
            "slurmctld_rpcs_per_refresh": rpcs,
        }));
        eprintln!("bench: refresh of {n} jobs done");
    }
    scancel_remote(&settings, &all_ids);
    scancel_remote(&settings, &others);
    let mut targets = Vec::new();
    let max_rt = rows.iter().map(|r| r["round_trips_per_refresh"].as_f64().unwrap()).fold(0.0, f64::max);
    targets.push(at_most("refresh", "one round trip per refresh (any N)", max_rt, 1.0, "round trips"));
    for r in &rows {
        targets.push(at_most(
            "refresh",
            &if foreign > 0 {
                format!("{} jobs, {foreign} others queued: within 2x the floor (the cheaper local squeue: all, or ours by id)", r["jobs"])
            } else {
                format!("{} jobs: within 2x the floor (local squeue)", r["jobs"])
            },
            r["refresh_ms_median"].as_f64().unwrap(),
            2.0 * r["floor_squeue_ms_median"].as_f64().unwrap(),
            "ms",
        ));
    }
    let rpc = |r: &Value| r["slurmctld_rpcs_total_per_refresh"].as_f64().unwrap();
    let (first, last) = (rows.first().unwrap(), rows.last().unwrap());
    targets.push(at_most(
        "refresh",
        &format!("scheduler RPCs independent of N ({} jobs vs 1, {foreign} others queued)", last["jobs"]),
        rpc(last),
        rpc(first),
        "RPCs",
    ));
    json!({"rows": rows, "targets": targets, "jobs_of_others_listed_at_start": leftover})
}
