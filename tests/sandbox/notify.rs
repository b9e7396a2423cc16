//! Webhook notifications on the sandbox (issue 26): a local HTTP receiver in the test hears a job that
//! fails once (an infrastructure failure, retried) and then completes: started, retried, started,
//! finished, in order, each once, even though the receiver refused the first delivery (retried with
//! backoff) and the monitor is killed and started again. The webhook's token never reaches the log. A
//! pause and a resume are heard too, and the resumed attempt's start is a message of its own.

use crate::common::wait::wait_for;
use crate::common::Env;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A receiver of webhook POSTs: it answers 500 to the first (unless [`Receiver::accepting`]), 200 to
/// the others, and keeps every body it answered 200 to, in order.
pub(crate) struct Receiver {
    pub(crate) port: u16,
    got: Arc<Mutex<Vec<Value>>>,
    refused: Arc<Mutex<usize>>,
}

impl Receiver {
    fn start() -> Receiver {
        Receiver::listen(true)
    }

    /// One that answers 200 to every POST.
    pub(crate) fn accepting() -> Receiver {
        Receiver::listen(false)
    }

    fn listen(refuse_first: bool) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(0));
        let (g, r) = (got.clone(), refused.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(body) = read_request(&mut stream) else { continue };
                let first = {
                    let mut r = r.lock().unwrap();
                    *r += 1;
                    *r == 1 && refuse_first
                };
                let status = if first { "500 Internal Server Error" } else { "200 OK" };
                if !first {
                    g.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                }
                let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Receiver { port, got, refused }
    }

    pub(crate) fn messages(&self) -> Vec<Value> {
        self.got.lock().unwrap().clone()
    }
}

/// One HTTP request's body (by its Content-Length).
fn read_request(stream: &mut std::net::TcpStream) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// A `tao-slurm monitor` whose stderr is kept; returned once it holds the lock.
fn monitor(env: &Env) -> (Child, Arc<Mutex<String>>) {
    let mut child = env.command(&["monitor"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (l, stderr) = (log.clone(), child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            l.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });
    wait_for("the monitor holds its lock", Duration::from_secs(30), Duration::from_millis(100), || {
        log.lock().unwrap().contains("monitor: following")
    });
    (child, log)
}

/// The first run fails with an NCCL error (an infrastructure failure: retried) after a while, so that
/// each run is seen running; the second completes.
const FAILS_ONCE: &str = "m=\"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/failed-once\"; sleep 12; \
    if [ ! -e \"$m\" ]; then touch \"$m\"; echo 'ncclSystemError: NCCL error: unhandled system error' >&2; exit 1; fi; echo recovered";

fn of_job<'a>(messages: &'a [Value], job: &str) -> Vec<&'a Value> {
    messages.iter().filter(|m| m["job_id"] == job).collect()
}

#[test]
fn a_job_that_fails_once_and_completes_is_heard_in_order_each_message_once() {
    let env = Env::isolated();
    let receiver = Receiver::start();
    let hook = format!("json:http://127.0.0.1:{}/hooks/SECRET-TOKEN?key=SECRET-KEY", receiver.port);
    let (mut first_monitor, first_log) = monitor(&env);
    let (job, _) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--notify", &hook, "--shell", "--", FAILS_ONCE]);

    let ours = job_messages(&receiver, &job, 4, "four messages of the job", Duration::from_secs(400));
    let want: Vec<(String, u64)> =
        [("started", 1), ("retried", 1), ("started", 2), ("finished", 2)].map(|(k, a)| (k.to_string(), a)).into();
    assert_eq!(kinds(&ours), want, "{ours:?}");
    for m in &ours {
        assert!(m["text"].as_str().unwrap().contains(&job[..8]), "{m}");
    }
    assert!(*receiver.refused.lock().unwrap() >= 1, "the first delivery was refused and tried again");
    let v = env.status(&job);
    assert_eq!((v["status"].as_str(), v["retries"].as_u64()), (Some("Complete"), Some(1)), "{v}");

    // The refused delivery was logged by the webhook's host only.
    let log = first_log.lock().unwrap().clone();
    assert!(log.contains(&format!("127.0.0.1:{}/***", receiver.port)), "{log}");
    assert!(!log.contains("SECRET"), "{log}");

    // A new monitor sends nothing again: a second job's message arrives after the first's four and
    // nothing else does (one webhook's messages are delivered in order, the oldest first). That job
    // fails with a user error, and its message says so; a Slack-form webhook of the settings gets
    // `{"text"}` only.
    first_monitor.kill().unwrap();
    first_monitor.wait().unwrap();
    let slack = Receiver::start();
    let mut env = env;
    env.vars.insert("TAO_SLURM_NOTIFY".into(), format!("slack:http://127.0.0.1:{}/services/T0/B0/SECRET", slack.port));
    let (mut second_monitor, second_log) = monitor(&env);
    let user_error = "echo 'KeyError: train.num_epochs' >&2; exit 3";
    let (job2, _) =
        env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--notify", &hook, "--shell", "--", user_error]);
    let all = wait_for("the second job's last message", Duration::from_secs(300), Duration::from_millis(300), || {
        let m = receiver.messages();
        if of_job(&m, &job2).iter().any(|x| x["event"] == "failed") {
            Ok(m)
        } else {
            Err(format!("{m:?}"))
        }
    });
    let failed = of_job(&all, &job2).into_iter().find(|x| x["event"] == "failed").unwrap().clone();
    assert_eq!(failed["failure_class"], "user", "{failed}");
    assert!(failed["text"].as_str().unwrap().contains("failed [user]"), "{failed}");
    assert_eq!(
        of_job(&all, &job),
        ours.iter().collect::<Vec<_>>(),
        "each message of the first job once, across the restart"
    );
    assert_eq!(all.len(), 4 + of_job(&all, &job2).len(), "{all:?}");
    let texts =
        wait_for("the Slack-form message of the failure", Duration::from_secs(120), Duration::from_millis(300), || {
            let m = slack.messages();
            if m.iter().any(|x| x["text"].as_str().is_some_and(|t| t.contains(&job2[..8]) && t.contains("failed"))) {
                Ok(m)
            } else {
                Err(format!("{m:?}"))
            }
        });
    second_monitor.kill().unwrap();
    second_monitor.wait().unwrap();
    for t in &texts {
        assert_eq!(t.as_object().map(|o| o.keys().collect::<Vec<_>>()), Some(vec![&"text".to_string()]), "{t}");
        assert!(
            !t["text"].as_str().unwrap().contains(&job[..8]),
            "the settings' webhook hears only the jobs after it was set: {t}"
        );
    }
    assert!(!second_log.lock().unwrap().contains("SECRET"));
}

