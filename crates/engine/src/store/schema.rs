//! The state file's schema: migrations in order, `user_version` counting how many have run. A
//! migration is appended, never edited: state files written by earlier builds are migrated.

/// Migrations, in order; `user_version` records how many have run.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    job_id        TEXT PRIMARY KEY,
    name          TEXT,
    spec_json     TEXT NOT NULL,
    plan_json     TEXT NOT NULL,
    status        TEXT NOT NULL,
    message       TEXT NOT NULL DEFAULT '',
    slurm_job_id  TEXT,
    slurm_state   TEXT,
    exit_code     INTEGER,
    node_list     TEXT,
    login_host    TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX jobs_by_status ON jobs(status);
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL REFERENCES jobs(job_id),
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    detail  TEXT NOT NULL
);
CREATE INDEX events_by_job ON events(job_id, id);
"#,
    r#"
ALTER TABLE jobs ADD COLUMN progress TEXT;
"#,
    r#"
ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN attempt_name TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN next_retry_at INTEGER;
ALTER TABLE jobs ADD COLUMN excluded_nodes TEXT NOT NULL DEFAULT '';
CREATE TABLE attempts (
    job_id          TEXT NOT NULL REFERENCES jobs(job_id),
    number          INTEGER NOT NULL,
    slurm_job_name  TEXT NOT NULL,
    slurm_job_id    TEXT,
    login_host      TEXT,
    state           TEXT,
    exit_code       INTEGER,
    node_list       TEXT,
    failure_class   TEXT,
    evidence        TEXT,
    excluded_nodes  TEXT NOT NULL DEFAULT '',
    recorded_at     INTEGER NOT NULL,
    submitted_at    INTEGER,
    ended_at        INTEGER,
    PRIMARY KEY (job_id, number)
);
UPDATE jobs SET attempt_name = 'tao-job-' || job_id WHERE attempt_name = '';
INSERT INTO attempts (job_id, number, slurm_job_name, slurm_job_id, login_host, state, exit_code, node_list, recorded_at, submitted_at)
    SELECT job_id, 1, attempt_name, slurm_job_id, login_host, slurm_state, exit_code, node_list, created_at, updated_at FROM jobs;
"#,
    // What a refresh and a listing need of the plan, as columns (a plan never changes after insert),
    // and the spec and plan themselves moved to a table of their own: a row of `jobs` is then a few
    // hundred bytes, where the documents (kilobytes, in overflow pages) made every scan of the active
    // jobs read them all. Plus the signature of status.json when it was last read, so unchanged files
    // are not read again.
    r#"
ALTER TABLE jobs ADD COLUMN job_dir TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN image TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN nodes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpus_per_node INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN partition TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN timeout_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN timeout_runs INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN has_secrets INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN status_sig TEXT;
-- Plans written by earlier builds may lack a field (timeout_minutes before timeout_seconds, no
-- secret_names): defaults, never NULL, so that no old row can stop the migration of the others.
UPDATE jobs SET
    job_dir = COALESCE(json_extract(plan_json, '$.layout.job_dir'), ''),
    image = COALESCE(json_extract(plan_json, '$.image.pyxis'), ''),
    nodes = COALESCE(json_extract(plan_json, '$.resources.nodes'), 0),
    gpus_per_node = COALESCE(json_extract(plan_json, '$.resources.gpus_per_node'), 0),
    partition = COALESCE(json_extract(plan_json, '$.partition'), ''),
    timeout_seconds = COALESCE(json_extract(plan_json, '$.timeout_seconds'), json_extract(plan_json, '$.timeout_minutes') * 60, 0),
    timeout_runs = CASE WHEN json_extract(plan_json, '$.requeue')
        THEN COALESCE(json_extract(plan_json, '$.max_timeout_requeues'), 3) + 1 ELSE 1 END,
    has_secrets = COALESCE(json_array_length(plan_json, '$.secret_names'), 0) > 0;
