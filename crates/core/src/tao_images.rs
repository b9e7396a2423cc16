//! TAO's image table, as nvidia-tao-core 7.3.0 picks the container of a job (`handlers/docker_images.py`
//! and `handlers/actions.py`): the network's image key from its network config (`api_params.image`),
//! TAO_DS for the data-services actions, TAO_DEPLOY when the job or its parent is a TensorRT action, the
//! per-network version override, and the per-action override. Pure data and one pure function: the
//! caller passes in the overrides it read (TAO's `IMAGE_*` variables, an operator's file).

use std::collections::BTreeMap;

/// The image keys, the variable that overrides each (TAO's names) and TAO's default.
pub const IMAGE_KEYS: &[(&str, &str, &str)] = &[
    ("TAO_PYTORCH", "IMAGE_TAO_PYTORCH", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"),
    ("TAO_DEPLOY", "IMAGE_TAO_DEPLOY", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-deploy"),
    ("", "IMAGE_DEFAULT", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"),
    ("API", "IMAGE_API", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-api"),
    ("TAO_DS", "IMAGE_TAO_DS", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-data-services"),
    ("VILA", "IMAGE_VILA", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-vila"),
    ("COSMOS_RL", "IMAGE_COSMOS_RL", "nvcr.io/ea-tlt/tao_ea/cosmos_rl:latest"),
];

/// Each network's image key (`api_params.image` of its network config); the rest are TAO_PYTORCH.
/// `vlm` names TAO_VILA, a key TAO's table lacks: TAO fails on it, here it takes the default image.
const NETWORK_KEYS: &[(&str, &str)] =
    &[("cosmos-rl", "COSMOS_RL"), ("image", "TAO_DS"), ("vila", "VILA"), ("vlm", "TAO_VILA")];

/// The networks of nvidia-tao-core 7.3.0 (its `network_configs/*.config.json`).
pub const NETWORKS: &[&str] = &[
    "action_recognition",
    "bevfusion",
    "centerpose",
    "character_recognition",
    "classification_pyt",
    "clip",
    "cosmos-rl",
    "deformable_detr",
    "depth_net_mono",
    "depth_net_stereo",
    "dino",
    "grounding_dino",
    "huggingface",
    "image",
    "image_classification",
    "mae",
    "mal",
    "mask2former",
    "mask_grounding_dino",
    "ml_recog",
    "nvdinov2",
    "nvpanoptix3d",
    "object_detection",
    "ocdnet",
    "ocrnet",
    "oneformer",
    "optical_inspection",
    "pointpillars",
    "pose_classification",
    "re_identification",
    "rtdetr",
    "segformer",
    "segmentation",
    "sparse4d",
    "stylegan_xl",
    "vila",
    "visual_changenet_classify",
    "visual_changenet_segment",
    "vlm",
];

/// (network, action, image key): `api_params.image_override_per_action`.
const ACTION_OVERRIDES: &[(&str, &str, &str)] = &[("sparse4d", "dataset_convert", "TAO_DS")];

/// TAO's `DOCKER_IMAGE_VERSION`: (network, release version of its framework, the version it runs).
const VERSIONS: &[(&str, &str, &str)] = &[
    ("action_recognition", "6.25.7", "6.0.0"),
    ("depth_net_mono", "6.25.10", "6.25.10"),
    ("depth_net_stereo", "6.25.10", "6.25.10"),
    ("bevfusion", "6.25.7", "6.0.0"),
    ("centerpose", "6.25.7", "6.0.0"),
    ("classification_pyt", "6.25.7", "6.0.0"),
    ("deformable_detr", "6.25.7", "6.0.0"),
    ("dino", "6.25.7", "6.0.0"),
    ("image", "6.25.7", "6.0.0"),
    ("mae", "6.25.7", "6.0.0"),
    ("mal", "6.25.7", "6.0.0"),
    ("nvdinov2", "6.25.7", "6.0.0"),
    ("ml_recog", "6.25.7", "6.0.0"),
    ("object_detection", "6.25.7", "6.0.0"),
    ("ocdnet", "6.25.7", "6.0.0"),
    ("ocrnet", "6.25.7", "6.0.0"),
    ("optical_inspection", "6.25.7", "6.0.0"),
    ("pointpillars", "6.25.7", "6.0.0"),
    ("pose_classification", "6.25.7", "6.0.0"),
    ("re_identification", "6.25.7", "6.0.0"),
    ("rtdetr", "6.25.7", "6.0.0"),
    ("segformer", "6.25.7", "6.0.0"),
    ("sparse4d", "6.25.7", "6.25.7"),
    ("stylegan_xl", "6.25.7", "6.0.0"),
    ("visual_changenet_classify", "6.25.7", "6.0.0"),
    ("visual_changenet_segment", "6.25.7", "6.0.0"),
];

/// TAO's data-services actions (`_DATA_SERVICES_ACTIONS`): they run in the TAO_DS image.
pub const DATA_SERVICES_ACTIONS: &[&str] =
    &["annotation_format_convert", "auto_label", "augment", "analyze", "validate_images", "validate_annotations"];

/// Actions that run in the TAO_DEPLOY image (also for a job whose parent ran one).
pub const DEPLOY_ACTIONS: &[&str] = &["gen_trt_engine", "trtexec"];

/// What overrides TAO's table: images by key (`TAO_PYTORCH`, ``, ...) and networks' keys. Built by
/// the caller from TAO's `IMAGE_*` variables and the operator's file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageOverrides {
    pub images: BTreeMap<String, String>,
    /// An operator's networks (or changed keys): network → image key.
    pub networks: BTreeMap<String, String>,
}

impl ImageOverrides {
    /// The overrides TAO's own variables give (`IMAGE_TAO_PYTORCH`, ..., `IMAGE_HUGGINGFACE`), read
    /// through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> ImageOverrides {
        let mut images = BTreeMap::new();
        for (key, name, _) in IMAGE_KEYS {
            if let Some(v) = var(name).filter(|v| !v.trim().is_empty()) {
                images.insert(key.to_string(), v.trim().to_string());
            }
        }
        if let Some(v) = var("IMAGE_HUGGINGFACE").filter(|v| !v.trim().is_empty()) {
            images.insert("HUGGINGFACE".into(), v.trim().to_string());
        }
        ImageOverrides { images, networks: BTreeMap::new() }
    }

    /// These overrides with `other`'s laid over them.
    pub fn overlaid(mut self, other: &ImageOverrides) -> ImageOverrides {
        self.images.extend(other.images.clone());
        self.networks.extend(other.networks.clone());
        self
    }

    /// The image of a key: the override, else TAO's default (HUGGINGFACE follows TAO_PYTORCH; a key
    /// TAO lacks takes the default image).
    pub fn image(&self, key: &str) -> String {
        if let Some(v) = self.images.get(key) {
            return v.clone();
        }
        let key = if key == "HUGGINGFACE" || key == "tensorboard" { "TAO_PYTORCH" } else { key };
        if let Some(v) = self.images.get(key) {
            return v.clone();
        }
        IMAGE_KEYS
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(k, _, d)| self.images.get(*k).cloned().unwrap_or_else(|| d.to_string()))
            .unwrap_or_else(|| self.image(""))
    }

    /// Whether a network is known (TAO's or the operator's).
    pub fn knows(&self, network: &str) -> bool {
        NETWORKS.contains(&network) || self.networks.contains_key(network)
    }
}

/// The image TAO runs `action` of `network` in; `parent_action` is the action of the job's parent.
pub fn image_for(network: &str, action: &str, parent_action: Option<&str>, o: &ImageOverrides) -> String {
    let key = o
        .networks
        .get(network)
        .map(String::as_str)
        .or_else(|| NETWORK_KEYS.iter().find(|(n, _)| *n == network).map(|(_, k)| *k))
        .unwrap_or("TAO_PYTORCH");
    let mut image = o.image(key);
    if DATA_SERVICES_ACTIONS.contains(&action) {
        image = o.image("TAO_DS");
    }
    if DEPLOY_ACTIONS.contains(&action) || parent_action.is_some_and(|a| DEPLOY_ACTIONS.contains(&a)) {
        image = o.image("TAO_DEPLOY");
    }
    if let Some((_, release, run)) = VERSIONS.iter().find(|(n, _, _)| *n == network) {
        if !image.contains(run) {
            image = image.replace(release, run);
        }
    }
    if let Some((_, _, k)) = ACTION_OVERRIDES.iter().find(|(n, a, _)| *n == network && *a == action) {
        image = o.image(k);
    }
    image
}

/// TAO's container entrypoint for a job, as tao-core's Slurm handler runs it (`get_run_command`),
/// as one shell command: the job id and the staged files come from the job's environment
/// (`TAO_JOB_ID`, `TAO_SPECS_FILE`; the env and meta files sit beside the specs directory).
pub fn entrypoint_command(network: &str, action: &str) -> String {
    use crate::script::shell::quote;
    format!(
        "python -m nvidia_tao_core.microservices.handlers.container_handler --neural-network-name {} \
         --action-name {} --job-id \"$TAO_JOB_ID\" --specs-file \"$TAO_SPECS_FILE\" \
         --docker-env-vars-file \"${{TAO_SPECS_FILE%/specs/*}}/env/$TAO_JOB_ID.json\" \
         --cloud-metadata-file \"${{TAO_SPECS_FILE%/specs/*}}/meta/$TAO_JOB_ID.json\"",
        quote(network),
        quote(action)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> ImageOverrides {
        ImageOverrides::default()
    }

    #[test]
    fn tao_defaults() {
        let o = none();
        assert_eq!(image_for("dino", "train", None, &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt");
        assert_eq!(image_for("cosmos-rl", "train", None, &o), "nvcr.io/ea-tlt/tao_ea/cosmos_rl:latest");
        assert_eq!(image_for("vila", "train", None, &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-vila");
        assert_eq!(
            image_for("image", "validate_images", None, &o),
            "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-data-services"
        );
        assert_eq!(image_for("dino", "augment", None, &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-data-services");
        assert_eq!(image_for("dino", "gen_trt_engine", None, &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-deploy");
        assert_eq!(image_for("dino", "evaluate", Some("trtexec"), &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-deploy");
        assert_eq!(
            image_for("sparse4d", "dataset_convert", None, &o),
            "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-data-services"
        );
        // A key TAO's table lacks: the default image.
        assert_eq!(image_for("vlm", "train", None, &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt");
    }

    #[test]
    fn tao_variables_override_and_versions_apply() {
        let vars: BTreeMap<&str, &str> =
            [("IMAGE_TAO_PYTORCH", "reg/tao:6.25.7-pyt"), ("IMAGE_DEFAULT", "reg/default:1"), ("IMAGE_COSMOS_RL", " ")]
                .into();
        let o = ImageOverrides::from_vars(|k| vars.get(k).map(|v| v.to_string()));
        // The network runs an older framework version than the release: TAO swaps the tag.
        assert_eq!(image_for("dino", "train", None, &o), "reg/tao:6.0.0-pyt");
        assert_eq!(image_for("sparse4d", "train", None, &o), "reg/tao:6.25.7-pyt");
        assert_eq!(image_for("clip", "train", None, &o), "reg/tao:6.25.7-pyt");
        assert_eq!(image_for("huggingface", "train", None, &o), "reg/tao:6.25.7-pyt");
        assert_eq!(image_for("vlm", "train", None, &o), "reg/default:1");
        // A blank variable is no override.
        assert_eq!(image_for("cosmos-rl", "train", None, &o), "nvcr.io/ea-tlt/tao_ea/cosmos_rl:latest");
    }

    #[test]
    fn an_operator_file_lays_over_the_variables() {
        let vars = ImageOverrides::from_vars(|k| (k == "IMAGE_TAO_PYTORCH").then(|| "a/pyt:1".to_string()));
        let file = ImageOverrides {
            images: [("TAO_PYTORCH".to_string(), "b/pyt:2".to_string())].into(),
            networks: [("my_net".to_string(), "VILA".to_string())].into(),
        };
        let o = vars.overlaid(&file);
        assert_eq!(image_for("clip", "train", None, &o), "b/pyt:2");
        assert!(o.knows("my_net") && o.knows("dino") && !o.knows("nope"));
        assert_eq!(image_for("my_net", "train", None, &o), "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-vila");
    }

    #[test]
    fn entrypoint_is_taos_with_quoted_names() {
        let c = entrypoint_command("dino", "train");
        assert!(c.starts_with("python -m nvidia_tao_core.microservices.handlers.container_handler --neural-network-name dino --action-name train --job-id \"$TAO_JOB_ID\""), "{c}");
        assert!(c.contains("--docker-env-vars-file \"${TAO_SPECS_FILE%/specs/*}/env/$TAO_JOB_ID.json\""), "{c}");
        assert!(entrypoint_command("a b", "x;y").contains("'a b' --action-name 'x;y'"));
    }
}
