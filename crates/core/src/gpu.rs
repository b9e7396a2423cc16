//! GPU health: the sampler each node of a running job runs beside its step (DCGM's `dcgmi dmon` where
//! the node has it, `nvidia-smi` otherwise, at an interval; its newest samples in one small file per
//! node), what a sample says, a job's recent history of them, and when a job is idle or hung. Pure:
//! the batch script carries the sampler, the refresh reads the files, the engine acts on [`assess`].

use serde::{Deserialize, Serialize};

/// Where a job's samples live, under its results directory: one file per node, named by the node,
/// in tao-slurm's own bookkeeping directory (which the results' listings and downloads leave out).
pub const SAMPLE_DIR: &str = ".tao-slurm/gpu";
/// Samples kept per node, newest first in the node's file and oldest first in the job's view
/// ([`GpuView::history`]). 60 because at the default 30 s a sample that is 30 minutes, the default
/// hang time (`TAO_SLURM_GPU_HANG_SECS`): the chart shows the whole spell a hang is decided on, and
/// a refresh made up to 30 minutes after the last one still finds every sample in between. Bounded:
/// a line is about 12 bytes a GPU (an 8-GPU node's file 6,960 bytes on the sandbox), a point of the history about
/// 60 bytes of JSON (a 2-node job's history about 7 KB in the store).
pub const HISTORY_SAMPLES: usize = 60;
/// Bytes of a sample file read (the newest lines; a line cut by the cap is dropped): 60 lines of a
/// 16-GPU node fit, a larger node's file gives fewer of its newest samples.
pub const SAMPLE_MAX_BYTES: usize = 16_384;
/// A sample line longer than this is not one (64 GPUs of the longest readings fit).
pub const LINE_MAX_BYTES: usize = 1_400;
/// Sample files read per job (a job's own clutter in the directory is left unread beyond it).
pub const SAMPLE_FILES_MAX: usize = 64;
/// Bytes of sample lines one job may add to a refresh's output: its first read (a whole history)
/// of up to 8 nodes of 8 GPUs fits; beyond it the rest of its nodes are read in the next refresh.
pub const JOB_READ_MAX_BYTES: usize = 65_536;

/// What a job does when its GPUs stay idle: tell (an event and its webhooks), or cancel the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    #[default]
    Notify,
    Cancel,
}

/// What a job does when it hangs: tell, cancel it, or restart it (a new attempt from its newest
/// checkpoint without the hung nodes, counted as an infrastructure retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum HangAction {
    #[default]
    Notify,
    Cancel,
    Restart,
}

impl IdleAction {
    pub fn parse(field: &str, text: &str) -> Result<IdleAction, String> {
        match text.trim() {
            "notify" => Ok(IdleAction::Notify),
            "cancel" => Ok(IdleAction::Cancel),
            other => Err(format!("{field}: {other:?} is not notify or cancel")),
        }
    }
}

impl HangAction {
    pub fn parse(field: &str, text: &str) -> Result<HangAction, String> {
        match text.trim() {
            "notify" => Ok(HangAction::Notify),
            "cancel" => Ok(HangAction::Cancel),
            "restart" => Ok(HangAction::Restart),
            other => Err(format!("{field}: {other:?} is not notify, cancel or restart")),
        }
    }
}

/// A job's GPU watch, as planned: the sampler's interval and the thresholds and actions (a plan made
/// before GPU watching samples nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuWatch {
    /// Seconds between samples (0: no sampler).
    pub sample_secs: u32,
    /// A GPU under this utilisation (percent) is idle.
    pub idle_percent: u32,
    /// Every GPU of the job idle this long: the job is idle (0: never).
    pub idle_secs: u64,
    /// A node's GPUs idle and no new progress line this long: the job is hung (0: never).
    pub hang_secs: u64,
    pub idle_action: IdleAction,
    pub hang_action: HangAction,
}

/// A job's own GPU watch: each field it sets replaces the settings' (`TAO_SLURM_GPU_*`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct GpuWatchSpec {
    /// Seconds between samples (0: no sampling for this job).
    pub sample_secs: Option<u32>,
    /// A GPU under this utilisation (percent) is idle.
    pub idle_percent: Option<u32>,
    /// Every GPU idle this long: the job is idle (0: never).
    pub idle_secs: Option<u64>,
    /// A node's GPUs idle and no new progress line this long: the job is hung (0: never).
    pub hang_secs: Option<u64>,
    /// `notify` or `cancel`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub idle_action: Option<IdleAction>,
    /// `notify`, `cancel` or `restart`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub hang_action: Option<HangAction>,
}

