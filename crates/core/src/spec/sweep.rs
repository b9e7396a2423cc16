//! Many jobs from one description: a sweep (`[sweep]`: a grid of environment values and/or command
//! arguments, or an explicit list of variants, under a concurrency cap) and a pipeline (`[[steps]]`:
//! named steps that run after one another), and the dependency a job may have on another
//! (`--after JOB[:ok|:notok|:any]`). Pure: expanding a sweep or a pipeline into job specs.

use super::{check_env_name, check_text, JobSpec, SpecError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most variants one sweep may have: one Slurm job array, and clusters cap arrays (MaxArraySize
/// is 1001 by default, so indices 0..=1000).
pub const MAX_SWEEP_VARIANTS: usize = 1000;

/// Variables every variant's task is given (they cannot be set by the user).
pub const SWEEP_VARS: &[&str] = &["TAO_SWEEP_ID", "TAO_SWEEP_INDEX", "TAO_SWEEP_VALUES"];

/// A `[sweep]` section: variants from a grid (every combination of `grid` and `arg_grid` values), or
/// from `variants`, or both (the explicit variants after the grid's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweepSpec {
    /// Environment values: NAME -> the values it takes.
    pub grid: BTreeMap<String, Vec<String>>,
    /// Command arguments: OPTION -> the values it takes; each variant's command gets `OPTION VALUE`
    /// appended (or `OPTION=VALUE` when the option ends with `=`).
    pub arg_grid: BTreeMap<String, Vec<String>>,
    /// Explicit variants.
    pub variants: Vec<VariantSpec>,
    /// At most this many variants run at once (Slurm's `--array=...%N`); default: no cap.
    pub max_concurrent: Option<u32>,
}

/// One explicit variant: environment values and arguments appended to the command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VariantSpec {
    pub env: BTreeMap<String, String>,
    pub args: Vec<String>,
}

/// One variant of a sweep, as it is run: its index (the array task id), its environment values and
/// its extra arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub index: u32,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
}

impl Variant {
    /// `NAME=value` words and the arguments, one string (what `TAO_SWEEP_VALUES` holds).
    pub fn describe(&self) -> String {
        let mut words: Vec<String> = self.env.iter().map(|(n, v)| format!("{n}={v}")).collect();
        words.extend(self.args.iter().cloned());
        words.join(" ")
    }
}

impl SweepSpec {
    pub fn is_empty(&self) -> bool {
        self.grid.is_empty() && self.arg_grid.is_empty() && self.variants.is_empty()
    }

    /// Lay flags over the job file's section: grids and variants add up, a cap given wins.
    pub fn overlay(mut self, over: SweepSpec) -> SweepSpec {
        self.grid.extend(over.grid);
        self.arg_grid.extend(over.arg_grid);
        self.variants.extend(over.variants);
        if over.max_concurrent.is_some() {
            self.max_concurrent = over.max_concurrent;
        }
        self
    }

    /// Every variant, in order (the grid's combinations first, the last name varying fastest, then the
    /// explicit ones); each value checked. Errors name the field.
    pub fn variants(&self) -> Result<Vec<Variant>, SpecError> {
        if self.is_empty() {
            return Err(SpecError::new("sweep", "has no variants: give sweep.grid, sweep.arg_grid or sweep.variants"));
        }
        if self.max_concurrent == Some(0) {
            return Err(SpecError::new("sweep.max_concurrent", "must be at least 1"));
        }
        let grid_count = self.grid_count()?;
        let total = grid_count.saturating_add(self.variants.len());
        if total > MAX_SWEEP_VARIANTS {
            return Err(SpecError::new(
                "sweep",
                format!(
                    "has {total} variants; one sweep is one Slurm job array of at most {MAX_SWEEP_VARIANTS}: split it"
                ),
            ));
        }
        self.check_grid()?;
        let mut out = Vec::with_capacity(total);
        out.extend((0..grid_count).map(|n| self.grid_variant(n)));
        for (i, v) in self.variants.iter().enumerate() {
            for (name, value) in &v.env {
                check_sweep_env_name("sweep.variants.env", name)?;
                check_text("sweep.variants.env", value)?;
            }
            for a in &v.args {
                check_text("sweep.variants.args", a)?;
            }
            out.push(Variant {
                index: (grid_count + i) as u32,
                env: v.env.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
                args: v.args.clone(),
            });
        }
        Ok(out)
    }

