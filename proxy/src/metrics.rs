//! The proxy's metrics, registered in its one registry by [`crate::scrape`] (encoded by
//! `/metrics` on the admin listener): requests and their duration histogram by route and decision, upstream answers by
//! status class and upstream errors, rule reloads, routes, build info, the listeners' connection
//! counts, the upstream addresses, the TLS certificate, the checker's cache and introspection
//! metrics, the JWT validator's, the revocation stream's, and the process metrics.
//!
//! [`ProxyMetrics`] owns the series counted on the request path (families of the
//! `prometheus-client` crate); everything else is read from the state in force at each scrape.
//! The request path finds its route's series by name under a read lock: no label set is built
//! per request.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use resource_server::metrics::Registry;

/// The outcome of one request, as a metrics label (each [`resource_server::Denial`] carries its
/// own).
pub use resource_server::Outcome;

/// Route label of requests that matched no route.
pub const UNMATCHED: &str = "_unmatched";

/// Upper bounds of the duration histogram's buckets, in seconds (`+Inf` is implied).
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Upstream status classes, 1xx to 5xx, as labels.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteDecision {
    route: String,
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamClass {
    upstream: String,
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabel {
    upstream: String,
}

type PerOutcome<M> = [OnceLock<M>; Outcome::ALL.len()];

/// One route's series, made at the first request of each decision.
#[derive(Default)]
struct RouteSeries {
    requests: PerOutcome<Counter>,
    durations: PerOutcome<Histogram>,
}

/// One upstream's series, made (at 0) when it is first seen.
struct UpstreamSeries {
    classes: [Counter; CLASSES.len()],
    errors: Counter,
}

/// The series counted on the request path.
pub struct ProxyMetrics {
    requests: Family<RouteDecision, Counter>,
    durations: Family<RouteDecision, Histogram>,
    upstream_responses: Family<UpstreamClass, Counter>,
    upstream_errors: Family<UpstreamLabel, Counter>,
    /// Rule reloads: ok, error.
    reloads: Family<[(&'static str, &'static str); 1], Counter>,
    routes: RwLock<HashMap<String, RouteSeries>>,
    upstreams: RwLock<HashMap<String, UpstreamSeries>>,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        let histogram: fn() -> Histogram = || Histogram::new(DURATION_BUCKETS);
        let m = ProxyMetrics {
            requests: Family::default(),
            durations: Family::new_with_constructor(histogram),
            upstream_responses: Family::default(),
            upstream_errors: Family::default(),
            reloads: Family::default(),
            routes: RwLock::default(),
            upstreams: RwLock::default(),
        };
        for result in ["ok", "error"] {
            drop(m.reloads.get_or_create(&[("result", result)]));
        }
        m
    }
}

impl ProxyMetrics {
    /// Registers the families (names under `registry`'s prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "requests",
            "Requests by route and decision",
            self.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's head read to its answer sent, by route and decision",
            self.durations.clone(),
        );
        registry.register(
            "upstream_responses",
            "Upstream answers by upstream and status class",
            self.upstream_responses.clone(),
        );
        registry.register(
            "upstream_errors",
            "Failed upstream connections or exchanges",
            self.upstream_errors.clone(),
        );
        registry.register(
            "rule_reloads",
            "Rule reloads by result",
            self.reloads.clone(),
        );
    }

    pub fn request(&self, route: &str, outcome: Outcome) {
        self.route(route, |series| {
            series.requests[outcome as usize]
                .get_or_init(|| self.requests.get_or_create_owned(&labels(route, outcome)))
                .inc();
        });
    }

    /// A request of `route` decided `outcome` took `took`, head read to answer sent.
    pub fn observe(&self, route: &str, outcome: Outcome, took: Duration) {
        self.route(route, |series| {
            series.durations[outcome as usize]
                .get_or_init(|| self.durations.get_or_create_owned(&labels(route, outcome)))
                .observe(took.as_secs_f64());
        });
    }

    /// `upstream` answered with `status`.
    pub fn upstream_status(&self, upstream: &str, status: u16) {
        let Some(class) = (status / 100).checked_sub(1).filter(|c| *c < 5) else {
            return;
        };
        self.upstream(upstream, |series| {
            series.classes[class as usize].inc();
        });
    }

    pub fn upstream_error(&self, upstream: &str) {
        self.upstream(upstream, |series| {
            series.errors.inc();
        });
    }

    pub fn reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&[("result", result)]).inc();
    }

    fn route(&self, name: &str, f: impl FnOnce(&RouteSeries)) {
        series(&self.routes, name, RouteSeries::default, f);
    }

    fn upstream(&self, name: &str, f: impl FnOnce(&UpstreamSeries)) {
        let make = || UpstreamSeries {
            classes: CLASSES.map(|class| {
                self.upstream_responses.get_or_create_owned(&UpstreamClass {
                    upstream: name.to_owned(),
                    class,
                })
            }),
            errors: self.upstream_errors.get_or_create_owned(&UpstreamLabel {
                upstream: name.to_owned(),
            }),
        };
        series(&self.upstreams, name, make, f);
    }
}

