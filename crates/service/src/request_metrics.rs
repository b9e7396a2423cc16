//! What the service observes of its own requests (their latency by route template, those in
//! flight), kept beside the state; `metrics.rs` serves it with the figures read at scrape time.

use prometheus::{HistogramOpts, HistogramVec, Registry};

/// What the service observes itself (the rest is read at scrape time).
pub struct Metrics {
    pub(super) registry: Registry,
    pub(super) latency: HistogramVec,
    pub(super) in_flight: prometheus::IntGauge,
}

/// Request latency buckets, seconds: cache reads take microseconds, cluster round trips seconds.
const LATENCY_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

impl Default for Metrics {
    fn default() -> Metrics {
        let registry = Registry::new();
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "tao_slurm_http_request_duration_seconds",
                "Time to answer an HTTP request (to its headers, for streams), by route template",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["method", "route", "status"],
        )
        .expect("a valid histogram");
        registry.register(Box::new(latency.clone())).expect("registered once");
        let in_flight = prometheus::IntGauge::new(
            "tao_slurm_http_requests_in_flight",
            "Requests being answered now (a stopping service finishes these)",
        )
        .expect("a valid gauge");
        registry.register(Box::new(in_flight.clone())).expect("registered once");
        Metrics { registry, latency, in_flight }
    }
}
