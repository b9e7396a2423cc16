//! One output layer. A command builds its result as a typed report and [`emit`]s it in the format
//! chosen once for the run: for people, or as JSON. A report's JSON is its serde form, and its JSON
//! schema is generated from the same type ([`schemas`], `tao-slurm schema`, docs/json-schemas.json),
//! so what is printed and what is documented cannot drift. A command that can return several jobs
//! always returns a list, even of one.

use schemars::JsonSchema;
use serde::Serialize;

/// How the run prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

impl Format {
    /// The format a command's `--json` flag asks for.
    pub fn from_json_flag(json: bool) -> Format {
        if json {
            Format::Json
        } else {
            Format::Human
        }
    }
}

/// A command's result.
pub trait Report: Serialize {
    /// The text for people (with a final newline); remote text in it is already made safe.
    fn human(&self) -> String;
}

/// Print `report` in `format`.
pub fn emit<R: Report>(format: Format, report: &R) {
    match format {
        Format::Json => emit_json(report),
        Format::Human => write_stdout(&report.human()),
    }
}

/// Write to standard output; a reader that went away (`| head`) ends the run quietly, as ripgrep
/// does, instead of a panic.
fn write_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        panic!("cannot write to standard output: {e}");
    }
}

/// A value as the JSON the run prints (for output that is streamed to people, such as logs, and
/// reported whole as JSON).
pub fn emit_json<T: Serialize>(value: &T) {
    write_stdout(&(serde_json::to_string_pretty(value).expect("a report serialises") + "\n"));
}

/// One JSON line (for streams such as `logs -f --json`), its schema documented like a report's.
pub fn emit_line<T: Serialize>(item: &T) {
    write_stdout(&(serde_json::to_string(item).expect("a line serialises") + "\n"));
}

/// `preflight`: every check, and whether the required ones passed.
pub use tao_slurm_engine::client::PreflightReport;

impl Report for PreflightReport {
    fn human(&self) -> String {
        let mut s = String::new();
        for c in &self.checks {
            let mark = match (c.ok, c.required) {
                (true, _) => "PASS",
                (false, true) => "FAIL",
                (false, false) => "WARN",
            };
            let host = c.host.as_deref().map(|h| format!(" [{}]", super::clean(h))).unwrap_or_default();
            s.push_str(&format!("{mark}  {}{host}: {}\n", c.name, super::clean(&c.detail)));
            if let (false, Some(r)) = (c.ok, &c.remediation) {
                for line in r.lines() {
                    s.push_str(&format!("      {line}\n"));
                }
            }
        }
        for f in &self.clusters {
            let host = f.host.as_deref().map(|h| format!(" [{}]", super::clean(h))).unwrap_or_default();
            let version = match (&f.slurm_version, f.slurm_version_tested) {
                (Some(v), true) => format!("Slurm {v} (tested)"),
                (Some(v), false) => format!("Slurm {v} (not tested)"),
                (None, _) => "Slurm version unknown".into(),
            };
            let pyxis = match f.pyxis {
                Some(true) => "Pyxis present",
                Some(false) => "Pyxis absent",
                None => "Pyxis unknown",
            };
            s.push_str(&format!("cluster{host}: {version}, {pyxis}\n"));
        }
        s.push_str(if self.ok { "preflight: all required checks passed\n" } else { "preflight: FAILED\n" });
        s
    }
}

/// `check-path`: each URI's state, and whether every path exists.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathsReport {
    pub ok: bool,
    pub paths: Vec<PathRow>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PathRow {
    pub uri: String,
    /// `exists`, `missing`, `refused`, or `not checked (fetched inside the job)`.
    pub state: String,
    /// The path checked, or why it was refused.
    pub detail: String,
}

impl Report for PathsReport {
    fn human(&self) -> String {
        self.paths.iter().map(|p| format!("{:<8} {}  {}\n", p.state, p.uri, super::clean(&p.detail))).collect()
    }
}

/// `checkpoints`: a job's checkpoints, newest last; the newest is what its next attempt resumes from.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckpointsReport {
    pub job_id: String,
    /// Paths relative to the job's results directory, oldest first.
    pub checkpoints: Vec<tao_slurm_engine::ops::files::CheckpointFile>,
}

impl Report for CheckpointsReport {
    fn human(&self) -> String {
        if self.checkpoints.is_empty() {
            return format!("job {} has no checkpoint yet\n", self.job_id);
        }
        self.checkpoints.iter().map(|c| format!("{:>12}  {}\n", c.size, super::clean(&c.path))).collect()
    }
}

/// `credentials enroot`: where the credentials were installed.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CredentialsReport {
    /// The credentials file on the cluster.
    pub installed: String,
    pub host: String,
    pub machines: Vec<String>,
}

impl Report for CredentialsReport {
    fn human(&self) -> String {
        format!(
            "Installed enroot credentials for {} in {} on {} (mode 600)\n",
            self.machines.join(" and "),
            self.installed,
            self.host
        )
    }
}

impl Report for tao_slurm_engine::client::Prepared {
    fn human(&self) -> String {
        format!("{} {} -> {} ({:.1} s)\n", self.how, self.image, self.sqsh_path, self.seconds)
    }
}

