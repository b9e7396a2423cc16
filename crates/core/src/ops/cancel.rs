//! Cancel: the script that stops jobs (scancel, then squeue when scancel failed) and the reading of
//! what it says: a job counts as stopped only on evidence. Pure.

use crate::model::JobRecord;
use crate::protocol::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::script::shell::quote;
use crate::slurm::SlurmState;

/// What to stop for one job: its Slurm job, or (submission outcome unknown) its attempt's job name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelTarget {
    Id(String),
    Name(String),
    /// Nothing on Slurm (a retry not yet submitted): only the local record changes.
    Nothing,
}

pub fn target_of(job: &JobRecord) -> CancelTarget {
    match (&job.slurm_job_id, job.next_retry_at) {
        (Some(id), _) => CancelTarget::Id(id.clone()),
        (None, Some(_)) => CancelTarget::Nothing,
        // A sweep variant whose array's id is not known: its name is the whole array's, so it is
        // never cancelled by name (that would stop its siblings).
        (None, None) if job.array_index().is_some() => CancelTarget::Nothing,
        (None, None) => CancelTarget::Name(job.attempt_name.clone()),
    }
}

/// Slurm job ids for scancel, the tasks of one job array as one `ARRAY_[ranges]` (scancel sends one
/// request for it, where a thousand `ARRAY_i` are a thousand: what counts under a controller's RPC
/// rate limit). Others as they are, in order of first appearance. Pure.
pub fn grouped_ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    let mut tasks: std::collections::HashMap<String, Vec<u32>> = Default::default();
    for id in ids {
        let task = id.split_once('_').and_then(|(a, i)| {
            (!a.is_empty() && a.bytes().all(|b| b.is_ascii_digit())).then_some(a).zip(i.parse::<u32>().ok())
        });
        let key = match task {
            Some((array, index)) => {
                tasks.entry(array.to_string()).or_default().push(index);
                format!("{array}_")
            }
            None => id.to_string(),
        };
        if !order.contains(&key) {
            order.push(key);
        }
    }
    order
        .into_iter()
        .map(|key| match key.strip_suffix('_').and_then(|a| tasks.get(a).map(|t| (a, t))) {
            Some((array, indices)) => match ranges(indices) {
                one if one.bytes().all(|b| b.is_ascii_digit()) => format!("{array}_{one}"),
                many => format!("{array}_[{many}]"),
            },
            None => key,
        })
        .collect()
}

/// `0-3,7,9-10` of some indices.
fn ranges(indices: &[u32]) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start { start.to_string() } else { format!("{start}-{}", sorted[i]) });
        i += 1;
    }
    parts.join(",")
}

/// The remote script. Pure.
pub fn cancel_script(targets: &[CancelTarget]) -> String {
    let each: Vec<&str> =
        targets.iter().filter_map(|t| if let CancelTarget::Id(i) = t { Some(i.as_str()) } else { None }).collect();
    let grouped: Vec<String> = grouped_ids(each.iter().copied()).iter().map(|i| quote(i)).collect();
    let ids: Vec<String> = each.iter().map(|i| quote(i)).collect();
    let names: Vec<(usize, String)> = targets
        .iter()
        .enumerate()
        .filter_map(|(i, t)| if let CancelTarget::Name(n) = t { Some((i, quote(n))) } else { None })
        .collect();
    let mut s = String::new();
    if !ids.is_empty() {
        let list = grouped.join(" ");
        s.push_str(&format!(
            "echo '{SECTION}scancel'\nscancel {list} 2>&1 | {PREFIX_LINES}\nrc=${{PIPESTATUS[0]}}\necho \"{SECTION}rc scancel $rc\"\n"
        ));
        // scancel exits non-zero when it could not do everything: ask the controller what became of
        // each job (a job it no longer knows, or that finished, counts as cancelled).
        s.push_str(&format!(
            "if [ \"$rc\" != 0 ]; then echo '{SECTION}squeue'; squeue -h -t all -j {} -o '%i|%T' 2>&1 | {PREFIX_LINES}; echo \"{SECTION}rc squeue ${{PIPESTATUS[0]}}\"; fi\n",
            ids.join(",")
        ));
    }
    for (i, name) in names {
        s.push_str(&format!(
            "echo '{SECTION}byname {i}'\nscancel --me --name={name} 2>&1 | {PREFIX_LINES}\necho \"{SECTION}rc byname ${{PIPESTATUS[0]}}\"\n"
        ));
    }
    s.push_str("exit 0\n");
    s
}

