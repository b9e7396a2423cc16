//! A workspace: one cluster profile, its clients and its monitor. The monitor is one thread per
//! workspace that refreshes every active job of the cluster in one round trip at the monitor's pace
//! (whatever the number of HTTP clients), performs due retries, and publishes what it learned to the
//! cache that every request reads. Requests that must reach the cluster (create, cancel, logs, the
//! cluster view, log followers) first take a place in the workspace's bounded [`RemotePool`] (503
//! when it stays full), then borrow a client on a blocking thread.
//!
//! [`RemotePool`]: super::limits::RemotePool

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use tao_slurm_engine::client::{now_secs, Monitor, TransportStats, AFTER_FAILURE};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::Client;

/// Idle clients kept per workspace.
const MAX_IDLE: usize = 4;

#[derive(Default)]
pub struct Counters {
    pub refreshes: AtomicU64,
    pub refresh_errors: AtomicU64,
    pub round_trips: AtomicU64,
    pub refresh_round_trips: AtomicU64,
    pub logins: AtomicU64,
    pub active_jobs: AtomicUsize,
    /// Milliseconds.
    pub interval_ms: AtomicU64,
    pub last_refresh_at: AtomicU64,
    /// Reads of the log followers of this workspace's jobs.
    pub follower_reads: AtomicU64,
    /// Retries so far by failure class, as the state file had them after the last refresh.
    pub retries: Mutex<Vec<(String, u64)>>,
}

/// Who may use a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The operator's (a cluster profile, or `default`): the orgs it is granted to, which share its
    /// Unix identity.
    Shared(Vec<String>),
    /// Made by an org through the API: that org only.
    Owned(String),
}

/// Whose Unix identity a workspace's jobs run under.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Identity {
    /// Its settings' `slurm_user`, for every org and person that uses it.
    #[default]
    Shared,
    /// Each person's own (`identity = "person"`, see `people`): a person's jobs go to a workspace of
    /// their own under this one; this one reaches no cluster itself. Person -> Unix user, as mapped.
    PerPerson(std::collections::BTreeMap<String, String>),
    /// One person's, under a per-person workspace (its id says which, [`person_workspace_id`]; its
    /// settings carry the person and their user).
    Person,
}

/// The id of `user`'s workspace under the per-person workspace `parent` (`@` is in no profile or org
/// workspace id).
pub fn person_workspace_id(parent: &str, user: &str) -> String {
    format!("{parent}@{user}")
}

/// (parent, user) of a person's workspace id; None for any other workspace.
pub fn split_person_workspace_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('@')
}

/// The workspace a job shows under: a person's counts under its per-person workspace.
pub fn shown_workspace(id: &str) -> &str {
    split_person_workspace_id(id).map_or(id, |(parent, _)| parent)
}

/// Run before a client of the workspace may log in (a person's certificate renewed when due);
/// whether it renewed the credentials (connections made with the old ones are then let go).
pub type BeforeLogin = Box<dyn Fn() -> Result<bool, String> + Send + Sync>;

pub struct Workspace {
    /// The profile's name, `default`, the id of an org's workspace, or `PARENT@USER` for a person's.
    pub id: String,
    /// What its owner calls it.
    pub name: String,
    pub settings: Settings,
    pub access: Access,
    /// The operator's policy for this workspace (every org's own policy applies too).
    pub policy: tao_slurm_core::policy::Policy,
    /// When an org made it.
    pub created_at: Option<i64>,
    /// Its preflight passed: jobs may go to it.
    pub ready: AtomicBool,
    /// Deleted: its monitor stops.
    pub stopped: AtomicBool,
    /// Its logins ended for good (a person whose access ended): no call starts on it, and a call or
    /// monitor cycle under way ends its connection when it returns, so no master of theirs outlives it.
    logins_ended: AtomicBool,
    /// The monitor lock of its cluster, held while this service follows it.
    pub monitor_lock: Mutex<Option<tao_slurm_engine::client::MonitorLock>>,
    /// Idle clients, each with the credentials' generation it last logged in under.
    idle: Mutex<Vec<(Client, u64)>>,
    /// Bumped when the credentials are renewed: a client of an older one lets its connections go
    /// before its next call (a person's master never outlives their certificate).
    credentials: AtomicU64,
    pub counters: Counters,
    pub last_error: Mutex<Option<String>>,
    /// Set to ask the monitor for an early refresh (after a submit or a cancel).
    wake: (Mutex<bool>, Condvar),
    /// The cluster view, cached: (when, the view as JSON-ready value).
    pub cluster_view: tokio::sync::Mutex<Option<(Instant, super::types::ClusterOut)>>,
    /// Bounds the remote work requests cause (the monitor's refreshes are outside it).
    pub pool: super::limits::RemotePool,
    /// Job creates under way ([`super::limits::CREATES_AT_ONCE`]): apart from `pool`, since they go
    /// to the cluster in batches.
    pub creates: super::limits::RemotePool,
    /// Whether its monitor thread runs (a stopping service waits for it to finish its cycle).
    monitor_running: (Mutex<bool>, Condvar),
    /// Whether this replica follows its cluster now (see `replica`).
    pub lease: super::lease::LeaseState,
    pub identity: Identity,
    pub before_login: Option<BeforeLogin>,
    /// The service's rule on the engine's automatic restarts, given to every client of it (set
    /// when its monitor starts: `policy::restart_gate`).
    pub restart_gate: std::sync::OnceLock<tao_slurm_engine::client::RestartGate>,
}

