//! Slurm's pending reasons in plain words, with what the user can do about each.

/// (plain words, what to do) for a squeue `%r` reason; None for reasons without advice.
pub fn explain_pending(reason: &str) -> Option<(&'static str, &'static str)> {
    let r = reason.trim();
    let found = match r {
        "Priority" => {
            ("other jobs have higher priority", "wait; the job starts when it reaches the front of the queue")
        }
        "Resources" => {
            ("waiting for nodes or GPUs to become free", "wait, or ask for fewer GPUs/nodes or a less busy partition")
        }
        "QOSMaxGRESPerUser" => (
            "your QOS limits how many GPUs you may use at once",
            "wait for your other jobs to finish, or use a QOS with a higher GPU limit",
        ),
        "QOSMaxJobsPerUserLimit" | "AssocMaxJobsLimit" => {
            ("you have as many running jobs as your limit allows", "wait for your other jobs to finish")
        }
        "AssocGrpGRES" | "QOSGrpGRES" => {
            ("your account's group GPU limit is reached", "wait, or submit under another account (--account)")
        }
        "PartitionTimeLimit" => (
            "the wall time is longer than the partition allows",
            "cancel and resubmit with a shorter --time-hours or a partition with a longer MaxTime",
        ),
        "PartitionNodeLimit" => {
            ("more nodes than the partition allows", "cancel and resubmit with fewer --nodes or on another partition")
        }
        "PartitionDown" | "PartitionInactive" => {
            ("the partition is down", "wait for the admins, or resubmit on another partition")
        }
        "ReqNodeNotAvail" => (
            "a required node is unavailable (down, drained or reserved)",
            "wait, or resubmit excluding the unavailable nodes (--exclude)",
        ),
        "Dependency" => ("waiting for the jobs it depends on", "wait for them to finish"),
        "DependencyNeverSatisfied" => {
            ("a job it depends on failed, so it can never start", "cancel it and fix the dependency")
        }
        "BeginTime" => ("its start time is in the future (a requeued job waits about 2 minutes)", "wait"),
        "JobHeldUser" => ("held by you", "release it with `scontrol release <slurm job id>`"),
        "JobHeldAdmin" => ("held by an administrator", "ask the cluster admins"),
        "Reservation" => ("waiting for its reservation to start", "wait, or submit without --reservation"),
        "InvalidAccount" => ("the account is invalid", "cancel and resubmit with a valid --account"),
        "InvalidQOS" => ("the QOS is invalid", "cancel and resubmit with a valid --qos"),
        "BadConstraints" => {
            ("no node has the requested features", "cancel and resubmit with a --constraint that nodes have")
        }
        "NodeDown" => ("a node it needs is down", "wait, or resubmit excluding it"),
        "launch failed requeued held" => {
            ("its launch failed and it was held", "check the node, then `scontrol release` it")
        }
        _ => return None,
    };
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_reasons_have_advice() {
        for r in [
            "Priority",
            "Resources",
            "QOSMaxGRESPerUser",
            "PartitionTimeLimit",
            "ReqNodeNotAvail",
            "Dependency",
            "BeginTime",
        ] {
            let (words, advice) = explain_pending(r).unwrap_or_else(|| panic!("{r}"));
            assert!(!words.is_empty() && !advice.is_empty());
        }
        assert!(explain_pending("SomethingNew").is_none());
    }
}
