//! A job's KPIs over time (issue 26): the lines of its `status.json` that report progress (epoch,
//! iteration, ETA, the numbers of `kpi`), as points a chart plots, and the one-line summary the CLI's
//! `watch` prints. Pure: the engine keeps the lines it reads, in the order read.

use serde::Serialize;
use std::collections::BTreeMap;

/// One progress report of a job, as `status.json` said it. Its time is Unix seconds as the engine
/// keeps it, RFC 3339 text in the service's replies (`KpiPoint<Rfc3339>`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KpiPoint<T = i64> {
    /// When the line was first read.
    pub at: T,
    pub epoch: Option<f64>,
    pub max_epoch: Option<f64>,
    pub cur_iter: Option<f64>,
    pub eta: Option<String>,
    /// The numeric KPIs (`kpi` of TAO's status lines, and a top-level `loss`), by name.
    pub kpi: BTreeMap<String, f64>,
    pub message: Option<String>,
}

impl<T> KpiPoint<T> {
    /// The same point with its time as `f` gives it.
    pub fn map_time<U>(self, f: impl Fn(T) -> U) -> KpiPoint<U> {
        let KpiPoint { at, epoch, max_epoch, cur_iter, eta, kpi, message } = self;
        KpiPoint { at: f(at), epoch, max_epoch, cur_iter, eta, kpi, message }
    }
}

/// The complete JSON lines of a status.json text that report progress, oldest first (a half-written
/// last line is left for the next read).
pub fn progress_lines(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).filter(|l| point_of(l, 0).is_some()).collect()
}

/// The point a status.json line reports, if it reports progress (an epoch, an iteration or a KPI).
pub fn point_of(line: &str, at: i64) -> Option<KpiPoint> {
    let serde_json::Value::Object(o) = serde_json::from_str::<serde_json::Value>(line).ok()? else {
        return None;
    };
    let num = |k: &str| o.get(k).and_then(number);
    let mut kpi: BTreeMap<String, f64> = match o.get("kpi") {
        Some(serde_json::Value::Object(k)) => k.iter().filter_map(|(n, v)| Some((n.clone(), number(v)?))).collect(),
        _ => BTreeMap::new(),
    };
    if let Some(loss) = num("loss") {
        kpi.entry("loss".into()).or_insert(loss);
    }
    let point = KpiPoint {
        at,
        epoch: num("epoch"),
        max_epoch: num("max_epoch"),
        cur_iter: num("cur_iter"),
        eta: o.get("eta").filter(|v| !v.is_null()).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)),
        kpi,
        message: o.get("message").and_then(|v| v.as_str()).map(str::to_string),
    };
    (point.epoch.is_some() || point.cur_iter.is_some() || !point.kpi.is_empty()).then_some(point)
}

/// A number, or a string that is one (TAO writes some KPIs as strings).
fn number(v: &serde_json::Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str()?.trim().parse().ok()).filter(|f: &f64| f.is_finite())
}

/// The most KPI points kept per job (the store thins a job's points on write: [`to_drop`]). A job
/// that writes any number of unique progress lines leaves at most this many.
pub const MAX_POINTS_PER_JOB: usize = 1000;

/// The newest points thinning never drops: more than one refresh reads of a status.json (its last
/// 20 lines), so a line just kept is never dropped and read again as new.
pub const KEEP_NEWEST: usize = 100;

/// Which of a job's points (their ids, oldest first) to drop so that at most `max` remain: none
/// when they fit; else every second point between the first and the `KEEP_NEWEST` newest, again
/// until they fit (older reports grow sparser, the first and the newest stay).
pub fn to_drop<T: Copy>(ids: &[T], max: usize) -> Vec<T> {
    let keep_newest = KEEP_NEWEST.min(max.saturating_sub(2));
    let mut kept: Vec<T> = ids.to_vec();
    let mut dropped = Vec::new();
    while kept.len() > max && kept.len() > keep_newest + 2 {
        let end = kept.len() - keep_newest;
        let mut next = Vec::with_capacity(kept.len());
        for (i, id) in kept.iter().enumerate() {
            if i > 0 && i < end && i % 2 == 1 {
                dropped.push(*id);
            } else {
                next.push(*id);
            }
        }
        kept = next;
    }
    dropped
}

/// At most `max` of `points`, evenly spread, the first and the newest always kept (a chart of a
/// long job's many reports).
pub fn thin(points: Vec<KpiPoint>, max: usize) -> Vec<KpiPoint> {
    let n = points.len();
    if n <= max || max < 2 {
        return points;
    }
    let keep: std::collections::BTreeSet<usize> = (0..max).map(|i| i * (n - 1) / (max - 1)).collect();
    points.into_iter().enumerate().filter(|(i, _)| keep.contains(i)).map(|(_, p)| p).collect()
}

