//! Settings, with the precedence flags > environment > env file (`~/.config/tao/.env`) > packaged
//! defaults. Loaded and validated once; everything else reads this struct.

pub mod aliases;
pub mod reference;

use std::collections::HashMap;
use std::path::PathBuf;

/// The contract's message when the two required settings are absent.
pub const MISSING_MESSAGE: &str =
    "MISSING: set SLURM_USER and SLURM_HOSTNAME (comma-separated for failover) in your env (~/.config/tao/.env).";

/// The auxiliary-input limits when the settings do not give them (TAO_SLURM_AUX_MAX_BYTES,
/// TAO_SLURM_AUX_TIMEOUT_MINUTES).
pub const DEFAULT_AUX_MAX_BYTES: u64 = 10 << 30;
pub const DEFAULT_AUX_TIMEOUT_MINUTES: u32 = 30;
/// Seconds a job's step has to save a checkpoint between its warning (USR2) and its time limit.
pub const DEFAULT_CHECKPOINT_GRACE_SECONDS: u64 = 300;

/// The packaged default partitions, treated as 4-hour queues.
pub const DEFAULT_PARTITIONS: &str = "polar,polar3,polar4,grizzly";

// The other defaults a setting falls back to; the settings reference ([`reference`]) shows these.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u32 = 10;
pub const DEFAULT_REMOTE_TIMEOUT_SECS: u32 = 120;
pub const DEFAULT_ACCEPT_NEW_HOST_KEYS: bool = false;
pub const DEFAULT_CONTROL_PERSIST_SECS: u32 = 1800;
pub const DEFAULT_TIME_HOURS: f64 = 4.0;
pub const DEFAULT_USE_REQUEUE: bool = true;
pub const DEFAULT_MAX_GPUS_PER_NODE: u32 = 8;
pub const DEFAULT_USE_SQSH: bool = true;
pub const DEFAULT_SQSH_PARTITION: &str = "cpu";
pub const DEFAULT_SQSH_TIMEOUT_MINUTES: u32 = 30;
pub const DEFAULT_SQSH_MEMORY: &str = "32G";
pub const DEFAULT_FORCE_RECONVERT_LATEST: bool = false;
pub const DEFAULT_SQSH_LATEST_MAX_AGE_HOURS: u32 = 0;
pub const DEFAULT_ALLOW_REGISTRY_PULL: bool = false;
pub const DEFAULT_RETRY_BACKOFF_SECS: u32 = 30;
pub const DEFAULT_MAX_QUERIES_PER_MINUTE: u32 = 30;
/// Concurrent submits that go to the cluster together (group commit): at most this many in one round
/// trip. Its script grows by one submission's (a few KB) per member, and its deadline by
/// [`SUBMIT_BATCH_SECS_PER_MEMBER`].
pub const DEFAULT_SUBMIT_BATCH: u32 = 64;
/// How long the first of a batch waits for others before it goes (0: only what arrived while the
/// round trip before it was in flight goes with it, so a lone submit waits for nobody).
pub const DEFAULT_SUBMIT_BATCH_WAIT_MS: u32 = 0;
/// How long what a submit's online checks found (partitions, images in the squashfs cache) is
/// trusted, so that the next submits go in one round trip each (0: every submit checks first).
pub const DEFAULT_CHECKS_TTL_SECS: u32 = 300;
/// What each member adds to a batch's deadline (its sbatch and its few files).
pub const SUBMIT_BATCH_SECS_PER_MEMBER: u64 = 2;
pub const DEFAULT_DATABASE_SCHEMA: &str = "tao_state";
pub const DEFAULT_NOTIFY_PENDING_MINUTES: u32 = 60;
/// Seconds between a running job's GPU samples on each node (`nvidia-smi`; 0: none).
pub const DEFAULT_GPU_SAMPLE_SECS: u32 = 30;
/// A GPU under this utilisation (percent) is idle: a stalled data loader shows a few percent.
pub const DEFAULT_GPU_IDLE_PERCENT: u32 = 5;
/// Every GPU of a job idle this long: the job is idle (an hour: a notebook left open, a job waiting
/// on something that will not come).
pub const DEFAULT_GPU_IDLE_SECS: u32 = 3600;
/// A node's GPUs idle and no new progress line this long: the job is hung (PyTorch's NCCL watchdog
/// gives up on a collective after 30 minutes by default; a training still silent then is stuck).
pub const DEFAULT_GPU_HANG_SECS: u32 = 1800;
pub const DEFAULT_USE_SRUN_LOGS: bool = false;
pub const DEFAULT_NCCL_DEBUG: &str = "INFO";
pub const DEFAULT_LOGLEVEL: &str = "INFO";
pub const DEFAULT_USE_TIMEOUT: bool = true;
pub const DEFAULT_FORWARD_CREDENTIALS: bool = true;
/// The log filter when `TAO_SLURM_LOG` is not set (the doors read it).
pub const DEFAULT_LOG_FILTER: &str = "warn";
/// The most bytes one `:download` archive of the service holds unless `TAO_SLURM_DOWNLOAD_MAX_BYTES`
/// says otherwise (the service reads it).
pub const DEFAULT_DOWNLOAD_MAX_BYTES: u64 = 128 << 20;

/// The setting that names the cluster profile in use (the engine's `profiles` reads the profiles).
pub const CLUSTER_SETTING: &str = "TAO_SLURM_CLUSTER";

