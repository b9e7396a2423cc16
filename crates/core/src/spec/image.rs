//! Container image references, normalised to the form Pyxis' `--container-image` expects.
//!
//! Accepted (contract §3): an absolute `.sqsh` path; `registry#image:tag`; `docker://registry#image:tag`;
//! plain `registry/image:tag`, rewritten to `registry#image:tag` when the first component is a registry
//! host (it holds a `.` or `:` or is `localhost`). Docker Hub references (`ubuntu:22.04`,
//! `nvidia/cuda:12.4.1-base`) stay as they are: Pyxis reads a reference without `#` as Docker Hub.

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// What the user wrote.
    pub original: String,
    /// The value passed to `--container-image`.
    pub pyxis: String,
    /// A squashfs file on shared storage, used as is.
    pub is_sqsh_path: bool,
}

static NAME_PATH: LazyLock<Regex> = LazyLock::new(|| {
    // repository path: lowercase components separated by '/', each [a-z0-9] runs joined by . _ __ -
    Regex::new(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$").unwrap()
});
static TAG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$").unwrap());
static DIGEST: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^sha256:[0-9a-f]{64}$").unwrap());
static REGISTRY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?$").unwrap());
static SQSH_PATH: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^/[A-Za-z0-9_./+@=-]+\.sqsh$").unwrap());

const FORMS: &str = "an absolute /path/image.sqsh, registry#image:tag, docker://registry#image:tag, \
registry/image:tag (e.g. nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt) or a Docker Hub name (ubuntu:22.04)";

impl ImageRef {
    pub fn parse(text: &str) -> Result<ImageRef, String> {
        let original = text.to_string();
        let bad = |why: &str| Err(format!("image {text:?} is not valid ({why}); use {FORMS}"));
        if text.is_empty() {
            return bad("empty");
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return bad("it contains whitespace or control characters");
        }
        if text.starts_with('/') {
            if text.ends_with(".sqsh") && SQSH_PATH.is_match(text) && !text.contains("/../") {
                return Ok(ImageRef { original, pyxis: text.to_string(), is_sqsh_path: true });
            }
            return bad("an absolute path must name a .sqsh file with plain characters");
        }
        let rest = text.strip_prefix("docker://").unwrap_or(text);
        // Optional `user@` credentials prefix is not accepted: credentials belong in enroot's file.
        let (registry, remainder) = match rest.split_once('#') {
            Some((reg, rem)) => (Some(reg), rem),
            None => {
                let first = rest.split('/').next().unwrap_or("");
                let is_registry =
                    rest.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
                if is_registry {
                    (Some(first), &rest[first.len() + 1..])
                } else {
                    (None, rest)
                }
            }
        };
        if let Some(reg) = registry {
            if !REGISTRY.is_match(reg) {
                return bad("the registry host is malformed");
            }
        }
        let (name_and_tag, digest) = match remainder.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (remainder, None),
        };
        if let Some(d) = digest {
            if !DIGEST.is_match(d) {
                return bad("a digest must be sha256: followed by 64 hex digits");
            }
        }
        // A ':' after the last '/' separates the tag.
        let last_slash = name_and_tag.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match name_and_tag[last_slash..].find(':') {
            Some(i) => (&name_and_tag[..last_slash + i], Some(&name_and_tag[last_slash + i + 1..])),
            None => (name_and_tag, None),
        };
        if !NAME_PATH.is_match(name) {
            return bad("the repository name must be lowercase letters, digits and . _ - separated by /");
        }
        if let Some(t) = tag {
            if !TAG.is_match(t) {
                return bad("the tag must be letters, digits, _ . - (at most 128)");
            }
        }
        let pyxis = match registry {
            Some(reg) => format!("{reg}#{name_and_tag}{}", digest.map(|d| format!("@{d}")).unwrap_or_default()),
            None => rest.to_string(),
        };
        Ok(ImageRef { original, pyxis, is_sqsh_path: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let cases = [
            ("nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt", "nvcr.io#nvidia/tao/tao-toolkit:6.26.3-pyt"),
            ("nvcr.io#nvidia/tao/tao-toolkit:6.26.3-pyt", "nvcr.io#nvidia/tao/tao-toolkit:6.26.3-pyt"),
            ("docker://nvcr.io#nvidia/pytorch:23.10-py3", "nvcr.io#nvidia/pytorch:23.10-py3"),
            ("nvidia/cuda:12.4.1-base", "nvidia/cuda:12.4.1-base"),
            ("ubuntu:22.04", "ubuntu:22.04"),
            ("ubuntu", "ubuntu"),
            ("localhost/img:1", "localhost#img:1"),
            ("localhost:5000/team/img:1", "localhost:5000#team/img:1"),
            ("/lustre/images/tao.sqsh", "/lustre/images/tao.sqsh"),
        ];
        for (input, want) in cases {
            assert_eq!(ImageRef::parse(input).unwrap().pyxis, want, "{input}");
        }
        let with_digest = format!("nvcr.io/nvidia/cuda@{digest}");
        assert_eq!(ImageRef::parse(&with_digest).unwrap().pyxis, format!("nvcr.io#nvidia/cuda@{digest}"));
        let hub_digest = format!("ubuntu@{digest}");
        assert_eq!(ImageRef::parse(&hub_digest).unwrap().pyxis, hub_digest);
        assert!(ImageRef::parse("/lustre/images/tao.sqsh").unwrap().is_sqsh_path);
    }

    #[test]
    fn rejected_forms() {
        for input in [
            "",
            "Ubuntu:22.04",
            "ubuntu:22.04\n",
            "ubuntu:$(id)",
            "a b",
            "/lustre/images/tao.tar",
            "/lustre/../etc/x.sqsh",
            "nvcr.io/nvidia/cuda@sha256:abc",
            "nvcr.io#",
            "ubuntu:",
            "-rf",
            "img;rm",
        ] {
            assert!(ImageRef::parse(input).is_err(), "{input:?} should be rejected");
        }
    }
}