/// The newest point in one line: `epoch 3/6 · loss 0.42 · eta 0:01:00`.
pub fn one_line(p: &KpiPoint) -> String {
    let mut parts = Vec::new();
    match (p.epoch, p.max_epoch) {
        (Some(e), Some(m)) => parts.push(format!("epoch {}/{}", fmt(e), fmt(m))),
        (Some(e), None) => parts.push(format!("epoch {}", fmt(e))),
        _ => {}
    }
    if let Some(i) = p.cur_iter {
        parts.push(format!("iter {}", fmt(i)));
    }
    parts.extend(p.kpi.iter().map(|(k, v)| format!("{k} {}", fmt(*v))));
    if let Some(eta) = &p.eta {
        parts.push(format!("eta {eta}"));
    }
    parts.join(" · ")
}

/// A progress bar of `width` cells for `epoch` of `max` (None without both).
pub fn bar(epoch: Option<f64>, max: Option<f64>, width: usize) -> Option<String> {
    let (e, m) = (epoch?, max?);
    if m <= 0.0 {
        return None;
    }
    let filled = ((e / m).clamp(0.0, 1.0) * width as f64).round() as usize;
    Some(format!("[{}{}] {}/{}", "#".repeat(filled), "-".repeat(width - filled), fmt(e), fmt(m)))
}

fn fmt(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{}", (v * 10_000.0).round() / 10_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_keep_reports_and_leave_the_rest() {
        let text = concat!(
            "{\"status\":\"STARTED\",\"message\":\"starting\"}\n",
            "{\"status\":\"RUNNING\",\"epoch\":1,\"max_epoch\":6,\"kpi\":{\"loss\":0.8,\"acc\":\"0.5\"},\"eta\":\"0:05:00\"}\n",
            "{\"status\":\"RUNNING\",\"cur_iter\":10,\"loss\":0.7}\n",
            "{\"status\":\"RUNNING\",\"epoch\":2,\"ma",
        );
        let lines = progress_lines(text);
        assert_eq!(lines.len(), 2, "{lines:?}");
        let p = point_of(lines[0], 5).unwrap();
        assert_eq!((p.at, p.epoch, p.max_epoch), (5, Some(1.0), Some(6.0)));
        assert_eq!(p.kpi, BTreeMap::from([("acc".into(), 0.5), ("loss".into(), 0.8)]));
        assert_eq!(one_line(&p), "epoch 1/6 · acc 0.5 · loss 0.8 · eta 0:05:00");
        assert_eq!(one_line(&point_of(lines[1], 0).unwrap()), "iter 10 · loss 0.7");
        assert_eq!(point_of("[1,2]", 0), None);
        assert_eq!(point_of("{\"kpi\":{\"loss\":\"NaN\"}}", 0), None, "no finite number, no point");
    }

    #[test]
    fn thinning_keeps_the_first_and_the_newest_evenly() {
        let points: Vec<KpiPoint> = (0..1000).map(|i| point_of(&format!("{{\"cur_iter\":{i}}}"), i).unwrap()).collect();
        let kept = thin(points.clone(), 5);
        assert_eq!(kept.iter().map(|p| p.at).collect::<Vec<_>>(), [0, 249, 499, 749, 999]);
        assert_eq!(thin(points[..3].to_vec(), 5).len(), 3);
    }

    #[test]
    fn a_jobs_points_are_thinned_to_the_cap_keeping_the_first_and_the_newest() {
        assert!(to_drop(&[1, 2, 3], 5).is_empty());
        let mut kept: Vec<u32> = Vec::new();
        let mut most = 0;
        // 10,000 unique lines, 20 a refresh, thinned after each write.
        for batch in (0..10_000u32).collect::<Vec<_>>().chunks(20) {
            kept.extend_from_slice(batch);
            let drop = to_drop(&kept, MAX_POINTS_PER_JOB);
            kept.retain(|id| !drop.contains(id));
            most = most.max(kept.len());
        }
        assert!(most <= MAX_POINTS_PER_JOB, "{most}");
        assert!(kept.len() > MAX_POINTS_PER_JOB / 2, "{}", kept.len());
        assert_eq!(kept[0], 0, "the first is kept");
        assert_eq!(kept[kept.len() - KEEP_NEWEST..], (9_900..10_000).collect::<Vec<_>>()[..], "the newest are kept");
        // One write of far more than the cap still ends under it.
        let many: Vec<u32> = (0..50_000).collect();
        assert!(many.len() - to_drop(&many, MAX_POINTS_PER_JOB).len() <= MAX_POINTS_PER_JOB);
        assert!(many.len() - to_drop(&many, 3).len() <= 3);
    }

    #[test]
    fn the_bar_fills_with_the_epochs() {
        assert_eq!(bar(Some(3.0), Some(6.0), 10).unwrap(), "[#####-----] 3/6");
        assert_eq!(bar(Some(9.0), Some(6.0), 4).unwrap(), "[####] 9/6");
        assert_eq!(bar(Some(1.0), None, 4), None);
        assert_eq!(bar(Some(1.0), Some(0.0), 4), None);
    }
}