/// Whether `name` can name a cluster: letters, digits, `.`, `_`, `-`, at most 63, not `default`
/// (the service's name for the settings without a profile).
pub fn check_cluster_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !ok {
        return Err(format!(
            "{name:?} is not a cluster name (letters, digits, . _ -, at most 63, starting with a letter or digit)"
        ));
    }
    if name == "default" {
        return Err("\"default\" names the settings without a profile; choose another name".into());
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{MISSING_MESSAGE}")]
    Missing,
    #[error("invalid setting {name}: {message}")]
    Invalid { name: &'static str, message: String },
    #[error("cannot read env file {path}: {message}")]
    EnvFile { path: PathBuf, message: String },
}

/// One login host: `host`, `host:port` or an ssh_config alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginHost {
    pub host: String,
    pub port: Option<u16>,
}

impl LoginHost {
    pub fn parse(text: &str) -> Result<LoginHost, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { name: "SLURM_HOSTNAME", message };
        let text = text.trim();
        if text.is_empty() || text.starts_with('-') || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(format!("{text:?} is not a host name, host:port or ssh_config alias")));
        }
        if !text.chars().all(|c| c.is_ascii_alphanumeric() || "._-:[]@%".contains(c)) {
            return Err(invalid(format!("{text:?} contains characters a host name cannot have")));
        }
        if let Some((host, port)) = text.rsplit_once(':') {
            if !host.contains(':') || host.starts_with('[') {
                let port: u16 = port
                    .parse()
                    .map_err(|_| invalid(format!("{text:?}: the port after ':' must be a number from 1 to 65535")))?;
                let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
                return Ok(LoginHost { host, port: Some(port) });
            }
        }
        Ok(LoginHost { host: text.to_string(), port: None })
    }

    /// `host` or `host:port`, for messages and the state file.
    pub fn label(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }

    pub fn is_local(&self) -> bool {
        self.host == "localhost" && self.port.is_none()
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub slurm_user: Option<String>,
    pub login_hosts: Vec<LoginHost>,
    pub partition: String,
    pub ssh_key_path: Option<PathBuf>,
    pub ssh_auth_sock: Option<String>,
    pub ssh_config: Option<PathBuf>,
    pub ssh_known_hosts: Option<PathBuf>,
    /// Log in with `ssh_key_path` only: ssh reads `ssh_config` (the service's own) or no config file
    /// at all, never the user's or the system's, uses no agent and offers no other identity. Set by
    /// the service for an org's own workspace; no setting name reads it.
    pub ssh_key_only: bool,
    pub connect_timeout_secs: u32,
    /// Deadline of one remote call (a round trip), in seconds; longer calls (image conversions) get
    /// their own. A call past it is stopped and reported as timed out, outcome unknown.
    pub remote_timeout_secs: u32,
    /// Trust and record the host key of a host seen for the first time (OpenSSH's accept-new).
    pub accept_new_host_keys: bool,
    /// How long an idle ControlMaster stays up after the last command, in seconds.
    pub control_persist_secs: u32,
    /// Where ControlMaster sockets live (a private directory).
    pub control_dir: PathBuf,
    pub base_results_dir: Option<String>,
    pub account: Option<String>,
    pub time_hours: f64,
    /// The inner timeout SLURM_TIMEOUT_HOURS gives; None: the wall time's default
    /// ([`crate::plan::default_timeout_hours`]: 0.2 h less, as the TAO SDK's).
    pub timeout_hours: Option<f64>,
    pub use_requeue: bool,
    pub max_gpus_per_node: u32,
    pub state_path: PathBuf,
    /// Run commands on this machine (we are on the login node).
    pub local: bool,
    /// Resubmissions allowed for infrastructure failures (MAX_JOB_RETRIES).
    pub max_retries: u32,
    /// Base of the exponential backoff between retries, in seconds.
    pub retry_backoff_secs: u64,
    /// The monitor's budget of scheduler queries per minute.
    pub max_queries_per_minute: u32,
    /// Most submits of one batch (`TAO_SLURM_SUBMIT_BATCH`; 1: each submit alone).
    pub submit_batch: u32,
    /// How long a batch's first submit waits for others, in milliseconds.
    pub submit_batch_wait_ms: u32,
    /// How long a submit's online checks are trusted for the next ones (`TAO_SLURM_CHECKS_TTL_SECS`).
    pub checks_ttl_secs: u32,
    /// Webhooks every job of these settings (a workspace: its profile) notifies (`TAO_SLURM_NOTIFY`,
    /// comma-separated; secrets: their URLs carry tokens).
    pub notify: Vec<crate::spec::Secret>,
    /// The PostgreSQL database the state lives in instead of the state file (`TAO_SLURM_DATABASE_URL`,
    /// `serve --database`): a secret, since its URL may carry a password.
    pub database_url: Option<crate::spec::Secret>,
    /// The database's password when its URL has none (`TAO_SLURM_DATABASE_PASSWORD`: a URL given on
    /// the command line never carries one).
    pub database_password: Option<crate::spec::Secret>,
    /// The schema of the state in that database (`TAO_SLURM_DATABASE_SCHEMA`, default `tao_state`):
    /// letters, digits and `_`, as a state file's path is one service's.
    pub database_schema: String,
    /// The CA certificates (PEM) a database reached with `sslmode=require` must have a certificate
    /// from (`TAO_SLURM_DATABASE_CA_FILE`; none: the system's roots).
    pub database_ca_file: Option<PathBuf>,
    /// Minutes a submitted job may stay pending before its webhooks hear it is stuck (0: never).
    pub notify_pending_minutes: u32,
    /// Every job's GPU watch unless the job says otherwise (TAO_SLURM_GPU_*).
    pub gpu_watch: crate::gpu::GpuWatch,
    /// Convert registry images to squashfs files in a cache on shared storage before submitting.
    pub use_sqsh: bool,
    pub sqsh: crate::sqsh::SqshPolicy,
    /// If a conversion fails, submit with the registry image anyway (every node then pulls it).
    pub allow_registry_pull: bool,
    /// Largest auxiliary input (s3, Hugging Face, NGC) a job may fetch, in bytes.
    pub aux_max_bytes: u64,
    pub aux_timeout_minutes: u64,
    /// NGC API key, used only to install enroot credentials on the cluster.
    pub ngc_key: Option<crate::spec::Secret>,
    /// CPUs per task of a job that does not say (SLURM_CPUS_PER_TASK), and the most a job may ask for
    /// (SLURM_MAX_CPUS_PER_TASK).
    pub cpus_per_task: u32,
    pub max_cpus_per_task: u32,
    /// GPUs per node of a job that does not say (SLURM_NUM_GPUS; tao-slurm's default 4 otherwise).
    pub default_gpus: Option<u32>,
    /// SLURM_USE_SRUN_LOGS, read as the TAO SDK reads it; tao-slurm keeps every node's output in
    /// main.out/main.err whatever it says (preflight says so when it is true).
    pub use_srun_logs: bool,
    /// NCCL_DEBUG and LOGLEVEL, exported in every job's container as the TAO SDK's script does (INFO
    /// unless set; a job's own `env` wins).
    pub nccl_debug: String,
    pub log_level: String,
    /// The container mounts every job has unless it replaces them (SLURM_CONTAINER_MOUNTS).
    pub container_mounts: Vec<String>,
    /// Run the container step under the inner timeout (SLURM_USE_TIMEOUT).
    pub use_timeout: bool,
    /// Seconds before the time limit a job's step is warned (USR2) to save a checkpoint
    /// (TAO_SLURM_CHECKPOINT_GRACE, default 300; 0: no warning).
    pub checkpoint_grace_seconds: u64,
    /// What counts as a checkpoint (TAO_SLURM_CHECKPOINT_PATTERNS, comma-separated; TAO's by default).
    pub checkpoint_patterns: Vec<String>,
    /// What a preemption does to a job that does not say (TAO_SLURM_ON_PREEMPT: resume or cancel).
    pub on_preempt: crate::attempts::OnPreempt,
    /// Preemptions a job survives (TAO_SLURM_MAX_PREEMPTIONS, default 10), apart from MAX_JOB_RETRIES.
    pub max_preemptions: u32,
    /// Mail Slurm's job notices to this address (SLURM_MAIL_USER, with --mail-type=ALL).
    pub mail_user: Option<String>,
    /// Credentials forwarded to every job's container as secrets, under the container's names
    /// ([`aliases::FORWARDED_CREDENTIALS`]; off with TAO_SLURM_FORWARD_CREDENTIALS=false).
    pub forwarded_secrets: Vec<(String, crate::spec::Secret)>,
    /// Names that look like settings but that nothing reads, with the closest known name (preflight
    /// reports them).
    pub unrecognised: Vec<(String, Option<&'static str>)>,
    /// The cluster profile these settings come from (`--cluster`; the engine's `profiles`); None for
    /// the settings without a profile. Every job records it.
    pub cluster: Option<String>,
    /// The person a team service's person workspace acts for (its webhooks name them); None
    /// elsewhere. Set by the service, never by a setting.
    pub person: Option<String>,
}

/// Where values come from, highest precedence first.
pub struct SettingSources {
    pub flags: HashMap<String, String>,
    pub env: HashMap<String, String>,
    pub file: HashMap<String, String>,
    /// The user id of the process (the engine's gathering sets it): the default control directory
    /// outside `$XDG_RUNTIME_DIR` is `/tmp/tao-slurm-<uid>`. None: not known (then that default
    /// needs `XDG_RUNTIME_DIR` or `TAO_SLURM_CONTROL_DIR`).
    pub uid: Option<u32>,
}

impl SettingSources {
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        [&self.flags, &self.env, &self.file]
            .into_iter()
            .find_map(|m| m.get(name).filter(|v| !v.trim().is_empty()).cloned())
    }

    /// A setting parsed by `parse` (whose error names it), or `default` when it is not set.
    fn parse<T>(
        &self,
        name: &'static str,
        parse: impl FnOnce(&str) -> Result<T, ConfigError>,
        default: impl FnOnce() -> T,
    ) -> Result<T, ConfigError> {
        self.get(name).map_or_else(|| Ok(default()), |v| parse(&v))
    }

    /// A true/false setting.
    fn flag(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        self.parse(name, |v| parse_bool(name, v), || default)
    }

    /// A whole-number setting of at least `min`.
    fn count(&self, name: &'static str, min: u32, default: u32) -> Result<u32, ConfigError> {
        self.parse(name, |v| parse_u32(name, v, min), || default)
    }

    /// A positive number of hours.
    fn hours(&self, name: &'static str, default: f64) -> Result<f64, ConfigError> {
        self.parse(name, |v| parse_hours(name, v), || default)
    }
}

