//! One error of each kind, as the engine makes them, mapped by every door as the table says: the exit
//! code, the HTTP status, MCP's "your input" flag and the Python class.

use tao_slurm_engine::config::ConfigError;
use tao_slurm_engine::error::*;
use tao_slurm_engine::spec::SpecError;
use tao_slurm_mcp::reply::ToolError;
use tao_slurm_service::error::ApiError;

/// One error of each kind, as the layers make them.
fn examples() -> Vec<(Error, ErrorKind)> {
    let remote = |e: RemoteError| Error::Remote(e);
    vec![
        (SpecError::new("gpus", "too many").into(), ErrorKind::Invalid),
        (ConfigError::Missing.into(), ErrorKind::MissingSettings),
        (remote(RemoteError::Config(ConfigError::Missing)), ErrorKind::MissingSettings),
        (remote(RemoteError::KeyMissing { path: "/k".into(), message: "no such file".into() }), ErrorKind::Config),
        (remote(RemoteError::KeyPermissions { path: "/k".into() }), ErrorKind::Config),
        (
            remote(RemoteError::Unreachable {
                hosts: "h".into(),
                message: "refused".into(),
                remediation: String::new(),
            }),
            ErrorKind::Unreachable,
        ),
        (remote(RemoteError::Lost { host: "h".into(), message: "reset".into() }), ErrorKind::OutcomeUnknown),
        (remote(RemoteError::OutputTooLarge { host: "h".into(), cap: 1 }), ErrorKind::OutcomeUnknown),
        (StoreError::NotFound("abc".into()).into(), ErrorKind::NotFound),
        (StoreError::Ambiguous("a".into()).into(), ErrorKind::Ambiguous),
        (StoreError::Dir { path: "/s".into(), message: "not ours".into() }.into(), ErrorKind::State),
        (Error::RemoteCommand("sbatch: error".into()), ErrorKind::RemoteCommand),
    ]
}

fn examples_at(i: usize) -> (Error, ErrorKind) {
    examples().swap_remove(i)
}

/// kind -> (exit code, HTTP status, MCP: the caller's input is at fault, Python class)
fn table(kind: ErrorKind) -> (i32, u16, bool, &'static str) {
    match kind {
        ErrorKind::Invalid => (2, 400, true, "JobSpecError"),
        ErrorKind::MissingSettings => (3, 503, false, "CredentialError"),
        ErrorKind::Config => (3, 503, false, "ConfigError"),
        ErrorKind::NotFound => (6, 404, true, "JobNotFoundError"),
        ErrorKind::Ambiguous => (6, 400, true, "JobNotFoundError"),
        ErrorKind::Unreachable => (4, 502, false, "RemoteError"),
        ErrorKind::OutcomeUnknown => (4, 502, false, "RemoteError"),
        ErrorKind::RemoteCommand => (5, 502, false, "RemoteCommandError"),
        ErrorKind::State => (6, 500, false, "StateError"),
    }
}

#[test]
fn every_front_end_maps_every_kind_as_the_table_says() {
    let examples = examples();
    for kind in ErrorKind::ALL {
        assert!(examples.iter().any(|(_, k)| *k == kind), "no example of {kind:?}");
    }
    for i in 0..examples.len() {
        // Error is not Clone: each door gets a copy of its own.
        let copy = || examples_at(i);
        let (error, kind) = copy();
        assert_eq!(error.kind(), kind, "{error}");
        let (exit, http, invalid, python) = table(kind);
        let text = error.to_string();
        assert_eq!(error.exit_code(), exit, "exit code of {text}");
        assert_eq!(kind.python_exception(), python, "Python class of {text}");
        assert_eq!(ApiError::engine(copy().0).status.as_u16(), http, "HTTP of {text}");
        assert_eq!(ToolError::engine(copy().0, "job_id").is_invalid_input(), invalid, "MCP of {text}");
    }
}
