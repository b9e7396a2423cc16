//! Webhook notifications (issue 26): which entries of a job's history are worth a message, the
//! message's words and JSON forms (Slack-compatible `{"text"}` and a generic one), the key that makes
//! each message one delivery and the pace of retried deliveries (the webhooks themselves:
//! `webhook`). Pure: the engine finds the events, stores the outbox and sends.

use crate::model::{EventRecord, JobSummary};
use crate::status::PlatformStatus;
use serde::Serialize;

pub use crate::webhook::{parse_webhooks, redact_url, Format, Webhook};

/// A state change a webhook hears of: from the job's recorded events, as [`NoticeKind::of_event`]
/// maps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    Started,
    Finished,
    Failed,
    Canceled,
    Retried,
    Preempted,
    StuckPending,
    /// Paused: by `pause` (its allocation released) or suspended by Slurm.
    Paused,
    /// A paused job's new attempt asked for (`resume`).
    Resumed,
    /// Every GPU of the job idle for its idle time (`gpu_idle` events).
    GpuIdle,
    /// A node's GPUs idle and no progress for its hang time (`gpu_hung` events).
    GpuHung,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Started => "started",
            NoticeKind::Finished => "finished",
            NoticeKind::Failed => "failed",
            NoticeKind::Canceled => "canceled",
            NoticeKind::Retried => "retried",
            NoticeKind::Preempted => "preempted",
            NoticeKind::StuckPending => "stuck_pending",
            NoticeKind::Paused => "paused",
            NoticeKind::Resumed => "resumed",
            NoticeKind::GpuIdle => "gpu_idle",
            NoticeKind::GpuHung => "gpu_hung",
        }
    }

    /// The notice an event is, if any: a status event by the status it reached, a scheduled retry
    /// or a `retry` asked for, a preemption, a resume. A resubmission (the retry's new Slurm job) is
    /// no second `retried`.
    pub fn of_event(kind: &str, detail: &str) -> Option<NoticeKind> {
        match kind {
            "status" => match status_of_detail(detail)? {
                PlatformStatus::Running => Some(NoticeKind::Started),
                PlatformStatus::Complete => Some(NoticeKind::Finished),
                PlatformStatus::Error => Some(NoticeKind::Failed),
                PlatformStatus::Canceled => Some(NoticeKind::Canceled),
                PlatformStatus::Paused => Some(NoticeKind::Paused),
                PlatformStatus::Pending | PlatformStatus::Pausing | PlatformStatus::Resuming => None,
            },
            "retry" if !is_resubmission(detail) => Some(NoticeKind::Retried),
            "retried" => Some(NoticeKind::Retried),
            "preempted" => Some(NoticeKind::Preempted),
            "resumed" => Some(NoticeKind::Resumed),
            "gpu_idle" => Some(NoticeKind::GpuIdle),
            "gpu_hung" => Some(NoticeKind::GpuHung),
            _ => None,
        }
    }
}

/// Whether an event begins the job's next attempt: a scheduled retry, a preemption's resubmission,
/// Slurm's restart of the same job (a timeout requeue), a resume, a `retry` (the store records
/// each of these with the new attempt).
fn begins_attempt(kind: &str, detail: &str) -> bool {
    match kind {
        "retry" => !is_resubmission(detail),
        "preempted" | "restarted" | "resumed" | "retried" => true,
        _ => false,
    }
}

/// The detail of the event of a retry's (or resumed submission's) new Slurm job.
pub fn resubmitted_detail(attempt: u32, slurm_job_id: &str) -> String {
    format!("attempt {attempt} is Slurm job {slurm_job_id}")
}

/// Whether a detail is [`resubmitted_detail`]'s (a scheduled retry's says `attempt 1 failed ...`).
fn is_resubmission(detail: &str) -> bool {
    detail
        .strip_prefix("attempt ")
        .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_digit()))
        .is_some_and(|rest| rest.starts_with(" is Slurm job "))
}

/// The detail of a status event: `Running (Slurm RUNNING): message`.
pub fn status_detail(status: PlatformStatus, slurm_state: Option<&str>, message: &str) -> String {
    format!("{} (Slurm {}): {message}", status.as_str(), slurm_state.unwrap_or("-"))
}