/// The home directory the environment names, if any.
pub fn home_dir(env: &HashMap<String, String>) -> Option<PathBuf> {
    env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// A boolean as the TAO SDK reads one (`1`, `true`, `yes`, `y`, `on`), with the matching words for
/// false; any other text is an error naming the setting, where the TAO SDK reads it as false.
/// A schema's name: 1 to 55 lower-case letters, digits and `_`, not starting with a digit.
fn parse_schema(v: &str) -> Result<String, ConfigError> {
    let v = v.trim();
    // 55: the service's records go in `<name>_service`, within PostgreSQL's 63.
    let ok = (1..=55).contains(&v.len())
        && v.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !v.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(v.to_string())
    } else {
        let message = format!("{v:?} is not a schema name (1-55 of a-z, 0-9, _; not starting with a digit)");
        Err(ConfigError::Invalid { name: "TAO_SLURM_DATABASE_SCHEMA", message })
    }
}

/// A secret's text, None when blank.
fn secret_text(v: &str) -> Option<crate::spec::Secret> {
    (!v.trim().is_empty()).then(|| crate::spec::Secret::new(v.trim()))
}

pub fn parse_bool(name: &'static str, text: &str) -> Result<bool, ConfigError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "y" | "on" => Ok(true),
        "0" | "false" | "no" | "n" | "off" => Ok(false),
        other => Err(ConfigError::Invalid {
            name,
            message: format!("{other:?} is not a boolean (true/false, yes/no, y/n, 1/0, on/off)"),
        }),
    }
}