impl GpuWatchSpec {
    /// The watch this job runs with: its own fields over `base` (the settings'), checked.
    pub fn over(&self, base: &GpuWatch) -> Result<GpuWatch, (&'static str, String)> {
        let w = GpuWatch {
            sample_secs: self.sample_secs.unwrap_or(base.sample_secs),
            idle_percent: self.idle_percent.unwrap_or(base.idle_percent),
            idle_secs: self.idle_secs.unwrap_or(base.idle_secs),
            hang_secs: self.hang_secs.unwrap_or(base.hang_secs),
            idle_action: self.idle_action.unwrap_or(base.idle_action),
            hang_action: self.hang_action.unwrap_or(base.hang_action),
        };
        if w.idle_percent > 100 {
            return Err(("gpu_watch.idle_percent", format!("{} is not a percentage (0 to 100)", w.idle_percent)));
        }
        if w.sample_secs > 3600 {
            return Err((
                "gpu_watch.sample_secs",
                format!("{} s: sample at least once an hour (1 to 3600, 0: none)", w.sample_secs),
            ));
        }
        for (field, secs) in [("gpu_watch.idle_secs", w.idle_secs), ("gpu_watch.hang_secs", w.hang_secs)] {
            if secs > 0 && w.sample_secs > 0 && secs < 2 * u64::from(w.sample_secs) {
                return Err((
                    field,
                    format!(
                        "{secs} s is under two samples ({} s each): make it longer or sample more often",
                        w.sample_secs
                    ),
                ));
            }
        }
        Ok(w)
    }
}

/// One GPU's reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuReading {
    /// Utilisation, percent.
    pub util: u32,
    /// Memory used, MiB.
    pub mem_mib: u64,
    /// Power drawn, watts (0 when the GPU does not report it).
    pub power_w: u32,
}

/// Which tool a sample came from: DCGM (`dcgmi dmon`, fields 203 utilisation, 252 framebuffer
/// used, 155 power) where the node's `dcgmi` answers, else `nvidia-smi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, Default)]
pub enum GpuSource {
    #[default]
    #[serde(rename = "nvidia-smi")]
    NvidiaSmi,
    #[serde(rename = "dcgm")]
    Dcgm,
}

/// A node's newest sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeSample {
    pub node: String,
    /// Unix seconds, the node's clock.
    pub at: i64,
    /// Since when every GPU of the node has been under the idle threshold (None: one is busy).
    pub idle_since: Option<i64>,
    pub gpus: Vec<GpuReading>,
    /// Why there is no reading (no `nvidia-smi`, or it failed): then `gpus` is empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_data: Option<String>,
    /// The tool that took it.
    #[serde(default)]
    pub source: GpuSource,
}

/// One sample of a node in the history: its GPUs' mean utilisation, their memory and power summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryPoint {
    /// Unix seconds, the node's clock.
    pub at: i64,
    /// Mean utilisation of the node's GPUs, percent (None: no GPU data then).
    pub util: Option<u32>,
    pub mem_mib: u64,
    pub power_w: u32,
}

/// A node's recent samples, oldest first, at most [`HISTORY_SAMPLES`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeHistory {
    pub node: String,
    pub points: Vec<HistoryPoint>,
}

/// What a job's GPUs look like, as every door shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuView {
    /// Each node's newest sample, by node name.
    pub nodes: Vec<NodeSample>,
    /// The mean utilisation over every GPU read (None: no GPU data).
    pub util: Option<u32>,
    /// Idle or hung, as last assessed (None: neither).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// Each node's recent samples (the last [`HISTORY_SAMPLES`]), by node name.
    #[serde(default)]
    pub history: Vec<NodeHistory>,
}

impl GpuView {
    /// The view of these newest samples (no history).
    pub fn of(mut nodes: Vec<NodeSample>, health: Option<Health>) -> GpuView {
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        let readings: Vec<u32> = nodes.iter().flat_map(|n| n.gpus.iter().map(|g| g.util)).collect();
        let util = (!readings.is_empty()).then(|| readings.iter().sum::<u32>() / readings.len() as u32);
        GpuView { nodes, util, health, history: Vec::new() }
    }

    /// The same view with this history.
    pub fn with_history(self, history: Vec<NodeHistory>) -> GpuView {
        GpuView { history, ..self }
    }

