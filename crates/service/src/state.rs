//! The service's shared state: workspaces, the job cache every request reads, tokens, counters.
//!
//! The cache is a snapshot of every API job, rebuilt from the state file after each monitor refresh
//! and after each change a request makes (submit, cancel, delete), and swapped in whole: a request
//! reads it without a lock held across anything and never causes a round trip to a cluster. Each job
//! is kept with its reply already serialised, and the revision at which it last changed (for the
//! event streams).

use super::token_info::TokenInfo;
use super::types::{self, BackendDetailsOut, JobOut, SlurmMetadata, TaoStatus};
use super::workspace::Workspace;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tao_slurm_engine::client::JobView;
use tao_slurm_engine::client::{ApiJob, ServiceRecords};
use tao_slurm_engine::Client;

/// One job in the cache.
pub struct CachedJob {
    pub out: JobOut,
    /// `out` as JSON.
    pub json: Arc<str>,
    pub status: tao_slurm_engine::PlatformStatus,
    pub attempt: u32,
    pub created_at: i64,
    pub updated_at: i64,
    /// The snapshot version at which this job last changed.
    pub rev: u64,
    /// What decides whether it changed.
    key: ChangeKey,
}

#[derive(Debug, Clone, PartialEq)]
struct ChangeKey {
    updated_at: i64,
    status: tao_slurm_engine::PlatformStatus,
    attempt: u32,
    message: String,
    slurm_job_id: Option<String>,
    slurm_state: Option<String>,
    next_retry_at: Option<i64>,
}

impl ChangeKey {
    fn of(v: &JobView) -> ChangeKey {
        ChangeKey {
            updated_at: v.updated_at,
            status: v.status,
            attempt: v.attempt,
            message: v.message.clone(),
            slurm_job_id: v.slurm_job_id.clone(),
            slurm_state: v.slurm_state.clone(),
            next_retry_at: v.next_retry_at,
        }
    }
}

#[derive(Default)]
pub struct Snapshot {
    pub version: u64,
    /// Persistent collections: a new snapshot shares every entry it did not change with the old.
    pub jobs: imbl::HashMap<String, Arc<CachedJob>>,
    /// Newest first.
    pub order: imbl::Vector<Arc<CachedJob>>,
    /// Each org's jobs not in a terminal status (its policy's `max_active_jobs` counts them at each
    /// create): kept as jobs change, not counted over every job.
    pub active: imbl::HashMap<String, u32>,
    /// Jobs that left the cache (deleted), with the version at which they did; the last thousand.
    pub removed: Vec<(u64, String, String)>,
}

/// Makes a workspace's settings: the service's own settings with these laid over them as flags.
pub type SettingsMaker = Box<
    dyn Fn(std::collections::BTreeMap<String, String>) -> tao_slurm_engine::Result<tao_slurm_engine::config::Settings>
        + Send
        + Sync,
>;

