//! The service's own records, reached through one narrow facet per resource: tokens, the audit trail,
//! the orgs' workspaces, the orgs' secrets and the jobs created through the API. A door holds a
//! `ServiceRecords` and hands each of its parts only the facet it works on; the database under them
//! (`store::service_records::ServiceDb`) is the store's and no door names it.

use crate::store::service_records::ServiceDb;
pub use crate::store::service_records::{
    check_org, check_person, token_hash, ApiJob, SealedSecret, TokenRecord, ValidToken,
};
pub use crate::store::sign_in_records::{DeviceRefused, DeviceSignIn, DeviceState, Grant};
pub use crate::store::AuditEntry;
use std::path::Path;
use std::time::Duration;

/// The service's records (SQLite beside the state file, or PostgreSQL's `<schema>_service`).
pub struct ServiceRecords {
    db: ServiceDb,
}

impl ServiceRecords {
    /// The records in a SQLite file (made private to its owner if new).
    pub fn open(path: &Path) -> Result<ServiceRecords, String> {
        Ok(ServiceRecords { db: ServiceDb::open(path)? })
    }

    /// The records the settings name (see `ServiceDb::open_for`).
    pub fn open_for(settings: &crate::config::Settings) -> Result<ServiceRecords, String> {
        Ok(ServiceRecords { db: ServiceDb::open_for(settings)? })
    }

    pub fn tokens(&self) -> Tokens<'_> {
        Tokens(&self.db)
    }

    pub fn audit(&self) -> AuditTrail<'_> {
        AuditTrail(&self.db)
    }

    pub fn workspaces(&self) -> OrgWorkspaces<'_> {
        OrgWorkspaces(&self.db)
    }

    pub fn secrets(&self) -> OrgSecrets<'_> {
        OrgSecrets(&self.db)
    }

    pub fn jobs(&self) -> ApiJobs<'_> {
        ApiJobs(&self.db)
    }

    pub fn sign_ins(&self) -> SignIns<'_> {
        SignIns(&self.db)
    }

    /// Whether a write can be made within `wait` (the readiness probe).
    pub fn probe_write(&self, wait: Duration) -> Result<(), String> {
        self.db.probe_write(wait)
    }
}

/// Bearer tokens: created and revoked by the operator, read by the service on each change.
pub struct Tokens<'a>(&'a ServiceDb);

impl Tokens<'_> {
    /// A new token for `org`, a person's (`person`) or a machine's (its record, and the token, shown
    /// once and stored only as its SHA-256).
    pub fn create(
        &self,
        org: &str,
        name: &str,
        person: Option<&str>,
        lifetime_secs: Option<u64>,
        now: i64,
    ) -> Result<(TokenRecord, String), String> {
        self.0.create_token(org, name, person, lifetime_secs, now)
    }

    /// False when there is no such token, or it was revoked already.
    pub fn revoke(&self, id: &str, now: i64) -> Result<bool, String> {
        self.0.revoke_token(id, now)
    }

    pub fn list(&self) -> Result<Vec<TokenRecord>, String> {
        self.0.tokens()
    }

    /// The tokens the service accepts (not revoked; expiry is checked per request).
    pub fn valid(&self) -> Result<Vec<ValidToken>, String> {
        self.0.valid_tokens()
    }

    pub fn make_admin(&self, id: &str) -> Result<(), String> {
        self.0.make_admin(id)
    }

    pub fn admin_ids(&self) -> Result<Vec<String>, String> {
        self.0.admin_token_ids()
    }

    /// Changes when any record changes: the service reads the tokens again only then.
    pub fn version(&self) -> Result<i64, String> {
        self.0.data_version()
    }
}

/// The append-only audit trail.
pub struct AuditTrail<'a>(&'a ServiceDb);

impl AuditTrail<'_> {
    /// Add an entry; returns its id.
    pub fn append(&self, e: &AuditEntry) -> Result<i64, String> {
        self.0.append_audit(e)
    }

    /// Entries after the entry id `after`, oldest first, at most `limit`; of `org`, or of all.
    pub fn page(&self, org: Option<&str>, after: i64, limit: usize) -> Result<Vec<AuditEntry>, String> {
        self.0.audit(org, after, limit)
    }
}

/// The workspaces orgs made: (id, org, the request as JSON, created at).
pub struct OrgWorkspaces<'a>(&'a ServiceDb);

impl OrgWorkspaces<'_> {
    pub fn insert(&self, id: &str, org: &str, request: &str, now: i64) -> Result<(), String> {
        self.0.insert_workspace(id, org, request, now)
    }

    pub fn delete(&self, id: &str, now: i64) -> Result<bool, String> {
        self.0.delete_workspace(id, now)
    }

    pub fn list(&self) -> Result<Vec<(String, String, String, i64)>, String> {
        self.0.workspaces()
    }
}

/// The orgs' secrets, sealed (the service's cipher seals and opens them; this stores bytes).
pub struct OrgSecrets<'a>(&'a ServiceDb);

