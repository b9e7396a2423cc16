//! The line protocol of remote scripts: output is split into sections by marker lines, and every line
//! of content that a job or a command could have written arrives `|`-prefixed, so that nothing it
//! contains can pose as a marker. Pure.

/// Markers that split one remote script's output into sections. They begin with a character no Slurm
/// output line begins with.
pub const SECTION: &str = "@@tao-slurm:";

/// A shell filter that prefixes every line of file content with `|`, so that no line a job or a
/// container wrote can pose as a section marker; it also ends every line with a newline.
pub const PREFIX_LINES: &str = "awk '{print \"|\" $0}'";

/// The content a [`PREFIX_LINES`] filter produced, each line back as written (newline-terminated).
pub fn unprefix_lines(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        out.push_str(line.strip_prefix('|').unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Split `@@tao-slurm:NAME ARG` sections of a remote output into (name, arg, body).
pub fn sections(stdout: &str) -> Vec<(String, String, String)> {
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
