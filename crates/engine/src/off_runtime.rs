//! Blocking calls that drive a tokio runtime of their own (PostgreSQL's sync client, the ssh mux
//! client), made from wherever the engine is called: a tokio worker thread included (the service's
//! and MCP's handlers), where such a runtime must not start.

/// Run `f` where it may drive a runtime of its own: in place outside any runtime, through
/// `block_in_place` on a multi-thread runtime, else on a thread of its own.
pub(crate) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Err(_) => f(),
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        Ok(_) => std::thread::scope(|s| s.spawn(f).join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
    }
}