    /// One cell for a table: `87%`, `87% (idle 12m)`, `no GPU data`.
    pub fn cell(&self, now: i64) -> String {
        let Some(util) = self.util else { return "no GPU data".into() };
        match &self.health {
            Some(Health::Idle { since }) => format!("{util}% (idle {}m)", (now - since).max(0) / 60),
            Some(Health::Hung { since, nodes }) => {
                format!("{util}% (hung {}m: {})", (now - since).max(0) / 60, nodes.join(","))
            }
            None => format!("{util}%"),
        }
    }
}

impl HistoryPoint {
    pub fn of(sample: &NodeSample) -> HistoryPoint {
        let n = sample.gpus.len() as u32;
        HistoryPoint {
            at: sample.at,
            util: (n > 0).then(|| sample.gpus.iter().map(|g| g.util).sum::<u32>() / n),
            mem_mib: sample.gpus.iter().map(|g| g.mem_mib).sum(),
            power_w: sample.gpus.iter().map(|g| g.power_w).sum(),
        }
    }
}

/// Each node's newest sample: the newest a refresh `read`, else the one `previous` held (a node
/// whose file had nothing new keeps its newest); none taken before `attempt_since` (the current
/// attempt's submission: a node an earlier attempt ran on is history, not this attempt's health).
/// At most [`SAMPLE_FILES_MAX`] nodes.
pub fn newest_per_node(previous: Option<&GpuView>, read: &[NodeSample], attempt_since: Option<i64>) -> Vec<NodeSample> {
    let mut newest: std::collections::BTreeMap<&str, &NodeSample> = std::collections::BTreeMap::new();
    let current = previous.map(|v| v.nodes.as_slice()).unwrap_or(&[]).iter().chain(read);
    for s in current.filter(|s| attempt_since.is_none_or(|t| s.at >= t)) {
        if newest.get(s.node.as_str()).is_none_or(|n| s.at >= n.at) {
            newest.insert(&s.node, s);
        }
    }
    newest.into_values().take(SAMPLE_FILES_MAX).cloned().collect()
}

/// Each node's newest sample time a view holds (its newest samples and its history): a refresh
/// reads only what is newer.
pub fn seen(view: &GpuView) -> Vec<(String, i64)> {
    let mut seen: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    let points = view.history.iter().flat_map(|h| h.points.last().map(|p| (h.node.as_str(), p.at)));
    for (node, at) in view.nodes.iter().map(|n| (n.node.as_str(), n.at)).chain(points) {
        let e = seen.entry(node).or_insert(at);
        *e = (*e).max(at);
    }
    seen.into_iter().filter(|(n, _)| is_node_name(n)).map(|(n, at)| (n.to_string(), at)).collect()
}

/// `previous`'s history with the samples a refresh `read` added: per node by time, one point per
/// time, the newest [`HISTORY_SAMPLES`] kept; at most [`SAMPLE_FILES_MAX`] nodes.
pub fn history_with(previous: Option<&GpuView>, read: &[NodeSample]) -> Vec<NodeHistory> {
    let mut by_node: std::collections::BTreeMap<String, std::collections::BTreeMap<i64, HistoryPoint>> =
        std::collections::BTreeMap::new();
    for h in previous.map(|v| v.history.as_slice()).unwrap_or(&[]) {
        let points = by_node.entry(h.node.clone()).or_default();
        points.extend(h.points.iter().map(|p| (p.at, p.clone())));
    }
    for s in read {
        by_node.entry(s.node.clone()).or_default().insert(s.at, HistoryPoint::of(s));
    }
    by_node
        .into_iter()
        .take(SAMPLE_FILES_MAX)
        .map(|(node, points)| {
            let skip = points.len().saturating_sub(HISTORY_SAMPLES);
            NodeHistory { node, points: points.into_values().skip(skip).collect() }
        })
        .collect()
}

/// A job's GPU health: idle (every GPU under the threshold long enough) or hung (some node's GPUs
/// idle and no progress, long enough).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Health {
    Idle { since: i64 },
    Hung { since: i64, nodes: Vec<String> },
}

/// Whether `name` can be a node's sample file: a host name's characters only.
pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// A node's sample lines (newest first, as its file holds them; a refresh sends those newer than
/// it had): each line read strictly, one that is not a sample left out, at most
/// [`HISTORY_SAMPLES`]. The file is the job's to write: nothing else in it is believed.
pub fn parse_samples(node: &str, text: &str) -> Vec<NodeSample> {
    if !is_node_name(node) || text.len() > SAMPLE_MAX_BYTES {
        return Vec::new();
    }
    text.lines().filter_map(|l| parse_line(node, l)).take(HISTORY_SAMPLES).collect()
}

