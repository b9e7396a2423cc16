//! The sandbox's real container runtime (dev/sandbox/runtime.sh): NVIDIA Enroot built from the
//! vendored archives, images from the sandbox's registries on loopback, used as a job uses it on a
//! compute node (the unprivileged sandbox user, inside `srun`): a cold import, a named container
//! that lives on its own node only, and the private org that needs the user's credentials.

use crate::common::{sandbox, Env};
use std::process::Command;

#[test]
fn vendored_archives_match_their_hashes() {
    let vendor = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dev/sandbox/vendor");
    let out = Command::new("sha256sum").args(["--strict", "-c", "SHA256SUMS"]).current_dir(&vendor).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.lines().filter(|l| l.ends_with(": OK")).count(), 2, "{text}");
}

#[test]
fn real_enroot_imports_per_node_and_the_private_org_needs_credentials() {
    let env = Env::new();
    let sd = sandbox::dir();
    let enroot = sd.join("enroot/front/enroot");
    let key = std::fs::read_to_string(sd.join("registry/ngc-key")).unwrap();
    let name = format!("rt-{}", std::process::id());
    let private = sandbox::setting("SANDBOX_PRIVATE_IMAGE").replacen('/', "#", 1);
    // The credentials live in a directory of this test's own (ENROOT_CONFIG_PATH), never in argv;
    // srun reads no stdin (it would eat the rest of the script, which bash reads from stdin).
    let script = format!(
        r#"set -u
E={enroot}; cfg=$(mktemp -d); f=$(mktemp -u --suffix=.sqsh); trap 'rm -rf "$cfg" "$f"' EXIT
srun </dev/null -w node2 bash -c "$E version; $E import -o $f docker://nvcr.io#nvidia/pytorch:24.01-py3 >/dev/null 2>&1 && $E create -f -n {name} $f >/dev/null 2>&1 && $E start {name} sh -c 'grep PRETTY_NAME /etc/os-release; id -un; python3 -c \"print(6*7)\"'"
rm -f "$f"
echo "node2: $(srun </dev/null -w node2 $E list | grep -cx {name})"
echo "node3: $(srun </dev/null -w node3 $E list | grep -cx {name})"
srun </dev/null -w node2 $E remove -f {name} >/dev/null 2>&1
ENROOT_CONFIG_PATH=$cfg srun </dev/null -w node3 $E import -o $f docker://{private} >$cfg/out 2>&1; echo "without credentials: rc=$?"
grep -E 'ERROR|Authenticating' $cfg/out
rm -f "$f"; install -m 600 /dev/stdin $cfg/.credentials
ENROOT_CONFIG_PATH=$cfg srun </dev/null -w node3 $E import -o $f docker://{private} >$cfg/out 2>&1; echo "with credentials: rc=$?"
ENROOT_CONFIG_PATH=$cfg srun </dev/null -w node3 $E import -o $f.2 docker://nvcr.io#nvidia/no-such-image:1.0 >$cfg/out 2>&1; echo "not found: rc=$?"
grep ERROR $cfg/out
"#,
        enroot = enroot.display()
    );
    // the credentials file's content comes on stdin after the script has read its own lines
    let script = script.replace(
        "install -m 600 /dev/stdin $cfg/.credentials",
        &format!("printf 'machine nvcr.io login $oauthtoken password %s\\n' '{}' | install -m 600 /dev/stdin $cfg/.credentials", key.trim()),
    );
    let out = env.ssh(&script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "4.1.2", "{out}");
    assert!(lines.contains(&"PRETTY_NAME=\"tao-slurm sandbox image nvidia/pytorch:24.01-py3\""), "{out}");
    assert!(lines.contains(&sandbox::setting("SLURM_USER")) && lines.contains(&"42"), "{out}");
    assert!(lines.contains(&"node2: 1") && lines.contains(&"node3: 0"), "a named container is its node's own: {out}");
    assert!(lines.contains(&"without credentials: rc=1"), "{out}");
    assert!(lines.contains(&"[INFO] Authenticating with user: <anonymous>"), "{out}");
    assert!(lines.contains(&"with credentials: rc=0"), "{out}");
    assert!(lines.contains(&"not found: rc=1"), "{out}");
    assert!(out.contains("/v2/nvidia/no-such-image/manifests/1.0 returned error code: 404 Not Found"), "{out}");
}

#[test]
fn preflight_names_the_pyxis_the_cluster_loads() {
    let out = Env::new().run(&["preflight"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line = text.lines().find(|l| l.starts_with("PASS  pyxis")).unwrap_or_else(|| panic!("no pyxis check: {text}"));
    assert!(line.ends_with("the plugin is Pyxis 0.24.0"), "{line}");
}
