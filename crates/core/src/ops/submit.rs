//! Submission of one attempt: its ticket (the attempt's unique Slurm job name, by which it is found
//! again) and the one remote script that stages the job's files and submits it at most once. Pure.

use crate::config::Settings;
use crate::exit_codes::{
    CANNOT_CREATE_DIRS, CANNOT_STAGE, CANNOT_WRITE_SECRETS, NO_LOG_DIR, RELEASE_FAILED, SBATCH_REFUSED,
    SECRETS_FILE_MISSING, SUBMISSION_IN_FLIGHT, UNTRUSTED_STORAGE,
};
use crate::layout::Layout;
use crate::model::JobRecord;
use crate::plan::Plan;
use crate::protocol::SECTION;
use crate::script::shell::quote;
use crate::script::StagedFile;
use crate::spec::SecretValues;

/// What one submission is for: the attempt's token (its Slurm job name) and the nodes to avoid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTicket {
    pub number: u32,
    pub slurm_job_name: String,
    pub exclude: String,
    /// `--dependency=` of the attempt (a job that runs after others: see [`crate::ops::depend`]).
    pub dependency: Option<String>,
    /// Leave the attempt held after submission (released by tao-slurm when its dependencies are met).
    pub hold: bool,
    /// Whether a run that finds another run of this attempt in flight waits for its Slurm job id
    /// ([`AWAIT_OTHER_RUN_SECS`]) to answer with it: a job's first submission, whose caller waits for
    /// that answer. A resumed or retried one does not (the monitor that runs it moves on).
    pub await_other_run: bool,
}

impl AttemptTicket {
    pub fn first(plan: &Plan) -> AttemptTicket {
        AttemptTicket {
            number: 1,
            slurm_job_name: plan.layout.job_name.clone(),
            exclude: String::new(),
            dependency: None,
            hold: false,
            await_other_run: true,
        }
    }
}

/// The Slurm job name of attempt `number` (the first keeps the contract's `tao-job-<id>`).
pub fn attempt_name(plan: &Plan, number: u32) -> String {
    if number <= 1 {
        plan.layout.job_name.clone()
    } else {
        format!("{}.a{number}", plan.layout.job_name)
    }
}

/// The files a plan stages, with the user and login hosts the settings name in the metadata file
/// (the batch script last). Offline: `render` shows them without a cluster.
pub fn staged_files_for(settings: &Settings, plan: &Plan, spec_json: &serde_json::Value) -> Vec<StagedFile> {
    let hosts: Vec<String> = settings.login_hosts.iter().map(|h| h.label()).collect();
    crate::script::staged_files(plan, spec_json, settings.slurm_user.as_deref().unwrap_or(""), &hosts)
}

/// The staged files of a recorded job, regenerated from its stored spec and plan (they are the same
/// every time), for its retries and resumed submissions.
pub fn staged_files_of(settings: &Settings, job: &JobRecord) -> Vec<StagedFile> {
    let spec_json: serde_json::Value = serde_json::from_str(&job.spec_json).unwrap_or(serde_json::Value::Null);
    staged_files_for(settings, &job.plan, &spec_json)
}

/// A submission lock older than this, with no Slurm job behind it, was left by a submitter that died
/// before sbatch; it may be taken over.
pub const STALE_SUBMIT_LOCK_SECS: u64 = 120;

/// How long a job's first submission that finds another run of it in flight (a replica's monitor
/// resumed it while it waited in its queue) waits for that run's Slurm job id, to adopt it rather
/// than answer that the submission failed. Its round trip's deadline is well above it.
pub const AWAIT_OTHER_RUN_SECS: u64 = 30;

/// The remote script that stages `files` and submits one attempt of the plan's batch script. Pure.
///
/// It can be run any number of times for the same attempt, from any process and host: a lock
/// directory per attempt token on shared storage admits one sbatch ever; a later run finds the job
/// (by the id the first run wrote, or by name in squeue/sacct) and adopts it instead.
///
/// Secret values travel only here, on ssh's standard input, and land in one file of mode 600 in a
/// fresh directory of mode 700 that the batch script reads (retries need it) and tao-slurm deletes
/// once the job is terminal. They are never in argv (printf is a builtin), the batch script, the
/// staged JSON or a log. A submission without the values (a retry, or a resumed submission) checks
/// that the file is there and refuses to submit an attempt that would run without it.
pub fn submit_script(plan: &Plan, files: &[StagedFile], secrets: &SecretValues, ticket: &AttemptTicket) -> String {
    submit_script_with_hook(plan, files, secrets, ticket, "")
}

