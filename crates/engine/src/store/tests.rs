//! The store's tests: each table's queries against a real SQLite file.

use super::schema::MIGRATIONS;
use super::test_place::both;
use super::*;
use crate::plan::Plan;
use crate::status::PlatformStatus;
use rusqlite::{params, Connection};
use tao_slurm_core::fixtures::{settings, spec};

/// The moment every write of these tests happens at (the store never reads the clock).
const NOW: i64 = 1_700_000_000;

// (On PostgreSQL: one new schema, its migrations applied once under the schema's lock.)
both! { fn processes_opening_a_new_state_file_at_once_migrate_it_once(place) {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let opened: Vec<_> = (0..8)
        .map(|_| {
            let (place, barrier) = (place.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                place.try_open().map(|_| ()).map_err(|e| e.to_string())
            })
        })
        .collect();
    for t in opened {
        t.join().unwrap().unwrap();
    }
    let store = place.open();
    store.insert_job("{}", &crate::plan::resolve(&spec(), &settings()).unwrap(), NOW).unwrap();
}}

both! { fn jobs_record_their_cluster_and_remote_work_keeps_to_it(place) {
    let mut a = place.open();
    a.set_cluster(Some("a".into()));
    let plain = place.open();
    let pa = crate::plan::resolve(&spec(), &settings()).unwrap();
    let p0 = crate::plan::resolve(&spec(), &settings()).unwrap();
    a.insert_job("{}", &pa, NOW).unwrap();
    plain.insert_job("{}", &p0, NOW).unwrap();
    assert_eq!(plain.summary(&pa.layout.job_id).unwrap().cluster.as_deref(), Some("a"));
    assert_eq!(a.summary(&p0.layout.job_id).unwrap().cluster, None);
    let ids = |s: &Store| -> Vec<String> {
        s.waiting_for_submission().unwrap().into_iter().map(|j| j.summary.facts.job_id).collect()
    };
    assert_eq!(ids(&a), vec![pa.layout.job_id.clone()]);
    assert_eq!(ids(&plain), vec![p0.layout.job_id.clone()]);
    assert_eq!(plain.list_summaries(true).unwrap().len(), 2, "listing shows every cluster's jobs");
}}

both! { fn a_sweep_is_recorded_at_once_found_by_its_id_and_its_dependencies_kept(place) {
    let store = place.open();
    let plans: Vec<_> = (0..3).map(|_| crate::plan::resolve(&spec(), &settings()).unwrap()).collect();
    let members: Vec<(String, &Plan, Member)> = plans
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let m = Member {
                attempt_name: Some("tao-sweep-abc".into()),
                sweep_id: Some("abc-123".into()),
                sweep_index: Some(i as u32),
                ..Default::default()
            };
            ("{}".to_string(), p, m)
        })
        .collect();
    let group = Group {
        sweep_id: "abc-123".into(),
        kind: "sweep".into(),
        array_name: Some("tao-sweep-abc".into()),
        ..Default::default()
    };
    store.insert_group(&group, &members, NOW).unwrap();
    store.set_array_submitted("abc-123", "77", "login1", NOW).unwrap();
    let (g, ids) = store.group("abc").unwrap().unwrap();
    assert_eq!(g.slurm_array_id.as_deref(), Some("77"));
    assert_eq!(ids, plans.iter().map(|p| p.layout.job_id.clone()).collect::<Vec<_>>(), "in index order");
    let second = store.summary(&ids[1]).unwrap();
    assert_eq!(second.slurm_job_id.as_deref(), Some("77_1"));
    assert_eq!((second.sweep_index, second.array_index()), (Some(1), Some(1)));
    assert_eq!(store.attempts(&ids[1]).unwrap()[0].slurm_job_name, "tao-sweep-abc");
    assert!(store.group("zzz").unwrap().is_none());
    // A job that runs after the first variant.
    let child = crate::plan::resolve(&spec(), &settings()).unwrap();
    let m =
        Member { after: vec![(ids[0].clone(), "ok".into())], gate: Some("afterok:77_0".into()), ..Default::default() };
    store.in_transaction(|| store.insert_member("{}", &child, &m, NOW)).unwrap();
    let deps = store.open_dependencies(Some(&child.layout.job_id)).unwrap();
    assert_eq!(deps.len(), 1);
    assert_eq!((deps[0].parent.as_str(), deps[0].kind.as_str()), (ids[0].as_str(), "ok"));
    assert_eq!(deps[0].parent_slurm_id.as_deref(), Some("77_0"));
    assert_eq!(store.summary(&child.layout.job_id).unwrap().gate.as_deref(), Some("afterok:77_0"));
}}

