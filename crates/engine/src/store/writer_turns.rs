//! Writers of one SQLite file in this process take turns before SQLite's own write lock. A thread
//! that waits for its turn sleeps until the writer before it is done, where writers that all go
//! straight to SQLite's lock poll it: a burst of the service's creates, each on a connection of its
//! own, spent its time in those polls while the lock was free. Other processes (another replica, the
//! CLI) still meet SQLite's lock. A turn not given within the wait is gone without, so a thread that
//! writes through a second connection of a file while it holds a turn waits as it did before.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a writer waits for its turn: SQLite's busy wait (`sql::wait_while_busy`) is as long.
pub const WAIT: Duration = Duration::from_secs(10);

/// One file's turns.
#[derive(Default)]
struct Turns {
    taken: Mutex<bool>,
    freed: Condvar,
}

/// A writer's turn: the next writer of the file goes when it is dropped.
pub struct Turn(&'static Turns);

impl Drop for Turn {
    fn drop(&mut self) {
        *self.0.taken.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.freed.notify_one();
    }
}

/// Wait at most `wait` for the turn to write `path`; None when it did not come (the writer then
/// meets SQLite's lock as it is).
pub fn take(path: &str, wait: Duration) -> Option<Turn> {
    let turns = of(path);
    let until = Instant::now() + wait;
    let mut taken = turns.taken.lock().unwrap_or_else(|e| e.into_inner());
    while *taken {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        taken = turns.freed.wait_timeout(taken, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    *taken = true;
    Some(Turn(turns))
}

/// The turns of `path`, made on first use and kept for the process (a few files per process).
fn of(path: &str) -> &'static Turns {
    static ALL: OnceLock<Mutex<HashMap<String, &'static Turns>>> = OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    // Looked up first: every write transaction comes here, and only a new file's needs a key made.
    if let Some(turns) = all.get(path) {
        return turns;
    }
    all.entry(path.to_string()).or_insert_with(|| Box::leak(Box::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn writers_of_one_file_go_one_at_a_time_and_of_others_at_once() {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
                std::thread::spawn(move || {
                    let _turn = take("/turns-test/a.db", Duration::from_secs(10)).expect("a turn within the wait");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "one writer at a time");
        // Another file's turn is its own.
        let _a = take("/turns-test/b.db", Duration::ZERO).unwrap();
        assert!(take("/turns-test/c.db", Duration::ZERO).is_some());
    }

    #[test]
    fn a_turn_not_given_within_the_wait_is_gone_without() {
        let held = take("/turns-test/held.db", Duration::ZERO).unwrap();
        assert!(take("/turns-test/held.db", Duration::from_millis(20)).is_none());
        drop(held);
        assert!(take("/turns-test/held.db", Duration::ZERO).is_some(), "given back when dropped");
    }
}