/// Says the monitor stopped, however its thread ends.
struct MonitorDone<'a>(&'a Workspace);

impl Drop for MonitorDone<'_> {
    fn drop(&mut self) {
        let (lock, cv) = &self.0.monitor_running;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = false;
        cv.notify_all();
    }
}

fn add(total: &AtomicU64, before: u64, after: u64) {
    total.fetch_add(after.saturating_sub(before), Ordering::Relaxed);
}

impl Workspace {
    pub fn new(id: String, settings: Settings, access: Access) -> Workspace {
        Workspace {
            name: id.clone(),
            id,
            creates: super::limits::RemotePool::creates(&settings),
            settings,
            access,
            policy: Default::default(),
            created_at: None,
            ready: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            logins_ended: AtomicBool::new(false),
            monitor_lock: Mutex::new(None),
            idle: Mutex::new(Vec::new()),
            credentials: AtomicU64::new(0),
            counters: Counters::default(),
            last_error: Mutex::new(None),
            wake: (Mutex::new(false), Condvar::new()),
            cluster_view: tokio::sync::Mutex::new(None),
            pool: Default::default(),
            monitor_running: (Mutex::new(false), Condvar::new()),
            lease: Default::default(),
            identity: Identity::Shared,
            before_login: None,
            restart_gate: std::sync::OnceLock::new(),
        }
    }

    /// A new client of it, with the service's rule on automatic restarts when it has one.
    fn new_client(&self) -> tao_slurm_engine::Result<Client> {
        let client = Client::new(self.settings.clone())?;
        Ok(match self.restart_gate.get() {
            Some(gate) => client.with_restart_gate(gate.clone()),
            None => client,
        })
    }

    /// What must happen before a client of it logs in (see [`BeforeLogin`]); the credentials'
    /// generation to log in under. Renewed ones end the idle clients' connections now.
    fn ready_to_log_in(&self) -> tao_slurm_engine::Result<u64> {
        let renewed = match &self.before_login {
            Some(f) => f().map_err(tao_slurm_engine::Error::RemoteCommand)?,
            None => false,
        };
        if renewed {
            let old: Vec<(Client, u64)> = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
            self.credentials.fetch_add(1, Ordering::SeqCst);
            // The login's connection is shared: stopping it through any client stops it for all, and
            // a new client would otherwise ride it.
            match old.first() {
                Some((c, _)) => c.retire_connections(),
                None => Client::new(self.settings.clone())?.retire_connections(),
            }
        }
        Ok(self.credentials.load(Ordering::SeqCst))
    }

    /// `client` under the credentials of `generation`: one of an older generation lets its
    /// connections go first.
    fn under(&self, client: &Client, last: u64, generation: u64) {
        if last != generation {
            client.retire_connections();
        }
    }

    /// Whether `org` may use it.
    pub fn usable_by(&self, org: &str) -> bool {
        match &self.access {
            Access::Shared(orgs) => orgs.iter().any(|o| o == org),
            Access::Owned(owner) => owner == org,
        }
    }

    fn account(&self, before: TransportStats, after: TransportStats) {
        add(&self.counters.round_trips, before.round_trips, after.round_trips);
        add(&self.counters.logins, before.logins, after.logins);
    }

