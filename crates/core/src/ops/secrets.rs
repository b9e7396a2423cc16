//! The script that removes finished jobs' secrets directories and reports each one gone. Pure.

use crate::protocol::SECTION;
use crate::script::shell::quote;

/// Remove the directories and report each one that is gone (rm never follows a symlink it removes).
pub fn removal_script(dirs: &[(String, String)]) -> String {
    let mut s = String::new();
    for (job_id, dir) in dirs {
        let d = quote(dir);
        s.push_str(&format!("rm -rf -- {d} 2>/dev/null; [ -e {d} ] || [ -L {d} ] || echo '{SECTION}gone {job_id}'\n"));
    }
    s.push_str("exit 0\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_reports_only_what_is_gone_and_never_follows_a_link() {
        let top = tempfile::tempdir().unwrap();
        let a = top.path().join("a");
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("env"), "export X=1\n").unwrap();
        let outside = top.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let link = top.path().join("b");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let dirs = vec![
            ("ja".to_string(), a.display().to_string()),
            ("jb".to_string(), link.display().to_string()),
            ("jc".to_string(), top.path().join("never-made").display().to_string()),
        ];
        let out = std::process::Command::new("bash").arg("-c").arg(removal_script(&dirs)).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for id in ["ja", "jb", "jc"] {
            assert!(text.contains(&format!("{SECTION}gone {id}")), "{text}");
        }
        assert!(!a.exists() && !link.exists());
        assert!(outside.join("keep").exists(), "the link's target is untouched");
    }
}
