use super::output::ChunkLine;
use clap::Args;
use std::io::Write;
use std::time::Duration;
use tao_slurm_engine::client::{Chunk, Stream};
use tao_slurm_engine::config::Settings;
use tao_slurm_engine::cosmos::Role;
use tao_slurm_engine::error::Error;
use tao_slurm_engine::spec::SpecError;
use tao_slurm_engine::Client;

#[derive(Args, Debug)]
pub struct LogsCmd {
    pub job_id: String,
    /// Only the last N lines of each file
    #[arg(long)]
    pub tail: Option<u32>,
    /// Follow the files as the job writes them, until it reaches a terminal status
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only main.out
    #[arg(long, conflicts_with = "stderr")]
    pub stdout: bool,
    /// Only main.err
    #[arg(long)]
    pub stderr: bool,
    /// Seconds between polls with -f
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Which attempt's logs (1 = the first Slurm job of this platform job; default the current one)
    #[arg(long)]
    pub attempt: Option<u32>,
    /// A Cosmos-RL role's own logs instead of main.out/main.err: controller, policy or rollout
    #[arg(long, value_parser = parse_role)]
    pub role: Option<Role>,
    /// Only this task of the role (one per node, from 0; default all, or 0 with -f)
    #[arg(long, requires = "role")]
    pub task: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

impl LogsCmd {
    pub fn run(self, settings: Settings) -> Result<i32, Error> {
        let client = Client::new(settings)?;
        let streams: Vec<Stream> = match (self.stdout, self.stderr) {
            (true, _) => vec![Stream::Stdout],
            (_, true) => vec![Stream::Stderr],
            _ => vec![Stream::Stdout, Stream::Stderr],
        };
        if self.follow && self.attempt.is_some() {
            return Err(SpecError::new("attempt", "-f follows the current attempt; drop --attempt").into());
        }
        if self.follow {
            if !(self.interval.is_finite() && self.interval >= 0.2) {
                return Err(SpecError::new("interval", "must be at least 0.2 seconds").into());
            }
            // main.out goes to our stdout and main.err to our stderr, as they arrive.
            let mut print = |c: &Chunk| {
                if self.json {
                    let stream = if c.stream == Stream::Stdout { "stdout" } else { "stderr" };
                    let line = ChunkLine { stream: stream.to_string(), offset: c.offset, text: c.text.clone() };
                    super::output::emit_line(&line);
                } else if c.stream == Stream::Stdout {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(c.text.as_bytes());
                    let _ = out.flush();
                } else {
                    let _ = std::io::stderr().write_all(c.text.as_bytes());
                }
            };
            let interval = Duration::from_secs_f64(self.interval);
            let view = match self.role {
                Some(role) => client.follow_role_logs(
                    &self.job_id,
                    role,
                    self.task.unwrap_or(0),
                    &streams,
                    interval,
                    &mut print,
                )?,
                None => client.follow_logs(&self.job_id, &streams, interval, &mut print)?,
            };
            eprintln!("tao-slurm: job {} is {} ({})", view.job_id, view.status, super::clean(&view.message));
            return Ok(0);
        }
        if let Some(role) = self.role {
            let logs = client.job_role_logs(&self.job_id, role, self.task, self.tail, self.attempt)?;
            if self.json {
                super::output::emit_json(&logs);
                return Ok(0);
            }
            for t in &logs.tasks {
                print_pair(&streams, (&t.stdout_path, &t.stdout), (&t.stderr_path, &t.stderr), true);
            }
            return Ok(0);
        }
        let logs = client.job_logs(&self.job_id, self.tail, self.attempt)?;
        if self.json {
            super::output::emit_json(&logs);
            return Ok(0);
        }
        print_pair(&streams, (&logs.stdout_path, &logs.stdout), (&logs.stderr_path, &logs.stderr), false);
        Ok(0)
    }
}

/// Print the chosen streams of one pair of log files; with both (or `always_named`), under their paths.
fn print_pair(streams: &[Stream], out: (&str, &str), err: (&str, &str), always_named: bool) {
    for (stream, (path, text)) in [(Stream::Stdout, out), (Stream::Stderr, err)] {
        if streams.contains(&stream) {
            if streams.len() > 1 || always_named {
                println!("==> {path} <==");
            }
            print!("{text}");
        }
    }
}

fn parse_role(text: &str) -> Result<Role, String> {
    Role::parse(text).ok_or_else(|| format!("{text:?} is not a role; use controller, policy or rollout"))
}
