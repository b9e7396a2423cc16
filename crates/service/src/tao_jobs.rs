//! TAO's create bodies (`ExperimentJobReq`, `DatasetJobReq`, as nvidia-tao-client sends them) as
//! tao-slurm jobs, run as tao-core runs them on Slurm: the image from TAO's image table, the command
//! TAO's container entrypoint over the staged specs, env and meta files, the dataset URIs as inputs
//! checked on the cluster before submit, `parent_job_id` as a dependency. Fields TAO has and this
//! service does not use are ignored, as TAO ignores unknown fields, and named in `warnings`.

use super::error::{ApiError, ApiResult};
use super::state::AppState;
use super::types::{BackendDetailsIn, CommandIn, JobCreate, TaoJobCreate, TaoJobFields};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use tao_slurm_engine::tao_images::{self, ImageOverrides};

/// Why a TAO field is not used here (the rest: "not used by tao-slurm").
const WHY_IGNORED: &[(&str, &str)] = &[
    ("encryption_key", "TAO's model encryption does not apply: checkpoints stay in the job's results directory"),
    ("automl_settings", "AutoML is TAO's own scheduler; run variants as separate jobs"),
    ("base_experiment_ids", "base experiments live in TAO's registry; give the checkpoint's path in specs"),
    ("dataset_id", "datasets are not stored here; give their paths as train_dataset_uris, eval_dataset_uri..."),
    ("train_datasets", "dataset ids are not stored here; give their paths as train_dataset_uris"),
    ("eval_dataset", "dataset ids are not stored here; give the path as eval_dataset_uri"),
    ("inference_dataset", "dataset ids are not stored here; give the path as inference_dataset_uri"),
    ("calibration_dataset", "dataset ids are not stored here; give the path as calibration_dataset_uri"),
    ("force_create", "every create makes a new job (no de-duplication)"),
    ("skip_dataset_validation", "TAO's dataset structure check is not run; the paths' existence is checked"),
    ("backend_details.slurm_metadata", "written by the service, not read from a request"),
    ("backend_details.platform_id", "a Lepton field"),
];

/// A TAO job body (kind `experiment` or `dataset`, no `image`) rather than tao-slurm's own.
pub fn is_tao_body(body: &Value) -> bool {
    body.get("image").is_none() && body.get("kind").is_some()
}

/// TAO's image overrides: its `IMAGE_*` variables in the service's environment, under the operator's
/// file (`TAO_SLURM_TAO_IMAGES`, TOML: `[images]` KEY = "image", `[networks]` name = "KEY"). Read once.
fn overrides() -> ApiResult<&'static ImageOverrides> {
    static LOADED: OnceLock<Result<ImageOverrides, String>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        let vars = ImageOverrides::from_vars(|k| std::env::var(k).ok());
        let Ok(path) = std::env::var("TAO_SLURM_TAO_IMAGES") else { return Ok(vars) };
        Ok(vars.overlaid(&read_images_file(std::path::Path::new(&path))?))
    });
    loaded.as_ref().map_err(|e| {
        tracing::warn!(error = %e, "the operator's TAO image file (TAO_SLURM_TAO_IMAGES) is invalid");
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "workspace_unavailable",
            "the operator's TAO image file is invalid; the operator finds why in the service's log",
        )
    })
}

/// The operator's TAO image file at `path`, trusted as the other files that decide what runs: ours or
/// root's, not writable by group or others.
fn read_images_file(path: &std::path::Path) -> Result<ImageOverrides, String> {
    tao_slurm_engine::private::check_trusted_file(path, tao_slurm_engine::private::Trust::OursOrRoots)
        .map_err(|e| format!("TAO_SLURM_TAO_IMAGES: {e}"))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("TAO_SLURM_TAO_IMAGES: {}: {e}", path.display()))?;
    images_file(&text).map_err(|e| format!("TAO_SLURM_TAO_IMAGES: {}: {e}", path.display()))
}

/// The operator's TAO image file: `[images]` KEY = "image" (TAO's keys: TAO_PYTORCH, TAO_DEPLOY,
/// TAO_DS, VILA, COSMOS_RL, API, HUGGINGFACE, and "" for the default), `[networks]` name = "KEY".
fn images_file(text: &str) -> Result<ImageOverrides, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        images: BTreeMap<String, String>,
        #[serde(default)]
        networks: BTreeMap<String, String>,
    }
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    if let Some((n, _)) = f.images.iter().chain(&f.networks).find(|(_, v)| v.trim().is_empty()) {
        return Err(format!("{n} is empty"));
    }
    Ok(ImageOverrides { images: f.images, networks: f.networks })
}

