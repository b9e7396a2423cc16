//! The shape of the code, checked: the core crate has no I/O crate in its dependency tree, and no two
//! modules import each other, directly or around a loop. Needs no cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules whose submodules are nodes of their own in the graph (one file per operation or command).
const SPLIT: &[&str] = &["engine", "client", "store", "ops", "remote", "script", "spec", "slurm", "cosmos", "tools"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The graph node of a source file: `engine::refresh`, `store`, `ops::cancel`, ...
fn node_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).filter(|p| p != "mod").collect();
    match parts.as_slice() {
        [one] => one.clone(),
        [top, sub, ..] if SPLIT.contains(&top.as_str()) => format!("{top}::{sub}"),
        [top, ..] => top.clone(),
        [] => "lib".into(),
    }
}

/// The node a `crate::a::b::...` path refers to.
fn node_of_path(path: &str, nodes: &BTreeSet<String>) -> Option<String> {
    let mut parts = path.split("::").skip(1);
    let top = parts.next()?.to_string();
    if SPLIT.contains(&top.as_str()) {
        if let Some(sub) = parts.next() {
            let candidate = format!("{top}::{sub}");
            if nodes.contains(&candidate) {
                return Some(candidate);
            }
        }
    }
    nodes.contains(&top).then_some(top)
}

/// Every `crate::...` path a file uses outside its tests (`use crate::{a, b}` lists included).
fn crate_paths(text: &str) -> Vec<String> {
    let code: String = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or("")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let re = regex::Regex::new(r"crate::([a-z_]+)(?:::(\{[^}]*\}|[a-z_]+))?").unwrap();
    // `crate::cli::{submit::X, y}` and `crate::cli::submit::X` alike.
    for c in re.captures_iter(&code) {
        let top = &c[1];
        match c.get(2).map(|m| m.as_str()) {
            Some(list) if list.starts_with('{') => {
                for item in list.trim_matches(['{', '}']).split(',') {
                    let item = item.trim().split("::").next().unwrap_or("").trim();
                    out.push(format!("crate::{top}::{item}"));
                }
            }
            Some(sub) => out.push(format!("crate::{top}::{sub}")),
            None => out.push(format!("crate::{top}")),
        }
    }
    out
}

fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let nodes: BTreeSet<String> = files.iter().map(|f| node_of(root, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = node_of(root, f);
        let text = std::fs::read_to_string(f).unwrap();
        // `super::x` in a submodule file means `crate::<parent>::x`; in a file of the crate's root, `crate::x`.
        let parent = from.split("::").next().unwrap().to_string();
        let text = if from.contains("::") {
            text.replace("super::", &format!("crate::{parent}::"))
        } else {
            text.replace("super::", "crate::")
        };
        for p in crate_paths(&text) {
            if let Some(to) = node_of_path(&p, &nodes) {
                // A module's own parent (mod.rs) only re-exports for its children: not an edge back.
                let parent_of_from = from.split("::").next().unwrap();
                if to != from && to != parent_of_from {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    edges
}

/// One cycle, if the graph has any.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n.as_str()) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_another_that_imports_it_back() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (crate_dir, _) in CRATES {
        let root = here.join(crate_dir).join("src");
        let edges = graph(&root);
        assert!(edges.len() > 5, "the scan found the modules of {}: {edges:?}", root.display());
        assert_eq!(find_cycle(&edges), None, "an import cycle in {}", root.display());
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["c".to_string()].into()),
        ("c".to_string(), ["a".to_string()].into()),
    ]
    .into();
    assert_eq!(find_cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
    let paths = crate_paths(
        "use crate::engine::{refresh::X, retry};\nfn f() { crate::store::now(); }\n#[cfg(test)]\nuse crate::cli;",
    );
    assert_eq!(paths, ["crate::engine::refresh", "crate::engine::retry", "crate::store::now"]);
}

/// The scan sees a cycle between two files of a door's crate root (the service's), and one between
/// two of the store's.
#[test]
fn a_cycle_among_the_services_or_the_stores_files_is_found() {
    {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("lib.rs"), "mod api;\nmod kpis;\n").unwrap();
        std::fs::write(root.path().join("api.rs"), "use super::kpis::Thing;\n").unwrap();
        std::fs::write(root.path().join("kpis.rs"), "fn f() { crate::api::other(); }\n").unwrap();
        let cycle = find_cycle(&graph(root.path())).unwrap_or_else(|| panic!("no cycle found at the root"));
        assert!(cycle.contains(&"api".to_string()) && cycle.contains(&"kpis".to_string()), "{cycle:?}");
    }
    let (dir, a, b) = ("store", "sql", "pg_tls");
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("mod.rs"), format!("mod {a};\nmod {b};\n")).unwrap();
    std::fs::write(d.join(format!("{a}.rs")), format!("use super::{b}::Thing;\n")).unwrap();
    std::fs::write(d.join(format!("{b}.rs")), format!("fn f() {{ crate::{dir}::{a}::other(); }}\n")).unwrap();
    let cycle = find_cycle(&graph(root.path())).unwrap_or_else(|| panic!("no cycle found in {dir}"));
    assert!(cycle.contains(&format!("{dir}::{a}")) && cycle.contains(&format!("{dir}::{b}")), "{cycle:?}");
}

