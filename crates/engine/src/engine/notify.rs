//! Webhook notifications (issue 26), the I/O half: the events recorded since a monitor last looked
//! become queued messages (core `notify` decides which and their words), pending jobs past their limit
//! one each, and a notifier thread beside the monitor delivers what is due, retrying with backoff, so
//! that a slow or dead webhook never holds up a refresh. A message is marked delivered in the store
//! once its webhook answered 2xx and is never sent again, whichever monitor runs next.

use crate::config::Settings;
use crate::error::Result;
use crate::model::{EventRecord, JobSummary};
use crate::notify::{self, Webhook};
use crate::store::Store;
use std::collections::HashMap;
use std::time::Duration;

/// Events read per batch.
const BATCH: usize = 500;
/// A monitor's first look goes back this far (jobs that ended long ago are not announced).
const FIRST_LOOK_SECS: i64 = 3600;
/// How long one delivery may take, and how long a claimed message is another process's.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
const CLAIM_SECS: i64 = 60;

/// Queue the messages of the events since this monitor's cursor and of jobs stuck pending; returns
/// how many were queued. Local work only (the store), in one transaction.
pub fn enqueue(store: &Store, settings: &Settings, active: &[JobSummary], now: i64) -> Result<usize> {
    let name = format!("monitor:{}", settings.cluster.as_deref().unwrap_or(""));
    let ours = notify::parse_webhooks(settings.notify.iter().map(|s| s.expose())).unwrap_or_default();
    let pending = active.iter().any(|j| j.status == crate::status::PlatformStatus::Pending);
    // Nothing new and nobody waiting: no write (the monitor steps every few seconds).
    if !pending && store.notify_cursor(&name)?.is_some_and(|c| store.last_event_id().is_ok_and(|l| l == c)) {
        return Ok(0);
    }
    store.in_transaction(|| {
        let mut queued = 0;
        let mut cursor = store.notify_cursor(&name)?;
        loop {
            let events = store.events_since(cursor.unwrap_or(0), &[], BATCH)?;
            let Some(last) = events.last().map(|e| e.id) else { break };
            let first_look = cursor.is_none();
            let wanted = events.iter().filter(|e| !first_look || e.at >= now - FIRST_LOOK_SECS);
            queued += enqueue_events(store, settings, &ours, wanted, now)?;
            cursor = Some(last);
            if events.len() < BATCH {
                break;
            }
        }
        store.set_notify_cursor(&name, cursor.unwrap_or(0))?;
        let limit = i64::from(settings.notify_pending_minutes) * 60;
        for job in active.iter().filter(|j| j.cluster == settings.cluster) {
            if let Some(n) = notify::stuck_pending(job, now, limit).map(|n| n.of_person(settings.person.as_deref())) {
                queued += queue(store, &n, &webhooks_of(store, &job.job_id, &ours)?, now)?;
            }
        }
        Ok(queued)
    })
}

fn enqueue_events<'a>(
    store: &Store,
    settings: &Settings,
    ours: &[Webhook],
    events: impl Iterator<Item = &'a EventRecord>,
    now: i64,
) -> Result<usize> {
    let mut events: Vec<&EventRecord> =
        events.filter(|e| notify::NoticeKind::of_event(&e.kind, &e.detail).is_some()).collect();
    // With no webhook in the settings, only jobs with their own have anyone to tell: the others'
    // events are passed over without reading their jobs (a burst of creates is hundreds of them).
    if ours.is_empty() {
        let ids: std::collections::BTreeSet<&str> = events.iter().map(|e| e.job_id.as_str()).collect();
        let told = store.jobs_with_webhooks(&ids.into_iter().collect::<Vec<_>>())?;
        events.retain(|e| told.contains(&e.job_id));
    }
    let mut jobs: HashMap<String, (JobSummary, Vec<EventRecord>)> = HashMap::new();
    let mut queued = 0;
    for e in events {
        if !jobs.contains_key(&e.job_id) {
            let Ok(job) = store.summary(&e.job_id) else { continue };
            let history = store.events_since(0, &[e.job_id.as_str()], usize::MAX)?;
            jobs.insert(e.job_id.clone(), (job, history));
        }
        let (job, history) = &jobs[&e.job_id];
        let attempt = notify::attempt_of_event(history, e.id);
        let class =
            store.attempts(&job.job_id)?.into_iter().find(|a| a.number == attempt).and_then(|a| a.failure_class);
        let Some(notice) = notify::notice_of(e, job, attempt, class.as_deref()) else { continue };
        // The settings' webhooks are for the jobs of their cluster; a job's own, for it wherever it runs.
        let ours_too = job.cluster == settings.cluster;
        let theirs: &[Webhook] = if ours_too { ours } else { &[] };
        let notice = if ours_too { notice.of_person(settings.person.as_deref()) } else { notice };
        queued += queue(store, &notice, &webhooks_of(store, &job.job_id, theirs)?, now)?;
    }
    Ok(queued)
}