/// `events`: a job's history, oldest first.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct EventsReport(pub Vec<EventRow>);

#[derive(Debug, Serialize, JsonSchema)]
pub struct EventRow {
    /// Unix seconds.
    pub at: i64,
    pub kind: String,
    pub detail: String,
}

impl Report for EventsReport {
    fn human(&self) -> String {
        self.0.iter().map(|e| format!("{}  {:<14} {}\n", utc(e.at), e.kind, super::clean(&e.detail))).collect()
    }
}

/// `YYYY-MM-DD HH:MM:SSZ` for Unix seconds.
pub use tao_slurm_core::utc::readable as utc;

/// `render`: the plan, the files a submission stages, and the secret variables (names only).
#[derive(Debug, Serialize, JsonSchema)]
pub struct RenderReport {
    pub job_id: String,
    /// The resolved plan (resources, partition, times, mounts, environment...).
    pub plan: serde_json::Value,
    pub files: Vec<tao_slurm_engine::script::StagedFile>,
    /// Each secret variable's name, its value shown as `***`.
    pub secret_env: std::collections::BTreeMap<String, String>,
    /// A Cosmos-RL job's split of roles over nodes and GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosmos_rl: Option<serde_json::Value>,
    /// The split as a table, for people.
    #[serde(skip)]
    pub cosmos_table: Option<String>,
    /// A sweep's variants (the plan and the files are its first variant's, then the array's script).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<tao_slurm_engine::client::PreviewVariant>,
    /// A sweep's one Slurm job array (`--array=`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// A pipeline's steps in order (the plan is the first step's; the files are every step's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<tao_slurm_engine::client::PreviewStep>,
}

impl Report for RenderReport {
    fn human(&self) -> String {
        let mut s = String::new();
        if let Some(t) = &self.cosmos_table {
            s.push_str(&format!("{t}\n"));
        }
        for v in &self.variants {
            s.push_str(&format!("variant {}: {}\n", v.index, v.values));
        }
        if let Some(array) = &self.array {
            s.push_str(&format!(
                "one Slurm job array --array={array} (the files: the first variant's, then the array's script)\n\n"
            ));
        }
        for step in &self.steps {
            s.push_str(&format!("step {}: {}\n", step.name, step.command));
        }
        if !self.steps.is_empty() {
            s.push('\n');
        }
        for f in &self.files {
            s.push_str(&format!("==> {} <==\n{}\n", f.path, f.contents));
            if !f.contents.ends_with('\n') {
                s.push('\n');
            }
        }
        if !self.secret_env.is_empty() {
            s.push_str("==> secret environment (values only in the job's mode-600 secrets file on the cluster, removed when it ends) <==\n");
            for name in self.secret_env.keys() {
                s.push_str(&format!("{name}=***\n"));
            }
        }
        s
    }
}

/// One piece of a followed log (`logs -f --json`, one JSON object per line).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChunkLine {
    /// `stdout` (main.out) or `stderr` (main.err).
    pub stream: String,
    /// The byte offset of the piece in its file.
    pub offset: u64,
    pub text: String,
}

/// `status`, `list`, `cancel`: jobs, always a list (of one for one job id).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct JobsReport(pub Vec<tao_slurm_engine::JobView>);

impl Report for JobsReport {
    fn human(&self) -> String {
        table(&self.0)
    }
}

/// Jobs as a table for people.
fn table(views: &[tao_slurm_engine::JobView]) -> String {
    if views.is_empty() {
        return "no jobs\n".into();
    }
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "job id",
        "status",
        "slurm id",
        "slurm state",
        "exit",
        "nodes",
        "retries",
        "progress",
        "gpu",
        "message",
    ]);
    let now = tao_slurm_engine::client::now_secs();
    for v in views {
        table.add_row([
            v.job_id.clone(),
            v.status.to_string(),
            v.slurm_job_id.clone().unwrap_or_default(),
            super::clean(v.slurm_state.as_deref().unwrap_or_default()),
            v.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            super::clean(v.node_list.as_deref().unwrap_or_default()),
            v.retries.to_string(),
            super::progress::bar(v),
            gpu_cell(v, now),
            super::clean(&v.message),
        ]);
    }
    let mut out = format!("{table}\n");
    for v in views {
        out.push_str(&attempt_lines(v));
    }
    out
}

/// A job's GPUs in one cell: mean utilisation and health, `no GPU data`, or nothing (no sample).
pub fn gpu_cell(v: &tao_slurm_engine::JobView, now: i64) -> String {
    v.gpu.as_ref().map(|g| super::clean(&g.cell(now))).unwrap_or_default()
}