#[test]
fn the_core_has_no_io_crate_in_its_tree() {
    let tree = normal_tree("tao-slurm-core");
    assert!(tree.contains("serde") && tree.contains("regex"), "{tree}");
    for forbidden in ["rusqlite", "libsqlite3", "tokio", "rmcp", "uuid", "tempfile", "libc", "dotenvy", "ctrlc"] {
        assert!(!tree.lines().any(|l| l.starts_with(forbidden)), "{forbidden} in the core's tree:\n{tree}");
    }
}

/// The workspace's crates with source of their own (directory, package): the core, the engine and
/// the three doors. The Python binding is `python/` (a cdylib, checked by its tree).
const CRATES: &[(&str, &str)] = &[
    ("crates/core", "tao-slurm-core"),
    ("crates/engine", "tao-slurm-engine"),
    ("crates/cli", "tao-slurm-cli"),
    ("crates/mcp", "tao-slurm-mcp"),
    ("crates/service", "tao-slurm-service"),
];

/// The front-ends' source files: the CLI, the MCP server, the service, the Python binding.
const FRONT_ENDS: &[(&str, &str)] = &[
    ("cli", "crates/cli/src"),
    ("mcp", "crates/mcp/src"),
    ("service", "crates/service/src"),
    ("python", "python/src"),
];

/// `cargo tree` of one package's normal dependencies (no dev-dependencies, so features as a plain
/// build resolves them), each line `name features`.
fn normal_tree(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none", "--offline", "-f", "{p} [{f}]"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The engine's store, transport and operations are private modules unless its `internals` feature
/// is on (tests only): a door that names them does not compile. This holds while neither the doors'
/// package nor the Python extension turns the feature on in a plain build, and while the engine
/// declares the three with `internal_mod!`.
#[test]
fn the_compiler_keeps_the_doors_to_the_client() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(here.join("crates/engine/src/lib.rs")).unwrap();
    for module in ["engine", "remote", "store"] {
        assert!(lib.contains(&format!("internal_mod!({module});")), "{module} is not declared internal");
        assert!(!lib.contains(&format!("pub mod {module};")), "{module} is public");
    }
    for package in ["tao-slurm", "tao-slurm-cli", "tao-slurm-mcp", "tao-slurm-service", "tao-slurm-python"] {
        let tree = normal_tree(package);
        let engine = tree.lines().find(|l| l.starts_with("tao-slurm-engine ")).unwrap_or_else(|| panic!("{tree}"));
        assert!(!engine.contains("internals"), "{package} builds the engine with its internals: {engine}");
    }
}

/// The Python extension carries the engine, not the doors: no HTTP server, MCP or command-line crate,
/// and not the service's records.
#[test]
fn the_python_extension_has_no_door_in_its_tree() {
    let tree = normal_tree("tao-slurm-python");
    assert!(tree.lines().any(|l| l.starts_with("pyo3 ")), "{tree}");
    for door in ["axum ", "rmcp ", "clap ", "utoipa ", "tao-slurm v"] {
        assert!(!tree.lines().any(|l| l.starts_with(door)), "{door}in the extension's tree:\n{tree}");
    }
    // Nor the service's records: the engine as the extension builds it has them compiled out.
    let engine = tree.lines().find(|l| l.starts_with("tao-slurm-engine ")).unwrap_or_else(|| panic!("{tree}"));
    assert!(!engine.contains("service-records"), "the extension compiles the service's records: {engine}");
    let service = normal_tree("tao-slurm-service");
    let engine = service.lines().find(|l| l.starts_with("tao-slurm-engine ")).unwrap_or_else(|| panic!("{service}"));
    assert!(engine.contains("service-records"), "the service's tree: {engine}");
}

