//! Fast engine tests over a fake remote (`crate::test_remote`): each test scripts what the cluster
//! answers (or that it does not answer) and checks what the engine records.

use crate::engine::cancel;
use crate::engine::cycle::Cycle;
use crate::ops::failure::RetryPolicy;
use crate::protocol::SECTION;
use crate::remote::RemoteOutput;
use crate::status::PlatformStatus;
use crate::store::Store;
use crate::test_remote::{lost, ok, unreachable, FakeRemote, Reply};
use tao_slurm_core::fixtures::{settings, spec};

/// The settings a cycle regenerates staged files with.
static SETTINGS: std::sync::LazyLock<crate::config::Settings> = std::sync::LazyLock::new(settings);

/// A state file with one submitted job (Slurm job 41), with secrets if asked.
fn store_with_job(with_secrets: bool) -> (tempfile::TempDir, Store, String) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    let spec =
        crate::spec::JobSpec { secret_env: if with_secrets { vec!["HF_TOKEN".into()] } else { vec![] }, ..spec() };
    let plan = crate::plan::resolve(&spec, &settings()).unwrap();
    store.insert_job("{}", &plan, crate::clock::now()).unwrap();
    store.set_submitted(&plan.layout.job_id, "41", "login1", crate::clock::now()).unwrap();
    (dir, store, plan.layout.job_id.clone())
}

/// A cycle whose retries wait an hour (so none is submitted within the test) ...
fn cycle<'a>(remote: &'a FakeRemote, store: &'a Store, max_retries: u32) -> Cycle<'a> {
    Cycle {
        remote,
        store,
        policy: RetryPolicy { max_retries, backoff_base_secs: 3600 },
        settings: &SETTINGS,
        observe_only: false,
        restart_gate: None,
    }
}

/// ... or are due at once.
fn eager_cycle<'a>(remote: &'a FakeRemote, store: &'a Store) -> Cycle<'a> {
    Cycle {
        remote,
        store,
        policy: RetryPolicy { max_retries: 3, backoff_base_secs: 0 },
        settings: &SETTINGS,
        observe_only: false,
        restart_gate: None,
    }
}

/// What the refresh script prints when sacct says the job ended in `state` with `exit`.
fn refresh_reply(job_name: &str, state: &str, exit: &str) -> Reply {
    ok(&format!(
        "{SECTION}squeue\n{SECTION}rc squeue 0\n{SECTION}sacct\n|41|{state}|{exit}|0:0|node2|2026-12-03T10:00:00|2026-12-03T10:01:00|{job_name}\n{SECTION}rc sacct 0\n{SECTION}dbd_queue 0\n"
    ))
}

#[test]
fn an_infra_failure_becomes_a_retry_and_a_user_failure_a_verdict() {
    for (log, max_retries, want_status, want_attempt, want_class) in [
        ("NCCL error: unhandled system error", 3, PlatformStatus::Pending, 2, "infra"),
        ("ValueError: bad learning rate", 3, PlatformStatus::Error, 1, "user"),
        ("NCCL error: unhandled system error", 0, PlatformStatus::Error, 1, "infra"),
    ] {
        let (_dir, store, id) = store_with_job(true);
        let name = store.get(&id).unwrap().attempt_name.clone();
        let remote = FakeRemote::answering(vec![
            refresh_reply(&name, "FAILED", "1:0"),
            // The failed attempt's log tail, and which of its nodes are down now.
            ok(&format!("{SECTION}tail {id}\n|{log}\n{SECTION}down {id} \n")),
            // A verdict removes the secrets; a retry keeps them (the next attempt needs them).
            ok(&format!("{SECTION}gone {id}\n")),
        ]);
        let job = store.summary(&id).unwrap();
        cycle(&remote, &store, max_retries).run(std::slice::from_ref(&job)).unwrap();
        let after = store.summary(&id).unwrap();
        assert_eq!(
            (after.status, after.attempt),
            (want_status, want_attempt),
            "{log} / {max_retries}: {}",
            after.message
        );
        let attempts = store.attempts(&id).unwrap();
        assert_eq!(attempts[0].failure_class.as_deref(), Some(want_class), "{attempts:?}");
        assert!(attempts[0].evidence.join(" ").contains(&log[..10]), "{attempts:?}");
        let removal_sent = remote.sent().iter().any(|s| s.contains("rm -rf --") && s.contains("/secrets/"));
        assert_eq!(removal_sent, want_status == PlatformStatus::Error, "secrets removed only once the job ended");
        if max_retries == 0 {
            assert!(after.message.starts_with("retry budget exhausted"), "{}", after.message);
        }
    }
}