/// [`submit_script`] with `before_sbatch` (script text) run once the attempt's lock is held, just
/// before anything is written or submitted: the fault-injection tests' pause point.
pub fn submit_script_with_hook(
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: &AttemptTicket,
    before_sbatch: &str,
) -> String {
    let mut s = storage_script(&plan.layout, job_dirs(plan, files, secrets));
    s.push_str(&attempt_script(plan, files, secrets, ticket, before_sbatch, false));
    s
}

/// The directories a submission of the plan writes into (the staged files' own, its results, the
/// secrets directory when it writes the secrets file), before the layout's.
pub(crate) fn job_dirs(plan: &Plan, files: &[StagedFile], secrets: &SecretValues) -> Vec<String> {
    let mut dirs: Vec<String> =
        files.iter().filter_map(|f| f.path.rsplit_once('/').map(|(d, _)| d.to_string())).collect();
    dirs.push(plan.layout.results_dir());
    if writes_secrets(plan, secrets) {
        dirs.push(format!("{}/secrets", plan.layout.base_dir));
    }
    dirs
}

fn writes_secrets(plan: &Plan, secrets: &SecretValues) -> bool {
    !plan.secret_names.is_empty() && !secrets.0.is_empty()
}

/// What one attempt's submission does once the storage is checked and its directories made: the
/// lock's variables, lock-or-adopt, `before_sbatch`, the secrets file (or the check that it is
/// there), the staged files, then sbatch and what follows it. Its own `exit` ends it. With
/// `deferred`, the attempt's log directory and release are left to the end of its batch (see
/// `ops::submit_batch`), which makes them for all its members at once.
pub(crate) fn attempt_script(
    plan: &Plan,
    files: &[StagedFile],
    secrets: &SecretValues,
    ticket: &AttemptTicket,
    before_sbatch: &str,
    deferred: bool,
) -> String {
    let layout = &plan.layout;
    let name = &ticket.slurm_job_name;
    let mut s = lock_vars(layout, name);
    let await_secs = if ticket.await_other_run { AWAIT_OTHER_RUN_SECS } else { 0 };
    s.push_str(&adopt_script(release_adopted_step(ticket.hold), name, await_secs));
    s.push_str(before_sbatch);
    if writes_secrets(plan, secrets) {
        s.push_str(&secrets_file_script(plan, secrets));
    } else if !plan.secret_names.is_empty() {
        let secrets_file = quote(&layout.secrets_file());
        s.push_str(&format!(
            "if [ ! -f {secrets_file} ] || [ -L {secrets_file} ] || [ ! -O {secrets_file} ]; then rm -rf \"$lock\"; echo \"tao-slurm: the secrets file {} is missing (or is not a regular file of yours), so this attempt would run without {}; tao-slurm keeps secret values only on the cluster: submit the job again with them\" >&2; exit {SECRETS_FILE_MISSING}; fi\n",
            layout.secrets_file().replace(['"', '$', '`', '\\'], ""),
            plan.secret_names.join(", ")
        ));
    }
    // A first attempt's files are at paths named by the job's fresh id, which nobody could know
    // before: written in place (no process); a later attempt's by rename (a job knows its own paths).
    let put = if ticket.number <= 1 { "tao_new" } else { "tao_put" };
    for f in files {
        s.push_str(&format!(
            "{put} {} {} || {{ rm -rf \"$lock\"; echo 'tao-slurm: cannot write {}' >&2; exit {CANNOT_STAGE}; }}\n",
            quote(&f.path),
            quote(&f.contents),
            f.path.replace(['\'', '\\'], "")
        ));
    }
    let mut options =
        if ticket.exclude.is_empty() { String::new() } else { format!(" --exclude={}", quote(&ticket.exclude)) };
    if let Some(d) = &ticket.dependency {
        options.push_str(&format!(" --dependency={}", quote(d)));
    }
    let steps = SbatchSteps {
        what: "job",
        name,
        options: &options,
        script: &layout.script_file(),
        log_dirs: if deferred { "" } else { "mkdir -p \"$logdir_prefix-$id\"" },
        log_dirs_failed: "cannot create the log directory; job cancelled",
        // A job needs no hold for its logs (see `Layout::slurm_output`): held only for its
        // dependencies, and released by tao-slurm when they are met.
        hold: ticket.hold,
        release: false,
    };
    s.push_str(&sbatch_script(&steps));
    s
}

