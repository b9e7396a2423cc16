//! Several submissions in one remote script (the group commit of concurrent submits): the trust
//! functions sent once, each base's storage checked and its directories made once for all its jobs,
//! then each attempt's own lock, staging and sbatch in a subshell of its own, so that one member's
//! failure (its `exit`) is its own and the next member still runs; last, the log directories of
//! every job sbatch took in one `mkdir` (a job does not wait for it: Slurm writes its logs in the
//! logs root and the batch script links them there, see `Layout::slurm_output`; a member submitted
//! held for its dependencies stays held). Each member's end is marked on
//! both output streams with a nonce the caller draws per batch: no output of a member can pose as
//! the end of another. Pure.

use super::submit::{attempt_script, job_dirs, storage_steps, AttemptTicket};
use crate::exit_codes::{CANNOT_CREATE_DIRS, NO_LOG_DIR};
use crate::plan::Plan;
use crate::protocol::SECTION;
use crate::script::shell::quote;
use crate::script::StagedFile;
use crate::spec::SecretValues;
use std::collections::BTreeMap;

/// Members of a batch that run at once on the login host.
pub const BATCH_PARALLEL: usize = 4;

/// One submission of a batch.
pub struct BatchMember<'a> {
    pub plan: &'a Plan,
    pub files: &'a [StagedFile],
    pub secrets: &'a SecretValues,
    pub ticket: &'a AttemptTicket,
    /// Script text run once the attempt's lock is held (the fault-injection tests' pause point).
    pub before_sbatch: &'a str,
}

/// What one member's subshell printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRun {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// The batch's script. `nonce` must be fresh for each batch (letters and digits).
pub fn batch_script(members: &[BatchMember], nonce: &str) -> String {
    let mut s = String::from("set -u\numask 077\n");
    s.push_str(&crate::script::trust::trust_functions());
    // Each base once: its checks' refusal (in a subshell, so their `exit` ends only them) is kept and
    // given to each of its members, whose submissions then stop before anything of theirs is written.
    let mut bases: BTreeMap<&str, (usize, Vec<String>)> = BTreeMap::new();
    for m in members {
        let next = bases.len();
        let base = bases.entry(m.plan.layout.base_dir.as_str()).or_insert((next, Vec::new()));
        base.1.extend(job_dirs(m.plan, m.files, m.secrets));
    }
    let layouts: BTreeMap<&str, &crate::layout::Layout> =
        members.iter().map(|m| (m.plan.layout.base_dir.as_str(), &m.plan.layout)).collect();
    for (base, (k, dirs)) in &bases {
        let steps = storage_steps(layouts[base], dirs.clone());
        s.push_str(&format!("tao_base_err{k}=\"$( ( {steps}) 2>&1 >/dev/null )\"; tao_base_rc{k}=$?\n"));
    }
    // The members run BATCH_PARALLEL at a time, each in a subshell of its own whose output and exit
    // status go to files of the batch's private directory; their outputs are then passed on in
    // order. A login host does what sbatch waits for (its RPC, munge) for several at once.
    s.push_str(&format!(
        "tao_bd=\"${{TMPDIR:-/tmp}}/tao-batch-{nonce}\"\nmkdir -m 700 -- \"$tao_bd\" || {{ echo 'tao-slurm: cannot make the batch directory' \"$tao_bd\" >&2; exit {CANNOT_CREATE_DIRS}; }}\n\
         trap 'rm -rf -- \"$tao_bd\"' EXIT\ntrap 'exit 129' HUP TERM\ntrap '' PIPE\n"
    ));
    for (i, m) in members.iter().enumerate() {
        let k = bases[m.plan.layout.base_dir.as_str()].0;
        s.push_str(&format!(
            "(\ntrap 'echo $? > \"$tao_bd/{i}.c\"' EXIT\nif [ \"$tao_base_rc{k}\" != 0 ]; then printf '%s\\n' \"$tao_base_err{k}\" >&2; exit \"$tao_base_rc{k}\"; fi\n{}\n) > \"$tao_bd/{i}.o\" 2> \"$tao_bd/{i}.e\" &\n",
            attempt_script(m.plan, m.files, m.secrets, m.ticket, m.before_sbatch, true),
        ));
        if (i + 1) % BATCH_PARALLEL == 0 || i + 1 == members.len() {
            s.push_str("wait\n");
        }
    }
    s.push_str("tao_logdirs=(); tao_new_ids=()\n");
    for (i, m) in members.iter().enumerate() {
        let logdir_prefix = quote(&format!("{}/{}", m.plan.layout.logs_root(), m.ticket.slurm_job_name));
        // The member's output is read (by the shell: no process) to find the id of a job sbatch
        // took in this run (an adopted one was finished by its own step), then passed on.
        s.push_str(&format!(
            "tao_out=; tao_err=; tao_rc=1\n\
             IFS= read -r -d '' tao_out < \"$tao_bd/{i}.o\"; IFS= read -r -d '' tao_err < \"$tao_bd/{i}.e\"\n\
             [ -f \"$tao_bd/{i}.c\" ] && read -r tao_rc < \"$tao_bd/{i}.c\"\n\
             printf '%s\\n' \"${{tao_out%$'\\n'}}\"\n\
             if [ \"$tao_rc\" = 0 ]; then case \"$tao_out\" in *'{SECTION}adopted'*) ;; *'{SECTION}slurm_job_id '*) \
             tao_id=\"${{tao_out##*{SECTION}slurm_job_id }}\"; tao_id=\"${{tao_id%%[!0-9]*}}\"; tao_logdirs+=({logdir_prefix}-\"$tao_id\"); tao_new_ids+=(\"$tao_id\") ;; esac; fi\n\
             [ -z \"$tao_err\" ] || printf '%s\\n' \"${{tao_err%$'\\n'}}\" >&2\n\
             echo \"{SECTION}member {nonce} {i} $tao_rc\"; echo {} >&2\n",
            quote(&format!("{SECTION}member {nonce} {i}")),
        ));
    }
    s.push_str(&format!(
        "tao_after=0\n\
         if [ ${{#tao_logdirs[@]}} -gt 0 ]; then\n  \
         if ! mkdir -p -- \"${{tao_logdirs[@]}}\"; then scancel \"${{tao_new_ids[@]}}\"; echo 'tao-slurm: cannot create the log directories; jobs cancelled' >&2; tao_after={NO_LOG_DIR}; fi\n\
         fi\n\
         echo \"{SECTION}member {nonce} after $tao_after\"\n"
    ));
    s
}