fn parse_hours(name: &'static str, text: &str) -> Result<f64, ConfigError> {
    match text.trim().parse::<f64>() {
        Ok(h) if h.is_finite() && h > 0.0 => Ok(h),
        _ => Err(ConfigError::Invalid { name, message: format!("{text:?} is not a positive number of hours") }),
    }
}

fn parse_u32(name: &'static str, text: &str, min: u32) -> Result<u32, ConfigError> {
    match text.trim().parse::<u32>() {
        Ok(v) if v >= min => Ok(v),
        _ => Err(ConfigError::Invalid { name, message: format!("{text:?} is not a whole number >= {min}") }),
    }
}

/// The Slurm words every remote command is built from, each checked before it can reach a script.
struct Slurm {
    slurm_user: Option<String>,
    login_hosts: Vec<LoginHost>,
    partition: String,
    account: Option<String>,
}

impl Slurm {
    fn from_sources(src: &SettingSources) -> Result<Slurm, ConfigError> {
        let slurm_user = src.get("SLURM_USER").map(|u| u.trim().to_string());
        if let Some(u) = &slurm_user {
            let ok = u.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) && !u.starts_with('-');
            if !ok {
                return Err(ConfigError::Invalid {
                    name: "SLURM_USER",
                    message: format!("{u:?} is not a user name (letters, digits, . _ -)"),
                });
            }
        }
        let login_hosts = match src.get("SLURM_HOSTNAME") {
            Some(list) => {
                list.split(',').filter(|s| !s.trim().is_empty()).map(LoginHost::parse).collect::<Result<Vec<_>, _>>()?
            }
            None => Vec::new(),
        };
        let partition = src.get("SLURM_PARTITION").unwrap_or_else(|| DEFAULT_PARTITIONS.to_string());
        for p in partition.split(',') {
            crate::spec::check_slurm_word("partition", p.trim())
                .map_err(|e| ConfigError::Invalid { name: "SLURM_PARTITION", message: e.message })?;
        }
        let account = src.get("SLURM_ACCOUNT");
        if let Some(a) = &account {
            crate::spec::check_slurm_word("account", a)
                .map_err(|e| ConfigError::Invalid { name: "SLURM_ACCOUNT", message: e.message })?;
        }
        Ok(Slurm { slurm_user, login_hosts, partition, account })
    }
}

/// The state file and the SSH control directory: given, or the state in the user's private data
/// directory and the control directory in a short place of tao-slurm's own ([`default_control_dir`]).
fn private_paths(src: &SettingSources) -> Result<(PathBuf, PathBuf), ConfigError> {
    let state_path = match src.get("TAO_SLURM_STATE") {
        Some(p) => PathBuf::from(p),
        None => {
            // Without a home directory there is no private place for the state (a shared /tmp is not
            // one): stop unless it is given.
            let data = match src.get("XDG_DATA_HOME") {
                Some(d) => PathBuf::from(d),
                None => home_dir(&src.env).map(|h| h.join(".local/share")).ok_or_else(|| ConfigError::Invalid {
                    name: "HOME",
                    message: "is not set, so there is no private place for the state file; set HOME, or set TAO_SLURM_STATE (or XDG_DATA_HOME) to a path only you can write".into(),
                })?,
            };
            data.join("tao-slurm").join("state.db")
        }
    };
    let control_dir = match src.get("TAO_SLURM_CONTROL_DIR") {
        Some(d) => PathBuf::from(d),
        None => default_control_dir(&src.env, src.uid).ok_or_else(|| ConfigError::Invalid {
            name: "TAO_SLURM_CONTROL_DIR",
            message: "is not set, and neither XDG_RUNTIME_DIR nor the user id is known, so there is no private place for the SSH control sockets; set TAO_SLURM_CONTROL_DIR to a short directory only you can write".into(),
        })?,
    };
    Ok((state_path, control_dir))
}

/// Where the SSH control sockets (and the small files beside them) go unless TAO_SLURM_CONTROL_DIR
/// says: `$XDG_RUNTIME_DIR/tao-slurm` (the user's own runtime directory), else `/tmp/tao-slurm-<uid>`
/// (the engine creates it mode 700 and refuses it unless it is a directory of the user's that nobody
/// else can enter). Both are short whatever the home directory's length: a Unix socket's path holds
/// at most 107 bytes, and ssh adds 17 to it while it binds. None when neither is known.
pub fn default_control_dir(env: &HashMap<String, String>, uid: Option<u32>) -> Option<PathBuf> {
    match env.get("XDG_RUNTIME_DIR").map(|d| d.trim()).filter(|d| d.starts_with('/')) {
        Some(runtime) => Some(PathBuf::from(runtime).join("tao-slurm")),
        None => uid.map(|uid| PathBuf::from(format!("/tmp/tao-slurm-{uid}"))),
    }
}