pub struct AppState {
    workspaces: RwLock<Vec<Arc<Workspace>>>,
    /// Persons' own workspaces under the per-person ones (`people`): reached by id, never listed.
    persons: RwLock<Vec<Arc<Workspace>>>,
    /// The SSH certificate authority of per-person workspaces (`serve --ssh-ca-key`), and how long
    /// each certificate it signs is valid, in seconds.
    pub authority: Option<Arc<super::certificates::Authority>>,
    pub certificate_secs: u64,
    /// TensorBoard's own host name (`serve --tensorboard-host`), if the operator gave one.
    pub tensorboard_host: Option<String>,
    /// Sign-in through the team's identity provider (`[sign_in]`), when the operator named one.
    pub sign_in: Option<Arc<super::sign_in::SignIn>>,
    /// The service's records: each part of the service takes only the facet it works on.
    pub records: ServiceRecords,
    /// The operator's rules (clusters.toml).
    pub operator: super::operator::Operator,
    /// The cipher of the orgs' stored secrets; None when the operator set no key file.
    pub secret_box: Option<super::org_secrets::SecretBox>,
    /// Settings for the orgs' own workspaces.
    pub make_settings: SettingsMaker,
    /// The state file (the service's database, its keys and monitor locks lie beside it).
    pub state_path: std::path::PathBuf,
    metas: RwLock<HashMap<String, Arc<ApiJob>>>,
    /// When the records were last read from the database, and the state file's jobs found not to be
    /// the API's then (the command line's), by when they were checked.
    metas_read: Mutex<(Instant, HashMap<String, Instant>)>,
    snapshot: RwLock<Arc<Snapshot>>,
    publish_lock: Mutex<()>,
    /// Jobs waiting for [`AppState::publish_jobs`], by the store they are read from.
    publish_pending: Mutex<HashMap<String, Vec<String>>>,
    /// The stores whose active jobs were given their places (see [`AppState::publish`]).
    places_kept: Mutex<std::collections::HashSet<String>>,
    pub version_tx: tokio::sync::watch::Sender<u64>,
    /// sha256 -> token.
    pub tokens: RwLock<HashMap<String, TokenInfo>>,
    tokens_version: AtomicI64,
    /// When the tokens were last read (or found unchanged): a set older than
    /// `TOKENS_KEPT_WHILE_AWAY_SECS` is not kept through a database outage.
    tokens_read_at: AtomicI64,
    pub started: Instant,
    pub http_requests: AtomicU64,
    pub open_streams: AtomicI64,
    pub followers: super::followers::Followers,
    pub rate_limits: super::limits::RateLimits,
    /// Per org: what its tokens asked (what `/stats` shows the org).
    pub org_counts: Mutex<HashMap<String, OrgCounts>>,
    /// What `/metrics` shows beyond the counters above.
    pub metrics: super::request_metrics::Metrics,
    /// Cancelled when the service is asked to stop: readiness fails, event streams end, new
    /// connections are refused, requests in flight finish.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Held by the readiness probe running.
    pub readiness_probe: tokio::sync::Mutex<()>,
    /// This process's name among the service's replicas (the holder of the leases it takes).
    pub replica_id: String,
    /// How long its leases last without renewal (`serve --lease-secs`).
    pub lease_secs: i64,
    /// The jobs' TensorBoards the service forwards, and who may reach them.
    pub tensorboards: super::tensorboard_sessions::Sessions,
    /// Workspace places taken by this replica's creates in flight, between their check and their
    /// record (see `policy::admit_workspace`; the record's insert counts every replica's again).
    pub workspace_places: super::places::Places,
}

/// How long the tokens read last are kept while the database cannot be read (then none is accepted).
pub const TOKENS_KEPT_WHILE_AWAY_SECS: i64 = 120;

/// What one org's tokens asked of the service.
#[derive(Debug, Clone, Default)]
pub struct OrgCounts {
    pub http_requests: u64,
    pub open_streams: i64,
}

impl AppState {
    pub fn new(
        workspaces: Vec<Arc<Workspace>>,
        records: ServiceRecords,
        operator: super::operator::Operator,
        secret_box: Option<super::org_secrets::SecretBox>,
        make_settings: SettingsMaker,
        state_path: std::path::PathBuf,
    ) -> Result<AppState, String> {
        let metas = records.jobs().list()?.into_iter().map(|j| (j.job_id.clone(), Arc::new(j))).collect();
        let state = AppState {
            workspaces: RwLock::new(workspaces),
            persons: RwLock::new(Vec::new()),
            authority: None,
            certificate_secs: super::certificates::DEFAULT_CERTIFICATE_SECS,
            tensorboard_host: None,
            sign_in: None,
            records,
            operator,
            secret_box,
            make_settings,
            state_path,
            metas: RwLock::new(metas),
            metas_read: Mutex::new((Instant::now(), HashMap::new())),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            publish_lock: Mutex::new(()),
            publish_pending: Mutex::new(HashMap::new()),
            places_kept: Mutex::new(std::collections::HashSet::new()),
            version_tx: tokio::sync::watch::channel(0).0,
            tokens: RwLock::new(HashMap::new()),
            tokens_version: AtomicI64::new(i64::MIN),
            tokens_read_at: AtomicI64::new(0),
            started: Instant::now(),
            http_requests: AtomicU64::new(0),
            open_streams: AtomicI64::new(0),
            followers: Default::default(),
            rate_limits: Default::default(),
            org_counts: Default::default(),
            metrics: Default::default(),
            shutdown: Default::default(),
            readiness_probe: Default::default(),
            tensorboards: Default::default(),
            workspace_places: Default::default(),
            replica_id: super::lease::new_id(),
            lease_secs: super::lease::LEASE_SECS,
        };
        state.reload_tokens()?;
        Ok(state)
    }

