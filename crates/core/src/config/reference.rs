//! The settings reference: one definition per setting (its names, its default as users see it, what
//! it means), and the markdown tables of docs/configuration.md rendered from them. Defaults the code
//! holds as constants are taken from those constants, so a changed default changes the page; a unit
//! test fails when the page's generated block differs from [`render`] (regenerate it with
//! `tao-slurm gen-docs --settings docs/configuration.md`).

use super::aliases::{Translate, ALIASES, STATE_FILE_IN_TAO_DIR};
use super::*;
use crate::attempts::{OnPreempt, DEFAULT_MAX_PREEMPTIONS};
use crate::checkpoint::DEFAULT_PATTERNS;
use crate::layout::{DEFAULT_CPUS_PER_TASK, DEFAULT_GPUS, DEFAULT_MAX_CPUS_PER_TASK, DEFAULT_MOUNT};
use crate::retry::MAX_JOB_RETRIES;
use std::fmt::Display;

/// The line that opens each generated block of the page.
pub const BEGIN_MARKER: &str = "<!-- generated: tao-slurm gen-docs --settings; do not edit by hand -->";
/// The line that closes it.
pub const END_MARKER: &str = "<!-- end generated -->";
/// The command that writes the blocks again.
pub const REGENERATE: &str = "tao-slurm gen-docs --settings docs/configuration.md";

/// One row of the reference. `names` are as the row shows them: a name starting with `_` is the
/// previous full name's stem (up to its last `_`) followed by it (`TAO_SLURM_SQSH_PARTITION`,
/// `_MEMORY`: `TAO_SLURM_SQSH_MEMORY`).
#[derive(Debug, Clone)]
pub struct Setting {
    pub names: &'static [&'static str],
    pub default: String,
    pub meaning: String,
}

impl Setting {
    /// The full names this row stands for.
    pub fn full_names(&self) -> Vec<String> {
        expand(self.names)
    }
}

fn expand(names: &[&str]) -> Vec<String> {
    let mut stem = "";
    let mut out = Vec::new();
    for n in names {
        match n.strip_prefix('_') {
            Some(rest) => out.push(format!("{stem}_{rest}")),
            None => {
                stem = n.rsplit_once('_').map_or(*n, |(s, _)| s);
                out.push(n.to_string());
            }
        }
    }
    out
}

fn row(names: &'static [&'static str], default: impl Into<String>, meaning: impl Into<String>) -> Setting {
    Setting { names, default: default.into(), meaning: meaning.into() }
}

/// A value as code: `` `10` ``.
fn code(v: impl Display) -> String {
    format!("`{v}`")
}