fn parse_bytes(v: &str) -> Result<u64, ConfigError> {
    v.trim().parse().map_err(|_| ConfigError::Invalid {
        name: "TAO_SLURM_AUX_MAX_BYTES",
        message: format!("{v:?} is not a number of bytes"),
    })
}

fn sqsh_policy(src: &SettingSources) -> Result<crate::sqsh::SqshPolicy, ConfigError> {
    Ok(crate::sqsh::SqshPolicy {
        cache_dir: src.get("TAO_SLURM_SQSH_CACHE_DIR").unwrap_or_default(),
        partition: src.get("TAO_SLURM_SQSH_PARTITION").unwrap_or_else(|| DEFAULT_SQSH_PARTITION.to_string()),
        timeout_minutes: src.count("TAO_SLURM_SQSH_TIMEOUT_MINUTES", 1, DEFAULT_SQSH_TIMEOUT_MINUTES)? as u64,
        memory: src.get("TAO_SLURM_SQSH_MEMORY").unwrap_or_else(|| DEFAULT_SQSH_MEMORY.to_string()),
        force_reconvert_latest: src.flag("TAO_SLURM_FORCE_RECONVERT_LATEST", DEFAULT_FORCE_RECONVERT_LATEST)?,
        latest_max_age_hours: src.count("TAO_SLURM_SQSH_LATEST_MAX_AGE_HOURS", 0, DEFAULT_SQSH_LATEST_MAX_AGE_HOURS)?
            as u64,
        enroot_temp_path: src.get("SLURM_ENROOT_TEMP_PATH").map(|p| p.trim().to_string()),
    })
}

/// The credentials of the TAO SDK's names (HF_TOKEN, NGC_KEY, ...) that jobs asking for them get.
fn forwarded_secrets(src: &SettingSources) -> Result<Vec<(String, crate::spec::Secret)>, ConfigError> {
    if !src.flag("TAO_SLURM_FORWARD_CREDENTIALS", DEFAULT_FORWARD_CREDENTIALS)? {
        return Ok(Vec::new());
    }
    let mut out: Vec<(String, crate::spec::Secret)> = aliases::FORWARDED_CREDENTIALS
        .iter()
        .filter_map(|(from, to)| src.get(from).map(|v| (to.to_string(), crate::spec::Secret::new(v))))
        .collect();
    if let Some(region) = src.get("CLOUD_REGION") {
        out.push(("AWS_DEFAULT_REGION".to_string(), crate::spec::Secret::new(region.trim())));
    }
    if let Some(metadata) = aliases::cloud_metadata(|name| src.get(name)) {
        out.push(("CLOUD_METADATA".to_string(), crate::spec::Secret::new(metadata)));
    }
    Ok(out)
}

fn cluster(src: &SettingSources) -> Result<Option<String>, ConfigError> {
    let Some(name) = src.get(CLUSTER_SETTING) else { return Ok(None) };
    let name = name.trim().to_string();
    check_cluster_name(&name).map_err(|message| ConfigError::Invalid { name: "TAO_SLURM_CLUSTER", message })?;
    Ok(Some(name))
}

