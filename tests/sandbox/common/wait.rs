//! Waiting in the integration tests, in one place: a deadline, a poll interval, a condition, and on
//! timeout a message naming what was awaited and what was seen last. The sandbox is shared and at
//! times slow: a deadline only bounds a wait (so that a broken job fails the test instead of hanging
//! it); it is never what a test checks.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// What one look at the condition found: the awaited value, or (`Err`) what was seen instead, for
/// the timeout's message. A condition answers a `bool`, an `Option` or a `Result` whose error says
/// what was seen (a job's status, say).
pub trait Look {
    type Value;
    fn into_result(self) -> Result<Self::Value, String>;
}

impl Look for bool {
    type Value = ();
    fn into_result(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err(String::new())
        }
    }
}

impl<T> Look for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

impl<T, E: Display> Look for Result<T, E> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// A look at `value`: found when `done` holds for it, else what was seen.
pub fn when<T>(value: T, done: impl FnOnce(&T) -> bool) -> Result<T, T> {
    if done(&value) {
        Ok(value)
    } else {
        Err(value)
    }
}

/// Look every `every` until the condition holds and return what it found; panics naming `what`
/// (and what was seen last) once `limit` has passed without it.
pub fn wait_for<L: Look>(what: &str, limit: Duration, every: Duration, look: impl FnMut() -> L) -> L::Value {
    poll(limit, every, look).unwrap_or_else(|seen| panic!("{}", timed_out(what, limit, &seen)))
}

/// [`wait_for`] for a condition that needs `.await` (the service's HTTP API, the browser).
pub async fn wait_for_async<L: Look, F: Future<Output = L>>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut look: impl FnMut() -> F,
) -> L::Value {
    let start = Instant::now();
    loop {
        match look().await.into_result() {
            Ok(value) => return value,
            Err(seen) if start.elapsed() >= limit => panic!("{}", timed_out(what, limit, &seen)),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// [`wait_for`] for a wait whose deadline is not a failure: `Err` with what was seen last once
/// `limit` has passed.
pub fn poll<L: Look>(limit: Duration, every: Duration, mut look: impl FnMut() -> L) -> Result<L::Value, String> {
    let start = Instant::now();
    loop {
        match look().into_result() {
            Ok(value) => return Ok(value),
            Err(seen) if start.elapsed() >= limit => return Err(seen),
            Err(_) => std::thread::sleep(every),
        }
    }
}

fn timed_out(what: &str, limit: Duration, seen: &str) -> String {
    if seen.is_empty() {
        format!("{what}: not so after {limit:?}")
    } else {
        format!("{what}: not so after {limit:?}; last seen: {seen}")
    }
}

#[test]
fn a_wait_returns_what_it_found_and_a_timeout_names_what_was_awaited_and_seen() {
    let mut looks = 0;
    let found = wait_for("the third look", Duration::from_secs(5), Duration::ZERO, || {
        looks += 1;
        when(looks, |n| *n == 3)
    });
    assert_eq!((found, looks), (3, 3));
    let timed_out = std::panic::catch_unwind(|| {
        wait_for("a job that never ends", Duration::from_millis(50), Duration::from_millis(10), || {
            Err::<(), _>("Running")
        })
    })
    .unwrap_err();
    let message = timed_out.downcast_ref::<String>().unwrap();
    assert_eq!(message, "a job that never ends: not so after 50ms; last seen: Running");
    assert_eq!(poll(Duration::ZERO, Duration::ZERO, || false), Err(String::new()), "one look, then the deadline");
}
