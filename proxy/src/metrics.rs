//! The proxy's metrics, registered in its one registry by [`crate::scrape`] (encoded by
//! `/metrics` on the admin listener): requests and their duration histogram by route and decision, upstream answers by
//! status class and upstream errors, rule reloads, routes, build info, the listeners' connection
//! counts, the upstream addresses, the TLS certificate, the checker's cache and introspection
//! metrics, the JWT validator's, the revocation stream's, and the process metrics.
//!
//! [`ProxyMetrics`] owns the series counted on the request path (families of the
//! `prometheus-client` crate); everything else is read from the state in force at each scrape.
//! The routing built at each reload holds each route's and upstream's series
//! ([`RouteSeries`], [`UpstreamSeries`]): the request path counts without a lookup or a lock, and
//! builds no label set.

use std::sync::OnceLock;
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
    /// Which listener decided: [`PROXY`] (a proxied request) or [`FORWARD_AUTH`] (a check).
    listener: &'static str,
}

/// `listener` label of requests through the proxy listener.
pub const PROXY: &str = "proxy";

/// `listener` label of forward-auth decisions.
pub const FORWARD_AUTH: &str = "forward_auth";

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

/// One route's series, each made at the route's first request of its decision. The routing
/// built at each reload holds one per route ([`ProxyMetrics::route`]): a request counts without
/// looking its series up. A route kept over a reload keeps counting in the same series (the
/// families hold them by label).
#[derive(Debug)]
pub struct RouteSeries {
    route: String,
    requests_family: Family<RouteDecision, Counter>,
    durations_family: Family<RouteDecision, Histogram>,
    requests: PerOutcome<Counter>,
    durations: PerOutcome<Histogram>,
}

impl RouteSeries {
    /// A request of this route was decided `outcome`.
    pub fn request(&self, outcome: Outcome) {
        self.requests[outcome as usize]
            .get_or_init(|| {
                self.requests_family
                    .get_or_create_owned(&self.labels(outcome))
            })
            .inc();
    }

    /// A request of this route decided `outcome` took `took`, head read to answer sent.
    pub fn observe(&self, outcome: Outcome, took: Duration) {
        self.durations[outcome as usize]
            .get_or_init(|| {
                self.durations_family
                    .get_or_create_owned(&self.labels(outcome))
            })
            .observe(took.as_secs_f64());
    }

    fn labels(&self, outcome: Outcome) -> RouteDecision {
        RouteDecision {
            route: self.route.clone(),
            decision: outcome.as_str(),
            listener: PROXY,
        }
    }
}

/// One upstream's series, made (at 0) at its first answer or error; held like [`RouteSeries`].
#[derive(Debug)]
pub struct UpstreamSeries {
    upstream: String,
    classes_family: Family<UpstreamClass, Counter>,
    errors_family: Family<UpstreamLabel, Counter>,
    made: OnceLock<([Counter; CLASSES.len()], Counter)>,
}

impl UpstreamSeries {
    /// The upstream answered with `status`.
    pub fn status(&self, status: u16) {
        let Some(class) = (status / 100).checked_sub(1).filter(|c| *c < 5) else {
            return;
        };
        self.made().0[class as usize].inc();
    }

    /// A connection to the upstream or an exchange with it failed.
    pub fn error(&self) {
        self.made().1.inc();
    }

    fn made(&self) -> &([Counter; CLASSES.len()], Counter) {
        self.made.get_or_init(|| {
            let upstream = || self.upstream.clone();
            let classes = CLASSES.map(|class| {
                let labels = UpstreamClass {
                    upstream: upstream(),
                    class,
                };
                self.classes_family.get_or_create_owned(&labels)
            });
            let errors = UpstreamLabel {
                upstream: upstream(),
            };
            (classes, self.errors_family.get_or_create_owned(&errors))
        })
    }
}

/// The families counted on the request path, and the rule reloads.
pub struct ProxyMetrics {
    requests: Family<RouteDecision, Counter>,
    durations: Family<RouteDecision, Histogram>,
    upstream_responses: Family<UpstreamClass, Counter>,
    upstream_errors: Family<UpstreamLabel, Counter>,
    /// Rule reloads: ok, error.
    reloads: Family<[(&'static str, &'static str); 1], Counter>,
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
            "Requests by route, decision and listener (proxy, forward_auth)",
            self.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's head read to its answer sent, by route, decision and listener",
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

    /// The series of the route named `route` ([`UNMATCHED`] for requests that matched none).
    pub fn route(&self, route: &str) -> RouteSeries {
        RouteSeries {
            route: route.to_owned(),
            requests_family: self.requests.clone(),
            durations_family: self.durations.clone(),
            requests: Default::default(),
            durations: Default::default(),
        }
    }

    /// The series of the upstream named `upstream`.
    pub fn upstream(&self, upstream: &str) -> UpstreamSeries {
        UpstreamSeries {
            upstream: upstream.to_owned(),
            classes_family: self.upstream_responses.clone(),
            errors_family: self.upstream_errors.clone(),
            made: OnceLock::new(),
        }
    }

    /// A forward-auth decision on the route named `route` ([`UNMATCHED`]: none) was `outcome`
    /// and took `took`: counted in the request families with `listener="forward_auth"` (a label
    /// lookup per decision; the decision endpoint is not the proxy's hot path).
    pub fn forward_auth(&self, route: &str, outcome: Outcome, took: Duration) {
        let labels = RouteDecision {
            route: route.to_owned(),
            decision: outcome.as_str(),
            listener: FORWARD_AUTH,
        };
        self.requests.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&[("result", result)]).inc();
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
        let users = m.route("users");
        users.request(Outcome::Unavailable);
        // A reload's new handle counts in the same series.
        m.route("users").request(Outcome::Unavailable);
        users.observe(Outcome::Allow, Duration::from_micros(1500));
        users.observe(Outcome::Allow, Duration::from_secs(20));
        let api = m.upstream("api");
        api.status(204);
        api.status(503);
        api.status(999);
        m.upstream("api").error();
        m.upstream("unused");
        m.reload(false);
        m.forward_auth("users", Outcome::InvalidToken, Duration::from_millis(3));
        let text = text(m);
        let labels = "route=\"users\",decision=\"allow\",listener=\"proxy\"";
        for needle in [
            "# TYPE tokengate_proxy_requests counter\n".to_owned(),
            "tokengate_proxy_requests_total{route=\"users\",decision=\"unavailable\",listener=\"proxy\"} 2\n"
                .to_owned(),
            "tokengate_proxy_requests_total{route=\"users\",decision=\"invalid_token\",listener=\"forward_auth\"} 1\n"
                .to_owned(),
            "tokengate_proxy_request_duration_seconds_count{route=\"users\",decision=\"invalid_token\",listener=\"forward_auth\"} 1\n"
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
        assert!(
            !text.contains("unused"),
            "an upstream's series wait for its first answer"
        );
    }
}