impl Settings {
    pub fn from_sources(src: &SettingSources) -> Result<Settings, ConfigError> {
        let unrecognised = aliases::unrecognised(src);
        let src = &aliases::apply(src);
        let Slurm { slurm_user, login_hosts, partition, account } = Slurm::from_sources(src)?;
        let local = src.flag("TAO_SLURM_LOCAL", login_hosts.len() == 1 && login_hosts[0].is_local())?;
        let (state_path, control_dir) = private_paths(src)?;
        let base = base_dir_of(src.get("SLURM_BASE_RESULTS_DIR").as_deref(), slurm_user.as_deref());
        Ok(Settings {
            slurm_user,
            login_hosts,
            partition,
            ssh_key_path: src.get("SSH_KEY_PATH").map(PathBuf::from),
            ssh_auth_sock: src.get("SSH_AUTH_SOCK"),
            ssh_config: src.get("SSH_CONFIG").map(PathBuf::from),
            ssh_known_hosts: src.get("SSH_KNOWN_HOSTS").map(PathBuf::from),
            ssh_key_only: false,
            connect_timeout_secs: src.count("SSH_CONNECT_TIMEOUT", 1, DEFAULT_CONNECT_TIMEOUT_SECS)?,
            accept_new_host_keys: src.flag("SSH_ACCEPT_NEW_HOST_KEYS", DEFAULT_ACCEPT_NEW_HOST_KEYS)?,
            control_persist_secs: src.count("TAO_SLURM_CONTROL_PERSIST", 0, DEFAULT_CONTROL_PERSIST_SECS)?,
            remote_timeout_secs: src.count("TAO_SLURM_REMOTE_TIMEOUT", 1, DEFAULT_REMOTE_TIMEOUT_SECS)?,
            control_dir,
            base_results_dir: src.get("SLURM_BASE_RESULTS_DIR"),
            account,
            time_hours: src.hours("SLURM_TIME_HOURS", DEFAULT_TIME_HOURS)?,
            timeout_hours: src.parse(
                "SLURM_TIMEOUT_HOURS",
                |v| parse_hours("SLURM_TIMEOUT_HOURS", v).map(Some),
                || None,
            )?,
            use_requeue: src.flag("SLURM_USE_REQUEUE", DEFAULT_USE_REQUEUE)?,
            max_gpus_per_node: src.count("SLURM_MAX_GPUS_PER_NODE", 1, DEFAULT_MAX_GPUS_PER_NODE)?,
            state_path,
            local,
            ngc_key: src.get("NGC_KEY").map(crate::spec::Secret::new),
            aux_max_bytes: src.parse("TAO_SLURM_AUX_MAX_BYTES", parse_bytes, || DEFAULT_AUX_MAX_BYTES)?,
            aux_timeout_minutes: src.count("TAO_SLURM_AUX_TIMEOUT_MINUTES", 1, DEFAULT_AUX_TIMEOUT_MINUTES)? as u64,
            use_sqsh: src.flag("TAO_SLURM_USE_SQSH", DEFAULT_USE_SQSH)?,
            sqsh: sqsh_policy(src)?,
            allow_registry_pull: src.flag("TAO_SLURM_ALLOW_REGISTRY_PULL", DEFAULT_ALLOW_REGISTRY_PULL)?,
            max_retries: src.count("MAX_JOB_RETRIES", 0, crate::retry::MAX_JOB_RETRIES)?,
            retry_backoff_secs: src.count("TAO_SLURM_RETRY_BACKOFF_SECS", 0, DEFAULT_RETRY_BACKOFF_SECS)? as u64,
            max_queries_per_minute: src.count("TAO_SLURM_MAX_QUERIES_PER_MINUTE", 1, DEFAULT_MAX_QUERIES_PER_MINUTE)?,
            submit_batch: src.count("TAO_SLURM_SUBMIT_BATCH", 1, DEFAULT_SUBMIT_BATCH)?,
            submit_batch_wait_ms: src.count("TAO_SLURM_SUBMIT_BATCH_WAIT_MS", 0, DEFAULT_SUBMIT_BATCH_WAIT_MS)?,
            checks_ttl_secs: src.count("TAO_SLURM_CHECKS_TTL_SECS", 0, DEFAULT_CHECKS_TTL_SECS)?,
            notify: src.parse("TAO_SLURM_NOTIFY", parse_webhooks, Vec::new)?,
            database_url: src.parse("TAO_SLURM_DATABASE_URL", |v| Ok(secret_text(v)), || None)?,
            database_password: src.parse("TAO_SLURM_DATABASE_PASSWORD", |v| Ok(secret_text(v)), || None)?,
            database_schema: src
                .parse("TAO_SLURM_DATABASE_SCHEMA", parse_schema, || DEFAULT_DATABASE_SCHEMA.to_string())?,
            database_ca_file: src.get("TAO_SLURM_DATABASE_CA_FILE").map(PathBuf::from),
            notify_pending_minutes: src.count("TAO_SLURM_NOTIFY_PENDING_MINUTES", 0, DEFAULT_NOTIFY_PENDING_MINUTES)?,
            gpu_watch: crate::gpu::GpuWatch {
                sample_secs: src.count("TAO_SLURM_GPU_SAMPLE_SECS", 0, DEFAULT_GPU_SAMPLE_SECS)?,
                idle_percent: src.count("TAO_SLURM_GPU_IDLE_PERCENT", 0, DEFAULT_GPU_IDLE_PERCENT)?,
                idle_secs: src.count("TAO_SLURM_GPU_IDLE_SECS", 0, DEFAULT_GPU_IDLE_SECS)?.into(),
                hang_secs: src.count("TAO_SLURM_GPU_HANG_SECS", 0, DEFAULT_GPU_HANG_SECS)?.into(),
                idle_action: src.parse(
                    "TAO_SLURM_GPU_IDLE_ACTION",
                    |v| {
                        crate::gpu::IdleAction::parse("TAO_SLURM_GPU_IDLE_ACTION", v)
                            .map_err(|message| ConfigError::Invalid { name: "TAO_SLURM_GPU_IDLE_ACTION", message })
                    },
                    Default::default,
                )?,
                hang_action: src.parse(
                    "TAO_SLURM_GPU_HANG_ACTION",
                    |v| {
                        crate::gpu::HangAction::parse("TAO_SLURM_GPU_HANG_ACTION", v)
                            .map_err(|message| ConfigError::Invalid { name: "TAO_SLURM_GPU_HANG_ACTION", message })
                    },
                    Default::default,
                )?,
            },
            cpus_per_task: src.count("SLURM_CPUS_PER_TASK", 1, crate::layout::DEFAULT_CPUS_PER_TASK)?,
            max_cpus_per_task: src.count("SLURM_MAX_CPUS_PER_TASK", 1, crate::layout::DEFAULT_MAX_CPUS_PER_TASK)?,
            default_gpus: src.parse("SLURM_NUM_GPUS", |v| parse_u32("SLURM_NUM_GPUS", v, 0).map(Some), || None)?,
            use_srun_logs: src.flag("SLURM_USE_SRUN_LOGS", DEFAULT_USE_SRUN_LOGS)?,
            nccl_debug: src.get("NCCL_DEBUG").map_or_else(|| DEFAULT_NCCL_DEBUG.to_string(), |v| v.trim().to_string()),
            log_level: src.get("LOGLEVEL").map_or_else(|| DEFAULT_LOGLEVEL.to_string(), |v| v.trim().to_string()),
            container_mounts: match src.get("SLURM_CONTAINER_MOUNTS") {
                Some(v) => v.split(',').map(str::trim).filter(|m| !m.is_empty()).map(String::from).collect(),
                None => crate::layout::default_mounts(&base),
            },
            use_timeout: src.flag("SLURM_USE_TIMEOUT", DEFAULT_USE_TIMEOUT)?,
            checkpoint_grace_seconds: src.parse(
                "TAO_SLURM_CHECKPOINT_GRACE",
                |v| parse_u32("TAO_SLURM_CHECKPOINT_GRACE", v, 0).map(u64::from),
                || DEFAULT_CHECKPOINT_GRACE_SECONDS,
            )?,
            checkpoint_patterns: match src.get("TAO_SLURM_CHECKPOINT_PATTERNS") {
                Some(v) => crate::checkpoint::parse_patterns("TAO_SLURM_CHECKPOINT_PATTERNS", &v)
                    .map_err(|e| ConfigError::Invalid { name: "TAO_SLURM_CHECKPOINT_PATTERNS", message: e.message })?,
                None => crate::checkpoint::default_patterns(),
            },
            on_preempt: match src.get("TAO_SLURM_ON_PREEMPT") {
                Some(v) => crate::attempts::OnPreempt::parse(&v)
                    .map_err(|message| ConfigError::Invalid { name: "TAO_SLURM_ON_PREEMPT", message })?,
                None => crate::attempts::OnPreempt::default(),
            },
            max_preemptions: src.count("TAO_SLURM_MAX_PREEMPTIONS", 0, crate::attempts::DEFAULT_MAX_PREEMPTIONS)?,
            mail_user: src.get("SLURM_MAIL_USER").map(|m| m.trim().to_string()),
            forwarded_secrets: forwarded_secrets(src)?,
            unrecognised,
            cluster: cluster(src)?,
            person: None,
        })
    }

