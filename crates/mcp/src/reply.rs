//! What a tool answers: structured content with a one-line `summary` and a `next` hint, plus the same
//! as a short text for clients that show only text; and tool errors (`isError`) that say which field
//! was wrong or what to do.

use rmcp::model::{CallToolResult, ContentBlock};
use schemars::JsonSchema;
use serde::Serialize;
use tao_slurm_engine::client::RemoteError;
use tao_slurm_engine::error::{Error, ErrorKind};
use tao_slurm_engine::JobView;

/// A successful answer: `data`'s fields sit beside `summary` and `next` in the structured content.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Reply<T> {
    /// One line: what happened.
    pub summary: String,
    /// What to do next (the workflow rules, for the agent).
    pub next: String,
    #[serde(flatten)]
    pub data: T,
}

impl<T: Serialize> Reply<T> {
    /// A reply; the summary is kept to one line (a job's message may hold several).
    pub fn new(summary: impl Into<String>, next: impl Into<String>, data: T) -> Reply<T> {
        let summary: String = summary.into().split_whitespace().collect::<Vec<_>>().join(" ");
        Reply { summary, next: next.into(), data }
    }

    pub fn into_result(self) -> CallToolResult {
        let data = serde_json::to_value(&self.data).expect("tool data serialises");
        let text = format!("{}\nnext: {}\n{}", self.summary, self.next, data);
        let structured = serde_json::to_value(&self).expect("tool reply serialises");
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(structured);
        result
    }
}

/// A tool that did not do what was asked: a bad argument (with its field), or a failure with what to
/// do about it. Answered as a result with `isError`, so the conversation (and the server) go on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolError {
    /// The argument that was wrong, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
    pub next: String,
}

impl ToolError {
    /// A bad argument: names the field and what it accepts.
    pub fn invalid(field: &str, message: impl Into<String>) -> ToolError {
        ToolError {
            field: Some(field.to_string()),
            message: message.into(),
            next: format!("correct `{field}` and call again"),
        }
    }

    /// A field the core refused, as a bad argument.
    pub fn from_spec(e: tao_slurm_engine::spec::SpecError) -> ToolError {
        ToolError::invalid(&e.field, e.message)
    }

    pub fn failed(message: impl Into<String>, next: impl Into<String>) -> ToolError {
        ToolError { field: None, message: message.into(), next: next.into() }
    }

    /// An engine error, in the words an agent acts on. `id_field` names the argument that held job ids,
    /// for errors about an unknown or ambiguous id.
    pub fn engine(e: Error, id_field: &str) -> ToolError {
        let kind = e.kind();
        match (kind, e) {
            (_, Error::Spec(s)) => {
                let mut t = ToolError::invalid(&s.field, s.message);
                t.next = format!("correct `{}` (ask the user if you do not know the right value) and call again", s.field);
                t
            }
            (ErrorKind::NotFound, e) => ToolError::invalid(
                id_field,
                format!("{e} (it was submitted elsewhere or the id is wrong)"),
            )
            .with_next("call list to see the known jobs"),
            (ErrorKind::Ambiguous, e) => ToolError::invalid(id_field, e.to_string()),
            (ErrorKind::MissingSettings | ErrorKind::Config, e) => ToolError::failed(
                e.to_string(),
                "the user's settings are missing or invalid: ask the user to fix them in ~/.config/tao/.env (or the environment of this MCP server), then call preflight",
            ),
            (ErrorKind::Unreachable, Error::Remote(RemoteError::Unreachable { hosts, message, remediation })) => ToolError::failed(
                format!("cannot connect to any login host ({hosts}): {message}"),
                format!("show the user this remediation verbatim, ask for what it needs, then call preflight again:\n{remediation}"),
            ),
            (ErrorKind::OutcomeUnknown, e) => ToolError::failed(
                e.to_string(),
                "call status for the job: it is found by its unique name, never submitted twice",
            ),
            (ErrorKind::Unreachable, e) => ToolError::failed(e.to_string(), "fix what the message says, then call preflight"),
            (ErrorKind::State, e) => ToolError::failed(e.to_string(), "the local state file is unusable: tell the user"),
            (ErrorKind::RemoteCommand | ErrorKind::Invalid, e) => ToolError::failed(e.to_string(), "tell the user what the cluster answered; call preflight if it looks like a cluster problem"),
        }
    }