/// Under the table, for a job shown with its attempts: its attempt summary, newest checkpoint, and
/// each attempt after the first with its cause and the checkpoint it started from.
fn attempt_lines(v: &tao_slurm_engine::JobView) -> String {
    let (Some(summary), Some(attempts)) = (&v.attempt_summary, &v.attempts) else { return String::new() };
    let mut out = format!("{}: {}", v.job_id, super::clean(summary));
    if let Some(c) = &v.checkpoint {
        out.push_str(&format!("; newest checkpoint {}", super::clean(c)));
    }
    out.push('\n');
    for a in attempts.iter().filter(|a| a.number > 1) {
        out.push_str(&format!(
            "  attempt {} ({}) from {}\n",
            a.number,
            a.cause.as_deref().unwrap_or("-"),
            super::clean(a.resumed_from.as_deref().unwrap_or("no checkpoint"))
        ));
    }
    out
}

/// `list --sweeps`: the sweeps and pipelines, each with its jobs' statuses counted.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct GroupsReport(pub Vec<tao_slurm_engine::client::GroupView>);

impl Report for GroupsReport {
    fn human(&self) -> String {
        if self.0.is_empty() {
            return "no sweeps or pipelines\n".into();
        }
        self.0
            .iter()
            .map(|g| {
                let counts: Vec<String> = g.statuses.iter().map(|(s, n)| format!("{n} {s}")).collect();
                format!(
                    "{}  {:<8} {:>5} jobs  {}{}\n",
                    g.group.sweep_id,
                    g.group.kind,
                    g.jobs,
                    counts.join(", "),
                    g.group.slurm_array_id.as_ref().map(|a| format!("  (Slurm job array {a})")).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl Report for tao_slurm_engine::client::Submitted {
    fn human(&self) -> String {
        format!(
            "Submitted job {} (Slurm job {} via {})\nFollow it with: tao-slurm watch {}\n",
            self.job_id, self.slurm_job_id, self.login_host, self.job_id
        )
    }
}

impl Report for tao_slurm_engine::client::SweepSubmitted {
    fn human(&self) -> String {
        let mut s = format!(
            "Submitted sweep {} ({} variants, Slurm job array {} via {})\n",
            self.sweep_id,
            self.variants.len(),
            self.slurm_array_id,
            self.login_host
        );
        for v in &self.variants {
            s.push_str(&format!("  {:>4}  {}  {:<12} {}\n", v.index, v.job_id, v.slurm_job_id, v.values));
        }
        s.push_str(&format!("Follow it with: tao-slurm watch {}\n", self.sweep_id));
        s
    }
}

impl Report for tao_slurm_engine::client::PipelineSubmitted {
    fn human(&self) -> String {
        let mut s = format!("Submitted pipeline {}\n", self.pipeline_id);
        for step in &self.steps {
            s.push_str(&format!("  {:<16} {}  Slurm job {}\n", step.name, step.job_id, step.slurm_job_id));
        }
        s.push_str(&format!("Follow it with: tao-slurm watch {}\n", self.pipeline_id));
        s
    }
}

/// Every report's JSON schema, by the command that prints it.
pub fn schemas() -> Vec<(&'static str, schemars::Schema)> {
    vec![
        ("cancel", schemars::schema_for!(JobsReport)),
        ("check-path", schemars::schema_for!(PathsReport)),
        ("checkpoints", schemars::schema_for!(CheckpointsReport)),
        ("credentials enroot", schemars::schema_for!(CredentialsReport)),
        ("events", schemars::schema_for!(EventsReport)),
        ("image import", schemars::schema_for!(tao_slurm_engine::client::Prepared)),
        ("init", schemars::schema_for!(tao_slurm_engine::client::init::InitReport)),
        ("list", schemars::schema_for!(JobsReport)),
        ("list --sweeps", schemars::schema_for!(GroupsReport)),
        ("logs", schemars::schema_for!(tao_slurm_engine::client::JobLogs)),
        ("logs --role", schemars::schema_for!(tao_slurm_engine::client::RoleLogs)),
        ("logs -f (each line)", schemars::schema_for!(ChunkLine)),
        ("pause", schemars::schema_for!(JobsReport)),
        ("preflight", schemars::schema_for!(PreflightReport)),
        ("render", schemars::schema_for!(RenderReport)),
        ("resume", schemars::schema_for!(JobsReport)),
        ("retry", schemars::schema_for!(JobsReport)),
        ("status", schemars::schema_for!(JobsReport)),
        ("submit", schemars::schema_for!(tao_slurm_engine::client::Submitted)),
        ("submit (a pipeline)", schemars::schema_for!(tao_slurm_engine::client::PipelineSubmitted)),
        ("submit (a sweep)", schemars::schema_for!(tao_slurm_engine::client::SweepSubmitted)),
        ("watch --json (each line)", schemars::schema_for!(tao_slurm_engine::JobView)),
    ]
}

/// All schemas as one document: `{command: schema}`.
pub fn schemas_document() -> serde_json::Value {
    serde_json::Value::Object(
        schemas().into_iter().map(|(name, schema)| (name.to_string(), serde_json::to_value(schema).unwrap())).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_schemas_are_the_printed_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/json-schemas.json");
        let now = serde_json::to_string_pretty(&schemas_document()).unwrap() + "\n";
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(committed == now, "docs/json-schemas.json is stale: run UPDATE_GOLDEN=1 cargo test documented_schemas");
    }

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00Z");
        assert_eq!(utc(1_796_256_000 + 3661), "2026-12-03 01:01:01Z");
    }
}