both! { fn jobs_survive_reopen_and_prefixes_resolve(place) {
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    let id = plan.layout.job_id.clone();
    {
        let store = place.open();
        store.insert_job("{}", &plan, NOW).unwrap();
        store.set_submitted(&id, "42", "login1", NOW).unwrap();
        store
            .update_status(
                &id,
                &StatusUpdate {
                    status: PlatformStatus::Error,
                    message: "exit code 3".into(),
                    slurm_state: Some("FAILED".into()),
                    exit_code: Some(3),
                    node_list: Some("node1".into()),
                    progress: None,
                    pending_reason: None,
                },
                NOW,
            )
            .unwrap();
    }
    let store = place.open();
    let rec = store.get(&id[..8]).unwrap();
    assert_eq!(rec.plan, plan);
    assert_eq!(rec.status, PlatformStatus::Error);
    assert_eq!(rec.exit_code, Some(3));
    assert_eq!(rec.slurm_job_id.as_deref(), Some("42"));
    assert!(store.list(true).unwrap().is_empty());
    assert_eq!(store.list(false).unwrap().len(), 1);
    let attempts = store.attempts(&id).unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!((attempts[0].state.as_deref(), attempts[0].exit_code), (Some("FAILED"), Some(3)));
    assert!(attempts[0].ended_at.is_some(), "a terminal status ends the attempt");
    let kinds: Vec<String> = store.events(&id).unwrap().into_iter().map(|e| e.1).collect();
    assert_eq!(kinds, vec!["created", "submitted", "status"]);
    assert!(matches!(store.get("zzzz"), Err(StoreError::NotFound(_))));
}}