    /// Every workspace (the operator's, then the orgs').
    pub fn workspaces(&self) -> Vec<Arc<Workspace>> {
        self.workspaces.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every workspace with a monitor: the operator's, the orgs' and the persons'.
    pub fn monitored_workspaces(&self) -> Vec<Arc<Workspace>> {
        let mut all = self.workspaces();
        all.extend(self.persons.read().unwrap_or_else(|e| e.into_inner()).iter().cloned());
        all
    }

    /// A workspace by id, whoever may use it (for jobs already recorded in it): a person's too.
    pub fn workspace(&self, id: &str) -> Option<Arc<Workspace>> {
        let find = |list: &RwLock<Vec<Arc<Workspace>>>| {
            list.read().unwrap_or_else(|e| e.into_inner()).iter().find(|w| w.id == id).cloned()
        };
        find(&self.workspaces).or_else(|| find(&self.persons))
    }

    /// The jobs the API created, as the records were read last (at start, or by the last publish).
    pub fn api_jobs(&self) -> Vec<Arc<ApiJob>> {
        self.metas.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The API's record of a job (None: not a job the API created), read from the database when
    /// this replica has not read it yet (another replica created it just now).
    pub fn api_job(&self, id: &str) -> Result<Option<Arc<ApiJob>>, String> {
        if let Some(meta) = self.metas.read().unwrap_or_else(|e| e.into_inner()).get(id) {
            return Ok(Some(Arc::clone(meta)));
        }
        Ok(self.records.jobs().list()?.into_iter().find(|j| j.job_id == id).map(Arc::new))
    }

    /// Add a person's workspace, unless one of its id is there already; the one kept.
    pub fn add_person_workspace(&self, w: Arc<Workspace>) -> (Arc<Workspace>, bool) {
        let mut list = self.persons.write().unwrap_or_else(|e| e.into_inner());
        if let Some(there) = list.iter().find(|x| x.id == w.id) {
            return (there.clone(), false);
        }
        list.push(w.clone());
        (w, true)
    }

    /// The persons' own workspaces this replica has open.
    pub fn person_workspaces(&self) -> Vec<Arc<Workspace>> {
        self.persons.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Take a person's workspace out of the service (the caller stops it); the one taken out.
    pub fn remove_person_workspace(&self, id: &str) -> Option<Arc<Workspace>> {
        let mut list = self.persons.write().unwrap_or_else(|e| e.into_inner());
        let i = list.iter().position(|w| w.id == id)?;
        Some(list.remove(i))
    }

    /// The workspaces `org` may use.
    pub fn org_workspaces(&self, org: &str) -> Vec<Arc<Workspace>> {
        self.workspaces().into_iter().filter(|w| w.usable_by(org)).collect()
    }

    /// A workspace `org` may use (one it may not is as if it did not exist). Never a person's: a
    /// request reaches a person's workspace only through its parent and the signed-in person
    /// (`identity`), whatever id it names.
    pub fn org_workspace(&self, org: &str, id: &str) -> Option<Arc<Workspace>> {
        self.workspaces().into_iter().find(|w| w.id == id).filter(|w| w.usable_by(org))
    }

    /// The workspace an org's job without one goes to: the only one it may use, else `default`.
    pub fn default_workspace(&self, org: &str) -> Option<Arc<Workspace>> {
        let mine = self.org_workspaces(org);
        if mine.len() == 1 {
            return mine.into_iter().next();
        }
        mine.into_iter().find(|w| w.id == "default")
    }

    pub fn add_workspace(&self, w: Arc<Workspace>) {
        self.workspaces.write().unwrap_or_else(|e| e.into_inner()).push(w);
    }

    /// Take a workspace out (its monitor stops); false when there was none of that id.
    pub fn remove_workspace(&self, id: &str) -> bool {
        let mut list = self.workspaces.write().unwrap_or_else(|e| e.into_inner());
        let Some(i) = list.iter().position(|w| w.id == id) else { return false };
        list.remove(i).stop();
        true
    }

    /// Every secret value `org` has (stored, or mapped by the operator from the service's environment).
    pub fn org_secret_values(&self, org: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
        super::org_secrets::org_values(
            &self.records.secrets(),
            self.secret_box.as_ref(),
            org,
            &self.operator.org(org),
            &|n| std::env::var(n).ok(),
        )
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Read the tokens again if `tao-slurm token` changed them since the last read. While the database
    /// cannot be read, the set read last is kept for at most `TOKENS_KEPT_WHILE_AWAY_SECS` (reads are
    /// answered through a short outage; a revocation needs the database too, so none can land meanwhile
    /// beyond the one-second reload), then no token is accepted until the tokens are read again.
    pub fn reload_tokens(&self) -> Result<(), String> {
        let read = self.read_tokens_if_changed();
        self.keep_tokens(read, tao_slurm_engine::clock::now())
    }

    /// Read the tokens now: this process just made one (its own writes do not move the database's
    /// change count it watches).
    pub fn reload_tokens_now(&self) -> Result<(), String> {
        self.tokens_version.store(i64::MIN, Ordering::Relaxed);
        self.reload_tokens()
    }

    /// The tokens, if the database changed since the last read (None: unchanged).
    fn read_tokens_if_changed(&self) -> Result<Option<HashMap<String, TokenInfo>>, String> {
        let tokens = self.records.tokens();
        let version = tokens.version()?;
        if self.tokens_version.load(Ordering::Relaxed) == version {
            return Ok(None);
        }
        let admins = tokens.admin_ids()?;
        let tokens = tokens
            .valid()?
            .into_iter()
            .map(|t| {
                let admin = admins.contains(&t.id);
                let info =
                    TokenInfo { id: t.id, org: t.org, name: t.name, expires_at: t.expires_at, admin, person: t.person };
                (t.sha256, info)
            })
            .collect();
        self.tokens_version.store(version, Ordering::Relaxed);
        Ok(Some(tokens))
    }

    /// Keep what a read of the tokens found; after failed reads, the last set until it is
    /// `TOKENS_KEPT_WHILE_AWAY_SECS` old, then none (and read them all next time).
    fn keep_tokens(&self, read: Result<Option<HashMap<String, TokenInfo>>, String>, now: i64) -> Result<(), String> {
        let mut tokens = self.tokens.write().unwrap_or_else(|e| e.into_inner());
        match read {
            Ok(fresh) => {
                if let Some(fresh) = fresh {
                    *tokens = fresh;
                }
                self.tokens_read_at.store(now, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                if now - self.tokens_read_at.load(Ordering::Relaxed) > TOKENS_KEPT_WHILE_AWAY_SECS {
                    tokens.clear();
                    self.tokens_version.store(i64::MIN, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }

    /// Change `org`'s counts.
    pub fn count_for(&self, org: &str, f: impl FnOnce(&mut OrgCounts)) {
        f(self.org_counts.lock().unwrap_or_else(|e| e.into_inner()).entry(org.to_string()).or_default());
    }

    /// Whether the token with this id is still accepted (not revoked, not expired).
    pub fn token_valid(&self, id: &str) -> bool {
        let now = tao_slurm_engine::client::now_secs();
        self.tokens.read().unwrap_or_else(|e| e.into_inner()).values().any(|t| t.id == id && !t.expired(now))
    }

    /// Record a job with its place among its org's active jobs, if the org (on every replica) holds
    /// fewer than `cap` places (`Ok(Err(..))`: refused at the cap, nothing recorded).
    pub fn add_job_within(
        &self,
        job: ApiJob,
        cap: Option<u32>,
    ) -> Result<Result<(), tao_slurm_engine::client::AtCap>, String> {
        let recorded = self.records.jobs().insert_within(&job, cap, tao_slurm_engine::client::now_secs())?;
        if recorded.is_ok() {
            self.metas.write().unwrap_or_else(|e| e.into_inner()).insert(job.job_id.clone(), Arc::new(job));
        }
        Ok(recorded)
    }

    /// Give back the places of the jobs among `entries` that are terminal (at their attempt: a place
    /// another replica took since for a restart stays). A failure is logged; the next change of
    /// those jobs, or the next start's first publish, gives them back.
    fn free_places_of_ended<'a>(&self, entries: impl Iterator<Item = &'a Arc<CachedJob>>) {
        let ended: Vec<(String, u32)> =
            entries.filter(|e| e.status.is_terminal()).map(|e| (e.out.id.clone(), e.attempt)).collect();
        if let Err(m) = self.records.jobs().free_places(&ended) {
            tracing::warn!(error = %m, "cannot give back the places of ended jobs");
        }
    }

    /// Once per store and process (its first full publish that reads the places): the active jobs
    /// of the API that hold no place get one (jobs started before places were kept count from
    /// then on; a later view of one ended gives it back).
    fn keep_places_once(&self, client: &Client, order: &imbl::Vector<Arc<CachedJob>>) {
        let settings = client.settings();
        let store = format!("{}|{}|{:?}", settings.state_path.display(), settings.database_schema, settings.cluster);
        if self.places_kept.lock().unwrap_or_else(|e| e.into_inner()).contains(&store) {
            return;
        }
        let active: Vec<(String, String, u32)> = order
            .iter()
            .filter(|e| !e.status.is_terminal())
            .map(|e| (e.out.id.clone(), e.out.org.clone(), e.attempt))
            .collect();
        match self.records.jobs().keep_places(&active, tao_slurm_engine::client::now_secs()) {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(places = n, "active jobs without a place among their org's were given one");
                }
                self.places_kept.lock().unwrap_or_else(|e| e.into_inner()).insert(store);
            }
            Err(m) => tracing::warn!(error = %m, "cannot give active jobs their places; the next publish tries again"),
        }
    }

    pub fn remove_job(&self, job_id: &str) -> Result<bool, String> {
        if let Err(m) = self.records.jobs().free_place(job_id) {
            tracing::warn!(job = %job_id, error = %m, "cannot give back a removed job's place");
        }
        let removed = self.records.jobs().delete(job_id, tao_slurm_engine::client::now_secs())?;
        self.metas.write().unwrap_or_else(|e| e.into_inner()).remove(job_id);
        Ok(removed)
    }

    /// Bring these jobs of the cache up to date with the state file (read through `client`, no remote
    /// call) and announce those that changed: what a create or an action on one job changed, without
    /// reading every job again (the whole cache is [`AppState::publish`]'s, at the monitor's pace).
    ///
    /// Asks that arrive while another runs go together in the next: one read of the store for all of
    /// them (a batch's creates end together), a job not there (deleted meanwhile) left out without
    /// keeping the others out. An ask whose jobs the one before took along returns once that one is
    /// done.
    pub fn publish_jobs(&self, client: &Client, ids: &[String]) {
        let settings = client.settings();
        let store = format!("{}|{}|{:?}", settings.state_path.display(), settings.database_schema, settings.cluster);
        let pending = || self.publish_pending.lock().unwrap_or_else(|e| e.into_inner());
        pending().entry(store.clone()).or_default().extend(ids.iter().cloned());
        let _one_at_a_time = self.publish_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut ids) = pending().remove(&store) else { return };
        ids.sort();
        ids.dedup();
        let views = match client.known_jobs(&ids) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the state file; the cache stays as it was");
                return;
            }
        };
        let old = self.snapshot();
        let version = old.version + 1;
        let fresh: Vec<Arc<CachedJob>> = {
            let metas = self.metas.read().unwrap_or_else(|e| e.into_inner());
            views
                .iter()
                .filter_map(|view| match entry(client, view, metas.get(&view.job_id)?, &old, version) {
                    Entry::Changed(e) => Some(e),
                    Entry::Same(_) => None,
                })
                .collect()
        };
        if fresh.is_empty() {
            return;
        }
        // The old snapshot's collections are shared, not copied: the cost is the changed jobs'.
        let mut jobs = old.jobs.clone();
        let mut active = old.active.clone();
        let mut replaced: HashMap<*const CachedJob, Arc<CachedJob>> = HashMap::new();
        let mut new: Vec<Arc<CachedJob>> = Vec::new();
        for e in fresh {
            count_active(&mut active, &e, true);
            match jobs.insert(e.out.id.clone(), Arc::clone(&e)) {
                Some(was) => {
                    count_active(&mut active, &was, false);
                    replaced.insert(Arc::as_ptr(&was), e);
                }
                None => new.push(e),
            }
        }
        new.sort_by_key(|e| std::cmp::Reverse(e.created_at));
        let ended: Vec<Arc<CachedJob>> =
            new.iter().chain(replaced.values()).filter(|e| e.status.is_terminal()).cloned().collect();
        let mut order: imbl::Vector<Arc<CachedJob>> = new.into_iter().collect();
        order.append(replaced_in(&old.order, &replaced));
        // Given back before the cache shows them ended: whoever sees a job ended sees its place free.
        self.free_places_of_ended(ended.iter());
        self.install(Snapshot { version, jobs, order, active, removed: old.removed.clone() });
    }

    /// Make `snapshot` the cache and announce its version.
    fn install(&self, snapshot: Snapshot) {
        let version = snapshot.version;
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
        self.version_tx.send_replace(version);
    }

    /// Rebuild the cache from the state file (read through `client`, no remote call) and announce
    /// the jobs that changed.
    pub fn publish(&self, client: &Client) {
        let _one_at_a_time = self.publish_lock.lock().unwrap_or_else(|e| e.into_inner());
        let views = match client.list_jobs() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the state file; the cache stays as it was");
                return;
            }
        };
        self.read_metas_if_stale(&views);
        let metas = self.metas.read().unwrap_or_else(|e| e.into_inner()).clone();
        let old = self.snapshot();
        let version = old.version + 1;
        let mut changed = false;
        let mut jobs = imbl::HashMap::new();
        let mut order = imbl::Vector::new();
        let mut active = imbl::HashMap::new();
        let mut ended = Vec::new();
        for view in views {
            let Some(meta) = metas.get(&view.job_id) else { continue };
            let entry = match entry(client, &view, meta, &old, version) {
                Entry::Same(e) => e,
                Entry::Changed(e) => {
                    changed = true;
                    if e.status.is_terminal() {
                        ended.push(Arc::clone(&e));
                    }
                    e
                }
            };
            count_active(&mut active, &entry, true);
            jobs.insert(view.job_id.clone(), entry.clone());
            order.push_back(entry);
        }
        self.keep_places_once(client, &order);
        let mut removed = old.removed.clone();
        for (id, e) in &old.jobs {
            if !jobs.contains_key(id) {
                changed = true;
                removed.push((version, id.clone(), e.out.org.clone()));
            }
        }
        if !changed {
            return;
        }
        if removed.len() > 1000 {
            removed.drain(..removed.len() - 1000);
        }
        self.free_places_of_ended(ended.iter());
        self.install(Snapshot { version, jobs, order, active, removed });
    }
}

/// Read the jobs' records again after [`METAS_FRESH`], or at once for a job of the state file not
/// yet checked: other replicas create and delete jobs in the same database.
const METAS_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

impl AppState {
    fn read_metas_if_stale(&self, views: &[JobView]) {
        let mut read = self.metas_read.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let stale = now.duration_since(read.0) >= METAS_FRESH;
        let unknown = {
            let metas = self.metas.read().unwrap_or_else(|e| e.into_inner());
            let checked = &read.1;
            views.iter().any(|v| {
                !metas.contains_key(&v.job_id)
                    && checked.get(&v.job_id).is_none_or(|at| now.duration_since(*at) >= METAS_FRESH)
            })
        };
        if !stale && !unknown {
            return;
        }
        let jobs = match self.records.jobs().list() {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the jobs' records; the cache keeps the ones it has");
                return;
            }
        };
        let metas: HashMap<String, Arc<ApiJob>> = jobs.into_iter().map(|j| (j.job_id.clone(), Arc::new(j))).collect();
        read.1 = views.iter().filter(|v| !metas.contains_key(&v.job_id)).map(|v| (v.job_id.clone(), now)).collect();
        read.0 = now;
        *self.metas.write().unwrap_or_else(|e| e.into_inner()) = metas;
    }
}

