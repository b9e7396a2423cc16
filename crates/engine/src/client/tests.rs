//! The client's failure paths, offline, over a fake login host (`crate::test_remote`): a submission
//! whose answer is lost or late stays Pending, is found again by its name and is never sent twice; a
//! cancel the controller does not confirm changes nothing and names the job; a job that runs after a
//! failed one is Canceled with the reason. The sandbox tests prove the same against a real cluster.

use crate::protocol::SECTION;
use crate::status::PlatformStatus;
use crate::test_remote::{lost, ok, timed_out, unreachable, FakeRemote, Kind, Reply};
use crate::{Client, JobView};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tao_slurm_core::fixtures::{settings, spec};

/// A client over `remote` with a state file of its own (in `dir`).
fn client_over(remote: &Arc<FakeRemote>, dir: &tempfile::TempDir) -> Client {
    let mut settings = settings();
    settings.state_path = dir.path().join("state.db");
    // Registry images as they are: no squashfs conversion round trip.
    settings.use_sqsh = false;
    Client::with_remote(settings, Box::new(remote.clone())).unwrap()
}

/// The checks before a submission: every partition of the settings exists and allows 4 hours.
fn facts() -> Reply {
    let partitions: String =
        settings().partition.split(',').map(|p| format!("PartitionName={p} MaxTime=04:00:00 State=UP\n")).collect();
    ok(&format!("{SECTION}partitions\n{partitions}"))
}

/// A refresh's answer: these squeue and sacct lines (each `|`-prefixed, as the script sends them),
/// both commands succeeding, accounting up to date, nothing found by name unless squeue lists it.
fn refresh(squeue: &[String], sacct: &[String]) -> Reply {
    let lines = |l: &[String]| l.iter().map(|x| format!("|{x}\n")).collect::<String>();
    ok(&format!(
        "{SECTION}squeue\n{}{SECTION}rc squeue 0\n{SECTION}sacct\n{}{SECTION}rc sacct 0\n{SECTION}dbd_queue 0\n{SECTION}sacct_by_name\n{SECTION}rc sacct_by_name 0\n",
        lines(squeue),
        lines(sacct)
    ))
}

/// squeue's line for a job (JobArrayID|State|Reason|NodeList|StartTime|TimeLimit|Exit_Code|Name).
fn squeue_line(slurm_id: &str, state: &str, reason: &str, job_id: &str) -> String {
    format!("{slurm_id}|{state}|{reason}|node1|N/A|4:00:00|0|{}", crate::plan::slurm_job_name(job_id))
}

fn the_job(client: &Client, id: &str) -> JobView {
    client.list_jobs().unwrap().into_iter().find(|j| j.job_id == id).unwrap()
}

fn event_kinds(client: &Client, id: &str) -> Vec<String> {
    client.events(id).unwrap().into_iter().map(|(_, kind, _)| kind).collect()
}

#[test]
fn a_lost_submission_stays_pending_is_found_by_name_and_is_never_sent_twice() {
    let dir = tempfile::tempdir().unwrap();
    // What squeue lists: nothing, until the test says the job has turned up.
    let listed: Arc<Mutex<Vec<String>>> = Arc::default();
    let remote = FakeRemote::responding({
        let listed = listed.clone();
        move |script| match Kind::of(script) {
            Kind::Facts => facts(),
            Kind::Submit => lost(),
            Kind::Refresh => refresh(&listed.lock().unwrap(), &[]),
            Kind::ReleaseAdopted => ok(""),
            other => panic!("unexpected {other:?} script:\n{script}"),
        }
    });
    let client = client_over(&remote, &dir);
    let err = client.create_job(&spec(), &Default::default()).unwrap_err().to_string();
    let id = client.list_jobs().unwrap()[0].job_id.clone();
    assert!(err.contains(&format!("job {id} was not found by name yet")) && err.contains("never resubmits"), "{err}");
    let job = the_job(&client, &id);
    assert_eq!(job.status, PlatformStatus::Pending, "never Error: the job may be on Slurm ({})", job.message);
    assert!(job.message.contains("submission outcome unknown"), "{}", job.message);
    assert_eq!(job.slurm_job_id, None);
    // Later refreshes (before the submission may be resumed) look it up by name and leave it be.
    for _ in 0..3 {
        assert_eq!(client.job_status(&id).unwrap().status, PlatformStatus::Pending);
    }
    assert_eq!(remote.sent_of(Kind::Submit).len(), 1, "sent once, never again while its outcome is unknown");
    // It turns up on Slurm under its name: adopted, with its Slurm job id.
    listed.lock().unwrap().push(squeue_line("4242", "RUNNING", "None", &id));
    let found = client.job_status(&id).unwrap();
    assert_eq!((found.status, found.slurm_job_id.as_deref()), (PlatformStatus::Running, Some("4242")), "{found:?}");
    assert!(event_kinds(&client, &id).contains(&"adopted".to_string()), "{:?}", event_kinds(&client, &id));
    assert_eq!(remote.sent_of(Kind::Submit).len(), 1, "found, not submitted again");
}