#[test]
fn summaries_agree_with_records_and_old_state_files_are_filled_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut spec = spec();
    spec.secret_env = vec!["HF_TOKEN".into()];
    let plan = crate::plan::resolve(&spec, &settings()).unwrap();
    let id = plan.layout.job_id.clone();
    {
        // A state file as version 3 wrote it: no summary columns yet.
        let conn = Connection::open(&path).unwrap();
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute(
            "INSERT INTO jobs (job_id, spec_json, plan_json, status, created_at, updated_at, attempt_name)
             VALUES (?1, '{}', ?2, 'Running', 1, 1, ?3)",
            params![id, serde_json::to_string(&plan).unwrap(), plan.layout.job_name],
        )
        .unwrap();
        // And one an earlier build wrote: `timeout_minutes`, no `secret_names`.
        let mut old: serde_json::Value = serde_json::to_value(&plan).unwrap();
        let o = old.as_object_mut().unwrap();
        o.remove("timeout_seconds");
        o.remove("secret_names");
        o.insert("timeout_minutes".into(), 228.into());
        conn.execute(
            "INSERT INTO jobs (job_id, spec_json, plan_json, status, created_at, updated_at, attempt_name)
             VALUES ('old-build-job', '{}', ?1, 'Complete', 1, 1, 'tao-job-old-build-job')",
            params![old.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO jobs (job_id, spec_json, plan_json, status, created_at, updated_at, attempt_name)
             VALUES ('old-build-pending', '{}', ?1, 'Pending', 1, 1, 'tao-job-old-build-pending')",
            params![old.to_string()],
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let legacy = store.summary("old-build-job").unwrap();
    assert_eq!((legacy.timeout_seconds, legacy.has_secrets), (228 * 60, false));
    assert_eq!(legacy.layout.base_dir, plan.layout.base_dir);
    let summary = store.summary(&id).unwrap();
    assert_eq!(summary, store.get(&id).unwrap().summary);
    assert!(summary.has_secrets);
    assert_eq!(summary.gpus_per_node, plan.resources.gpus_per_node);
    assert_eq!(summary.layout, plan.layout);
    // A job recorded now fills them at insert.
    let other = crate::plan::resolve(&tao_slurm_core::fixtures::spec(), &settings()).unwrap();
    store.insert_job("{}", &other, NOW).unwrap();
    let s = store.summary(&other.layout.job_id).unwrap();
    assert_eq!(s, store.get(&other.layout.job_id).unwrap().summary);
    assert!(!s.has_secrets);
    assert_eq!(store.list_summaries(true).unwrap().len(), 3);
    assert_eq!(store.list_summaries(false).unwrap().len(), 4);
    // The old active row's plan decodes with what that build behaved by, so it can be resumed.
    let waiting = store.waiting_for_submission().unwrap();
    let ids: Vec<&str> = waiting.iter().map(|j| j.summary.job_id.as_str()).collect();
    assert!(ids.contains(&id.as_str()) && ids.contains(&"old-build-pending"), "{ids:?}");
    let old = waiting.iter().find(|j| j.summary.job_id == "old-build-pending").unwrap();
    assert_eq!((old.plan.timeout_seconds, old.plan.secret_names.len()), (228 * 60, 0));
    store.set_status_sig(&id, "12:34").unwrap();
    assert_eq!(store.summary(&id).unwrap().status_sig.as_deref(), Some("12:34"));
}

both! { fn the_change_token_moves_with_any_write_by_this_or_another_connection(place) {
    let ours = place.open();
    let other = place.open();
    let t0 = ours.change_token().unwrap();
    assert_eq!(ours.change_token().unwrap(), t0, "nothing changed");
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    other.insert_job("{}", &plan, NOW).unwrap();
    let t1 = ours.change_token().unwrap();
    assert_ne!(t1.others, t0.others, "another connection committed");
    ours.set_status_sig(&plan.layout.job_id, "1:2").unwrap();
    let t2 = ours.change_token().unwrap();
    assert_eq!(t2.others, t1.others);
    assert_ne!(t2.ours, t1.ours, "this connection wrote");
}}

both! { fn events_since_a_cursor_by_job(place) {
    let store = place.open();
    assert_eq!(store.last_event_id().unwrap(), 0);
    let plans: Vec<Plan> = (0..2).map(|_| crate::plan::resolve(&spec(), &settings()).unwrap()).collect();
    for p in &plans {
        store.insert_job("{}", p, NOW).unwrap();
    }
    let (a, b) = (plans[0].layout.job_id.as_str(), plans[1].layout.job_id.as_str());
    let cursor = store.last_event_id().unwrap();
    store.set_submitted(a, "41", "login1", NOW).unwrap();
    store.set_submitted(b, "42", "login1", NOW).unwrap();
    let all = store.events_since(cursor, &[], 10).unwrap();
    assert_eq!(all.iter().map(|e| e.job_id.as_str()).collect::<Vec<_>>(), vec![a, b]);
    assert!(all.iter().all(|e| e.kind == "submitted" && e.id > cursor));
    let only_b = store.events_since(cursor, &[b], 10).unwrap();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0].detail, "Slurm job 42 via login1");
    assert_eq!(store.events_since(cursor, &[], 1).unwrap().len(), 1, "limit");
    assert!(store.events_since(store.last_event_id().unwrap(), &[], 10).unwrap().is_empty());
}}

both! { fn a_write_that_changes_nothing_writes_nothing(place) {
    let store = place.open();
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    let id = plan.layout.job_id.clone();
    store.insert_job("{}", &plan, NOW).unwrap();
    store.set_submitted(&id, "42", "login1", NOW).unwrap();
    let pending = StatusUpdate {
        slurm_state: Some("PENDING".into()),
        pending_reason: Some("Resources".into()),
        ..StatusUpdate::bare(PlatformStatus::Pending, "waiting, reason Resources")
    };
    store.update_status(&id, &pending, NOW).unwrap();
    store.set_status_sig(&id, "1:2").unwrap();
    store.set_unseen_since(&id, None).unwrap();
    store.set_gate(&id, "free").unwrap();
    let (token, events) = (store.change_token().unwrap(), store.events(&id).unwrap().len());
    // The same writes again, later: no row changes, no event, the token stays.
    store.update_status(&id, &pending, NOW + 60).unwrap();
    store.set_status_sig(&id, "1:2").unwrap();
    store.set_unseen_since(&id, None).unwrap();
    store.set_gate(&id, "free").unwrap();
    assert_eq!(store.change_token().unwrap(), token, "nothing changed, nothing written");
    assert_eq!(store.events(&id).unwrap().len(), events);
    let job = store.summary(&id).unwrap();
    assert_eq!((job.updated_at, job.pending_reason.as_deref()), (NOW, Some("Resources")));
    // A change of the reason alone is a change.
    let other = StatusUpdate { pending_reason: Some("Priority".into()), ..pending.clone() };
    store.update_status(&id, &other, NOW + 120).unwrap();
    assert_ne!(store.change_token().unwrap(), token);
    let job = store.summary(&id).unwrap();
    assert_eq!((job.updated_at, job.pending_reason.as_deref()), (NOW + 120, Some("Priority")));
}}