/// The packages of the workspace that a package's manifest depends on (normal dependencies; its
/// dev-dependencies are its tests'), read from its `Cargo.toml` with no registry.
fn workspace_dependencies(root: &Path, crate_dir: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root.join(crate_dir).join("Cargo.toml")).unwrap_or_default();
    let mut section = String::new();
    let mut deps = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section == "[dependencies]" && line.starts_with("tao-slurm") {
            deps.insert(line.split([' ', '=']).next().unwrap().to_string());
        }
    }
    deps
}

/// (door, door it depends on) for every door whose manifest names another door, but the command
/// line's on the MCP server's and the service's crates: `tao-slurm mcp` and `tao-slurm serve` start
/// them (each through one function, `tao_slurm_mcp::serve` and `tao_slurm_service::start`). Cargo
/// then refuses any other import of a door by a door, and any cycle.
fn doors_depending_on_doors(root: &Path) -> Vec<(String, String)> {
    let doors = ["tao-slurm-cli", "tao-slurm-mcp", "tao-slurm-service"];
    let mut hits = Vec::new();
    for (dir, package) in CRATES.iter().chain([&("python", "tao-slurm-python")]) {
        for dep in workspace_dependencies(root, dir) {
            let starts = *package == "tao-slurm-cli" && dep != "tao-slurm-cli";
            if doors.contains(&dep.as_str()) && !starts {
                hits.push((package.to_string(), dep));
            }
        }
    }
    hits
}

#[test]
fn no_door_depends_on_another_but_the_command_line_on_those_it_starts() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hits = doors_depending_on_doors(here);
    assert!(hits.is_empty(), "a door depending on another (move what both need behind Client): {hits:#?}");
    let cli = workspace_dependencies(here, "crates/cli");
    assert!(cli.contains("tao-slurm-mcp") && cli.contains("tao-slurm-service"), "{cli:?}");
    // The command line names the service's crate for its one start function and the flags' defaults.
    let mut names = BTreeSet::new();
    let mut files = Vec::new();
    rust_files(&here.join("crates/cli/src"), &mut files);
    let re = regex::Regex::new(r"tao_slurm_service::([A-Za-z_]+)").unwrap();
    // error_mapping.rs is a test module (`#[cfg(test)] mod error_mapping`): it maps every door's errors.
    for f in files.into_iter().filter(|f| !f.ends_with("error_mapping.rs")) {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        names.extend(re.captures_iter(code).map(|c| c[1].to_string()));
    }
    let allowed = [
        "start",
        "Start",
        "Action",
        "ServeOptions",
        "DEFAULT_MAX_BODY_BYTES",
        "DEFAULT_REQUESTS_PER_SEC",
        "LEASE_SECS",
        "DEFAULT_CERTIFICATE_SECS",
    ];
    let other: Vec<&String> = names.iter().filter(|n| !allowed.contains(&n.as_str())).collect();
    assert!(other.is_empty(), "the command line reaches into the service: {other:?}");
    // Caught: the MCP server's manifest naming the service's crate, the service's the CLI's.
    let root = tempfile::tempdir().unwrap();
    write_scratch(
        root.path(),
        "crates/mcp/Cargo.toml",
        "[dependencies]\ntao-slurm-service = { path = \"../service\" }\n",
    );
    write_scratch(root.path(), "crates/service/Cargo.toml", "[dependencies]\ntao-slurm-engine = { path = \"../engine\" }\n[dev-dependencies]\ntao-slurm-cli = { path = \"../cli\" }\n");
    write_scratch(
        root.path(),
        "crates/cli/Cargo.toml",
        "[dependencies]\ntao-slurm-service = { path = \"../service\" }\n",
    );
    assert_eq!(doors_depending_on_doors(root.path()), [("tao-slurm-mcp".to_string(), "tao-slurm-service".to_string())]);
}