#[test]
fn a_timed_out_submission_found_by_name_at_once_is_submitted() {
    let dir = tempfile::tempdir().unwrap();
    // The submission's answer came too late; the refresh right after finds the job under its name.
    let name: Arc<Mutex<String>> = Arc::default();
    let remote = FakeRemote::responding({
        let name = name.clone();
        move |script| match Kind::of(script) {
            Kind::Facts => facts(),
            Kind::Submit => {
                let job_id = script.split("tao-job-").nth(1).and_then(|r| r.get(..36)).unwrap().to_string();
                *name.lock().unwrap() = job_id;
                timed_out()
            }
            Kind::Refresh => refresh(&[squeue_line("4242", "PENDING", "Priority", &name.lock().unwrap())], &[]),
            Kind::ReleaseAdopted => ok(""),
            other => panic!("unexpected {other:?} script:\n{script}"),
        }
    });
    let client = client_over(&remote, &dir);
    let submitted = client.create_job(&spec(), &Default::default()).unwrap();
    assert_eq!(submitted.job_id, *name.lock().unwrap());
    assert_eq!(submitted.slurm_job_id, "4242");
    let job = the_job(&client, &submitted.job_id);
    assert_eq!((job.status, job.slurm_job_id.as_deref()), (PlatformStatus::Pending, Some("4242")), "{job:?}");
    assert!(event_kinds(&client, &job.job_id).contains(&"adopted".to_string()));
    assert_eq!(remote.sent_of(Kind::Submit).len(), 1);
    let finished = remote.sent_of(Kind::ReleaseAdopted);
    assert_eq!(finished.len(), 1, "the adopted job's log directory is made");
    assert!(
        !finished[0].contains("scontrol release"),
        "a job Slurm does not say is held is not released: {}",
        finished[0]
    );
}

/// scancel and squeue both fail to reach the controller.
const CONTROLLER_DOWN: &str = "@@tao-slurm:scancel\n|scancel: error: Unable to contact slurm controller (connect failure)\n@@tao-slurm:rc scancel 1\n\
     @@tao-slurm:squeue\n|slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n@@tao-slurm:rc squeue 1\n";

