//! Dependencies between platform jobs, kept by tao-slurm so that they survive retries. Pure.
//!
//! A job that runs after others is submitted so that Slurm itself starts it as soon as it may, with
//! no tao-slurm process running: `--dependency=afterok:<parent's current Slurm job>` when it waits
//! for success. A retry gives the parent a new Slurm job id; the refresh cycle that submits the retry
//! re-points the child (`scontrol update dependency=`). Waiting for failure (`notok`) or for any end
//! (`any`) cannot be told to Slurm: the end of one attempt is not the parent's end when it is retried,
//! so such a child is submitted held and released by the cycle that sees the parent end that way.
//! A parent that ends in a way that can never satisfy the child cancels the child at once.

use crate::protocol::{sections, SECTION};
use crate::script::shell::quote;
use crate::spec::DependKind;
use crate::status::PlatformStatus;

/// One dependency of a job, with its parent as the store knows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub parent_id: String,
    pub kind: DependKind,
    pub parent_status: PlatformStatus,
    /// The parent's current attempt's Slurm job (None while a retry waits to be submitted).
    pub parent_slurm_id: Option<String>,
}

/// How a dependent job may start, given its parents now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Every dependency is satisfied.
    Free,
    /// Slurm starts it: `afterok:<id>[:<id>...]` on the parents' current Slurm jobs.
    After(String),
    /// Held until tao-slurm releases it.
    Hold,
    /// A parent ended in a way that can never satisfy it: the message says which.
    Never(String),
}

impl Gate {
    /// How the gate a job was submitted or re-pointed with is stored (`jobs.gate`).
    pub fn stored(&self) -> String {
        match self {
            Gate::Free => "free".into(),
            Gate::After(d) => d.clone(),
            Gate::Hold => "hold".into(),
            Gate::Never(_) => "never".into(),
        }
    }

    /// The sbatch options of a submission under this gate: the dependency and whether it stays held.
    pub fn sbatch(&self) -> (Option<String>, bool) {
        match self {
            Gate::After(d) => (Some(d.clone()), false),
            Gate::Hold => (None, true),
            _ => (None, false),
        }
    }
}

fn satisfied(kind: DependKind, status: PlatformStatus) -> bool {
    match kind {
        DependKind::Ok => status == PlatformStatus::Complete,
        DependKind::NotOk => matches!(status, PlatformStatus::Error | PlatformStatus::Canceled),
        DependKind::Any => true,
    }
}

/// The gate of a job with these dependencies.
pub fn gate(edges: &[Edge]) -> Gate {
    let mut after = Vec::new();
    let mut hold = false;
    for e in edges {
        if e.parent_status.is_terminal() {
            if !satisfied(e.kind, e.parent_status) {
                return Gate::Never(format!("dependency {} ended {}", e.parent_id, e.parent_status));
            }
            continue;
        }
        match (&e.kind, &e.parent_slurm_id) {
            (DependKind::Ok, Some(id)) => after.push(id.clone()),
            // A retry not yet submitted: the child keeps its old dependency (which Slurm will not
            // satisfy) until the retry has an id; a job not yet submitted has it when submitted.
            _ => hold = true,
        }
    }
    if hold {
        Gate::Hold
    } else if after.is_empty() {
        Gate::Free
    } else {
        Gate::After(format!("afterok:{}", after.join(":")))
    }
}

/// A dependent job as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub job_id: String,
    pub status: PlatformStatus,
    pub slurm_job_id: Option<String>,
    /// The gate it was submitted or last re-pointed with ([`Gate::stored`]).
    pub gate: Option<String>,
    pub message: String,
}

/// What to do about one dependent job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Point its Slurm dependency at `dependency` (empty: none), and release it if it was held.
    Point { job_id: String, slurm_id: String, dependency: String, release: bool, gate: String },
    /// Release it (held for a notok/any dependency that is now satisfied).
    Release { job_id: String, slurm_id: String },
    /// It can never run: stop its Slurm job (if any) and record Canceled with `message`.
    Cancel { job_id: String, slurm_id: Option<String>, message: String },
    /// Say what it waits for instead of Slurm's `DependencyNeverSatisfied` (a retry of its parent
    /// is on its way).
    Explain { job_id: String, message: String },
}

