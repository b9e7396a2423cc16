//! The time to plan a 1,000-variant sweep (`ops::sweep::plan_sweep`), best of 5. A benchmark, not a
//! test: it asserts no time.
//!
//! `cargo run --release -p tao-slurm-core --features test-fixtures --example plan_sweep_timing`

use tao_slurm_core::fixtures::{settings, spec};
use tao_slurm_core::ops::sweep::plan_sweep;
use tao_slurm_core::spec::{JobSpec, SweepSpec};

fn main() {
    let values: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let sweep = SweepSpec { grid: [("LR".to_string(), values)].into(), ..Default::default() };
    let spec = JobSpec { sweep: Some(sweep), ..spec() };
    let ids: Vec<String> = (0..1000).map(|i| format!("00000000-0000-4000-8000-{i:012}")).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let planned = plan_sweep(&spec, &settings(), "s", &ids).expect("the sweep plans");
        best = best.min(started.elapsed().as_secs_f64());
        assert_eq!(planned.variants.len(), 1000);
    }
    println!("plan_sweep of 1,000 variants: best of 5 {:.1} ms", best * 1000.0);
}