/// `order` with each entry `replaced` names (by the old entry's address) swapped for its new one.
/// The entries are found by reading, newest first where changed jobs mostly are: writing through
/// every slot would copy every chunk the old snapshot shares.
fn replaced_in(
    order: &imbl::Vector<Arc<CachedJob>>,
    replaced: &HashMap<*const CachedJob, Arc<CachedJob>>,
) -> imbl::Vector<Arc<CachedJob>> {
    let mut at = Vec::with_capacity(replaced.len());
    for (i, e) in order.iter().enumerate() {
        if at.len() == replaced.len() {
            break;
        }
        if let Some(e) = replaced.get(&Arc::as_ptr(e)) {
            at.push((i, Arc::clone(e)));
        }
    }
    let mut order = order.clone();
    for (i, e) in at {
        order.set(i, e);
    }
    order
}

/// Count `e` in (`arrives`) or out of its org's active jobs, when it is active.
fn count_active(active: &mut imbl::HashMap<String, u32>, e: &CachedJob, arrives: bool) {
    if e.status.is_terminal() {
        return;
    }
    let n = active.entry(e.out.org.clone()).or_default();
    *n = if arrives { *n + 1 } else { n.saturating_sub(1) };
}

/// A job's cache entry for a new snapshot: the old one while what decides a change ([`ChangeKey`])
/// is the same, else one made afresh at `version`.
enum Entry {
    Same(Arc<CachedJob>),
    Changed(Arc<CachedJob>),
}

