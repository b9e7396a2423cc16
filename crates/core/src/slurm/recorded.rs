//! Table tests over what Slurm 22.05 and 24.11 really printed (recorded on the two sandbox clusters by
//! `dev/sandbox/record-fixtures.sh`): every parser reads both versions' output whole, and the same
//! jobs end the same way on both.

use super::*;

/// One version's recorded outputs.
struct Recorded {
    version: &'static str,
    submit: &'static str,
    squeue: &'static str,
    sacct: &'static str,
    sacct_steps: &'static str,
    sbatch: &'static str,
    partitions: &'static str,
    sinfo: &'static str,
}

macro_rules! recorded {
    ($v:literal) => {
        Recorded {
            version: $v,
            submit: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/submit.txt")),
            squeue: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/squeue.txt")),
            sacct: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/sacct.txt")),
            sacct_steps: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/sacct-steps.txt")),
            sbatch: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/sbatch-parsable.txt")),
            partitions: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/scontrol-show-partition.txt")),
            sinfo: include_str!(concat!("../../tests/fixtures/slurm-", $v, "/sinfo-nodes.txt")),
        }
    };
}

pub(crate) const SDIAG_22_05: &str = include_str!("../../tests/fixtures/slurm-22.05/sdiag.txt");
pub(crate) const SDIAG_24_11: &str = include_str!("../../tests/fixtures/slurm-24.11/sdiag.txt");

fn versions() -> [Recorded; 2] {
    [recorded!("22.05"), recorded!("24.11")]
}

impl Recorded {
    /// The Slurm job id of the fixture job named `what` in submit.txt (`array` ids get `_<task>`).
    fn id(&self, what: &str) -> String {
        let (key, task) = what.split_once('_').map_or((what, None), |(k, t)| (k, Some(t)));
        let id = self.submit.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')).expect(what);
        task.map_or(id.to_string(), |t| format!("{id}_{t}"))
    }
}

/// (fixture job, state, exit code, signal) as squeue and sacct must both read them, on both versions.
const ENDINGS: [(&str, SlurmState, i32, i32); 5] = [
    ("ok", SlurmState::Completed, 0, 0),
    ("exit3", SlurmState::Failed, 3, 0),
    ("signal", SlurmState::Failed, 0, 9),
    ("array_0", SlurmState::Completed, 0, 0),
    ("array_1", SlurmState::Failed, 1, 0),
];

#[test]
fn squeue_of_both_versions_is_read_whole_and_gives_the_exit_code() {
    for r in versions() {
        let recs = parse_squeue(r.squeue);
        assert!(recs.len() >= 6, "{}: {recs:?}", r.version);
        for rec in &recs {
            assert_eq!(rec.unread, None, "{}: every recorded line is understood: {rec:?}", r.version);
        }
        for (what, state, code, signal) in &ENDINGS {
            let rec = recs.iter().find(|x| x.job_id == r.id(what)).unwrap_or_else(|| panic!("{} {what}", r.version));
            assert_eq!(
                (&rec.state, rec.exit_code, rec.exit_signal),
                (state, Some(*code), Some(*signal)),
                "{} {what}: {rec:?}",
                r.version
            );
        }
        let cancelled = recs.iter().find(|x| x.job_id == r.id("cancelled")).unwrap();
        assert_eq!(cancelled.state, SlurmState::Cancelled, "{}", r.version);
        let held = recs.iter().find(|x| x.job_id == r.id("held")).unwrap();
        assert_eq!((&held.state, held.reason.as_str()), (&SlurmState::Pending, "JobHeldUser"), "{}", r.version);
    }
}

#[test]
fn sacct_of_both_versions_is_read_whole_and_gives_the_exit_code() {
    for r in versions() {
        let recs = parse_sacct(r.sacct);
        assert_eq!(recs.len(), 7, "{}: {recs:?}", r.version);
        for rec in &recs {
            assert_eq!(rec.unread, None, "{}: {rec:?}", r.version);
        }
        for (what, state, code, signal) in &ENDINGS {
            let rec = recs.iter().find(|x| x.job_id == r.id(what)).unwrap();
            assert_eq!((&rec.state, rec.exit_code, rec.exit_signal), (state, Some(*code), Some(*signal)), "{what}");
        }
        let cancelled = recs.iter().find(|x| x.job_id == r.id("cancelled")).unwrap();
        assert_eq!(cancelled.state_text, "CANCELLED by 1001", "{}", r.version);
        // Step lines are not jobs.
        let steps = parse_sacct(r.sacct_steps);
        assert_eq!(
            steps.iter().map(|s| (s.job_id.clone(), s.exit_code)).collect::<Vec<_>>(),
            [(r.id("exit3"), Some(3))]
        );
    }
}

#[test]
fn sbatch_partitions_and_nodes_of_both_versions() {
    for r in versions() {
        let lines: Vec<&str> = r.sbatch.lines().collect();
        assert_eq!(lines.len(), 2, "{}", r.version);
        for line in lines {
            let id = parse_sbatch_parsable(line).unwrap_or_else(|| panic!("{} {line:?}", r.version));
            assert!(line.starts_with(&id) && is_slurm_job_id(&id), "plain and `ID;cluster` forms: {line}");
        }
        let parts = parse_partitions(r.partitions);
        let names: Vec<(&str, Option<u64>, bool)> =
            parts.iter().map(|p| (p.name.as_str(), p.max_time_minutes, p.is_default)).collect();
        assert_eq!(names, [("polar", Some(240), true), ("long", Some(720), false), ("debug", Some(30), false)]);
        assert!(parts.iter().all(|p| p.state == "UP" && p.tres.contains("gres/gpu=32")), "{parts:?}");
        let usage = parse_partition_usage(&parts, r.sinfo);
        for u in &usage {
            assert_eq!(
                (u.nodes, u.nodes_usable, u.gpus_total, u.gpus_free, u.cpus_total),
                (4, 4, 32, 32, 512),
                "{} {}",
                r.version,
                u.name
            );
        }
        assert_eq!(usage.len(), 3);
    }
}