CREATE TABLE job_docs (
    job_id     TEXT PRIMARY KEY REFERENCES jobs(job_id),
    spec_json  TEXT NOT NULL,
    plan_json  TEXT NOT NULL
);
INSERT INTO job_docs (job_id, spec_json, plan_json) SELECT job_id, spec_json, plan_json FROM jobs;
ALTER TABLE jobs DROP COLUMN spec_json;
ALTER TABLE jobs DROP COLUMN plan_json;
CREATE INDEX jobs_waiting ON jobs(created_at) WHERE slurm_job_id IS NULL;
"#,
    // Whether a job's secrets directory is known to be gone from the cluster: it is removed once the
    // job is terminal, and a removal that failed (host down) is tried again until it succeeds. Jobs
    // that ended before this column existed are swept once (earlier builds removed only Complete
    // jobs' secrets). When the attempt now running reached Slurm (for "lost by the scheduler"), and
    // since when the scheduler has not known a job (a verdict needs two reads, some time apart).
    r#"
ALTER TABLE jobs ADD COLUMN secrets_cleared INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_secrets_pending ON jobs(job_id) WHERE has_secrets = 1 AND secrets_cleared = 0;
ALTER TABLE jobs ADD COLUMN submitted_at INTEGER;
ALTER TABLE jobs ADD COLUMN unseen_since INTEGER;
UPDATE jobs SET submitted_at = (SELECT a.submitted_at FROM attempts a WHERE a.job_id = jobs.job_id AND a.number = jobs.attempt);
"#,
    // (The service's, issue 16.) The cluster profile a job was submitted to (`--cluster`, a service
    // workspace); NULL for the settings without a profile, which every earlier job used.
    r#"
ALTER TABLE jobs ADD COLUMN cluster TEXT;
"#,
    // (Issue 17.) Sweeps and pipelines: a group of jobs under one id (`sweeps`), each member a job
    // of its own with its group and, for a sweep variant, its index in the group's job array. Jobs
    // that run after others: their dependencies (kept here so that they survive the parents'
    // retries) and the Slurm dependency each was last submitted or re-pointed with (`gate`).
    r#"
ALTER TABLE jobs ADD COLUMN sweep_id TEXT;
ALTER TABLE jobs ADD COLUMN sweep_index INTEGER;
ALTER TABLE jobs ADD COLUMN gate TEXT;
CREATE INDEX jobs_by_sweep ON jobs(sweep_id) WHERE sweep_id IS NOT NULL;
CREATE TABLE sweeps (
    sweep_id        TEXT PRIMARY KEY,
    kind            TEXT NOT NULL,
    name            TEXT,
    array_name      TEXT,
    slurm_array_id  TEXT,
    max_concurrent  INTEGER,
    created_at      INTEGER NOT NULL
);
CREATE TABLE dependencies (
    child   TEXT NOT NULL REFERENCES jobs(job_id),
    parent  TEXT NOT NULL REFERENCES jobs(job_id),
    kind    TEXT NOT NULL,
    PRIMARY KEY (child, parent)
);
CREATE INDEX dependencies_by_parent ON dependencies(parent);
"#,
    // (Issue 24.) Why Slurm keeps a job pending, as its own column (it was only in the message).
    r#"
ALTER TABLE jobs ADD COLUMN pending_reason TEXT;
"#,
    // (Issue 26.) Webhooks: a job's own (`--notify`), the outbox of messages (one row per message and
    // webhook, kept once delivered so that no restart sends it again), and how far each monitor has
    // read the events. A job's KPIs over time: its status.json progress lines, each once.
    r#"