/// The network a TAO job runs: `network_arch`, or for a dataset job its `dataset_type`.
fn network_of(req: &TaoJobCreate, o: &ImageOverrides) -> ApiResult<String> {
    let (field, network) = match (req.kind.as_str(), &req.network_arch, &req.dataset_type) {
        ("experiment" | "dataset", Some(n), _) => ("network_arch", n.clone()),
        ("dataset", None, Some(t)) => ("dataset_type", t.clone()),
        ("experiment", None, _) => return Err(ApiError::field("network_arch", "is required for an experiment job")),
        ("dataset", None, None) => {
            return Err(ApiError::field(
                "dataset_type",
                "is required for a dataset job (the network it prepares data for)",
            ))
        }
        (k, _, _) => return Err(ApiError::field("kind", format!("{k:?} is not \"experiment\" or \"dataset\""))),
    };
    if !o.knows(&network) {
        return Err(ApiError::field(
            field,
            format!("{network:?} is not a TAO network (nvidia-tao-core 7.3.0 has {}); an operator adds others in its TAO image file", tao_images::NETWORKS.join(", ")),
        ));
    }
    Ok(network)
}

/// The dataset URIs as inputs under `dataset_uris.*` of the staged specs (checked on the cluster
/// before submit when on shared storage, fetched into the job otherwise).
fn dataset_inputs(req: &TaoJobCreate) -> BTreeMap<String, String> {
    let mut inputs = BTreeMap::new();
    for (i, uri) in req.train_dataset_uris.iter().flatten().enumerate() {
        inputs.insert(format!("dataset_uris.train_{i}"), uri.clone());
    }
    for (name, uri) in [
        ("eval", &req.eval_dataset_uri),
        ("inference", &req.inference_dataset_uri),
        ("calibration", &req.calibration_dataset_uri),
    ] {
        if let Some(u) = uri {
            inputs.insert(format!("dataset_uris.{name}"), u.clone());
        }
    }
    inputs
}

/// The warnings for the fields that are set and not used.
fn warnings(req: &TaoJobCreate) -> Vec<String> {
    let mut set: Vec<String> = req.other.iter().filter(|(_, v)| !is_unset(v)).map(|(k, _)| k.clone()).collect();
    for (k, v) in req.backend_details.iter().flatten() {
        if !matches!(k.as_str(), "backend_type" | "partition" | "cluster_name") && !is_unset(v) {
            set.push(format!("backend_details.{k}"));
        }
    }
    set.into_iter()
        .map(|k| {
            let why = WHY_IGNORED.iter().find(|(n, _)| *n == k).map_or("not used by tao-slurm", |(_, w)| w);
            format!("{k} ignored: {why}")
        })
        .collect()
}

/// A value that asks for nothing: null, false, empty, or an object of such values.
fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        // `{"automl_enabled": false}` asks for nothing.
        Value::Object(o) => o.values().all(is_unset),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

