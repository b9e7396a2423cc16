//! Run the preflight checks: settings first (nothing is contacted without them), then for each login
//! host a login and one round trip of remote checks.

use crate::config::Settings;
use crate::preflight::{preflight_script, read_preflight, Check};

/// Run every check: settings first (nothing is contacted without them), then for each login host a
/// login and one round trip of remote checks.
pub fn run_preflight(settings: &Settings) -> Vec<Check> {
    use crate::remote::{Idempotency, OpenSsh, Remote};
    let mut checks: Vec<Check> = crate::preflight::unrecognised_settings(settings).into_iter().collect();
    checks.extend(crate::preflight::srun_logs_setting(settings));
    let user = match settings.require_remote() {
        Ok((user, _)) => {
            checks.push(Check::pass("settings", None, "SLURM_USER and SLURM_HOSTNAME are set"));
            user.to_string()
        }
        Err(e) => {
            checks.push(Check::fail("settings", None, "SLURM_USER or SLURM_HOSTNAME is missing", e.to_string()));
            return checks;
        }
    };
    let script = preflight_script(settings);
    if settings.local {
        match crate::remote::LocalShell::default().run_script(&script, Idempotency::Idempotent) {
            Ok(out) => checks.extend(read_preflight(settings, "local", &out.stdout)),
            Err(e) => checks.push(Check::fail("local shell", None, e.to_string(), "bash must be available")),
        }
        return checks;
    }
    let ssh = match OpenSsh::new(settings, &user, &settings.login_hosts) {
        Ok(s) => s,
        Err(e) => {
            let name = if matches!(e, crate::remote::RemoteError::Config(_)) { "ssh settings" } else { "ssh key" };
            checks.push(Check::fail(name, None, e.to_string(), "see the message above"));
            return checks;
        }
    };
    let mut any_host = false;
    let mut failures = Vec::new();
    for (i, host) in ssh.hosts().iter().enumerate() {
        let label = host.label();
        if let Err(e) = ssh.ensure_master(host) {
            let changed = matches!(e, crate::remote::openssh::MasterError::HostKeyChanged(_));
            let remediation = if changed {
                "the host key changed: this may be a man-in-the-middle attack; ask the site whether the key really changed before you remove the old one (ssh-keygen -R)".to_string()
            } else {
                crate::remote::openssh::login_remediation(&user, &host.host, &e.to_string())
            };
            failures.push(e.to_string());
            let mut c = Check::fail("ssh login", Some(&label), e.to_string(), remediation);
            // One unreachable host of several is a warning: failover covers it; a changed key never is.
            c.required = changed || settings.login_hosts.len() == 1;
            checks.push(c);
            continue;
        }
        any_host = true;
        checks.push(Check::pass("ssh login", Some(&label), "non-interactive public-key login works"));
        match ssh.run_on(i, &script) {
            Ok(out) => checks.extend(read_preflight(settings, &label, &out.stdout)),
            Err(e) => {
                checks.push(Check::fail("remote checks", Some(&label), e.to_string(), "retry; the connection dropped"))
            }
        }
    }
    if !any_host {
        checks.push(Check::fail(
            "ssh login",
            None,
            "no login host accepted a non-interactive login",
            crate::remote::openssh::login_remediation(
                &user,
                settings.login_hosts.first().map(|h| h.host.as_str()).unwrap_or("<login-host>"),
                &failures.join("\n"),
            ),
        ));
    }
    checks
}