/// The word Slurm's reason takes while a dependency points at a job that failed.
pub const NEVER_SATISFIED: &str = "DependencyNeverSatisfied";

/// What to do about `child` given its dependencies now. Pure.
pub fn reconcile(child: &Child, edges: &[Edge]) -> Option<Action> {
    if child.status.is_terminal() || edges.is_empty() {
        return None;
    }
    let want = gate(edges);
    if let Gate::Never(message) = &want {
        return Some(Action::Cancel {
            job_id: child.job_id.clone(),
            slurm_id: child.slurm_job_id.clone(),
            message: message.clone(),
        });
    }
    // Not submitted yet (or a retry waiting): its submission takes the gate as it is then.
    let slurm_id = child.slurm_job_id.clone()?;
    let stored = child.gate.clone().unwrap_or_else(|| "free".into());
    let was_held = stored == "hold";
    let action = match &want {
        Gate::Hold => None,
        Gate::Free if was_held => Some(Action::Release { job_id: child.job_id.clone(), slurm_id }),
        want if want.stored() == stored => None,
        Gate::After(d) => Some(Action::Point {
            job_id: child.job_id.clone(),
            slurm_id,
            dependency: d.clone(),
            release: was_held,
            gate: want.stored(),
        }),
        // Free, from a dependency on a parent's earlier Slurm job: clear it.
        _ => Some(Action::Point {
            job_id: child.job_id.clone(),
            slurm_id,
            dependency: String::new(),
            release: false,
            gate: want.stored(),
        }),
    };
    if action.is_none() && child.message.contains(NEVER_SATISFIED) {
        // A parent's attempt failed and its retry (or verdict) is on its way: say so, never show
        // Slurm's word for "it can never start".
        let waiting: Vec<&str> =
            edges.iter().filter(|e| !e.parent_status.is_terminal()).map(|e| e.parent_id.as_str()).collect();
        let paused: Vec<&str> = edges
            .iter()
            .filter(|e| matches!(e.parent_status, PlatformStatus::Paused | PlatformStatus::Pausing))
            .map(|e| e.parent_id.as_str())
            .collect();
        if !paused.is_empty() {
            return Some(Action::Explain {
                job_id: child.job_id.clone(),
                message: format!(
                    "waiting for job {}: it is paused; the dependency follows it to its new Slurm job when it is resumed",
                    paused.join(", ")
                ),
            });
        }
        return Some(Action::Explain {
            job_id: child.job_id.clone(),
            message: format!(
                "waiting for job {}: its last attempt ended without success and tao-slurm retries it (or decides it failed); the dependency follows it to its new Slurm job",
                waiting.join(", ")
            ),
        });
    }
    action
}

/// The remote script for the Point, Release and Cancel actions, one status line each.
pub fn depend_script(actions: &[Action]) -> String {
    let mut s = String::new();
    for (i, a) in actions.iter().enumerate() {
        let command = match a {
            Action::Point { slurm_id, dependency, release, .. } => {
                let mut c = format!("scontrol update jobid={} dependency={}", quote(slurm_id), quote(dependency));
                if *release {
                    c.push_str(&format!(" && scontrol release {}", quote(slurm_id)));
                }
                c
            }
            Action::Release { slurm_id, .. } => format!("scontrol release {}", quote(slurm_id)),
            Action::Cancel { slurm_id: Some(id), .. } => format!("scancel {}", quote(id)),
            _ => continue,
        };
        s.push_str(&format!("{command} >/dev/null 2>&1; echo \"{SECTION}rc {i} $?\"\n"));
    }
    s.push_str("exit 0\n");
    s
}