#[test]
fn the_store_never_reads_the_clock() {
    let files = [
        ("mod.rs", include_str!("mod.rs")),
        ("jobs.rs", include_str!("jobs.rs")),
        ("attempts.rs", include_str!("attempts.rs")),
        ("events.rs", include_str!("events.rs")),
        ("groups.rs", include_str!("groups.rs")),
        ("dependencies.rs", include_str!("dependencies.rs")),
        ("secrets.rs", include_str!("secrets.rs")),
        ("rows.rs", include_str!("rows.rs")),
        ("sql.rs", include_str!("sql.rs")),
        ("postgres_schema.rs", include_str!("postgres_schema.rs")),
        ("service_records.rs", include_str!("service_records.rs")),
    ];
    for (name, text) in files {
        for clock in ["SystemTime", "Instant::now", "clock::now", "now_secs"] {
            // Open's retry of a busy database is bounded by a deadline (a wait, not a time recorded).
            let allowed = name == "mod.rs" && clock == "Instant::now";
            assert!(
                allowed || !text.contains(clock),
                "src/store/{name} reads the clock ({clock}): take `now` from the caller"
            );
        }
    }
}

both! { fn retries_are_counted_by_class_on_their_cluster_and_a_final_failure_is_no_retry(place) {
    let mut a = place.open();
    a.set_cluster(Some("a".into()));
    let plain = place.open();
    let plan = |s: &Store| {
        let p = crate::plan::resolve(&spec(), &settings()).unwrap();
        s.insert_job("{}", &p, NOW).unwrap();
        p.layout.job_id
    };
    let retry = |s: &Store, id: &str, attempt: u32, class: &str| {
        let next = format!("tao-job-{id}-{}", attempt + 1);
        let plan = RetryPlan {
            cause: "infra",
            resumed_from: None,
            class,
            evidence: &[],
            next_name: &next,
            excluded_nodes: "",
            not_before: NOW,
            message: "retry",
        };
        assert!(s.schedule_retry(id, attempt, &plan, NOW).unwrap());
    };
    let (j1, j2, j3) = (plan(&a), plan(&a), plan(&plain));
    retry(&a, &j1, 1, "node_failure");
    retry(&a, &j1, 2, "node_failure");
    retry(&a, &j2, 1, "preempted");
    retry(&plain, &j3, 1, "node_failure");
    a.close_attempt(&j2, 2, "user_error", &[], NOW).unwrap();
    assert_eq!(a.retries_by_class().unwrap(), vec![("node_failure".to_string(), 2), ("preempted".to_string(), 1)]);
    assert_eq!(plain.retries_by_class().unwrap(), vec![("node_failure".to_string(), 1)]);
}}