/// The step that finishes an adopted attempt (`$1`, its Slurm job id): its log directory, and its
/// release when an earlier version may have submitted it held, then stopped before releasing: its
/// lock lacks the mark ([`NOT_HELD_MARK`]) this version leaves before an sbatch without `--hold`
/// (a release is an RPC: under a Slurm rate limit, the monitor resumes in-flight submissions by the
/// hundred). An attempt held for its dependencies stays held. Both harmless when already done. The
/// refresh finishes attempts it adopts the same way ([`release_adopted_script`]).
fn release_adopted_step(hold: bool) -> String {
    let release = if hold {
        String::new()
    } else {
        format!("[ -e \"$lock/{NOT_HELD_MARK}\" ] || scontrol release \"$1\" >/dev/null 2>&1; ")
    };
    format!("mkdir -p \"$logdir_prefix-$1\"; {release}")
}

/// The file in an attempt's lock that says its sbatch was not asked to hold the job.
const NOT_HELD_MARK: &str = "not_held";

/// One round trip that finishes attempts the refresh adopted (found by name after their submitter
/// stopped after sbatch): each one's log directory made, and its hold released when Slurm says it is
/// held by its user (an attempt an earlier version submitted held, then stopped before releasing;
/// one `scontrol release` is an RPC, so a job that is not held is not asked). Both harmless when
/// already done. `adopted`: (log directory, Slurm job id, held).
pub fn release_adopted_script(adopted: &[(String, String, bool)]) -> String {
    let mut s = String::from("# the attempts adopted\n");
    s += &adopted
        .iter()
        .map(|(log_dir, id, held)| {
            let release =
                if *held { format!(" && scontrol release {} >/dev/null 2>&1", quote(id)) } else { String::new() };
            format!("mkdir -p {}{release}\n", quote(log_dir))
        })
        .collect::<String>();
    s.push_str("exit 0\n");
    s
}

/// The lock-or-adopt step of an attempt: an earlier run's job is found by the lock's id, else by
/// name in squeue, else in sacct; one in flight is awaited `await_secs`.
fn adopt_script(on_adopt: String, name: &str, await_secs: u64) -> String {
    let n = quote(name);
    let lookup = format!(
        "  existing=\"$(squeue --me -h --name={n} -o %i 2>/dev/null | head -n 1)\"\n  \
         [ -n \"$existing\" ] || existing=\"$(sacct -X -P -n -S now-30days -E now -s {states} --name={n} -o JobIDRaw 2>/dev/null | head -n 1)\"",
        states = crate::ops::refresh::SACCT_ALL_STATES,
    );
    lock_script(&on_adopt, &lookup, "attempt", await_secs)
}

/// The start every submission script (a job's, a sweep's) shares: [`storage_script`] and the lock's
/// variables for the Slurm job name `name`.
pub(crate) fn preamble(layout: &Layout, mut dirs: Vec<String>, writes_secrets: bool, name: &str) -> String {
    if writes_secrets {
        dirs.push(format!("{}/secrets", layout.base_dir));
    }
    let mut s = storage_script(layout, dirs);
    s.push_str(&lock_vars(layout, name));
    s
}

/// Strict mode and private files, the trust functions, and [`storage_steps`].
pub(crate) fn storage_script(layout: &Layout, dirs: Vec<String>) -> String {
    let mut s = String::from("set -u\numask 077\n");
    s.push_str(&crate::script::trust::trust_functions());
    s.push_str(&storage_steps(layout, dirs));
    s
}