/// A size in the largest binary unit that divides it (`10 GiB`, `128 MiB`).
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// Every setting tao-slurm reads, in the page's order.
pub fn settings() -> Vec<Setting> {
    vec![
        row(&["SLURM_USER"], "required", "SSH user on the login node"),
        row(
            &["SLURM_HOSTNAME"],
            "required",
            "comma-separated login hosts for failover; each `host`, `host:port` or an ssh_config alias",
        ),
        row(
            &["SLURM_PARTITION"],
            code(DEFAULT_PARTITIONS),
            "partition (list) for GPU jobs; the defaults are 4-hour queues",
        ),
        row(
            &["SSH_KEY_PATH"],
            "(ssh defaults)",
            "private key, used with `IdentitiesOnly`; refused if readable by group/others (fix: `chmod 600`)",
        ),
        row(&["SSH_AUTH_SOCK"], "", "agent socket, used when no key is given"),
        row(&["SSH_CONFIG"], "`~/.ssh/config`", "ssh_config file passed as `-F`"),
        row(&["SSH_KNOWN_HOSTS"], "`~/.ssh/known_hosts`", "known_hosts file; host keys are always verified"),
        row(
            &["SSH_CONNECT_TIMEOUT"],
            code(DEFAULT_CONNECT_TIMEOUT_SECS),
            "seconds; a host that fails to connect (or accepts TCP and never completes the handshake: given up after this + 5 s) is skipped by every process for 60 s, then tried again",
        ),
        row(
            &["TAO_SLURM_REMOTE_TIMEOUT"],
            code(DEFAULT_REMOTE_TIMEOUT_SECS),
            "seconds one remote call may take (image conversions get their time limit twice over); past it the call is stopped and reported as timed out, outcome unknown",
        ),
        row(
            &["SSH_ACCEPT_NEW_HOST_KEYS"],
            code(DEFAULT_ACCEPT_NEW_HOST_KEYS),
            "trust and record the key of a host seen for the first time (`--accept-new-host-key`); never for a changed key",
        ),
        row(
            &["SLURM_BASE_RESULTS_DIR"],
            "`/lustre/users/<SLURM_USER>/tao-slurm`",
            "base directory on shared storage (jobs and results)",
        ),
        row(&["SLURM_ACCOUNT"], "", "`#SBATCH --account`"),
        row(
            &["SLURM_TIME_HOURS", "SLURM_TIMEOUT_HOURS"],
            format!("{} / wall time − 0.2 h", code(DEFAULT_TIME_HOURS)),
            "wall time / inner timeout (exit 124 requeues the job); the timeout's default is the TAO SDK's, at least half the wall time (so `SLURM_TIME_HOURS=2` alone gives 1.8 h, and a job's own `time_hours` gets the same rule); a set `SLURM_TIMEOUT_HOURS` longer than a job's own wall time gives way to that rule. A job that asks for no time gets this default capped at the shortest MaxTime of its partitions (its inner timeout then follows the rule from the capped time), with a warning naming both; a time the job asks for is refused when longer",
        ),
        row(&["SLURM_USE_REQUEUE"], code(DEFAULT_USE_REQUEUE), "`#SBATCH --requeue`"),
        row(
            &["TAO_SLURM_CHECKPOINT_GRACE"],
            code(DEFAULT_CHECKPOINT_GRACE_SECONDS),
            "seconds before the inner timeout (and Slurm's wall limit) a job's steps get USR2 to save a checkpoint; `0` opts out (per job: `--checkpoint-grace`)",
        ),
        row(
            &["TAO_SLURM_CHECKPOINT_PATTERNS"],
            "TAO's",
            format!(
                "what counts as a checkpoint in a results directory, comma-separated globs (`name-*/` for directories); default {} (per job: `--checkpoint-pattern`)",
                code(DEFAULT_PATTERNS.join(","))
            ),
        ),
        row(
            &["TAO_SLURM_ON_PREEMPT"],
            code(OnPreempt::default().as_str()),
            "what a preempted job does: `resume` (a new attempt at once from its newest checkpoint) or `cancel` (it ends Canceled with the reason) (per job: `--on-preempt`)",
        ),
        row(
            &["TAO_SLURM_MAX_PREEMPTIONS"],
            code(DEFAULT_MAX_PREEMPTIONS),
            "preemptions a job survives before it ends Canceled; a budget of its own, apart from `MAX_JOB_RETRIES` (per job: `--max-preemptions`)",
        ),
        row(&["SLURM_MAX_GPUS_PER_NODE"], code(DEFAULT_MAX_GPUS_PER_NODE), "GPUs per node on this cluster"),
        row(
            &["TAO_SLURM_USE_SQSH"],
            code(DEFAULT_USE_SQSH),
            "convert registry images once into a squashfs cache on shared storage before submitting",
        ),
        row(&["TAO_SLURM_SQSH_CACHE_DIR"], "`<base>/sqsh-cache`", "the cache"),
        row(
            &["TAO_SLURM_SQSH_PARTITION", "_TIMEOUT_MINUTES", "_MEMORY"],
            format!(
                "{} / {} / {}",
                code(DEFAULT_SQSH_PARTITION),
                code(DEFAULT_SQSH_TIMEOUT_MINUTES),
                code(DEFAULT_SQSH_MEMORY)
            ),
            "where and how `enroot import` runs (`srun -n1`)",
        ),
        row(
            &["TAO_SLURM_FORCE_RECONVERT_LATEST", "TAO_SLURM_SQSH_LATEST_MAX_AGE_HOURS"],
            format!("{} / {}", code(DEFAULT_FORCE_RECONVERT_LATEST), code(DEFAULT_SQSH_LATEST_MAX_AGE_HOURS)),
            "when a cached `:latest` image is converted again (0: never by age)",
        ),
        row(
            &["TAO_SLURM_ALLOW_REGISTRY_PULL"],
            code(DEFAULT_ALLOW_REGISTRY_PULL),
            "if a conversion fails, submit with the registry image anyway (`--allow-registry-pull`)",
        ),
        row(
            &["TAO_SLURM_AUX_MAX_BYTES", "TAO_SLURM_AUX_TIMEOUT_MINUTES"],
            format!("{} / {}", size(DEFAULT_AUX_MAX_BYTES), code(DEFAULT_AUX_TIMEOUT_MINUTES)),
            "cap and time limit of each auxiliary input fetched in the job",
        ),
        row(&["NGC_KEY"], "", "NGC API key; used only by `credentials enroot` (and its preflight check)"),
        row(
            &["TAO_SLURM_STATE"],
            "`~/.local/share/tao-slurm/state.db` (`$XDG_DATA_HOME/tao-slurm/state.db` when that is set)",
            "local state (SQLite, WAL)",
        ),
        row(
            &["TAO_SLURM_DATABASE_URL", "TAO_SLURM_DATABASE_PASSWORD"],
            "",
            format!(
                "keep the jobs' state in this PostgreSQL database (`postgresql://user@host:port/db`, in the schema `TAO_SLURM_DATABASE_SCHEMA`, default {}, made and migrated on first use) instead of the state file; `serve --database URL` sets it, its password only from the environment; the service's own records (tokens, API jobs, audit, org secrets) in `<schema>_service` (the monitors' leases sit beside the jobs)",
                code(DEFAULT_DATABASE_SCHEMA)
            ),
        ),
        row(
            &["TAO_SLURM_DATABASE_CA_FILE"],
            "system roots",
            "with `?sslmode=require` in the database's URL: the CA certificates (PEM) its server's certificate must come from; TLS is always verified; the file must be yours or root's and not writable by group or others",
        ),
        row(
            &["TAO_SLURM_CONTROL_DIR"],
            "`$XDG_RUNTIME_DIR/tao-slurm`, else `/tmp/tao-slurm-<uid>`",
            "ControlMaster sockets and what ssh_config resolved for each login host (so a command whose master is up starts no `ssh -G`; kept while the ssh_config file is unchanged, at most 10 min), mode 700, yours alone (refused otherwise). Short whatever your home directory's length: a socket's path holds at most 107 bytes and ssh adds 17 while it binds, so this directory's path may be at most 73 characters (a longer one is refused with its length)",
        ),
        row(
            &["TAO_SLURM_CONTROL_PERSIST"],
            code(DEFAULT_CONTROL_PERSIST_SECS),
            "seconds an idle SSH master stays up for the next command",
        ),
        row(
            &["TAO_SLURM_LOCAL"],
            "`false` (true when `SLURM_HOSTNAME=localhost`)",
            "run on the login node itself, without SSH (`--local`)",
        ),
        row(&["MAX_JOB_RETRIES"], code(MAX_JOB_RETRIES), "resubmissions of infrastructure failures per job"),
        row(
            &["TAO_SLURM_RETRY_BACKOFF_SECS"],
            code(DEFAULT_RETRY_BACKOFF_SECS),
            "backoff base: retry n waits base × 2^(n-1) s, at most 10 min",
        ),
        row(
            &["TAO_SLURM_MAX_QUERIES_PER_MINUTE"],
            code(DEFAULT_MAX_QUERIES_PER_MINUTE),
            "the monitor's budget of scheduler queries",
        ),
        row(
            &["TAO_SLURM_SUBMIT_BATCH"],
            code(DEFAULT_SUBMIT_BATCH),
            "most concurrent submits sent to the cluster together, in one round trip (1: each alone)",
        ),
        row(
            &["TAO_SLURM_CHECKS_TTL_SECS"],
            code(DEFAULT_CHECKS_TTL_SECS),
            "how long a submit's online checks (partitions, images in the squashfs cache) are trusted, so that the next submits take one round trip each; each still checks its own input paths and image file before anything is staged (0: every submit checks first, in a round trip of its own)",
        ),
        row(
            &["TAO_SLURM_SUBMIT_BATCH_WAIT_MS"],
            code(DEFAULT_SUBMIT_BATCH_WAIT_MS),
            "how long the first submit of a batch waits for others (0: only those that arrived while the previous round trip ran go with it)",
        ),
        row(
            &["TAO_SLURM_NOTIFY"],
            "",
            "webhooks told of every job's state changes (comma-separated; see \"Notifications\" in [trust.md](trust.md)); in a cluster profile, of that workspace's jobs",
        ),
        row(
            &["TAO_SLURM_NOTIFY_PENDING_MINUTES"],
            code(DEFAULT_NOTIFY_PENDING_MINUTES),
            "a job pending this long after it reached Slurm is announced as stuck (once per attempt; 0: never)",
        ),
        row(
            &["TAO_SLURM_GPU_SAMPLE_SECS"],
            code(DEFAULT_GPU_SAMPLE_SECS),
            "seconds between a running job's GPU samples on each of its nodes (`nvidia-smi`, beside its step; 0: none); a job's `gpu_watch` says otherwise for itself",
        ),
        row(
            &["TAO_SLURM_GPU_IDLE_PERCENT"],
            code(DEFAULT_GPU_IDLE_PERCENT),
            "a GPU under this utilisation (percent) is idle",
        ),
        row(
            &["TAO_SLURM_GPU_IDLE_SECS", "TAO_SLURM_GPU_IDLE_ACTION"],
            format!("{} / `notify`", code(DEFAULT_GPU_IDLE_SECS)),
            "every GPU of a job idle this long: the job is idle (0: never), and what it does then: `notify` (an event and its webhooks) or `cancel`",
        ),
        row(
            &["TAO_SLURM_GPU_HANG_SECS", "TAO_SLURM_GPU_HANG_ACTION"],
            format!("{} / `notify`", code(DEFAULT_GPU_HANG_SECS)),
            "a node's GPUs idle and no new progress line this long: the job is hung (0: never), and what it does then: `notify`, `cancel`, or `restart` (a new attempt from its newest checkpoint without the hung nodes, counted as an infrastructure retry)",
        ),
        row(&["TAO_SLURM_LOG"], code(DEFAULT_LOG_FILTER), "log filter (`info`, `debug`), on stderr"),
        row(
            &["SLURM_CPUS_PER_TASK", "SLURM_MAX_CPUS_PER_TASK"],
            format!("{} / {}", code(DEFAULT_CPUS_PER_TASK), code(DEFAULT_MAX_CPUS_PER_TASK)),
            "CPUs per task of a job that does not say: the TAO SDK's rule, `SLURM_CPUS_PER_TASK` per GPU of a single-node job (its one task feeds every GPU's data loaders: 4 GPUs get 64), capped by `SLURM_MAX_CPUS_PER_TASK`; a multi-node or Cosmos-RL job gets `SLURM_CPUS_PER_TASK` per task / the most a job may ask for",
        ),
        row(
            &["SLURM_NUM_GPUS"],
            format!("({DEFAULT_GPUS})"),
            "GPUs per node of a CLI, MCP or service job that does not say (Python's `gpu_count` defaults to 1, as the TAO SDK's)",
        ),
        row(
            &["SLURM_ENROOT_TEMP_PATH"],
            "(enroot's)",
            "where an image conversion's `enroot import` unpacks: a directory of its own inside, removed afterwards",
        ),
        row(
            &["SLURM_USE_SRUN_LOGS"],
            code(DEFAULT_USE_SRUN_LOGS),
            "read as the TAO SDK reads it, but every node's output always goes to main.out/main.err (where `logs`, `follow` and the failure analysis read it); `preflight` says so when it is true",
        ),
        row(
            &["NCCL_DEBUG", "LOGLEVEL"],
            format!("{} / {}", code(DEFAULT_NCCL_DEBUG), code(DEFAULT_LOGLEVEL)),
            "exported in every job's container, as the TAO SDK's batch script does; a job's own `env` wins",
        ),
        row(
            &["S3_BUCKET_NAME", "CLOUD_REGION"],
            "",
            "with `ACCESS_KEY`, `SECRET_KEY`, `S3_ENDPOINT_URL`: the TAO SDK's `CLOUD_METADATA` (`{\"aws\":{BUCKET:{cloud_region, access_key, secret_key, endpoint_url}}}`), forwarded to the container as a secret (it holds the keys), and `CLOUD_REGION` as `AWS_DEFAULT_REGION`",
        ),
        row(
            &["SLURM_CONTAINER_MOUNTS"],
            format!("{} when the base directory is below it, else none", code(DEFAULT_MOUNT)),
            "every job's container mounts (comma-separated `SRC[:DST[:ro]]`); `--mount` adds to them; the base directory is mounted at its own path in any case (the job's results, specs and logs are named by it); `preflight` checks that each source exists (Pyxis ends a step that mounts a missing one)",
        ),
        row(&["SLURM_USE_TIMEOUT"], code(DEFAULT_USE_TIMEOUT), "run the container step under the inner timeout"),
        row(
            &["SLURM_MAIL_USER"],
            "",
            "`#SBATCH --mail-user` with `--mail-type=ALL` (unless the job sets them)",
        ),
        row(
            &["TAO_SLURM_FORWARD_CREDENTIALS"],
            code(DEFAULT_FORWARD_CREDENTIALS),
            "forward the TAO SDK's credentials to every job's container, as secrets (below); the service forwards them only to a workspace whose profile says `forward_credentials = true`",
        ),
        row(&["TAO_SLURM_CLUSTER"], "", "cluster profile to use (`--cluster NAME`), from the profiles file"),
        row(
            &["TAO_SLURM_CLUSTERS_FILE"],
            "`clusters.toml` beside the env file",
            "the cluster profiles, and the service's grants and policies (see [service.md](service.md))",
        ),
        row(
            &["TAO_SLURM_SECRETS_KEY_FILE"],
            "",
            "the service's key for the orgs' stored secrets: 32 bytes (or 64 hex digits), a file of the service's user with mode 600 (refused otherwise)",
        ),
        row(
            &["TAO_SLURM_DOWNLOAD_MAX_BYTES"],
            size(DEFAULT_DOWNLOAD_MAX_BYTES),
            "the most bytes (the tar stream before compression) one `:download` archive of the service may hold",
        ),
        row(
            &["TAO_SLURM_TAO_IMAGES"],
            "",
            "the service's file of TAO images (TOML: `[images]` by TAO's image key, `[networks]` a network's key), over TAO's own `IMAGE_*` variables, for jobs made from TAO's bodies (see \"TAO's own client\" in [service.md](service.md)); yours or root's, not writable by group or others",
        ),
    ]
}