both! { fn each_attempt_after_the_first_records_its_cause_and_checkpoint(place) {
    let s = place.open();
    let p = crate::plan::resolve(&spec(), &settings()).unwrap();
    s.insert_job("{}", &p, NOW).unwrap();
    let id = p.layout.job_id.clone();
    let preempted = RetryPlan {
        cause: "preempted",
        resumed_from: Some("/r/train/epoch-2.pth"),
        class: "preempted",
        evidence: &[],
        next_name: "n2",
        excluded_nodes: "",
        not_before: NOW,
        message: "preempted at t on node1, resuming from /r/train/epoch-2.pth",
    };
    assert!(s.schedule_retry(&id, 1, &preempted, NOW).unwrap());
    assert_eq!(s.summary(&id).unwrap().checkpoint.as_deref(), Some("/r/train/epoch-2.pth"));
    // The job ends Error; `retry` (or a resume after a pause) reopens it with its own cause, from
    // the job's last known checkpoint.
    s.update_status(&id, &StatusUpdate::bare(PlatformStatus::Error, "failed"), NOW).unwrap();
    assert!(s.reopen_ended(&id, 2, "n3", "retried", "retried", NOW).unwrap());
    let attempts = s.attempts(&id).unwrap();
    let got: Vec<(u32, Option<&str>, Option<&str>)> =
        attempts.iter().map(|a| (a.number, a.cause.as_deref(), a.resumed_from.as_deref())).collect();
    assert_eq!(
        got,
        vec![
            (1, None, None),
            (2, Some("preempted"), Some("/r/train/epoch-2.pth")),
            (3, Some("retried"), Some("/r/train/epoch-2.pth"))
        ]
    );
    let kinds: Vec<String> = s.events(&id).unwrap().into_iter().map(|(_, kind, _)| kind).collect();
    assert!(kinds.contains(&"preempted".to_string()) && kinds.contains(&"retried".to_string()), "{kinds:?}");
}}

both! { fn a_restart_of_the_slurm_job_becomes_the_next_attempt_once(place) {
    let s = place.open();
    let p = crate::plan::resolve(&spec(), &settings()).unwrap();
    s.insert_job("{}", &p, NOW).unwrap();
    let id = p.layout.job_id.clone();
    s.set_submitted(&id, "41", "login1", NOW).unwrap();
    let start = crate::ops::refresh::Start {
        at: NOW + 30,
        slurm_job_id: "41".into(),
        restart: 1,
        cause: Some(crate::attempts::Cause::Timeout),
        checkpoint: Some("/r/train/epoch-5.pth".into()),
    };
    assert!(s.record_restart(&id, 1, &start, "attempt 2 (timeout)", NOW).unwrap());
    // A second observer of the same restart (still at attempt 1) records nothing.
    assert!(!s.record_restart(&id, 1, &start, "attempt 2 (timeout)", NOW).unwrap());
    // Nor is a restart of another Slurm job taken for this one's.
    let other = crate::ops::refresh::Start { slurm_job_id: "99".into(), ..start.clone() };
    assert!(!s.record_restart(&id, 2, &other, "x", NOW).unwrap());
    let job = s.summary(&id).unwrap();
    assert_eq!((job.attempt, job.slurm_job_id.as_deref()), (2, Some("41")));
    let a = s.attempts(&id).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!((a[0].failure_class.as_deref(), a[0].ended_at), (Some("timeout"), Some(NOW + 30)));
    assert_eq!(
        (a[1].cause.as_deref(), a[1].resumed_from.as_deref(), a[1].slurm_restart, a[1].slurm_job_id.as_deref()),
        (Some("timeout"), Some("/r/train/epoch-5.pth"), Some(1), Some("41"))
    );
    assert_eq!(a[1].slurm_job_name, a[0].slurm_job_name, "the same Slurm job");
}}

/// A connection the server dropped (restarted, or out of reach for a while) is opened again on the
/// next use, in the same schema: the store goes on without a restart of the process (issue 25).
#[cfg(feature = "postgres-tests")]
#[test]
fn a_dropped_postgres_connection_is_opened_again() {
    let place = crate::store::test_place::Place::postgres();
    let s = place.open();
    let p = crate::plan::resolve(&spec(), &settings()).unwrap();
    s.insert_job("{}", &p, NOW).unwrap();
    // End this store's session on the server (only it: other tests share the database).
    let pid: i64 = s.conn.query_row("SELECT pg_backend_pid()", crate::store::sql::params![], |r| r.get(0)).unwrap();
    let mut admin = postgres::Client::connect(&crate::store::test_place::database_url(), postgres::NoTls).unwrap();
    let ended: bool = admin.query_one("SELECT pg_terminate_backend($1)", &[&(pid as i32)]).unwrap().get(0);
    assert!(ended, "the store's session {pid} was ended");
    // The first read meets the dropped connection and is asked again on a new one.
    let job = s.summary(&p.layout.job_id).unwrap();
    assert_eq!(job.job_id, p.layout.job_id);
    let q = crate::plan::resolve(&spec(), &settings()).unwrap();
    s.insert_job("{}", &q, NOW).unwrap();
    // A writing transaction on a dropped connection starts again on a new one too.
    let pid: i64 = s.conn.query_row("SELECT pg_backend_pid()", crate::store::sql::params![], |r| r.get(0)).unwrap();
    let ended: bool = admin.query_one("SELECT pg_terminate_backend($1)", &[&(pid as i32)]).unwrap().get(0);
    assert!(ended, "the store's session {pid} was ended again");
    let r = crate::plan::resolve(&spec(), &settings()).unwrap();
    s.insert_job("{}", &r, NOW).unwrap();
    assert_eq!(s.summary(&r.layout.job_id).unwrap().job_id, r.layout.job_id);
}