    /// How many combinations the grids make (0 without a grid); an axis without values is an error.
    fn grid_count(&self) -> Result<usize, SpecError> {
        let mut count: usize = 1;
        for (field, name, values) in self
            .grid
            .iter()
            .map(|(n, v)| ("sweep.grid", n, v))
            .chain(self.arg_grid.iter().map(|(n, v)| ("sweep.arg_grid", n, v)))
        {
            if values.is_empty() {
                return Err(SpecError::new(field, format!("{name} has no values")));
            }
            count = count.saturating_mul(values.len());
        }
        Ok(if self.grid.is_empty() && self.arg_grid.is_empty() { 0 } else { count })
    }

    /// Every name and value of the grids checked.
    fn check_grid(&self) -> Result<(), SpecError> {
        for name in self.grid.keys() {
            check_sweep_env_name("sweep.grid", name)?;
        }
        for (name, values) in &self.grid {
            for v in values {
                check_text("sweep.grid", v)
                    .map_err(|e| SpecError::new("sweep.grid", format!("{name}: {}", e.message)))?;
            }
        }
        for (name, values) in &self.arg_grid {
            check_text("sweep.arg_grid", name)?;
            if name.is_empty() {
                return Err(SpecError::new("sweep.arg_grid", "an option name is empty"));
            }
            for v in values {
                check_text("sweep.arg_grid", v)?;
            }
        }
        Ok(())
    }

    /// The grid's `n`th combination: mixed radix over the axes (environment first, then options),
    /// the last axis fastest.
    fn grid_variant(&self, n: usize) -> Variant {
        let env_axes: Vec<(&String, &Vec<String>)> = self.grid.iter().collect();
        let arg_axes: Vec<(&String, &Vec<String>)> = self.arg_grid.iter().collect();
        let sizes: Vec<usize> = env_axes.iter().chain(arg_axes.iter()).map(|(_, v)| v.len()).collect();
        let mut rest = n;
        let mut picks = vec![0; sizes.len()];
        for (i, size) in sizes.iter().enumerate().rev() {
            picks[i] = rest % size;
            rest /= size;
        }
        let env = env_axes.iter().zip(&picks).map(|((name, vals), p)| ((*name).clone(), vals[*p].clone()));
        let mut args = Vec::new();
        for ((name, vals), p) in arg_axes.iter().zip(&picks[env_axes.len()..]) {
            push_arg(&mut args, name, &vals[*p]);
        }
        Variant { index: n as u32, env: env.collect(), args }
    }
}

fn push_arg(args: &mut Vec<String>, option: &str, value: &str) {
    if option.ends_with('=') {
        args.push(format!("{option}{value}"));
    } else {
        args.push(option.to_string());
        args.push(value.to_string());
    }
}

fn check_sweep_env_name(field: &str, name: &str) -> Result<(), SpecError> {
    check_env_name(field, name)?;
    if SWEEP_VARS.contains(&name) {
        return Err(SpecError::new(field, format!("{name} is set by tao-slurm itself for each variant")));
    }
    Ok(())
}

impl JobSpec {
    /// This spec without its sweep: what every variant starts from. A loop over the variants takes
    /// it once (`spec.without_sweep().for_variant(v)`), so a 1,000-variant grid is not copied a
    /// thousand times.
    pub fn without_sweep(&self) -> JobSpec {
        let mut spec = self.clone();
        spec.sweep = None;
        spec
    }