/// The webhooks a job's messages go to: the settings' (given) and its own.
fn webhooks_of(store: &Store, job_id: &str, ours: &[Webhook]) -> Result<Vec<Webhook>> {
    let own = store.job_webhooks(job_id)?;
    let mut all = ours.to_vec();
    all.extend(notify::parse_webhooks(own.iter().map(String::as_str)).unwrap_or_default());
    Ok(all)
}

fn queue(store: &Store, notice: &notify::Notice, hooks: &[Webhook], now: i64) -> Result<usize> {
    let mut queued = 0;
    for hook in hooks {
        let body = notify::body(hook, notice).to_string();
        queued += usize::from(store.enqueue_notification(&notice.key, &hook.url, &notice.job_id, &body, now)?);
    }
    Ok(queued)
}

/// The HTTP client deliveries use (rustls; no proxy from the environment would see the URLs' tokens
/// any less than the webhook host does, so the usual proxy variables apply). Redirects are not
/// followed: a webhook's message goes to the URL configured, never to one its host names (a 3xx is a
/// failed delivery, logged).
pub fn http_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(POST_TIMEOUT)
        .connect_timeout(POST_TIMEOUT)
        .user_agent(concat!("tao-slurm/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("the HTTP client builds")
}

/// Deliver each webhook's oldest due message (one per webhook per call, so order holds); returns how
/// many were delivered. A failure is tried again after `notify::backoff_secs`, and given up after
/// `notify::MAX_TRIES`. Logs name a webhook only as `notify::redact_url` shows it.
pub fn deliver_due(store: &Store, http: &reqwest::blocking::Client, now: impl Fn() -> i64) -> Result<usize> {
    let mut delivered = 0;
    for m in store.due_notifications(now())? {
        if !store.claim_notification(m.id, now(), now() + CLAIM_SECS)? {
            continue;
        }
        let shown = notify::redact_url(&m.url);
        match post(http, &m.url, &m.body) {
            Ok(()) => {
                store.notification_delivered(m.id, now())?;
                tracing::info!(job = %m.job_id, webhook = %shown, "notification delivered");
                delivered += 1;
            }
            Err(error) => {
                let tries = m.tries + 1;
                let next = (tries < notify::MAX_TRIES).then(|| now() + notify::backoff_secs(tries));
                tracing::warn!(job = %m.job_id, webhook = %shown, tries, gave_up = next.is_none(), "notification failed: {error}");
                store.notification_failed(m.id, &error, next, now())?;
            }
        }
    }
    Ok(delivered)
}

/// POST a JSON body; the error in words without the URL (reqwest's own names it).
fn post(http: &reqwest::blocking::Client, url: &str, body: &str) -> std::result::Result<(), String> {
    let res = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .map_err(|e| e.without_url().to_string())?;
    if res.status().is_success() {
        Ok(())
    } else if res.status().is_redirection() {
        Err(format!("HTTP {}: a redirect, not followed", res.status().as_u16()))
    } else {
        Err(format!("HTTP {}", res.status().as_u16()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::PlatformStatus;
    use crate::store::StatusUpdate;
    use serde_json::Value;
    use tao_slurm_core::fixtures::{settings, spec};

    const NOW: i64 = 1_800_000_000;

    fn job(store: &Store, hooks: &[&str]) -> String {
        let plan = crate::plan::resolve(&spec(), &settings()).unwrap();
        let member =
            crate::store::Member { webhooks: hooks.iter().map(|h| h.to_string()).collect(), ..Default::default() };
        store.in_transaction(|| store.insert_member("{}", &plan, &member, NOW - 7200)).unwrap();
        store.set_submitted(&plan.layout.job_id, "41", "login1", NOW - 7200).unwrap();
        plan.layout.job_id.clone()
    }

    fn bodies(store: &Store) -> Vec<(String, Value)> {
        store
            .due_notifications(i64::MAX - 1)
            .unwrap()
            .into_iter()
            .map(|m| (m.url, serde_json::from_str(&m.body).unwrap()))
            .collect()
    }

    #[test]
    fn events_become_messages_once_and_a_first_look_skips_the_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let old = job(&store, &["json:http://own/x"]);
        store.update_status(&old, &StatusUpdate::bare(PlatformStatus::Running, "old"), NOW - 7200).unwrap();
        let id = job(&store, &["json:http://own/x"]);
        let mut s = settings();
        s.notify = vec![crate::spec::Secret::new("slack:http://team/hook")];
        s.notify_pending_minutes = 0;
        store.update_status(&id, &StatusUpdate::bare(PlatformStatus::Running, "on n1"), NOW - 10).unwrap();
        assert_eq!(
            enqueue(&store, &s, &[], NOW).unwrap(),
            2,
            "the new job's start, to its own webhook and the settings'"
        );
        assert_eq!(enqueue(&store, &s, &[], NOW).unwrap(), 0, "nothing new");
        store.update_status(&id, &StatusUpdate::bare(PlatformStatus::Complete, "exit 0"), NOW).unwrap();
        assert_eq!(enqueue(&store, &s, &[], NOW).unwrap(), 2);
        let got = bodies(&store);
        let own: Vec<&str> =
            got.iter().filter(|(u, _)| u == "http://own/x").map(|(_, b)| b["event"].as_str().unwrap()).collect();
        assert_eq!(own, ["started"], "the oldest due per webhook");
        let team = got.iter().find(|(u, _)| u == "http://team/hook").unwrap();
        assert_eq!(team.1.as_object().unwrap().keys().collect::<Vec<_>>(), ["text"]);
        assert!(got.iter().all(|(_, b)| b.to_string().contains(&id[..8])), "the old job is not announced: {got:?}");
    }

    /// With no webhook in the settings, a batch of events is narrowed to the jobs with webhooks of
    /// their own (one query) before any job is read: those are still told, the others not.
    #[test]
    fn with_no_webhook_in_the_settings_only_jobs_with_their_own_are_told() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let hooked = job(&store, &["http://own/x"]);
        let silent = job(&store, &[]);
        for id in [&hooked, &silent] {
            store.update_status(id, &StatusUpdate::bare(PlatformStatus::Running, "on n1"), NOW - 10).unwrap();
        }
        let with = store.jobs_with_webhooks(&[hooked.as_str(), silent.as_str()]).unwrap();
        assert_eq!(with, std::collections::HashSet::from([hooked.clone()]));
        assert_eq!(enqueue(&store, &settings(), &[], NOW).unwrap(), 1, "the hooked job's start only");
        let got = bodies(&store);
        assert!(got.iter().all(|(u, b)| u == "http://own/x" && b.to_string().contains(&hooked[..8])), "{got:?}");
    }

    #[test]
    fn a_job_pending_past_the_limit_is_announced_once_per_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let id = job(&store, &["http://own/x"]);
        let mut s = settings();
        s.notify_pending_minutes = 60;
        let pending = store.summary(&id).unwrap();
        assert_eq!(pending.status, PlatformStatus::Pending);
        assert_eq!(enqueue(&store, &s, std::slice::from_ref(&pending), NOW).unwrap(), 1);
        assert_eq!(enqueue(&store, &s, std::slice::from_ref(&pending), NOW + 60).unwrap(), 0);
        assert_eq!(bodies(&store)[0].1["event"], "stuck_pending");
    }

    #[test]
    fn a_redirect_is_a_failed_delivery_and_is_not_followed() {
        use std::io::{Read, Write};
        // The webhook's host answers 302 to another listener on this machine.
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let location = format!("http://{}/stolen", elsewhere.local_addr().unwrap());
        let hook_addr = hook.local_addr().unwrap();
        let receiver = std::thread::spawn(move || {
            let (mut c, _) = hook.accept().unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // Headers, then the body (its length is known from the header).
            while !String::from_utf8_lossy(&seen).contains("\"text\"") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            let reply =
                format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            c.write_all(reply.as_bytes()).unwrap();
            String::from_utf8_lossy(&seen).into_owned()
        });
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let id = job(&store, &[&format!("slack:http://{hook_addr}/hook")]);
        store.update_status(&id, &StatusUpdate::bare(PlatformStatus::Running, "on n1"), NOW - 10).unwrap();
        assert_eq!(enqueue(&store, &settings(), &[], NOW).unwrap(), 1);
        assert_eq!(deliver_due(&store, &http_client(), || NOW).unwrap(), 0, "not delivered");
        let request = receiver.join().unwrap();
        assert!(request.starts_with("POST /hook "), "{request}");
        // The delivery call has returned: a redirect followed would have connected by now.
        elsewhere.set_nonblocking(true).unwrap();
        let heard = elsewhere.accept();
        assert!(
            matches!(&heard, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the redirect's target heard nothing: {heard:?}"
        );
        assert_eq!(store.notification_errors().unwrap(), [Some("HTTP 302: a redirect, not followed".to_string())]);
    }
}
