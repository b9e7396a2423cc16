//! The I/O shell around the pure core: each operation builds one remote script (pure), runs it in one
//! round trip, parses the answer (pure) and records the outcome in the store.

pub mod cancel;
pub mod cluster;
pub mod credentials;
pub mod image;
pub mod inspect;
pub mod logs;
pub mod preflight;
pub mod refresh;
pub mod retry;
pub mod secrets;
pub mod submit;

/// Markers that split one remote script's output into sections. They begin with a character no Slurm
/// output line begins with.
pub(crate) const SECTION: &str = "@@tao-slurm:";

/// A shell filter that prefixes every line of file content with `|`, so that no line a job or a
/// container wrote can pose as a section marker; it also ends every line with a newline.
pub(crate) const PREFIX_LINES: &str = "awk '{print \"|\" $0}'";

/// The content a [`PREFIX_LINES`] filter produced, each line back as written (newline-terminated).
pub(crate) fn unprefix_lines(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        out.push_str(line.strip_prefix('|').unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Split `@@tao-slurm:NAME ARG` sections of a remote output into (name, arg, body).
pub(crate) fn sections(stdout: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for line in stdout.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix(SECTION) {
            let rest = rest.trim_end();
            let (name, arg) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push((name.to_string(), arg.to_string(), String::new()));
        } else if let Some(last) = out.last_mut() {
            last.2.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn sections_split() {
        let text = "junk\n@@tao-slurm:squeue\n1|R\n2|PD\n@@tao-slurm:rc squeue 0\n@@tao-slurm:file abc\n{\"x\":1}\n";
        let s = super::sections(text);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], ("squeue".into(), "".into(), "1|R\n2|PD\n".into()));
        assert_eq!(s[1], ("rc".into(), "squeue 0".into(), "".into()));
        assert_eq!(s[2], ("file".into(), "abc".into(), "{\"x\":1}\n".into()));
    }
}
