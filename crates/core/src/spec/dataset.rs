//! Dataset and input URIs (contract §6). Jobs run on the cluster, so only paths on its shared
//! storage are datasets; small auxiliary inputs may come from object stores and hubs.

use super::SpecError;
use serde::{Deserialize, Serialize};

/// The contract's message for local paths.
pub const LOCAL_PATH_MESSAGE: &str =
    "Local paths (file:// or no prefix) not allowed for SLURM backend. Use lustre:// for shared filesystem access.";

/// Where an input lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InputLocation {
    /// An absolute path on the cluster's shared storage.
    Shared { path: String },
    /// A small auxiliary input fetched inside the job before the command starts.
    Remote { scheme: String, uri: String },
}

/// Schemes accepted for small auxiliary inputs (checkpoints, configs), never for training data.
pub const AUX_SCHEMES: &[&str] = &["s3", "hf_model", "hf_dataset", "ngc"];

/// Parse an input URI: `lustre:///abs`, `slurm:///a/b` or `slurm://a/b` (both `/a/b`), an absolute
/// path on the cluster, or an auxiliary `s3://`, `hf_model://`, `hf_dataset://`, `ngc://` reference.
pub fn parse_input(field: &str, text: &str) -> Result<InputLocation, SpecError> {
    let text = text.trim();
    if text.chars().any(|c| c.is_control()) {
        return Err(SpecError::new(field, format!("{text:?} contains control characters")));
    }
    let shared = |path: &str| -> Result<InputLocation, SpecError> {
        let path = format!("/{}", path.trim_start_matches('/'));
        let plain = |c: char| c.is_ascii_alphanumeric() || "_./+@=:,%-".contains(c);
        if path == "/" || !path.chars().all(plain) || path.split('/').any(|c| c == "..") {
            return Err(SpecError::new(
                field,
                format!("{text:?} is not a usable path on shared storage (letters, digits and _ . / + @ = : , % - only, no ..)"),
            ));
        }
        Ok(InputLocation::Shared { path: path.trim_end_matches('/').to_string() })
    };
    if let Some(rest) = text.strip_prefix("lustre://") {
        if !rest.starts_with('/') {
            return Err(SpecError::new(
                field,
                format!("{text:?}: lustre:// takes an absolute path (lustre:///data/x)"),
            ));
        }
        return shared(rest);
    }
    if let Some(rest) = text.strip_prefix("slurm://") {
        // Both slurm:///a/b and slurm://a/b mean /a/b.
        return shared(rest);
    }
    if text.starts_with("file://") {
        return Err(SpecError::new(field, LOCAL_PATH_MESSAGE));
    }
    if let Some((scheme, rest)) = text.split_once("://") {
        if AUX_SCHEMES.contains(&scheme) {
            let ok = !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || "_./+@=:,%-".contains(c));
            if !ok {
                return Err(SpecError::new(field, format!("{text:?} is not a valid {scheme}:// reference")));
            }
            // The reference reaches a download command's arguments: it must not read as an option.
            if rest.starts_with('-') || rest.split('/').any(|part| part.starts_with('-')) {
                return Err(SpecError::new(
                    field,
                    format!("{text:?}: a {scheme}:// reference must not start with '-' (it would be read as an option of the download command)"),
                ));
            }
            return Ok(InputLocation::Remote { scheme: scheme.to_string(), uri: text.to_string() });
        }
        return Err(SpecError::new(
            field,
            format!("{scheme}:// is not supported; use lustre:///path for shared storage, or s3://, hf_model://, hf_dataset://, ngc:// for small auxiliary inputs"),
        ));
    }
    if text.starts_with('/') {
        return shared(text);
    }
    Err(SpecError::new(field, LOCAL_PATH_MESSAGE))
}

/// Training data fetched at job start burns the GPU allocation while it downloads.
pub fn dataset_warning(key: &str, location: &InputLocation) -> Option<String> {
    let InputLocation::Remote { uri, .. } = location else { return None };
    let k = key.to_ascii_lowercase();
    let training = k.split('.').any(|seg| {
        seg.contains("dataset") || seg == "train" || seg.starts_with("train_") || seg == "data" || seg == "data_dir"
    });
    training.then(|| {
        format!(
            "warning: {key} = {uri} is fetched inside the job after the GPUs are allocated; a training dataset \
             downloaded that way leaves them idle (and can get the job killed as GPU-idle). Put datasets on the \
             shared filesystem and use lustre:// paths; keep s3/hf/ngc for small inputs such as checkpoints."
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_forms() {
        let shared = |p: &str| InputLocation::Shared { path: p.into() };
        let cases = [
            ("lustre:///lustre/data/coco", shared("/lustre/data/coco")),
            ("slurm:///a/b", shared("/a/b")),
            ("slurm://a/b", shared("/a/b")),
            ("/lustre/data/coco/", shared("/lustre/data/coco")),
            ("s3://bucket/ckpt.pth", InputLocation::Remote { scheme: "s3".into(), uri: "s3://bucket/ckpt.pth".into() }),
            (
                "hf_model://org/model",
                InputLocation::Remote { scheme: "hf_model".into(), uri: "hf_model://org/model".into() },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_input("input", text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn local_paths_are_refused_with_the_contract_message() {
        for text in ["file:///home/me/data", "data/coco", "./x", "~/data", "coco"] {
            let err = parse_input("input", text).unwrap_err();
            assert_eq!(err.message, LOCAL_PATH_MESSAGE, "{text}");
        }
        for text in ["lustre://relative", "/a/../etc", "/a b", "gs://bucket/x", "s3://", "/"] {
            assert!(parse_input("input", text).is_err(), "{text}");
        }
        // A reference that a download command would read as an option.
        for text in ["hf_model://-oProxyCommand=x", "ngc://org/-team/model:1", "hf_dataset://--token=x"] {
            let err = parse_input("inputs", text).unwrap_err();
            assert!(err.message.contains("must not start with '-'") && err.field == "inputs", "{text}: {err}");
        }
    }

    #[test]
    fn remote_training_data_gets_a_warning() {
        let s3 = parse_input("x", "s3://b/train").unwrap();
        assert!(dataset_warning("custom.train_dataset.path", &s3).is_some());
        assert!(dataset_warning("model.pretrained_checkpoint", &s3).is_none());
        assert!(dataset_warning("dataset_root", &parse_input("x", "/lustre/x").unwrap()).is_none());
    }
}