/// Every source file outside the engine's store that names a database's crate (SQLite's, PostgreSQL's).
fn sqlite_outside_the_store(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for dir in [
        "src",
        "python/src",
        "crates/core/src",
        "crates/engine/src",
        "crates/cli/src",
        "crates/mcp/src",
        "crates/service/src",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    files
        .into_iter()
        .filter(|f| !f.starts_with(root.join("crates/engine/src/store")))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("rusqlite") || text.contains("postgres::")
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect()
}

#[test]
fn only_the_store_touches_sqlite() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hits = sqlite_outside_the_store(here);
    assert!(hits.is_empty(), "SQLite or PostgreSQL outside the engine's store: {hits:?}");
}

/// The store's files (not their tests) that import the engine's layers above it: its run-and-record
/// operations, its client, its transport.
fn store_files_importing_the_engine(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root.join("crates/engine/src/store"), &mut files);
    files
        .into_iter()
        .filter(|f| !f.ends_with("tests.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            crate_paths(&text)
                .iter()
                .any(|p| ["engine", "client", "remote"].contains(&p.split("::").nth(1).unwrap_or("")))
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect()
}

#[test]
fn the_store_imports_nothing_of_the_engine() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hits = store_files_importing_the_engine(here);
    assert!(hits.is_empty(), "the store imports the engine's layers above it: {hits:?}");
    let root = tempfile::tempdir().unwrap();
    write_scratch(root.path(), "crates/engine/src/store/jobs.rs", "use crate::batch::GroupCommit;\n");
    assert!(store_files_importing_the_engine(root.path()).is_empty());
    write_scratch(root.path(), "crates/engine/src/store/audit.rs", "use crate::engine::group_commit::GroupCommit;\n");
    assert_eq!(store_files_importing_the_engine(root.path()), ["crates/engine/src/store/audit.rs"]);
}

/// Write `text` at `rel` in a scratch tree, its directories made.
fn write_scratch(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The rule above catches what it is for: it is run over a scratch tree that breaks it.
#[test]
fn the_store_rule_catches_a_break() {
    let root = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| write_scratch(root.path(), rel, text);
    for (_, dir) in FRONT_ENDS {
        write(&format!("{dir}/lib.rs"), "use tao_slurm_engine::client::Client;\n");
    }
    write("crates/engine/src/store/mod.rs", "use rusqlite::Connection;\n");
    write("crates/core/src/lib.rs", "pub mod x;\n");
    assert!(sqlite_outside_the_store(root.path()).is_empty());
    write("crates/service/src/db.rs", "use rusqlite::params;\n");
    assert_eq!(sqlite_outside_the_store(root.path()), ["crates/service/src/db.rs"]);
}

/// The doors that wait for jobs, and the one call each polls with (the client's wait).
const WAITS: &[(&str, &str)] = &[
    ("crates/cli/src/watch.rs", "wait_for("),
    ("crates/mcp/src/wait.rs", "wait_step("),
    ("python/tao_slurm/sdk.py", "wait_step("),
];

/// Waits that poll on their own: a door's wait that does not call the client's wait, or that
/// refreshes jobs itself.
fn waits_of_their_own(root: &Path) -> Vec<String> {
    WAITS
        .iter()
        .filter(|(file, call)| {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            // Python's wait is one method of the SDK: only its body counts.
            let text = python_method(&text, "wait");
            !text.contains(call) || text.contains(".refresh(")
        })
        .map(|(file, _)| file.to_string())
        .collect()
}

/// The body of a Python method (`    def name(` to the next method), or all of `text` without one.
fn python_method<'a>(text: &'a str, name: &str) -> &'a str {
    let Some(at) = text.find(&format!("    def {name}(")) else { return text };
    let rest = &text[at + 4..];
    let end = rest.find("\n    def ").map_or(text.len(), |e| at + 4 + e);
    &text[at..end]
}

#[test]
fn every_wait_polls_through_the_clients_wait() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hits = waits_of_their_own(here);
    assert!(hits.is_empty(), "waits that poll on their own instead of Client::wait_step/wait_for: {hits:?}");
    let root = tempfile::tempdir().unwrap();
    for (file, call) in WAITS {
        let path = root.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("fn f() {{ c.{call}w); }}\n")).unwrap();
    }
    assert!(waits_of_their_own(root.path()).is_empty());
    std::fs::write(root.path().join("crates/mcp/src/wait.rs"), "fn f() { c.wait_step(w); c.refresh(&ids); }\n")
        .unwrap();
    std::fs::write(
        root.path().join("python/tao_slurm/sdk.py"),
        "    def wait(self):\n        self._engine.refresh([id])\n    def other(self):\n        wait_step(\n",
    )
    .unwrap();
    assert_eq!(waits_of_their_own(root.path()), ["crates/mcp/src/wait.rs", "python/tao_slurm/sdk.py"]);
}

