//! `tao-slurm audit`: the service's audit trail (every state-changing request, and the tokens made
//! and revoked here), read from the service's database by whoever administers the service.

use clap::Args;
use tao_slurm_engine::client::records::{AuditEntry, AuditTrail, ServiceRecords};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::spec::SpecError;

#[derive(Args, Debug)]
pub struct AuditCmd {
    /// Only this org's entries
    #[arg(long)]
    org: Option<String>,
    /// Only entries after this id
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// At most this many entries
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[arg(long)]
    json: bool,
}

impl AuditCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let records = ServiceRecords::open_for(&settings).map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
        let entries = records
            .audit()
            .page(self.org.as_deref(), self.after, self.limit)
            .map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
        if self.json {
            super::output::emit_json(&entries);
            return Ok(0);
        }
        for e in entries {
            println!("{}", line(&e));
        }
        Ok(0)
    }
}

fn line(e: &AuditEntry) -> String {
    let actor = match (&e.token_id, &e.person, &e.token_name) {
        (Some(id), Some(person), _) => format!("{id} ({})", super::clean(person)),
        (Some(id), None, Some(name)) if !name.is_empty() => format!("{id} ({})", super::clean(name)),
        (Some(id), _, _) => id.clone(),
        (None, _, _) => "operator (command line)".into(),
    };
    format!(
        "{:>6}  {}  {:<12} {:<20} {:<24} {:<38} {} {}",
        e.id,
        tao_slurm_engine::client::rfc3339(e.at),
        super::clean(&e.org),
        actor,
        e.action,
        super::clean(e.target.as_deref().unwrap_or("-")),
        e.status,
        e.outcome
    )
}

/// Record a change made on the command line (tokens), as the audit trail's operator entry.
pub fn record_cli(trail: &AuditTrail, org: &str, action: &str, command: &str, target: &str) {
    let entry = AuditEntry {
        id: 0,
        at: tao_slurm_engine::client::now_secs(),
        org: org.to_string(),
        token_id: None,
        token_name: None,
        person: None,
        action: action.to_string(),
        method: "CLI".into(),
        path: command.to_string(),
        target: Some(target.to_string()),
        status: 0,
        outcome: "ok".to_string(),
    };
    if let Err(e) = trail.append(&entry) {
        eprintln!("warning: cannot record this in the audit trail: {e}");
    }
}