#[test]
fn a_cancel_that_cannot_reach_the_controller_changes_nothing_and_names_the_job() {
    let dir = tempfile::tempdir().unwrap();
    // 0: the controller is down; 1: the login host cannot be reached at all; 2: all is well.
    let phase = Arc::new(AtomicU32::new(0));
    let remote = FakeRemote::responding({
        let phase = phase.clone();
        move |script| match (Kind::of(script), phase.load(Ordering::SeqCst)) {
            (Kind::Facts, _) => facts(),
            (Kind::Submit, _) => ok(&format!("{SECTION}slurm_job_id 4242\n")),
            (Kind::Cancel, 0) => ok(CONTROLLER_DOWN),
            (Kind::Cancel, 1) => unreachable(),
            (Kind::Cancel, _) => ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n")),
            (other, _) => panic!("unexpected {other:?} script:\n{script}"),
        }
    });
    let client = client_over(&remote, &dir);
    let id = client.create_job(&spec(), &Default::default()).unwrap().job_id;
    let before = the_job(&client, &id);
    assert_eq!(before.status, PlatformStatus::Pending);

    let err = client.cancel_jobs(std::slice::from_ref(&id)).unwrap_err().to_string();
    assert!(err.contains("not cancelled") && err.contains(&id), "the error names the job: {err}");
    assert!(err.contains("Unable to contact slurm controller"), "and the reason: {err}");
    let after = the_job(&client, &id);
    assert_eq!((after.status, &after.message), (before.status, &before.message), "nothing changed");
    assert!(event_kinds(&client, &id).contains(&"cancel_failed".to_string()));

    phase.store(1, Ordering::SeqCst);
    let err = client.cancel_jobs(std::slice::from_ref(&id)).unwrap_err().to_string();
    assert!(err.contains("cannot connect"), "{err}");
    let after = the_job(&client, &id);
    assert_eq!((after.status, &after.message), (before.status, &before.message), "nothing changed");

    phase.store(2, Ordering::SeqCst);
    let cancelled = client.cancel_jobs(std::slice::from_ref(&id)).unwrap();
    assert_eq!(cancelled[0].status, PlatformStatus::Canceled);
    assert_eq!(remote.sent_of(Kind::Cancel).len(), 3);
}

/// A Slurm answer for a job that runs after another: submissions get ids 4242, 4243, ...; the
/// refresh shows `parent` failed with a user error (exit 1) and the child waiting on it; the child's
/// cancel succeeds.
fn cluster_where_the_parent_fails(parent: Arc<Mutex<String>>, child: Arc<Mutex<String>>) -> Arc<FakeRemote> {
    let next_id = AtomicU32::new(4242);
    FakeRemote::responding(move |script| match Kind::of(script) {
        Kind::Facts => facts(),
        Kind::Submit => ok(&format!("{SECTION}slurm_job_id {}\n", next_id.fetch_add(1, Ordering::SeqCst))),
        Kind::Refresh => {
            let (parent, child) = (parent.lock().unwrap().clone(), child.lock().unwrap().clone());
            let waiting =
                if child.is_empty() { vec![] } else { vec![squeue_line("4243", "PENDING", "Dependency", &child)] };
            let failed = format!(
                "4242|FAILED|1:0|0:0|node2|2026-12-03T10:00:00|2026-12-03T10:01:00|{}",
                crate::plan::slurm_job_name(&parent)
            );
            refresh(&waiting, &[failed])
        }
        Kind::Evidence => {
            ok(&format!("{SECTION}tail {}\n|ValueError: learning rate must be positive\n", parent.lock().unwrap()))
        }
        Kind::Depend => ok(&format!("{SECTION}rc 0 0\n")),
        other => panic!("unexpected {other:?} script:\n{script}"),
    })
}

#[test]
fn a_job_after_a_parent_that_failed_is_canceled_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (parent_id, child_id): (Arc<Mutex<String>>, Arc<Mutex<String>>) = Default::default();
    let remote = cluster_where_the_parent_fails(parent_id.clone(), child_id.clone());
    let client = client_over(&remote, &dir);
    let parent = client.create_job(&spec(), &Default::default()).unwrap().job_id;
    *parent_id.lock().unwrap() = parent.clone();
    let child_spec = crate::JobSpec { after: vec![parent.clone()], ..spec() };
    let child = client.create_job(&child_spec, &Default::default()).unwrap().job_id;
    *child_id.lock().unwrap() = child.clone();
    assert!(remote.sent_of(Kind::Submit)[1].contains("afterok:4242"), "the child waits on the parent's Slurm job");

    // A refresh of the child refreshes its parent too: the parent's failure ends the child.
    let views = client.refresh(std::slice::from_ref(&child)).unwrap();
    assert_eq!(views[0].status, PlatformStatus::Canceled, "{:?}", views[0]);
    assert_eq!(views[0].message, format!("dependency {parent} ended Error"));
    assert_eq!(the_job(&client, &parent).status, PlatformStatus::Error);
    let cancel = remote.sent_of(Kind::Depend);
    assert!(cancel.len() == 1 && cancel[0].contains("scancel 4243 "), "Slurm's job is cancelled too: {cancel:?}");
}

