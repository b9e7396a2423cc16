//! A job's progress for people (issue 26): the newest KPIs in one line (`watch`) and a progress bar
//! (the job list), both from the last status.json line a refresh kept.

use crate::JobView;

/// Cells of the list's progress bar.
const BAR_WIDTH: usize = 12;

/// The newest point the job reported (None: it reported no epoch, iteration or KPI).
fn point(v: &JobView) -> Option<crate::kpi::KpiPoint> {
    crate::kpi::point_of(&v.progress.as_ref()?.to_string(), v.updated_at)
}

/// `epoch 3/6 · loss 0.42 · eta 0:01:00`, or empty.
pub fn kpi_line(v: &JobView) -> String {
    point(v).map(|p| super::clean(&crate::kpi::one_line(&p))).unwrap_or_default()
}

/// `[######------] 3/6` for a running job that reports its epochs, else empty.
pub fn bar(v: &JobView) -> String {
    if v.status != crate::PlatformStatus::Running {
        return String::new();
    }
    point(v).and_then(|p| crate::kpi::bar(p.epoch, p.max_epoch, BAR_WIDTH)).unwrap_or_default()
}