/// One sample line: `v2 AT IDLE_SINCE|- SOURCE U/M/W,U/M/W...` or `v2 AT none SOURCE REASON`
/// (SOURCE `smi` or `dcgm`); the first sampler's `v1` lines (no SOURCE: nvidia-smi) are read too.
pub fn parse_line(node: &str, line: &str) -> Option<NodeSample> {
    if !is_node_name(node) || line.len() > LINE_MAX_BYTES {
        return None;
    }
    let (version, rest) = line.split_once(' ')?;
    let (at, rest) = rest.split_once(' ')?;
    let at: i64 = at.parse().ok()?;
    let (third, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let (source, rest) = match version {
        "v1" => (GpuSource::NvidiaSmi, rest),
        "v2" => {
            let (source, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let source = match source {
                "smi" => GpuSource::NvidiaSmi,
                "dcgm" => GpuSource::Dcgm,
                _ => return None,
            };
            (source, rest)
        }
        _ => return None,
    };
    if third == "none" {
        let reason: String = rest.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(120).collect();
        let reason = if reason.trim().is_empty() { "nvidia-smi gave no reading".into() } else { reason.trim().into() };
        return Some(NodeSample {
            node: node.into(),
            at,
            idle_since: None,
            gpus: Vec::new(),
            no_data: Some(reason),
            source,
        });
    }
    let idle_since = match third {
        "-" => None,
        t => Some(t.parse().ok()?),
    };
    let mut gpus = Vec::new();
    for g in rest.split(',') {
        let mut f = g.split('/');
        let util: u32 = f.next()?.parse().ok()?;
        let mem_mib = f.next()?.parse().ok()?;
        let power_w = f.next()?.parse().ok()?;
        if f.next().is_some() || util > 100 {
            return None;
        }
        gpus.push(GpuReading { util, mem_mib, power_w });
    }
    Some(NodeSample { node: node.into(), at, idle_since, gpus, no_data: None, source })
}

/// Idle or hung at `now`, from the nodes' newest samples, when the job's last progress was
/// `last_progress` (its status.json's mtime, or when its attempt started). Hung wins: it names the
/// nodes to leave out of a restart.
pub fn assess(samples: &[NodeSample], watch: &GpuWatch, last_progress: i64, now: i64) -> Option<Health> {
    let read: Vec<&NodeSample> = samples.iter().filter(|s| s.no_data.is_none()).collect();
    if read.is_empty() {
        return None;
    }
    if watch.hang_secs > 0 && now - last_progress >= watch.hang_secs as i64 {
        let hung: Vec<&NodeSample> =
            read.iter().copied().filter(|s| s.idle_since.is_some_and(|i| now - i >= watch.hang_secs as i64)).collect();
        if !hung.is_empty() {
            let since = hung.iter().filter_map(|s| s.idle_since).max().unwrap_or(now).max(last_progress);
            return Some(Health::Hung { since, nodes: hung.iter().map(|s| s.node.clone()).collect() });
        }
    }
    if watch.idle_secs > 0 && read.iter().all(|s| s.idle_since.is_some_and(|i| now - i >= watch.idle_secs as i64)) {
        return Some(Health::Idle { since: read.iter().filter_map(|s| s.idle_since).max().unwrap_or(now) });
    }
    None
}

/// When a job last made progress: its status.json's modification time, from the refresh's signature
/// of it (`size:mtime`), not before its attempt `started` (reached Slurm).
pub fn last_progress(status_sig: Option<&str>, started: i64) -> i64 {
    let mtime = status_sig.and_then(|s| s.split(':').nth(1)).and_then(|t| t.split('.').next()?.parse::<i64>().ok());
    mtime.unwrap_or(started).max(started)
}

/// Whether a health already recorded is the same spell (idle stays idle, hung stays hung): a spell
/// is told of and acted on once.
pub fn same_spell(before: Option<&Health>, now: &Health) -> bool {
    matches!(
        (before, now),
        (Some(Health::Idle { .. }), Health::Idle { .. }) | (Some(Health::Hung { .. }), Health::Hung { .. })
    )
}

/// The sampler every node of the job runs: a background step beside the job's own (outside its
/// container, where `nvidia-smi` is), ended when the job's step ends. Its lines for the batch
/// script, and the line that stops it; None when the job samples nothing.
pub fn sampler_lines(watch: &GpuWatch, results_dir: &str, nodes: u32) -> Option<(String, String)> {
    if watch.sample_secs == 0 {
        return None;
    }
    let dir = crate::script::shell::quote(&format!("{results_dir}/{SAMPLE_DIR}"));
    // Neither the directory nor its parent (the bookkeeping directory) may be a link a job left.
    let parent = crate::script::shell::quote(&format!("{results_dir}/{}", crate::layout::BOOKKEEPING_DIR));
    let program = crate::script::shell::quote(SAMPLER);
    let start = format!(
        "[ ! -L {parent} ] && mkdir -p {dir} && [ -d {dir} ] && [ ! -L {dir} ] && srun --overlap --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c {program} tao-gpu {dir} {secs} {pct} {keep} </dev/null >/dev/null 2>&1 & tao_gpu=$!\n",
        secs = watch.sample_secs,
        pct = watch.idle_percent,
        keep = HISTORY_SAMPLES,
    );
    Some((start, "kill \"${tao_gpu:-}\" 2>/dev/null\n".to_string()))
}

/// One node's sampler: its directory entered once (a job that swaps the name for a link later moves
/// nothing of ours); each sample from DCGM when the node's `dcgmi` gives readings (its host engine
/// runs), else from `nvidia-smi`; the node's last `$4` samples kept in memory (never read back from
/// the file, which is the job's to touch) and written newest first to a fresh temporary file renamed
/// over the node's file.
const SAMPLER: &str = r#"d=$1; s=$2; p=$3; k=$4; n=${SLURMD_NODENAME:-$(hostname -s)}; idle=-; ring=
[ -d "$d" ] && [ ! -L "$d" ] && [ ! -L "${d%/*}" ] && [ -O "$d" ] && cd -P -- "$d" || exit 0
busy() { awk -v p="$p" '{ printf "%s%d/%d/%d", (n++ ? "," : ""), $1, $2 + 0, $3 + 0; if ($1 + 0 >= p) b = 1 } END { if (n) print (b ? " busy" : " idle") }'; }
while :; do
  now=$(date +%s); r=; src=smi
  if command -v dcgmi >/dev/null 2>&1 && o=$(timeout 20 dcgmi dmon -e 203,252,155 -c 1 2>/dev/null); then
    r=$(printf '%s\n' "$o" | awk '$1 == "GPU" && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { print $3 + 0, $4 + 0, $5 + 0 }' | busy)
    [ -n "$r" ] && src=dcgm
  fi
  if [ -n "$r" ]; then :
  elif o=$(timeout 20 nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv,noheader,nounits 2>&1); then
    r=$(printf '%s\n' "$o" | awk -F', *' 'NF >= 3 && $1 ~ /^[0-9]+$/ { print $1 + 0, $2 + 0, $3 + 0 }' | busy)
  else
    r="none $(printf '%s' "$o" | head -c 120 | tr -c 'A-Za-z0-9 .:_-' ' ')"
  fi
  case $r in
    none*) idle=-; l="v2 $now none $src ${r#none }" ;;
    *busy) idle=-; l="v2 $now - $src ${r% *}" ;;
    *idle) [ "$idle" = - ] && idle=$now; l="v2 $now $idle $src ${r% *}" ;;
    *) idle=-; l="v2 $now none $src nvidia-smi listed no GPU" ;;
  esac
  ring=$(printf '%s\n%s' "$l" "$ring" | head -n "$k")
  t=$(mktemp ./.sample.XXXXXX) && printf '%s\n' "$ring" > "$t" && mv -f -- "$t" "./$n"
  sleep "$s"