#[test]
fn a_secrets_removal_that_could_not_run_is_tried_again_until_confirmed() {
    let (_dir, store, id) = store_with_job(true);
    let name = store.get(&id).unwrap().attempt_name.clone();
    let remote = FakeRemote::answering(vec![
        refresh_reply(&name, "COMPLETED", "0:0"),
        // The host is gone when the removal is sent.
        unreachable(),
        // The next cycle (no active job left) sweeps again: the host answers but does not confirm.
        ok(""),
        // And the one after: this time the cluster confirms.
        ok(&format!("{SECTION}gone {id}\n")),
    ]);
    let job = store.summary(&id).unwrap();
    cycle(&remote, &store, 3).run(std::slice::from_ref(&job)).unwrap();
    assert_eq!(store.summary(&id).unwrap().status, PlatformStatus::Complete);
    assert_eq!(store.secrets_to_remove().unwrap().len(), 1, "not cleared without the cluster's word");
    cycle(&remote, &store, 3).run(&[]).unwrap();
    assert_eq!(store.secrets_to_remove().unwrap().len(), 1, "an answer without the confirmation clears nothing");
    cycle(&remote, &store, 3).run(&[]).unwrap();
    assert!(store.secrets_to_remove().unwrap().is_empty());
    assert_eq!(remote.sent().len(), 4);
}