#[test]
fn a_job_submitted_after_a_parent_that_already_failed_is_canceled_and_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (parent_id, child_id): (Arc<Mutex<String>>, Arc<Mutex<String>>) = Default::default();
    let remote = cluster_where_the_parent_fails(parent_id.clone(), child_id);
    let client = client_over(&remote, &dir);
    let parent = client.create_job(&spec(), &Default::default()).unwrap().job_id;
    *parent_id.lock().unwrap() = parent.clone();
    assert_eq!(client.job_status(&parent).unwrap().status, PlatformStatus::Error);

    let child_spec = crate::JobSpec { after: vec![parent.clone()], ..spec() };
    let err = client.create_job(&child_spec, &Default::default()).unwrap_err().to_string();
    assert!(err.contains("after") && err.contains("can never run"), "{err}");
    let child = client.list_jobs().unwrap().into_iter().find(|j| j.job_id != parent).unwrap();
    assert_eq!(child.status, PlatformStatus::Canceled, "{child:?}");
    assert_eq!(child.message, format!("dependency {parent} ended Error"));
    assert_eq!(remote.sent_of(Kind::Submit).len(), 1, "only the parent was ever submitted");
}

#[test]
fn concurrent_resumes_of_paused_jobs_each_answer_the_job_and_submit_it_once() {
    // Several clients on one state file (as the service's workers are) resume the same paused jobs
    // at once: every call answers the job as it now is, and each job is submitted once more.
    let dir = tempfile::tempdir().unwrap();
    let next_id = Arc::new(AtomicU32::new(5000));
    let remote = FakeRemote::responding({
        let next_id = next_id.clone();
        move |script| match Kind::of(script) {
            Kind::Facts => facts(),
            Kind::Submit => ok(&format!("{SECTION}slurm_job_id {}\n", next_id.fetch_add(1, Ordering::SeqCst))),
            Kind::Cancel => ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n")),
            Kind::Refresh => refresh(&[], &[]),
            Kind::ReleaseAdopted => ok(""),
            other => panic!("unexpected {other:?} script:\n{script}"),
        }
    });
    let first = client_over(&remote, &dir);
    let jobs: Vec<String> = (0..8)
        .map(|_| {
            let id = first.create_job(&spec(), &Default::default()).unwrap().job_id;
            assert_eq!(first.pause_job(&id, false).unwrap().status, PlatformStatus::Paused);
            id
        })
        .collect();
    // A client per caller (a client is one connection), all started before any resumes.
    let callers = 4;
    let start = std::sync::Barrier::new(jobs.len() * callers);
    std::thread::scope(|s| {
        for id in &jobs {
            for _ in 0..callers {
                let (remote, dir, start) = (&remote, &dir, &start);
                s.spawn(move || {
                    let client = client_over(remote, dir);
                    start.wait();
                    let view = client.resume_job(id, None).unwrap_or_else(|e| panic!("resume of {id}: {e}"));
                    assert_ne!(view.status, PlatformStatus::Paused, "{view:?}");
                });
            }
        }
    });
    assert_eq!(remote.sent_of(Kind::Submit).len(), 2 * jobs.len(), "one more submission per job");
}

