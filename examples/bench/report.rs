//! Targets (met or missed, by how much) and the markdown report, rendered from the JSON report.

use serde_json::{json, Value};

/// A target of the form `value <= limit`.
pub fn at_most(area: &str, what: &str, value: f64, limit: f64, unit: &str) -> Value {
    let met = value <= limit + 1e-9;
    let margin = if limit > 0.0 {
        let pct = (value / limit - 1.0) * 100.0;
        if met && pct > -0.5 {
            "met, at the limit".to_string()
        } else if met {
            format!("met, {:.0}% under the limit", -pct)
        } else {
            format!("missed by {} {unit} ({:.0}% over)", fmt(value - limit), pct)
        }
    } else if met {
        "met".to_string()
    } else {
        format!("missed by {} {unit}", fmt(value - limit))
    };
    json!({"area": area, "target": what, "value": value, "limit": limit, "unit": unit, "met": met, "margin": margin})
}

pub fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn f(v: &Value) -> String {
    match v {
        Value::Number(n) => fmt(n.as_f64().unwrap_or(0.0)),
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn rpcs(v: &Value) -> String {
    match v.as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            // Types under 0.5 per operation come from other users of the shared cluster.
            .filter(|(_, n)| n.as_f64().unwrap_or(0.0) >= 0.5)
            .map(|(k, n)| format!("{} {}", k.trim_start_matches("REQUEST_"), f(n)))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "0".into(),
    }
}

fn table(md: &mut String, header: &[&str], rows: Vec<Vec<String>>) {
    md.push_str(&format!("| {} |\n|{}|\n", header.join(" | "), vec!["---"; header.len()].join("|")));
    for r in rows {
        md.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    md.push('\n');
}

pub fn markdown(report: &Value) -> String {
    let mut md = String::from("# tao-slurm benchmark report\n\n");
    if let Some(m) = report.get("machine") {
        md.push_str(&format!(
            "Machine: {} cores, sandbox cluster on loopback; generated {}. Times are medians of several runs \
             (other tests may share the cluster: counts are the primary figures).\n\n",
            f(&m["cores"]),
            f(&m["generated"])
        ));
    }
    let mut targets = Vec::new();
    for (_, section) in report.as_object().unwrap() {
        if let Some(Value::Array(t)) = section.get("targets") {
            targets.extend(t.iter().cloned());
        }
    }
    if !targets.is_empty() {
        md.push_str("## Targets\n\n");
        let rows = targets
            .iter()
            .map(|t| {
                vec![
                    f(&t["area"]),
                    f(&t["target"]),
                    format!("{} {}", f(&t["value"]), f(&t["unit"])),
                    format!("{} {}", f(&t["limit"]), f(&t["unit"])),
                    if t["met"].as_bool() == Some(true) { "**met**".into() } else { "**missed**".into() },
                    f(&t["margin"]),
                ]
            })
            .collect();
        table(&mut md, &["area", "target", "measured", "limit", "verdict", "margin"], rows);
    }
    if let Some(s) = report.get("submit") {
        md.push_str("## Submit latency (`Client::create_job`, one small held job)\n\n");
        let rows = ["warm", "cold"]
            .iter()
            .map(|k| {
                let r = &s[*k];
                vec![
                    k.to_string(),
                    f(&r["ms_median"]),
                    f(&r["round_trips"]),
                    f(&r["logins_transport"]),
                    f(&r["logins_sshd_attributed"]),
                    f(&r["runs"]),
                ]
            })
            .collect();
        table(&mut md, &["connection", "ms", "round trips", "logins (transport)", "logins (sshd log)", "runs"], rows);
        md.push_str(&format!(
            "Floor: local `sbatch --parsable --hold --wrap true` {} ms + one round trip on the warm master (a plain \
             `ssh` over the ControlMaster) {} ms = {} ms. One round trip of the transport's persistent shell: {} ms.\n\n",
            f(&s["floor"]["sbatch_local_ms_median"]),
            f(&s["floor"]["round_trip_ms_median"]),
            f(&s["floor"]["total_ms"]),
            f(&s["floor"]["session_round_trip_ms_median"])
        ));
        md.push_str(&format!(
            "The online checks alone (`scontrol show partition` and the paths, one round trip; a warm submit makes them only when what they found is older than `TAO_SLURM_CHECKS_TTL_SECS`) take {} ms.\n\n",
            f(&s["warm"]["check_online_ms_median"])
        ));
        if let Some(c) = s.get("cli") {
            md.push_str(&format!(
                "A warm CLI `tao-slurm submit` (a new process sharing the master): {} ms, against {} ms for its floor (process start, `tao-slurm --help`, plus `sbatch --hold` and `scancel` in one `ssh` over the same master), measured in {} alternating pairs: {}x pair by pair.\n\n",
                f(&c["cli_ms_median"]),
                f(&c["floor_ms_median"]),
                f(&c["pairs"]),
                f(&c["ratio_median"])
            ));
        }
        if let Some(c) = s.get("library_pairs") {
            md.push_str(&format!(
                "A warm library `create_job`: {} ms, against {} ms for its floor (`sbatch --hold` through one `ssh` over the same master), measured in {} alternating pairs: {}x pair by pair.\n\n",
                f(&c["library_ms_median"]),
                f(&c["floor_ms_median"]),
                f(&c["pairs"]),
                f(&c["ratio_median"])
            ));
        }
    }
    if let Some(s) = report.get("throughput") {
        md.push_str(&format!("## Submit throughput ({} sequential submits)\n\n", f(&s["submits"])));
        let rows = ["cli", "library", "local_sbatch"]
            .iter()
            .filter(|k| s.get(**k).is_some())
            .map(|k| {
                let r = &s[*k];
                vec![
                    f(&r["label"]),
                    f(&r["jobs_per_sec"]),
                    f(&r["ms_per_submit_median"]),
                    f(&r["round_trips_per_submit"]),
                    f(&r["logins"]),
                    rpcs(&r["slurmctld_rpcs_per_submit"]),
                ]
            })
            .collect();
        table(
            &mut md,
            &[
                "path",
                "jobs/s",
                "ms per submit (median)",
                "round trips per submit",
                "SSH logins in the loop",
                "slurmctld RPCs per submit",
            ],
            rows,
        );
    }
    if let Some(Value::Array(rows)) = report.get("refresh").and_then(|r| r.get("rows")) {
        md.push_str("## Refresh of N active jobs (one `Client::refresh`)\n\n");
        let rows = rows
            .iter()
            .map(|r| {
                vec![
                    f(&r["jobs"]),
                    f(&r["foreign_jobs"]),
                    f(&r["refresh_ms_median"]),
                    f(&r["floor_squeue_ms_median"]),
                    f(&r["floor_squeue_short_ms_median"]),
                    format!(
                        "{} / {} / {}",
                        f(&r["remote_squeue_ms_median"]),
                        f(&r["remote_script_ms_median"]),
                        f(&r["store_list_ms"])
                    ),
                    f(&r["round_trips_per_refresh"]),
                    format!("{} / {}", f(&r["bytes_sent_per_refresh"]), f(&r["bytes_received_per_refresh"])),
                    rpcs(&r["slurmctld_rpcs_per_refresh"]),
                ]
            })
            .collect();
        table(
            &mut md,
            &[
                "jobs",
                "other jobs of the user queued",
                "refresh ms",
                "floor: local squeue, same format (when others are queued: the cheaper of all and ours by `-j`), ms",
                "local squeue, short format, ms",
                "over the transport: squeue alone / the whole refresh script; one load of the N summaries, ms",
                "round trips",
                "bytes sent / received",
                "slurmctld RPCs per refresh",
            ],
            rows,
        );
    }
    if let Some(s) = report.get("running") {
        md.push_str(&format!(
            "## Refresh of {} running jobs that write status.json (one `Client::refresh`)\n\n",
            f(&s["jobs"])
        ));
        table(
            &mut md,
            &["status.json since the last refresh", "ms", "bytes received", "round trips"],
            vec![
                vec![
                    "unchanged (not read)".into(),
                    f(&s["unchanged_ms_median"]),
                    f(&s["unchanged_bytes_received"]),
                    f(&s["round_trips_per_refresh"]),
                ],
                vec![
                    "every file grew by a line (all read)".into(),
                    f(&s["all_changed_ms_median"]),
                    f(&s["all_changed_bytes_received"]),
                    f(&s["round_trips_per_refresh"]),
                ],
            ],
        );
    }
    if let Some(s) = report.get("monitor") {
        md.push_str(&format!(
            "## Monitor cost over time ({} held jobs, {} s window)\n\n",
            f(&s["jobs"]),
            f(&s["window_secs"])
        ));
        table(
            &mut md,
            &["", "in the window", "per hour (extrapolated)"],
            vec![
                vec![
                    "SSH logins (this monitor, sshd log)".into(),
                    f(&s["logins_attributed"]),
                    f(&s["logins_per_hour_per_host"]),
                ],
                vec!["SSH logins (sshd log, all users)".into(), f(&s["logins_sshd_all"]), "-".into()],
                vec![
                    "slurmctld RPCs of its refreshes (3 each)".into(),
                    f(&s["refresh_rpcs"]),
                    f(&s["refresh_rpcs_per_hour"]),
                ],
                vec![
                    "slurmctld RPCs, all (other tests' jobs included)".into(),
                    f(&s["rpcs_total"]),
                    f(&s["rpcs_per_hour"]),
                ],
                vec!["refreshes (round trips of the monitor)".into(), f(&s["refreshes"]), f(&s["refreshes_per_hour"])],
            ],
        );
        md.push_str(&format!("slurmctld RPCs by type in the window (all users): {}.\n\n", rpcs(&s["rpcs"])));
        if let Some(n) = s.get("note") {
            md.push_str(&format!("{}\n\n", f(n)));
        }
    }
    if let Some(s) = report.get("startup") {
        md.push_str(&format!("## CLI start-up ({} runs each)\n\n", f(&s["runs"])));
        table(
            &mut md,
            &["command", "median ms", "min ms"],
            vec![
                vec![
                    "`tao-slurm status <id>` (finished job, from the state file)".into(),
                    f(&s["status_ms_median"]),
                    f(&s["status_ms_min"]),
                ],
                vec!["`tao-slurm --help`".into(), f(&s["help_ms_median"]), f(&s["help_ms_min"])],
            ],
        );
    }
    if let Some(s) = report.get("memory") {
        md.push_str(&format!("## Memory of the monitor following {} jobs\n\n", f(&s["jobs"])));
        table(
            &mut md,
            &[
                "peak RSS (VmHWM)",
                "one load of all summaries (in the bench process)",
                "RSS at the last sample",
                "refreshes seen / median ms each",
                "seconds",
                "state file",
            ],
            vec![vec![
                format!("{} MB", f(&s["vmhwm_mb"])),
                format!("{} MB", f(&s["one_load_of_all_records_mb"])),
                format!("{} MB", f(&s["vmrss_end_mb"])),
                format!("{} / {}", f(&s["refreshes"]), f(&s["refresh_ms_median"])),
                f(&s["seconds"]),
                format!("{} MB", f(&s["state_file_mb"])),
            ]],
        );
    }
    if let Some(s) = report.get("follow") {
        md.push_str(&format!(
            "## Log follow (`Client::follow_logs` of a {} byte log to its end)\n\n",
            f(&s["log_bytes"])
        ));
        table(
            &mut md,
            &["bytes read", "bytes received by the transport", "ratio", "round trips", "seconds"],
            vec![vec![
                f(&s["log_bytes_read"]),
                f(&s["bytes_received_by_transport"]),
                format!("{:.4}", s["overhead_ratio"].as_f64().unwrap_or(0.0)),
                f(&s["round_trips"]),
                f(&s["seconds"]),
            ]],
        );
    }
    md.push_str(
        "Reproduce: `dev/bench` (or `dev/bench refresh|submit|throughput|monitor|memory|startup|follow`); \
                 env `BENCH_SUBMITS` (default 1000), `BENCH_MONITOR_SECS` (default 180).\n",
    );
    md
}