/// Stores of one schema hold a server connection only while a statement or transaction runs: many
/// stores opened and kept (a burst's clients), writing from as many threads at once, are served by
/// no more than the process's links to the schema, and each write is there once.
#[cfg(feature = "postgres-tests")]
#[test]
fn stores_of_a_schema_share_a_few_server_connections() {
    use crate::store::pg_links::LINKS_PER_SCHEMA;
    let place = crate::store::test_place::Place::postgres();
    let first = place.open();
    let backends = |s: &Store| -> i64 {
        s.conn.query_row("SELECT pg_backend_pid()", crate::store::sql::params![], |r| r.get(0)).unwrap()
    };
    // Kept open one after another, 40 stores take turns on one connection.
    let kept: Vec<Store> = (0..40).map(|_| place.open()).collect();
    let pids: std::collections::BTreeSet<i64> = kept.iter().map(backends).collect();
    assert_eq!(pids.len(), 1, "40 stores used one after another used {} connections", pids.len());
    // 64 threads, each with a store of its own, write at once.
    let plans: Vec<_> = (0..64).map(|_| crate::plan::resolve(&spec(), &settings()).unwrap()).collect();
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    std::thread::scope(|scope| {
        for p in &plans {
            let (place, seen) = (place.clone(), &seen);
            scope.spawn(move || {
                let s = place.open();
                s.in_transaction(|| {
                    seen.lock().unwrap().insert(backends(&s));
                    s.insert_job("{}", p, NOW)
                })
                .unwrap();
            });
        }
    });
    let used = seen.into_inner().unwrap().len();
    assert!(used <= LINKS_PER_SCHEMA, "64 writers at once used {used} connections, more than {LINKS_PER_SCHEMA}");
    for p in &plans {
        assert_eq!(first.summary(&p.layout.job_id).unwrap().job_id, p.layout.job_id);
    }
    assert_eq!(first.list(false).unwrap().len(), 64);
    drop(kept);
}

both! { fn jobs_recorded_together_are_each_recorded_or_refused_alone(place) {
    let store = place.open();
    let plans: Vec<_> = (0..3).map(|_| crate::plan::resolve(&spec(), &settings()).unwrap()).collect();
    store.in_transaction(|| store.insert_member("{}", &plans[1], &Default::default(), NOW)).unwrap();
    let new = |p: &crate::plan::Plan| crate::store::NewJob {
        spec_json: "{}".into(),
        plan: p.clone(),
        member: Default::default(),
        now: NOW,
    };
    // The middle one is recorded already: it alone is refused, in the same transaction as the others.
    let results = store.record_jobs(plans.iter().map(new).collect());
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(results[1].is_err(), "the same job twice is refused: {results:?}");
    for p in &plans {
        let job = store.summary(&p.layout.job_id).unwrap();
        assert_eq!(job.status, crate::PlatformStatus::Pending, "{}", p.layout.job_id);
    }
    assert_eq!(store.list(false).unwrap().len(), 3);
    let events: Vec<_> = store.events(&plans[0].layout.job_id).unwrap();
    assert_eq!(events.iter().filter(|(_, kind, _)| kind == "created").count(), 1, "{events:?}");
}}