/// The shared storage checked (the base's ancestors and the directories that exist, one `stat`) and
/// the directories made: the layout's own and `dirs`. Needs the trust functions; exits on refusal.
pub(crate) fn storage_steps(layout: &Layout, mut dirs: Vec<String>) -> String {
    dirs.extend(layout_dirs(layout));
    dirs.sort();
    dirs.dedup();
    let dir_list = dirs.iter().map(|d| quote(d)).collect::<Vec<_>>().join(" ");
    format!(
        "tao_trust_dirs {} {dir_list}\nmkdir -p -- {dir_list} || {{ echo 'tao-slurm: cannot create the job directories' >&2; exit {CANNOT_CREATE_DIRS}; }}\n",
        quote(&layout.base_dir)
    )
}

/// The directories every job of a base needs.
fn layout_dirs(layout: &Layout) -> [String; 4] {
    [layout.base_dir.clone(), format!("{}/sbatch", layout.base_dir), layout.logs_root(), layout.results_root.clone()]
}

/// The variables the lock step and the log directories use, for the Slurm job name `name`.
pub(crate) fn lock_vars(layout: &Layout, name: &str) -> String {
    format!(
        "lock={}\nlogdir_prefix={}\n",
        quote(&format!("{}/sbatch/.submit-{name}", layout.base_dir)),
        quote(&format!("{}/{name}", layout.logs_root()))
    )
}

/// The plan's secrets file, written afresh in a new directory of mode 700 (the values travel only on
/// the script's standard input: printf is a builtin).
pub(crate) fn secrets_file_script(plan: &Plan, secrets: &SecretValues) -> String {
    let dir = quote(&plan.layout.secrets_dir());
    let mut s = format!(
        "rm -rf -- {dir} && mkdir -m 700 -- {dir} || {{ rm -rf \"$lock\"; exit {CANNOT_WRITE_SECRETS}; }}\n{{\n"
    );
    // A debug log of this script shows `***` for the values (see `crate::redact`).
    for name in &plan.secret_names {
        if let Some(value) = secrets.0.get(name) {
            s.push_str(&format!("printf 'export %s=%s\\n' {name} {}\n", quote(&quote(value.expose()))));
        }
    }
    s.push_str(&format!(
        "}} > {} || {{ rm -rf \"$lock\"; exit {CANNOT_WRITE_SECRETS}; }}\n",
        quote(&plan.layout.secrets_file())
    ));
    s
}

/// What the end of a submission script does, for a job or a sweep's array.
pub(crate) struct SbatchSteps<'a> {
    /// `job` or `sweep`, in messages.
    pub what: &'a str,
    pub name: &'a str,
    /// More sbatch options, quoted (`--exclude`, `--dependency`).
    pub options: &'a str,
    pub script: &'a str,
    /// Makes the log directories of Slurm job `$id` (empty: left to the caller), and what its
    /// failure says.
    pub log_dirs: &'a str,
    pub log_dirs_failed: &'a str,
    /// Submitted held (`--hold`).
    pub hold: bool,
    /// Released once its log directories are made (a sweep's array).
    pub release: bool,
}