/// The TAO SDK's names, a row per group of [`ALIASES`] (names as in [`Setting::names`]); each shown
/// beside the tao-slurm name it stands for, with the translation between them.
pub const TAO_SDK_ROWS: &[&[&str]] = &[
    &["SSH_USER", "SSH_HOST"],
    &["SLURM_USE_SQSH", "SLURM_SQSH_CACHE_DIR", "SLURM_FORCE_RECONVERT_LATEST"],
    &["SLURM_REQUIRE_SQSH"],
    &["SLURM_CONVERSION_PARTITION", "_TIMEOUT_MINUTES", "SLURM_CONVERSION_MEMORY_GB"],
    &["TAO_SDK_STATE_DIR"],
];

/// One table row: cells between `|`, an empty cell as `| |`.
fn table_row(cells: &[String]) -> String {
    let mut line = String::from("|");
    for c in cells {
        line.push_str(&if c.is_empty() { " |".to_string() } else { format!(" {c} |") });
    }
    line
}

/// The settings table.
pub fn settings_table() -> String {
    let mut out = vec![table_row(&["setting".into(), "default".into(), "meaning".into()]), "|---|---|---|".into()];
    for s in settings() {
        let names: Vec<String> = s.names.iter().map(code).collect();
        out.push(table_row(&[names.join(" / "), s.default, s.meaning]));
    }
    out.join("\n") + "\n"
}