#[test]
fn a_cancel_the_controller_did_not_confirm_changes_nothing() {
    let (_dir, store, id) = store_with_job(false);
    let remote = FakeRemote::answering(vec![ok(&format!(
        "{SECTION}scancel\n|scancel: error: Unable to contact slurm controller (connect failure)\n{SECTION}rc scancel 1\n\
         {SECTION}squeue\n|slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n{SECTION}rc squeue 1\n"
    ))]);
    let job = store.get(&id).unwrap();
    let outcome = cancel::cancel(&remote, &store, std::slice::from_ref(&job)).unwrap();
    assert!(outcome.cancelled.is_empty());
    assert!(outcome.failed[0].1.contains("Unable to contact slurm controller"), "{outcome:?}");
    assert_eq!(store.summary(&id).unwrap().status, PlatformStatus::Pending);
    assert!(store.events(&id).unwrap().iter().any(|(_, kind, _)| kind == "cancel_failed"));
    // The controller answers: scancel succeeds and the job is Canceled.
    let remote = FakeRemote::answering(vec![ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n"))]);
    let outcome = cancel::cancel(&remote, &store, std::slice::from_ref(&job)).unwrap();
    assert_eq!(outcome.cancelled, std::slice::from_ref(&id));
    assert_eq!(store.summary(&id).unwrap().status, PlatformStatus::Canceled);
}

#[test]
fn a_failed_query_gives_no_verdict_and_a_lost_connection_no_change() {
    let (_dir, store, id) = store_with_job(false);
    let remote = FakeRemote::answering(vec![
        ok(&format!("{SECTION}squeue\n|slurm_load_jobs error: Socket timed out\n{SECTION}rc squeue 1\n")),
        lost(),
    ]);
    let job = store.summary(&id).unwrap();
    cycle(&remote, &store, 3).run(std::slice::from_ref(&job)).unwrap();
    assert_eq!(store.summary(&id).unwrap(), job, "nothing recorded from a failed squeue");
    assert!(cycle(&remote, &store, 3).run(std::slice::from_ref(&job)).is_err());
    assert_eq!(store.summary(&id).unwrap(), job);
}

#[test]
fn a_due_retry_that_reaches_no_host_stays_due() {
    let (_dir, store, id) = store_with_job(false);
    let name = store.get(&id).unwrap().attempt_name.clone();
    let remote = FakeRemote::answering(vec![
        refresh_reply(&name, "NODE_FAIL", "0:0"),
        ok(&format!("{SECTION}tail {id}\n{SECTION}down {id} node2\n")),
        // The retry is due at once (backoff 0): its submission reaches no host.
        unreachable(),
    ]);
    let job = store.summary(&id).unwrap();
    let _ = eager_cycle(&remote, &store).run(std::slice::from_ref(&job));
    let after = store.summary(&id).unwrap();
    assert_eq!((after.status, after.attempt), (PlatformStatus::Pending, 2), "{}", after.message);
    assert!(after.slurm_job_id.is_none());
    assert_eq!(after.excluded_nodes, "node2");
    let waiting: Vec<String> = store.waiting_for_submission().unwrap().into_iter().map(|j| j.summary.facts.job_id).collect();
    assert_eq!(waiting, [id], "still waiting for its submission, not Error");
    assert!(crate::ops::secrets::removal_script(&[]).contains("exit 0"));
}

#[test]
fn a_due_retry_the_doors_rule_refuses_ends_the_job_naming_the_rule_and_one_it_cannot_read_stays_due() {
    use crate::engine::retry::{RestartGate, RestartVerdict};
    for (verdict, want_status) in [
        (RestartVerdict::NotNow("the database is away".into()), PlatformStatus::Pending),
        (RestartVerdict::Refused("outside this org's policy: (max_active_jobs = 3)".into()), PlatformStatus::Error),
    ] {
        let (_dir, store, id) = store_with_job(false);
        let name = store.get(&id).unwrap().attempt_name.clone();
        let remote = FakeRemote::answering(vec![
            refresh_reply(&name, "NODE_FAIL", "0:0"),
            ok(&format!("{SECTION}tail {id}\n{SECTION}down {id} node2\n")),
        ]);
        // The gate is asked with the job as stored: its new attempt, its plan.
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (seen, answer) = (asked.clone(), verdict.clone());
        let gate: RestartGate = std::sync::Arc::new(move |job: &crate::store::JobRecord| {
            seen.lock().unwrap().push((job.job_id.clone(), job.attempt, job.plan.layout.job_id.clone()));
            answer.clone()
        });
        let job = store.summary(&id).unwrap();
        Cycle { restart_gate: Some(&gate), ..eager_cycle(&remote, &store) }.run(std::slice::from_ref(&job)).unwrap();
        assert_eq!(*asked.lock().unwrap(), [(id.clone(), 2, id.clone())], "asked once, before submitting");
        assert!(!remote.sent().iter().any(|s| s.contains("sbatch")), "nothing submitted: {:?}", remote.sent());
        let after = store.summary(&id).unwrap();
        assert_eq!((after.status, after.attempt), (want_status, 2), "{verdict:?}: {}", after.message);
        let waiting = store.waiting_for_submission().unwrap().into_iter().any(|j| j.summary.facts.job_id == id);
        if let RestartVerdict::Refused(why) = &verdict {
            assert_eq!(after.message, format!("not retried: {why}"));
            assert!(!waiting, "no retry left to submit");
            let attempts = store.attempts(&id).unwrap();
            assert_eq!(attempts[1].failure_class.as_deref(), Some("policy"), "{attempts:?}");
            assert!(store.events(&id).unwrap().iter().any(|(_, kind, d)| kind == "retry_refused" && d.contains("max_active_jobs")));
        } else {
            assert!(waiting, "still due: the next cycle asks again");
            assert!(after.next_retry_at.is_some());
        }
    }
}

#[test]
fn a_restart_after_a_gpu_hang_is_put_to_the_doors_rule_before_it_is_submitted() {
    use crate::engine::retry::{RestartGate, RestartVerdict};
    let (_dir, store, id) = store_with_job(false);
    let job = store.get(&id).unwrap();
    let now = crate::clock::now();
    // The hung attempt's Slurm job is cancelled (the cluster confirms): the next attempt is due now.
    let remote = FakeRemote::answering(vec![ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n"))]);
    let policy = RetryPolicy { max_retries: 3, backoff_base_secs: 0 };
    crate::engine::gpu::restart(&remote, &store, &policy, &job, &["node2".to_string()], "GPUs of node2 hung", now).unwrap();
    let waiting = store.waiting_for_submission().unwrap();
    assert_eq!(waiting.len(), 1, "the restart is due");
    let gate: RestartGate = std::sync::Arc::new(|job: &crate::store::JobRecord| {
        RestartVerdict::Refused(format!("outside this org's policy: {} GPUs (max_gpus_per_job = 0)", job.plan.resources.gpus_per_node))
    });
    crate::engine::retry::advance(&remote, &store, &waiting, &SETTINGS, Some(&gate)).unwrap();
    assert_eq!(remote.sent().len(), 1, "only the hung attempt's cancel: nothing submitted");
    let after = store.summary(&id).unwrap();
    assert_eq!((after.status, after.attempt), (PlatformStatus::Error, 2), "{}", after.message);
    assert!(after.message.starts_with("not retried: outside this org's policy"), "{}", after.message);
    assert!(store.waiting_for_submission().unwrap().is_empty());
}

/// A recorded job not yet submitted, and what its first submission needs.
fn recorded_job() -> (tempfile::TempDir, Store, crate::plan::Plan) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    store.insert_job("{}", &plan, crate::clock::now()).unwrap();
    (dir, store, plan)
}

fn submit_with(remote: &FakeRemote, store: &Store, plan: &crate::plan::Plan) -> crate::error::Result<String> {
    let ticket = crate::ops::submit::AttemptTicket::first(plan);
    crate::engine::submit::submit_gated(remote, store, plan, &[], &Default::default(), ticket, None).map(|s| s.slurm_job_id)
}

#[test]
fn a_submission_whose_outcome_is_unknown_stays_pending_and_waits_to_be_found() {
    let (_dir, store, plan) = recorded_job();
    let id = plan.layout.job_id.clone();
    let remote = FakeRemote::answering(vec![lost()]);
    assert!(submit_with(&remote, &store, &plan).is_err());
    let after = store.summary(&id).unwrap();
    assert_eq!(after.status, PlatformStatus::Pending, "never Error: the job may be on Slurm");
    assert!(after.message.contains("submission outcome unknown"), "{}", after.message);
    assert!(after.slurm_job_id.is_none());
    let waiting: Vec<String> = store.waiting_for_submission().unwrap().into_iter().map(|j| j.summary.facts.job_id).collect();
    assert_eq!(waiting, [id], "a later cycle finds it by name or resubmits under the same lock");
    assert!(remote.sent()[0].contains(".submit-"), "the submission holds the attempt's lock");
}

#[test]
fn a_refused_sbatch_is_an_error_and_an_unreleased_job_is_still_recorded() {
    // sbatch refused the job: nothing is on Slurm, the job ends Error with sbatch's words.
    let (_dir, store, plan) = recorded_job();
    let id = plan.layout.job_id.clone();
    let refused = RemoteOutput {
        exit_code: 20,
        stdout: String::new(),
        stderr: "sbatch: error: Batch job submission failed: Invalid partition name specified".into(),
        host: "login1".into(),
    };
    let remote = FakeRemote::answering(vec![Ok(refused)]);
    let err = submit_with(&remote, &store, &plan).unwrap_err().to_string();
    assert!(err.contains("Invalid partition name"), "{err}");
    let after = store.summary(&id).unwrap();
    assert_eq!(after.status, PlatformStatus::Error, "{}", after.message);
    assert!(after.message.contains("Invalid partition name"), "{}", after.message);
    assert!(store.events(&id).unwrap().iter().any(|(_, kind, _)| kind == "submit_failed"));
    // sbatch gave an id but the release failed: the job is on Slurm, so its id is kept and it is not
    // judged here (the refresh will see it held or running).
    let (_dir2, store, plan) = recorded_job();
    let id = plan.layout.job_id.clone();
    let held = RemoteOutput {
        exit_code: 21,
        stdout: format!("{SECTION}slurm_job_id 4242\n"),
        stderr: "scontrol: error: Unable to contact slurm controller".into(),
        host: "login1".into(),
    };
    let remote = FakeRemote::answering(vec![Ok(held)]);
    let err = submit_with(&remote, &store, &plan).unwrap_err().to_string();
    assert!(err.contains("was submitted but not started"), "{err}");
    let after = store.summary(&id).unwrap();
    assert_eq!((after.slurm_job_id.as_deref(), after.status), (Some("4242"), PlatformStatus::Pending));
}

#[test]
fn an_observe_only_cycle_records_statuses_and_acts_on_nothing() {
    // A failed attempt: no evidence fetched, no retry, no verdict, no secret removal.
    let (_dir, store, id) = store_with_job(true);
    let name = store.get(&id).unwrap().attempt_name.clone();
    let remote = FakeRemote::answering(vec![refresh_reply(&name, "FAILED", "1:0")]);
    let observer = Cycle { observe_only: true, ..cycle(&remote, &store, 3) };
    let job = store.summary(&id).unwrap();
    observer.run(std::slice::from_ref(&job)).unwrap();
    assert_eq!(remote.sent().len(), 1, "one round trip, the observation: {:?}", remote.sent());
    let after = store.summary(&id).unwrap();
    assert_eq!((after.status, after.attempt), (job.status, 1), "left for a full cycle to classify");
    // A completed job: recorded; its secrets stay listed for a full cycle to remove.
    let remote = FakeRemote::answering(vec![refresh_reply(&name, "COMPLETED", "0:0")]);
    let observer = Cycle { observe_only: true, ..cycle(&remote, &store, 3) };
    observer.run(std::slice::from_ref(&job)).unwrap();
    assert_eq!(store.summary(&id).unwrap().status, PlatformStatus::Complete);
    observer.run(&[]).unwrap();
    assert_eq!(remote.sent().len(), 1, "no removal sent: {:?}", remote.sent());
    assert_eq!(store.secrets_to_remove().unwrap().len(), 1);
}

/// A log line written into a shared buffer (the test's subscriber's writer).
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Issue 27: a state Slurm prints that tao-slurm does not know gives no verdict (the job keeps its
/// status), and the line is logged once, however many refreshes see it.
#[test]
fn an_unknown_slurm_state_is_no_verdict_and_is_logged_once() {
    let (_dir, store, id) = store_with_job(false);
    let name = store.get(&id).unwrap().attempt_name.clone();
    let before = store.summary(&id).unwrap();
    let remote = FakeRemote::answering(vec![
        refresh_reply(&name, "COMPLETED_BUT_DIFFERENTLY", "0:0"),
        refresh_reply(&name, "COMPLETED_BUT_DIFFERENTLY", "0:0"),
        refresh_reply(&name, "COMPLETED_BUT_DIFFERENTLY", "0:0"),
    ]);
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..3 {
            let job = store.summary(&id).unwrap();
            cycle(&remote, &store, 3).run(std::slice::from_ref(&job)).unwrap();
        }
    });
    let after = store.summary(&id).unwrap();
    assert_eq!((after.status, &after.message, after.exit_code), (before.status, &before.message, None));
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let said: Vec<&str> = text.lines().filter(|l| l.contains("not understood")).collect();
    assert_eq!(said.len(), 1, "logged once in three refreshes: {text}");
    assert!(said[0].contains("unknown Slurm state \"COMPLETED_BUT_DIFFERENTLY\""), "{}", said[0]);
    assert!(said[0].contains("WARN"), "{}", said[0]);
}

#[test]
fn a_preemption_resumes_from_the_checkpoint_on_its_own_budget_or_cancels_as_asked() {
    use crate::attempts::OnPreempt;
    // (on_preempt, max_preemptions, status, attempt, message part)
    for (on, max, want_status, want_attempt, says) in [
        (
            OnPreempt::Resume,
            10,
            PlatformStatus::Pending,
            2,
            "on node2, resuming from /ck/epoch-3.pth (preemption 1 of at most 10)",
        ),
        (OnPreempt::Cancel, 10, PlatformStatus::Canceled, 1, "on node2; canceled (on-preempt cancel)"),
        (OnPreempt::Resume, 0, PlatformStatus::Canceled, 1, "canceled: preempted 0 times, its budget of preemptions"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let spec = crate::spec::JobSpec { on_preempt: Some(on), max_preemptions: Some(max), ..spec() };
        let plan = crate::plan::resolve(&spec, &settings()).unwrap();
        store.insert_job("{}", &plan, crate::clock::now()).unwrap();
        let id = plan.layout.job_id.clone();
        store.set_submitted(&id, "41", "login1", crate::clock::now()).unwrap();
        let name = store.get(&id).unwrap().attempt_name.clone();
        let remote = FakeRemote::answering(vec![
            refresh_reply(&name, "PREEMPTED", "0:0"),
            ok(&format!("{SECTION}tail {id}\n{SECTION}checkpoint {id} /ck/epoch-3.pth\n{SECTION}down {id} \n")),
            // The resumed attempt is due at once; its submission reaches no host here.
            unreachable(),
        ]);
        // No infrastructure retry is allowed: a preemption does not draw on that budget.
        let job = store.summary(&id).unwrap();
        cycle(&remote, &store, 0).run(std::slice::from_ref(&job)).unwrap();
        let after = store.summary(&id).unwrap();
        assert_eq!((after.status, after.attempt), (want_status, want_attempt), "{on:?}: {}", after.message);
        assert!(after.message.starts_with("preempted at ") && after.message.contains(says), "{}", after.message);
        let attempts = store.attempts(&id).unwrap();
        assert_eq!(attempts[0].failure_class.as_deref(), Some("preempted"), "{attempts:?}");
        if want_attempt == 2 {
            assert_eq!(attempts[1].cause.as_deref(), Some("preempted"));
            assert_eq!(attempts[1].resumed_from.as_deref(), Some("/ck/epoch-3.pth"));
            assert_eq!(attempts[1].excluded_nodes, "", "a preempted job's nodes are not excluded");
            assert_eq!(after.checkpoint.as_deref(), Some("/ck/epoch-3.pth"));
        }
    }
}

/// Pause `id` as the client does: Pausing from `from` (cancelled from `cancel_at` on), Paused when `done`.
fn pause(store: &Store, id: &str, from: PlatformStatus, cancel_at: i64, done: bool) {
    let ask = crate::store::PauseAsk { attempt: 1, from, graceful: !done, cancel_at, message: "pausing" };
    assert!(store.begin_pause(id, &ask, crate::clock::now()).unwrap());
    if done {
        assert!(store.finish_pause(id, 1, "paused", crate::clock::now()).unwrap());
    }
}

/// A job recorded long enough ago to count as interrupted, never submitted: the store, the job's id
/// and when it was recorded.
fn store_with_unsubmitted_job() -> (tempfile::TempDir, Store, String, i64) {
    let long_ago = crate::clock::now() - 10 * crate::ops::failure::RESUME_SUBMISSION_AFTER_SECS;
    let (dir, store, id) = store_with_job_recorded_at(long_ago);
    (dir, store, id, long_ago)
}

/// A job recorded at `at`, never submitted: the store and the job's id.
fn store_with_job_recorded_at(at: i64) -> (tempfile::TempDir, Store, String) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    store.insert_job("{}", &plan, at).unwrap();
    (dir, store, plan.layout.job_id)
}

#[test]
fn a_job_another_process_just_recorded_is_not_looked_for_until_its_outcome_is_lost() {
    // Recorded a moment ago, by another process (no claim here): its submission is under way in
    // that process's queue, so the refresh does not look it up by its lock and name.
    let (_dir, store, id) = store_with_job_recorded_at(crate::clock::now());
    let remote = FakeRemote::answering(vec![]);
    eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap();
    assert!(remote.sent().is_empty(), "not looked for while under way: {:?}", remote.sent());
    // Its submitter lost the answer (and says so): looked for at once.
    let lost = crate::store::StatusUpdate::bare(PlatformStatus::Pending, "submission outcome unknown: reset");
    store.update_status(&id, &lost, crate::clock::now()).unwrap();
    let remote = FakeRemote::answering(vec![ok(&format!(
        "{SECTION}squeue\n{SECTION}rc squeue 0\n{SECTION}sacct_by_name\n{SECTION}rc sacct_by_name 0\n"
    ))]);
    eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap();
    assert!(remote.sent()[0].contains("sacct_by_name"), "looked for by name: {:?}", remote.sent());
}

#[test]
fn a_paused_job_is_neither_observed_nor_submitted_until_resumed() {
    // Recorded long ago and never submitted: a cycle would resume its submission, were it not paused.
    let (_dir, store, id, long_ago) = store_with_unsubmitted_job();
    pause(&store, &id, PlatformStatus::Pending, long_ago, true);
    let remote = FakeRemote::answering(vec![]);
    let touched = eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap();
    assert!(remote.sent().is_empty(), "nothing observed or submitted: {:?}", remote.sent());
    assert!(touched.is_empty());
    assert_eq!(store.get(&id).unwrap().status, PlatformStatus::Paused);
}

#[test]
fn an_attempt_this_process_is_submitting_is_neither_observed_nor_resumed() {
    // Recorded long ago, not submitted yet: interrupted, unless this process is submitting it (it may
    // wait in a long queue). Nor is it looked up (by its lock, by name in sacct) meanwhile.
    let (_dir, store, id, _) = store_with_unsubmitted_job();
    // Slurm knows no job of its name; a submission gets an id.
    let remote = || {
        FakeRemote::responding(|script| match crate::test_remote::Kind::of(script) {
            crate::test_remote::Kind::Submit => ok(&format!("{SECTION}slurm_job_id 4242\n")),
            _ => ok(&format!("{SECTION}squeue\n{SECTION}rc squeue 0\n{SECTION}sacct\n{SECTION}rc sacct 0\n{SECTION}dbd_queue 0\n")),
        })
    };
    let submits = |r: &FakeRemote| r.sent().iter().filter(|s| s.contains("sbatch --parsable")).count();
    let claim = crate::engine::in_flight::claim(&store.get(&id).unwrap().attempt_name);
    let in_flight = remote();
    let _ = eager_cycle(&in_flight, &store).run(&[store.summary(&id).unwrap()]);
    assert!(in_flight.sent().is_empty(), "neither observed nor resumed while in flight: {:?}", in_flight.sent());
    drop(claim);
    let interrupted = remote();
    let _ = eager_cycle(&interrupted, &store).run(&[store.summary(&id).unwrap()]);
    assert_eq!(submits(&interrupted), 1, "resumed: {:?}", interrupted.sent());
    assert!(interrupted.sent()[0].contains("sacct_by_name"), "looked up by name first: {:?}", interrupted.sent());
}

#[test]
fn a_pausing_job_past_its_grace_is_cancelled_and_paused_not_failed() {
    let (_dir, store, id) = store_with_job(false);
    let name = store.get(&id).unwrap().attempt_name.clone();
    pause(&store, &id, PlatformStatus::Pending, crate::clock::now() - 1, false);
    let remote = FakeRemote::answering(vec![
        refresh_reply(&name, "RUNNING", "0:0"),
        ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n")),
    ]);
    eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap();
    assert!(remote.sent()[1].contains("scancel 41 "), "{:?}", remote.sent());
    let job = store.get(&id).unwrap();
    assert_eq!((job.status, job.attempt), (PlatformStatus::Paused, 1), "{}", job.message);
    // Its Slurm job ended CANCELLED by the pause: no refresh makes it Canceled, or retries it.
    let remote = FakeRemote::answering(vec![]);
    eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap();
    assert!(remote.sent().is_empty());
    // A pausing job whose Slurm job ended by itself (it saved and exited) is Paused by the refresh.
    let (_dir, store, id) = store_with_job(false);
    let name = store.get(&id).unwrap().attempt_name.clone();
    pause(&store, &id, PlatformStatus::Pending, crate::clock::now() + 3600, false);
    let remote = FakeRemote::answering(vec![refresh_reply(&name, "FAILED", "140:0")]);
    eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap();
    let job = store.get(&id).unwrap();
    assert_eq!((job.status, job.attempt), (PlatformStatus::Paused, 1), "not a failure to retry: {}", job.message);
    assert_eq!(remote.sent().len(), 1, "no evidence fetched, no cancel: {:?}", remote.sent());
}

#[test]
fn a_cycle_whose_lease_moved_on_during_its_round_trip_writes_nothing() {
    // The stalled holder's view (a running job, or a failed attempt to retry) against the new
    // holder's (the job Complete): the old view never lands, no event, no retry, no submission.
    for (state, exit) in [("RUNNING", "0:0"), ("FAILED", "1:0")] {
        let (dir, store, id) = store_with_job(false);
        let name = store.get(&id).unwrap().attempt_name.clone();
        assert_eq!(store.hold_lease("monitor:w", "stalled", 15, 1000).unwrap(), Some(1));
        let path = dir.path().join("state.db");
        let (taker_id, taken) = (id.clone(), std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let reply = refresh_reply(&name, state, exit).unwrap();
        let taken_in_rule = taken.clone();
        let remote = FakeRemote::responding(move |script| match crate::test_remote::Kind::of(script) {
            crate::test_remote::Kind::Refresh => {
                // While this round trip is under way the lease expires and another replica takes it
                // and records the job's end.
                if !taken_in_rule.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let taker = Store::open(&path).unwrap();
                    assert_eq!(taker.hold_lease("monitor:w", "taker", 15, 2000).unwrap(), Some(2));
                    let done = crate::model::StatusUpdate::bare(PlatformStatus::Complete, "done");
                    taker.update_status(&taker_id, &done, 2000).unwrap();
                }
                Ok(reply.clone())
            }
            crate::test_remote::Kind::Evidence => ok(&format!(
                "{SECTION}tail {taker_id}\n|NCCL error: unhandled system error\n{SECTION}down {taker_id} \n"
            )),
            _ => ok(""),
        });
        let events_before = store.events(&id).unwrap();
        let e = eager_cycle(&remote, &store).run(&[store.summary(&id).unwrap()]).unwrap_err().to_string();
        assert!(e.contains("lease monitor:w moved on from stalled at epoch 1"), "{state}: {e}");
        let job = store.get(&id).unwrap();
        assert_eq!((job.status, job.attempt), (PlatformStatus::Complete, 1), "{state}: {}", job.message);
        let events = store.events(&id).unwrap();
        assert_eq!(events.len(), events_before.len() + 1, "{state}: only the taker's event: {events:?}");
        assert!(events.last().unwrap().2.contains("Complete"), "{events:?}");
        let sent: Vec<_> = remote.sent().iter().map(|s| crate::test_remote::Kind::of(s)).collect();
        assert!(!sent.contains(&crate::test_remote::Kind::Submit), "{state}: nothing submitted: {sent:?}");
    }
}

/// A refresh's GPU samples join the job's kept history (each node's newest stands until a newer
/// one); an idle spell whose watch says cancel cancels the job, recording why, not as the user's.
#[test]
fn gpu_samples_join_the_history_and_an_idle_cancel_says_why() {
    use crate::gpu::{parse_line, GpuWatchSpec, IdleAction};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    let watch = GpuWatchSpec { sample_secs: Some(30), idle_secs: Some(120), idle_action: Some(IdleAction::Cancel), ..Default::default() };
    let spec = crate::spec::JobSpec { gpus: Some(1), gpu_watch: Some(watch), ..spec() };
    let plan = crate::plan::resolve(&spec, &settings()).unwrap();
    let now = crate::clock::now();
    store.insert_job("{}", &plan, now - 1000).unwrap();
    let id = plan.layout.job_id.clone();
    store.set_submitted(&id, "41", "login1", now - 1000).unwrap();
    let running = |store: &Store| {
        let mut s = store.summary(&id).unwrap();
        s.facts.status = PlatformStatus::Running;
        s
    };
    let obs = |lines: &[String]| {
        let mut o = crate::ops::refresh::Observations::default();
        o.gpu.insert(id.clone(), lines.iter().map(|l| parse_line("node1", l).unwrap()).collect());
        o
    };
    let policy = RetryPolicy { max_retries: 0, backoff_base_secs: 0 };
    let nobody = FakeRemote::answering(vec![]);
    let moved = Default::default();
    // Busy: two samples kept, nothing sent to the cluster.
    let busy: Vec<String> = [now - 100, now - 130].iter().map(|at| format!("v2 {at} - smi 80/10/10")).collect();
    crate::engine::gpu::record(&nobody, &store, &policy, &[running(&store)], &moved, &obs(&busy), now).unwrap();
    let view = store.summary(&id).unwrap().facts.gpu.unwrap();
    assert_eq!(view.history[0].points.iter().map(|p| p.at).collect::<Vec<_>>(), [now - 130, now - 100]);
    // Nothing new: the newest sample and the history stand.
    crate::engine::gpu::record(&nobody, &store, &policy, &[running(&store)], &moved, &obs(&[]), now).unwrap();
    assert_eq!(store.summary(&id).unwrap().facts.gpu.unwrap(), view);
    assert!(nobody.sent().is_empty());
    // Idle since 200 s (over the 120 s asked): cancelled, saying why.
    let remote = FakeRemote::answering(vec![ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n"))]);
    let idle = vec![format!("v2 {now} {} smi 0/10/10", now - 200)];
    crate::engine::gpu::record(&remote, &store, &policy, &[running(&store)], &moved, &obs(&idle), now).unwrap();
    let after = store.summary(&id).unwrap();
    assert_eq!(after.status, PlatformStatus::Canceled, "{}", after.message);
    assert!(after.message.starts_with("cancelled for idle GPUs (every GPU under 5% for 200 s"), "{}", after.message);
    assert!(after.message.ends_with("gpu_watch.idle_action = cancel)"), "{}", after.message);
    assert_eq!(after.facts.gpu.unwrap().history[0].points.len(), 3);
}