    /// Whether the caller's input was at fault (a field to correct), rather than the world.
    pub fn is_invalid_input(&self) -> bool {
        self.field.is_some()
    }

    pub fn with_next(mut self, next: impl Into<String>) -> ToolError {
        self.next = next.into();
        self
    }

    pub fn into_result(self) -> CallToolResult {
        let summary = match &self.field {
            Some(f) => format!("error in `{f}`: {}", first_line(&self.message)),
            None => format!("error: {}", first_line(&self.message)),
        };
        let mut body = serde_json::json!({"summary": summary, "next": self.next, "error": self.message});
        if let Some(f) = &self.field {
            body["field"] = serde_json::json!(f);
        }
        let text = format!("{summary}\nnext: {}\n{}", self.next, self.message);
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = Some(body);
        result
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// A job in the few fields an agent acts on (a `status --json` view has four times as many).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobBrief {
    pub job_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Pending, Running, Complete, Error, Canceled or Paused.
    pub status: String,
    /// In plain words, with Slurm's pending reason and what to do about it.
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_list: Option<String>,
    /// 1, then 2, 3... after retries of infrastructure failures.
    pub attempt: u32,
    /// The container's last progress message (status.json).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    pub elapsed_secs: i64,
    /// When a scheduled retry is due (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<i64>,
    /// Its GPUs as last sampled while it ran: each node's utilisation, memory and power, the mean
    /// utilisation (`util`: none means no GPU data, not 0%), `health` when idle or hung, and
    /// `history`, each node's last samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<tao_slurm_engine::gpu::GpuView>,
    /// Unix seconds.
    #[serde(skip)]
    pub updated_at: i64,
    #[serde(skip)]
    pub terminal: bool,
}

impl From<&JobView> for JobBrief {
    fn from(v: &JobView) -> JobBrief {
        JobBrief {
            job_id: v.job_id.clone(),
            name: v.name.clone(),
            status: v.status.to_string(),
            message: v.message.clone(),
            slurm_job_id: v.slurm_job_id.clone(),
            slurm_state: v.slurm_state.clone(),
            exit_code: v.exit_code,
            node_list: v.node_list.clone(),
            attempt: v.attempt,
            progress: v.progress_message.clone(),
            elapsed_secs: v.elapsed_secs,
            next_retry_at: v.next_retry_at,
            gpu: v.gpu.clone(),
            updated_at: v.updated_at,
            terminal: v.status.is_terminal(),
        }
    }
}

pub fn briefs(views: &[JobView]) -> Vec<JobBrief> {
    views.iter().map(JobBrief::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_carry_summary_next_and_data_in_both_forms() {
        #[derive(Serialize)]
        struct D {
            ok: bool,
        }
        let r = Reply::new("done", "call wait", D { ok: true }).into_result();
        assert_eq!(Reply::new("two\nlines  here", "", ()).summary, "two lines here");
        assert_eq!(r.is_error, Some(false));
        assert_eq!(
            r.structured_content.unwrap(),
            serde_json::json!({"summary": "done", "next": "call wait", "ok": true})
        );
        let text = r.content[0].as_text().unwrap().text.clone();
        assert_eq!(text, "done\nnext: call wait\n{\"ok\":true}");
    }

    #[test]
    fn errors_name_the_field() {
        let r = ToolError::invalid("gpus", "expected a whole number").into_result();
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["field"], "gpus");
        assert!(s["summary"].as_str().unwrap().starts_with("error in `gpus`"));
        let spec = ToolError::engine(
            tao_slurm_engine::spec::SpecError::new("partition", "no such partition").into(),
            "job_id",
        );
        assert_eq!(spec.field.as_deref(), Some("partition"));
        // An unknown id, as the client reports it.
        let dir = tempfile::tempdir().unwrap();
        let mut settings = tao_slurm_core::fixtures::settings();
        settings.state_path = dir.path().join("state.db");
        let unknown = tao_slurm_engine::Client::new(settings).unwrap().job_status("abc").unwrap_err();
        let missing = ToolError::engine(unknown, "job_ids");
        assert_eq!(missing.field.as_deref(), Some("job_ids"));
        assert_eq!(missing.next, "call list to see the known jobs");
    }
}