/// `name` as a row shows it: `_REST` when `short` and `name` is `stem` + `_REST`, else in full.
fn shown(name: &str, stem: &str, short: bool) -> String {
    match name.strip_prefix(stem).and_then(|r| r.strip_prefix('_')) {
        Some(rest) if short => format!("_{rest}"),
        _ => name.to_string(),
    }
}

/// The table of the TAO SDK's names and the tao-slurm names they stand for.
pub fn tao_sdk_table() -> Result<String, String> {
    let mut out = vec![table_row(&["TAO SDK".into(), "tao-slurm".into()]), "|---|---|".into()];
    for group in TAO_SDK_ROWS {
        let (mut tao, mut ours, mut stem) = (Vec::new(), Vec::new(), String::new());
        for (token, full) in group.iter().zip(expand(group)) {
            let a = ALIASES.iter().find(|a| a.tao == full).ok_or(format!("{full} is not a TAO SDK name"))?;
            let short = token.starts_with('_');
            let ours_name = shown(a.ours, &stem, short);
            if !short {
                stem = a.ours.rsplit_once('_').map_or(a.ours, |(s, _)| s).to_string();
            }
            let (t, o) = match a.translate {
                Translate::Same => (code(token), code(ours_name)),
                Translate::Negate => (code(format!("{token}=true\\|false")), code(format!("{ours_name}=false\\|true"))),
                Translate::Gigabytes => (code(format!("{token}=N")), code(format!("{ours_name}=NG"))),
                Translate::StateFileIn => (
                    code(token),
                    format!(
                        "{} (never the TAO SDK's own `tao_session_state.db`)",
                        code(format!("{ours_name}=<dir>/{STATE_FILE_IN_TAO_DIR}"))
                    ),
                ),
            };
            tao.push(t);
            ours.push(o);
        }
        out.push(table_row(&[tao.join(" / "), ours.join(" / ")]));
    }
    Ok(out.join("\n") + "\n")
}