/// The end every submission script shares: `sbatch` (`--hold` when asked), its id recorded in the
/// lock and printed, the log directories made (the job is cancelled if they cannot be), and the hold
/// released when asked. No process but sbatch's, mkdir's and scontrol's, and no fork: the id is read
/// out of sbatch's answer by the shell.
pub(crate) fn sbatch_script(steps: &SbatchSteps) -> String {
    let SbatchSteps { what, name, options, script, log_dirs, log_dirs_failed, hold, release } = steps;
    let mut s = String::new();
    if !*hold {
        // Left before sbatch, so that a run adopting this job (by the lock's id or by its name)
        // knows it was never held (see `release_adopted_step`).
        s.push_str(&format!("[ -e \"$lock/{NOT_HELD_MARK}\" ] || tao_new \"$lock/{NOT_HELD_MARK}\" ''\n"));
    }
    let hold = if *hold { " --hold" } else { "" };
    // sbatch's answer goes to a file of the lock's, named afresh and made exclusively (nothing there
    // is followed), and is read back by the shell: no command substitution, so no fork.
    s.push_str(&format!(
        "tao_sb=\"$lock/sbatch.$$.$RANDOM\"; set -C; sbatch --parsable{hold} --job-name={}{options} {} > \"$tao_sb\" || {{ rm -rf \"$lock\"; echo 'tao-slurm: sbatch refused the {what}' >&2; exit {SBATCH_REFUSED}; }}\nset +C\n",
        quote(name),
        quote(script)
    ));
    s.push_str(
        "id=; while IFS= read -r tao_l || [ -n \"$tao_l\" ]; do id=\"$tao_l\"; done < \"$tao_sb\"; id=\"${id%%;*}\"\n",
    );
    // The lock was made by this run (or taken over with no id in it): a new file, in place.
    s.push_str("tao_new \"$lock/slurm_job_id\" \"$id\"\n");
    s.push_str(&format!("echo \"{SECTION}slurm_job_id $id\"\n"));
    if !log_dirs.is_empty() {
        s.push_str(&format!(
            "{log_dirs} || {{ scancel \"$id\"; echo 'tao-slurm: {log_dirs_failed}' >&2; exit {NO_LOG_DIR}; }}\n"
        ));
    }
    if *release {
        s.push_str(&format!(
            "scontrol release \"$id\" || {{ echo \"tao-slurm: {what} $id is held: scontrol release failed\" >&2; exit {RELEASE_FAILED}; }}\n"
        ));
    }
    s
}

/// How a run of a submission script ended, read from its output and exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// sbatch took it (or an earlier run's job was adopted) and every later step ran.
    Submitted(String),
    /// sbatch took it, but a later step failed (log directory, release): it is Slurm's, not started.
    NotStarted(String),
    /// Another run of the same submission holds its lock and has not submitted yet: nothing was done.
    InFlight,
    /// Nothing reached Slurm: staging failed, the storage was refused, or sbatch refused it.
    Refused,
    /// The script ended well but printed no Slurm job id.
    NoJobId,
}

impl Outcome {
    /// The Slurm job id sbatch gave, when it got that far.
    pub fn slurm_job_id(&self) -> Option<&str> {
        match self {
            Outcome::Submitted(id) | Outcome::NotStarted(id) => Some(id),
            _ => None,
        }
    }
}

/// Read a submission script's run (a job's or a sweep's): the `slurm_job_id` section it printed (or
/// the adopted job's) and its exit status.
pub fn parse_outcome(stdout: &str, exit_code: i32) -> Outcome {
    let id = crate::protocol::sections(stdout)
        .into_iter()
        .find(|(name, _, _)| name == "slurm_job_id")
        .and_then(|(_, arg, _)| crate::slurm::parse_sbatch_parsable(&arg));
    match (id, exit_code) {
        (Some(id), 0) => Outcome::Submitted(id),
        (Some(id), _) => Outcome::NotStarted(id),
        (None, 0) => Outcome::NoJobId,
        (None, SUBMISSION_IN_FLIGHT) => Outcome::InFlight,
        (None, _) => Outcome::Refused,
    }
}

/// The lock-or-adopt step of a submission ([`templates/submit_lock.sh`]): `on_adopt` runs for an
/// adopted Slurm job id (`$1`), `lookup` sets `existing` to the id found by name, `what` names the
/// submission in the message of exit 23, which a run that finds another in flight gives after
/// `await_secs` without its id.
pub(crate) fn lock_script(on_adopt: &str, lookup: &str, what: &str, await_secs: u64) -> String {
    super::template::fill(
        include_str!("templates/submit_lock.sh"),
        &[
            ("ON_ADOPT", on_adopt),
            ("LOOKUP", lookup),
            ("WHAT", what),
            ("SECTION", SECTION),
            ("STALE_SECS", &STALE_SUBMIT_LOCK_SECS.to_string()),
            ("AWAIT_TICKS", &(await_secs * 10).to_string()),
            ("IN_FLIGHT", &SUBMISSION_IN_FLIGHT.to_string()),
            ("UNTRUSTED", &UNTRUSTED_STORAGE.to_string()),
        ],
    )
}

