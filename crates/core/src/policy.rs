//! What an operator allows an org, and a workspace allows every org that uses it: partitions,
//! accounts, qos and reservations, GPUs per job, active jobs, mount roots, the home mount and
//! `#SBATCH` options. The check is pure: the service runs it on a job's resolved plan before anything
//! reaches a cluster, and names the request field at fault.

use serde::{Deserialize, Serialize};

/// `#SBATCH` options no policy may allow: they would act on other jobs (`dependency`: the service's
/// `after` takes only the org's own jobs), change who the job runs as, or what environment it sees.
pub const NEVER_SBATCH_OPTIONS: &[&str] = &[
    "dependency",
    "uid",
    "gid",
    "export",
    "export-file",
    "get-user-env",
    "propagate",
    "chdir",
    "kill-on-invalid-dep",
    "priority",
    "nice",
];

/// One layer of policy (an org's, or a workspace's). `None`: this layer does not restrict it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Partitions a job may run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservations: Option<Vec<String>>,
    /// Most GPUs one job may ask for (all its nodes together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gpus_per_job: Option<u32>,
    /// Most jobs of the org that may be active (not terminal) at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active_jobs: Option<u32>,
    /// Directories under which a container mount's source must lie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_roots: Option<Vec<String>>,
    /// Whether a job may mount the user's home in its container (no unless a layer allows it and
    /// none forbids it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_home_mount: Option<bool>,
    /// `#SBATCH` options a job may set (never those of [`NEVER_SBATCH_OPTIONS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sbatch_options: Option<Vec<String>>,
}

/// What a job asks for, as its plan resolved it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobAsk {
    /// The partition list (`a,b`) the job goes to.
    pub partition: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub reservation: Option<String>,
    pub total_gpus: u32,
    /// Container mounts, `src[:dst[:ro]]`.
    pub mounts: Vec<String>,
    pub mount_home: bool,
    pub sbatch_options: Vec<String>,
    /// The org's jobs active now (this one not counted).
    pub active_jobs: u32,
}

/// A request outside policy: the request field at fault and why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub message: String,
}

fn violation(field: impl Into<String>, message: String) -> Violation {
    Violation { field: field.into(), message }
}

fn intersect(a: &Option<Vec<String>>, b: &Option<Vec<String>>) -> Option<Vec<String>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.iter().filter(|x| b.contains(x)).cloned().collect()),
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (None, None) => None,
    }
}

fn min(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (x, None) | (None, x) => x,
    }
}

/// Whether `path` lies under `root` (both absolute, compared by components, so `/lus` is not under
/// `/lustre` and `..` never climbs out).
fn under(path: &str, root: &str) -> bool {
    if path.split('/').any(|c| c == "..") {
        return false;
    }
    let parts = |p: &str| p.split('/').filter(|c| !c.is_empty() && *c != ".").map(String::from).collect::<Vec<_>>();
    let (p, r) = (parts(path), parts(root));
    path.starts_with('/') && root.starts_with('/') && p.len() >= r.len() && p[..r.len()] == r[..]
}

impl Policy {
    /// Check an operator's policy: no option of [`NEVER_SBATCH_OPTIONS`], mount roots absolute.
    pub fn validate(&self) -> Result<(), String> {
        for o in self.sbatch_options.iter().flatten() {
            if NEVER_SBATCH_OPTIONS.contains(&o.as_str()) {
                return Err(format!("sbatch_options: {o} is never allowed to a service's jobs"));
            }
        }
        for r in self.mount_roots.iter().flatten() {
            if !r.starts_with('/') || r.split('/').any(|c| c == "..") {
                return Err(format!("mount_roots: {r:?} is not an absolute path"));
            }
        }
        Ok(())
    }

