//! Group commit: what many threads ask of the cluster at once goes in few round trips. The first
//! caller while no batch is under way leads: it takes the queue (at most `max` of it, after waiting
//! up to `wait` for it to fill) and does the whole batch in one go with its own client; callers that
//! arrive meanwhile queue, and the next leader takes them together. With no wait, a lone caller
//! waits for nobody, and a batch holds what arrived while the round trip before it was in flight.
//!
//! The engine's queues of a cluster (`engine::group_commit`) and the service's records use it: it
//! knows nothing of either.

use crate::error::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct GroupCommit<T, R> {
    state: Mutex<State<T, R>>,
    changed: Condvar,
}

struct State<T, R> {
    queue: VecDeque<(u64, T)>,
    results: HashMap<u64, Result<R>>,
    leading: bool,
    next_id: u64,
}

impl<T, R> Default for GroupCommit<T, R> {
    fn default() -> Self {
        GroupCommit {
            state: Mutex::new(State { queue: VecDeque::new(), results: HashMap::new(), leading: false, next_id: 0 }),
            changed: Condvar::new(),
        }
    }
}

impl<T, R> GroupCommit<T, R> {
    /// Queue `item` and return its result: done by this thread as the leader of a batch (`work`
    /// gets the batch's items in arrival order and returns one result each, in the same order), or
    /// by another thread's batch.
    pub fn run(&self, item: T, max: usize, wait: Duration, work: impl Fn(Vec<T>) -> Vec<Result<R>>) -> Result<R> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let id = st.next_id;
        st.next_id += 1;
        st.queue.push_back((id, item));
        self.changed.notify_all();
        loop {
            if let Some(r) = st.results.remove(&id) {
                return r;
            }
            if st.leading || !st.queue.iter().any(|(i, _)| *i == id) {
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.leading = true;
            let until = Instant::now() + wait;
            while st.queue.len() < max {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = self.changed.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
            }
            let n = st.queue.len().min(max.max(1));
            let (ids, items): (Vec<u64>, Vec<T>) = st.queue.drain(..n).unzip();
            drop(st);
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(items)));
            st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.leading = false;
            match done {
                Ok(results) => {
                    let mut results = results.into_iter();
                    for i in &ids {
                        let r = results.next().unwrap_or_else(|| {
                            Err(Error::RemoteCommand("internal: the batch gave no result for this member".into()))
                        });
                        st.results.insert(*i, r);
                    }
                }
                Err(_) => {
                    for i in &ids {
                        st.results.insert(*i, Err(Error::RemoteCommand("internal: the batch's leader failed".into())));
                    }
                }
            }
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Threads that arrive while a batch is in flight go together in the next one; every caller gets
    /// its own result; a lone caller is a batch of one.
    #[test]
    fn callers_that_arrive_during_a_batch_go_together_in_the_next() {
        let gc: Arc<GroupCommit<u32, u32>> = Arc::default();
        let batches = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let work = {
            let batches = Arc::clone(&batches);
            move |items: Vec<u32>| {
                batches.lock().unwrap().push(items.clone());
                std::thread::sleep(Duration::from_millis(200));
                items
                    .into_iter()
                    .map(|i| if i == 3 { Err(Error::RemoteCommand("three".into())) } else { Ok(i * 10) })
                    .collect()
            }
        };
        assert_eq!(gc.run(0, 64, Duration::ZERO, &work).unwrap(), 0);
        let first = {
            let (gc, work) = (Arc::clone(&gc), work.clone());
            std::thread::spawn(move || gc.run(1, 64, Duration::ZERO, &work).unwrap())
        };
        std::thread::sleep(Duration::from_millis(50));
        let rest: Vec<_> = (2..8)
            .map(|i| {
                let (gc, work) = (Arc::clone(&gc), work.clone());
                std::thread::spawn(move || gc.run(i, 4, Duration::ZERO, &work))
            })
            .collect();
        assert_eq!(first.join().unwrap(), 10);
        let results: Vec<_> = rest.into_iter().map(|t| t.join().unwrap()).collect();
        for (i, r) in (2..8).zip(&results) {
            match r {
                Ok(v) => assert_eq!(*v, i * 10),
                Err(e) => assert!(i == 3 && e.to_string() == "three", "{i}: {e}"),
            }
        }
        let batches = batches.lock().unwrap();
        assert_eq!(batches[0], vec![0]);
        assert_eq!(batches[1], vec![1]);
        let mut later: Vec<u32> = batches[2..].iter().flatten().copied().collect();
        later.sort();
        assert_eq!(later, vec![2, 3, 4, 5, 6, 7], "{batches:?}");
        assert!(batches[2..].iter().all(|b| b.len() <= 4), "the bound holds: {batches:?}");
        assert!(batches.len() <= 4, "six callers that queued during one batch went in two: {batches:?}");
    }

    /// With a wait, the first waits for the batch to fill (and goes as soon as it is full).
    #[test]
    fn a_wait_lets_a_batch_fill() {
        let gc: Arc<GroupCommit<u32, u32>> = Arc::default();
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..5)
            .map(|i| {
                let (gc, sizes) = (Arc::clone(&gc), Arc::clone(&sizes));
                std::thread::spawn(move || {
                    gc.run(i, 5, Duration::from_secs(30), |items: Vec<u32>| {
                        sizes.lock().unwrap().push(items.len());
                        items.into_iter().map(Ok).collect()
                    })
                })
            })
            .collect();
        let started = Instant::now();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(*sizes.lock().unwrap(), vec![5]);
        assert!(started.elapsed() < Duration::from_secs(20), "a full batch does not wait out its wait");
    }
}