#[cfg(test)]
mod tests {

    /// Adopted attempts get their log directories; only one Slurm says is held by its user is
    /// released (a release is an RPC).
    #[test]
    fn only_a_held_adopted_attempt_is_released() {
        let s = release_adopted_script(&[
            ("/l/tao-job-a-7".into(), "7".into(), false),
            ("/l/tao-job-b-8".into(), "8".into(), true),
        ]);
        assert!(
            s.contains("mkdir -p /l/tao-job-a-7\n") && s.contains("mkdir -p /l/tao-job-b-8 && scontrol release 8 "),
            "{s}"
        );
        assert_eq!(s.matches("scontrol release").count(), 1, "{s}");
    }

    /// A submission run again under its lock adopts the job the first run submitted, by the lock's id
    /// or by name, without releasing it (it was never held: a release would be a needless RPC);
    /// a lock an earlier version left (no mark: its job may be held) has its job released.
    #[test]
    fn a_rerun_submission_releases_only_a_job_an_earlier_version_may_have_held() {
        let cluster = FakeCluster::new("echo 777");
        let script = submit_script(&cluster.plan, &[], &SecretValues::default(), &cluster.ticket);
        let run = || {
            let (outcome, calls) = cluster.run(&script);
            assert_eq!(outcome, Outcome::Submitted("777".into()), "{calls}");
            calls
        };
        let first = run();
        assert!(first.contains("sbatch --parsable --job-name") && !first.contains("--hold"), "{first}");
        assert!(std::path::Path::new(&format!("{}/{NOT_HELD_MARK}", cluster.lock)).exists());
        let again = run();
        assert!(!again.contains("sbatch") && !again.contains("scontrol"), "adopted by the lock's id: {again}");
        std::fs::remove_file(format!("{}/slurm_job_id", cluster.lock)).unwrap();
        let by_name = run();
        assert!(by_name.contains("squeue") && !by_name.contains("scontrol"), "adopted by name: {by_name}");
        std::fs::remove_file(format!("{}/{NOT_HELD_MARK}", cluster.lock)).unwrap();
        let earlier = run();
        assert!(earlier.contains("scontrol release 777") && !earlier.contains("sbatch"), "{earlier}");
    }