/// The status a status event's detail names ([`status_detail`]'s form).
fn status_of_detail(detail: &str) -> Option<PlatformStatus> {
    PlatformStatus::parse(detail.split(" (Slurm ").next()?)
}

/// One message about one job, as both JSON forms carry it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    /// Unique per message: a second enqueueing of the same change adds nothing.
    #[serde(skip)]
    pub key: String,
    pub event: NoticeKind,
    pub job_id: String,
    pub name: Option<String>,
    pub attempt: u32,
    /// The failure class of a failed job (`user`, `timeout`, `infra`, ...).
    pub failure_class: Option<String>,
    pub detail: String,
    /// Unix seconds.
    pub at: i64,
    pub text: String,
    /// The person the job is theirs (a team service's person workspace); absent elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl Notice {
    /// The notice of a person's job: named in the text and the `user` field.
    pub fn of_person(mut self, person: Option<&str>) -> Notice {
        if let Some(p) = person {
            self.text = format!("{} (for {p})", self.text);
            self.user = Some(p.to_string());
        }
        self
    }
}

/// The notice of a recorded event about `attempt` of `job` (see [`attempt_of_event`]), with that
/// attempt's failure class. Keyed by job, attempt and kind (a status event of a new Slurm state while
/// a job keeps running is not a second `started`); a preemption, a pause and a resume by their event.
pub fn notice_of(event: &EventRecord, job: &JobSummary, attempt: u32, failure_class: Option<&str>) -> Option<Notice> {
    let kind = NoticeKind::of_event(&event.kind, &event.detail)?;
    let key = match kind {
        NoticeKind::Preempted | NoticeKind::Paused | NoticeKind::Resumed => {
            format!("{}:event:{}", job.job_id, event.id)
        }
        _ => format!("{}:{attempt}:{}", job.job_id, kind.as_str()),
    };
    let class = if kind == NoticeKind::Failed { failure_class.map(str::to_string) } else { None };
    Some(notice(key, kind, job, attempt, class, event.detail.clone(), event.at))
}

/// The attempt an event of a job is about: 1 + the attempts begun before it (`history`: the job's
/// events). The event that begins one (a retry's, a resume's) is about the attempt before it.
pub fn attempt_of_event(history: &[EventRecord], event_id: i64) -> u32 {
    let begun = history.iter().filter(|e| e.id < event_id && begins_attempt(&e.kind, &e.detail)).count();
    1 + begun as u32
}

/// The notice of a job pending longer than `limit_secs` since its current attempt reached Slurm,
/// once per attempt (None: not pending, not submitted, or not that long).
pub fn stuck_pending(job: &JobSummary, now: i64, limit_secs: i64) -> Option<Notice> {
    let since = job.submitted_at?;
    if job.status != PlatformStatus::Pending || limit_secs <= 0 || now - since < limit_secs {
        return None;
    }
    let detail = format!("pending for {} min: {}", (now - since) / 60, job.message);
    let key = format!("{}:{}:{}", job.job_id, job.attempt, NoticeKind::StuckPending.as_str());
    Some(notice(key, NoticeKind::StuckPending, job, job.attempt, None, detail, now))
}

fn notice(
    key: String,
    event: NoticeKind,
    job: &JobSummary,
    attempt: u32,
    failure_class: Option<String>,
    detail: String,
    at: i64,
) -> Notice {
    let who = job.name.as_deref().map_or_else(|| short(&job.job_id), |n| format!("{n} ({})", short(&job.job_id)));
    let class = failure_class.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default();
    let text = format!("tao-slurm job {who} {}{class}, attempt {attempt}: {detail}", words(event));
    Notice {
        key,
        event,
        job_id: job.job_id.clone(),
        name: job.name.clone(),
        attempt,
        failure_class,
        detail,
        at,
        text,
        user: None,
    }
}

fn short(id: &str) -> String {
    id.chars().take(8).collect()
}

