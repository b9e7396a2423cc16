//! A process's connections to one PostgreSQL schema, shared by all its stores of that schema. A store
//! holds one only while it runs a statement or a transaction: clients that wait on the cluster (a
//! service's burst of creates, each with a client of its own, waiting for their batch's round trip)
//! hold none, so a stock server's 100 connections are not what bounds a burst. At most
//! [`LINKS_PER_SCHEMA`] are open at once; a store that finds none free within [`WAIT`] opens one
//! more, so a thread that holds one while it asks for a second is delayed, never stuck.

use super::pg_tls::Way;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Connections one process keeps open to one schema, in use or idle.
pub const LINKS_PER_SCHEMA: usize = 16;
/// How long a store waits for a free connection before it opens one over the limit.
pub const WAIT: Duration = Duration::from_secs(10);

/// One server connection and the statements prepared on it.
pub struct Link {
    pub client: postgres::Client,
    pub statements: HashMap<(String, Vec<u32>), postgres::Statement>,
}

/// Where the links of one schema go to and come from.
pub struct Home {
    config: postgres::Config,
    way: Way,
    /// `SET search_path TO <schema>`, run on each new connection.
    search_path: String,
    /// The key of this schema's write lock (see `Pg::begin`).
    pub lock_key: i32,
    links: Mutex<Links>,
    freed: Condvar,
}

struct Links {
    idle: Vec<Link>,
    /// Open links, idle or in use.
    open: usize,
    /// Stores of this schema in the process: with none left, the idle links are closed.
    users: usize,
    /// The migrations this process found applied (their count).
    migrated: usize,
}

/// The home of `(target, schema)` in this process (`key` names both), made by `make` if new.
pub fn home_of<E>(key: &str, make: impl FnOnce() -> Result<Home, E>) -> Result<Arc<Home>, E> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<Home>>>> = OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(home) = all.get(key) {
        return Ok(Arc::clone(home));
    }
    let home = Arc::new(make()?);
    all.insert(key.to_string(), Arc::clone(&home));
    Ok(home)
}

/// Opening waits for a server that says it is starting up (57P03, "cannot connect now"): a database
/// started beside the service (a pod restarted as a whole) answers that for a few seconds. At most
/// this many tries, half a second apart (about a minute; counted, the store reads no clock).
const STARTING_UP_TRIES: u32 = 120;

impl Home {
    pub fn new(config: postgres::Config, way: Way, schema: &str, search_path: String) -> Home {
        // The lock's key: a stable hash of the schema's name (FNV-1a), so every process agrees.
        let hash = schema.bytes().fold(0x811c9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x01000193));
        Home {
            config,
            way,
            search_path,
            lock_key: hash as i32,
            links: Mutex::new(Links { idle: Vec::new(), open: 0, users: 0, migrated: 0 }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A store of this schema begins (see [`Home::leave`]).
    pub fn enter(&self) {
        self.lock().users += 1;
    }

    /// A store of this schema ends: the last one closes the idle links.
    pub fn leave(&self) {
        let closed = {
            let mut links = self.lock();
            links.users = links.users.saturating_sub(1);
            if links.users > 0 {
                return;
            }
            // The next store checks the schema again (it may have been dropped meanwhile).
            links.migrated = 0;
            links.open -= links.idle.len();
            std::mem::take(&mut links.idle)
        };
        drop(closed);
    }

    /// Whether this process already found `n` migrations applied.
    pub fn migrated(&self, n: usize) -> bool {
        self.lock().migrated >= n
    }

    pub fn set_migrated(&self, n: usize) {
        let mut links = self.lock();
        links.migrated = links.migrated.max(n);
    }

    /// A link for one statement or transaction: an idle one, else a new one while fewer than
    /// [`LINKS_PER_SCHEMA`] are open, else the first freed within [`WAIT`], else a new one.
    pub fn take(&self) -> Result<Link, postgres::Error> {
        let until = Instant::now() + WAIT;
        let mut links = self.lock();
        loop {
            while let Some(link) = links.idle.pop() {
                if !link.client.is_closed() {
                    return Ok(link);
                }
                links.open -= 1;
            }
            let left = until.saturating_duration_since(Instant::now());
            if links.open < LINKS_PER_SCHEMA || left.is_zero() {
                break;
            }
            links = self.freed.wait_timeout(links, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        links.open += 1;
        drop(links);
        self.connect().inspect_err(|_| {
            self.lock().open -= 1;
            self.freed.notify_one();
        })
    }

    fn connect(&self) -> Result<Link, postgres::Error> {
        let mut tries = 1;
        let mut client = loop {
            match self.way.connect(&self.config) {
                Err(e) if e.code().is_some_and(|c| c.code() == "57P03") && tries < STARTING_UP_TRIES => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(500));
                }
                other => break other?,
            }
        };
        client.batch_execute(&self.search_path)?;
        Ok(Link { client, statements: HashMap::new() })
    }

    /// A link done with, for the next statement.
    pub fn give_back(&self, link: Link) {
        let mut links = self.lock();
        if link.client.is_closed() || links.open > LINKS_PER_SCHEMA {
            links.open -= 1;
            drop(links);
            drop(link);
        } else {
            links.idle.push(link);
        }
        self.freed.notify_one();
    }

    /// A link closed: dropped mid-transaction (the server rolls it back), or `lost`, when the idle
    /// ones are closed with it, since a lost connection most often means the server restarted.
    pub fn close(&self, link: Link, lost: bool) {
        let closed = {
            let mut links = self.lock();
            links.open -= 1;
            if lost {
                links.open -= links.idle.len();
                std::mem::take(&mut links.idle)
            } else {
                Vec::new()
            }
        };
        drop((link, closed));
        self.freed.notify_all();
    }
}
