//! Per operation, its pure parts: the remote script it sends, the parser of that script's output, and
//! the decision it takes from what it learned. The engine runs the script and records the decision.

pub mod cancel;
pub mod cluster;
pub mod credentials;
pub mod depend;
pub mod failure;
pub mod files;
pub mod init;
pub mod inspect;
pub mod job_file;
pub mod logs;
pub mod pause;
pub mod refresh;
pub mod results;
pub mod running;
pub mod secrets;
pub mod submit;
pub mod submit_batch;
pub mod sweep;
pub mod template;
pub mod workdir;