/// The generated blocks of docs/configuration.md, in the page's order: the settings, then the TAO
/// SDK's names.
pub fn render() -> Vec<String> {
    vec![settings_table(), tao_sdk_table().expect("TAO_SDK_ROWS name TAO SDK names only")]
}

/// `page` with each block between [`BEGIN_MARKER`] and [`END_MARKER`] replaced by the next of
/// `blocks`; an error when the page's blocks are not exactly as many, or one is not closed.
pub fn replace_blocks(page: &str, blocks: &[String]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = page;
    let mut blocks = blocks.iter();
    while let Some(start) = rest.find(BEGIN_MARKER) {
        let body_start = start + BEGIN_MARKER.len();
        let end = rest[body_start..].find(END_MARKER).ok_or(format!("a {BEGIN_MARKER} line has no {END_MARKER}"))?;
        let block = blocks.next().ok_or("the page has more generated blocks than there are tables")?;
        out.push_str(&rest[..body_start]);
        out.push('\n');
        out.push_str(block);
        out.push_str(END_MARKER);
        rest = &rest[body_start + end + END_MARKER.len()..];
    }
    if blocks.next().is_some() {
        return Err(format!("the page has fewer generated blocks ({BEGIN_MARKER}) than there are tables"));
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::aliases::READ;
    use std::collections::BTreeSet;

    /// Names read only by the tests' own code.
    const TEST_ONLY: &[&str] = &["TAO_SLURM_FAILPOINT"];
    /// Read by the service's own code, not through `Settings::from_sources`.
    const READ_ELSEWHERE: &[&str] = &["TAO_SLURM_DOWNLOAD_MAX_BYTES", "TAO_SLURM_TAO_IMAGES"];

    #[test]
    fn the_page_holds_the_rendered_tables() {
        let page = include_str!("../../../../docs/configuration.md");
        let fresh = replace_blocks(page, &render()).unwrap();
        assert!(
            fresh == page,
            "docs/configuration.md's generated tables differ from the settings' definitions \
             (crates/core/src/config/reference.rs); run `{REGENERATE}` (or `cargo run -- gen-docs --settings docs/configuration.md`)"
        );
    }

    /// Every name tao-slurm reads has a definition (a row, or named in a row's meaning, as
    /// `TAO_SLURM_DATABASE_SCHEMA` is), and every `SLURM_`/`TAO_SLURM_` name a row defines is read
    /// (or named in `READ_ELSEWHERE`).
    #[test]
    fn every_setting_read_has_a_definition_and_every_definition_is_read() {
        let defs = settings();
        let defined: BTreeSet<String> = defs.iter().flat_map(Setting::full_names).collect();
        for name in READ.iter().filter(|n| !TEST_ONLY.contains(n)) {
            let mentioned = defs.iter().any(|d| d.meaning.contains(&format!("`{name}`")));
            assert!(
                defined.contains(*name) || mentioned,
                "{name} is read but the settings reference does not define it"
            );
        }
        let ours = |n: &&String| n.starts_with("SLURM_") || n.starts_with("TAO_SLURM_");
        for name in defined.iter().filter(ours) {
            assert!(
                READ.contains(&name.as_str()) || READ_ELSEWHERE.contains(&name.as_str()),
                "the settings reference defines {name}, which nothing reads"
            );
        }
        assert_eq!(defined.len(), defs.iter().map(|d| d.names.len()).sum::<usize>(), "a name defined twice");
    }

    #[test]
    fn every_tao_sdk_name_has_one_row() {
        let shown: Vec<String> = TAO_SDK_ROWS.iter().flat_map(|r| expand(r)).collect();
        for a in ALIASES {
            assert_eq!(shown.iter().filter(|n| **n == a.tao).count(), 1, "{} in the TAO SDK's table", a.tao);
        }
        assert_eq!(shown.len(), ALIASES.len());
        let table = tao_sdk_table().unwrap();
        assert!(table.contains("| `SLURM_CONVERSION_PARTITION` / `_TIMEOUT_MINUTES` / `SLURM_CONVERSION_MEMORY_GB=N` | `TAO_SLURM_SQSH_PARTITION` / `_TIMEOUT_MINUTES` / `TAO_SLURM_SQSH_MEMORY=NG` |"), "{table}");
    }

    #[test]
    fn defaults_come_from_the_code() {
        let table = settings_table();
        let row = |name: &str| table.lines().find(|l| l.starts_with(&format!("| `{name}`"))).unwrap().to_string();
        assert!(row("SSH_CONNECT_TIMEOUT").contains(&format!("| `{DEFAULT_CONNECT_TIMEOUT_SECS}` |")));
        assert!(row("SLURM_TIME_HOURS").contains("| `4` / wall time"), "{}", row("SLURM_TIME_HOURS"));
        assert!(row("TAO_SLURM_AUX_MAX_BYTES").contains("| 10 GiB / `30` |"));
        assert!(row("TAO_SLURM_CHECKPOINT_PATTERNS").contains("`*.pth,*.pt,"));
        assert_eq!(
            (size(128 << 20), size(3 << 30), size(1000)),
            ("128 MiB".into(), "3 GiB".into(), "1000 bytes".into())
        );
    }

    #[test]
    fn blocks_are_replaced_in_order_and_miscounts_are_refused() {
        let page = format!("a\n{BEGIN_MARKER}\nold\n{END_MARKER}\nb\n{BEGIN_MARKER}\n{END_MARKER}\nc\n");
        let got = replace_blocks(&page, &["one\n".into(), "two\n".into()]).unwrap();
        assert_eq!(got, format!("a\n{BEGIN_MARKER}\none\n{END_MARKER}\nb\n{BEGIN_MARKER}\ntwo\n{END_MARKER}\nc\n"));
        assert!(replace_blocks(&page, &["one\n".into()]).is_err());
        assert!(replace_blocks(&page, &["1".into(), "2".into(), "3".into()]).is_err());
        assert!(replace_blocks(&format!("{BEGIN_MARKER}\nx"), &["1".into()]).is_err());
    }
}