both! { fn a_jobs_kpi_lines_are_capped_on_write_the_first_and_newest_kept(place) {
    let store = place.open();
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    store.insert_job("{}", &plan, NOW).unwrap();
    let id = &plan.layout.job_id;
    let lines: Vec<String> = (0..10_000).map(|i| format!("{{\"cur_iter\":{i}}}")).collect();
    let mut most = 0;
    // 20 lines a refresh (the tail of status.json each reads), some read twice.
    for (n, batch) in lines.chunks(20).enumerate() {
        let mut batch: Vec<&str> = batch.iter().map(String::as_str).collect();
        if n > 0 {
            batch.insert(0, &lines[n * 20 - 1]);
        }
        store.add_kpi_lines(id, &batch, NOW + n as i64).unwrap();
        most = most.max(store.kpi_lines(id).unwrap().len());
    }
    let kept = store.kpi_lines(id).unwrap();
    assert!(most <= crate::kpi::MAX_POINTS_PER_JOB, "{most} lines kept at one time");
    assert!(kept.len() > crate::kpi::MAX_POINTS_PER_JOB / 2, "{}", kept.len());
    assert_eq!(kept[0].1, lines[0]);
    assert_eq!(kept.last().unwrap().1, lines[9_999]);
    let iters: Vec<i64> = kept.iter().map(|(_, l)| l[12..l.len() - 1].parse().unwrap()).collect();
    assert!(iters.windows(2).all(|w| w[0] < w[1]), "oldest first, each once");
}}

both! { fn what_a_refresh_saw_before_a_cancel_never_overwrites_it(place) {
    let store = place.open();
    let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
    let id = plan.layout.job_id.clone();
    store.insert_job("{}", &plan, NOW).unwrap();
    store.set_submitted(&id, "42", "login1", NOW).unwrap();
    // A refresh reads the job Pending, then asks Slurm; meanwhile the job is cancelled.
    let read = store.summary(&id).unwrap();
    store.update_status(&id, &StatusUpdate::bare(PlatformStatus::Canceled, "cancelled by the user"), NOW + 1).unwrap();
    let seen = StatusUpdate {
        slurm_state: Some("PENDING".into()),
        pending_reason: Some("Priority".into()),
        ..StatusUpdate::bare(PlatformStatus::Pending, "waiting, reason Priority")
    };
    store.update_status_of(&id, Some(crate::store::AsRead::of(&read)), &seen, NOW + 2).unwrap();
    assert_eq!(store.summary(&id).unwrap().status, PlatformStatus::Canceled, "the cancel stands");
    // What a refresh reads after the cancel is about the job as it is, and lands.
    let read = store.summary(&id).unwrap();
    let ended = StatusUpdate { slurm_state: Some("CANCELLED".into()), ..StatusUpdate::bare(PlatformStatus::Canceled, "cancelled") };
    store.update_status_of(&id, Some(crate::store::AsRead::of(&read)), &ended, NOW + 3).unwrap();
    assert_eq!(store.summary(&id).unwrap().slurm_state.as_deref(), Some("CANCELLED"));
}}

// A job a warm submit's checks refused is forgotten whole; one that reached Slurm never is.
both! { fn only_a_job_that_never_reached_slurm_is_forgotten(place) {
    let store = place.open();
    let unsent = crate::plan::resolve_with_id(&spec(), &settings(), "aaaaaaaa-2222-4333-8444-555555555555").unwrap();
    let sent = crate::plan::resolve_with_id(&spec(), &settings(), "bbbbbbbb-2222-4333-8444-555555555555").unwrap();
    let member = Member { webhooks: vec!["https://example.org/hook".into()], ..Default::default() };
    store.insert_member("{}", &unsent, &member, NOW).unwrap();
    store.insert_job("{}", &sent, NOW).unwrap();
    store.set_submitted(&sent.layout.job_id, "42", "login1", NOW).unwrap();
    assert!(store.forget_unsent(&unsent.layout.job_id).unwrap());
    assert!(matches!(store.get(&unsent.layout.job_id), Err(StoreError::NotFound(_))));
    assert!(store.events(&unsent.layout.job_id).unwrap().is_empty());
    assert!(!store.forget_unsent(&sent.layout.job_id).unwrap(), "a job Slurm has is kept");
    assert_eq!(store.get(&sent.layout.job_id).unwrap().summary.slurm_job_id.as_deref(), Some("42"));
    assert!(!store.forget_unsent("no-such-job").unwrap());
}}
