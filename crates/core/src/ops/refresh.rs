//! Refresh any number of jobs in one round trip: the remote script (`squeue` for the user's live jobs,
//! `sacct` only for the ids squeue no longer lists, the end of each status.json that changed), its
//! parser, and the decision of each job's status from what it observed. Pure: the engine runs the
//! script and records the decisions.

use super::template;
use crate::model::{JobSummary, StatusUpdate};
use crate::protocol::{sections, unprefix_lines, PREFIX_LINES, SECTION};
use crate::script::shell::quote;
use crate::slurm::query::{SACCT_FIELDS, SQUEUE_FORMAT};
use crate::slurm::{
    explain_pending, parse_sacct, parse_squeue, SacctRecord, SlurmState, SqueueRecord, FINISHED_STATES,
};
use crate::status::{last_status_line, last_status_raw, map_status, PlatformStatus, StatusVerdict};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// How far back sacct looks, so that its default window (since midnight) never hides a job.
const SACCT_LOOKBACK: &str = "now-30days";
/// Every state, for sacct's `-s` (see the name lookup).
pub const SACCT_ALL_STATES: &str = "PD,R,RQ,RS,S,CA,CD,F,TO,NF,PR,OOM,BF,DL,RV";
/// Lines of status.json read per job: enough for the last status and progress message.
const STATUS_TAIL_LINES: u32 = 20;
/// A status.json up to this size is read by bash builtins (no process: ~0.2 ms for a typical file,
/// against ~2 ms for `tail | awk`); a larger one by `tail`, which reads only its end.
const SMALL_STATUS_JSON: u64 = 1 << 20;
/// Slurm states in which the container has not run (yet, or again): status.json is not looked at.
const NOT_RUN_STATES: [SlurmState; 4] =
    [SlurmState::Pending, SlurmState::Configuring, SlurmState::Requeued, SlurmState::RequeueHold];
/// Ends the job list of the refresh script (no list line is a single `E`).
const LIST_END: &str = "E";

/// What one refresh learned, before it is mapped to statuses.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Observations {
    /// None when squeue failed: nothing may be concluded from its silence.
    pub squeue: Option<Vec<SqueueRecord>>,
    /// sacct by job id; None when it failed or was not needed.
    pub sacct: Option<Vec<SacctRecord>>,
    /// sacct by job name, for jobs whose submission outcome is unknown.
    pub sacct_by_name: Option<Vec<SacctRecord>>,
    pub sacct_error: Option<String>,
    pub squeue_error: Option<String>,
    /// status.json text per platform job id, for the files that changed since they were last read.
    pub status_json: HashMap<String, String>,
    /// The signature (`size:mtime`) of each status.json that was read.
    pub status_sigs: HashMap<String, String>,
    /// Slurm job ids that submitters wrote into attempts' lock directories, per platform job id.
    pub lock_ids: HashMap<String, String>,
    /// Records slurmctld has not yet sent to the accounting database (sdiag's DBD Agent queue size),
    /// asked only when some job left squeue: while it is not zero, sacct may not know a finished job.
    pub dbd_queue: Option<u64>,
    /// The newest checkpoint of each job whose checkpoints were looked for ([`RefreshTarget::look`]),
    /// where it has one.
    pub checkpoints: HashMap<String, String>,
    /// The starts its batch script recorded (`layout::STARTS_FILE`), of the same jobs.
    pub starts: HashMap<String, Vec<Start>>,
    /// The GPU samples of each node of the running GPU jobs newer than their views held
    /// ([`RefreshTarget::gpu_dir`], [`RefreshTarget::gpu_seen`]), newest first per node.
    pub gpu: HashMap<String, Vec<crate::gpu::NodeSample>>,
}

/// One start of a job's batch script, as it recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub at: i64,
    pub slurm_job_id: String,
    /// Slurm's restart count: 0 on a Slurm job's first start.
    pub restart: u32,
    /// Why Slurm restarted it (`timeout`: the script's own requeue; `preempted`: Slurm's); None on a
    /// first start.
    pub cause: Option<crate::attempts::Cause>,
    pub checkpoint: Option<String>,
}

/// The restarts of the job's current Slurm job that its attempts do not record yet, oldest first:
/// each becomes the job's next attempt (`attempts` are the job's, first to last).
pub fn new_restarts<'a>(
    job: &JobSummary,
    attempts: &[crate::model::AttemptRecord],
    starts: &'a [Start],
) -> Vec<&'a Start> {
    let Some(current) = job.slurm_job_id.as_deref() else { return Vec::new() };
    let recorded = attempts
        .iter()
        .filter(|a| a.slurm_job_id.as_deref() == Some(current))
        .map(|a| a.slurm_restart.unwrap_or(0))
        .max()
        .unwrap_or(0);
    let mut seen = recorded;
    let mut out = Vec::new();
    for s in starts.iter().filter(|s| s.slurm_job_id == current && s.restart > recorded) {
        if s.restart > seen {
            seen = s.restart;
            out.push(s);
        }
    }
    out
}

/// The last starts a job's batch script recorded, oldest first; a line not in the form is skipped.
pub fn parse_starts(text: &str) -> Vec<Start> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(5, ' ');
            let at = f.next()?.parse().ok()?;
            let slurm_job_id = f.next().filter(|id| crate::slurm::is_slurm_job_id(id))?.to_string();
            let restart = f.next()?.parse().ok()?;
            let cause = match f.next()? {
                "-" => None,
                c => Some(crate::attempts::Cause::parse(c)?),
            };
            let checkpoint = f.next().filter(|c| *c != "-" && !c.is_empty()).map(String::from);
            Some(Start { at, slurm_job_id, restart, cause, checkpoint })
        })
        .collect()
}

impl Observations {
    /// Whether a job that neither squeue nor sacct lists is evidence of a lost job: both answered,
    /// and accounting has caught up with the controller.
    pub fn absence_is_evidence(&self) -> bool {
        self.squeue.is_some() && self.sacct.is_some() && self.dbd_queue == Some(0)
    }
}

/// One job to refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct RefreshTarget {
    pub job_id: String,
    /// None when the submission's outcome is unknown: the job is then looked up by its name.
    pub slurm_job_id: Option<String>,
    pub job_name: String,
    /// The attempt's submission lock directory, where the submitter writes the Slurm job id.
    pub submit_lock: String,
    /// The directory holding the job's results directory (`<root>/<job_id>/status.json`).
    pub results_root: String,
    /// status.json's signature when it was last read: an unchanged file is not read again.
    pub status_sig: Option<String>,
    /// A sweep variant's index in its job array while its first attempt is that array's task: the
    /// lock then holds the array's id, and the task's id is `<array>_<index>`.
    pub array_index: Option<u32>,
    /// Where to look for the job's newest checkpoint and its recorded starts: only for a running
    /// job that resumes (one `find` each, so not for the thousands a refresh may follow otherwise).
    pub look: Option<CheckpointLook>,
    /// Where a running GPU job's nodes keep their newest GPU samples (`crate::gpu::SAMPLE_DIR`).
    pub gpu_dir: Option<String>,
    /// Each node's newest sample time the job's view holds: only newer lines are read.
    pub gpu_seen: Vec<(String, i64)>,
}

/// A job's results directory and what counts as a checkpoint in it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointLook {
    pub results_dir: String,
    pub patterns: Vec<String>,
}

/// Lines of the starts record read per look (the newest; a job restarts far fewer times).
const STARTS_LINES: u32 = 64;
/// A starts record larger than this is not read (it holds a line per start: a job's own bloat).
const STARTS_MAX_BYTES: u64 = 65_536;

impl RefreshTarget {
    pub fn of(job: &JobSummary) -> RefreshTarget {
        RefreshTarget {
            job_id: job.job_id.clone(),
            slurm_job_id: job.slurm_job_id.clone(),
            job_name: job.attempt_name.clone(),
            submit_lock: format!("{}/sbatch/.submit-{}", job.layout.base_dir, job.attempt_name),
            results_root: job.layout.results_root.clone(),
            status_sig: job.status_sig.clone(),
            array_index: job.array_index(),
            look: (job.status == PlatformStatus::Running && !job.checkpoint_patterns.is_empty()).then(|| {
                CheckpointLook { results_dir: job.layout.results_dir(), patterns: job.checkpoint_patterns.clone() }
            }),
            gpu_dir: (job.status == PlatformStatus::Running && job.gpus_per_node > 0)
                .then(|| format!("{}/{}", job.layout.results_dir(), crate::gpu::SAMPLE_DIR)),
            gpu_seen: job.gpu.as_ref().map(crate::gpu::seen).unwrap_or_default(),
        }
    }
}

/// A submitted job that neither squeue nor sacct knows after this long was lost by the scheduler
/// (sacct lags the controller by a second or so right after a job starts or ends).
pub const LOST_JOB_GRACE_SECS: i64 = 300;

/// A job is declared lost only if a read at least this long after the first one that missed it
/// misses it too (one empty read is never a verdict).
pub const LOST_CONFIRM_SECS: i64 = 60;

/// Which jobs' "unseen since" mark changes with these observations: set on the first read that
/// misses a submitted job (with evidence that counts), cleared by any read that finds it. Pure.
pub fn unseen_changes(jobs: &[JobSummary], obs: &Observations, now: i64) -> Vec<(String, Option<i64>)> {
    let index = Index::new(obs);
    let mut out = Vec::new();
    for job in jobs {
        let Some(id) = job.slurm_job_id.as_deref() else { continue };
        let known =
            index.squeue.contains_key(id) || index.sacct.contains_key(id) || index.sacct_by_name.contains_key(id);
        match (known, job.unseen_since) {
            (true, Some(_)) => out.push((job.job_id.clone(), None)),
            (false, None) if obs.absence_is_evidence() => out.push((job.job_id.clone(), Some(now))),
            _ => {}
        }
    }
    out
}