#[test]
fn a_job_paused_by_us_ends_a_wait_and_leaves_the_monitor_idle() {
    // A paused job changes only when someone resumes it: a wait on it ends rather than wait for
    // ever, and the monitor does not count it as a job to follow (its --idle-exit may end).
    let dir = tempfile::tempdir().unwrap();
    let listed: Arc<Mutex<Vec<String>>> = Arc::default();
    let next_id = Arc::new(AtomicU32::new(6000));
    let remote = FakeRemote::responding({
        let (listed, next_id) = (listed.clone(), next_id.clone());
        move |script| match Kind::of(script) {
            Kind::Facts => facts(),
            Kind::Submit => ok(&format!("{SECTION}slurm_job_id {}\n", next_id.fetch_add(1, Ordering::SeqCst))),
            Kind::Cancel => ok(&format!("{SECTION}scancel\n{SECTION}rc scancel 0\n")),
            Kind::Refresh => refresh(&listed.lock().unwrap(), &[]),
            Kind::ReleaseAdopted => ok(""),
            other => panic!("unexpected {other:?} script:\n{script}"),
        }
    });
    let client = client_over(&remote, &dir);
    let paused = client.create_job(&spec(), &Default::default()).unwrap().job_id;
    assert_eq!(client.pause_job(&paused, false).unwrap().status, PlatformStatus::Paused);
    let running = client.create_job(&spec(), &Default::default()).unwrap();
    let slurm_id = running.slurm_job_id.clone();
    listed.lock().unwrap().push(squeue_line(&slurm_id, "RUNNING", "None", &running.job_id));
    let every = Some(std::time::Duration::from_millis(200));

    let alone = client.wait_step(&client.wait_start(std::slice::from_ref(&paused), None, every).unwrap()).unwrap();
    assert_eq!((alone.all_terminal, alone.all_settled, alone.paused.clone()), (false, true, vec![paused.clone()]));
    let both = [paused.clone(), running.job_id.clone()];
    let tick = client.wait_step(&client.wait_start(&both, None, every).unwrap()).unwrap();
    assert!(!tick.all_settled, "a running job keeps the wait going: {:?}", tick.views);

    let mut monitor = super::Monitor::new(client.settings());
    assert_eq!(monitor.step(&client).unwrap().active, 1, "the running job only");
    listed.lock().unwrap().clear();
    client.cancel_job(&running.job_id).unwrap();
    assert_eq!(monitor.step(&client).unwrap().active, 0, "nothing to follow while the other is paused");
}

#[test]
fn status_says_when_webhooks_have_no_monitor_to_send_them() {
    let dir = tempfile::tempdir().unwrap();
    let remote = cluster_where_the_parent_fails(Arc::default(), Arc::default());
    let client = client_over(&remote, &dir);
    client.create_job(&spec(), &Default::default()).unwrap();
    assert_eq!(client.unsent_notifications().unwrap(), None, "no webhook: nothing to say");
    let hooked = crate::JobSpec { notify: vec!["http://127.0.0.1:9/hook".into()], ..spec() };
    client.create_job(&hooked, &Default::default()).unwrap();
    let note = client.unsent_notifications().unwrap().unwrap();
    assert!(note.contains("1 active job(s) have webhooks and no monitor runs"), "{note}");
    // A monitor holds the lock: it sends them.
    let _lock = crate::client::MonitorLock::take(client.settings()).unwrap().unwrap();
    assert_eq!(client.unsent_notifications().unwrap(), None);
}

/// The service's cache reads a batch of created jobs in one query: the jobs the state has, in any
/// order asked, one deleted meanwhile (or never there) left out without keeping the others out.
#[test]
fn known_jobs_are_read_together_and_a_missing_one_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let next_id = AtomicU32::new(4242);
    let remote = FakeRemote::responding(move |script| match Kind::of(script) {
        Kind::Facts => facts(),
        Kind::Submit => ok(&format!("{SECTION}slurm_job_id {}\n", next_id.fetch_add(1, Ordering::SeqCst))),
        other => panic!("unexpected {other:?} script:\n{script}"),
    });
    let client = client_over(&remote, &dir);
    let a = client.create_job(&spec(), &Default::default()).unwrap().job_id;
    let b = client.create_job(&spec(), &Default::default()).unwrap().job_id;
    let asked = [b.clone(), "00000000-0000-4000-8000-00000000dead".to_string(), a.clone()];
    let mut found: Vec<(String, Option<String>)> =
        client.known_jobs(&asked).unwrap().iter().map(|j| (j.job_id.clone(), j.slurm_job_id.clone())).collect();
    found.sort();
    let mut want = vec![(a.clone(), Some("4242".to_string())), (b.clone(), Some("4243".to_string()))];
    want.sort();
    assert_eq!(found, want);
    assert!(client.stored_jobs(&asked).is_err(), "a door's own lookup still names what is missing");
}