    /// The spec of one variant: the sweep's base with the variant's values (env laid over, arguments
    /// appended to the command; with `shell = true`, appended to the one string, each quoted).
    pub fn for_variant(&self, v: &Variant) -> JobSpec {
        let mut spec = JobSpec { sweep: None, ..self.clone() };
        for (n, value) in &v.env {
            spec.env.insert(n.clone(), value.clone());
        }
        if !v.args.is_empty() {
            if spec.shell && spec.command.len() == 1 {
                let quoted: Vec<String> = v.args.iter().map(|a| crate::script::shell::quote(a)).collect();
                spec.command[0] = format!("{} {}", spec.command[0], quoted.join(" "));
            } else {
                spec.command.extend(v.args.iter().cloned());
            }
        }
        spec
    }
}

/// What a dependent job waits for of the job it depends on: its success (`ok`, the default), its
/// failure (`notok`), or its end whatever it was (`any`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DependKind {
    Ok,
    NotOk,
    Any,
}

impl DependKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            DependKind::Ok => "ok",
            DependKind::NotOk => "notok",
            DependKind::Any => "any",
        }
    }
    pub fn parse(text: &str) -> Option<DependKind> {
        match text {
            "ok" => Some(DependKind::Ok),
            "notok" => Some(DependKind::NotOk),
            "any" => Some(DependKind::Any),
            _ => None,
        }
    }
}

/// `JOB[:ok|:notok|:any]` (field `field`): the job (an id, a prefix or a step name) and the kind.
pub fn parse_after(field: &str, text: &str) -> Result<(String, DependKind), SpecError> {
    let (job, kind) = match text.rsplit_once(':') {
        Some((job, kind)) => (
            job,
            DependKind::parse(kind).ok_or_else(|| {
                SpecError::new(field, format!("{text:?}: the condition after ':' must be ok, notok or any"))
            })?,
        ),
        None => (text, DependKind::Ok),
    };
    if job.is_empty() || !job.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(SpecError::new(
            field,
            format!("{text:?} is not JOB[:ok|:notok|:any] (a job id, a prefix of one, or a step name)"),
        ));
    }
    Ok((job.to_string(), kind))
}

/// One step of a pipeline (`[[steps]]`): a name, the steps it runs after, and what it changes of the
/// job file's top-level fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StepSpec {
    pub name: String,
    /// Steps (by name) this one runs after, `NAME[:ok|:notok|:any]`; default: the previous step.
    pub after: Option<Vec<String>>,
    pub image: Option<String>,
    pub command: Vec<String>,
    /// Run `command` with bash -c (default: as the job file's top level says).
    pub shell: Option<bool>,
    pub env: BTreeMap<String, String>,
    pub gpus: Option<u32>,
    pub nodes: Option<u32>,
    pub time_hours: Option<f64>,
    pub timeout_hours: Option<f64>,
    pub partition: Option<String>,
    pub sbatch_options: BTreeMap<String, String>,
}

/// One step of an expanded pipeline: its name, spec, and the earlier steps it depends on (by index).
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineStep {
    pub name: String,
    pub spec: JobSpec,
    pub after: Vec<(usize, DependKind)>,
}

/// The variable through which later steps find step `name`'s results directory.
pub fn step_results_var(name: &str) -> String {
    let upper: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("TAO_AFTER_{upper}_RESULTS_DIR")
}