fn entry(client: &Client, view: &JobView, meta: &ApiJob, old: &Snapshot, version: u64) -> Entry {
    let key = ChangeKey::of(view);
    match old.jobs.get(&view.job_id) {
        Some(e) if e.key == key => Entry::Same(Arc::clone(e)),
        _ => Entry::Changed(Arc::new(cached(client, view, meta, key, version))),
    }
}

fn cached(client: &Client, view: &JobView, meta: &ApiJob, key: ChangeKey, rev: u64) -> CachedJob {
    // Attempts are read only for jobs that were retried (rare); the others have no failed ids.
    let failed_slurm_job_ids = if view.attempt > 1 {
        client
            .attempts(&view.job_id)
            .map(|a| a.into_iter().filter(|a| a.number < view.attempt).filter_map(|a| a.slurm_job_id).collect())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let out = JobOut {
        id: view.job_id.clone(),
        name: view.name.clone(),
        org: meta.org.clone(),
        workspace: meta.workspace.clone(),
        user: meta.person.clone(),
        action: meta.action.clone(),
        status: TaoStatus::from(view.status),
        platform_status: view.status.as_str().to_string(),
        message: view.message.clone(),
        pending_reason: types::pending_reason(view),
        created_on: types::rfc3339(view.created_at),
        last_modified: types::rfc3339(view.updated_at),
        image: view.image.clone(),
        nodes: view.nodes,
        gpus_per_node: view.gpus_per_node,
        num_gpu: meta.num_gpu,
        specs: meta.specs.clone(),
        progress: types::progress(view),
        gpu: view.gpu.clone(),
        job_details: types::job_details(view),
        backend_details: BackendDetailsOut {
            backend_type: "slurm".into(),
            partition: view.partition.clone(),
            cluster_name: meta.workspace.clone(),
            slurm_metadata: SlurmMetadata {
                slurm_job_id: view.slurm_job_id.clone(),
                job_dir: view.job_dir.clone(),
                results_dir: view.results_dir.clone(),
                retry_count: view.retries,
                failed_slurm_job_ids,
                slurm_state: view.slurm_state.clone(),
                exit_code: view.exit_code,
                node_list: view.node_list.clone(),
                login_host: view.login_host.clone(),
                next_retry_at: view.next_retry_at.map(types::rfc3339),
                latest_checkpoint: view.checkpoint.clone(),
            },
        },
        tao: meta.tao.clone().and_then(|t| serde_json::from_value(t).ok()).unwrap_or_default(),
    };
    let json: Arc<str> = serde_json::to_string(&out).expect("a job serialises").into();
    CachedJob {
        out,
        json,
        status: view.status,
        attempt: view.attempt,
        created_at: view.created_at,
        updated_at: view.updated_at,
        rev,
        key,
    }
}

#[cfg(test)]
mod tests {
    use super::super::token_info::TokenInfo;
    use super::AppState;

    #[test]
    fn tokens_outlive_a_short_database_outage_only() {
        let dir = tempfile::tempdir().unwrap();
        let db = tao_slurm_engine::client::ServiceRecords::open(&dir.path().join("state.db.service.db")).unwrap();
        let (record, _token) = db.tokens().create("team-a", "t", None, None, 0).unwrap();
        let settings: super::SettingsMaker = Box::new(|_| unreachable!("no org workspace here"));
        let state =
            AppState::new(Vec::new(), db, Default::default(), None, settings, dir.path().join("state.db")).unwrap();
        let read_at = state.tokens_read_at.load(std::sync::atomic::Ordering::Relaxed);
        assert!(state.token_valid(&record.id), "loaded at start");
        let away = || Err("the database is away".to_string());
        assert!(state.keep_tokens(away(), read_at + super::TOKENS_KEPT_WHILE_AWAY_SECS).is_err());
        assert!(state.token_valid(&record.id), "kept through a short outage");
        assert!(state.keep_tokens(away(), read_at + super::TOKENS_KEPT_WHILE_AWAY_SECS + 1).is_err());
        assert!(!state.token_valid(&record.id), "no token is accepted once the set is too old");
        state.reload_tokens().unwrap();
        assert!(state.token_valid(&record.id), "read again in full once the database answers");
    }

    #[test]
    fn a_token_expires_at_its_time_and_one_without_expiry_never() {
        let t = |expires_at| TokenInfo {
            id: "i".into(),
            org: "o".into(),
            name: "n".into(),
            expires_at,
            admin: false,
            person: None,
        };
        for (expires_at, now, expired) in
            [(None, i64::MAX, false), (Some(100), 99, false), (Some(100), 100, true), (Some(100), 101, true)]
        {
            assert_eq!(t(expires_at).expired(now), expired, "{expires_at:?} at {now}");
        }
    }
}