/// The awk program that reads the job list (up to its `E` line) and then squeue's output: it passes
/// squeue's lines on (`|`-prefixed, so no job name can pose as a marker) and, on standard error,
/// tells the script squeue's status, which listed ids squeue no longer knows (for sacct), and which
/// jobs' status.json may hold news (running or finished ones, and those without an id yet).
fn select_program() -> String {
    let not_run = NOT_RUN_STATES.iter().map(SlurmState::as_str).collect::<Vec<_>>().join("|");
    let finished = FINISHED_STATES.iter().map(SlurmState::as_str).collect::<Vec<_>>().join("|");
    let rc_at = (SECTION.len() + 4).to_string();
    template::fill(
        include_str!("templates/refresh_select.awk"),
        &[
            ("LIST_END", LIST_END),
            ("SECTION", SECTION),
            ("RC_AT", &rc_at),
            ("NOT_RUN", &not_run),
            ("FINISHED", &finished),
        ],
    )
}

/// Seconds all changed status.json files of one refresh may take to read: `find -type f` has already
/// left out FIFOs and symlinks, so this only bounds a file swapped for one in between.
const STATUS_READ_SECS: u32 = 10;

/// Reads `job<TAB>path<TAB>sig` lines and prints each file's last lines in a section: small files by
/// bash builtins (at most their size + 1 from the one open: a file swapped after `find` gave its size
/// is not read whole), larger ones from their last 64 KiB only (a file of one endless line costs no
/// more); at most 64 KiB of each file either way.
fn status_reader() -> String {
    template::fill(
        include_str!("templates/refresh_status_reader.sh"),
        &[
            ("SECTION", SECTION),
            ("SMALL_STATUS_JSON", &SMALL_STATUS_JSON.to_string()),
            ("SMALL_READ", &(SMALL_STATUS_JSON + 1).to_string()),
            ("TAIL_LINES", &STATUS_TAIL_LINES.to_string()),
            ("PREFIX_LINES", PREFIX_LINES),
        ],
    )
}

/// Subdirectories of a job's results directory, and of each of them, looked in for a status.json
/// below it (TAO's trainers write `<results>/<output dir>/<action>/status.json`): a job that makes
/// thousands costs no more than this many tests each.
pub const STATUS_SUBDIRS: u32 = 16;

/// Finds each candidate job's status.json (the top of its results directory, else TAO's places
/// below it) and `stat`s them all at once (`templates/refresh_status_locate.sh`).
fn status_locator() -> String {
    template::fill(include_str!("templates/refresh_status_locate.sh"), &[("SUBDIRS", &STATUS_SUBDIRS.to_string())])
}

/// Reads [`status_locator`]'s output; prints the status.json of each job whose signature differs
/// from the one last read (`templates/refresh_status_pick.awk`).
fn pick_program() -> String {
    template::fill(include_str!("templates/refresh_status_pick.awk"), &[])
}

/// The most ids one `squeue -j` is given: squeue matches each job it loads against each id of the
/// list, so a long list costs more than listing every job of the user (the awk program then passes
/// on only ours: the user's other jobs still cost no transfer and no parsing).
const MAX_SQUEUE_JOB_LIST: usize = 64;

/// squeue's `-j` list for a few jobs: squeue then formats ours only, whatever else the same Slurm
/// user has queued (it still loads the user's jobs and filters them itself). A sweep's array by its
/// own id (with `-r`, every task). None (every job of the user) for more than
/// [`MAX_SQUEUE_JOB_LIST`] ids, or when a job's Slurm id is not known yet (it is then found by name
/// in squeue's list). One id is given twice: squeue asks for a lone id by a call of its own that
/// fails (exit 1) once the controller has forgotten the job, where a list just leaves it out.
pub fn squeue_job_list(jobs: &[RefreshTarget]) -> Option<String> {
    let mut ids: Vec<&str> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let id = job.slurm_job_id.as_deref()?;
        ids.push(id.split_once('_').map_or(id, |(array, _)| array));
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() || ids.iter().any(|id| id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    if ids.len() > MAX_SQUEUE_JOB_LIST {
        return None;
    }
    if ids.len() == 1 {
        ids.push(ids[0]);
    }
    Some(ids.join(","))
}

/// The remote script for a set of jobs. Pure.
pub fn refresh_script(jobs: &[RefreshTarget]) -> String {
    // The job list travels as a heredoc, which bash reads far faster than words of a command.
    let mut roots: BTreeMap<&str, usize> = BTreeMap::new();
    let mut list = String::with_capacity(jobs.len() * 64);
    for job in jobs {
        let next = roots.len();
        let root = *roots.entry(job.results_root.as_str()).or_insert(next);
        let _ = writeln!(
            list,
            "J\t{}\t{}\t{root}\t{}\t{}",
            job.slurm_job_id.as_deref().unwrap_or("-"),
            job.job_id,
            job.status_sig.as_deref().unwrap_or("-"),
            if job.slurm_job_id.is_some() { "-" } else { job.job_name.as_str() }
        );
    }
    let mut roots_list = String::new();
    for (root, i) in &roots {
        roots_list.push_str(&format!("R\t{i}\t{root}\n"));
    }
    let mut s = String::new();
    // awk's standard output is the script's (fd 5); its standard error, the control lines, is captured.
    s.push_str(&format!(
        "exec 5>&1\necho '{SECTION}squeue'\n\
         ctl=\"$( {{ squeue --me{only} -r -t all -h -O {fmt} 2>&1; echo \"{SECTION}rc $?\"; }} | awk -F'|' {prog} /dev/fd/3 - 3<<'TAO_SLURM_JOBS' 2>&1 >&5\n\
         {roots_list}{list}{LIST_END}\nTAO_SLURM_JOBS\n)\"\n\
         read -r _ sq_rc need missing <<<\"$ctl\"\n",
        fmt = quote(SQUEUE_FORMAT),
        prog = quote(&select_program()),
        only = squeue_job_list(jobs).map(|l| format!(" -j {l}")).unwrap_or_default(),
    ));
    // Only ids that squeue does not list go to sacct (slower, and it lags the controller).
    s.push_str(&format!(
        "if [ \"$sq_rc\" = 0 ] && [ -n \"$missing\" ]; then\n  echo '{SECTION}sacct'\n  \
         sacct -X -P -n -S {SACCT_LOOKBACK} -j \"$missing\" --format={SACCT_FIELDS} 2>&1 | {PREFIX_LINES}\n  \
         echo \"{SECTION}rc sacct ${{PIPESTATUS[0]}}\"\n  \
         echo \"{SECTION}dbd_queue $(sdiag 2>/dev/null | awk -F: '/DBD Agent queue size/ {{ gsub(/ /, \"\", $2); print $2 }}')\"\nfi\n"
    ));
    for job in jobs.iter().filter(|j| j.slurm_job_id.is_none()) {
        let task = job.array_index.map(|i| format!("_{i}")).unwrap_or_default();
        s.push_str(&format!(
            // Read only a regular file (a FIFO would hang us, a symlink could point anywhere), only
            // its first bytes, and only digits: no content of it can pose as a marker or an id.
            "if [ ! -L {l} ] && [ -f {l}/slurm_job_id ] && [ ! -L {l}/slurm_job_id ]; then id=\"$(head -c 24 {l}/slurm_job_id 2>/dev/null | head -n 1)\"; case \"$id\" in ''|*[!0-9]*) ;; *) echo '{SECTION}lock_id {id}'; printf '|%s{task}\\n' \"$id\";; esac; fi\n",
            l = quote(&job.submit_lock),
            id = job.job_id
        ));
    }
    let names: Vec<String> = jobs.iter().filter(|j| j.slurm_job_id.is_none()).map(|j| quote(&j.job_name)).collect();
    if !names.is_empty() {
        s.push_str(&format!(
            // With a time window sacct skips jobs that were never eligible (held, then cancelled)
            // unless the states are listed explicitly.
            "echo '{SECTION}sacct_by_name'\nsacct -X -P -n -S {SACCT_LOOKBACK} -E now -s {SACCT_ALL_STATES} --name={} --format={SACCT_FIELDS} 2>&1 | {PREFIX_LINES}\necho \"{SECTION}rc sacct_by_name ${{PIPESTATUS[0]}}\"\n",
            names.join(",")
        ));
    }
    // status.json of the candidates awk named (at the top of the results directory, else where TAO's
    // trainers write it), only where its size or mtime changed since it was last read: one `stat` for
    // all of them, then the end of each changed file.
    s.push_str(&format!(
        "if [ \"${{need:-0}}\" -gt 0 ]; then\n  \
         printf '%s\\n' \"$ctl\" | awk 'NR > 1' | timeout {STATUS_READ_SECS} bash -c {locate} | awk -F'\\t' {pick} |\n  \
         timeout {STATUS_READ_SECS} bash -c {reader}\nfi\n",
        locate = quote(&status_locator()),
        pick = quote(&pick_program()),
        reader = quote(&status_reader()),
    ));
    look_script(&mut s, jobs);
    gpu_script(&mut s, jobs);
    s
}

/// The GPU samples of each node of the running GPU jobs that are newer than the job's view holds,
/// for all of them in one bash (`templates/refresh_gpu.sh`): a glob of each job's sample directory,
/// no `find`.
fn gpu_script(s: &mut String, jobs: &[RefreshTarget]) {
    let list: String = jobs
        .iter()
        .filter_map(|j| {
            let seen: Vec<String> = j.gpu_seen.iter().map(|(n, at)| format!("{n}={at}")).collect();
            j.gpu_dir.as_ref().map(|d| format!("{d}\t{}\t{}\n", j.job_id, seen.join(" ")))
        })
        .collect();
    if list.is_empty() {
        return;
    }
    s.push_str(&template::fill(
        include_str!("templates/refresh_gpu.sh"),
        &[
            ("READ_SECS", &STATUS_READ_SECS.to_string()),
            ("FILES", &crate::gpu::SAMPLE_FILES_MAX.to_string()),
            ("MAX", &crate::gpu::SAMPLE_MAX_BYTES.to_string()),
            ("LINE", &crate::gpu::LINE_MAX_BYTES.to_string()),
            ("KEEP", &crate::gpu::HISTORY_SAMPLES.to_string()),
            ("JOB", &crate::gpu::JOB_READ_MAX_BYTES.to_string()),
            ("SECTION", SECTION),
            ("LIST", &list),
        ],
    ));
}

/// The jobs with a [`CheckpointLook`], grouped by their patterns (usually one group): for each
/// group one `find`, one awk and one bash (`templates/refresh_looks.sh`), whatever its size.
fn look_script(s: &mut String, jobs: &[RefreshTarget]) {
    let mut groups: BTreeMap<&[String], Vec<(&str, &str)>> = BTreeMap::new();
    for job in jobs {
        if let Some(look) = &job.look {
            groups.entry(&look.patterns).or_default().push((look.results_dir.as_str(), job.job_id.as_str()));
        }
    }
    for (patterns, members) in groups {
        let dirs: Vec<String> = members.iter().map(|(d, _)| quote(&format!("{d}/"))).collect();
        let list: String = members.iter().map(|(d, j)| format!("{d}/\t{j}\n")).collect();
        s.push_str(&template::fill(
            include_str!("templates/refresh_looks.sh"),
            &[
                ("DIRS", &dirs.join(" ")),
                ("DEPTH", &crate::checkpoint::DEPTH.to_string()),
                ("KINDS", &crate::checkpoint::kinds(patterns)),
                ("STARTS_PATH", &format!("{}/{}", crate::layout::BOOKKEEPING_DIR, crate::layout::STARTS_FILE)),
                ("STARTS_MAX", &STARTS_MAX_BYTES.to_string()),
                ("STARTS_READ", &(STARTS_MAX_BYTES + 1).to_string()),
                ("STARTS_LINES", &STARTS_LINES.to_string()),
                ("READ_SECS", &STATUS_READ_SECS.to_string()),
                ("SECTION", SECTION),
                ("LIST", &list),
            ],
        ));
    }
}

/// Parse the refresh script's output. Pure.
pub fn parse_refresh_output(stdout: &str) -> Observations {
    let mut obs = Observations::default();
    let mut bodies: HashMap<String, String> = HashMap::new();
    for (name, arg, body) in sections(stdout) {
        match name.as_str() {
            "rc" => {
                let (which, code) = arg.split_once(' ').unwrap_or((&arg, ""));
                // Every command's lines arrive `|`-prefixed.
                let body = unprefix_lines(&bodies.remove(which).unwrap_or_default());
                let ok = code.trim() == "0";
                match (which, ok) {
                    ("squeue", true) => obs.squeue = Some(parse_squeue(&body)),
                    ("squeue", false) => obs.squeue_error = Some(body.trim().to_string()),
                    ("sacct", true) => obs.sacct = Some(parse_sacct(&body)),
                    ("sacct_by_name", true) => obs.sacct_by_name = Some(parse_sacct(&body)),
                    ("sacct" | "sacct_by_name", false) => obs.sacct_error = Some(body.trim().to_string()),
                    _ => {}
                }
            }
            "lock_id" => {
                let id = unprefix_lines(&body);
                let id = id.trim();
                if crate::slurm::is_slurm_job_id(id) {
                    obs.lock_ids.insert(arg.trim().to_string(), id.to_string());
                }
            }
            "dbd_queue" => obs.dbd_queue = arg.trim().parse().ok(),
            "checkpoint" => {
                if let Some((job, path)) = arg.split_once(' ').filter(|(_, p)| !p.trim().is_empty()) {
                    obs.checkpoints.insert(job.to_string(), path.trim().to_string());
                }
            }
            "starts" => {
                obs.starts.insert(arg.trim().to_string(), parse_starts(&unprefix_lines(&body)));
            }
            "gpu" => {
                let (job, node) = arg.trim().split_once(' ').unwrap_or(("", ""));
                let samples = crate::gpu::parse_samples(node, &unprefix_lines(&body));
                if !samples.is_empty() {
                    obs.gpu.entry(job.to_string()).or_default().extend(samples);
                }
            }
            "status_json" => {
                let (job, sig) = arg.split_once(' ').unwrap_or((&arg, ""));
                obs.status_json.insert(job.to_string(), unprefix_lines(&body));
                if !sig.is_empty() {
                    obs.status_sigs.insert(job.to_string(), sig.to_string());
                }
            }
            other => {
                bodies.insert(other.to_string(), body);
            }
        }
    }
    obs
}

/// What a refresh decided for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub job_id: String,
    /// A Slurm job found by name for a job whose submission outcome was unknown.
    pub adopt: Option<String>,
    pub update: StatusUpdate,
}

