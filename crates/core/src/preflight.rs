//! Preflight: what must hold before jobs can run, checked in one remote script per login host, with
//! the contract's remediation text (§7) for every failure. Building the script and reading its output
//! are pure; `engine::preflight` runs them.

use crate::config::Settings;
use crate::protocol::{sections, SECTION};
use crate::script::shell::quote;
use crate::slurm::{parse_partitions, tested_releases, SlurmVersion};
use serde::Serialize;

/// One preflight check: what every door shows (the service with its operator's details hidden).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Check {
    pub name: String,
    /// The login host it ran on, when it is a remote check.
    pub host: Option<String>,
    pub ok: bool,
    /// A failed required check makes preflight fail.
    pub required: bool,
    pub detail: String,
    /// What to do, for a failed check: show it to the user verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// What the check learned about the cluster, typed: its Slurm version, whether Pyxis is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<Found>,
}

/// A fact about the cluster that a check established.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Found {
    SlurmVersion(SlurmVersion),
    /// Whether `srun` takes `--container-image` (the Pyxis SPANK plugin is loaded).
    Pyxis(bool),
}

/// One login host's cluster, as preflight found it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ClusterFacts {
    pub host: Option<String>,
    pub slurm_version: Option<SlurmVersion>,
    /// Whether the version is one tao-slurm's end-to-end suite runs against.
    pub slurm_version_tested: bool,
    pub pyxis: Option<bool>,
}

/// The facts the checks established, one entry per host, in the checks' order. Pure.
pub fn cluster_facts(checks: &[Check]) -> Vec<ClusterFacts> {
    let mut out: Vec<ClusterFacts> = Vec::new();
    for c in checks {
        let Some(found) = &c.found else { continue };
        let i = match out.iter().position(|f| f.host == c.host) {
            Some(i) => i,
            None => {
                out.push(ClusterFacts {
                    host: c.host.clone(),
                    slurm_version: None,
                    slurm_version_tested: false,
                    pyxis: None,
                });
                out.len() - 1
            }
        };
        match found {
            Found::SlurmVersion(v) => {
                out[i].slurm_version = Some(*v);
                out[i].slurm_version_tested = v.is_tested();
            }
            Found::Pyxis(p) => out[i].pyxis = Some(*p),
        }
    }
    out
}

/// Every check of one preflight, and whether it passed: no required check failed.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PreflightReport {
    pub ok: bool,
    pub checks: Vec<Check>,
    /// Each login host's Slurm version and Pyxis presence, as the checks found them.
    pub clusters: Vec<ClusterFacts>,
}

impl PreflightReport {
    pub fn new(checks: Vec<Check>) -> PreflightReport {
        PreflightReport { ok: checks.iter().all(|c| c.ok || !c.required), clusters: cluster_facts(&checks), checks }
    }
}

impl Check {
    pub fn pass(name: &str, host: Option<&str>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            host: host.map(String::from),
            ok: true,
            required: true,
            detail: detail.into(),
            remediation: None,
            found: None,
        }
    }
    pub fn fail(name: &str, host: Option<&str>, detail: impl Into<String>, remediation: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            host: host.map(String::from),
            ok: false,
            required: true,
            detail: detail.into(),
            remediation: Some(remediation.into()),
            found: None,
        }
    }
}

pub const SLURM_COMMANDS: &[&str] = &["sbatch", "squeue", "sacct", "scancel", "scontrol", "srun"];

pub const PYXIS_REMEDIATION: &str = "Pyxis or Enroot is unavailable: tao-slurm's batch script launches containers with \
`srun --container-image`, which needs the Pyxis SPANK plugin (and Enroot) on the cluster. Ask the cluster admins to install \
Pyxis and Enroot on the login and compute nodes, or use a cluster that has them.";

pub const ENROOT_CREDENTIALS_REMEDIATION: &str =
    "Private nvcr.io images need ~/.config/enroot/.credentials (mode 600) on \
the cluster: enroot does not read NGC_KEY from the job environment, and without the file pulls fail at job start with \
\"Could not process JSON input\". Install it once per cluster and user with: tao-slurm credentials enroot";

pub const ACCOUNTING_REMEDIATION: &str = "sacct does not answer, so the accounting database (slurmdbd) is unreachable: \
tao-slurm cannot learn how a job ended once it leaves the queue. Ask the cluster admins to check slurmdbd; statuses stay \
unknown (never guessed) until it answers.";

/// Seconds a single remote check may take before it counts as failed (a hung slurmdbd must not hang
/// preflight).
const CHECK_TIMEOUT_SECS: u32 = 20;