/// Waits (up to `limit`) until the job's messages number `n`; returns them.
fn job_messages(receiver: &Receiver, job: &str, n: usize, what: &str, limit: Duration) -> Vec<Value> {
    wait_for(what, limit, Duration::from_millis(300), || {
        let m = receiver.messages();
        let ours: Vec<Value> = of_job(&m, job).into_iter().cloned().collect();
        if ours.len() >= n {
            Ok(ours)
        } else {
            Err(format!("{}: {ours:?}", ours.len()))
        }
    })
}

fn kinds(messages: &[Value]) -> Vec<(String, u64)> {
    messages.iter().map(|m| (m["event"].as_str().unwrap().to_string(), m["attempt"].as_u64().unwrap())).collect()
}

#[test]
fn a_pause_and_a_resume_are_heard_and_the_resumed_attempt_starts_anew() {
    let env = Env::isolated();
    let receiver = Receiver::start();
    let hook = format!("json:http://127.0.0.1:{}/hooks", receiver.port);
    let (mut monitor, _) = monitor(&env);
    let (job, _) = env.submit(&["--image", "ubuntu:22.04", "--gpus", "0", "--notify", &hook, "--", "sleep", "600"]);
    job_messages(&receiver, &job, 1, "the job's start", Duration::from_secs(180));
    assert_eq!(env.json(&["pause", &job, "--json"])[0]["status"], "Paused");
    assert!(["Resuming", "Running"].contains(&env.json(&["resume", &job, "--json"])[0]["status"].as_str().unwrap()));
    let heard = job_messages(&receiver, &job, 4, "the resumed attempt's start", Duration::from_secs(180));
    env.ok(&["cancel", &job]);
    let all = job_messages(&receiver, &job, 5, "the cancel", Duration::from_secs(180));
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    let want: Vec<(String, u64)> = [("started", 1), ("paused", 1), ("resumed", 1), ("started", 2), ("canceled", 2)]
        .map(|(k, a)| (k.to_string(), a))
        .into();
    assert_eq!(kinds(&all), want, "{all:?}");
    assert_eq!(&all[..4], &heard[..4]);
    assert!(all[1]["text"].as_str().unwrap().contains("was paused"), "{}", all[1]);
}

/// `submit --notify` with no monitor running starts one (only a monitor sends messages): the job's
/// messages arrive without anyone starting a monitor by hand (issue 41).
#[test]
fn submit_with_notify_and_no_monitor_still_delivers() {
    let env = Env::isolated();
    let receiver = Receiver::start();
    let hook = format!("json:http://127.0.0.1:{}/hooks/x", receiver.port);
    let out = env.run(&["submit", "--image", "ubuntu:22.04", "--gpus", "0", "--notify", &hook, "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("started a background monitor"), "{stderr}");
    let job = String::from_utf8_lossy(&out.stdout).split_whitespace().nth(2).unwrap().to_string();
    let log = std::path::PathBuf::from(format!("{}.monitor.log", env.settings().state_path.display()));
    // The job may end before the monitor sees it run: its `finished` is the message that must come
    // (after one refused delivery: the receiver answers 500 first).
    let finished = crate::common::wait::poll(Duration::from_secs(240), Duration::from_millis(300), || {
        let ours: Vec<Value> = of_job(&receiver.messages(), &job).into_iter().cloned().collect();
        match ours.iter().find(|m| m["event"] == "finished") {
            Some(m) => Ok(m.clone()),
            None => Err(format!("{ours:?}")),
        }
    })
    .unwrap_or_else(|e| panic!("{e:?}; monitor log: {}", std::fs::read_to_string(&log).unwrap_or_default()));
    assert_eq!(
        (finished["job_id"].as_str(), finished["attempt"].as_u64()),
        (Some(job.as_str()), Some(1)),
        "{finished}"
    );
}