impl OrgSecrets<'_> {
    pub fn put(&self, org: &str, name: &str, nonce: &[u8], sealed: &[u8], now: i64) -> Result<(), String> {
        self.0.put_org_secret(org, name, nonce, sealed, now)
    }

    pub fn delete(&self, org: &str, name: &str) -> Result<bool, String> {
        self.0.delete_org_secret(org, name)
    }

    /// `org`'s secrets: (name, nonce, sealed value).
    pub fn list(&self, org: &str) -> Result<Vec<SealedSecret>, String> {
        self.0.org_secrets(org)
    }
}

/// What the service keeps of the jobs created through the API, beyond the engine's record.
pub struct ApiJobs<'a>(&'a ServiceDb);

impl ApiJobs<'_> {
    pub fn insert(&self, job: &ApiJob) -> Result<(), String> {
        self.0.insert_job(job)
    }

    pub fn delete(&self, job_id: &str, now: i64) -> Result<bool, String> {
        self.0.delete_job(job_id, now)
    }

    pub fn list(&self) -> Result<Vec<ApiJob>, String> {
        self.0.jobs()
    }
}

/// The sign-in's shared state: who each person is, the terminals' sign-ins under way, the keys that
/// seal a browser's sign-in (see `store::sign_in_records`).
pub struct SignIns<'a>(&'a ServiceDb);

impl SignIns<'_> {
    /// The name of the provider's (`issuer`, `subject`): bound at their first sign-in for good.
    pub fn bind_person(&self, issuer: &str, subject: &str, person: &str, now: i64) -> Result<String, String> {
        self.0.bind_person(issuer, subject, person, now)
    }

    pub fn service_key(&self, name: &str) -> Result<Vec<u8>, String> {
        self.0.service_key(name)
    }

    pub fn start_device(
        &self,
        d: &DeviceSignIn,
        expires_at: i64,
        per_client: usize,
        total: usize,
    ) -> Result<Result<(), DeviceRefused>, String> {
        self.0.start_device(d, expires_at, per_client, total)
    }

    pub fn device_by_user_code(&self, user_code: &str, now: i64) -> Result<Option<DeviceSignIn>, String> {
        self.0.device_by_user_code(user_code, now)
    }

    pub fn settle_device(&self, code_sha256: &str, outcome: &str, now: i64) -> Result<bool, String> {
        self.0.settle_device(code_sha256, outcome, now)
    }

    pub fn take_device(&self, code_sha256: &str, now: i64) -> Result<DeviceState, String> {
        self.0.take_device(code_sha256, now)
    }

    /// Keep a sign-in's grant at the provider (see `store::sign_in_records::Grant`).
    pub fn keep_grant(&self, g: &Grant) -> Result<(), String> {
        self.0.keep_grant(g)
    }

    pub fn grants(&self) -> Result<Vec<Grant>, String> {
        self.0.grants()
    }

    pub fn grant_holds(&self, g: &Grant, refresh_sealed: Option<&str>, now: i64) -> Result<bool, String> {
        self.0.grant_holds(g, refresh_sealed, now)
    }

    /// End the person's access to the grant's org: the grant ended, their tokens of the org revoked
    /// and `audit` appended, in one commit (if the grant is still as read).
    pub fn end_grant(&self, g: &Grant, why: &str, now: i64, audit: AuditEntry) -> Result<bool, String> {
        self.0.end_grant(g, why, now, audit)
    }
}

pub use crate::store::service_caps::AtCap;

/// The counted caps, in the database every replica shares (`store::service_caps`).
impl ApiJobs<'_> {
    /// Record a job with its place among its org's active jobs, if the org holds fewer than `cap`.
    pub fn insert_within(&self, job: &ApiJob, cap: Option<u32>, now: i64) -> Result<Result<(), AtCap>, String> {
        self.0.insert_job_within(job, cap, now)
    }

    /// Take (or keep) the place of a job that starts again at `attempt`, if the org's other jobs
    /// hold fewer than `cap`.
    pub fn take_place(
        &self,
        job_id: &str,
        org: &str,
        attempt: u32,
        cap: Option<u32>,
        now: i64,
    ) -> Result<Result<(), AtCap>, String> {
        self.0.take_job_place(job_id, org, attempt, cap, now)
    }

    /// Give back the places of jobs seen terminal at these attempts; how many were given back.
    pub fn free_places(&self, ended: &[(String, u32)]) -> Result<usize, String> {
        self.0.free_job_places(ended)
    }

    /// Give places to active jobs (job id, org, attempt) that hold none, whatever the cap (jobs
    /// started before places were kept); how many were given.
    pub fn keep_places(&self, active: &[(String, String, u32)], now: i64) -> Result<usize, String> {
        self.0.keep_job_places(active, now)
    }

    /// Give back a job's place whatever its attempt.
    pub fn free_place(&self, job_id: &str) -> Result<bool, String> {
        self.0.free_job_place(job_id)
    }
}

impl OrgWorkspaces<'_> {
    /// Record an org's workspace if the org has fewer than `cap`.
    pub fn insert_within(
        &self,
        id: &str,
        org: &str,
        request: &str,
        now: i64,
        cap: u32,
    ) -> Result<Result<(), AtCap>, String> {
        self.0.insert_workspace_within(id, org, request, now, cap)
    }

    /// The org's workspaces as stored now.
    pub fn count(&self, org: &str) -> Result<u32, String> {
        self.0.count_workspaces(org)
    }
}