done"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(idle: u64, hang: u64) -> GpuWatch {
        GpuWatch {
            sample_secs: 30,
            idle_percent: 5,
            idle_secs: idle,
            hang_secs: hang,
            idle_action: IdleAction::Notify,
            hang_action: HangAction::Restart,
        }
    }

    fn sample(node: &str, idle_since: Option<i64>) -> NodeSample {
        NodeSample {
            node: node.into(),
            at: 1000,
            idle_since,
            gpus: vec![GpuReading { util: if idle_since.is_some() { 0 } else { 90 }, mem_mib: 1, power_w: 1 }],
            no_data: None,
            source: GpuSource::NvidiaSmi,
        }
    }

    fn newest(node: &str, text: &str) -> Option<NodeSample> {
        parse_samples(node, text).into_iter().next()
    }

    #[test]
    fn samples_are_read_strictly() {
        let s = parse_line("node1", "v1 1700 - 87/1024/250,91/2048/260").unwrap();
        assert_eq!((s.at, s.idle_since, s.gpus.len(), s.source), (1700, None, 2, GpuSource::NvidiaSmi));
        assert_eq!(s.gpus[1], GpuReading { util: 91, mem_mib: 2048, power_w: 260 });
        assert_eq!(parse_line("node1", "v1 1700 1600 0/10/30").unwrap().idle_since, Some(1600));
        let dcgm = parse_line("node1", "v2 1700 1600 dcgm 0/10/30").unwrap();
        assert_eq!((dcgm.idle_since, dcgm.source), (Some(1600), GpuSource::Dcgm));
        let none = parse_line("n", "v1 5 none nvidia-smi: command not found").unwrap();
        assert_eq!(none.no_data.as_deref(), Some("nvidia-smi: command not found"));
        let none = parse_line("n", "v2 5 none smi nvidia-smi: command not found").unwrap();
        assert_eq!(
            (none.no_data.as_deref(), none.source),
            (Some("nvidia-smi: command not found"), GpuSource::NvidiaSmi)
        );
        for bad in [
            "",
            "v3 1 - smi 1/1/1",
            "v2 1 - 1/1/1",
            "v2 1 - nvml 1/1/1",
            "v2 1 - smi",
            "v2 1 - smi 1/1/1,",
            "v1 x - 1/1/1",
            "v1 1 - 101/1/1",
            "v1 1 - 1/1",
            "v1 1 - 1/1/1/1",
            "v1 1 - -1/1/1",
            "v1 1 -",
            "v1 1 abc 1/1/1",
        ] {
            assert_eq!(parse_line("node1", bad), None, "{bad:?}");
        }
        for node in ["", ".hidden", "a/b", "n\n1", &"x".repeat(65)] {
            assert_eq!(parse_line(node, "v1 1 - 1/1/1"), None, "{node:?}");
        }
        assert_eq!(parse_line("n", &format!("v2 1 - smi 1/1/1{}", " ".repeat(LINE_MAX_BYTES))), None);
        // A file: its lines newest first, each read on its own, a bad one left out, at most the ring.
        let file = "v2 30 - smi 9/1/1\ngarbage\nv2 20 - dcgm 8/1/1\n";
        let ats: Vec<i64> = parse_samples("n", file).iter().map(|s| s.at).collect();
        assert_eq!(ats, [30, 20]);
        let long: String = (0..100).map(|i| format!("v2 {} - smi 1/1/1\n", 1000 - i)).collect();
        assert_eq!(parse_samples("n", &long).len(), HISTORY_SAMPLES);
        assert!(parse_samples("n", &"v2 1 - smi 1/1/1\n".repeat(SAMPLE_MAX_BYTES / 8)).is_empty(), "over the cap");
    }

    /// A refresh's samples join the job's history: by node and time, each time once, the newest
    /// [`HISTORY_SAMPLES`] kept; a node the refresh read nothing new of keeps its newest sample.
    #[test]
    fn the_history_is_a_bounded_ring_per_node_and_the_newest_sample_stands_until_a_newer_one() {
        let line = |node: &str, at: i64, util: u32| {
            parse_line(node, &format!("v2 {at} - smi {util}/100/50,{util}/100/50")).unwrap()
        };
        let first: Vec<NodeSample> =
            (0..40).map(|i| line("a", 1000 + 30 * i, 50)).chain([line("b", 1000, 10)]).collect();
        let view = GpuView::of(newest_per_node(None, &first, None), None).with_history(history_with(None, &first));
        assert_eq!(view.nodes.iter().map(|n| (n.node.as_str(), n.at)).collect::<Vec<_>>(), [("a", 2170), ("b", 1000)]);
        assert_eq!(view.history[0].points.len(), 40);
        assert_eq!(view.history[0].points[0], HistoryPoint { at: 1000, util: Some(50), mem_mib: 200, power_w: 100 });
        // The next refresh sends a's newer lines, one of them again, and nothing of b.
        let next: Vec<NodeSample> = (39..70).map(|i| line("a", 1000 + 30 * i, 90)).collect();
        let nodes = newest_per_node(Some(&view), &next, None);
        assert_eq!(nodes.iter().map(|n| (n.node.as_str(), n.at)).collect::<Vec<_>>(), [("a", 3070), ("b", 1000)]);
        let history = history_with(Some(&view), &next);
        let a = &history[0].points;
        assert_eq!(a.len(), HISTORY_SAMPLES, "bounded");
        assert_eq!(
            (a[0].at, a[HISTORY_SAMPLES - 1].at),
            (3070 - 30 * (HISTORY_SAMPLES as i64 - 1), 3070),
            "the newest, oldest first"
        );
        assert!(a.windows(2).all(|w| w[0].at < w[1].at), "one point per time");
        assert_eq!(history[1].points.len(), 1);
        assert_eq!(seen(&view), [("a".to_string(), 2170), ("b".to_string(), 1000)]);
        // A new attempt (submitted at 3000) on a's node only: b's sample is history, not its health.
        let later = newest_per_node(Some(&view), &next, Some(3000));
        assert_eq!(later.iter().map(|n| (n.node.as_str(), n.at)).collect::<Vec<_>>(), [("a", 3070)]);
        // A node without data is a gap in its history, not 0%.
        let none = parse_line("a", "v2 4000 none smi no devices").unwrap();
        assert_eq!(history_with(Some(&view), &[none])[0].points.last().unwrap().util, None);
        // Stored before the history existed: read as no history.
        let old: GpuView = serde_json::from_str(r#"{"nodes":[],"util":null}"#).unwrap();
        assert!(old.history.is_empty());
    }

    #[test]
    fn idle_and_hung_are_decided_from_the_samples_and_the_progress() {
        let w = watch(600, 300);
        let now = 10_000;
        // Busy everywhere: nothing.
        assert_eq!(assess(&[sample("a", None), sample("b", None)], &w, now - 1000, now), None);
        // One node idle 400 s, no progress for 400 s: hung on that node.
        let hung = assess(&[sample("a", None), sample("b", Some(now - 400))], &w, now - 400, now);
        assert_eq!(hung, Some(Health::Hung { since: now - 400, nodes: vec!["b".into()] }));
        // The same node, but progress 100 s ago: training goes on (a data-loader pause, say).
        assert_eq!(assess(&[sample("a", None), sample("b", Some(now - 400))], &w, now - 100, now), None);
        // Every node idle 700 s, progress recent (a notebook-style job): idle, not hung.
        let idle = assess(&[sample("a", Some(now - 700)), sample("b", Some(now - 650))], &w, now - 10, now);
        assert_eq!(idle, Some(Health::Idle { since: now - 650 }));
        // Not long enough, or turned off: nothing.
        assert_eq!(assess(&[sample("a", Some(now - 500))], &w, now - 10, now), None);
        assert_eq!(assess(&[sample("a", Some(now - 5000))], &watch(0, 0), now - 5000, now), None);
        // No GPU data is no verdict.
        let none = NodeSample { no_data: Some("no nvidia-smi".into()), gpus: vec![], ..sample("a", None) };
        assert_eq!(assess(std::slice::from_ref(&none), &w, 0, now), None);
        let view = GpuView::of(vec![none], None);
        assert_eq!((view.util, view.cell(now).as_str()), (None, "no GPU data"));
    }

    #[test]
    fn progress_is_status_jsons_mtime_not_before_the_attempt_and_a_spell_is_one() {
        assert_eq!(last_progress(Some("120:5000"), 4000), 5000);
        assert_eq!(last_progress(Some("120:3000"), 4000), 4000, "a status.json of an earlier attempt");
        assert_eq!(last_progress(None, 4000), 4000);
        let (idle, hung) = (Health::Idle { since: 1 }, Health::Hung { since: 2, nodes: vec!["a".into()] });
        assert!(same_spell(Some(&idle), &Health::Idle { since: 9 }));
        assert!(!same_spell(Some(&idle), &hung) && !same_spell(None, &idle));
    }

    #[test]
    fn the_view_averages_every_gpu_and_says_its_health() {
        let v = GpuView::of(vec![sample("b", None), sample("a", Some(0))], Some(Health::Idle { since: 0 }));
        assert_eq!(v.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((v.util, v.cell(600).as_str()), (Some(45), "45% (idle 10m)"));
    }

    /// The sampler under bash with a stand-in nvidia-smi: it writes one line per sample, a busy GPU
    /// clears the idle time and an idle one starts it, a failing nvidia-smi says so, and a name the
    /// job swapped for a link after the sampler started moves nothing of the sampler's.
    #[test]
    fn the_sampler_writes_one_small_file_per_node() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let readings = dir.path().join("readings");
        std::fs::write(
            bin.join("nvidia-smi"),
            format!(
                "#!/bin/bash\n[ -f {r} ] || {{ echo 'no devices' >&2; exit 9; }}\ncat {r}\n",
                r = readings.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(bin.join("nvidia-smi"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        // A dcgmi whose host engine answers only while `dcgm` exists (as `dcgmi dmon` prints).
        let dcgm = dir.path().join("dcgm");
        std::fs::write(
            bin.join("dcgmi"),
            format!(
                "#!/bin/bash\n[ -f {d} ] || {{ echo 'Error: unable to establish a connection to the specified host: localhost' >&2; exit 255; }}\nprintf '#Entity   GPUTL  FBUSD  POWER\\n      ID\\n'; cat {d}\n",
                d = dcgm.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(bin.join("dcgmi"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let samples = dir.path().join(SAMPLE_DIR);
        std::fs::create_dir_all(&samples).unwrap();
        let run = |secs: &str| {
            std::process::Command::new("timeout")
                .args([secs, "bash", "-c", SAMPLER, "tao-gpu"])
                .arg(&samples)
                .args(["1", "5", "3"])
                .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()))
                .env("SLURMD_NODENAME", "node7")
                .status()
                .unwrap()
        };
        std::fs::write(&readings, "87, 1024, 250.5\n3, 10, 30\n").unwrap();
        run("1.5");
        let busy = newest("node7", &std::fs::read_to_string(samples.join("node7")).unwrap()).unwrap();
        assert_eq!((busy.idle_since, busy.gpus.len(), busy.gpus[0].power_w), (None, 2, 250));
        std::fs::write(&readings, "0, 10, 30\n").unwrap();
        run("2.5");
        let idle = newest("node7", &std::fs::read_to_string(samples.join("node7")).unwrap()).unwrap();
        assert!(idle.idle_since.is_some_and(|i| i <= idle.at && idle.at - i <= 3), "{idle:?}");
        // The ring: at most its size (3 here), newest first, one idle spell through it.
        run("4.5");
        let ring = parse_samples("node7", &std::fs::read_to_string(samples.join("node7")).unwrap());
        assert_eq!(ring.len(), 3, "{ring:?}");
        assert!(ring.windows(2).all(|w| w[0].at > w[1].at && w[0].idle_since == w[1].idle_since), "{ring:?}");
        // Where DCGM's host engine answers, DCGM's fields (N/A power: 0); nvidia-smi's otherwise.
        std::fs::write(&dcgm, "GPU 0    42     2048   N/A\nGPU 1    40     1024   300.5\n").unwrap();
        run("1.5");
        let d = newest("node7", &std::fs::read_to_string(samples.join("node7")).unwrap()).unwrap();
        assert_eq!(d.source, GpuSource::Dcgm, "{d:?}");
        assert_eq!(
            d.gpus,
            [GpuReading { util: 42, mem_mib: 2048, power_w: 0 }, GpuReading { util: 40, mem_mib: 1024, power_w: 300 }]
        );
        std::fs::remove_file(&dcgm).unwrap();
        run("1.5");
        let back = newest("node7", &std::fs::read_to_string(samples.join("node7")).unwrap()).unwrap();
        assert_eq!((back.source, back.gpus.len()), (GpuSource::NvidiaSmi, 1), "{back:?}");
        std::fs::remove_file(&readings).unwrap();
        run("1.5");
        let none = newest("node7", &std::fs::read_to_string(samples.join("node7")).unwrap()).unwrap();
        assert_eq!(none.no_data.as_deref(), Some("no devices"));
        let names: Vec<String> =
            std::fs::read_dir(&samples).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, ["node7"], "no temporary file is left behind");
        // A link in the directory's place: the sampler does not start.
        let victim = dir.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::remove_dir_all(&samples).unwrap();
        std::os::unix::fs::symlink(&victim, &samples).unwrap();
        run("1.5");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "nothing written through the link");
        // A link in the bookkeeping directory's place (the samples' parent): nor then.
        assert!(SAMPLE_DIR.starts_with(&format!("{}/", crate::layout::BOOKKEEPING_DIR)));
        let parent = samples.parent().unwrap().to_path_buf();
        std::fs::remove_dir_all(&parent).unwrap();
        std::fs::create_dir_all(victim.join("gpu")).unwrap();
        std::os::unix::fs::symlink(&victim, &parent).unwrap();
        run("1.5");
        assert_eq!(std::fs::read_dir(victim.join("gpu")).unwrap().count(), 0, "nothing written through the parent");
    }
}