    /// Run `f` with a client of this workspace (blocking: call it from a blocking thread).
    pub fn with_client<T>(
        &self,
        f: impl FnOnce(&Client) -> tao_slurm_engine::Result<T>,
    ) -> tao_slurm_engine::Result<T> {
        if self.logins_ended.load(Ordering::SeqCst) {
            return Err(tao_slurm_engine::Error::RemoteCommand(format!(
                "workspace {}: its logins ended (the person's access ended)",
                self.id
            )));
        }
        let generation = self.ready_to_log_in()?;
        let reused = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let client = match reused {
            Some((c, last)) => {
                self.under(&c, last, generation);
                c
            }
            None => self.new_client()?,
        };
        let before = client.transport_stats();
        let result = f(&client);
        self.account(before, client.transport_stats());
        if self.logins_ended.load(Ordering::SeqCst) {
            // Closed while it ran: a connection it opened after the close ends with it.
            client.end_connections();
            return result;
        }
        // Renewed while it ran: it lets its sessions go now rather than keep the old login alive idle.
        let now = self.credentials.load(Ordering::SeqCst);
        self.under(&client, generation, now);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((client, now));
        }
        result
    }

    /// Stop its monitor (the workspace was deleted) and let go of the cluster's monitor lock.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.monitor_lock.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.wake_monitor();
    }

    /// End its logins now (a person whose access ended): its idle clients dropped, the master of
    /// its login closed at once with every session on it (`ssh -O exit`).
    pub fn end_logins(&self) {
        self.logins_ended.store(true, Ordering::SeqCst);
        let idle: Vec<(Client, u64)> = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        match idle.first() {
            Some((c, _)) => c.end_connections(),
            None => match Client::new(self.settings.clone()) {
                Ok(c) => c.end_connections(),
                Err(e) => tracing::warn!(workspace = %self.id, error = %e, "cannot end a workspace's logins"),
            },
        }
    }

    /// Stop its monitor after the cycle under way (the service is stopping: a retry or resumed
    /// submission in progress finishes); [`Workspace::wait_for_monitor`] waits for it.
    pub fn stop_monitor(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.wake_monitor();
    }

    /// Wait at most `limit` for the monitor thread to end; whether it did.
    pub fn wait_for_monitor(&self, limit: Duration) -> bool {
        let (lock, cv) = &self.monitor_running;
        let running = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (running, _) = cv.wait_timeout_while(running, limit, |r| *r).unwrap_or_else(|e| e.into_inner());
        !*running
    }

    /// Ask the monitor to refresh soon (it still keeps to the query budget).
    pub fn wake_monitor(&self) {
        let (lock, cv) = &self.wake;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }

    /// Sleep until `deadline`, or until woken and `earliest` has passed; whether it was woken.
    fn sleep_until(&self, earliest: Instant, deadline: Instant) -> bool {
        let (lock, cv) = &self.wake;
        let mut woken = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            let stopping = self.stopped.load(Ordering::Relaxed);
            if *woken && (now >= earliest || stopping) {
                *woken = false;
                return true;
            }
            if now >= deadline {
                return false;
            }
            let until = if *woken { earliest.min(deadline) } else { deadline };
            woken = cv.wait_timeout(woken, until - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The monitor: while this replica holds the workspace's lease (`lease` takes or renews it
    /// every `renew_every`, with the monitor's client, whose writes it fences), refresh and publish
    /// at the monitor's pace; while another does, publish what the shared state
    /// says every [`super::lease::OBSERVE_EVERY`]. Until the workspace is deleted or the service
    /// stops.
    pub fn run_monitor(&self, publish: &dyn Fn(&Client), lease: &dyn Fn(&Client) -> bool, renew_every: Duration) {
        *self.monitor_running.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let _done = MonitorDone(self);
        let client = loop {
            match self.new_client() {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(workspace = %self.id, error = %e, "monitor cannot open the state file; retrying in 10 s");
                    std::thread::sleep(Duration::from_secs(10));
                }
            }
        };
        let mut monitor = Monitor::new(&self.settings);
        let mut under = self.credentials.load(Ordering::SeqCst);
        let floor = tao_slurm_engine::monitor::budget_floor(self.settings.max_queries_per_minute);
        let (mut last, mut next) = (Instant::now(), Instant::now());
        while !self.stopped.load(Ordering::Relaxed) {
            let held = lease(&client);
            if Instant::now() >= next {
                last = Instant::now();
                let interval =
                    if held { self.refresh(&client, &mut monitor, &mut under) } else { super::lease::OBSERVE_EVERY };
                publish(&client);
                next = last + interval;
            }
            // Woken (a submit or cancel): the next cycle now, though not before the budget's floor.
            if self.sleep_until(last + floor, next.min(Instant::now() + renew_every)) {
                next = Instant::now();
            }
        }
        if self.logins_ended.load(Ordering::SeqCst) {
            // Its logins ended while its last cycle ran: that cycle's connection ends with it.
            client.end_connections();
        }
    }

    /// One refresh of the monitor, with its counts; the interval until the next.
    fn refresh(&self, client: &Client, monitor: &mut Monitor, under: &mut u64) -> Duration {
        let before = client.transport_stats();
        let result = self.ready_to_log_in().and_then(|generation| {
            self.under(client, *under, generation);
            *under = generation;
            monitor.step(client)
        });
        let after = client.transport_stats();
        self.account(before, after);
        add(&self.counters.refresh_round_trips, before.round_trips, after.round_trips);
        self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        self.counters.last_refresh_at.store(now_secs() as u64, Ordering::Relaxed);
        let interval = match result {
            Ok(step) => {
                *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.counters.active_jobs.store(step.active, Ordering::Relaxed);
                step.interval
            }
            Err(e) => {
                self.counters.refresh_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(workspace = %self.id, error = %e, "refresh failed; the cached state stays as it was");
                *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                AFTER_FAILURE
            }
        };
        self.counters.interval_ms.store(interval.as_millis() as u64, Ordering::Relaxed);
        match client.retries_by_class() {
            Ok(r) => *self.counters.retries.lock().unwrap_or_else(|e| e.into_inner()) = r,
            Err(e) => tracing::warn!(workspace = %self.id, error = %e, "cannot count the retries"),
        }
        interval
    }
}