/// Each member's run, read from the batch's output: None for a member whose end never came (the
/// script stopped before it; its outcome is the batch's). A member whose job sbatch took ends as
/// the batch's last step did: not started (cancelled without its log directory) when it failed; a
/// batch that stopped before that step leaves its jobs submitted (each makes its log directory as
/// it starts).
pub fn split_batch_output(stdout: &str, stderr: &str, nonce: &str, members: usize) -> Vec<Option<MemberRun>> {
    let mark = format!("{SECTION}member {nonce} ");
    let after: Option<i32> = stdout
        .lines()
        .find_map(|l| l.strip_prefix(mark.as_str()).and_then(|r| r.strip_prefix("after ")))
        .and_then(|rc| rc.trim().parse().ok());
    let mut runs = split_members(stdout, stderr, &mark, members);
    for run in runs.iter_mut().flatten() {
        let took = run.exit_code == 0
            && !run.stdout.contains(&format!("{SECTION}adopted"))
            && run.stdout.contains(&format!("{SECTION}slurm_job_id "));
        match after {
            Some(rc) if took && rc != 0 => run.exit_code = rc,
            _ => {}
        }
    }
    runs
}

fn split_members(stdout: &str, stderr: &str, mark: &str, members: usize) -> Vec<Option<MemberRun>> {
    let mut runs: Vec<Option<MemberRun>> = vec![None; members];
    let mut errs = split_marked(stderr, mark).into_iter();
    let mut out = String::new();
    let mut next = 0usize;
    for line in stdout.split_inclusive('\n') {
        let Some(rest) = line.strip_prefix(mark) else {
            out.push_str(line);
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(Ok(i)), Some(Ok(rc))) = (words.next().map(str::parse::<usize>), words.next().map(str::parse::<i32>))
        else {
            out.push_str(line);
            continue;
        };
        // Members end in order; a mark out of order is not ours.
        if i != next || i >= members {
            out.push_str(line);
            continue;
        }
        let err = errs.next().filter(|(j, _)| *j == i).map(|(_, e)| e).unwrap_or_default();
        runs[i] = Some(MemberRun { stdout: std::mem::take(&mut out), stderr: err, exit_code: rc });
        next += 1;
    }
    runs
}

