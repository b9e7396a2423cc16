//! A job's progress for people (issue 26): the newest KPIs in one line (`watch`) and a progress bar
//! (the job list), both from the last status.json line a refresh kept.

use tao_slurm_engine::JobView;

/// Cells of the list's progress bar.
const BAR_WIDTH: usize = 12;

/// `workdir upload [######------] 12.0/40.3 MiB`: a `--workdir` upload on its way.
pub fn upload_line(sent: u64, total: u64) -> String {
    let done = if total == 0 { 1.0 } else { (sent as f64 / total as f64).clamp(0.0, 1.0) };
    let filled = (done * BAR_WIDTH as f64).round() as usize;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    format!(
        "workdir upload [{}{}] {:.1}/{:.1} MiB",
        "#".repeat(filled),
        "-".repeat(BAR_WIDTH - filled),
        mib(sent),
        mib(total)
    )
}

/// The newest point the job reported (None: it reported no epoch, iteration or KPI).
fn point(v: &JobView) -> Option<tao_slurm_engine::kpi::KpiPoint> {
    tao_slurm_engine::kpi::point_of(&v.progress.as_ref()?.to_string(), v.updated_at)
}

/// `epoch 3/6 · loss 0.42 · eta 0:01:00`, or empty.
pub fn kpi_line(v: &JobView) -> String {
    point(v).map(|p| super::clean(&tao_slurm_engine::kpi::one_line(&p))).unwrap_or_default()
}

/// `[######------] 3/6` for a running job that reports its epochs, else empty.
pub fn bar(v: &JobView) -> String {
    if v.status != tao_slurm_engine::PlatformStatus::Running {
        return String::new();
    }
    point(v).and_then(|p| tao_slurm_engine::kpi::bar(p.epoch, p.max_epoch, BAR_WIDTH)).unwrap_or_default()
}

#[cfg(test)]
mod upload_tests {
    use super::*;

    #[test]
    fn the_upload_bar_fills_with_the_bytes_sent() {
        let cases = [
            (0, 4 << 20, "workdir upload [------------] 0.0/4.0 MiB"),
            (1 << 20, 4 << 20, "workdir upload [###---------] 1.0/4.0 MiB"),
            (4 << 20, 4 << 20, "workdir upload [############] 4.0/4.0 MiB"),
            (9, 0, "workdir upload [############] 0.0/0.0 MiB"),
        ];
        for (sent, total, want) in cases {
            assert_eq!(upload_line(sent, total), want, "{sent}/{total}");
        }
    }
}
