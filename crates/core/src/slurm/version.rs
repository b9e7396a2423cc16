//! The Slurm release a cluster runs, as `sbatch --version` prints it (`slurm 22.05.8`,
//! `slurm-wlm 24.11.5`), and the releases tao-slurm is tested against.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlurmVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// The releases the end-to-end suite runs against (the two sandbox clusters): `(major, minor)`.
pub const TESTED_RELEASES: [(u32, u32); 2] = [(22, 5), (24, 11)];

impl SlurmVersion {
    /// The version in `sbatch --version`'s output: its last word, `MAJOR.MINOR.PATCH` (a suffix such
    /// as `-rc1` or Debian's `-1` is ignored). None when there is no such word.
    pub fn parse(text: &str) -> Option<SlurmVersion> {
        let word = text.split_whitespace().last()?;
        let mut parts = word.split(['.', '-']);
        let mut num = || parts.next().and_then(|p| p.parse::<u32>().ok());
        let (major, minor) = (num()?, num()?);
        Some(SlurmVersion { major, minor, patch: num().unwrap_or(0) })
    }

    /// Whether this release is one the end-to-end suite runs against.
    pub fn is_tested(&self) -> bool {
        TESTED_RELEASES.contains(&(self.major, self.minor))
    }
}

impl fmt::Display for SlurmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.major, self.minor, self.patch)
    }
}

/// The tested releases, for messages: `22.05, 24.11`.
pub fn tested_releases() -> String {
    TESTED_RELEASES.iter().map(|(a, b)| format!("{a}.{b:02}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_sbatch_prints_them() {
        let v = |major, minor, patch| Some(SlurmVersion { major, minor, patch });
        let cases = [
            ("slurm 22.05.8\n", v(22, 5, 8)),
            ("slurm-wlm 24.11.5", v(24, 11, 5)),
            ("slurm 23.02.0-0rc1", v(23, 2, 0)),
            ("slurm 25.05", v(25, 5, 0)),
            ("", None),
            ("sbatch: command not found", None),
        ];
        for (text, want) in cases {
            assert_eq!(SlurmVersion::parse(text), want, "{text:?}");
        }
        assert_eq!(SlurmVersion::parse("slurm 22.05.8").unwrap().to_string(), "22.05.8");
        assert!(SlurmVersion::parse("slurm-wlm 24.11.5").unwrap().is_tested());
        assert!(!SlurmVersion::parse("slurm 23.02.7").unwrap().is_tested());
        assert_eq!(tested_releases(), "22.05, 24.11");
    }
}