fn labels(route: &str, outcome: Outcome) -> RouteDecision {
    RouteDecision {
        route: route.to_owned(),
        decision: outcome.as_str(),
    }
}

/// Runs `f` on `name`'s series, made by `make` the first time (a read lock after that).
fn series<T>(
    map: &RwLock<HashMap<String, T>>,
    name: &str,
    make: impl FnOnce() -> T,
    f: impl FnOnce(&T),
) {
    if let Ok(map) = map.read()
        && let Some(series) = map.get(name)
    {
        return f(series);
    }
    if let Ok(mut map) = map.write() {
        f(map.entry(name.to_owned()).or_insert_with(make));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: ProxyMetrics) -> String {
        let mut registry = Registry::with_prefix("tokengate_proxy");
        m.register(&mut registry);
        resource_server::metrics::encode(&registry)
    }

    #[test]
    fn renders_requests_durations_statuses_and_reloads() {
        let m = ProxyMetrics::default();
        m.request("users", Outcome::Unavailable);
        m.request("users", Outcome::Unavailable);
        m.observe("users", Outcome::Allow, Duration::from_micros(1500));
        m.observe("users", Outcome::Allow, Duration::from_secs(20));
        m.upstream_status("api", 204);
        m.upstream_status("api", 503);
        m.upstream_status("api", 999);
        m.upstream_error("api");
        m.reload(false);
        let text = text(m);
        let labels = "route=\"users\",decision=\"allow\"";
        for needle in [
            "# TYPE tokengate_proxy_requests counter\n".to_owned(),
            "tokengate_proxy_requests_total{route=\"users\",decision=\"unavailable\"} 2\n"
                .to_owned(),
            "# TYPE tokengate_proxy_request_duration_seconds histogram\n".to_owned(),
            format!("tokengate_proxy_request_duration_seconds_bucket{{le=\"0.001\",{labels}}} 0\n"),
            format!(
                "tokengate_proxy_request_duration_seconds_bucket{{le=\"0.0025\",{labels}}} 1\n"
            ),
            format!("tokengate_proxy_request_duration_seconds_bucket{{le=\"10.0\",{labels}}} 1\n"),
            format!("tokengate_proxy_request_duration_seconds_bucket{{le=\"+Inf\",{labels}}} 2\n"),
            format!("tokengate_proxy_request_duration_seconds_sum{{{labels}}} 20.0015\n"),
            format!("tokengate_proxy_request_duration_seconds_count{{{labels}}} 2\n"),
            "tokengate_proxy_upstream_responses_total{upstream=\"api\",class=\"2xx\"} 1\n"
                .to_owned(),
            "tokengate_proxy_upstream_responses_total{upstream=\"api\",class=\"5xx\"} 1\n"
                .to_owned(),
            "tokengate_proxy_upstream_responses_total{upstream=\"api\",class=\"4xx\"} 0\n"
                .to_owned(),
            "tokengate_proxy_upstream_errors_total{upstream=\"api\"} 1\n".to_owned(),
            "tokengate_proxy_rule_reloads_total{result=\"error\"} 1\n".to_owned(),
            "tokengate_proxy_rule_reloads_total{result=\"ok\"} 0\n".to_owned(),
        ] {
            assert!(text.contains(&needle), "missing {needle:?} in\n{text}");
        }
    }
}