/// Which Pyxis the cluster loads and how: the plugstack's (or an included file's) Pyxis line, whose
/// arguments it prints (`pyxis_args ...`), and the plugin it names, which carries the line it logs at
/// slurmd start, `pyxis: version vX.Y.Z`.
const PYXIS_VERSION_PROBE: &str = r#"conf="$(timeout 20 scontrol show config 2>/dev/null)"
c="$(printf '%s\n' "$conf" | sed -n 's/^PlugStackConfig *= *//p')"
dir="$(printf '%s\n' "$conf" | sed -n 's/^PluginDir *= *//p' | cut -d: -f1)"
line="$( { cat "$c"; for i in $(awk '$1 == "include" { print $2 }' "$c"); do cat $i; done; } 2>/dev/null | awk '($1 == "required" || $1 == "optional") && $2 ~ /pyxis/ { print; exit }')"
[ -z "$line" ] || printf 'pyxis_args %s\n' "$(printf '%s\n' "$line" | awk '{ $1 = ""; $2 = ""; print }' | tr -cd '[:print:]')"
so="$(printf '%s\n' "$line" | awk '{ print $2 }')"
case "$so" in "") exit 1 ;; /*) ;; *) so="$dir/$so" ;; esac
grep -a -o -m1 'pyxis: version v[0-9][0-9.]*' "$so" | head -n1"#;

/// Pyxis' `container_scope` as its plugstack line sets it (`global`, Pyxis' default, when the line
/// names none), from the probe's `pyxis_args` line; None when the probe found no Pyxis line.
fn container_scope(body: &str) -> Option<String> {
    let args = body.lines().find_map(|l| l.strip_prefix("pyxis_args"))?;
    let scope = args.split_whitespace().rev().find_map(|a| a.strip_prefix("container_scope="));
    Some(scope.unwrap_or("global").to_string())
}

/// The Pyxis version in the probe's output, if it found one.
fn pyxis_version(body: &str) -> Option<&str> {
    let v = body.lines().rev().find_map(|l| l.trim().strip_prefix("pyxis: version v"))?;
    (!v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then_some(v)
}

/// Which GPU tools the login host has, as the sampler looks for them on a node: `dcgmi` (and whether
/// DCGM's host engine answers it, `dcgmi discovery -l`), `nvidia-smi`.
const GPU_TOOLS_PROBE: &str = r#"for c in dcgmi nvidia-smi; do command -v "$c" >/dev/null 2>&1 && echo "has $c"; done
if command -v dcgmi >/dev/null 2>&1; then timeout 10 dcgmi discovery -l >/dev/null 2>&1 && echo "dcgm answers"; fi
true"#;

/// What a compute node's Enroot will unpack images into, and what there is room for, run in a
/// 1-task step (`srun --immediate`: preflight waits seconds for a free node, never in the queue):
/// ENROOT_DATA_PATH as Enroot itself computes it from its enroot.conf (and conf.d, and the
/// environment) on that node, read from its own trace (`SHELLOPTS=xtrace enroot version`: bash
/// passes the option on to the real enroot behind any wrapper), the free bytes of the filesystem
/// that holds it (its nearest existing directory: Enroot makes it on first use), how many containers
/// it holds (one directory each: what a global `container_scope` leaves behind), and the largest
/// image of the squashfs cache with the bytes its files unpack to (`unsquashfs -lls`, metadata only).
const ENROOT_SPACE_NODE: &str = r#"echo "node ${SLURMD_NODENAME:-}"
command -v enroot >/dev/null 2>&1 || { echo no_enroot; exit 0; }
t=$(env SHELLOPTS=xtrace timeout 10 enroot version 2>&1 >/dev/null | grep -a "^+* export '\{0,1\}ENROOT_DATA_PATH=" | tail -n 1)
p=${t#*ENROOT_DATA_PATH=}; p=${p%\'}
case "$p" in /*) ;; *) echo no_data_path; exit 0 ;; esac
printf 'data_path %s\n' "$p"
q=$p; while [ ! -d "$q" ]; do q=$(dirname -- "$q"); done
df -P -B1 -- "$q" | awk 'NR == 2 { print "free", $4 }'
[ ! -d "$p" ] || echo "containers $(find "$p" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)"
f=$(find "$1" -maxdepth 1 -type f -name '*.sqsh' -printf '%s %p\n' 2>/dev/null | sort -n | tail -n 1)
[ -n "$f" ] || exit 0
printf 'image %s\n' "$f"
u=$(timeout 10 unsquashfs -lls "${f#* }" 2>/dev/null | awk '/^-/ { s += $3; n++ } END { if (n) printf "%.0f", s }')
[ -z "$u" ] || echo "unpacked $u""#;

/// Seconds the space check waits for a node of the partition to be free before it gives up (a
/// warning that says it could not look).
const ENROOT_SPACE_IMMEDIATE_SECS: u32 = 5;

/// The step that runs [`ENROOT_SPACE_NODE`] on one node of the settings' partitions. Pure.
fn enroot_space_probe(settings: &Settings) -> String {
    let account = settings.account.as_deref().map(|a| format!(" -A {}", quote(a))).unwrap_or_default();
    format!(
        "timeout 30 srun --immediate={ENROOT_SPACE_IMMEDIATE_SECS} -N1 -n1 --time=1 -J tao-slurm-preflight -p {part}{account} --quiet bash -c {node} tao-enroot-space {cache} </dev/null",
        part = quote(&settings.partition),
        node = quote(ENROOT_SPACE_NODE),
        cache = quote(&settings.sqsh_policy().cache_dir),
    )
}

/// A compute node's Enroot data path and its room, as [`ENROOT_SPACE_NODE`] printed them.
#[derive(Debug, Clone, PartialEq)]
struct EnrootSpace {
    node: String,
    data_path: String,
    free: u64,
    /// The containers in it (none when it does not exist yet).
    containers: u64,
    /// The largest squashfs image of the cache: its path, its size, and the bytes it unpacks to.
    image: Option<(String, u64, Option<u64>)>,
}

/// What the node said: its Enroot's room, or why there is none to report (`Ok(None)`: no Enroot on
/// the node, which the Pyxis check covers), or why it could not be read (`Err`, what the step said).
fn read_enroot_space(body: &str) -> Result<Option<EnrootSpace>, String> {
    let value = |key: &str| body.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')).map(str::trim);
    if body.lines().any(|l| l.trim() == "no_enroot") {
        return Ok(None);
    }
    let node = value("node").filter(|n| !n.is_empty()).ok_or_else(|| {
        format!("not checked: no node ran the check within {ENROOT_SPACE_IMMEDIATE_SECS} s ({})", summary(body))
    })?;
    let data_path = value("data_path").ok_or_else(|| {
        format!("not checked: enroot on {node} did not show its ENROOT_DATA_PATH (its configuration could not be read)")
    })?;
    let free = value("free")
        .and_then(|f| f.parse::<u64>().ok())
        .ok_or_else(|| format!("not checked: df on {node} did not answer for {data_path}"))?;
    let node = node.to_string();
    let containers = value("containers").and_then(|c| c.parse().ok()).unwrap_or(0);
    let image = value("image").and_then(|i| {
        let (size, path) = i.split_once(' ')?;
        Some((path.to_string(), size.parse::<u64>().ok()?, value("unpacked").and_then(|u| u.parse().ok())))
    });
    Ok(Some(EnrootSpace { node, data_path: data_path.to_string(), free, containers, image }))
}

/// Bytes as people read them: `12.3 GiB (13207024435 bytes)`.
fn bytes(n: u64) -> String {
    const UNITS: &[(u64, &str)] = &[(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match UNITS.iter().find(|(u, _)| n >= *u) {
        Some((u, name)) => format!("{:.1} {name} ({n} bytes)", n as f64 / *u as f64),
        None => format!("{n} bytes"),
    }
}

/// The one remote script that runs every remote check on a host. Pure.
pub fn preflight_script(settings: &Settings) -> String {
    let mut s = String::new();
    for cmd in SLURM_COMMANDS {
        s.push_str(&format!("echo \"{SECTION}cmd {cmd} $(command -v {cmd} 2>/dev/null)\"\n"));
    }
    let mut section = |name: &str, body: &str| {
        s.push_str(&format!("echo '{SECTION}{name}'\n( {body} ) 2>&1\necho \"{SECTION}rc {name} $?\"\n"));
    };
    let t = format!("timeout {CHECK_TIMEOUT_SECS}");
    section("version", &format!("{t} sbatch --version"));
    section("sacct", &format!("{t} sacct -X -n -P -S now-1hours --format=JobID"));
    section("partitions", &format!("{t} scontrol show partition -o"));
    section("pyxis", &format!("{t} srun --help | grep -c -e '--container-image'"));
    section("pyxis_version", PYXIS_VERSION_PROBE);
    section("gpu_tools", GPU_TOOLS_PROBE);
    section("enroot_space", &enroot_space_probe(settings));
    if let Some(account) = &settings.account {
        section(
            "association",
            &format!(
                "{t} sacctmgr -n -P show assoc where user=\"$(id -un)\" account={} format=Account,User,Partition",
                quote(account)
            ),
        );
    }
    if settings.ngc_key.is_some() {
        section(
            "enroot_credentials",
            "f=\"${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/.credentials\"; stat -c '%a' \"$f\" && grep -c '^machine nvcr.io ' \"$f\"",
        );
    }
    let base = settings.base_dir();
    // The submit's own check of the base and its parents (StrictModes-like), then writability.
    section(
        "base_dir",
        &format!(
            "{trust}tao_trust_base {b}; test -d {b} && test -w {b} && echo writable",
            trust = crate::script::trust::trust_functions(),
            b = quote(&base)
        ),
    );
    // The sources of the default mounts: Pyxis ends every step that mounts a missing one.
    let sources: Vec<String> = mount_sources(settings).iter().map(|p| quote(p)).collect();
    if !sources.is_empty() {
        section("mounts", &format!("for p in {}; do [ -e \"$p\" ] || echo \"$p\"; done", sources.join(" ")));
    }
    s.push_str("exit 0\n");
    s
}

/// The source paths of the settings' default mounts (`SRC[:DST[:FLAGS]]`).
fn mount_sources(settings: &Settings) -> Vec<String> {
    settings.container_mounts.iter().map(|m| crate::layout::mount_ends(m).0.to_string()).collect()
}

/// Turn one host's preflight output into checks. Pure.
pub fn read_preflight(settings: &Settings, host: &str, stdout: &str) -> Vec<Check> {
    let out = Sections { host, secs: sections(stdout) };
    let mut checks = vec![out.slurm_commands(), out.slurm_version(), out.accounting()];
    checks.extend(out.partitions(&settings.partition));
    checks.extend(settings.account.as_deref().map(|a| out.account_association(a)));
    checks.push(out.pyxis());
    checks.extend(out.container_scope());
    checks.extend(out.enroot_space());
    checks.push(out.gpu_sampler());
    if settings.ngc_key.is_some() {
        checks.push(out.enroot_credentials());
    }
    checks.push(out.results_directory(&settings.base_dir()));
    if !settings.container_mounts.is_empty() {
        checks.push(out.mounts(&mount_sources(settings)));
    }
    checks
}

/// The preflight script's output on one host, read check by check.
struct Sections<'a> {
    host: &'a str,
    secs: Vec<(String, String, String)>,
}

impl Sections<'_> {
    fn h(&self) -> Option<&str> {
        Some(self.host)
    }

    /// A section's body, trimmed.
    fn body(&self, name: &str) -> Option<String> {
        self.secs.iter().find(|(n, _, _)| n == name).map(|(_, _, b)| b.trim().to_string())
    }

    /// The exit status the script recorded for the step `name`.
    fn rc(&self, name: &str) -> Option<i32> {
        self.secs
            .iter()
            .find(|(n, a, _)| n == "rc" && a.split_whitespace().next() == Some(name))
            .and_then(|(_, a, _)| a.split_whitespace().nth(1).and_then(|c| c.parse::<i32>().ok()))
    }

    fn slurm_commands(&self) -> Check {
        let found = |cmd: &str| {
            self.secs.iter().any(|(n, a, _)| {
                n == "cmd" && a.split_whitespace().next() == Some(cmd) && a.split_whitespace().nth(1).is_some()
            })
        };
        let missing: Vec<&str> = SLURM_COMMANDS.iter().copied().filter(|cmd| !found(cmd)).collect();
        if missing.is_empty() {
            return Check::pass("slurm commands", self.h(), SLURM_COMMANDS.join(", "));
        }
        Check::fail(
            "slurm commands",
            self.h(),
            format!("not found on PATH: {}", missing.join(", ")),
            format!("Non-interactive SSH sessions on {host} must have the Slurm client commands on PATH (check the login node's PATH for `ssh {host} command -v sbatch`).", host = self.host),
        )
    }

    fn slurm_version(&self) -> Check {
        let version = self.body("version").unwrap_or_default();
        if self.rc("version") == Some(0) {
            let parsed = SlurmVersion::parse(&version);
            let detail = match parsed {
                Some(v) if v.is_tested() => format!("Slurm {v} (a release tao-slurm is tested on)"),
                Some(v) => format!(
                    "Slurm {v} (tao-slurm is tested on {}; other releases may print what it reads differently)",
                    tested_releases()
                ),
                None => format!("{version} (not a version tao-slurm can read)"),
            };
            let mut check = Check::pass("slurm version", self.h(), detail);
            check.found = parsed.map(Found::SlurmVersion);
            return check;
        }
        Check::fail(
            "slurm version",
            self.h(),
            version,
            "sbatch --version failed; check the Slurm client installation on the login node.",
        )
    }

    fn accounting(&self) -> Check {
        let out = self.body("sacct").unwrap_or_default();
        match self.rc("sacct") {
            Some(0) if !out.to_ascii_lowercase().contains("error") => {
                Check::pass("accounting (sacct)", self.h(), "sacct answers")
            }
            code => Check::fail(
                "accounting (sacct)",
                self.h(),
                format!("sacct exited {} : {}", code.map(|c| c.to_string()).unwrap_or("?".into()), summary(&out)),
                ACCOUNTING_REMEDIATION,
            ),
        }
    }

    /// One check per partition of the setting (a comma-separated list).
    fn partitions(&self, wanted: &str) -> Vec<Check> {
        let partitions = parse_partitions(&self.body("partitions").unwrap_or_default());
        let check = |wanted: &str| {
            let name = format!("partition {wanted}");
            match partitions.iter().find(|p| p.name == wanted) {
                Some(p) => {
                    let max =
                        p.max_time_minutes.map(crate::slurm::format_duration_minutes).unwrap_or("UNLIMITED".into());
                    let gpus = p.tres.split(',').find(|t| t.starts_with("gres/gpu")).unwrap_or("no GPU gres");
                    Check::pass(&name, self.h(), format!("MaxTime {max}, {gpus}, state {}", p.state))
                }
                None => Check::fail(
                    &name,
                    self.h(),
                    format!(
                        "does not exist (partitions: {})",
                        partitions.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                    "Set SLURM_PARTITION to partitions that exist on this cluster (`sinfo -s` lists them).".to_string(),
                ),
            }
        };
        wanted.split(',').map(check).collect()
    }

    fn account_association(&self, account: &str) -> Check {
        let out = self.body("association").unwrap_or_default();
        if self.rc("association") != Some(0) {
            Check::fail(
                "account association",
                self.h(),
                format!("could not be checked: {}", summary(&out)),
                ACCOUNTING_REMEDIATION,
            )
        } else if out.lines().any(|l| l.split('|').next() == Some(account)) {
            Check::pass("account association", self.h(), format!("{account}: {}", out.lines().count()))
        } else {
            Check::fail(
                "account association",
                self.h(),
                format!("no association of this user with account {account} ({})", summary(&out)),
                "Set SLURM_ACCOUNT to an account you belong to (`sacctmgr show assoc user=$USER`), or ask the admins to add you.",
            )
        }
    }

    fn pyxis(&self) -> Check {
        let count = self.body("pyxis").and_then(|b| b.lines().last().and_then(|l| l.trim().parse::<u32>().ok()));
        let mut check = if count.unwrap_or(0) > 0 {
            let detail = match self.body("pyxis_version").as_deref().and_then(pyxis_version) {
                Some(v) => format!("Pyxis present: srun --help lists --container-image; the plugin is Pyxis {v}"),
                None => "Pyxis present: srun --help lists --container-image".to_string(),
            };
            Check::pass("pyxis", self.h(), detail)
        } else {
            Check::fail(
                "pyxis",
                self.h(),
                "Pyxis absent: srun --help does not list --container-image",
                PYXIS_REMEDIATION,
            )
        };
        // Only an answer of srun's is a finding; a failed ssh or script says nothing either way.
        check.found = count.map(|c| Found::Pyxis(c > 0));
        check
    }

    /// A warning when Pyxis keeps named containers after their job (`container_scope=global`): each
    /// job's container has a name of its own (`tao-<job id>`), so every job would leave its unpacked
    /// image on each of its nodes. Nothing when the probe found no Pyxis line.
    fn container_scope(&self) -> Option<Check> {
        let scope = container_scope(&self.body("pyxis_version")?)?;
        if scope == "job" {
            return Some(Check::pass(
                "container scope",
                self.h(),
                "Pyxis container_scope=job: a job's containers are removed when it ends",
            ));
        }
        let mut check = Check::fail(
            "container scope",
            self.h(),
            format!(
                "Pyxis container_scope={scope}: a named container outlives its job, and tao-slurm names one per job, so each job leaves its image unpacked in Enroot's data path on every node it ran on (one TAO training image: about 36 GB per node, measured) until someone runs `enroot remove`"
            ),
            "Ask the cluster admins for container_scope=job on the pyxis line of plugstack.conf (Pyxis then removes a job's containers in its epilog), or remove old ones on each node with `enroot list` and `enroot remove pyxis_tao-...`.",
        );
        check.required = false;
        Some(check)
    }

    /// A warning when a compute node's Enroot data path has less room than the largest image of the
    /// squashfs cache unpacks to (Pyxis unpacks a job's image there, on every node of the job), with
    /// the figures and the path; what it found when there is room. Nothing when the node has no
    /// Enroot (the Pyxis check says so).
    fn enroot_space(&self) -> Option<Check> {
        const NAME: &str = "enroot data path";
        let warn = |detail: String, remediation: &str| {
            let mut check = Check::fail(NAME, self.h(), detail, remediation);
            check.required = false;
            check
        };
        let body = self.body("enroot_space").unwrap_or_default();
        let space = match read_enroot_space(&body) {
            Ok(Some(space)) => space,
            Ok(None) => return None,
            Err(why) => {
                return Some(warn(
                    why,
                    "Check a compute node yourself: `srun -N1 df -h` of the ENROOT_DATA_PATH in its enroot.conf (often /etc/enroot/enroot.conf); an image is unpacked there for every job.",
                ))
            }
        };
        let EnrootSpace { node, data_path, free, containers, image } = space;
        // What is there already: containers left by earlier jobs take their share of the disk.
        let room = match containers {
            0 => format!("{} free", bytes(free)),
            1 => format!("{} free, 1 container there", bytes(free)),
            n => format!("{} free, {n} containers there", bytes(free)),
        };
        let Some((file, squashfs, unpacked)) = image else {
            let mut check = Check::pass(
                NAME,
                self.h(),
                format!("ENROOT_DATA_PATH {data_path} on {node}: {room}; no image in the squashfs cache yet to compare with (TAO's images unpack to tens of GB)"),
            );
            check.required = false;
            return Some(check);
        };
        // Without unsquashfs on the node, the squashfs file's own size: less than it unpacks to.
        let (need, what) = match unpacked {
            Some(u) => (u, format!("unpacks to {}", bytes(u))),
            None => (
                squashfs,
                format!(
                    "is {} as squashfs and unpacks to more (unsquashfs was not there to say how much)",
                    bytes(squashfs)
                ),
            ),
        };
        if free >= need {
            let mut check = Check::pass(
                NAME,
                self.h(),
                format!("ENROOT_DATA_PATH {data_path} on {node}: {room}; the largest cached image, {file}, {what}"),
            );
            check.required = false;
            return Some(check);
        }
        Some(warn(
            format!(
                "ENROOT_DATA_PATH {data_path} on {node} has {room}, and the largest cached image, {file}, {what}: a job of it fails at start with \"No space left on device\" (Pyxis unpacks the image there on every node of the job)"
            ),
            "Ask the cluster admins for an ENROOT_DATA_PATH on a larger local disk (enroot.conf on the compute nodes), or free space there: containers left by old jobs show in `srun -w NODE enroot list` and go with `enroot remove`.",
        ))
    }

    /// Which tool the GPU sampler will use, as far as the login host shows: preflight looks for the
    /// tools on the login host, not on a compute node (its one step there is the Enroot space check's); each node's sampler
    /// chooses for itself when the job runs (DCGM where its `dcgmi` answers, else `nvidia-smi`). A
    /// warning, never a failure, when the login host has neither.
    fn gpu_sampler(&self) -> Check {
        const WHERE: &str = "checked on the login host only (preflight does not look for GPU tools on a compute node); each node's sampler chooses for itself when a job runs: DCGM where its dcgmi answers, nvidia-smi otherwise";
        let body = self.body("gpu_tools").unwrap_or_default();
        let has = |line: &str| body.lines().any(|l| l.trim() == line);
        let (dcgmi, answers, smi) = (has("has dcgmi"), has("dcgm answers"), has("has nvidia-smi"));
        let detail = match (dcgmi, answers, smi) {
            (true, true, _) => format!("GPU samples from DCGM (dcgmi dmon): dcgmi answers here; {WHERE}"),
            (true, false, true) => format!(
                "GPU samples from nvidia-smi: dcgmi is installed but DCGM's host engine does not answer here, nvidia-smi is there; {WHERE}"
            ),
            (false, _, true) => format!("GPU samples from nvidia-smi: no dcgmi here, nvidia-smi is there; {WHERE}"),
            (true, false, false) => format!(
                "no GPU tool answers here: dcgmi is installed but DCGM's host engine does not answer, and there is no nvidia-smi; {WHERE}"
            ),
            (false, _, false) => format!("neither dcgmi nor nvidia-smi here; {WHERE}"),
        };
        if smi || answers {
            let mut check = Check::pass("gpu sampler", self.h(), detail);
            check.required = false;
            return check;
        }
        let mut check = Check::fail(
            "gpu sampler",
            self.h(),
            detail,
            "Login hosts often have no GPU tools: check a compute node, e.g. `srun -N1 --gpus=1 sh -c 'command -v dcgmi nvidia-smi'`. A node with neither shows \"no GPU data\" and its GPUs are not watched for idleness or hangs; the jobs run as usual.",
        );
        check.required = false;
        check
    }

    fn enroot_credentials(&self) -> Check {
        let out = self.body("enroot_credentials").unwrap_or_default();
        let mut lines = out.lines();
        let mode = lines.next().unwrap_or("").trim().to_string();
        let entries: u32 = lines.next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
        if self.rc("enroot_credentials") == Some(0) && mode == "600" && entries > 0 {
            return Check::pass("enroot credentials", self.h(), "~/.config/enroot/.credentials has nvcr.io, mode 600");
        }
        let why = if mode.is_empty() || mode.contains("No such file") {
            "missing".to_string()
        } else if mode != "600" {
            format!("mode {mode}, not 600")
        } else {
            "no nvcr.io entry".to_string()
        };
        Check::fail("enroot credentials", self.h(), why, ENROOT_CREDENTIALS_REMEDIATION)
    }

    /// The default mounts' sources exist on the login node (shared storage: the nodes see the same).
    fn mounts(&self, sources: &[String]) -> Check {
        let missing: Vec<String> = match (self.rc("mounts"), self.body("mounts")) {
            (Some(0), Some(body)) => {
                body.lines().filter(|l| sources.iter().any(|s| s == l)).map(String::from).collect()
            }
            _ => return Check::fail("container mounts", self.h(), "the check did not run", "Run preflight again."),
        };
        if missing.is_empty() {
            return Check::pass("container mounts", self.h(), format!("{} exist", sources.join(", ")));
        }
        Check::fail(
            "container mounts",
            self.h(),
            format!("{} does not exist on {} (Pyxis ends every job step that mounts it)", missing.join(", "), self.host),
            "Set SLURM_CONTAINER_MOUNTS to paths on the cluster's shared storage (SRC[:DST[:ro]], comma-separated); the results directory is mounted in any case.",
        )
    }

    fn results_directory(&self, base: &str) -> Check {
        if self.rc("base_dir") == Some(0) {
            return Check::pass("results directory", self.h(), format!("{base} is writable"));
        }
        let why = self.body("base_dir").unwrap_or_default();
        let detail = match why.lines().find(|l| l.contains("refusing")) {
            Some(line) => line.trim_start_matches("tao-slurm: ").to_string(),
            None => format!("{base} does not exist or is not writable"),
        };
        Check::fail(
            "results directory",
            self.h(),
            detail,
            format!("Create it on shared storage (ssh {host} mkdir -p {base}) or set SLURM_BASE_RESULTS_DIR to a writable shared directory.", host = self.host),
        )
    }
}

/// A warning naming every set variable that looks like a setting (`SLURM_`, `TAO_SLURM_`) but that
/// nothing reads, with the closest name that is read when it looks like a typo. Pure.
pub fn unrecognised_settings(settings: &Settings) -> Option<Check> {
    if settings.unrecognised.is_empty() {
        return None;
    }
    let names: Vec<String> = settings
        .unrecognised
        .iter()
        .map(|(n, close)| match close {
            Some(c) => format!("{n} (did you mean {c}?)"),
            None => n.clone(),
        })
        .collect();
    let mut check = Check::fail(
        "unknown settings",
        None,
        format!("set but not read by tao-slurm: {}", names.join(", ")),
        "Rename or remove them: see docs/configuration.md for the settings tao-slurm and the TAO SDK names read.",
    );
    check.required = false;
    Some(check)
}

/// A warning when SLURM_USE_SRUN_LOGS asks for per-node srun log files: tao-slurm keeps every node's
/// output in the job's main.out/main.err (its log reader, `follow` and the failure analysis read
/// them), so the setting is read but changes nothing. Pure.
pub fn srun_logs_setting(settings: &Settings) -> Option<Check> {
    if !settings.use_srun_logs {
        return None;
    }
    let mut check = Check::fail(
        "SLURM_USE_SRUN_LOGS",
        None,
        "is true, but tao-slurm always writes every node's output to main.out/main.err (where logs, follow and the failure analysis read it)",
        "Remove SLURM_USE_SRUN_LOGS (or set it to false); each line of a multi-node job's output already goes to main.out.",
    );
    check.required = false;
    Some(check)
}

/// The last two lines of an error output: where Slurm's commands put the actual cause.
fn summary(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::settings;

    fn run_script_with(bin: &[(&str, &str)], settings: &Settings) -> String {
        crate::stand_ins::StandIns::of(bin).stdout(&preflight_script(settings))
    }

    const HEALTHY: &[(&str, &str)] = &[
        ("sbatch", "echo slurm 22.05.8"),
        ("squeue", "true"),
        ("sacct", "true"),
        ("scancel", "true"),
        ("scontrol", "echo 'PartitionName=polar MaxTime=04:00:00 State=UP TRES=cpu=8,gres/gpu=32'; echo 'PartitionName=polar3 MaxTime=04:00:00 State=UP'; echo 'PartitionName=polar4 MaxTime=04:00:00 State=UP'; echo 'PartitionName=grizzly MaxTime=04:00:00 State=UP'"),
        ("srun", SRUN),
        ("nvidia-smi", "true"),
    ];

    /// `srun --help` lists Pyxis' option; any other srun runs its command (from `bash` on) as a step
    /// on node1 would.
    const SRUN: &str = r#"case " $* " in *" --help "*) echo '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'; exit 0 ;; esac
while [ "$#" -gt 0 ] && [ "$1" != bash ]; do shift; done
SLURMD_NODENAME=node1 exec "$@""#;

    /// What a node's Enroot unpacks into, how much room it has and how big the largest cached image
    /// is unpacked, read by running the probe: the path from enroot's own trace (here a path with a
    /// space, which the trace quotes), its nearest existing directory's free bytes, the image's
    /// files' sizes. A warning with the three figures when the image does not fit; a pass that says
    /// them when it does.
    #[test]
    fn the_enroot_data_path_is_compared_with_the_largest_cached_image() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("enroot data/user-1000/data");
        std::fs::create_dir_all(dir.path().join("enroot data")).unwrap();
        let cache = dir.path().join("sqsh-cache");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::write(cache.join("small.sqsh"), vec![0u8; 10]).unwrap();
        std::fs::write(cache.join("big.sqsh"), vec![0u8; 3000]).unwrap();
        let mut s = settings();
        s.sqsh.cache_dir = cache.display().to_string();
        let enroot = format!(
            "ENROOT_DATA_PATH=/first; export ENROOT_DATA_PATH; export ENROOT_DATA_PATH={}; echo 4.1.2",
            quote(&data.display().to_string())
        );
        let check = |unpacked: &str| {
            let mut bin: Vec<(&str, &str)> = HEALTHY.to_vec();
            let lister = format!(
                r#"[ "$1" = -lls ] && [ "$2" = {} ] && printf '%s\n' {unpacked}"#,
                quote(&cache.join("big.sqsh").display().to_string())
            );
            bin.push(("enroot", &enroot));
            bin.push(("unsquashfs", &lister));
            let checks = read_preflight(&s, "login", &run_script_with(&bin, &s));
            checks.into_iter().find(|c| c.name == "enroot data path").unwrap()
        };
        let path = data.display().to_string();
        let big = cache.join("big.sqsh").display().to_string();
        // 1 PiB unpacked: more than any test machine has free.
        let full = check("'-rw-r--r-- root/root 1125899906842624 2024-01-01 00:00 squashfs-root/a' 'drwxr-xr-x root/root 3 2024-01-01 00:00 squashfs-root'");
        assert!(!full.ok && !full.required, "a warning: {full:?}");
        assert!(full.detail.starts_with(&format!("ENROOT_DATA_PATH {path} on node1 has ")), "{full:?}");
        assert!(
            full.detail
                .contains(&format!("the largest cached image, {big}, unpacks to 1024.0 TiB (1125899906842624 bytes)")),
            "{full:?}"
        );
        assert!(full.detail.contains("No space left on device"), "{full:?}");
        assert!(full.remediation.as_deref().unwrap().contains("ENROOT_DATA_PATH"), "{full:?}");
        // Two containers left in the data path by earlier jobs: counted.
        std::fs::create_dir_all(data.join("pyxis_tao-a")).unwrap();
        std::fs::create_dir_all(data.join("pyxis_tao-b")).unwrap();
        let fits = check("'-rw-r--r-- root/root 2000 2024-01-01 00:00 squashfs-root/a' '-rwxr-xr-x root/root 48 2024-01-01 00:00 squashfs-root/b'");
        assert!(fits.ok && !fits.required, "{fits:?}");
        assert!(fits.detail.contains(" free, 2 containers there; the largest cached image"), "{fits:?}");
        assert!(fits.detail.contains(&format!("{big}, unpacks to 2.0 KiB (2048 bytes)")), "{fits:?}");
        assert!(fits.detail.starts_with(&format!("ENROOT_DATA_PATH {path} on node1: ")), "{fits:?}");
        // No unsquashfs: the squashfs file's own size, said to be less than it needs.
        let unknown = check("x; exit 1");
        assert!(unknown.detail.contains("is 2.9 KiB (3000 bytes) as squashfs and unpacks to more"), "{unknown:?}");
    }

    /// The node's lines read as its Enroot's room, as no Enroot (the Pyxis check's business), or as
    /// the reason it could not be checked; each a warning that says so.
    #[test]
    fn the_enroot_space_check_says_why_it_could_not_look() {
        let read = |body: &str| {
            let out = format!("{SECTION}enroot_space\n{body}\n{SECTION}rc enroot_space 1\n");
            Sections { host: "login1", secs: sections(&out) }.enroot_space()
        };
        assert_eq!(read("node node3\nno_enroot"), None);
        let busy = read("srun: error: Unable to allocate resources: Resource temporarily unavailable").unwrap();
        assert!(!busy.ok && !busy.required, "{busy:?}");
        assert!(
            busy.detail.starts_with(
                "not checked: no node ran the check within 5 s (srun: error: Unable to allocate resources"
            ),
            "{busy:?}"
        );
        let unread = read("node node3\nno_data_path").unwrap();
        assert!(unread.detail.contains("enroot on node3 did not show its ENROOT_DATA_PATH"), "{unread:?}");
        let empty = read("node node3\ndata_path /tmp/e\nfree 1073741824").unwrap();
        assert!(
            empty.ok && empty.detail.contains("1.0 GiB (1073741824 bytes) free; no image in the squashfs cache"),
            "{empty:?}"
        );
        // The containers already there (a global container_scope leaves every job's) are counted.
        let held = read("node node3\ndata_path /tmp/e\nfree 1073741824\ncontainers 7").unwrap();
        assert!(held.detail.contains("(1073741824 bytes) free, 7 containers there; no image"), "{held:?}");
        let bad = read("node node3\ndata_path /tmp/e\nfree lots").unwrap();
        assert!(!bad.ok && bad.detail.contains("df on node3 did not answer for /tmp/e"), "{bad:?}");
    }

    #[test]
    fn srun_logs_true_is_a_warning_that_it_changes_nothing() {
        let mut s = settings();
        assert!(srun_logs_setting(&s).is_none());
        s.use_srun_logs = true;
        let check = srun_logs_setting(&s).unwrap();
        assert!(!check.ok && !check.required && check.detail.contains("main.out"), "{check:?}");
    }

    #[test]
    fn healthy_cluster_passes_except_the_missing_results_dir() {
        let mut s = settings();
        let shared = tempfile::tempdir().unwrap();
        s.container_mounts = vec![format!("{}:/data:ro", shared.path().display())];
        let checks = read_preflight(&s, "login", &run_script_with(HEALTHY, &s));
        let failed: Vec<&str> = checks.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect();
        assert_eq!(failed, vec!["results directory"], "{checks:#?}");
        assert!(checks
            .iter()
            .any(|c| c.name == "partition polar" && c.detail.contains("MaxTime 04:00:00, gres/gpu=32")));
    }

    #[test]
    fn each_failure_names_its_check_with_remediation() {
        let s = settings();
        let mut broken: Vec<(&str, &str)> = HEALTHY.to_vec();
        broken.retain(|(n, _)| *n != "srun" && *n != "sacct");
        broken.push(("srun", "echo 'usage: srun'"));
        broken.push(("sacct", "echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1"));
        let checks = read_preflight(&s, "login", &run_script_with(&broken, &s));
        let get = |n: &str| checks.iter().find(|c| c.name == n).unwrap();
        assert!(!get("pyxis").ok);
        assert_eq!(get("pyxis").remediation.as_deref(), Some(PYXIS_REMEDIATION));
        assert!(!get("accounting (sacct)").ok);
        assert!(get("accounting (sacct)").detail.contains("Problem talking to the database"));
    }

    /// A default mount whose source is missing is named, with the setting that fixes it; the base
    /// directory is not its business (it has its own check).
    #[test]
    fn a_default_mount_that_does_not_exist_fails_with_the_setting_to_change() {
        let mut s = settings();
        let shared = tempfile::tempdir().unwrap();
        let gone = shared.path().join("gone").display().to_string();
        s.container_mounts = vec![shared.path().display().to_string(), format!("{gone}:/data:ro")];
        let checks = read_preflight(&s, "login", &run_script_with(HEALTHY, &s));
        let mounts = checks.iter().find(|c| c.name == "container mounts").unwrap();
        assert!(!mounts.ok && mounts.detail.starts_with(&format!("{gone} does not exist on login")), "{mounts:?}");
        assert!(mounts.remediation.as_deref().unwrap_or("").contains("SLURM_CONTAINER_MOUNTS"), "{mounts:?}");
        s.container_mounts = vec![shared.path().display().to_string()];
        let checks = read_preflight(&s, "login", &run_script_with(HEALTHY, &s));
        assert!(checks.iter().any(|c| c.name == "container mounts" && c.ok), "{checks:#?}");
    }

    #[test]
    fn the_container_scope_is_read_from_the_pyxis_line_and_global_by_default() {
        assert_eq!(
            container_scope("pyxis_args runtime_path=/run/p container_scope=job\npyxis: version v0.24.0").as_deref(),
            Some("job")
        );
        assert_eq!(
            container_scope("pyxis_args   \npyxis: version v0.24.0").as_deref(),
            Some("global"),
            "Pyxis' default"
        );
        assert_eq!(
            container_scope("pyxis_args container_scope=job container_scope=global").as_deref(),
            Some("global"),
            "the last one wins, as Pyxis reads them"
        );
        assert_eq!(container_scope("no line"), None);
        let section = |args: &str| {
            format!("{SECTION}pyxis_version\npyxis_args {args}\npyxis: version v0.24.0\n{SECTION}rc pyxis_version 0\n")
        };
        let out = |args: &str| Sections { host: "login1", secs: sections(&section(args)) }.container_scope().unwrap();
        let job = out("container_scope=job");
        assert!(job.ok && job.detail.contains("container_scope=job"), "{job:?}");
        let global = out("runtime_path=/run/pyxis");
        assert!(!global.ok && !global.required, "a warning: {global:?}");
        assert!(
            global.detail.contains("container_scope=global")
                && global.remediation.unwrap().contains("container_scope=job")
        );
    }

    /// Preflight says which tool the GPU sampler will use, from what the login host has, and that it
    /// looked only there; neither tool is a warning, never a failure.
    #[test]
    fn the_gpu_sampler_is_named_from_the_login_hosts_tools() {
        let s = settings();
        let check = |extra: &[(&str, &str)]| {
            let mut bin: Vec<(&str, &str)> = HEALTHY.iter().copied().filter(|(n, _)| *n != "nvidia-smi").collect();
            bin.extend_from_slice(extra);
            let checks = read_preflight(&s, "login", &run_script_with(&bin, &s));
            checks.into_iter().find(|c| c.name == "gpu sampler").unwrap()
        };
        let dcgm = check(&[("dcgmi", "echo '1 GPU found.'"), ("nvidia-smi", "true")]);
        assert!(dcgm.ok && !dcgm.required && dcgm.detail.starts_with("GPU samples from DCGM"), "{dcgm:?}");
        assert!(dcgm.detail.contains("login host only"), "{dcgm:?}");
        let no_engine =
            check(&[("dcgmi", "echo 'Error: unable to establish a connection' >&2; exit 255"), ("nvidia-smi", "true")]);
        assert!(no_engine.ok && no_engine.detail.contains("host engine does not answer"), "{no_engine:?}");
        assert!(no_engine.detail.starts_with("GPU samples from nvidia-smi"), "{no_engine:?}");
        let smi = check(&[("nvidia-smi", "true")]);
        assert!(smi.ok && smi.detail.starts_with("GPU samples from nvidia-smi: no dcgmi"), "{smi:?}");
        let none = check(&[]);
        assert!(!none.ok && !none.required, "a warning: {none:?}");
        assert!(none.detail.contains("neither dcgmi nor nvidia-smi") && none.remediation.unwrap().contains("srun -N1"));
    }

    #[test]
    fn the_pyxis_version_is_read_from_the_plugins_own_line() {
        let cases = [
            ("pyxis: version v0.24.0", Some("0.24.0")),
            ("something\npyxis: version v0.20.0\n", Some("0.20.0")),
            ("", None),
            ("pyxis: version v0.24.0; rm -rf /", None),
            ("grep: /x/spank_pyxis.so: No such file or directory", None),
        ];
        for (body, want) in cases {
            assert_eq!(pyxis_version(body), want, "{body:?}");
        }
    }

    /// Preflight names the cluster's Slurm version and whether Pyxis is there, typed, on each host.
    #[test]
    fn the_slurm_version_and_pyxis_are_reported_typed() {
        let s = settings();
        let with = |version: &'static str, pyxis: bool| {
            let mut bin: Vec<(&str, &str)> =
                HEALTHY.iter().copied().filter(|(n, _)| *n != "sbatch" && *n != "srun").collect();
            bin.push(("sbatch", version));
            bin.push(("srun", if pyxis { "echo '  --container-image=IMAGE'" } else { "echo '  --nodes=N'" }));
            read_preflight(&s, "login", &run_script_with(&bin, &s))
        };
        let cases = [
            ("echo slurm 22.05.8", true, (22, 5, 8), true),
            ("echo slurm-wlm 24.11.5", true, (24, 11, 5), true),
            ("echo slurm 23.02.7", false, (23, 2, 7), false),
        ];
        for (version, pyxis, (major, minor, patch), tested) in cases {
            let checks = with(version, pyxis);
            let facts = cluster_facts(&checks);
            assert_eq!(
                facts,
                [ClusterFacts {
                    host: Some("login".into()),
                    slurm_version: Some(SlurmVersion { major, minor, patch }),
                    slurm_version_tested: tested,
                    pyxis: Some(pyxis),
                }],
                "{version}"
            );
            let v = checks.iter().find(|c| c.name == "slurm version").unwrap();
            assert!(v.detail.contains(&format!("{major}.{minor:02}.{patch}")), "{}", v.detail);
            assert_eq!(v.detail.contains("tao-slurm is tested on 22.05, 24.11"), !tested, "{}", v.detail);
            let json = serde_json::to_value(v).unwrap();
            assert_eq!(json["found"]["slurm_version"]["minor"], minor, "{json}");
        }
    }
}
