//! Which door offers each of a job's fields, and by what name: the one list of the exceptions. Every
//! field of [`JobSpec`] is offered by every door under its own name unless this list names it, and
//! each door has a test that fails on a field it lacks ([`missing_at`]), so a field added to the spec
//! fails every door that does not take it until it does or an entry here says why not.

use super::JobSpec;

/// The four ways a job is described: the command line's flags (their clap ids), the MCP submit
/// tool's arguments, the service's create body, and the Python package's `create_job` keywords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Cli,
    Mcp,
    Service,
    Python,
}

/// How a door offers a field it does not take under the field's own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// Under another name (a flag that reads better, or the TAO SDK's keyword).
    As(&'static str),
    /// Not at all, for this reason.
    Not(&'static str),
}

use Door::{Cli, Mcp, Python, Service};
use Offered::{As, Not};

const ENGINE_MADE: &str = "made by the engine from `workdir` (the archive it uploads), never given";

/// The exceptions: (door, field, how). Everything else is offered by its own name.
const EXCEPTIONS: &[(Door, &str, Offered)] = &[
    (Cli, "workdir_archive", Not(ENGINE_MADE)),
    (Mcp, "workdir_archive", Not(ENGINE_MADE)),
    (Service, "workdir_archive", Not(ENGINE_MADE)),
    (Python, "workdir_archive", Not(ENGINE_MADE)),
    // The command line: flags named for what they do.
    (Cli, "checkpoint_grace_seconds", As("checkpoint_grace")),
    (Cli, "cosmos_rl", As("cosmos_config")),
    (Cli, "gpu_watch", As("gpu_sample_secs")),
    (Cli, "sweep", As("grid")),
    (Cli, "replace_default_mounts", As("no_default_mount")),
    (Cli, "requeue", As("no_requeue")),
    (Cli, "specs", Not("a JSON object of the job's specs: given in the job file (`--spec job.toml`, `[specs]`)")),
    (Cli, "steps", Not("a pipeline's steps: given in the job file (`--spec pipeline.toml`, `[[steps]]`)")),
    // The service: one job per request, in TAO's shape.
    (Service, "workdir", Not("a directory on the submitting machine: an HTTP client sends none")),
    (Service, "sweep", Not("the service creates one job per request (TAO's shape); sweeps are the other doors'")),
    (Service, "steps", Not("the service creates one job per request (TAO's shape); pipelines are the other doors'")),
    (Service, "notify", Not("webhook URLs carry tokens: the operator configures them per workspace, not a request")),
    // Python: the TAO SDK's keywords, where it has one.
    (Python, "gpus", As("gpu_count")),
    (Python, "total_gpus", As("gpu_count")),
    (Python, "nodes", As("num_nodes")),
    (Python, "env", As("env_vars")),
    (Python, "shell", As("command")),
    (Python, "sweep", As("grid")),
    (Python, "steps", Not("no pipelines in the Python package yet (the command line's and MCP's)")),
];

/// Every field of a job, as [`JobSpec`]'s own `Deserialize` takes them (each, whether or not a
/// default value serialises it).
pub fn job_fields() -> &'static [&'static str] {
    serde_aux::serde_introspection::serde_introspect::<JobSpec>()
}

/// The names `T` takes: the properties of its JSON schema, a flattened group's included. A door
/// whose arguments flatten [`super::Placement`] refuses any other name with [`unknown_field`] (serde
/// cannot refuse unknown names in a struct that flattens another).
pub fn schema_fields<T: schemars::JsonSchema>() -> Vec<String> {
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    schema["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()
}

/// The first name of `object` that `T` does not take, said as serde says it (`unknown field `x`,
/// expected one of `a`, `b``), with the name.
pub fn unknown_field<T: schemars::JsonSchema>(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Option<(String, String)> {
    let known = schema_fields::<T>();
    let name = object.keys().find(|k| !known.contains(k))?;
    let expected: Vec<String> = known.iter().map(|n| format!("`{n}`")).collect();
    Some((name.clone(), format!("unknown field `{name}`, expected one of {}", expected.join(", "))))
}

/// What a door whose arguments flatten [`super::Placement`] refuses before serde reads them (serde
/// can do neither in such a struct): the first name `T` does not take, else the first placement
/// field of the wrong type; as (field, message).
pub fn refused_field<T: schemars::JsonSchema>(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Option<(String, String)> {
    unknown_field::<T>(object).or_else(|| super::placement_field_error(object))
}

/// How `door` offers `field` (one of [`job_fields`]).
pub fn offered_at(door: Door, field: &'static str) -> Offered {
    EXCEPTIONS.iter().find(|(d, f, _)| *d == door && *f == field).map_or(As(field), |(_, _, o)| *o)
}

/// Every field with how `door` offers it.
fn offers_at(door: Door) -> impl Iterator<Item = (&'static str, Offered)> {
    job_fields().iter().map(move |f| (*f, offered_at(door, f)))
}

/// The fields `door` offers, each with the name it takes there.
pub fn names_at(door: Door) -> Vec<(&'static str, &'static str)> {
    offers_at(door).filter_map(|(f, o)| if let As(name) = o { Some((f, name)) } else { None }).collect()
}

/// The fields `door` leaves out, each with the reason.
pub fn left_out_at(door: Door) -> Vec<(&'static str, &'static str)> {
    offers_at(door).filter_map(|(f, o)| if let Not(why) = o { Some((f, why)) } else { None }).collect()
}

/// The fields `door` should offer and does not (`offers` says whether it has a name): each as
/// `field` or `field (as name)`. A door's test asserts this is empty.
pub fn missing_at(door: Door, offers: impl Fn(&str) -> bool) -> Vec<String> {
    names_at(door)
        .into_iter()
        .filter(|(_, name)| !offers(name))
        .map(|(field, name)| if field == name { field.to_string() } else { format!("{field} (as {name})") })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exception_names_a_field_once() {
        let fields = job_fields();
        assert!(fields.len() > 40 && fields.contains(&"cosmos_rl") && fields.contains(&"qos"), "{fields:?}");
        for (i, (door, field, _)) in EXCEPTIONS.iter().enumerate() {
            assert!(fields.contains(field), "{door:?}: {field} is not a job field");
            let again = EXCEPTIONS[i + 1..].iter().any(|(d, f, _)| d == door && f == field);
            assert!(!again, "{door:?}: {field} listed twice");
        }
    }

    #[test]
    fn a_door_lacking_a_field_is_named_with_the_field() {
        let offers = |name: &str| !matches!(name, "qos" | "num_nodes");
        assert_eq!(missing_at(Python, offers), ["nodes (as num_nodes)", "qos"]);
        assert_eq!(missing_at(Service, |_| true), Vec::<String>::new());
        let left: Vec<&str> = left_out_at(Service).into_iter().map(|(f, _)| f).collect();
        assert_eq!(left, ["workdir", "workdir_archive", "sweep", "steps", "notify"]);
    }
}
