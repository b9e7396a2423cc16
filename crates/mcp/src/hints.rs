//! The `next` hints: the workflow rules an agent must follow, said at the moment they apply. A job
//! that is not terminal is waited for (never abandoned because time passed); a terminal job points to
//! its logs. Pure.

use super::reply::JobBrief;

/// The rule for jobs that are not finished: keep waiting, answer only on request.
pub const KEEP_WAITING: &str =
    "do not give a final answer unless the user asked to detach (long queue waits are normal; never stop because time passed)";

/// What to do about a set of jobs: wait for those not terminal (with the cursor to pass), else read
/// the logs of those that are.
pub fn for_jobs(jobs: &[JobBrief], cursor: Option<i64>) -> String {
    // A paused job waits for the user, not for the cluster: it is resumed, never waited for.
    let (paused, active): (Vec<&JobBrief>, Vec<&JobBrief>) =
        jobs.iter().filter(|j| !j.terminal).partition(|j| j.status == "Paused");
    let paused_note = match paused.as_slice() {
        [] => String::new(),
        some => {
            let ids: Vec<&str> = some.iter().map(|j| j.job_id.as_str()).collect();
            format!(
                "; Paused: {} (resume {{\"job_id\": \"{}\"}} when the user asks; nothing to wait for)",
                ids.join(", "),
                ids[0]
            )
        }
    };
    if active.is_empty() && !paused.is_empty() {
        return paused_note.trim_start_matches("; ").to_string();
    }
    if !active.is_empty() {
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for j in &active {
            match groups.iter_mut().find(|(s, _)| *s == j.status) {
                Some((_, ids)) => ids.push(&j.job_id),
                None => groups.push((j.status.clone(), vec![&j.job_id])),
            }
        }
        let states: Vec<String> = groups.iter().map(|(s, ids)| format!("{s}: {}", ids.join(", "))).collect();
        let ids: Vec<String> = active.iter().map(|j| format!("\"{}\"", j.job_id)).collect();
        let cursor = cursor.map(|c| format!(", \"cursor\": {c}")).unwrap_or_default();
        return format!(
            "still {}: call wait {{\"job_ids\": [{}]{cursor}}} again; {KEEP_WAITING}{paused_note}",
            states.join("; "),
            ids.join(", ")
        );
    }
    let per_job: Vec<String> = jobs.iter().map(terminal_step).collect();
    if per_job.is_empty() {
        return "no jobs: submit one, or call list to see earlier jobs".to_string();
    }
    per_job.join("; ")
}

fn terminal_step(j: &JobBrief) -> String {
    let id = &j.job_id;
    match j.status.as_str() {
        "Complete" => format!("{id} is Complete: read its output with logs {{\"job_id\": \"{id}\"}}, then report to the user"),
        "Error" => format!(
            "{id} ended in Error: read logs {{\"job_id\": \"{id}\", \"stream\": \"both\", \"tail_lines\": 200}} to find the cause and tell the user; do not resubmit unchanged"
        ),
        "Canceled" => format!("{id} was Canceled: logs {{\"job_id\": \"{id}\"}} show how far it got"),
        other => format!("{id} is {other}"),
    }
}

/// After a submit: follow the job to its end.
pub fn after_submit(job_id: &str) -> String {
    format!("call wait {{\"job_ids\": [\"{job_id}\"]}} and keep calling it until the job is terminal; {KEEP_WAITING}")
}

/// One line about a set of jobs: counts by status, or the one job.
pub fn jobs_summary(jobs: &[JobBrief]) -> String {
    match jobs {
        [] => "no jobs".to_string(),
        [j] => {
            let progress = j.progress.as_deref().map(|p| format!(" [{p}]")).unwrap_or_default();
            format!("job {} is {}: {}{progress}", j.job_id, j.status, j.message)
        }
        _ => {
            let mut counts: Vec<(String, usize)> = Vec::new();
            for j in jobs {
                match counts.iter_mut().find(|(s, _)| *s == j.status) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((j.status.clone(), 1)),
                }
            }
            let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
            format!("{} jobs: {}", jobs.len(), parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, status: &str) -> JobBrief {
        JobBrief {
            job_id: id.into(),
            name: None,
            status: status.into(),
            message: "m".into(),
            slurm_job_id: None,
            slurm_state: None,
            exit_code: None,
            node_list: None,
            attempt: 1,
            progress: None,
            elapsed_secs: 0,
            next_retry_at: None,
            gpu: None,
            updated_at: 0,
            terminal: matches!(status, "Complete" | "Error" | "Canceled"),
        }
    }

    #[test]
    fn active_jobs_say_keep_waiting_with_the_cursor() {
        let hint =
            for_jobs(&[job("a", "Pending"), job("b", "Running"), job("c", "Pending"), job("d", "Complete")], Some(7));
        assert!(hint.starts_with("still Pending: a, c; Running: b: call wait"), "{hint}");
        assert!(hint.contains("{\"job_ids\": [\"a\", \"b\", \"c\"], \"cursor\": 7}"), "{hint}");
        assert!(hint.contains("do not give a final answer unless the user asked to detach"), "{hint}");
    }

    #[test]
    fn terminal_jobs_point_to_their_logs() {
        let hint = for_jobs(&[job("a", "Complete"), job("b", "Error")], None);
        assert!(hint.contains("a is Complete: read its output with logs {\"job_id\": \"a\"}"), "{hint}");
        assert!(hint.contains("b ended in Error: read logs"), "{hint}");
        assert!(!hint.contains("wait"), "{hint}");
    }

    #[test]
    fn a_paused_job_is_resumed_not_waited_for() {
        let hint = for_jobs(&[job("a", "Paused")], None);
        assert!(hint.starts_with("Paused: a (resume {\"job_id\": \"a\"}"), "{hint}");
        assert!(!hint.contains("call wait"), "{hint}");
        let hint = for_jobs(&[job("a", "Paused"), job("b", "Running")], None);
        assert!(hint.starts_with("still Running: b: call wait {\"job_ids\": [\"b\"]}"), "{hint}");
        assert!(
            hint.ends_with("Paused: a (resume {\"job_id\": \"a\"} when the user asks; nothing to wait for)"),
            "{hint}"
        );
    }

    #[test]
    fn summaries_count_by_status() {
        assert_eq!(
            jobs_summary(&[job("a", "Pending"), job("b", "Pending"), job("c", "Running")]),
            "3 jobs: 2 Pending, 1 Running"
        );
        assert_eq!(jobs_summary(&[job("a", "Running")]), "job a is Running: m");
    }
}