CREATE TABLE job_webhooks (
    job_id  TEXT NOT NULL REFERENCES jobs(job_id),
    url     TEXT NOT NULL,
    PRIMARY KEY (job_id, url)
);
CREATE TABLE notifications (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT NOT NULL,
    url           TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    body          TEXT NOT NULL,
    tries         INTEGER NOT NULL DEFAULT 0,
    next_at       INTEGER NOT NULL,
    claimed_until INTEGER,
    delivered_at  INTEGER,
    given_up_at   INTEGER,
    last_error    TEXT,
    UNIQUE (key, url)
);
CREATE INDEX notifications_open ON notifications(url, id) WHERE delivered_at IS NULL AND given_up_at IS NULL;
CREATE TABLE notify_cursors (
    name           TEXT PRIMARY KEY,
    last_event_id  INTEGER NOT NULL
);
CREATE TABLE kpi_lines (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL REFERENCES jobs(job_id),
    at      INTEGER NOT NULL,
    line    TEXT NOT NULL,
    UNIQUE (job_id, line)
);
"#,
    // (Issue 23.) Pauses: a row per job paused by tao-slurm (its allocation released: not Slurm's
    // SUSPENDED), for the attempt that was paused, with when a graceful pause cancels the job.
    r#"
CREATE TABLE pauses (
    job_id        TEXT PRIMARY KEY REFERENCES jobs(job_id),
    attempt       INTEGER NOT NULL,
    graceful      INTEGER NOT NULL,
    requested_at  INTEGER NOT NULL,
    cancel_at     INTEGER NOT NULL
);
"#,
    // (Issue 23.) Why each attempt after the first was made (`attempts::Cause`: timeout, infra,
    // preempted, resumed, retried) and the checkpoint it started from; a job's newest checkpoint as
    // last seen, and the patterns it is looked for by (NULL: the job asked for no resume).
    r#"
ALTER TABLE attempts ADD COLUMN cause TEXT;
ALTER TABLE attempts ADD COLUMN resumed_from TEXT;
ALTER TABLE jobs ADD COLUMN checkpoint TEXT;
ALTER TABLE jobs ADD COLUMN checkpoint_patterns TEXT;
"#,
    // (Issue 23.) An attempt that is Slurm's restart of the same Slurm job (the batch script's own
    // requeue after the inner timeout, or Slurm's after a preemption): its restart count (NULL: the
    // Slurm job's first start).
    r#"
ALTER TABLE attempts ADD COLUMN slurm_restart INTEGER;
"#,
    // (Issue 35.) Which replica of the service follows which workspace's cluster, beside the jobs it
    // writes: a holder's writes are fenced by its epoch (see leases.rs). (They were in the service's
    // database before, where no write of the jobs could check them.)
    r#"
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    epoch       INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
"#,
    // (Issue 40.) A running job's GPUs as last sampled (`gpu::GpuView`, JSON).
    r#"
ALTER TABLE jobs ADD COLUMN gpu TEXT;
"#,
];

/// Migration 4 was changed after builds had shipped it: files they wrote are at version 4 or later
/// but still keep the spec and plan in `jobs` (no `job_docs` table, no index of waiting jobs). This
/// finishes that migration for them; [`NEEDS_DOCS_REPAIR`] says when. Never numbered: it runs once,
/// when its condition holds, whatever the version.
pub(super) const REPAIR_DOCS_OF_MIGRATION_4: &str = r#"
CREATE TABLE IF NOT EXISTS job_docs (
    job_id     TEXT PRIMARY KEY REFERENCES jobs(job_id),
    spec_json  TEXT NOT NULL,
    plan_json  TEXT NOT NULL
);
INSERT OR IGNORE INTO job_docs (job_id, spec_json, plan_json) SELECT job_id, spec_json, plan_json FROM jobs;
ALTER TABLE jobs DROP COLUMN spec_json;
ALTER TABLE jobs DROP COLUMN plan_json;
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs(created_at) WHERE slurm_job_id IS NULL;
"#;

/// Whether `jobs` still holds the documents (a file of a build with the first form of migration 4).
pub(super) const NEEDS_DOCS_REPAIR: &str = "SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'plan_json'";