/// The number that orders Slurm jobs by age: the id, or an array task's array id.
fn numeric_id(id: &str) -> u64 {
    id.split('_').next().unwrap_or(id).parse().unwrap_or(0)
}

/// The script exits 124 only once its timeout requeues are used up.
fn timed_out_message(job: &JobSummary) -> String {
    format!(
        "timed out {} times: the inner timeout of {} s was reached on every run",
        job.timeout_runs, job.timeout_seconds
    )
}

/// The observations indexed by Slurm job id, so that deciding is linear in the number of jobs. Where
/// an id is listed twice, its first record counts (as a search from the top would find).
struct Index<'a> {
    squeue: HashMap<&'a str, &'a SqueueRecord>,
    sacct: HashMap<&'a str, &'a SacctRecord>,
    sacct_by_name: HashMap<&'a str, &'a SacctRecord>,
}

/// `records` by id, the first record of an id winning (inserted last).
fn first_by_id<'a, R>(records: &'a Option<Vec<R>>, id: impl Fn(&'a R) -> &'a str) -> HashMap<&'a str, &'a R> {
    records.iter().flatten().rev().map(|r| (id(r), r)).collect()
}

impl<'a> Index<'a> {
    fn new(obs: &'a Observations) -> Index<'a> {
        Index {
            squeue: first_by_id(&obs.squeue, |r| r.job_id.as_str()),
            sacct: first_by_id(&obs.sacct, |r| r.job_id.as_str()),
            sacct_by_name: first_by_id(&obs.sacct_by_name, |r| r.job_id.as_str()),
        }
    }
}

/// Decide each job's new status from the observations. Jobs about which nothing reliable was learned
/// get no decision: no terminal verdict from missing data. Pure.
pub fn decide(jobs: &[JobSummary], obs: &Observations, now: i64) -> Vec<Decision> {
    let index = Index::new(obs);
    let mut decisions = Vec::new();
    for job in jobs {
        // Not found yet: the retry engine resubmits the attempt once it is safe to (the submission
        // script itself guarantees one sbatch per attempt).
        let Some((slurm_id, adopt)) = slurm_job_of(job, obs) else { continue };
        let acct = index.sacct.get(slurm_id.as_str()).or_else(|| index.sacct_by_name.get(slurm_id.as_str()));
        let update = match (index.squeue.get(slurm_id.as_str()), acct) {
            (Some(rec), acct) if rec.unread.is_none() => Some(from_squeue(job, rec, acct.copied(), obs)),
            // squeue's line was not understood: only accounting's settled word on a finished job may
            // stand in for it; else the job waits (see `unread`).
            (Some(_), Some(rec)) if rec.state.is_finished() => from_sacct(job, rec, obs),
            (Some(_), _) => None,
            (None, Some(rec)) => from_sacct(job, rec, obs),
            (None, None) => lost(job, &slurm_id, obs, now),
        };
        if let Some(update) = update {
            let update = crate::ops::pause::held(job.status, update);
            decisions.push(Decision { job_id: job.job_id.clone(), adopt, update });
        }
    }
    decisions
}

/// A job whose Slurm output was not understood: it gets no verdict from that output, and the engine
/// logs `what` once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    pub job_id: String,
    pub slurm_job_id: String,
    /// `squeue` or `sacct`.
    pub source: &'static str,
    /// What was not understood, naming the field or state and quoting the line.
    pub what: String,
}

/// The jobs whose squeue or sacct line was not understood, with what was not. Pure.
pub fn unread(jobs: &[JobSummary], obs: &Observations) -> Vec<Unread> {
    let index = Index::new(obs);
    let mut out = Vec::new();
    for job in jobs {
        let Some((slurm_id, _)) = slurm_job_of(job, obs) else { continue };
        let id = slurm_id.as_str();
        let squeue = index.squeue.get(id).and_then(|r| r.unread.as_ref()).map(|w| ("squeue", w));
        let sacct = index.sacct.get(id).or_else(|| index.sacct_by_name.get(id)).and_then(|r| r.unread.as_ref());
        for (source, what) in squeue.into_iter().chain(sacct.map(|w| ("sacct", w))) {
            out.push(Unread { job_id: job.job_id.clone(), slurm_job_id: slurm_id.clone(), source, what: what.clone() });
        }
    }
    out
}

