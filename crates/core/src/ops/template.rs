//! Remote script texts kept in files of their own (`ops/templates/`, included at compile time), so
//! that awk and shell read as awk and shell rather than as escaped Rust strings. A template names its
//! values `@NAME@`; its leading `#` comment lines document it and are not sent.

/// `template` with each `@NAME@` replaced by its value and its leading comment lines dropped. Every
/// marker must be given a value (a test of each template checks that none is left).
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let body: String = template.lines().skip_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let mut out = body;
    for (name, value) in values {
        out = out.replace(&format!("@{name}@"), value);
    }
    out
}

/// Markers left unfilled in `text` (`@NAME@` with NAME in capitals).
pub fn unfilled(text: &str) -> Vec<String> {
    let re = regex::Regex::new(r"@[A-Z][A-Z_]*@").expect("a valid pattern");
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_filled_and_comments_dropped() {
        let t = "# what it does\n# more\necho @A@ @B@\n# kept: not leading\n";
        assert_eq!(fill(t, &[("A", "1"), ("B", "x y")]), "echo 1 x y\n# kept: not leading\n");
        assert_eq!(unfilled(&fill(t, &[("A", "1")])), ["@B@"]);
        assert!(unfilled("@@tao-slurm:rc squeue 0").is_empty(), "the section marker is not a template marker");
    }
}
