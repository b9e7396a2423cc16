use crate::config::Settings;
use crate::engine::preflight::run_preflight;
use crate::error::{exit_code, Error};
use clap::Args;

#[derive(Args, Debug)]
pub struct PreflightCmd {
    #[arg(long)]
    pub json: bool,
}

impl PreflightCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let checks = run_preflight(&settings);
        let ok = checks.iter().all(|c| c.ok || !c.required);
        if self.json {
            super::print_json(&serde_json::json!({"ok": ok, "checks": checks}));
        } else {
            for c in &checks {
                let mark = match (c.ok, c.required) {
                    (true, _) => "PASS",
                    (false, true) => "FAIL",
                    (false, false) => "WARN",
                };
                let host = c.host.as_deref().map(|h| format!(" [{h}]")).unwrap_or_default();
                println!("{mark}  {}{host}: {}", c.name, c.detail);
                if let (false, Some(r)) = (c.ok, &c.remediation) {
                    for line in r.lines() {
                        println!("      {line}");
                    }
                }
            }
            println!("{}", if ok { "preflight: all required checks passed" } else { "preflight: FAILED" });
        }
        Ok(if ok { 0 } else { exit_code::JOB_FAILED })
    }
}