/// Which actions' commands succeeded (by index into the actions).
pub fn parse_depend_output(stdout: &str) -> Vec<(usize, bool)> {
    sections(stdout)
        .into_iter()
        .filter(|(name, _, _)| name == "rc")
        .filter_map(|(_, arg, _)| {
            let (i, code) = arg.split_once(' ')?;
            Some((i.trim().parse().ok()?, code.trim() == "0"))
        })
        .collect()
}

/// The active parents that the jobs `ids` wait for, transitively, leaving out those in `ids`: a
/// refresh of a dependent job refreshes what it waits for, so that it can move on. `edges`: every
/// open dependency as (child, parent, parent's status).
pub fn active_parents(edges: &[(&str, &str, PlatformStatus)], ids: &[&str]) -> Vec<String> {
    let mut parents_of: std::collections::BTreeMap<&str, Vec<(&str, PlatformStatus)>> = Default::default();
    for (child, parent, status) in edges {
        parents_of.entry(child).or_default().push((parent, *status));
    }
    let given: std::collections::HashSet<&str> = ids.iter().copied().collect();
    let mut out: Vec<String> = Vec::new();
    let mut todo: Vec<&str> = ids.to_vec();
    while let Some(id) = todo.pop() {
        for (parent, status) in parents_of.get(id).into_iter().flatten() {
            if !status.is_terminal() && !given.contains(parent) && !out.iter().any(|o| o == parent) {
                out.push(parent.to_string());
                todo.push(parent);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlatformStatus::*;

    fn edge(parent: &str, kind: DependKind, status: PlatformStatus, slurm: Option<&str>) -> Edge {
        Edge { parent_id: parent.into(), kind, parent_status: status, parent_slurm_id: slurm.map(String::from) }
    }

    fn child(slurm: Option<&str>, gate: &str, message: &str) -> Child {
        Child {
            job_id: "c".into(),
            status: Pending,
            slurm_job_id: slurm.map(String::from),
            gate: Some(gate.into()),
            message: message.into(),
        }
    }

    #[test]
    fn gates() {
        use DependKind::*;
        let cases: Vec<(Vec<Edge>, Gate)> = vec![
            (vec![edge("p", Ok, Running, Some("10"))], Gate::After("afterok:10".into())),
            (
                vec![edge("p", Ok, Pending, Some("10")), edge("q", Ok, Pending, Some("11_3"))],
                Gate::After("afterok:10:11_3".into()),
            ),
            (vec![edge("p", Ok, Complete, Some("10"))], Gate::Free),
            (vec![edge("p", Ok, Error, Some("10"))], Gate::Never("dependency p ended Error".into())),
            (vec![edge("p", Ok, Canceled, Some("10"))], Gate::Never("dependency p ended Canceled".into())),
            (vec![edge("p", Ok, Pending, None)], Gate::Hold),
            (vec![edge("p", NotOk, Running, Some("10"))], Gate::Hold),
            (vec![edge("p", NotOk, Error, Some("10"))], Gate::Free),
            (vec![edge("p", NotOk, Complete, Some("10"))], Gate::Never("dependency p ended Complete".into())),
            (
                vec![edge("p", Any, Canceled, Some("10")), edge("q", Ok, Running, Some("12"))],
                Gate::After("afterok:12".into()),
            ),
            (vec![edge("p", Any, Running, Some("10"))], Gate::Hold),
        ];
        for (edges, want) in cases {
            assert_eq!(gate(&edges), want, "{edges:?}");
        }
    }

    #[test]
    fn a_retried_parent_re_points_its_child_and_a_failed_one_cancels_it() {
        use DependKind::Ok as K;
        // The parent was retried under a new Slurm job: point the child there.
        let a = reconcile(&child(Some("20"), "afterok:10", ""), &[edge("p", K, Pending, Some("11"))]);
        assert_eq!(
            a,
            Some(Action::Point {
                job_id: "c".into(),
                slurm_id: "20".into(),
                dependency: "afterok:11".into(),
                release: false,
                gate: "afterok:11".into()
            })
        );
        // Already pointed there: nothing to do.
        assert_eq!(reconcile(&child(Some("20"), "afterok:11", ""), &[edge("p", K, Running, Some("11"))]), None);
        // The retry is not submitted yet: Slurm's reason is explained, never shown as a plain wait.
        match reconcile(
            &child(Some("20"), "afterok:10", "Pending, reason DependencyNeverSatisfied"),
            &[edge("p", K, Pending, None)],
        ) {
            Some(Action::Explain { message, .. }) => assert!(message.contains("waiting for job p"), "{message}"),
            other => panic!("{other:?}"),
        }
        // The parent is paused (its Slurm job cancelled): the child waits, and is told why; once
        // the parent is resumed under a new Slurm job, the child is re-pointed at it.
        let never = child(Some("20"), "afterok:10", "Pending, reason DependencyNeverSatisfied");
        for paused in [Paused, Pausing] {
            match reconcile(&never, &[edge("p", K, paused, Some("10"))]) {
                Some(Action::Explain { message, .. }) => assert!(message.contains("job p: it is paused"), "{message}"),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            reconcile(&never, &[edge("p", K, Resuming, Some("12"))]),
            Some(Action::Point { dependency, .. }) if dependency == "afterok:12"
        ));
        // The parent failed for good: the child ends at once, whether submitted or not.
        for slurm in [Some("20"), None] {
            assert_eq!(
                reconcile(&child(slurm, "afterok:10", ""), &[edge("p", K, Error, Some("10"))]),
                Some(Action::Cancel {
                    job_id: "c".into(),
                    slurm_id: slurm.map(String::from),
                    message: "dependency p ended Error".into()
                })
            );
        }
        // Held for `any`: released when the parent ends.
        assert_eq!(
            reconcile(&child(Some("20"), "hold", ""), &[edge("p", DependKind::Any, Error, Some("10"))]),
            Some(Action::Release { job_id: "c".into(), slurm_id: "20".into() })
        );
        // Ended children are left alone.
        let done = Child { status: Complete, ..child(Some("20"), "afterok:10", "") };
        assert_eq!(reconcile(&done, &[edge("p", K, Error, Some("10"))]), None);
    }

    #[test]
    fn the_script_quotes_and_reports_each_action() {
        let actions = vec![
            Action::Point {
                job_id: "c".into(),
                slurm_id: "20".into(),
                dependency: "afterok:11".into(),
                release: true,
                gate: "x".into(),
            },
            Action::Explain { job_id: "d".into(), message: "m".into() },
            Action::Cancel { job_id: "e".into(), slurm_id: Some("30_2".into()), message: "m".into() },
        ];
        let s = depend_script(&actions);
        assert!(s.contains("scontrol update jobid=20 dependency=afterok:11 && scontrol release 20"), "{s}");
        assert!(s.contains("scancel 30_2"), "{s}");
        assert!(!s.contains("rc 1"), "nothing runs for an explanation: {s}");
        let out = "@@tao-slurm:rc 0 0\n@@tao-slurm:rc 2 1\n";
        assert_eq!(parse_depend_output(out), vec![(0, true), (2, false)]);
    }

    #[test]
    fn the_active_parents_of_a_chain_are_found_once_and_ended_ones_left_out() {
        let edges = [
            ("c", "b", Running),
            ("b", "a", Pending),
            ("a", "root", Complete),
            ("d", "b", Running),
            ("e", "c", Pending),
        ];
        assert_eq!(active_parents(&edges, &["c"]), ["b", "a"]);
        assert_eq!(active_parents(&edges, &["c", "d"]), ["b", "a"], "b once, though two jobs wait for it");
        assert_eq!(active_parents(&edges, &["c", "b"]), ["a"], "a job given is not its own parent to add");
        assert!(active_parents(&edges, &["a"]).is_empty(), "an ended parent needs no refresh");
        assert!(active_parents(&edges, &["root"]).is_empty());
        // A cycle (never made by tao-slurm, but a state file is input) ends.
        let cycle = [("x", "y", Running), ("y", "x", Running)];
        assert_eq!(active_parents(&cycle, &["x"]), ["y"]);
    }
}