/// The doors' submits, each of which must go through `Client::submit`.
const SUBMITS: &[&str] =
    &["crates/cli/src/submit.rs", "crates/mcp/src/tools/submit.rs", "crates/service/src/api.rs", "python/src/lib.rs"];

/// What only `Client::submit` does for a door: the settings check, the choice of a job, a sweep or
/// a pipeline, and the background monitor.
const SUBMIT_INSIDES: &[&str] = &[
    "require_remote(",
    ".create_job(",
    ".create_job_planned(",
    ".create_sweep(",
    ".create_pipeline(",
    "start_background_monitor(",
];

/// (file, what it calls) for a door's submit that does by itself what `Client::submit` does, or
/// that does not call it at all.
fn submits_of_their_own(root: &Path) -> Vec<(String, String)> {
    let mut hits = Vec::new();
    for file in SUBMITS {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        if !code.contains(".submit(") {
            hits.push((file.to_string(), "no Client::submit".to_string()));
        }
        for inside in SUBMIT_INSIDES {
            // Python's engine checks the settings when it is made (as the TAO SDK's constructor
            // does), not in its submits.
            let at_construction = *file == "python/src/lib.rs" && *inside == "require_remote(";
            if code.contains(inside) && !at_construction {
                hits.push((file.to_string(), inside.to_string()));
            }
        }
    }
    hits
}

#[test]
fn every_door_submits_through_the_clients_one_submit() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hits = submits_of_their_own(here);
    assert!(hits.is_empty(), "submits that do what Client::submit does by themselves: {hits:?}");
    let root = tempfile::tempdir().unwrap();
    for file in SUBMITS {
        let path = root.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "fn f() { client.submit(&spec, opts); }\n").unwrap();
    }
    assert!(submits_of_their_own(root.path()).is_empty());
    std::fs::write(root.path().join("crates/cli/src/submit.rs"), "fn f() { client.create_sweep(&spec, &s); }\n")
        .unwrap();
    std::fs::write(
        root.path().join("crates/service/src/api.rs"),
        "fn f() { client.submit(&spec, o); start_background_monitor(&s); }\n",
    )
    .unwrap();
    let hits = submits_of_their_own(root.path());
    assert_eq!(
        hits,
        [
            ("crates/cli/src/submit.rs".to_string(), "no Client::submit".to_string()),
            ("crates/cli/src/submit.rs".into(), ".create_sweep(".into()),
            ("crates/service/src/api.rs".into(), "start_background_monitor(".into()),
        ]
    );
}

/// The store's methods that write a job's status, read from the store's own source: those whose SQL
/// sets `status`, and those that call one of them.
fn store_status_writers(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root.join("crates/engine/src/store"), &mut files);
    let mut bodies: Vec<(String, String)> = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("tests.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        // Every function, public or not (a public one may write through a private one).
        for chunk in text.split(" fn ").skip(1) {
            let name: String = chunk.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            bodies.push((name, chunk.to_string()));
        }
    }
    let mut writers: BTreeSet<String> = bodies
        .iter()
        .filter(|(_, b)| {
            // `status = ...` among the columns an UPDATE sets (not in its WHERE), or in the column
            // list of the store's one "only if changed" update.
            let sets = b.split("UPDATE jobs SET").skip(1).map(|u| u.split("WHERE").next().unwrap_or(""));
            b.contains("(\"status\",")
                || sets.into_iter().any(|u| u.split([',', '\n']).any(|a| a.trim_start().starts_with("status = ")))
        })
        .map(|(n, _)| n.clone())
        .collect();
    loop {
        let more: Vec<String> = bodies
            .iter()
            .filter(|(n, b)| !writers.contains(n) && writers.iter().any(|w| b.contains(&format!("self.{w}("))))
            .map(|(n, _)| n.clone())
            .collect();
        if more.is_empty() {
            return writers;
        }
        writers.extend(more);
    }
}