impl JobSpec {
    /// The steps of a pipeline job file, in order, each with the top-level fields as its defaults.
    /// Steps may only run after earlier steps (so there is no cycle). Errors name the field.
    pub fn pipeline(&self) -> Result<Vec<PipelineStep>, SpecError> {
        if self.steps.is_empty() {
            return Err(SpecError::new("steps", "a pipeline needs at least one [[steps]] entry"));
        }
        if self.sweep.is_some() {
            return Err(SpecError::new("steps", "a pipeline cannot also be a sweep (give [sweep] or [[steps]])"));
        }
        let base = JobSpec { steps: Vec::new(), after: Vec::new(), ..self.clone() };
        let mut out: Vec<PipelineStep> = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let name = &step.name;
            if name.is_empty()
                || name.len() > 40
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(SpecError::new(
                    "steps.name",
                    format!("{name:?} is not a step name: 1 to 40 letters, digits, _ or -"),
                ));
            }
            if out.iter().any(|s| &s.name == name) {
                return Err(SpecError::new("steps.name", format!("{name:?} is used by two steps")));
            }
            let after_words = match &step.after {
                Some(words) => words.clone(),
                None if i > 0 => vec![self.steps[i - 1].name.clone()],
                None => Vec::new(),
            };
            let mut after = Vec::new();
            for w in &after_words {
                let (target, kind) = parse_after("steps.after", w)?;
                let Some(j) = out.iter().position(|s| s.name == target) else {
                    return Err(SpecError::new(
                        "steps.after",
                        format!("step {name:?} runs after {target:?}, which is not an earlier step"),
                    ));
                };
                after.push((j, kind));
            }
            let over = JobSpec {
                image: step.image.clone().unwrap_or_default(),
                command: step.command.clone(),
                shell: step.shell.unwrap_or(self.shell),
                env: step.env.clone(),
                gpus: step.gpus,
                nodes: step.nodes,
                time_hours: step.time_hours,
                timeout_hours: step.timeout_hours,
                partition: step.partition.clone(),
                sbatch_options: step.sbatch_options.clone(),
                ..JobSpec::default()
            };
            let mut spec = base.clone().overlay(over);
            spec.name = Some(match &self.name {
                Some(n) => format!("{n}/{name}"),
                None => name.clone(),
            });
            out.push(PipelineStep { name: name.clone(), spec, after });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_grid_is_every_combination_last_axis_fastest() {
        let s = JobSpec::from_toml(
            "image = \"x\"\ncommand = [\"train\"]\n[sweep]\nmax_concurrent = 2\n[sweep.grid]\nLR = [\"0.1\", \"0.01\"]\nBS = [\"32\", \"64\", \"128\"]\n[sweep.arg_grid]\n\"--seed=\" = [\"1\"]\n",
        )
        .unwrap();
        let sweep = s.sweep.clone().unwrap();
        let v = sweep.variants().unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(v[0].env, vec![("BS".to_string(), "32".to_string()), ("LR".to_string(), "0.1".to_string())]);
        assert_eq!(v[1].env[1].1, "0.01");
        assert_eq!(v[5].env, vec![("BS".to_string(), "128".to_string()), ("LR".to_string(), "0.01".to_string())]);
        assert!(v.iter().all(|x| x.args == vec!["--seed=1"]));
        assert_eq!(v.iter().map(|x| x.index).collect::<Vec<_>>(), (0..6).collect::<Vec<_>>());
        let spec = s.for_variant(&v[5]);
        assert_eq!(spec.command, vec!["train", "--seed=1"]);
        assert_eq!(spec.env["LR"], "0.01");
        assert!(spec.sweep.is_none());
        assert_eq!(v[5].describe(), "BS=128 LR=0.01 --seed=1");
    }