    /// Both layers at once: every limit of either holds.
    pub fn and(&self, other: &Policy) -> Policy {
        Policy {
            partitions: intersect(&self.partitions, &other.partitions),
            accounts: intersect(&self.accounts, &other.accounts),
            qos: intersect(&self.qos, &other.qos),
            reservations: intersect(&self.reservations, &other.reservations),
            max_gpus_per_job: min(self.max_gpus_per_job, other.max_gpus_per_job),
            max_active_jobs: min(self.max_active_jobs, other.max_active_jobs),
            mount_roots: intersect(&self.mount_roots, &other.mount_roots),
            allow_home_mount: match (self.allow_home_mount, other.allow_home_mount) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (a, b) => a.or(b),
            },
            sbatch_options: intersect(&self.sbatch_options, &other.sbatch_options),
        }
    }

    /// The first thing `ask` does outside this policy, or Ok.
    pub fn check(&self, ask: &JobAsk) -> Result<(), Violation> {
        fn listed(field: &str, what: &str, value: &str, allowed: &Option<Vec<String>>) -> Result<(), Violation> {
            match allowed {
                Some(list) if !list.iter().any(|a| a == value) => Err(violation(
                    field,
                    if list.is_empty() {
                        format!("{value:?}: this org may not choose a {what} here")
                    } else {
                        format!("{value:?} is not allowed to this org here; allowed: {}", list.join(", "))
                    },
                )),
                _ => Ok(()),
            }
        }
        for p in ask.partition.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            listed("partition", "partition", p, &self.partitions)?;
        }
        if let Some(a) = &ask.account {
            listed("account", "account", a, &self.accounts)?;
        }
        if let Some(q) = &ask.qos {
            listed("qos", "qos", q, &self.qos)?;
        }
        if let Some(r) = &ask.reservation {
            listed("reservation", "reservation", r, &self.reservations)?;
        }
        if let Some(max) = self.max_gpus_per_job {
            if ask.total_gpus > max {
                return Err(violation(
                    "gpus",
                    format!("{} GPUs in all: this org may ask for at most {max} per job", ask.total_gpus),
                ));
            }
        }
        if let Some(max) = self.max_active_jobs {
            if ask.active_jobs >= max {
                return Err(violation(
                    "active_jobs",
                    format!(
                        "the org has {} active jobs, its most (max_active_jobs = {max}); wait for one to end or cancel one",
                        ask.active_jobs
                    ),
                ));
            }
        }
        if ask.mount_home && self.allow_home_mount != Some(true) {
            return Err(violation(
                "no_container_mount_home",
                "the home directory may not be mounted in this org's containers: set no_container_mount_home".into(),
            ));
        }
        if let Some(roots) = &self.mount_roots {
            for m in &ask.mounts {
                let src = m.split(':').next().unwrap_or_default();
                if !roots.iter().any(|r| under(src, r)) {
                    return Err(violation(
                        "mounts",
                        format!("{src} is not under a mount root allowed to this org ({})", roots.join(", ")),
                    ));
                }
            }
        }
        for o in &ask.sbatch_options {
            let never = NEVER_SBATCH_OPTIONS.contains(&o.as_str());
            if never || self.sbatch_options.as_ref().is_some_and(|l| !l.contains(o)) {
                return Err(violation(
                    format!("sbatch_options.{o}"),
                    if never {
                        format!("{o} is never allowed to a service's jobs (use after for dependencies)")
                    } else {
                        format!("{o} is not allowed to this org here")
                    },
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    fn ask() -> JobAsk {
        JobAsk {
            partition: "polar".into(),
            total_gpus: 8,
            mounts: vec!["/lustre".into()],
            mount_home: false,
            ..Default::default()
        }
    }

    fn strict() -> Policy {
        Policy {
            partitions: list(&["polar", "debug"]),
            accounts: list(&["proj1"]),
            qos: list(&["normal"]),
            reservations: list(&[]),
            max_gpus_per_job: Some(8),
            max_active_jobs: Some(3),
            mount_roots: list(&["/lustre", "/data/team-a"]),
            allow_home_mount: None,
            sbatch_options: list(&["mail-type"]),
        }
    }

    #[test]
    fn each_limit_names_its_field() {
        let p = strict();
        let cases: Vec<(JobAsk, Option<&str>)> = vec![
            (ask(), None),
            (JobAsk { partition: "polar,debug".into(), ..ask() }, None),
            (JobAsk { partition: "polar,grizzly".into(), ..ask() }, Some("partition")),
            (JobAsk { account: Some("proj1".into()), ..ask() }, None),
            (JobAsk { account: Some("other".into()), ..ask() }, Some("account")),
            (JobAsk { qos: Some("high".into()), ..ask() }, Some("qos")),
            (JobAsk { reservation: Some("r1".into()), ..ask() }, Some("reservation")),
            (JobAsk { total_gpus: 9, ..ask() }, Some("gpus")),
            (JobAsk { active_jobs: 2, ..ask() }, None),
            (JobAsk { active_jobs: 3, ..ask() }, Some("active_jobs")),
            (JobAsk { mount_home: true, ..ask() }, Some("no_container_mount_home")),
            (JobAsk { mounts: vec!["/data/team-a/x:/x:ro".into()], ..ask() }, None),
            (JobAsk { mounts: vec!["/data/team-b:/x".into()], ..ask() }, Some("mounts")),
            (JobAsk { mounts: vec!["/lustre/../etc:/x".into()], ..ask() }, Some("mounts")),
            (JobAsk { mounts: vec!["/lustrex".into()], ..ask() }, Some("mounts")),
            (JobAsk { sbatch_options: vec!["mail-type".into()], ..ask() }, None),
            (JobAsk { sbatch_options: vec!["begin".into()], ..ask() }, Some("sbatch_options.begin")),
            (JobAsk { sbatch_options: vec!["dependency".into()], ..ask() }, Some("sbatch_options.dependency")),
        ];
        for (a, want) in cases {
            let got = p.check(&a).err().map(|v| v.field);
            assert_eq!(got.as_deref(), want, "{a:?}");
        }
    }

    #[test]
    fn no_policy_still_keeps_home_and_never_options_out() {
        let open = Policy::default();
        assert!(open.check(&ask()).is_ok());
        assert!(open.check(&JobAsk { total_gpus: 1000, partition: "any".into(), ..ask() }).is_ok());
        assert_eq!(open.check(&JobAsk { mount_home: true, ..ask() }).unwrap_err().field, "no_container_mount_home");
        for o in NEVER_SBATCH_OPTIONS {
            let err = open.check(&JobAsk { sbatch_options: vec![o.to_string()], ..ask() }).unwrap_err();
            assert_eq!(err.field, format!("sbatch_options.{o}"));
        }
        let home = Policy { allow_home_mount: Some(true), ..Default::default() };
        assert!(home.check(&JobAsk { mount_home: true, ..ask() }).is_ok());
    }

    #[test]
    fn two_layers_keep_the_stricter_of_each_limit() {
        let org = Policy {
            partitions: list(&["polar", "debug"]),
            max_gpus_per_job: Some(16),
            allow_home_mount: Some(true),
            ..Default::default()
        };
        let ws = Policy {
            partitions: list(&["debug", "grizzly"]),
            max_gpus_per_job: Some(4),
            max_active_jobs: Some(2),
            allow_home_mount: Some(false),
            ..Default::default()
        };
        let both = org.and(&ws);
        assert_eq!(both.partitions, list(&["debug"]));
        assert_eq!(both.max_gpus_per_job, Some(4));
        assert_eq!(both.max_active_jobs, Some(2));
        assert_eq!(both.allow_home_mount, Some(false));
        assert_eq!(both, ws.and(&org), "the order of the layers does not matter");
        assert_eq!(Policy::default().and(&org), org);
    }

    #[test]
    fn an_operator_cannot_allow_what_is_never_allowed() {
        let p = Policy { sbatch_options: list(&["mail-type", "dependency"]), ..Default::default() };
        assert!(p.validate().unwrap_err().contains("dependency"));
        let p = Policy { mount_roots: list(&["relative"]), ..Default::default() };
        assert!(p.validate().unwrap_err().contains("mount_roots"));
        assert!(strict().validate().is_ok());
    }
}