/// The Slurm job of the job's current attempt, and whether it was just found (to adopt): the id
/// recorded, else the one the submitter wrote into the attempt's lock, else (outcome unknown) the
/// newest Slurm job with the attempt's unique name. None: not found (yet).
fn slurm_job_of(job: &JobSummary, obs: &Observations) -> Option<(String, Option<String>)> {
    if let Some(id) = &job.slurm_job_id {
        return Some((id.clone(), None));
    }
    if let Some(id) = obs.lock_ids.get(&job.job_id) {
        return Some((id.clone(), Some(id.clone())));
    }
    let name = &job.attempt_name;
    // A sweep variant's first attempt is one task of its array (all tasks share the name).
    let task = job.array_index().map(|i| format!("_{i}"));
    let mine = |id: &str| match &task {
        Some(t) => id.ends_with(t.as_str()),
        None => true,
    };
    let live = obs
        .squeue
        .as_ref()
        .and_then(|q| q.iter().filter(|r| &r.name == name && mine(&r.job_id)).max_by_key(|r| numeric_id(&r.job_id)));
    let done = obs
        .sacct_by_name
        .as_ref()
        .and_then(|a| a.iter().filter(|r| &r.name == name && mine(&r.job_id)).max_by_key(|r| numeric_id(&r.job_id)));
    let id = live.map(|r| r.job_id.clone()).or_else(|| done.map(|r| r.job_id.clone()))?;
    Some((id.clone(), Some(id)))
}

/// status.json as just read, else (the file did not change) the last line read before.
fn status_json_of<'a>(job: &'a JobSummary, obs: &'a Observations) -> (Option<&'a str>, Option<&'a str>) {
    let fresh = obs.status_json.get(&job.job_id).map(String::as_str);
    (fresh, fresh.or(job.progress.as_deref()))
}

/// The platform verdict for a Slurm state, with the inner timeout's own message for exit 124.
fn verdict(job: &JobSummary, state: &SlurmState, exit_code: Option<i32>, status_json: Option<&str>) -> StatusVerdict {
    let mut verdict = map_status(state, exit_code, status_json);
    if verdict.status == PlatformStatus::Error && exit_code == Some(crate::exit_codes::TIMED_OUT) {
        verdict.message = timed_out_message(job);
    }
    verdict
}

/// What squeue (the controller) says of a job it still lists. Of a finished job the refresh asked
/// sacct too: its exit code stands in where squeue gave none.
fn from_squeue(job: &JobSummary, rec: &SqueueRecord, acct: Option<&SacctRecord>, obs: &Observations) -> StatusUpdate {
    let (fresh, known) = status_json_of(job, obs);
    // A job that has not run (again) shows no progress, as before it was read.
    let status_json = if NOT_RUN_STATES.contains(&rec.state) { fresh } else { known };
    let progress = status_json.and_then(last_status_line).and_then(|l| l.message);
    let settled_acct = acct.filter(|a| a.unread.is_none() && a.state.is_finished() && a.name == job.attempt_name);
    let exit_code =
        if rec.state.is_finished() { rec.exit_code.or(settled_acct.and_then(|a| a.exit_code)) } else { None };
    let verdict = verdict(job, &rec.state, exit_code, status_json);
    let mut message = verdict.message;
    let pending_reason = (verdict.status == PlatformStatus::Pending && !rec.reason.is_empty() && rec.reason != "None")
        .then(|| rec.reason.clone());
    if pending_reason.is_some() {
        message = match explain_pending(&rec.reason) {
            Some((words, advice)) => format!("{message}, reason {}: {words} ({advice})", rec.reason),
            None => format!("{message}, reason {}", rec.reason),
        };
    }
    if let Some(p) = &progress {
        message = format!("{message}; last progress: {p}");
    }
    StatusUpdate {
        status: verdict.status,
        message,
        slurm_state: Some(rec.state.to_string()),
        exit_code,
        node_list: Some(rec.node_list.clone()).filter(|n| !n.is_empty() && n != "(null)"),
        progress: status_json.and_then(last_status_raw),
        pending_reason,
    }
}

/// What sacct (accounting) says of a job the controller no longer lists; None while its record is
/// not settled yet.
fn from_sacct(job: &JobSummary, rec: &SacctRecord, obs: &Observations) -> Option<StatusUpdate> {
    // A line not understood is no verdict (see `unread`).
    if rec.unread.is_some() {
        return None;
    }
    // Right after a job ends, slurmdbd may hold a half-written record (JobName "allocation",
    // sometimes a wrong exit code). Only a record that carries our job name is settled.
    if !rec.name.is_empty() && rec.name != job.attempt_name {
        return None;
    }
    // FAILED with exit code 0:0 is a contradiction sacct shows for a moment before the real exit
    // code arrives (seen in CI): not settled either.
    if rec.state == SlurmState::Failed && rec.exit_code == Some(0) && rec.exit_signal.unwrap_or(0) == 0 {
        return None;
    }
    let (_, known) = status_json_of(job, obs);
    let verdict = verdict(job, &rec.state, rec.exit_code, known);
    Some(StatusUpdate {
        status: verdict.status,
        message: verdict.message,
        slurm_state: Some(rec.state_text.clone()),
        exit_code: rec.exit_code,
        node_list: Some(rec.node_list.clone()).filter(|n| !n.is_empty() && n != "None assigned"),
        progress: known.and_then(last_status_raw),
        pending_reason: None,
    })
}

/// Neither squeue nor sacct knows the job. It is lost only on positive evidence: both answered,
/// accounting has caught up with the controller, the attempt was submitted longer ago than the
/// grace, and an earlier read some time before missed it too.
fn lost(job: &JobSummary, slurm_id: &str, obs: &Observations, now: i64) -> Option<StatusUpdate> {
    let submitted = job.submitted_at.unwrap_or(job.created_at);
    let confirmed = job.unseen_since.is_some_and(|t| now - t >= LOST_CONFIRM_SECS);
    if !(obs.absence_is_evidence() && now - submitted > LOST_JOB_GRACE_SECS && confirmed) {
        return None;
    }
    let (_, known) = status_json_of(job, obs);
    Some(StatusUpdate {
        status: PlatformStatus::Error,
        message: format!(
            "lost by the scheduler: Slurm job {slurm_id} (submitted {} s ago) is neither in squeue (which listed {} of your jobs) nor in sacct (searched since {SACCT_LOOKBACK}, accounting up to date), for {} s",
            now - submitted,
            obs.squeue.as_ref().map(Vec::len).unwrap_or(0),
            now - job.unseen_since.unwrap_or(now)
        ),
        slurm_state: job.slurm_state.clone(),
        exit_code: None,
        node_list: None,
        progress: known.and_then(last_status_raw),
        pending_reason: None,
    })
}

