//! `tao-slurm mcp`: a Model Context Protocol server over stdio, so that coding agents drive jobs
//! through typed tools instead of parsing CLI output. Built on the official Rust SDK (rmcp); every
//! tool is a thin layer over [`tao_slurm_engine::Client`]. Standard output carries only the protocol; logs go to
//! standard error.

mod args;
mod clients;
mod hints;
pub mod reply;
mod server;
mod tools;
mod wait;

pub use clients::SettingsLoader;
pub use server::{TaoSlurmServer, MUTATING_TOOLS};

use rmcp::ServiceExt;
use tao_slurm_engine::error::Error;

/// Serve MCP on standard input and output until the client closes the connection.
pub fn serve(load_settings: SettingsLoader, read_only: bool) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::RemoteCommand(format!("cannot start the MCP server's runtime: {e}")))?;
    runtime.block_on(async move {
        let server = TaoSlurmServer::new(clients::Clients::new(load_settings, read_only), read_only);
        tracing::info!(read_only, tools = server.tools().len(), "MCP server on stdio");
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Error::RemoteCommand(format!("MCP initialisation failed: {e}")))?;
        running.waiting().await.map_err(|e| Error::RemoteCommand(format!("MCP server stopped: {e}")))?;
        Ok(())
    })
}
