//! `tao-slurm token`: the service's bearer tokens, made and revoked by whoever administers the
//! service (and can write its state). A token is shown once, at creation; only its SHA-256 is kept.

use clap::{Args, Subcommand};
use tao_slurm_engine::client::records::ServiceRecords;
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::spec::SpecError;

#[derive(Args, Debug)]
pub struct TokenCmd {
    #[command(subcommand)]
    action: TokenAction,
}

#[derive(Subcommand, Debug)]
enum TokenAction {
    /// Make a token for an org (printed once)
    Create {
        /// The org whose routes (/api/v2/orgs/ORG/...) the token opens
        #[arg(long)]
        org: String,
        /// A label (who or what uses it)
        #[arg(long, default_value = "")]
        name: String,
        /// Stop accepting it after this long (`30d`, `12h`, `90min`); without it, until revoked
        #[arg(long, value_parser = parse_lifetime)]
        expires: Option<u64>,
        /// An org admin token: it may also create and delete the org's workspaces and store its secrets
        #[arg(long)]
        admin: bool,
        /// A person's token: jobs, the audit trail and listings name this person, and a workspace
        /// with `identity = "person"` runs their jobs as their own Unix user. Without it, a machine's
        /// token (CI, an agent)
        #[arg(long)]
        person: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id (effective within a second in a running service)
    Revoke { id: String },
    /// List the tokens (ids, orgs, names; never the tokens)
    List {
        #[arg(long)]
        json: bool,
    },
}

impl TokenCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let records = ServiceRecords::open_for(&settings).map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
        let (db, trail) = (records.tokens(), records.audit());
        match self.action {
            TokenAction::Create { org, name, expires, admin, person, json } => {
                if let Some(p) = &person {
                    tao_slurm_engine::client::records::check_person(p).map_err(|m| SpecError::new("person", m))?;
                }
                let (rec, token) = db
                    .create(&org, &name, person.as_deref(), expires, tao_slurm_engine::client::now_secs())
                    .map_err(|m| SpecError::new("org", m))?;
                if admin {
                    db.make_admin(&rec.id).map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
                }
                super::audit::record_cli(&trail, &rec.org, "tokens.create", "tao-slurm token create", &rec.id);
                if json {
                    super::output::emit_json(&serde_json::json!({"id": rec.id, "org": rec.org, "name": rec.name,
                        "person": rec.person, "expires_at": rec.expires_at, "token": token}));
                } else {
                    println!("{token}");
                    eprintln!(
                        "token {} for org {} (shown once; revoke with `tao-slurm token revoke {}`)",
                        rec.id, rec.org, rec.id
                    );
                }
            }
            TokenAction::Revoke { id } => {
                let org = db.list().ok().and_then(|t| t.into_iter().find(|t| t.id == id)).map(|t| t.org);
                if !db.revoke(&id, tao_slurm_engine::client::now_secs()).map_err(|m| SpecError::new("id", m))? {
                    return Err(SpecError::new(
                        "id",
                        format!("no valid token {id} (`tao-slurm token list` shows them)"),
                    )
                    .into());
                }
                super::audit::record_cli(
                    &trail,
                    org.as_deref().unwrap_or(""),
                    "tokens.revoke",
                    "tao-slurm token revoke",
                    &id,
                );
                eprintln!("token {id} revoked");
            }
            TokenAction::List { json } => {
                let tokens = db.list().map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
                if json {
                    super::output::emit_json(&tokens);
                } else {
                    for t in tokens {
                        let expired = t.expires_at.is_some_and(|e| e <= tao_slurm_engine::client::now_secs());
                        let state = match (t.revoked_at, expired) {
                            (Some(_), _) => "revoked",
                            (None, true) => "expired",
                            (None, false) => "valid",
                        };
                        let whose = match &t.person {
                            Some(p) => format!("person {}", super::clean(p)),
                            None => "machine".to_string(),
                        };
                        println!("{}  {:<20} {:<8} {:<24} {}", t.id, t.org, state, whose, super::clean(&t.name));
                    }
                }
            }
        }
        Ok(0)
    }
}

/// A lifetime in seconds from `30d`, `12h`, `90min`, `2w` (humantime's units), at least a minute.
fn parse_lifetime(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 30d, 12h or 90min ({e})"))?;
    if d.as_secs() < 60 {
        return Err(format!("{text:?} is shorter than a minute; give at least 1min"));
    }
    Ok(d.as_secs())
}

#[cfg(test)]
mod tests {
    #[test]
    fn lifetimes() {
        for (text, secs) in
            [("30d", Some(30 * 86400)), ("12h", Some(43200)), ("90min", Some(5400)), ("2w", Some(1_209_600))]
        {
            assert_eq!(super::parse_lifetime(text).ok(), secs, "{text}");
        }
        for bad in ["", "30", "thirty days", "10s", "-1d"] {
            assert!(super::parse_lifetime(bad).is_err(), "{bad}");
        }
    }
}