    #[test]
    fn explicit_variants_follow_the_grid_and_bad_input_names_its_field() {
        let sweep = SweepSpec {
            arg_grid: [("--lr".to_string(), vec!["1".to_string(), "2".to_string()])].into(),
            variants: vec![VariantSpec { env: [("A".into(), "b".into())].into(), args: vec!["--x".into()] }],
            ..SweepSpec::default()
        };
        let v = sweep.variants().unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[1].args, vec!["--lr", "2"]);
        assert_eq!(v[2].index, 2);
        assert_eq!(v[2].env, vec![("A".to_string(), "b".to_string())]);
        let cases: Vec<(SweepSpec, &str)> = vec![
            (SweepSpec::default(), "sweep"),
            (SweepSpec { grid: [("A".into(), vec![])].into(), ..Default::default() }, "sweep.grid"),
            (SweepSpec { grid: [("1A".into(), vec!["x".into()])].into(), ..Default::default() }, "sweep.grid"),
            (
                SweepSpec { grid: [("TAO_SWEEP_INDEX".into(), vec!["x".into()])].into(), ..Default::default() },
                "sweep.grid",
            ),
            (SweepSpec { grid: [("A".into(), vec!["a\0".into()])].into(), ..Default::default() }, "sweep.grid"),
            (
                SweepSpec {
                    grid: [("A".into(), vec!["x".into()])].into(),
                    max_concurrent: Some(0),
                    ..Default::default()
                },
                "sweep.max_concurrent",
            ),
            (
                SweepSpec {
                    grid: [
                        ("A".into(), (0..40).map(|i| i.to_string()).collect()),
                        ("B".into(), (0..40).map(|i| i.to_string()).collect()),
                    ]
                    .into(),
                    ..Default::default()
                },
                "sweep",
            ),
        ];
        for (s, field) in cases {
            assert_eq!(s.variants().unwrap_err().field, field, "{s:?}");
        }
    }

    #[test]
    fn after_words_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_after("after", "abc").unwrap(), ("abc".to_string(), DependKind::Ok));
        assert_eq!(parse_after("after", "abc-1:notok").unwrap(), ("abc-1".to_string(), DependKind::NotOk));
        assert_eq!(parse_after("after", "abc:any").unwrap().1, DependKind::Any);
        for bad in ["", ":ok", "abc:maybe", "a b", "$(x)", "a;b:ok"] {
            assert_eq!(parse_after("after", bad).unwrap_err().field, "after", "{bad}");
        }
    }

    #[test]
    fn a_pipeline_expands_into_steps_after_earlier_steps() {
        let spec = JobSpec::from_toml(
            "image = \"x\"\ncommand = [\"true\"]\nname = \"p\"\n[env]\nA = \"1\"\n[[steps]]\nname = \"train\"\ncommand = [\"train\"]\n[[steps]]\nname = \"eval\"\n[steps.env]\nB = \"2\"\n[[steps]]\nname = \"export\"\nafter = [\"train\", \"eval:any\"]\n",
        )
        .unwrap();
        let steps = spec.pipeline().unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0].spec.command, vec!["train"]);
        assert!(steps[0].after.is_empty());
        assert_eq!(steps[1].spec.command, vec!["true"], "the top-level command is the default");
        assert_eq!(steps[1].after, vec![(0, DependKind::Ok)], "by default a step runs after the previous one");
        assert_eq!(steps[1].spec.env["A"], "1");
        assert_eq!(steps[1].spec.env["B"], "2");
        assert_eq!(steps[2].after, vec![(0, DependKind::Ok), (1, DependKind::Any)]);
        assert_eq!(steps[2].spec.name.as_deref(), Some("p/export"));
        assert!(steps[2].spec.steps.is_empty());
        assert_eq!(step_results_var("eval-1"), "TAO_AFTER_EVAL_1_RESULTS_DIR");
        let forward = JobSpec::from_toml(
            "image = \"x\"\ncommand = [\"true\"]\n[[steps]]\nname = \"a\"\nafter = [\"b\"]\n[[steps]]\nname = \"b\"\n",
        )
        .unwrap();
        assert_eq!(forward.pipeline().unwrap_err().field, "steps.after", "only earlier steps: no cycles");
        let twice = JobSpec::from_toml("image = \"x\"\n[[steps]]\nname = \"a\"\n[[steps]]\nname = \"a\"\n").unwrap();
        assert_eq!(twice.pipeline().unwrap_err().field, "steps.name");
    }

    proptest! {
        /// A grid has exactly the product of its sizes as variants, all distinct, indexed 0..n.
        #[test]
        fn grid_size_and_distinct(a in 1usize..5, b in 1usize..5, c in 1usize..4) {
            let vals = |n: usize| (0..n).map(|i| format!("v{i}")).collect::<Vec<_>>();
            let sweep = SweepSpec {
                grid: [("A".to_string(), vals(a)), ("B".to_string(), vals(b))].into(),
                arg_grid: [("--c".to_string(), vals(c))].into(),
                ..SweepSpec::default()
            };
            let v = sweep.variants().unwrap();
            prop_assert_eq!(v.len(), a * b * c);
            let mut seen: Vec<String> = v.iter().map(Variant::describe).collect();
            seen.sort();
            seen.dedup();
            prop_assert_eq!(seen.len(), a * b * c);
            for (i, x) in v.iter().enumerate() {
                prop_assert_eq!(x.index as usize, i);
            }
        }
    }
}