    /// The user and hosts every remote command needs; the contract's MISSING message otherwise.
    pub fn require_remote(&self) -> Result<(&str, &[LoginHost]), ConfigError> {
        match (&self.slurm_user, self.login_hosts.is_empty()) {
            (Some(u), false) => Ok((u, &self.login_hosts)),
            _ if self.local => Ok((self.slurm_user.as_deref().unwrap_or(""), &self.login_hosts)),
            _ => Err(ConfigError::Missing),
        }
    }

    /// The squashfs cache policy, with the cache directory defaulted under the base directory.
    pub fn sqsh_policy(&self) -> crate::sqsh::SqshPolicy {
        let mut p = self.sqsh.clone();
        if p.cache_dir.is_empty() {
            p.cache_dir = format!("{}/sqsh-cache", self.base_dir());
        }
        p
    }

    /// The base directory on shared storage where jobs are staged and results written.
    pub fn base_dir(&self) -> String {
        base_dir_of(self.base_results_dir.as_deref(), self.slurm_user.as_deref())
    }
}

/// The base directory: SLURM_BASE_RESULTS_DIR, else the user's directory under /lustre.
fn base_dir_of(base_results_dir: Option<&str>, slurm_user: Option<&str>) -> String {
    match (base_results_dir, slurm_user) {
        (Some(b), _) => b.trim_end_matches('/').to_string(),
        (None, Some(u)) => format!("/lustre/users/{u}/tao-slurm"),
        (None, None) => "/lustre/tao-slurm".to_string(),
    }
}