/// Files of the client that call one of the store's status writers (only the engine does).
fn client_status_writes(root: &Path) -> Vec<String> {
    let writers = store_status_writers(root);
    let mut files = Vec::new();
    rust_files(&root.join("crates/engine/src/client"), &mut files);
    files
        .into_iter()
        .filter(|f| !f.ends_with("tests.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            writers.iter().any(|w| text.contains(&format!(".{w}(")))
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect()
}

#[test]
fn the_client_writes_no_status() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let writers = store_status_writers(here);
    for w in [
        "update_status",
        "update_status_of",
        "begin_pause",
        "finish_pause",
        "reopen_paused",
        "reopen_ended",
        "schedule_retry",
    ] {
        assert!(writers.contains(w), "{w} not found among the store's status writers: {writers:?}");
    }
    assert!(client_status_writes(here).is_empty(), "{:?}", client_status_writes(here));
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("crates/engine/src/store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        store.join("pause.rs"),
        "pub fn begin_pause(&self) { q(\"UPDATE jobs SET status = 'Pausing'\"); }\npub fn pause_all(&self) { self.begin_pause(); }\npub fn get(&self) {}\n",
    )
    .unwrap();
    let dir = root.path().join("crates/engine/src/client");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lookup.rs"), "fn f() { self.store.get(id)?; }\n").unwrap();
    assert!(client_status_writes(root.path()).is_empty());
    std::fs::write(dir.join("pause.rs"), "fn f() { self.store.pause_all()?; }\n").unwrap();
    assert_eq!(client_status_writes(root.path()), ["crates/engine/src/client/pause.rs"]);
}

/// Places that reach the service's database past its facets (`client::records`): a door naming the
/// store's `ServiceDb`, or a method of `ServiceDb` the engine's other crates could call.
fn service_db_reached_directly(root: &Path) -> Vec<String> {
    let mut hits = Vec::new();
    for (_, dir) in FRONT_ENDS {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            if text.contains("ServiceDb") || text.contains("service_records") {
                hits.push(f.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    for file in ["crates/engine/src/store/service_records.rs", "crates/engine/src/store/audit.rs"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        if text.lines().any(|l| l.starts_with("    pub fn ")) {
            hits.push(format!("{file}: a public method"));
        }
    }
    hits
}

#[test]
fn the_services_records_are_reached_through_their_facets() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let facets = std::fs::read_to_string(here.join("crates/engine/src/client/records.rs")).unwrap();
    for facet in ["Tokens<'_>", "AuditTrail<'_>", "OrgWorkspaces<'_>", "OrgSecrets<'_>", "ApiJobs<'_>"] {
        assert!(facets.contains(facet), "records.rs lost the facet {facet}");
    }
    assert!(service_db_reached_directly(here).is_empty(), "{:?}", service_db_reached_directly(here));
    let root = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| write_scratch(root.path(), rel, text);
    for (_, dir) in FRONT_ENDS {
        write(&format!("{dir}/lib.rs"), "use tao_slurm_engine::client::records::ServiceRecords;\n");
    }
    assert!(service_db_reached_directly(root.path()).is_empty());
    write("crates/service/src/secrets.rs", "fn f(db: &tao_slurm_engine::client::ServiceDb) {}\n");
    write("crates/engine/src/store/audit.rs", "impl ServiceDb {\n    pub fn wipe(&self) {}\n}\n");
    assert_eq!(
        service_db_reached_directly(root.path()),
        ["crates/service/src/secrets.rs", "crates/engine/src/store/audit.rs: a public method"]
    );
}

/// Every name a source or test file defines (functions, types, modules, constants; Python's `def`s),
/// with the files that define it.
fn definitions(root: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let def = regex::Regex::new(
        r"(?m)^\s*(?:both!\s*\{\s*)?(?:pub(?:\([a-z]+\))?\s+)?(?:async\s+)?(?:fn|struct|enum|trait|type|const|static|mod|def|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)",
    )
    .unwrap();
    let mut files = Vec::new();
    for dir in ["crates", "src", "tests", "python"] {
        collect_sources(&root.join(dir), &mut files);
    }
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let rel = f.strip_prefix(root).unwrap().display().to_string();
        for c in def.captures_iter(&text) {
            out.entry(c[1].to_string()).or_default().push((rel.clone(), text.clone()));
        }
    }
    out
}

fn collect_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() && !["target", ".venv", "node_modules", "fixtures"].contains(&name.as_str()) {
            collect_sources(&p, out);
        } else if name.ends_with(".rs") || name.ends_with(".py") {
            out.push(p);
        }
    }
}

/// What the architecture page names that does not exist: a path, a `module::name` (its last part
/// defined in a file its owner names: the file, its directory, an `impl`, a type or `mod tests`), a
/// snake_case name; and the modules of the mapped directories the page's map leaves out.
fn page_errors(root: &Path, page: &str) -> Vec<String> {
    let defs = definitions(root);
    let mut all_files = Vec::new();
    for dir in ["crates", "src", "tests", "python", "docs", "dev"] {
        collect_all(&root.join(dir), root, &mut all_files);
    }
    let mut errors = Vec::new();
    let mut tokens: Vec<String> = Vec::new();
    let mut in_code = false;
    let path_re = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+").unwrap();
    let file_re = regex::Regex::new(r"[A-Za-z0-9_./-]+\.(?:rs|md|json)\b").unwrap();
    for line in page.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            tokens.extend(path_re.find_iter(line).map(|m| m.as_str().to_string()));
            // A file of ours: a Rust file, or a path (a job's own files, like status.json, are not).
            let files = file_re.find_iter(line).map(|m| m.as_str()).filter(|f| f.ends_with(".rs") || f.contains('/'));
            tokens.extend(files.map(str::to_string));
        } else {
            tokens.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    for t in tokens {
        let t = t.trim();
        if t.contains('/') || t.ends_with(".rs") || t.ends_with(".json") || t.ends_with(".md") {
            let t = t.trim_end_matches('/');
            if !all_files.iter().any(|f| f == t || f.ends_with(&format!("/{t}")) || f.starts_with(&format!("{t}/"))) {
                errors.push(format!("no file {t}"));
            }
        } else if t.contains("::") {
            let parts: Vec<&str> = t.split("::").collect();
            let (owner, name) = (parts[parts.len() - 2], parts[parts.len() - 1]);
            let owned = defs.get(name).is_some_and(|found| {
                found.iter().any(|(file, text)| {
                    file.contains(&format!("/{owner}.rs"))
                        || file.contains(&format!("/{owner}/"))
                        || text.contains(&format!("impl {owner}"))
                        || text.contains(&format!("struct {owner}"))
                        || text.contains(&format!("mod {owner}"))
                })
            });
            if !owned {
                errors.push(format!("nothing defines {t}"));
            }
        } else if t.len() > 3
            && t.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
            && t.contains('_')
            && !defs.contains_key(t)
        {
            errors.push(format!("nothing defines {t}"));
        }
    }
    let map = page.split("```").nth(1).unwrap_or("");
    for dir in [
        "crates/core/src",
        "crates/core/src/ops",
        "crates/engine/src",
        "crates/engine/src/client",
        "crates/engine/src/engine",
        "crates/engine/src/store",
        "crates/engine/src/remote",
        "crates/cli/src",
        "crates/mcp/src",
        "crates/service/src",
        "src",
    ] {
        for e in std::fs::read_dir(root.join(dir)).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if ["lib.rs", "mod.rs", "tests.rs"].contains(&name.as_str()) {
                continue;
            }
            let shown = if e.path().is_dir() { format!("{name}/") } else { name.clone() };
            if !map.contains(&shown) {
                errors.push(format!("the map leaves out {dir}/{shown}"));
            }
        }
    }
    errors
}

fn collect_all(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if ["target", ".venv", "node_modules"].contains(&name.as_str()) {
            continue;
        }
        out.push(p.strip_prefix(root).unwrap().display().to_string());
        if p.is_dir() {
            collect_all(&p, root, out);
        }
    }
}

#[test]
fn the_architecture_page_names_what_exists() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(here.join("docs/ARCHITECTURE.md")).unwrap();
    let errors = page_errors(here, &page);
    assert!(errors.is_empty(), "docs/ARCHITECTURE.md: {errors:#?}");
    // A name that went away, a file that moved and a module left off the map are each found.
    let broken = page
        .replace("architecture::the_client_writes_no_status", "architecture::the_client_writes_no_status_any_more")
        .replace("docs/configuration.md", "docs/settings.md")
        .replace("known_facts.rs", "facts.rs");
    let errors = page_errors(here, &broken);
    for want in [
        "nothing defines architecture::the_client_writes_no_status_any_more",
        "no file docs/settings.md",
        "the map leaves out crates/engine/src/engine/known_facts.rs",
    ] {
        assert!(errors.iter().any(|e| e == want), "{want} not found in {errors:#?}");
    }
}
