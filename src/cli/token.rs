//! `tao-slurm token`: the service's bearer tokens, made and revoked by whoever administers the
//! service (and can write its state). A token is shown once, at creation; only its SHA-256 is kept.

use crate::client::service_records::path_for;
use crate::client::ServiceDb;
use crate::config::Settings;
use crate::error::Error;
use crate::spec::SpecError;
use clap::{Args, Subcommand};

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
        /// An org admin token: it may also create and delete the org's workspaces and store its secrets
        #[arg(long)]
        admin: bool,
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
        let db = ServiceDb::open(&path_for(&settings.state_path)).map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
        match self.action {
            TokenAction::Create { org, name, admin, json } => {
                let (rec, token) =
                    db.create_token(&org, &name, crate::client::now_secs()).map_err(|m| SpecError::new("org", m))?;
                if admin {
                    db.make_admin(&rec.id).map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
                }
                if json {
                    super::output::emit_json(
                        &serde_json::json!({"id": rec.id, "org": rec.org, "name": rec.name, "token": token}),
                    );
                } else {
                    println!("{token}");
                    eprintln!(
                        "token {} for org {} (shown once; revoke with `tao-slurm token revoke {}`)",
                        rec.id, rec.org, rec.id
                    );
                }
            }
            TokenAction::Revoke { id } => {
                if !db.revoke_token(&id, crate::client::now_secs()).map_err(|m| SpecError::new("id", m))? {
                    return Err(SpecError::new(
                        "id",
                        format!("no valid token {id} (`tao-slurm token list` shows them)"),
                    )
                    .into());
                }
                eprintln!("token {id} revoked");
            }
            TokenAction::List { json } => {
                let tokens = db.tokens().map_err(|m| SpecError::new("TAO_SLURM_STATE", m))?;
                if json {
                    super::output::emit_json(&tokens);
                } else {
                    for t in tokens {
                        let state = if t.revoked_at.is_some() { "revoked" } else { "valid" };
                        println!("{}  {:<20} {:<8} {}", t.id, t.org, state, super::clean(&t.name));
                    }
                }
            }
        }
        Ok(0)
    }
}