/// Whether storing `update` would change nothing (the same test `Store::update_status` makes, done
/// here so that a refresh of thousands of unchanged jobs writes nothing).
pub fn changes_nothing(job: &JobSummary, u: &StatusUpdate) -> bool {
    job.status == u.status
        && job.message == u.message
        && job.slurm_state == u.slurm_state
        && job.exit_code == u.exit_code
        && (u.node_list.is_none() || job.node_list.is_some())
        && (u.progress.is_none() || job.progress == u.progress)
        && job.pending_reason == u.pending_reason
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_templates_are_filled_whole() {
        let t = RefreshTarget {
            job_id: "a".into(),
            slurm_job_id: None,
            job_name: "tao-job-a".into(),
            submit_lock: "/x/lock".into(),
            results_root: "/x/results".into(),
            status_sig: None,
            array_index: None,
            look: None,
            gpu_dir: Some(format!("/x/results/a/{}", crate::gpu::SAMPLE_DIR)),
            gpu_seen: vec![("node1".into(), 5)],
        };
        let script = refresh_script(&[t]);
        assert_eq!(super::template::unfilled(&script), Vec::<String>::new(), "{script}");
        assert!(!script.contains("\n# "), "template comments are not sent");
    }

    /// squeue is asked for our jobs only (an array by its id, a lone id twice), or for every job of
    /// the user when one of ours has no id yet.
    #[test]
    fn squeue_is_asked_for_our_jobs_only() {
        let t = |id: Option<&str>| target("a", id, "/x/results", None);
        assert_eq!(squeue_job_list(&[t(Some("42"))]).as_deref(), Some("42,42"));
        assert_eq!(squeue_job_list(&[t(Some("9_1")), t(Some("42")), t(Some("9_0"))]).as_deref(), Some("42,9"));
        assert_eq!(squeue_job_list(&[t(Some("42")), t(None)]), None, "found by name in the whole list");
        assert_eq!(squeue_job_list(&[t(Some("4;2"))]), None);
        assert_eq!(squeue_job_list(&[]), None);
        let many: Vec<RefreshTarget> = (0..65).map(|i| t(Some(&format!("{}", 1_000_000 + i)))).collect();
        assert_eq!(squeue_job_list(&many), None, "every job of the user, filtered by awk");
        assert!(squeue_job_list(&many[..64]).is_some());
        assert!(refresh_script(&[t(Some("42"))]).contains("squeue --me -j 42,42 -r"));
    }

    use super::*;
    use crate::plan::tests::{settings, spec};

    /// The tests' clock (the core reads none).
    fn now_secs() -> i64 {
        1_800_000_000
    }

    fn job(id: &str, slurm: &str) -> JobSummary {
        let plan = crate::plan::resolve_with_id(&spec(), &settings(), id).unwrap();
        crate::fixtures::summary(&plan, Some(slurm), now_secs())
    }

    fn target(job_id: &str, slurm: Option<&str>, root: &str, sig: Option<&str>) -> RefreshTarget {
        RefreshTarget {
            job_id: job_id.into(),
            slurm_job_id: slurm.map(String::from),
            job_name: format!("tao-job-{job_id}"),
            submit_lock: "/nonexistent/lock".into(),
            results_root: root.into(),
            status_sig: sig.map(String::from),
            array_index: None,
            look: None,
            gpu_dir: None,
            gpu_seen: Vec::new(),
        }
    }

    /// The GPU samples of running jobs are read by one bash for all of them: of each node's file the
    /// lines newer than the job's view holds (at most the ring's size), and nothing a job planted (a
    /// link, a file of another name, a line over the cap, a linked directory) reaches the output.
    #[test]
    fn gpu_samples_are_read_for_every_running_job_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("results");
        let a = root.join("a").join(crate::gpu::SAMPLE_DIR);
        std::fs::create_dir_all(&a).unwrap();
        std::fs::write(a.join("node1"), "v2 300 - smi 90/10/200\nv2 200 - smi 80/10/200\nv2 100 - smi 70/10/200\n")
            .unwrap();
        std::fs::write(a.join("node2"), "v2 100 50 dcgm 0/10/30\nsecond line\nv2 x - smi 1/1/1\n").unwrap();
        std::fs::write(dir.path().join("secret"), "v2 1 - smi 1/1/1\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), a.join("node3")).unwrap();
        std::fs::write(a.join("node4"), format!("v2 1 - smi 1/1/1{}\n", " ".repeat(crate::gpu::SAMPLE_MAX_BYTES)))
            .unwrap();
        let many: String = (0..200).map(|i| format!("v2 {} - smi 5/5/5\n", 10_000 - i)).collect();
        std::fs::write(a.join("node5"), many).unwrap();
        std::fs::write(a.join("bad name"), "v2 1 - smi 1/1/1\n").unwrap();
        let b = root.join("b").join(crate::gpu::SAMPLE_DIR);
        std::fs::create_dir_all(b.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let with_gpu = |id: &str| RefreshTarget {
            gpu_dir: Some(format!("{}/{id}/{}", root.display(), crate::gpu::SAMPLE_DIR)),
            gpu_seen: vec![("node1".into(), 200)],
            ..target(id, Some("1"), &root.display().to_string(), Some("0:0"))
        };
        let out = run_with_stand_ins(&refresh_script(&[with_gpu("a"), with_gpu("b")]), "");
        let obs = parse_refresh_output(&out);
        let read = |node: &str| -> Vec<i64> { obs.gpu["a"].iter().filter(|s| s.node == node).map(|s| s.at).collect() };
        assert_eq!(read("node1"), [300], "only what is newer than the view's: {out}");
        assert_eq!(read("node2"), [100], "{out}");
        let node2 = obs.gpu["a"].iter().find(|s| s.node == "node2").unwrap();
        assert_eq!((node2.idle_since, node2.source), (Some(50), crate::gpu::GpuSource::Dcgm));
        assert!(read("node3").is_empty() && read("node4").is_empty(), "{out}");
        assert_eq!(read("node5").len(), crate::gpu::HISTORY_SAMPLES, "at most the ring: {out}");
        assert_eq!(read("node5")[0], 10_000, "the newest first");
        assert!(!obs.gpu.contains_key("b"), "a linked sample directory is not read: {out}");
        assert!(!out.contains("bad name") && !out.contains("second line"), "{out}");
    }

    /// Run a refresh script with stand-in squeue and sacct (sacct prints its arguments first).
    fn run_with_stand_ins(script: &str, squeue_lines: &str) -> String {
        run_with_sdiag(script, squeue_lines, "")
    }

    /// The same, with a stand-in sdiag that prints `sdiag_text`.
    fn run_with_sdiag(script: &str, squeue_lines: &str, sdiag_text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path();
        std::fs::write(bin.join("squeue"), format!("#!/bin/sh\nprintf '{squeue_lines}'\n")).unwrap();
        std::fs::write(bin.join("sacct"), "#!/bin/sh\necho \"ARGS $*\"\necho '11|COMPLETED|0:0|0:0|node2|a|b|x'\n")
            .unwrap();
        std::fs::write(bin.join("sdiag.txt"), sdiag_text).unwrap();
        std::fs::write(bin.join("sdiag"), format!("#!/bin/sh\ncat '{}/sdiag.txt'\n", bin.display())).unwrap();
        for f in ["squeue", "sacct", "sdiag"] {
            std::process::Command::new("chmod").arg("+x").arg(bin.join(f)).status().unwrap();
        }
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "the script writes nothing to stderr");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn script_asks_sacct_only_for_ids_squeue_forgot() {
        let jobs = vec![target("a", Some("11"), "/nonexistent", None), target("b", Some("10"), "/nonexistent", None)];
        let stdout = run_with_stand_ins(&refresh_script(&jobs), "10|RUNNING|None|node1|x|4:00:00|0|tao-job-b\\n");
        assert!(stdout.contains("|ARGS -X -P -n -S now-30days -j 11 "), "sacct asked only for 11: {stdout}");
        let obs = parse_refresh_output(&stdout);
        assert_eq!(obs.squeue.as_ref().unwrap().len(), 1);
        assert_eq!(obs.sacct.as_ref().unwrap().iter().map(|r| r.job_id.as_str()).collect::<Vec<_>>(), ["11"]);
        assert!(obs.status_json.is_empty(), "no status.json exists");
    }

    /// The user's other jobs in squeue's list are dropped on the host: only ours (by id, or by name
    /// for one whose id is not known yet) reach the parser.
    #[test]
    fn the_users_other_jobs_never_leave_the_host() {
        let jobs = vec![target("a", Some("10"), "/nonexistent", None), target("b", None, "/nonexistent", None)];
        let squeue = "10|RUNNING|None|n1|x|1:00|0|tao-job-a\\n99|RUNNING|None|n1|x|1:00|0|someone-elses\\n77|PENDING|Priority|(null)|x|1:00|0|tao-job-b\\n";
        let obs = parse_refresh_output(&run_with_stand_ins(&refresh_script(&jobs), squeue));
        let ids: Vec<&str> = obs.squeue.as_ref().unwrap().iter().map(|r| r.job_id.as_str()).collect();
        assert_eq!(ids, ["10", "77"]);
    }

    #[test]
    fn status_json_is_read_only_when_it_changed_and_never_for_pending_jobs() {
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().display().to_string();
        for id in ["run", "pend", "done"] {
            std::fs::create_dir_all(root.path().join(id)).unwrap();
            std::fs::write(
                root.path().join(id).join("status.json"),
                format!("{{\"status\":\"RUNNING\",\"message\":\"{id}\"}}\n"),
            )
            .unwrap();
        }
        let squeue = "1|RUNNING|None|n1|x|1:00|0|tao-job-run\\n2|PENDING|Priority||x|1:00|0|tao-job-pend\\n";
        let jobs = vec![
            target("run", Some("1"), &root_path, None),
            target("pend", Some("2"), &root_path, None),
            // Not in squeue: finished; sacct knows it.
            target("done", Some("11"), &root_path, None),
        ];
        let obs = parse_refresh_output(&run_with_stand_ins(&refresh_script(&jobs), squeue));
        let mut read: Vec<&str> = obs.status_json.keys().map(String::as_str).collect();
        read.sort();
        assert_eq!(read, ["done", "run"], "pending jobs' files are not read");
        assert!(obs.status_json["run"].contains("\"message\":\"run\""), "{:?}", obs.status_json);
        let sig = obs.status_sigs["run"].clone();
        assert!(sig.split(':').all(|p| p.parse::<u64>().is_ok()), "size:mtime, got {sig}");
        // Same signatures as read: nothing is read again.
        let again: Vec<RefreshTarget> = jobs
            .iter()
            .map(|t| RefreshTarget { status_sig: obs.status_sigs.get(&t.job_id).cloned(), ..t.clone() })
            .collect();
        let obs2 = parse_refresh_output(&run_with_stand_ins(&refresh_script(&again), squeue));
        assert!(obs2.status_json.is_empty(), "unchanged files are not read: {:?}", obs2.status_json);
        assert!(obs2.squeue.is_some());
        // The file grows: read again, with its new signature.
        std::fs::write(
            root.path().join("run/status.json"),
            "{\"status\":\"RUNNING\",\"message\":\"run\"}\n{\"status\":\"RUNNING\",\"message\":\"epoch 2\"}\n",
        )
        .unwrap();
        let obs3 = parse_refresh_output(&run_with_stand_ins(&refresh_script(&again), squeue));
        assert_eq!(obs3.status_json.keys().collect::<Vec<_>>(), ["run"]);
        assert!(obs3.status_json["run"].contains("epoch 2"));
        assert_ne!(obs3.status_sigs["run"], sig);
    }

    /// TAO's trainers write status.json in their output directory (`<results>/results_dir/train/`,
    /// the AutoML runner's jobs among them): found there when the top has none, read again only when
    /// it changes, and the top file wins when both exist.
    #[test]
    fn status_json_is_found_where_taos_trainers_write_it() {
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().display().to_string();
        let job = root.path().join("tao");
        let place = job.join("results_dir/train");
        std::fs::create_dir_all(&place).unwrap();
        std::fs::create_dir_all(job.join("results_dir/inputs")).unwrap();
        let line = |m: &str| format!("{{\"status\":\"RUNNING\",\"epoch\":1,\"max_epoch\":2,\"message\":\"{m}\"}}\n");
        std::fs::write(place.join("status.json"), line("nested")).unwrap();
        let squeue = "1|RUNNING|None|n1|x|1:00|0|tao-job-tao\\n";
        let jobs = vec![target("tao", Some("1"), &root_path, None)];
        let obs = parse_refresh_output(&run_with_stand_ins(&refresh_script(&jobs), squeue));
        assert!(obs.status_json["tao"].contains("nested"), "{:?}", obs.status_json);
        let sig = obs.status_sigs["tao"].clone();
        assert!(sig.ends_with(":results_dir/train"), "the signature names the place: {sig}");
        let again = vec![target("tao", Some("1"), &root_path, Some(&sig))];
        let obs2 = parse_refresh_output(&run_with_stand_ins(&refresh_script(&again), squeue));
        assert!(obs2.status_json.is_empty(), "unchanged: not read again {:?}", obs2.status_json);
        std::fs::write(place.join("status.json"), line("nested") + &line("epoch 2")).unwrap();
        let obs3 = parse_refresh_output(&run_with_stand_ins(&refresh_script(&again), squeue));
        assert!(obs3.status_json["tao"].contains("epoch 2"));
        // A status.json at the top of the results directory is the job's own: it wins.
        std::fs::write(job.join("status.json"), line("top")).unwrap();
        let obs4 = parse_refresh_output(&run_with_stand_ins(&refresh_script(&again), squeue));
        assert!(obs4.status_json["tao"].contains("top"), "{:?}", obs4.status_json);
        assert!(obs4.status_sigs["tao"].split(':').count() == 2, "{:?}", obs4.status_sigs);
    }

    /// What a job writes below its results directory is hostile input: a linked directory, a linked
    /// or FIFO status.json, names with newlines and thousands of directories are never followed,
    /// read or waited for, and the search stops after [`STATUS_SUBDIRS`] directories at each level.
    #[test]
    fn a_jobs_own_directories_cannot_lead_the_status_search_astray() {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("results");
        let elsewhere = top.path().join("elsewhere/train");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("status.json"), "{\"status\":\"SUCCESS\",\"message\":\"secret\"}\n").unwrap();
        let mk = |job: &str| {
            let d = root.join(job);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        // A linked directory, and a directory with a linked file.
        std::os::unix::fs::symlink(top.path().join("elsewhere"), mk("linkdir").join("out")).unwrap();
        std::fs::create_dir_all(mk("linkfile").join("out/train")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("status.json"), root.join("linkfile/out/train/status.json")).unwrap();
        // A FIFO where status.json would be (a reader of it would hang).
        std::fs::create_dir_all(mk("fifo").join("out/train")).unwrap();
        let fifo = root.join("fifo/out/train/status.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // A name with a newline; a linked job directory.
        std::fs::create_dir_all(mk("newline").join("out\nx/train")).unwrap();
        std::fs::write(root.join("newline/out\nx/train/status.json"), "{\"status\":\"SUCCESS\"}\n").unwrap();
        std::os::unix::fs::symlink(top.path().join("elsewhere"), root.join("linkjob")).unwrap();
        // Many directories: the file is in the last one, past the search's bound.
        let many = mk("many");
        for i in 0..(STATUS_SUBDIRS + 20) {
            std::fs::create_dir_all(many.join(format!("d{i:04}"))).unwrap();
        }
        let last = many.join(format!("d{:04}/train", STATUS_SUBDIRS + 19));
        std::fs::create_dir_all(&last).unwrap();
        std::fs::write(last.join("status.json"), "{\"status\":\"SUCCESS\"}\n").unwrap();
        let ids = ["linkdir", "linkfile", "fifo", "newline", "linkjob", "many"];
        let squeue: String = ids
            .iter()
            .enumerate()
            .map(|(i, id)| format!("{}|RUNNING|None|n1|x|1:00|0|tao-job-{id}\\n", i + 1))
            .collect();
        let jobs: Vec<RefreshTarget> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| target(id, Some(&(i + 1).to_string()), &root.display().to_string(), None))
            .collect();
        let started = std::time::Instant::now();
        let out = run_with_stand_ins(&refresh_script(&jobs), &squeue);
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        let obs = parse_refresh_output(&out);
        assert!(obs.status_json.is_empty(), "nothing read: {:?}\n{out}", obs.status_json);
        assert!(!out.contains("secret"), "{out}");
    }

    #[test]
    fn small_and_large_status_json_both_give_their_last_lines() {
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().display().to_string();
        let line =
            |i: usize| format!("{{\"status\":\"RUNNING\",\"message\":\"step {i}\",\"pad\":\"{}\"}}\n", "x".repeat(200));
        // Read by bash builtins (small), and by tail (over 1 MiB).
        for (id, lines) in [("small", 30), ("large", 6000)] {
            std::fs::create_dir_all(root.path().join(id)).unwrap();
            std::fs::write(root.path().join(id).join("status.json"), (0..lines).map(line).collect::<String>()).unwrap();
        }
        assert!(std::fs::metadata(root.path().join("large/status.json")).unwrap().len() > SMALL_STATUS_JSON);
        let jobs = vec![target("small", Some("1"), &root_path, None), target("large", Some("2"), &root_path, None)];
        let squeue = "1|RUNNING|None|n1|x|1:00|0|tao-job-small\\n2|RUNNING|None|n1|x|1:00|0|tao-job-large\\n";
        let obs = parse_refresh_output(&run_with_stand_ins(&refresh_script(&jobs), squeue));
        for (id, last) in [("small", 29), ("large", 5999)] {
            let text = &obs.status_json[id];
            assert_eq!(text.lines().count(), STATUS_TAIL_LINES as usize, "{id}");
            assert_eq!(text.lines().last().unwrap(), line(last).trim_end(), "{id}");
        }
    }

    /// `find` gave a small size, then the job made the file large (or swapped it for a large one):
    /// the reader reads at most the small limit + 1 byte by builtins, then only the file's end.
    #[test]
    fn a_status_json_grown_after_find_looked_is_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("status.json");
        let big = "x".repeat(3 << 20) + "\n{\"epoch\":1}\n";
        std::fs::write(&f, &big).unwrap();
        let input = format!("j1\t{}\t10:0\n", f.display());
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(status_reader())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.len() < 70_000, "{} bytes", text.len());
        assert!(text.trim_end().ends_with("|{\"epoch\":1}"), "{}", &text[text.len().saturating_sub(100)..]);
    }

    #[test]
    fn a_lock_file_can_only_ever_give_a_slurm_job_id() {
        let top = tempfile::tempdir().unwrap();
        let lock = |name: &str, content: Option<&str>| {
            let dir = top.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            if let Some(c) = content {
                std::fs::write(dir.join("slurm_job_id"), c).unwrap();
            }
            dir.display().to_string()
        };
        let unknown =
            |id: &str, lock: String| RefreshTarget { submit_lock: lock, ..target(id, None, "/nonexistent", None) };
        let fifo = lock("fifo", None);
        assert!(std::process::Command::new("mkfifo").arg(format!("{fifo}/slurm_job_id")).status().unwrap().success());
        let link = lock("link", None);
        std::os::unix::fs::symlink("/etc/hostname", format!("{link}/slurm_job_id")).unwrap();
        let jobs = vec![
            // A job that wrote a fake marker (and another job's status) after a real-looking id.
            unknown("a", lock("a", Some("123\n@@tao-slurm:status_json b 1:1\n|{\"status\":\"SUCCESS\"}\n"))),
            unknown("b", lock("b", Some("@@tao-slurm:rc squeue 1\n"))),
            unknown("c", lock("c", Some("12345678901234567890123456789\n"))),
            unknown("d", fifo),
            unknown("e", link),
            unknown("f", lock("f", Some("777"))),
        ];
        let stdout = run_with_stand_ins(&refresh_script(&jobs), "");
        let obs = parse_refresh_output(&stdout);
        let mut ids: Vec<(&str, &str)> = obs.lock_ids.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        ids.sort();
        assert_eq!(ids, [("a", "123"), ("f", "777")], "{stdout}");
        assert!(obs.status_json.is_empty(), "no file content posed as a section");
        assert!(obs.squeue.is_some(), "squeue's status stands");
    }

    #[test]
    fn squeue_lines_cannot_pose_as_markers() {
        // A job name that is a marker, seen by squeue as a line of its own (newline in the name).
        let jobs = vec![target("a", Some("10"), "/nonexistent", None)];
        let squeue = "10|RUNNING|None|n1|x|1:00|0|x\\n@@tao-slurm:rc squeue 1\\n@@tao-slurm:status_json a 1:1\\n";
        let obs = parse_refresh_output(&run_with_stand_ins(&refresh_script(&jobs), squeue));
        assert!(obs.squeue.is_some(), "squeue's real status is kept");
        assert!(obs.status_json.is_empty());
    }

    #[test]
    fn decisions() {
        let jobs = vec![job("a", "10"), job("b", "11"), job("c", "12"), job("d", "13"), job("e", "14"), job("f", "15")];
        let obs = Observations {
            squeue: Some(parse_squeue("10|PENDING|Resources|||4:00:00|0|x\n")),
            sacct: Some(parse_sacct(
                "11|FAILED|3:0|0:0|node1|a|b|\n12|CANCELLED by 0|0:15|0:0|node1|a|b|\n14|FAILED|0:0|0:0|node1|a|b|allocation\n15|FAILED|0:0|0:0|node1|a|b|tao-job-f\n",
            )),
            ..Observations::default()
        };
        let d = decide(&jobs, &obs, now_secs());
        let get = |id: &str| d.iter().find(|x| x.job_id == id).map(|x| x.update.clone());
        assert_eq!(get("a").unwrap().status, PlatformStatus::Pending);
        assert!(get("a").unwrap().message.contains("Resources"));
        assert_eq!(get("b").unwrap().status, PlatformStatus::Error);
        assert_eq!(get("b").unwrap().exit_code, Some(3));
        assert_eq!(get("c").unwrap().status, PlatformStatus::Canceled);
        assert!(get("d").is_none(), "a job neither command knows gets no verdict yet");
        assert!(get("e").is_none(), "a half-written sacct record (JobName allocation) is not a verdict");
        assert!(get("f").is_none(), "FAILED with exit code 0:0 is not settled yet");
        let later = now_secs() + LOST_JOB_GRACE_SECS + 1;
        // Accounting not known to be caught up (no sdiag answer): no verdict, however late.
        assert!(decide(&jobs, &obs, later).iter().all(|x| x.job_id != "d"));
        let obs = Observations { dbd_queue: Some(0), ..obs };
        // The first read that misses it only marks it.
        assert!(decide(&jobs, &obs, later).iter().all(|x| x.job_id != "d"), "one empty read is no verdict");
        assert_eq!(unseen_changes(&jobs[3..4], &obs, later), [("d".to_string(), Some(later))]);
        let mut jobs = jobs;
        jobs[3].unseen_since = Some(later);
        assert!(decide(&jobs, &obs, later + 10).iter().all(|x| x.job_id != "d"), "too soon after the first miss");
        let d = decide(&jobs, &obs, later + LOST_CONFIRM_SECS);
        let lost = d.iter().find(|x| x.job_id == "d").unwrap();
        assert_eq!(lost.update.status, PlatformStatus::Error);
        assert!(lost.update.message.contains("lost by the scheduler"), "{}", lost.update.message);
        // Accounting behind (records queued for slurmdbd): no verdict, and no new mark.
        let behind = Observations { dbd_queue: Some(3), ..obs.clone() };
        assert!(decide(&jobs, &behind, later + LOST_CONFIRM_SECS).iter().all(|x| x.job_id != "d"));
        // Measured from the attempt's own submission: a retry submitted just now is not lost.
        jobs[3].submitted_at = Some(later);
        assert!(decide(&jobs, &obs, later + LOST_CONFIRM_SECS).iter().all(|x| x.job_id != "d"));
        // Found again: the mark is cleared.
        let found = Observations { squeue: Some(parse_squeue("13|RUNNING|None|n1|x|1:00|0|tao-job-d\n")), ..obs };
        assert_eq!(unseen_changes(&jobs[3..4], &found, later), [("d".to_string(), None)]);
    }

    #[test]
    fn unknown_submissions_are_found_by_name_or_by_their_lock() {
        let mut unknown = job("u", "0");
        unknown.slurm_job_id = None;
        let name = unknown.layout.job_name.clone();
        let obs = Observations {
            squeue: Some(parse_squeue(&format!("30|RUNNING|None|node1|x|4:00:00|0|{name}\n"))),
            sacct_by_name: Some(vec![]),
            ..Observations::default()
        };
        let d = decide(std::slice::from_ref(&unknown), &obs, now_secs());
        assert_eq!(d[0].adopt.as_deref(), Some("30"));
        assert_eq!(d[0].update.status, PlatformStatus::Running);
        let nothing = Observations { squeue: Some(vec![]), sacct_by_name: Some(vec![]), ..Observations::default() };
        assert!(
            decide(std::slice::from_ref(&unknown), &nothing, now_secs() + 3600).is_empty(),
            "not found: no verdict"
        );
        let locked = Observations {
            squeue: Some(vec![]),
            sacct: Some(parse_sacct("31|COMPLETED|0:0|0:0|node1|a|b|\n")),
            lock_ids: [("u".to_string(), "31".to_string())].into(),
            ..Observations::default()
        };
        let d = decide(std::slice::from_ref(&unknown), &locked, now_secs());
        assert_eq!(d[0].adopt.as_deref(), Some("31"));
        assert_eq!(d[0].update.status, PlatformStatus::Complete);
    }

    #[test]
    fn an_unchanged_status_json_still_decides_by_its_last_line() {
        // The file was not read again (same signature): the last line read before stands in for it.
        let mut done = job("a", "10");
        done.progress = Some(r#"{"status":"FAILURE","message":"bad data"}"#.into());
        let mut queued = job("b", "11");
        queued.progress = done.progress.clone();
        let obs = Observations {
            squeue: Some(parse_squeue(
                "10|COMPLETED|None|n1|x|1:00|0|tao-job-a\n11|PENDING|None||x|1:00|0|tao-job-b\n",
            )),
            ..Observations::default()
        };
        let d = decide(&[done, queued], &obs, now_secs());
        assert_eq!(d[0].update.status, PlatformStatus::Error);
        assert!(d[0].update.message.contains("bad data"), "{}", d[0].update.message);
        assert!(
            !d[1].update.message.contains("last progress"),
            "a pending job shows no old progress: {}",
            d[1].update.message
        );
    }

    #[test]
    fn failed_squeue_changes_nothing() {
        let jobs = vec![job("a", "10")];
        let obs = parse_refresh_output(
            "@@tao-slurm:squeue\nslurm_load_jobs error: Socket timed out\n@@tao-slurm:rc squeue 1\n",
        );
        assert!(obs.squeue.is_none());
        assert!(decide(&jobs, &obs, now_secs()).is_empty());
    }

    /// A sweep variant's first attempt is one task of its array: it is seen, adopted and decided by its
    /// task id `<array>_<index>`, never by a sibling's.
    #[test]
    fn array_tasks_are_found_by_their_own_task_id() {
        let mut variant = job("v2", "unused");
        variant.slurm_job_id = None;
        variant.sweep_id = Some("s".into());
        variant.sweep_index = Some(2);
        variant.attempt_name = "tao-sweep-s".into();
        let squeue = "77_1|RUNNING|None|n1|x|1:00|0|tao-sweep-s\n77_2|PENDING|Priority||x|1:00|0|tao-sweep-s\n77_10|RUNNING|None|n2|x|1:00|0|tao-sweep-s\n";
        let obs =
            Observations { squeue: Some(parse_squeue(squeue)), sacct_by_name: Some(vec![]), ..Observations::default() };
        let d = decide(std::slice::from_ref(&variant), &obs, now_secs());
        assert_eq!(d[0].adopt.as_deref(), Some("77_2"), "{d:?}");
        assert_eq!(d[0].update.status, PlatformStatus::Pending);
        // Recorded: decided from its own line only.
        let mut recorded = variant.clone();
        recorded.slurm_job_id = Some("77_10".into());
        let d = decide(std::slice::from_ref(&recorded), &obs, now_secs());
        assert_eq!((d[0].adopt.clone(), d[0].update.status), (None, PlatformStatus::Running));
        assert_eq!(d[0].update.node_list.as_deref(), Some("n2"));
        // The lock holds the array's id: the refresh reads it as this task's id.
        let mut target = target("v2", None, "/nonexistent", None);
        target.array_index = Some(2);
        let script = refresh_script(&[target]);
        assert!(script.contains("printf '|%s_2\\n'"), "{script}");
        let obs = parse_refresh_output("@@tao-slurm:lock_id v2\n|77_2\n@@tao-slurm:lock_id v3\n|77_2;rm\n");
        assert_eq!(obs.lock_ids.get("v2").map(String::as_str), Some("77_2"));
        assert!(!obs.lock_ids.contains_key("v3"), "only digits and one underscore are ids");
        // A retried variant is an ordinary job again (its own name and id).
        let mut retried = variant;
        retried.attempt = 2;
        assert_eq!(retried.array_index(), None);
    }

    #[test]
    fn the_pending_reason_is_a_field_of_its_own() {
        let jobs = vec![job("a", "10"), job("b", "11"), job("c", "12")];
        let squeue =
            "10|PENDING|Resources|||4:00:00|0|tao-job-a\n11|PENDING|None|||4:00:00|0|tao-job-b\n12|RUNNING|None|n1|x|1:00|0|tao-job-c\n";
        let obs = Observations { squeue: Some(parse_squeue(squeue)), ..Observations::default() };
        let d = decide(&jobs, &obs, now_secs());
        let reason = |id: &str| d.iter().find(|x| x.job_id == id).and_then(|x| x.update.pending_reason.clone());
        assert_eq!(reason("a").as_deref(), Some("Resources"));
        assert_eq!((reason("b"), reason("c")), (None, None), "no reason, or not pending");
        let a = d.iter().find(|x| x.job_id == "a").unwrap();
        let mut seen = job("a", "10");
        seen.status = a.update.status;
        seen.message = a.update.message.clone();
        seen.slurm_state = a.update.slurm_state.clone();
        assert!(!changes_nothing(&seen, &a.update), "a reason not stored yet is a change");
        let mut stored = seen;
        stored.pending_reason = Some("Resources".into());
        assert!(changes_nothing(&stored, &a.update));
    }

    /// A job of the recorded fixtures, as tao-slurm would track it.
    fn fixture_job(id: &str, slurm: &str, name: &str) -> JobSummary {
        JobSummary { attempt_name: name.into(), ..job(id, slurm) }
    }

    /// The headline of issue 27: a job that exits 3 reports exit code 3 on both versions, whether the
    /// refresh saw it in squeue (22.05 prints a wait status, 768; 24.11 prints `3:0`) or only in sacct.
    #[test]
    fn exit_code_3_on_both_versions_from_squeue_or_from_sacct() {
        let recorded = [
            (
                "22.05",
                include_str!("../../tests/fixtures/slurm-22.05/squeue.txt"),
                include_str!("../../tests/fixtures/slurm-22.05/sacct.txt"),
                include_str!("../../tests/fixtures/slurm-22.05/submit.txt"),
            ),
            (
                "24.11",
                include_str!("../../tests/fixtures/slurm-24.11/squeue.txt"),
                include_str!("../../tests/fixtures/slurm-24.11/sacct.txt"),
                include_str!("../../tests/fixtures/slurm-24.11/submit.txt"),
            ),
        ];
        for (version, squeue, sacct, submit) in recorded {
            let id = submit.lines().find_map(|l| l.strip_prefix("exit3 ")).unwrap();
            let j = fixture_job("x", id, "tao-fixture-exit3");
            let seen_by = [
                ("squeue", Observations { squeue: Some(parse_squeue(squeue)), ..Observations::default() }),
                (
                    "sacct",
                    Observations { squeue: Some(vec![]), sacct: Some(parse_sacct(sacct)), ..Observations::default() },
                ),
            ];
            for (source, obs) in seen_by {
                let d = decide(std::slice::from_ref(&j), &obs, now_secs());
                assert_eq!(d.len(), 1, "{version} {source}");
                let u = &d[0].update;
                assert_eq!((u.status, u.exit_code), (PlatformStatus::Error, Some(3)), "{version} {source}: {u:?}");
                assert!(u.message.contains("exit code 3"), "{version} {source}: {}", u.message);
                assert!(unread(std::slice::from_ref(&j), &obs).is_empty());
            }
        }
    }

    /// A finished job squeue still lists but whose exit status it printed in a form not understood:
    /// the refresh asked sacct too, and sacct's exit code is kept.
    #[test]
    fn a_finished_job_still_in_squeue_keeps_saccts_exit_code() {
        let j = job("a", "40");
        let obs = Observations {
            squeue: Some(parse_squeue("40|FAILED|NonZeroExitCode|n1|x|1:00|exit three|tao-job-a\n")),
            sacct: Some(parse_sacct("40|FAILED|3:0|0:0|n1|a|b|tao-job-a\n")),
            ..Observations::default()
        };
        let d = decide(std::slice::from_ref(&j), &obs, now_secs());
        assert_eq!((d[0].update.status, d[0].update.exit_code), (PlatformStatus::Error, Some(3)), "{d:?}");
        // The script asks sacct for the finished ids squeue still lists (and never for running ones).
        let jobs = vec![target("a", Some("40"), "/nonexistent", None), target("b", Some("41"), "/nonexistent", None)];
        let squeue = "40|FAILED|NonZeroExitCode|n1|x|1:00|3:0|tao-job-a\\n41|RUNNING|None|n1|x|1:00|0:0|tao-job-b\\n";
        let stdout = run_with_stand_ins(&refresh_script(&jobs), squeue);
        assert!(stdout.contains("|ARGS -X -P -n -S now-30days -j 40 "), "{stdout}");
    }

    /// Issue 27: an unknown state and an extra sacct field give no verdict, and say what was not
    /// understood.
    #[test]
    fn an_unknown_state_or_an_extra_sacct_field_is_no_verdict_and_is_named() {
        let jobs = vec![job("a", "50"), job("b", "51"), job("c", "52")];
        let obs = Observations {
            squeue: Some(parse_squeue("50|FANCY_NEW_STATE|None|n1|x|1:00|0:0|tao-job-a\n")),
            sacct: Some(parse_sacct(
                "51|FAILED|3:0|0:0|n1|a|b|tao-job-b|extra\n52|COMPLETED_WITH_FLAIR|0:0|0:0|n1|a|b|tao-job-c\n",
            )),
            dbd_queue: Some(0),
            ..Observations::default()
        };
        let late = now_secs() + LOST_JOB_GRACE_SECS + LOST_CONFIRM_SECS + 1;
        assert_eq!(decide(&jobs, &obs, late), [], "no verdict from output not understood");
        assert_eq!(unseen_changes(&jobs, &obs, late), [], "a line not understood still shows the job exists");
        let said = unread(&jobs, &obs);
        let what = |id: &str| said.iter().find(|u| u.job_id == id).map(|u| (u.source, u.what.clone())).unwrap();
        let (source, a) = what("a");
        assert_eq!(source, "squeue");
        assert!(a.contains("unknown Slurm state \"FANCY_NEW_STATE\""), "{a}");
        let (source, b) = what("b");
        assert_eq!(source, "sacct");
        assert!(b.contains("9 fields where 8 were asked for") && b.contains("|extra"), "{b}");
        assert!(b.contains("JobID,State,ExitCode"), "names the fields asked for: {b}");
        assert!(what("c").1.contains("COMPLETED_WITH_FLAIR"));
    }

    /// sdiag's accounting backlog, read from both versions' recorded output by the refresh script.
    #[test]
    fn sdiag_of_both_versions_gives_the_dbd_queue() {
        let jobs = vec![target("a", Some("11"), "/nonexistent", None)];
        for sdiag in [crate::slurm::recorded::SDIAG_22_05, crate::slurm::recorded::SDIAG_24_11] {
            let obs = parse_refresh_output(&run_with_sdiag(&refresh_script(&jobs), "", sdiag));
            assert_eq!(obs.dbd_queue, Some(0), "{sdiag}");
        }
        let behind = crate::slurm::recorded::SDIAG_24_11.replace("DBD Agent queue size: 0", "DBD Agent queue size: 17");
        let obs = parse_refresh_output(&run_with_sdiag(&refresh_script(&jobs), "", &behind));
        assert_eq!(obs.dbd_queue, Some(17));
    }

    #[test]
    fn a_running_job_that_resumes_has_its_newest_checkpoint_and_starts_read_and_no_other_job() {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("results/r1");
        std::fs::create_dir_all(results.join("train")).unwrap();
        std::fs::create_dir_all(results.join(".tao-slurm")).unwrap();
        for (name, age) in [("train/epoch-1.pth", 60), ("train/epoch-2.pth", 30)] {
            std::fs::write(results.join(name), b"x").unwrap();
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options().write(true).open(results.join(name)).unwrap().set_modified(when).unwrap();
        }
        let e1 = results.join("train/epoch-1.pth").display().to_string();
        std::fs::write(
            results.join(".tao-slurm/attempts"),
            format!("100 41 0 - -\n200 41 1 timeout {e1}\ngarbage line\n300 41 2 preempted {e1}\n"),
        )
        .unwrap();
        let mut running = job("r1", "41");
        running.status = PlatformStatus::Running;
        running.checkpoint_patterns = crate::checkpoint::default_patterns();
        running.layout.results_root = dir.path().join("results").display().to_string();
        let mut pending = running.clone();
        pending.status = PlatformStatus::Pending;
        let plain = JobSummary { checkpoint_patterns: Vec::new(), ..running.clone() };
        assert!(RefreshTarget::of(&running).look.is_some());
        assert!(RefreshTarget::of(&pending).look.is_none() && RefreshTarget::of(&plain).look.is_none());
        let script = refresh_script(&[RefreshTarget::of(&running)]);
        let obs = parse_refresh_output(&run_with_stand_ins(&script, ""));
        assert_eq!(obs.checkpoints.get("r1"), Some(&results.join("train/epoch-2.pth").display().to_string()));
        let starts: Vec<(u32, Option<&str>, Option<&str>)> = obs.starts["r1"]
            .iter()
            .map(|s| (s.restart, s.cause.map(|c| c.as_str()), s.checkpoint.as_deref()))
            .collect();
        assert_eq!(
            starts,
            vec![(0, None, None), (1, Some("timeout"), Some(e1.as_str())), (2, Some("preempted"), Some(e1.as_str()))]
        );
        // Nothing is looked for when no job asks: the script is as before.
        assert!(!refresh_script(&[RefreshTarget::of(&plain)]).contains("TAO_SLURM_LOOKS"));
        assert_eq!(super::template::unfilled(&script), Vec::<String>::new(), "{script}");
    }

    #[test]
    fn only_the_current_slurm_jobs_restarts_not_yet_recorded_are_new() {
        use crate::attempts::Cause::*;
        let start = |id: &str, restart: u32| Start {
            at: 0,
            slurm_job_id: id.into(),
            restart,
            cause: (restart > 0).then_some(Timeout),
            checkpoint: None,
        };
        let attempt = |number: u32, id: &str, restart: Option<u32>| crate::model::AttemptRecord {
            number,
            slurm_job_name: "n".into(),
            slurm_job_id: Some(id.into()),
            login_host: None,
            state: None,
            exit_code: None,
            node_list: None,
            failure_class: None,
            evidence: vec![],
            excluded_nodes: String::new(),
            cause: None,
            resumed_from: None,
            slurm_restart: restart,
            recorded_at: 0,
            submitted_at: None,
            ended_at: None,
        };
        let job = job("j", "41");
        let starts = [start("40", 0), start("40", 1), start("41", 0), start("41", 1), start("41", 1), start("41", 2)];
        let restarts = |attempts: &[crate::model::AttemptRecord]| -> Vec<u32> {
            new_restarts(&job, attempts, &starts).iter().map(|s| s.restart).collect()
        };
        // (attempts recorded, restarts still new)
        let cases: Vec<(Vec<crate::model::AttemptRecord>, Vec<u32>)> = vec![
            (vec![attempt(1, "40", None), attempt(2, "41", None)], vec![1, 2]),
            (vec![attempt(1, "41", None), attempt(2, "41", Some(1))], vec![2]),
            (vec![attempt(1, "41", None), attempt(2, "41", Some(1)), attempt(3, "41", Some(2))], vec![]),
        ];
        for (attempts, want) in cases {
            assert_eq!(restarts(&attempts), want, "{attempts:?}");
        }
        let mut unsubmitted = job.clone();
        unsubmitted.slurm_job_id = None;
        assert!(new_restarts(&unsubmitted, &[], &starts).is_empty());
    }
}