/// `TAO_SLURM_NOTIFY`: comma-separated webhook URLs (`slack:`/`json:` prefixes), checked here.
fn parse_webhooks(v: &str) -> Result<Vec<crate::spec::Secret>, ConfigError> {
    crate::webhook::parse_webhooks([v])
        .map_err(|message| ConfigError::Invalid { name: "TAO_SLURM_NOTIFY", message })?;
    Ok(v.split(',').map(str::trim).filter(|u| !u.is_empty()).map(crate::spec::Secret::new).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(pairs: &[(&str, &str)], file: &[(&str, &str)]) -> SettingSources {
        let to_map = |p: &[(&str, &str)]| p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut env: HashMap<String, String> = to_map(pairs);
        env.entry("HOME".into()).or_insert_with(|| "/home/test".into());
        SettingSources { flags: HashMap::new(), env, file: to_map(file), uid: Some(1000) }
    }

    #[test]
    fn without_a_home_the_state_and_sockets_need_explicit_places() {
        let mut src = sources(&[("SLURM_USER", "alice"), ("SLURM_HOSTNAME", "login")], &[]);
        src.env.remove("HOME");
        let err = Settings::from_sources(&src).unwrap_err().to_string();
        assert!(err.contains("HOME") && err.contains("TAO_SLURM_STATE"), "{err}");
        src.env.insert("TAO_SLURM_STATE".into(), "/srv/me/state.db".into());
        src.env.insert("TAO_SLURM_CONTROL_DIR".into(), "/srv/me/cm".into());
        let s = Settings::from_sources(&src).unwrap();
        assert_eq!(s.state_path, PathBuf::from("/srv/me/state.db"));
        assert_eq!(s.control_dir, PathBuf::from("/srv/me/cm"));
    }

    #[test]
    fn the_control_directory_is_short_whatever_the_home() {
        let long_home = format!("/home/users/{}", "x".repeat(68));
        let src = sources(&[("SLURM_USER", "alice"), ("SLURM_HOSTNAME", "login"), ("HOME", &long_home)], &[]);
        let s = Settings::from_sources(&src).unwrap();
        assert_eq!(s.control_dir, PathBuf::from("/tmp/tao-slurm-1000"), "the user's own directory in /tmp");
        assert!(s.state_path.starts_with(&long_home), "the state stays in the home: {}", s.state_path.display());
        let mut src = src;
        src.env.insert("XDG_RUNTIME_DIR".into(), "/run/user/1000".into());
        assert_eq!(Settings::from_sources(&src).unwrap().control_dir, PathBuf::from("/run/user/1000/tao-slurm"));
        src.env.insert("TAO_SLURM_CONTROL_DIR".into(), "/srv/me/cm".into());
        assert_eq!(Settings::from_sources(&src).unwrap().control_dir, PathBuf::from("/srv/me/cm"), "the setting wins");
        // Neither a runtime directory nor the user id: the setting is asked for by name.
        src.env.remove("XDG_RUNTIME_DIR");
        src.env.remove("TAO_SLURM_CONTROL_DIR");
        src.uid = None;
        let err = Settings::from_sources(&src).unwrap_err().to_string();
        assert!(err.contains("TAO_SLURM_CONTROL_DIR"), "{err}");
    }

    #[test]
    fn host_forms() {
        let cases = [
            ("login1", "login1", None),
            ("login1.example.org:2222", "login1.example.org", Some(2222)),
            ("sandbox-login1", "sandbox-login1", None),
            ("[::1]:22", "::1", Some(22)),
        ];
        for (text, host, port) in cases {
            let h = LoginHost::parse(text).unwrap();
            assert_eq!((h.host.as_str(), h.port), (host, port), "{text}");
        }
        for bad in ["-oProxyCommand=x", "a b", "host:port", "h;x", ""] {
            assert!(LoginHost::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn precedence_env_over_file_and_defaults() {
        let src = sources(
            &[("SLURM_USER", "alice"), ("SLURM_HOSTNAME", "a,b:2200"), ("HOME", "/home/alice")],
            &[("SLURM_USER", "bob"), ("SLURM_TIME_HOURS", "2")],
        );
        let s = Settings::from_sources(&src).unwrap();
        assert_eq!(s.slurm_user.as_deref(), Some("alice"));
        assert_eq!(s.login_hosts.len(), 2);
        assert_eq!(s.login_hosts[1].port, Some(2200));
        assert_eq!(s.time_hours, 2.0);
        assert_eq!(s.timeout_hours, None, "the wall time's default, not a fixed 3.8");
        assert_eq!(s.partition, DEFAULT_PARTITIONS);
        assert!(s.use_requeue);
        assert_eq!(s.connect_timeout_secs, 10);
        assert_eq!(s.state_path, PathBuf::from("/home/alice/.local/share/tao-slurm/state.db"));
        let mut src = src;
        src.flags.insert("SLURM_USER".into(), "carol".into());
        assert_eq!(Settings::from_sources(&src).unwrap().slurm_user.as_deref(), Some("carol"));
    }

    #[test]
    fn missing_user_is_the_contract_message() {
        let s = Settings::from_sources(&sources(&[("SLURM_HOSTNAME", "a")], &[])).unwrap();
        let err = s.require_remote().unwrap_err();
        assert_eq!(err.to_string(), MISSING_MESSAGE);
    }

    #[test]
    fn bad_values_name_the_setting() {
        for (k, v) in [
            ("SLURM_TIME_HOURS", "0"),
            ("SLURM_USE_REQUEUE", "maybe"),
            ("SLURM_PARTITION", "a b"),
            ("SLURM_USE_SRUN_LOGS", "sometimes"),
            ("SLURM_NUM_GPUS", "-1"),
        ] {
            let err = Settings::from_sources(&sources(&[(k, v)], &[])).unwrap_err();
            assert!(err.to_string().contains(k), "{err}");
        }
    }

    #[test]
    fn booleans_read_as_the_tao_sdk_reads_them_and_other_text_is_an_error() {
        for (text, want) in [
            ("y", true),
            ("Yes", true),
            ("1", true),
            ("TRUE", true),
            ("on", true),
            ("n", false),
            ("No", false),
            ("0", false),
            ("off", false),
        ] {
            let s = Settings::from_sources(&sources(&[("SLURM_USE_REQUEUE", text)], &[])).unwrap();
            assert_eq!(s.use_requeue, want, "{text}");
        }
        let err = Settings::from_sources(&sources(&[("SLURM_USE_TIMEOUT", "yep")], &[])).unwrap_err().to_string();
        assert!(err.contains("SLURM_USE_TIMEOUT") && err.contains("y/n"), "{err}");
    }

    #[test]
    fn the_tao_sdk_settings_tao_slurm_once_ignored_are_read() {
        let s = Settings::from_sources(&sources(
            &[
                ("SLURM_NUM_GPUS", "2"),
                ("SLURM_USE_SRUN_LOGS", "y"),
                ("SLURM_ENROOT_TEMP_PATH", "/scratch/enroot"),
                ("NCCL_DEBUG", "WARN"),
            ],
            &[],
        ))
        .unwrap();
        assert_eq!((s.default_gpus, s.use_srun_logs), (Some(2), true));
        assert_eq!(s.sqsh.enroot_temp_path.as_deref(), Some("/scratch/enroot"));
        assert_eq!((s.nccl_debug.as_str(), s.log_level.as_str()), ("WARN", "INFO"));
        assert_eq!(s.max_cpus_per_task, 128);
    }

    #[test]
    fn webhooks_are_read_checked_and_never_printed() {
        let s = Settings::from_sources(&sources(
            &[("SLURM_HOSTNAME", "a"), ("TAO_SLURM_NOTIFY", "https://hooks.slack.com/T/B/TOKEN, json:http://h/x")],
            &[],
        ))
        .unwrap();
        let urls: Vec<&str> = s.notify.iter().map(|u| u.expose()).collect();
        assert_eq!(urls, ["https://hooks.slack.com/T/B/TOKEN", "json:http://h/x"]);
        assert!(!format!("{s:?}").contains("TOKEN"));
        assert_eq!(
            (
                s.notify_pending_minutes,
                Settings::from_sources(&sources(&[("SLURM_HOSTNAME", "a")], &[])).unwrap().notify.len()
            ),
            (60, 0)
        );
        let err =
            Settings::from_sources(&sources(&[("SLURM_HOSTNAME", "a"), ("TAO_SLURM_NOTIFY", "ftp://h/TOKEN")], &[]))
                .unwrap_err()
                .to_string();
        assert!(err.contains("TAO_SLURM_NOTIFY") && !err.contains("TOKEN"), "{err}");
    }
}