/// What the cancel script's output says: per target, stopped (true) or the reason it may not be.
pub fn parse_cancel_output(stdout: &str, targets: &[CancelTarget]) -> Vec<std::result::Result<(), String>> {
    let mut scancel: Option<(bool, String)> = None;
    let mut squeue: Option<(bool, String)> = None;
    let mut byname: std::collections::HashMap<usize, (bool, String)> = Default::default();
    let mut last_body = String::new();
    let mut last_index = usize::MAX;
    for (name, arg, body) in sections(stdout) {
        match name.as_str() {
            "rc" => {
                let (which, code) = arg.split_once(' ').unwrap_or((&arg, ""));
                let result = (code.trim() == "0", unprefix_lines(&last_body).trim().to_string());
                match which {
                    "scancel" => scancel = Some(result),
                    "squeue" => squeue = Some(result),
                    "byname" => {
                        byname.insert(last_index, result);
                    }
                    _ => {}
                }
            }
            "byname" => {
                last_index = arg.trim().parse().unwrap_or(usize::MAX);
                last_body = body;
            }
            _ => last_body = body,
        }
    }
    let states: std::collections::HashMap<String, SlurmState> = match &squeue {
        Some((true, text)) => text
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(id, st)| (id.trim().to_string(), SlurmState::parse(st.trim())))
            .collect(),
        _ => Default::default(),
    };
    targets
        .iter()
        .enumerate()
        .map(|(i, t)| match t {
            CancelTarget::Nothing => Ok(()),
            CancelTarget::Id(id) => match (&scancel, &squeue) {
                (Some((true, _)), _) => Ok(()),
                (Some((false, _)), Some((true, _))) => match states.get(id) {
                    Some(state) if !state.is_finished() => {
                        Err(format!("Slurm job {id} is still {state}: {}", scancel_text(&scancel)))
                    }
                    // Finished, or no longer known to the controller.
                    _ => Ok(()),
                },
                (Some((false, _)), Some((false, text))) if text.contains("Invalid job id") => Ok(()),
                (Some((false, _)), Some((false, text))) => Err(format!(
                    "scancel failed ({}) and the controller could not be asked whether Slurm job {id} stopped ({text})",
                    scancel_text(&scancel)
                )),
                _ => Err(format!("scancel did not report on Slurm job {id}")),
            },
            CancelTarget::Name(n) => match byname.get(&i) {
                Some((true, _)) => Ok(()),
                Some((false, text)) => Err(format!("scancel --name={n} failed: {text}")),
                None => Err(format!("scancel --name={n} did not report")),
            },
        })
        .collect()
}

fn scancel_text(scancel: &Option<(bool, String)>) -> String {
    match scancel {
        Some((_, t)) if !t.is_empty() => t.clone(),
        _ => "no message".into(),
    }
}

/// What a cancel did: the jobs now Canceled, and those left as they were, with the reason.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CancelOutcome {
    pub cancelled: Vec<String>,
    pub failed: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(script: &str, scancel: &str, squeue: &str) -> String {
        crate::stand_ins::StandIns::of(&[("scancel", scancel), ("squeue", squeue)]).stdout(script)
    }

    #[test]
    fn a_job_arrays_tasks_are_cancelled_in_one_request() {
        let ids = ["77_3", "10", "77_0", "77_1", "77_2", "77_9", "78_5", "77_10", "12_x", "_4"];
        assert_eq!(grouped_ids(ids), ["77_[0-3,9-10]", "10", "78_5", "12_x", "_4"]);
        assert_eq!(grouped_ids(["5_1", "5_1"]), ["5_1"]);
        assert!(grouped_ids(std::iter::empty()).is_empty());
        // 1,000 variants: one scancel argument; squeue, when scancel fails, still asks for each.
        let targets: Vec<CancelTarget> = (0..1000).map(|i| CancelTarget::Id(format!("900_{i}"))).collect();
        let script = cancel_script(&targets);
        assert!(script.contains("scancel '900_[0-999]' 2>&1"), "{script}");
        let ok = parse_cancel_output(&run(&script, r#"[ "$*" = "900_[0-999]" ] || exit 3"#, "exit 9"), &targets);
        assert!(ok.iter().all(|r| r.is_ok()));
        assert!(script.contains("-j 900_0,900_1,"));
    }

    #[test]
    fn verdicts_only_on_evidence() {
        let targets = vec![CancelTarget::Id("10".into()), CancelTarget::Id("11".into()), CancelTarget::Nothing];
        let script = cancel_script(&targets);
        // scancel succeeded: all stopped.
        let ok = parse_cancel_output(&run(&script, "exit 0", "exit 9"), &targets);
        assert!(ok.iter().all(|r| r.is_ok()), "{ok:?}");
        // The controller is down: scancel and squeue fail; nothing is cancelled, and the reason says so.
        let down = "echo 'scancel: error: Unable to contact slurm controller (connect failure)' >&2; exit 1";
        let sq_down = "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1";
        let r = parse_cancel_output(&run(&script, down, sq_down), &targets);
        assert!(r[0].as_ref().unwrap_err().contains("Unable to contact slurm controller"), "{r:?}");
        assert!(r[1].is_err());
        assert!(r[2].is_ok(), "nothing on Slurm: nothing to ask");
        // scancel failed for one job; squeue shows 10 cancelled and 11 still running.
        let r = parse_cancel_output(
            &run(
                &script,
                "echo 'scancel: error: Kill job error on job id 11: Access/permission denied' >&2; exit 1",
                "echo '10|CANCELLED'; echo '11|RUNNING'",
            ),
            &targets,
        );
        assert!(r[0].is_ok());
        assert!(
            r[1].as_ref().unwrap_err().contains("still RUNNING")
                && r[1].as_ref().unwrap_err().contains("permission denied"),
            "{r:?}"
        );
        // A job the controller forgot counts as cancelled.
        let r = parse_cancel_output(
            &run(&script, "exit 1", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1"),
            &targets,
        );
        assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
        // By name: its own status counts.
        let named = vec![CancelTarget::Name("tao-job-x".into())];
        let r = parse_cancel_output(&run(&cancel_script(&named), "echo down >&2; exit 1", "exit 0"), &named);
        assert!(r[0].as_ref().unwrap_err().contains("down"), "{r:?}");
        let r = parse_cancel_output(&run(&cancel_script(&named), "exit 0", "exit 0"), &named);
        assert!(r[0].is_ok());
    }
}