fn words(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Started => "started",
        NoticeKind::Finished => "finished",
        NoticeKind::Failed => "failed",
        NoticeKind::Canceled => "was canceled",
        NoticeKind::Retried => "is retried",
        NoticeKind::Preempted => "was preempted",
        NoticeKind::StuckPending => "is stuck pending",
        NoticeKind::Paused => "was paused",
        NoticeKind::Resumed => "is resumed",
        NoticeKind::GpuIdle => "has idle GPUs",
        NoticeKind::GpuHung => "is hung",
    }
}

/// The body `hook` gets for a notice. Slack's text is escaped by Slack's rules (`&`, `<`, `>`), so that
/// a job's name or message (the user's, or the job's own words) cannot become a link, a mention or
/// markup in the channel.
pub fn body(hook: &Webhook, notice: &Notice) -> serde_json::Value {
    match hook.format {
        Format::Slack => serde_json::json!({ "text": slack_escape(&notice.text) }),
        Format::Generic => serde_json::to_value(notice).expect("a notice serialises"),
    }
}

/// Text as Slack shows it literally: `&` `<` `>` as `&amp;` `&lt;` `&gt;` (Slack's control characters).
pub fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Tries of one delivery before it is given up.
pub const MAX_TRIES: u32 = 8;

/// Seconds before the next try after `tries` failed ones: 5 s doubling, at most 10 min.
pub fn backoff_secs(tries: u32) -> i64 {
    (5i64 << tries.saturating_sub(1).min(10)).min(600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobSummary {
        let plan =
            crate::plan::resolve_with_id(&crate::fixtures::spec(), &crate::fixtures::settings(), "abcdef1234").unwrap();
        let mut job = crate::fixtures::summary(&plan, Some("7"), 0);
        job.name = Some("train".into());
        job.status = PlatformStatus::Running;
        job.message = "waiting".into();
        job.attempt = 2;
        (job.nodes, job.gpus_per_node, job.timeout_seconds) = (1, 1, 60);
        job
    }

    fn event(id: i64, kind: &str, detail: &str) -> EventRecord {
        EventRecord { id, job_id: "abcdef1234".into(), at: 100, kind: kind.into(), detail: detail.into() }
    }

    #[test]
    fn events_map_to_notices_as_the_table_says() {
        let table = [
            ("status", status_detail(PlatformStatus::Running, Some("RUNNING"), "on n1"), Some(NoticeKind::Started)),
            ("status", status_detail(PlatformStatus::Complete, Some("COMPLETED"), "ok"), Some(NoticeKind::Finished)),
            ("status", status_detail(PlatformStatus::Error, Some("FAILED"), "exit 3"), Some(NoticeKind::Failed)),
            ("status", status_detail(PlatformStatus::Canceled, None, "by user"), Some(NoticeKind::Canceled)),
            ("status", status_detail(PlatformStatus::Pending, Some("PENDING"), "Resources"), None),
            ("status", status_detail(PlatformStatus::Paused, None, "paused by tao-slurm"), Some(NoticeKind::Paused)),
            ("status", status_detail(PlatformStatus::Pausing, Some("RUNNING"), "saving"), None),
            ("status", status_detail(PlatformStatus::Resuming, None, "resumed"), None),
            ("resumed", "resumed from /r/epoch-3.pth".to_string(), Some(NoticeKind::Resumed)),
            ("retried", "retried from /r/epoch-3.pth".to_string(), Some(NoticeKind::Retried)),
            ("restarted", "attempt 2 (timeout)".to_string(), None),
            ("retry", "infra failure: node lost; retry 1 in 30 s".to_string(), Some(NoticeKind::Retried)),
            (
                "retry",
                "attempt 1 failed on node1 (ncclSystemError); retry 1 of 10 in 1 s, excluding node1".to_string(),
                Some(NoticeKind::Retried),
            ),
            ("retry", resubmitted_detail(2, "77"), None),
            ("preempted", "by a higher priority job".to_string(), Some(NoticeKind::Preempted)),
            ("submitted", "Slurm job 7 via h".to_string(), None),
        ];
        for (kind, detail, want) in table {
            assert_eq!(NoticeKind::of_event(kind, &detail), want, "{kind} {detail}");
        }
    }

    #[test]
    fn a_notice_is_keyed_by_job_attempt_and_kind_and_a_failure_carries_its_class() {
        let j = job();
        let started =
            notice_of(&event(1, "status", &status_detail(PlatformStatus::Running, Some("RUNNING"), "")), &j, 2, None)
                .unwrap();
        let again = notice_of(
            &event(2, "status", &status_detail(PlatformStatus::Running, Some("COMPLETING"), "")),
            &j,
            2,
            None,
        )
        .unwrap();
        assert_eq!(started.key, again.key, "a new Slurm state while running is no second start");
        assert_eq!(started.key, "abcdef1234:2:started");
        let failed = notice_of(
            &event(3, "status", &status_detail(PlatformStatus::Error, Some("FAILED"), "exit 3")),
            &j,
            2,
            Some("user"),
        )
        .unwrap();
        assert_eq!(failed.failure_class.as_deref(), Some("user"));
        assert!(failed.text.contains("train (abcdef12) failed [user], attempt 2"), "{}", failed.text);
        let retried = notice_of(&event(4, "retry", "infra"), &j, 1, Some("infra")).unwrap();
        assert_eq!((retried.key.as_str(), retried.failure_class.clone()), ("abcdef1234:1:retried", None));
        let history = [
            event(1, "status", &status_detail(PlatformStatus::Running, None, "")),
            event(2, "retry", "infra failure"),
            event(3, "retry", &resubmitted_detail(2, "9")),
            event(4, "status", &status_detail(PlatformStatus::Running, None, "")),
        ];
        let attempts: Vec<u32> = history.iter().map(|e| attempt_of_event(&history, e.id)).collect();
        assert_eq!(attempts, [1, 1, 2, 2], "a retry's own event is about the attempt that failed");
        // Every way to a new attempt counts, so each attempt's start is heard of once of its own.
        let history = [
            event(1, "status", &status_detail(PlatformStatus::Running, None, "")),
            event(2, "status", &status_detail(PlatformStatus::Paused, None, "paused")),
            event(3, "resumed", "from epoch-2.pth"),
            event(4, "status", &status_detail(PlatformStatus::Running, None, "")),
            event(5, "restarted", "attempt 3 (timeout)"),
            event(6, "preempted", "on node2"),
            event(7, "status", &status_detail(PlatformStatus::Error, None, "exit 1")),
            event(8, "retried", "from epoch-5.pth"),
            event(9, "status", &status_detail(PlatformStatus::Running, None, "")),
        ];
        let attempts: Vec<u32> = history.iter().map(|e| attempt_of_event(&history, e.id)).collect();
        assert_eq!(attempts, [1, 1, 1, 2, 2, 3, 4, 4, 5]);
        let keys: Vec<String> = history
            .iter()
            .filter_map(|e| notice_of(e, &j, attempt_of_event(&history, e.id), None).map(|n| n.key))
            .collect();
        assert_eq!(
            keys,
            [
                "abcdef1234:1:started",
                "abcdef1234:event:2",
                "abcdef1234:event:3",
                "abcdef1234:2:started",
                "abcdef1234:event:6",
                "abcdef1234:4:failed",
                "abcdef1234:4:retried",
                "abcdef1234:5:started"
            ]
        );
    }

    #[test]
    fn stuck_pending_is_once_per_attempt_after_the_limit() {
        let mut j = job();
        j.status = PlatformStatus::Pending;
        j.submitted_at = Some(1000);
        assert_eq!(stuck_pending(&j, 1000 + 599, 600), None);
        let n = stuck_pending(&j, 1000 + 600, 600).unwrap();
        assert_eq!(n.key, "abcdef1234:2:stuck_pending");
        assert_eq!(stuck_pending(&j, 5000, 0), None, "0 turns it off");
        j.status = PlatformStatus::Running;
        assert_eq!(stuck_pending(&j, 5000, 600), None);
    }

    #[test]
    fn webhooks_choose_their_form_and_bodies_follow_it() {
        let slack = Webhook::parse("https://hooks.slack.com/services/T0/B0/SECRET").unwrap();
        assert_eq!(slack.format, Format::Slack);
        let generic = Webhook::parse("http://127.0.0.1:9/hook?token=x").unwrap();
        assert_eq!(generic.format, Format::Generic);
        assert_eq!(Webhook::parse("slack:http://127.0.0.1:9/h").unwrap().format, Format::Slack);
        assert_eq!(Webhook::parse("json:https://hooks.slack.com/x").unwrap().format, Format::Generic);
        assert!(Webhook::parse("ftp://x/y").is_err());
        let err = Webhook::parse("file:///etc/SECRET").unwrap_err();
        assert!(!err.contains("SECRET"), "{err}");
        let j = job();
        let n =
            notice_of(&event(1, "status", &status_detail(PlatformStatus::Running, Some("RUNNING"), "")), &j, 2, None)
                .unwrap();
        assert_eq!(body(&slack, &n), serde_json::json!({"text": n.text}));
        // A name (or a message) with Slack's markup is shown as typed: no link, mention or broadcast.
        let mut named = job();
        named.name = Some("<!channel> <https://evil.example|click> a&b".into());
        let n = notice_of(
            &event(1, "status", &status_detail(PlatformStatus::Running, Some("RUNNING"), "<@U1>")),
            &named,
            2,
            None,
        )
        .unwrap();
        let text = body(&slack, &n)["text"].as_str().unwrap().to_string();
        assert!(text.contains("&lt;!channel&gt; &lt;https://evil.example|click&gt; a&amp;b"), "{text}");
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert_eq!(body(&generic, &n)["name"], named.name.clone().unwrap(), "the JSON form keeps the name as it is");
        let g = body(&generic, &n);
        assert_eq!(
            (g["event"].as_str(), g["job_id"].as_str(), g["attempt"].as_u64()),
            (Some("started"), Some("abcdef1234"), Some(2))
        );
        assert!(g["text"].is_string() && g.get("key").is_none());
        assert!(g.get("user").is_none(), "no person: no field");
        // A person's job: both forms name them.
        let theirs = n.clone().of_person(Some("ada"));
        assert_eq!(body(&generic, &theirs)["user"], "ada");
        assert!(body(&slack, &theirs)["text"].as_str().unwrap().ends_with("(for ada)"));
        assert_eq!(n.clone().of_person(None), n);
        assert_eq!(parse_webhooks(["http://a/x, https://b/y", "http://c"]).unwrap().len(), 3);
    }

    #[test]
    fn a_url_is_logged_without_its_path_query_or_user() {
        assert_eq!(redact_url("https://hooks.slack.com/services/T0/B0/SECRET"), "https://hooks.slack.com/***");
        assert_eq!(redact_url("http://127.0.0.1:8080?token=SECRET"), "http://127.0.0.1:8080/***");
        assert_eq!(redact_url("https://user:SECRET@host.example/x"), "https://host.example/***");
        assert_eq!(redact_url("http://host"), "http://host");
        assert_eq!(redact_url("SECRET"), "***");
    }

    #[test]
    fn a_job_file_names_webhooks_that_the_staged_spec_never_holds() {
        let spec = crate::spec::JobSpec::from_toml(
            "image = \"ubuntu\"\ncommand = [\"true\"]\nnotify = [\"https://hooks.slack.com/T/B/TOKEN\"]",
        )
        .unwrap();
        assert_eq!(spec.notify, ["https://hooks.slack.com/T/B/TOKEN"]);
        let flags = crate::spec::JobSpec { notify: vec!["json:http://h/x".into()], ..Default::default() };
        assert_eq!(spec.clone().overlay(flags).notify.len(), 2, "--notify adds to the file's");
        assert!(!serde_json::to_string(&spec).unwrap().contains("TOKEN"));
    }

    #[test]
    fn backoff_doubles_from_5s_to_10min() {
        assert_eq!((1..=9).map(backoff_secs).collect::<Vec<_>>(), [5, 10, 20, 40, 80, 160, 320, 600, 600]);
    }
}