    /// A first submission that finds another run of its attempt in flight (the lock taken, no id
    /// yet, nothing of that name in Slurm) waits for the id that run writes and answers with it,
    /// submitting nothing; a resumed one (not awaiting) ends at once as in flight.
    #[test]
    fn a_first_submission_adopts_the_id_of_the_run_in_flight_and_a_resumed_one_does_not_wait() {
        let cluster = FakeCluster::new("");
        std::fs::create_dir_all(&cluster.lock).unwrap();
        std::fs::write(format!("{}/{NOT_HELD_MARK}", cluster.lock), "").unwrap();
        let resumed = AttemptTicket { await_other_run: false, ..cluster.ticket.clone() };
        let (outcome, calls) = cluster.run(&submit_script(&cluster.plan, &[], &SecretValues::default(), &resumed));
        assert_eq!(outcome, Outcome::InFlight, "{calls}");
        assert!(!calls.contains("sbatch"), "{calls}");
        // The other run gets its id a moment after this one starts waiting.
        let id_file = format!("{}/slurm_job_id", cluster.lock);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(700));
            std::fs::write(id_file, "888").unwrap();
        });
        let (outcome, calls) =
            cluster.run(&submit_script(&cluster.plan, &[], &SecretValues::default(), &cluster.ticket));
        writer.join().unwrap();
        assert_eq!(outcome, Outcome::Submitted("888".into()), "{calls}");
        assert!(!calls.contains("sbatch") && !calls.contains("scontrol"), "{calls}");
    }

    /// A results base in a temporary directory and fake `sbatch` (printing what `sbatch_answer`
    /// prints), `squeue` (the same), `scontrol` and `sacct` that log their calls.
    struct FakeCluster {
        dir: tempfile::TempDir,
        plan: Plan,
        ticket: AttemptTicket,
        lock: String,
    }

    impl FakeCluster {
        fn new(sbatch_answer: &str) -> FakeCluster {
            let dir = tempfile::tempdir().unwrap();
            let mut settings = settings();
            settings.base_results_dir = Some(dir.path().join("base").display().to_string());
            let plan = resolve(&spec(), &settings).unwrap();
            let ticket = AttemptTicket::first(&plan);
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let calls = dir.path().join("calls");
            for (tool, answer) in
                [("sbatch", sbatch_answer), ("scontrol", ""), ("squeue", sbatch_answer), ("sacct", "")]
            {
                std::fs::write(
                    bin.join(tool),
                    format!("#!/bin/bash\necho \"{tool} $*\" >> {}\n{answer}\n", calls.display()),
                )
                .unwrap();
            }
            Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
            let lock = format!("{}/sbatch/.submit-{}", plan.layout.base_dir, ticket.slurm_job_name);
            FakeCluster { dir, plan, ticket, lock }
        }

        /// Run a submission script: its outcome, and the calls of the fake tools it made.
        fn run(&self, script: &str) -> (Outcome, String) {
            let calls = self.dir.path().join("calls");
            let _ = std::fs::remove_file(&calls);
            let out = Command::new("bash")
                .arg("-c")
                .arg(script)
                .env("PATH", format!("{}:/usr/bin:/bin", self.dir.path().join("bin").display()))
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let calls = std::fs::read_to_string(&calls).unwrap_or_default();
            (parse_outcome(&stdout, out.status.code().unwrap()), format!("{calls}{out:?}"))
        }
    }

    #[test]
    fn a_submission_outcome_is_read_from_its_id_and_exit_status() {
        use Outcome::*;
        let id = "@@tao-slurm:slurm_job_id 4242\n";
        let cases: &[(&str, i32, Outcome)] = &[
            (id, 0, Submitted("4242".into())),
            ("@@tao-slurm:slurm_job_id 4242\n@@tao-slurm:adopted\n", 0, Submitted("4242".into())),
            (id, crate::exit_codes::NO_LOG_DIR, NotStarted("4242".into())),
            (id, crate::exit_codes::RELEASE_FAILED, NotStarted("4242".into())),
            // An id sbatch gave wins over any exit status: the job is Slurm's.
            (id, crate::exit_codes::SUBMISSION_IN_FLIGHT, NotStarted("4242".into())),
            ("", crate::exit_codes::SUBMISSION_IN_FLIGHT, InFlight),
            ("", crate::exit_codes::SBATCH_REFUSED, Refused),
            ("", crate::exit_codes::UNTRUSTED_STORAGE, Refused),
            ("", 0, NoJobId),
            // sbatch --parsable's `id;cluster`; only digits are an id (a job can write into the lock
            // the id is read back from).
            ("@@tao-slurm:slurm_job_id 42;cluster\n", 0, Submitted("42".into())),
            ("@@tao-slurm:slurm_job_id 4$(rm)2\n", 0, NoJobId),
        ];
        for (stdout, code, want) in cases {
            let got = parse_outcome(stdout, *code);
            assert_eq!(&got, want, "{stdout:?} exit {code}");
            assert_eq!(got.slurm_job_id().is_some(), matches!(want, Submitted(_) | NotStarted(_)));
        }
    }

    #[test]
    fn a_job_and_a_sweep_share_the_preamble_and_the_sbatch_steps() {
        let plan = resolve(&spec(), &settings()).unwrap();
        let job = submit_script(&plan, &[], &SecretValues::default(), &AttemptTicket::first(&plan));
        let preamble = preamble(&plan.layout, vec![plan.layout.results_dir()], false, &plan.layout.job_name);
        assert!(job.starts_with(&preamble), "{job}");
        assert!(job.contains(&format!("exit {}", crate::exit_codes::SBATCH_REFUSED)));
        assert_eq!(crate::ops::template::unfilled(&job), Vec::<String>::new());
    }

    #[test]
    fn the_lock_template_is_filled_whole() {
        let script = lock_script("mkdir -p \"$d\"; ", "  existing=x", "attempt", 1);
        assert_eq!(crate::ops::template::unfilled(&script), Vec::<String>::new(), "{script}");
        assert!(script.contains("another submission of this attempt is in flight") && script.contains("existing=x"));
    }

    use super::*;
    use crate::plan::tests::{resolve, settings, spec};
    use crate::spec::{JobSpec, Secret};
    use proptest::prelude::*;
    use std::process::Command;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The staging script writes every file byte for byte and writes secrets only to the mode-600 secrets file,
        /// whatever they contain, and runs nothing else.
        #[test]
        fn staging_is_exact_and_inert(value in "[ -~]{0,16}", secret in "[^\u{0}]{0,16}", payload in proptest::sample::select(vec!["$(touch @C@)", "`touch @C@`", "'; touch @C@; '", "\ntouch @C@\n"])) {
            let dir = tempfile::tempdir().unwrap();
            let canary = dir.path().join("canary");
            let inject = |s: &str| format!("{s}{}", payload.replace("@C@", &canary.display().to_string()));
            let mut settings = settings();
            settings.base_results_dir = Some(dir.path().join("base").display().to_string());
            let spec = JobSpec { env: [("FOO".to_string(), inject(&value).replace('\n', " "))].into(), secret_env: vec!["TOKEN".into()], ..spec() };
            let plan = resolve(&spec, &settings).unwrap();
            let files = crate::script::staged_files(&plan, &serde_json::to_value(&spec).unwrap(), "alice", &["login".into()]);
            // A prefix no staged file can contain unless the secret leaked into it.
            let secret_value = inject(&format!("SECRET-{secret}"));
            let secrets = SecretValues([("TOKEN".to_string(), Secret::new(secret_value.clone()))].into());
            let script = submit_script(&plan, &files, &secrets, &AttemptTicket::first(&plan));
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let seen = dir.path().join("seen-token");
            // sbatch records what it was given: its arguments and its environment.
            std::fs::write(bin.join("sbatch"), format!("#!/bin/bash\n{{ printf '%s\\n' \"$@\"; env; }} >> {}\necho 4242\n", seen.display())).unwrap();
            std::fs::write(bin.join("scontrol"), "#!/bin/bash\nexit 0\n").unwrap();
            Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
            let out = Command::new("bash").arg("-c").arg(&script).env("PATH", format!("{}:/usr/bin:/bin", bin.display())).output().unwrap();
            prop_assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            prop_assert!(String::from_utf8_lossy(&out.stdout).contains("slurm_job_id 4242"));
            prop_assert!(!canary.exists(), "injected code ran");
            for f in &files {
                prop_assert_eq!(std::fs::read_to_string(&f.path).unwrap(), f.contents.clone());
                prop_assert!(!f.contents.contains("SECRET-"), "the secret leaked into {}", f.path);
            }
            // The secrets file holds the value exactly, as a line that bash reads back.
            let read_back = Command::new("bash").arg("-c").arg(format!(". {}; printf '%s' \"$TOKEN\"", plan.layout.secrets_file())).output().unwrap();
            prop_assert_eq!(String::from_utf8(read_back.stdout).unwrap(), secret_value);
            use std::os::unix::fs::PermissionsExt;
            prop_assert_eq!(std::fs::metadata(plan.layout.secrets_file()).unwrap().permissions().mode() & 0o777, 0o600);
            prop_assert_eq!(std::fs::metadata(plan.layout.secrets_dir()).unwrap().permissions().mode() & 0o777, 0o700);
            let given = std::fs::read_to_string(&seen).unwrap();
            prop_assert!(given.contains("--parsable"), "sbatch ran: {}", given);
            prop_assert!(!given.contains("SECRET-"), "the secret reached sbatch's arguments or environment");
            prop_assert!(std::path::Path::new(&plan.layout.log_dir(&plan.layout.job_name, "4242")).is_dir(), "log dir made before release");
            // A second run of the same attempt adopts the job instead of submitting again.
            let again = Command::new("bash").arg("-c").arg(&script).env("PATH", format!("{}:/usr/bin:/bin", bin.display())).output().unwrap();
            let text = String::from_utf8_lossy(&again.stdout).to_string();
            prop_assert!(text.contains("@@tao-slurm:adopted") && text.contains("slurm_job_id 4242"), "{}", text);
        }
    }
}