/// A value of `docker_env_vars` as the text exported (strings as they are, other JSON as JSON).
fn env_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// TAO's body as tao-slurm's create body, with the TAO fields kept with the job.
pub fn to_job_create(state: &AppState, org: &str, req: &TaoJobCreate) -> ApiResult<(JobCreate, TaoJobFields)> {
    let o = overrides()?;
    let network = network_of(req, o)?;
    let action =
        req.action.clone().filter(|a| !a.is_empty()).ok_or_else(|| ApiError::field("action", "is required"))?;
    tao_slurm_engine::spec::check_text("action", &action).map_err(|e| ApiError::field("action", e.message))?;
    let specs = match &req.specs {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => return Err(ApiError::field("specs", "must be a JSON object")),
    };
    let parent_action = match &req.parent_job_id {
        Some(p) => {
            let job = super::common::org_job(state, org, p)
                .map_err(|_| ApiError::field("parent_job_id", format!("{p:?} is not the id of a job of org {org}")))?;
            job.out.action.clone()
        }
        None => None,
    };
    let image = tao_images::image_for(&network, &action, parent_action.as_deref(), o);
    let backend = req.backend_details.as_ref().map(|b| BackendDetailsIn {
        backend_type: b.get("backend_type").and_then(Value::as_str).map(String::from),
        partition: b.get("partition").and_then(Value::as_str).map(String::from),
        cluster_name: b.get("cluster_name").and_then(Value::as_str).map(String::from),
    });
    let create = JobCreate {
        image,
        command: Some(CommandIn::Shell(tao_images::entrypoint_command(&network, &action))),
        name: req.name.clone(),
        workspace: req.workspace.clone(),
        action: Some(action),
        specs,
        num_gpu: req.num_gpu,
        backend_details: backend,
        env: req.docker_env_vars.iter().flatten().map(|(k, v)| (k.clone(), env_text(v))).collect(),
        inputs: dataset_inputs(req),
        secret_env: req.secret_env.clone().unwrap_or_default(),
        after: req.parent_job_id.iter().cloned().collect(),
        ..Default::default()
    };
    let fields = TaoJobFields {
        kind: Some(req.kind.clone()),
        parent_id: req.parent_job_id.clone(),
        network_arch: Some(network),
        description: req.description.clone(),
        tags: req.tags.clone().unwrap_or_default(),
        dataset_type: req.dataset_type.clone(),
        dataset_format: req.dataset_format.clone(),
        train_dataset_uris: req.train_dataset_uris.clone().unwrap_or_default(),
        eval_dataset_uri: req.eval_dataset_uri.clone(),
        inference_dataset_uri: req.inference_dataset_uri.clone(),
        calibration_dataset_uri: req.calibration_dataset_uri.clone(),
        warnings: warnings(req),
    };
    Ok((create, fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> TaoJobCreate {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_tao_image_file_is_read_only_when_others_cannot_write_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("images.toml");
        std::fs::write(&f, "[images]\nTAO_PYTORCH = \"reg/tao:pyt\"\n").unwrap();
        for (mode, ok) in [(0o600, true), (0o644, true), (0o664, false), (0o666, false)] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            match read_images_file(&f) {
                Ok(o) => {
                    assert!(ok, "{mode:o} accepted");
                    assert_eq!(o.images["TAO_PYTORCH"], "reg/tao:pyt");
                }
                Err(e) => {
                    assert!(!ok, "{mode:o}: {e}");
                    assert!(
                        e.starts_with("TAO_SLURM_TAO_IMAGES: ") && e.contains("group or others can write it"),
                        "{e}"
                    );
                }
            }
        }
    }

    #[test]
    fn tao_bodies_are_told_from_ours() {
        assert!(is_tao_body(&serde_json::json!({"kind": "experiment", "action": "train"})));
        assert!(!is_tao_body(&serde_json::json!({"image": "x", "kind": "experiment"})));
        assert!(!is_tao_body(&serde_json::json!({"image": "x"})));
    }

    #[test]
    fn unused_fields_are_warned_about_and_unset_ones_are_not() {
        let req = body(serde_json::json!({
            "kind": "experiment", "action": "train", "encryption_key": "k", "automl_settings": {},
            "force_create": false, "shared": true, "backend_details": {"backend_type": "slurm", "slurm_metadata": {"a": 1}}
        }));
        let w = warnings(&req);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("encryption_key ignored: TAO's model encryption"), "{w:?}");
        assert!(w[1].starts_with("shared ignored: not used"), "{w:?}");
        assert!(w[2].starts_with("backend_details.slurm_metadata ignored"), "{w:?}");
    }

    #[test]
    fn the_operators_image_file_is_read_strictly() {
        let o = images_file("[images]\nTAO_PYTORCH = \"reg#tao:pyt\"\n[networks]\nmy_net = \"TAO_PYTORCH\"\n").unwrap();
        assert_eq!(tao_images::image_for("my_net", "train", None, &o), "reg#tao:pyt");
        assert!(images_file("[images]\nTAO_PYTORCH = \"\"\n").unwrap_err().contains("TAO_PYTORCH"));
        assert!(images_file("[imagez]\n").is_err());
    }

    #[test]
    fn dataset_uris_become_inputs() {
        let req = body(serde_json::json!({
            "kind": "dataset", "train_dataset_uris": ["lustre:///a", "lustre:///b"], "eval_dataset_uri": "slurm:///c"
        }));
        let i = dataset_inputs(&req);
        assert_eq!(i["dataset_uris.train_0"], "lustre:///a");
        assert_eq!(i["dataset_uris.train_1"], "lustre:///b");
        assert_eq!(i["dataset_uris.eval"], "slurm:///c");
    }

    #[test]
    fn the_network_is_named_or_refused_with_its_field() {
        let o = ImageOverrides::default();
        let net = |v: Value| network_of(&body(v), &o).map_err(|e| e.body.field.unwrap());
        assert_eq!(net(serde_json::json!({"kind": "experiment", "network_arch": "dino"})), Ok("dino".into()));
        assert_eq!(net(serde_json::json!({"kind": "dataset", "dataset_type": "image"})), Ok("image".into()));
        assert_eq!(net(serde_json::json!({"kind": "experiment"})), Err("network_arch".into()));
        assert_eq!(net(serde_json::json!({"kind": "dataset"})), Err("dataset_type".into()));
        assert_eq!(net(serde_json::json!({"kind": "experiment", "network_arch": "nope"})), Err("network_arch".into()));
        assert_eq!(net(serde_json::json!({"kind": "model"})), Err("kind".into()));
    }
}
