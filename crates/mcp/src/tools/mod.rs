//! The tools' work, synchronous and over a [`tao_slurm_engine::Client`]: one module per group of tools. The
//! server runs each on a blocking thread.

pub mod cluster;
pub mod init;
pub mod jobs;
pub mod logs;
pub mod long_training;
pub mod running;
pub mod submit;
