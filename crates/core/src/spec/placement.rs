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
            reservation: Some("r".into()),
        };
        let spec = every.spec();
        let as_json = serde_json::to_value(&spec).unwrap();
        for f in placement_fields() {
            assert_eq!(as_json[f], serde_json::to_value(&every).unwrap()[f], "{f}");
        }
        let laid = JobSpec { qos: Some("old".into()), image: "i".into(), ..JobSpec::default() }.overlay(spec);
        assert_eq!(laid.image, "i");
        assert_eq!(serde_json::to_value(Placement::default().spec()).unwrap(), serde_json::to_value(JobSpec::default()).unwrap());
        for f in placement_fields() {
            assert_eq!(serde_json::to_value(&laid).unwrap()[f], serde_json::to_value(&every).unwrap()[f], "overlay: {f}");
        }
    }
}
