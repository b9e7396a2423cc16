//! Where Slurm places a job beyond its GPUs, nodes and partition: the fields written once, with their
//! documentation, that every door takes as they are. The command line flattens them into its flags,
//! the MCP submit tool into its arguments, the service into its create body (each door's help, schema
//! and OpenAPI description is the doc comment here), and Python takes every [`JobSpec`] field by
//! name. A field added here and to [`JobSpec`] reaches every door with no door's code changed.

use super::JobSpec;
use serde::{Deserialize, Serialize};

/// Slurm's placement of the job: accounting, quality of service, node features and nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Placement {
    /// CPUs for each task (one task per node)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub cpus_per_task: Option<u32>,
    /// Memory per node, as Slurm's --mem takes it (64G, 512M, 0 for all of a node's)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub memory: Option<String>,
    /// The Slurm account the job is charged to (default SLURM_ACCOUNT)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub account: Option<String>,
    /// The quality of service the job runs under
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub qos: Option<String>,
    /// Node features the job needs, joined by & | , (a100&ib)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub constraint: Option<String>,
    /// Nodes never to run on (node[1-3],node7)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub exclude: Option<String>,
    /// The only nodes to run on (node[1-2],node7): Slurm's --nodelist, for a job that must run there
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub nodelist: Option<String>,
    /// An advance reservation to run in
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub reservation: Option<String>,
}

impl Placement {
    /// A spec with these fields set and nothing else, to lay over another (see [`JobSpec::overlay`])
    /// or to fill the rest of a door's spec (`JobSpec { image, ..placement.spec() }`).
    pub fn spec(&self) -> JobSpec {
        let fields = serde_json::to_value(self).expect("placement serialises");
        serde_json::from_value(fields).expect("every placement field is a JobSpec field (tested)")
    }
}

/// The first placement field of `object` whose value is of the wrong type, with serde's message. A
/// door's arguments that flatten the placement name the field with it: serde's error from inside a
/// flattened struct carries no path.
pub fn placement_field_error(object: &serde_json::Map<String, serde_json::Value>) -> Option<(String, String)> {
    object.iter().filter(|(k, _)| placement_fields().contains(&k.as_str())).find_map(|(k, v)| {
        let one = serde_json::Value::Object([(k.clone(), v.clone())].into_iter().collect());
        serde_json::from_value::<Placement>(one).err().map(|e| (k.clone(), e.to_string()))
    })
}

/// The names of [`Placement`]'s fields, as each door takes them.
pub fn placement_fields() -> &'static [&'static str] {
    serde_aux::serde_introspection::serde_introspect::<Placement>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placement_field_is_a_job_field_and_reaches_the_spec() {
        let fields = super::super::doors::job_fields();
        for f in placement_fields() {
            assert!(fields.contains(f), "{f} is not a JobSpec field");
        }
        // Each field set alone reaches the spec's field of the same name, and overlays it.
        let every = Placement {
            cpus_per_task: Some(3),
            memory: Some("64G".into()),
            account: Some("a".into()),
            qos: Some("q".into()),
            constraint: Some("c".into()),
            exclude: Some("n1".into()),
            nodelist: Some("n2".into()),
            reservation: Some("r".into()),
        };
        let spec = every.spec();
        let as_json = serde_json::to_value(&spec).unwrap();
        for f in placement_fields() {
            assert_eq!(as_json[f], serde_json::to_value(&every).unwrap()[f], "{f}");
        }
        let laid = JobSpec { qos: Some("old".into()), image: "i".into(), ..JobSpec::default() }.overlay(spec);
        assert_eq!(laid.image, "i");
        assert_eq!(
            serde_json::to_value(Placement::default().spec()).unwrap(),
            serde_json::to_value(JobSpec::default()).unwrap()
        );
        for f in placement_fields() {
            assert_eq!(
                serde_json::to_value(&laid).unwrap()[f],
                serde_json::to_value(&every).unwrap()[f],
                "overlay: {f}"
            );
        }
    }

    #[test]
    fn a_placement_field_of_the_wrong_type_is_named() {
        let object = serde_json::json!({"image": 5, "qos": "ok", "memory": 64});
        let (field, message) = placement_field_error(object.as_object().unwrap()).unwrap();
        assert_eq!(field, "memory");
        assert!(message.contains("expected a string"), "{message}");
        assert_eq!(placement_field_error(serde_json::json!({"qos": "ok", "image": 5}).as_object().unwrap()), None);
    }
}
