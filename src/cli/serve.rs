use super::{settings_from, GlobalFlags};
use crate::error::Error;
use crate::spec::SpecError;
use clap::Args;
use std::net::{IpAddr, SocketAddr};

#[derive(Args, Debug)]
pub struct ServeCmd {
    /// Address to listen on (loopback by default; anything else is plain HTTP: put TLS in front)
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Port (0: any free port, printed on start)
    #[arg(long, default_value_t = 8570)]
    pub port: u16,
    /// Largest request body, in bytes
    #[arg(long, default_value_t = crate::service::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
}

impl ServeCmd {
    /// Serve the API, the dashboard and the monitors until interrupted. Workspaces: every profile of
    /// clusters.toml, plus `default` (the settings without a profile) when it names a cluster; with
    /// `--cluster NAME`, that profile only.
    pub(crate) fn run(self, globals: GlobalFlags) -> Result<i32, Error> {
        let mut workspaces = Vec::new();
        if let Some(name) = &globals.cluster {
            workspaces.push((name.clone(), settings_from(&globals)?));
        } else {
            let env: std::collections::HashMap<String, String> = std::env::vars().collect();
            let names: Vec<String> = match crate::profiles::profiles_path(globals.env_file.as_deref(), &env) {
                Some(path) => crate::profiles::read_profiles(&path)?.into_iter().map(|p| p.name).collect(),
                None => Vec::new(),
            };
            let default = settings_from(&globals)?;
            if default.cluster.is_none() && default.require_remote().is_ok() {
                workspaces.push(("default".to_string(), default));
            }
            for name in names {
                if workspaces.iter().any(|(n, _)| *n == name) {
                    continue;
                }
                let g = GlobalFlags { cluster: Some(name.clone()), ..globals.clone() };
                workspaces.push((name, settings_from(&g)?));
            }
        }
        if workspaces.is_empty() {
            return Err(SpecError::new(
                "cluster",
                format!(
                    "no cluster to serve: {} (or define clusters in clusters.toml beside the env file)",
                    crate::config::MISSING_MESSAGE
                ),
            )
            .into());
        }
        if let Some((id, s)) = workspaces.iter().find(|(_, s)| s.state_path != workspaces[0].1.state_path) {
            return Err(SpecError::new(
                "TAO_SLURM_STATE",
                format!("workspace {id} uses another state file ({}); one service has one", s.state_path.display()),
            )
            .into());
        }
        crate::service::serve(
            crate::service::ServeOptions {
                bind: SocketAddr::new(self.bind, self.port),
                max_body_bytes: self.max_body_bytes,
            },
            workspaces,
        )?;
        Ok(0)
    }
}