/// Standard error cut at each member's end mark: (member index, its text).
fn split_marked(text: &str, mark: &str) -> Vec<(usize, String)> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    for line in text.split_inclusive('\n') {
        match line.strip_prefix(mark).and_then(|r| r.trim_end().parse::<usize>().ok()) {
            Some(i) if i == parts.len() => parts.push((i, std::mem::take(&mut cur))),
            _ => cur.push_str(line),
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::submit::parse_outcome;
    use crate::plan::tests::{resolve, settings, spec};
    use std::process::Command;

    fn run(script: &str, bin: &std::path::Path) -> (String, String, i32) {
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.code().unwrap_or(-1),
        )
    }

    /// Members of these plans' first attempts, with no files or secrets.
    fn bare_members<'a>(
        plans: &'a [Plan],
        tickets: &'a [AttemptTicket],
        none: &'a SecretValues,
    ) -> Vec<BatchMember<'a>> {
        plans
            .iter()
            .zip(tickets)
            .map(|(plan, ticket)| BatchMember { plan, files: &[], secrets: none, ticket, before_sbatch: "" })
            .collect()
    }

    /// A plan whose job id starts with `prefix` (one id per test job).
    fn plan_named(settings: &crate::config::Settings, prefix: &str) -> Plan {
        crate::plan::resolve_with_id(&spec(), settings, &format!("{prefix:1<8}-2222-4333-8444-555555555555")).unwrap()
    }

    /// Three jobs in one script: each gets its own Slurm job id and files; the one sbatch refuses is
    /// refused alone, with its own message; each with its own files.
    #[test]
    fn each_member_is_submitted_or_refused_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = settings();
        settings.base_results_dir = Some(dir.path().join("base").display().to_string());
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("scontrol"), "#!/bin/bash\nexit 0\n").unwrap();
        let plans: Vec<Plan> = ["a", "b", "c"].iter().map(|n| plan_named(&settings, n)).collect();
        let files: Vec<Vec<StagedFile>> = plans
            .iter()
            .map(|p| crate::script::staged_files(p, &serde_json::json!({}), "alice", &["login".into()]))
            .collect();
        let tickets: Vec<AttemptTicket> = plans.iter().map(AttemptTicket::first).collect();
        let none = SecretValues::default();
        // sbatch numbers the jobs it takes from 101 (the members run at once: under a lock) and
        // refuses the middle one (by its job name).
        let counter = dir.path().join("n");
        std::fs::write(
            bin.join("sbatch"),
            format!(
                "#!/bin/bash\nfor a; do case \"$a\" in --job-name={}) echo 'sbatch: error: invalid partition' >&2; exit 1;; esac; done\nexec 9>>{c}.lock; flock 9\nn=$(( $(cat {c} 2>/dev/null || echo 100) + 1 )); echo $n > {c}; echo $n\n",
                tickets[1].slurm_job_name,
                c = counter.display()
            ),
        )
        .unwrap();
        Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
        let members: Vec<BatchMember> = plans
            .iter()
            .zip(&files)
            .zip(&tickets)
            .map(|((plan, files), ticket)| BatchMember { plan, files, secrets: &none, ticket, before_sbatch: "" })
            .collect();
        let script = batch_script(&members, "n0nce");
        let (stdout, stderr, rc) = run(&script, &bin);
        assert_eq!(rc, 0, "{stderr}");
        let runs = split_batch_output(&stdout, &stderr, "n0nce", 3);
        let outcomes: Vec<_> = runs.iter().map(|r| r.as_ref().map(|r| parse_outcome(&r.stdout, r.exit_code))).collect();
        let id = |o: &Option<crate::ops::submit::Outcome>| match o {
            Some(crate::ops::submit::Outcome::Submitted(id)) => id.clone(),
            other => panic!("{other:?}\n{stdout}\n{stderr}"),
        };
        let (first, third) = (id(&outcomes[0]), id(&outcomes[2]));
        assert_eq!(outcomes[1], Some(crate::ops::submit::Outcome::Refused), "{stdout}\n{stderr}");
        let mut ids = vec![first.clone(), third.clone()];
        ids.sort();
        assert_eq!(ids, ["101", "102"], "each its own job");
        let refused = runs[1].as_ref().unwrap();
        assert!(refused.stderr.contains("invalid partition"), "{refused:?}");
        assert!(!runs[0].as_ref().unwrap().stderr.contains("invalid partition"));
        for (plan, files) in plans.iter().zip(&files) {
            for f in files {
                assert_eq!(std::fs::read_to_string(&f.path).unwrap(), f.contents, "{}", plan.layout.job_id);
            }
        }
        assert!(std::path::Path::new(&plans[0].layout.log_dir(&plans[0].layout.job_name, &first)).is_dir());
        assert!(std::path::Path::new(&plans[2].layout.log_dir(&plans[2].layout.job_name, &third)).is_dir());
    }

    /// A base the trust checks refuse refuses its members only, each with the checks' own message.
    #[test]
    fn a_refused_base_refuses_only_its_members() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("sbatch"), "#!/bin/bash\necho 7\n").unwrap();
        std::fs::write(bin.join("scontrol"), "#!/bin/bash\nexit 0\n").unwrap();
        Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let plan_under = |base: &std::path::Path| {
            let mut s = settings();
            s.base_results_dir = Some(base.join("base").display().to_string());
            resolve(&spec(), &s).unwrap()
        };
        let (good, bad) = (plan_under(&dir.path().join("mine")), plan_under(&open));
        let t = (AttemptTicket::first(&good), AttemptTicket::first(&bad));
        let none = SecretValues::default();
        let members = [
            BatchMember { plan: &bad, files: &[], secrets: &none, ticket: &t.1, before_sbatch: "" },
            BatchMember { plan: &good, files: &[], secrets: &none, ticket: &t.0, before_sbatch: "" },
        ];
        let (stdout, stderr, _) = run(&batch_script(&members, "x1"), &bin);
        let runs = split_batch_output(&stdout, &stderr, "x1", 2);
        let (r0, r1) = (runs[0].clone().unwrap(), runs[1].clone().unwrap());
        assert_eq!(r0.exit_code, crate::exit_codes::UNTRUSTED_STORAGE, "{r0:?}");
        assert!(r0.stderr.contains("writable by group or others"), "{r0:?}");
        assert_eq!(parse_outcome(&r1.stdout, r1.exit_code), crate::ops::submit::Outcome::Submitted("7".into()));
    }

    /// The batch's last step: one `mkdir` for every log directory. No job is submitted held or
    /// released (Slurm writes its logs in the logs root until its script links them); when the
    /// directories cannot be made, each job sbatch took is cancelled and not started.
    #[test]
    fn the_log_directories_are_made_once_for_the_batch_and_no_job_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = settings();
        settings.base_results_dir = Some(dir.path().join("base").display().to_string());
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let calls = dir.path().join("calls");
        let counter = dir.path().join("n");
        std::fs::write(
            bin.join("sbatch"),
            format!(
                "#!/bin/bash\necho \"sbatch $*\" >> {calls}\nexec 9>>{c}.lock; flock 9\nn=$(( $(cat {c} 2>/dev/null || echo 500) + 1 )); echo $n > {c}; echo $n\n",
                calls = calls.display(),
                c = counter.display()
            ),
        )
        .unwrap();
        for tool in ["scontrol", "scancel", "mkdir"] {
            let real = if tool == "mkdir" { "exec /bin/mkdir \"$@\"" } else { "" };
            std::fs::write(bin.join(tool), format!("#!/bin/bash\necho \"{tool} $*\" >> {}\n{real}\n", calls.display()))
                .unwrap();
        }
        Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
        for (batch, blocked, want_rc) in [("a", false, 0), ("b", true, NO_LOG_DIR)] {
            let plans: Vec<Plan> = ["1", "2"].iter().map(|n| plan_named(&settings, &format!("{batch}{n}"))).collect();
            let tickets: Vec<AttemptTicket> = plans.iter().map(AttemptTicket::first).collect();
            let none = SecretValues::default();
            let members = bare_members(&plans, &tickets, &none);
            let _ = std::fs::remove_file(&calls);
            let next: u32 = std::fs::read_to_string(&counter).map_or(501, |n| n.trim().parse::<u32>().unwrap() + 1);
            if blocked {
                // Files where the jobs' log directories go (made before the batch runs).
                let logs = plans[0].layout.logs_root();
                std::fs::create_dir_all(&logs).unwrap();
                // (The members run at once: either may get either id.)
                for plan in &plans {
                    for id in [next, next + 1] {
                        std::fs::write(plan.layout.log_dir(&plan.layout.job_name, &id.to_string()), "").unwrap();
                    }
                }
            }
            let (stdout, stderr, _) = run(&batch_script(&members, "n2"), &bin);
            let runs = split_batch_output(&stdout, &stderr, "n2", 2);
            let mut ids = Vec::new();
            for r in runs {
                let r = r.unwrap();
                assert_eq!(r.exit_code, want_rc, "{r:?}");
                ids.push(parse_outcome(&r.stdout, 0).slurm_job_id().unwrap().to_string());
            }
            let made = std::fs::read_to_string(&calls).unwrap();
            let lines: Vec<&str> = made.lines().collect();
            assert_eq!(lines.iter().filter(|l| l.starts_with("sbatch ")).count(), 2, "{made}");
            assert!(lines.iter().all(|l| !l.contains("--hold") && !l.starts_with("scontrol")), "never held: {made}");
            let dirs: Vec<String> =
                plans.iter().zip(&ids).map(|(plan, id)| plan.layout.log_dir(&plan.layout.job_name, id)).collect();
            let mkdirs: Vec<&&str> = lines.iter().filter(|l| l.starts_with("mkdir ") && l.contains(&dirs[0])).collect();
            assert_eq!(mkdirs.len(), 1, "one mkdir for the batch's log directories: {made}");
            assert!(mkdirs[0].contains(&dirs[1]), "{made}");
            if blocked {
                assert!(made.contains(&format!("scancel {}", ids.join(" "))), "both cancelled: {made}");
            } else {
                assert!(!made.contains("scancel"), "{made}");
                assert!(dirs.iter().all(|d| std::path::Path::new(d).is_dir()), "{made}");
            }
        }
    }

    /// The members' submissions run several at once, never more than [`BATCH_PARALLEL`], and every
    /// member is still submitted once with its own id.
    #[test]
    fn members_are_submitted_a_few_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = settings();
        settings.base_results_dir = Some(dir.path().join("base").display().to_string());
        let bin = dir.path().join("bin");
        let running = dir.path().join("running");
        std::fs::create_dir(&bin).unwrap();
        std::fs::create_dir(&running).unwrap();
        let seen = dir.path().join("seen");
        // Each sbatch marks itself running, stays a while, and notes how many were running then.
        std::fs::write(
            bin.join("sbatch"),
            format!(
                "#!/bin/bash\ntouch {r}/$$; sleep 0.3; ls {r} | wc -l >> {seen}; rm {r}/$$; echo $(( $$ + 100000 ))\n",
                r = running.display(),
                seen = seen.display()
            ),
        )
        .unwrap();
        std::fs::write(bin.join("scontrol"), "#!/bin/bash\nexit 0\n").unwrap();
        Command::new("chmod").arg("-R").arg("+x").arg(&bin).status().unwrap();
        let plans: Vec<Plan> = (0..6).map(|n| plan_named(&settings, &format!("p{n}"))).collect();
        let tickets: Vec<AttemptTicket> = plans.iter().map(AttemptTicket::first).collect();
        let none = SecretValues::default();
        let members = bare_members(&plans, &tickets, &none);
        let (stdout, stderr, rc) = run(&batch_script(&members, "n3"), &bin);
        assert_eq!(rc, 0, "{stderr}");
        let mut ids: Vec<String> = split_batch_output(&stdout, &stderr, "n3", 6)
            .into_iter()
            .map(|r| parse_outcome(&r.unwrap().stdout, 0).slurm_job_id().unwrap().to_string())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 6, "each member its own job: {stdout}");
        let counts: Vec<usize> =
            std::fs::read_to_string(&seen).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
        let most = counts.iter().copied().max().unwrap();
        assert!((2..=BATCH_PARALLEL).contains(&most), "at once: {counts:?}");
    }

    #[test]
    fn marks_out_of_order_or_without_the_nonce_are_output() {
        let stdout = "@@tao-slurm:slurm_job_id 5\n@@tao-slurm:member n 1 0\n@@tao-slurm:member other 0 0\n@@tao-slurm:member n 0 3\n@@tao-slurm:slurm_job_id 6\n@@tao-slurm:member n 1 0\n";
        let stderr = "oops\n@@tao-slurm:member n 0\n@@tao-slurm:member n 1\n";
        let runs = split_batch_output(stdout, stderr, "n", 3);
        let r0 = runs[0].clone().unwrap();
        assert_eq!(r0.exit_code, 3);
        assert!(r0.stdout.contains("slurm_job_id 5") && r0.stdout.contains("member other"), "{r0:?}");
        assert_eq!(r0.stderr, "oops\n");
        assert_eq!(runs[1].clone().unwrap().stdout, "@@tao-slurm:slurm_job_id 6\n");
        assert_eq!(runs[2], None, "never ended");
    }
}
