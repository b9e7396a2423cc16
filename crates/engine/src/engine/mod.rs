//! The I/O shell around the pure core: each operation builds one remote script (pure), runs it in one
//! round trip, parses the answer (pure) and records the outcome in the store.

pub mod cancel;
pub mod cluster;
pub mod credentials;
pub mod cycle;
pub mod depend;
pub mod files;
pub mod gpu;
pub mod group_commit;
pub mod known_facts;
pub mod image;
pub mod in_flight;
pub mod inspect;
pub mod logs;
pub mod notify;
pub mod pause;
pub mod preflight;
pub mod redact;
pub mod refresh;
pub mod retry;
pub mod secrets;
pub mod submit;
pub mod sweep;

#[cfg(test)]
mod tests;
