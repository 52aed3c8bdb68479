//! The proxy's own counters and their Prometheus text rendering (with the checker's cache and
//! introspection metrics, malformed and refused introspection answers among them, and the JWT
//! validator's: validations by outcome, JWKS fetches and failures, keys known), the request
//! duration histogram by route and decision, upstream answers by status class, and build info.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use resource_server::CheckerMetrics;
use resource_server::jwt::JwtMetrics;

use crate::downstream::ListenerGate;

/// The outcome of one request, as a metrics label (each [`resource_server::Denial`] carries its
/// own).
pub use resource_server::Outcome;

/// Route label of requests that matched no route.
pub const UNMATCHED: &str = "_unmatched";

type PerOutcome = [AtomicU64; Outcome::ALL.len()];

/// Upper bounds of the duration histogram's buckets, in seconds (`+Inf` is the count).
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// One histogram: a counter per bucket (not cumulative; summed when rendered), the count and
/// the sum in microseconds.
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; DURATION_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = DURATION_BUCKETS.iter().position(|le| secs <= *le) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }
}

/// Upstream answers by status class: 1xx to 5xx.
type PerClass = [AtomicU64; 5];

/// Counters owned by the proxy. Cheap on the request path: a read lock and an atomic add.
#[derive(Default)]
pub struct ProxyMetrics {
    requests: RwLock<HashMap<String, PerOutcome>>,
    upstream_errors: RwLock<HashMap<String, AtomicU64>>,
    /// Request durations (head read to answer sent) by route, per decision.
    durations: RwLock<HashMap<String, [Histogram; Outcome::ALL.len()]>>,
    upstream_statuses: RwLock<HashMap<String, PerClass>>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    /// The counters of the JWT validator in force, if tokens are validated locally.
    jwt: RwLock<Option<Arc<JwtMetrics>>>,
}

impl ProxyMetrics {
    pub fn request(&self, route: &str, outcome: Outcome) {
        let i = outcome as usize;
        if let Ok(map) = self.requests.read()
            && let Some(counters) = map.get(route)
        {
            counters[i].fetch_add(1, Relaxed);
            return;
        }
        if let Ok(mut map) = self.requests.write() {
            map.entry(route.to_owned()).or_default()[i].fetch_add(1, Relaxed);
        }
    }

    /// A request of `route` decided `outcome` took `took`, head read to answer sent.
    pub fn observe(&self, route: &str, outcome: Outcome, took: Duration) {
        let i = outcome as usize;
        if let Ok(map) = self.durations.read()
            && let Some(h) = map.get(route)
        {
            h[i].observe(took);
            return;
        }
        if let Ok(mut map) = self.durations.write() {
            map.entry(route.to_owned()).or_default()[i].observe(took);
        }
    }

    /// `upstream` answered with `status`.
    pub fn upstream_status(&self, upstream: &str, status: u16) {
        let Some(class) = (status / 100).checked_sub(1).filter(|c| *c < 5) else {
            return;
        };
        let class = class as usize;
        if let Ok(map) = self.upstream_statuses.read()
            && let Some(c) = map.get(upstream)
        {
            c[class].fetch_add(1, Relaxed);
            return;
        }
        if let Ok(mut map) = self.upstream_statuses.write() {
            map.entry(upstream.to_owned()).or_default()[class].fetch_add(1, Relaxed);
        }
    }

    pub fn upstream_error(&self, upstream: &str) {
        if let Ok(map) = self.upstream_errors.read()
            && let Some(c) = map.get(upstream)
        {
            c.fetch_add(1, Relaxed);
            return;
        }
        if let Ok(mut map) = self.upstream_errors.write() {
            map.entry(upstream.to_owned())
                .or_default()
                .fetch_add(1, Relaxed);
        }
    }

    /// Renders `jwt` with the rest from now on (a read lock when it is already the one).
    pub fn track_jwt(&self, jwt: &Arc<JwtMetrics>) {
        if let Ok(current) = self.jwt.read()
            && current.as_ref().is_some_and(|c| Arc::ptr_eq(c, jwt))
        {
            return;
        }
        if let Ok(mut current) = self.jwt.write() {
            *current = Some(jwt.clone());
        }
    }

    pub fn reload(&self, ok: bool) {
        if ok {
            &self.reloads_ok
        } else {
            &self.reloads_failed
        }
        .fetch_add(1, Relaxed);
    }

    /// Prometheus text exposition format, version 0.0.4.
    pub fn render(&self, checker: &CheckerMetrics, routes_loaded: usize) -> String {
        let mut out = String::with_capacity(4096);
        header(
            &mut out,
            "tokengate_proxy_requests_total",
            "counter",
            "Requests by route and decision.",
        );
        if let Ok(map) = self.requests.read() {
            let mut routes: Vec<_> = map.iter().collect();
            routes.sort_by(|a, b| a.0.cmp(b.0));
            for (route, counters) in routes {
                for o in Outcome::ALL {
                    let n = counters[o as usize].load(Relaxed);
                    if n > 0 {
                        let route = escape(route);
                        let _ = writeln!(
                            out,
                            "tokengate_proxy_requests_total{{route=\"{route}\",decision=\"{}\"}} {n}",
                            o.as_str()
                        );
                    }
                }
            }
        }
        self.render_durations(&mut out);
        header(
            &mut out,
            "tokengate_proxy_upstream_responses_total",
            "counter",
            "Upstream answers by upstream and status class.",
        );
        if let Ok(map) = self.upstream_statuses.read() {
            let mut ups: Vec<_> = map.iter().collect();
            ups.sort_by(|a, b| a.0.cmp(b.0));
            for (name, classes) in ups {
                for (i, n) in classes.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "tokengate_proxy_upstream_responses_total{{upstream=\"{}\",class=\"{}xx\"}} {}",
                        escape(name),
                        i + 1,
                        n.load(Relaxed)
                    );
                }
            }
        }
        header(
            &mut out,
            "tokengate_proxy_upstream_errors_total",
            "counter",
            "Failed upstream connections or exchanges.",
        );
        if let Ok(map) = self.upstream_errors.read() {
            let mut ups: Vec<_> = map.iter().collect();
            ups.sort_by(|a, b| a.0.cmp(b.0));
            for (name, n) in ups {
                let _ = writeln!(
                    out,
                    "tokengate_proxy_upstream_errors_total{{upstream=\"{}\"}} {}",
                    escape(name),
                    n.load(Relaxed)
                );
            }
        }
        header(
            &mut out,
            "tokengate_proxy_rule_reloads_total",
            "counter",
            "Rule reloads by result.",
        );
        let _ = writeln!(
            out,
            "tokengate_proxy_rule_reloads_total{{result=\"ok\"}} {}",
            self.reloads_ok.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "tokengate_proxy_rule_reloads_total{{result=\"error\"}} {}",
            self.reloads_failed.load(Relaxed)
        );
        header(
            &mut out,
            "tokengate_proxy_routes",
            "gauge",
            "Routes in the rules in force.",
        );
        let _ = writeln!(out, "tokengate_proxy_routes {routes_loaded}");
        header(
            &mut out,
            "tokengate_proxy_build_info",
            "gauge",
            "The proxy's version (always 1).",
        );
        let _ = writeln!(
            out,
            "tokengate_proxy_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        out.push_str(&checker.render_prometheus("tokengate_proxy"));
        if let Ok(jwt) = self.jwt.read()
            && let Some(jwt) = jwt.as_ref()
        {
            out.push_str(&jwt.render_prometheus("tokengate_proxy"));
        }
        out
    }
}

impl ProxyMetrics {
    fn render_durations(&self, out: &mut String) {
        let name = "tokengate_proxy_request_duration_seconds";
        header(
            out,
            name,
            "histogram",
            "Time from a request's head read to its answer sent, by route and decision.",
        );
        let Ok(map) = self.durations.read() else {
            return;
        };
        let mut routes: Vec<_> = map.iter().collect();
        routes.sort_by(|a, b| a.0.cmp(b.0));
        for (route, per_outcome) in routes {
            let route = escape(route);
            for o in Outcome::ALL {
                let h = &per_outcome[o as usize];
                let count = h.count.load(Relaxed);
                if count == 0 {
                    continue;
                }
                let labels = format!("route=\"{route}\",decision=\"{}\"", o.as_str());
                let mut cumulative = 0;
                for (le, n) in DURATION_BUCKETS.iter().zip(&h.buckets) {
                    cumulative += n.load(Relaxed);
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
                }
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
                let sum = h.sum_micros.load(Relaxed) as f64 / 1e6;
                let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
                let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
            }
        }
    }
}

/// The connection counts of the listeners: open, the cap, refused at the cap, and closed for a
/// request head that did not arrive in time.
pub fn render_listeners(gates: &[Arc<ListenerGate>]) -> String {
    let mut out = String::with_capacity(1024);
    type Read = fn(&ListenerGate) -> u64;
    let series: [(&str, &str, &str, Read); 4] = [
        (
            "tokengate_proxy_connections",
            "gauge",
            "Client connections open, by listener.",
            |g| g.open() as u64,
        ),
        (
            "tokengate_proxy_connections_max",
            "gauge",
            "The cap on client connections open at once, by listener.",
            |g| g.max as u64,
        ),
        (
            "tokengate_proxy_connections_refused_total",
            "counter",
            "Connections refused (503, closed) because the listener was at its cap.",
            ListenerGate::refused,
        ),
        (
            "tokengate_proxy_head_timeouts_total",
            "counter",
            "Connections closed because a request head did not arrive within connections.head_timeout.",
            ListenerGate::head_timeouts,
        ),
    ];
    for (name, kind, help, read) in series {
        header(&mut out, name, kind, help);
        for gate in gates {
            let _ = writeln!(out, "{name}{{listener=\"{}\"}} {}", gate.name, read(gate));
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_requests_and_the_checkers_counters() {
        let m = ProxyMetrics::default();
        m.request("users", Outcome::Unavailable);
        m.request("users", Outcome::Unavailable);
        let checker = CheckerMetrics::default();
        checker.malformed.fetch_add(2, Relaxed);
        checker.errors.fetch_add(2, Relaxed);
        checker.refused.fetch_add(1, Relaxed);
        let text = m.render(&checker, 3);
        for needle in [
            "tokengate_proxy_requests_total{route=\"users\",decision=\"unavailable\"} 2\n",
            "# TYPE tokengate_proxy_introspection_malformed_total counter\ntokengate_proxy_introspection_malformed_total 2\n",
            "# TYPE tokengate_proxy_introspection_refused_total counter\ntokengate_proxy_introspection_refused_total 1\n",
            "\ntokengate_proxy_introspection_errors_total 2\n",
            "\ntokengate_proxy_routes 3\n",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(
            !text.contains("_jwt_"),
            "no JWT metrics without a validator"
        );
        let jwt = Arc::new(JwtMetrics::default());
        jwt.jwks_fetches.fetch_add(4, Relaxed);
        m.track_jwt(&jwt);
        m.track_jwt(&jwt);
        let text = m.render(&checker, 3);
        assert!(
            text.contains("\ntokengate_proxy_jwt_jwks_fetches_total 4\n"),
            "{text}"
        );
    }

    #[test]
    fn renders_durations_statuses_and_build_info() {
        let m = ProxyMetrics::default();
        m.observe("users", Outcome::Allow, Duration::from_micros(1500));
        m.observe("users", Outcome::Allow, Duration::from_secs(20));
        m.upstream_status("api", 204);
        m.upstream_status("api", 503);
        m.upstream_status("api", 999);
        let text = m.render(&CheckerMetrics::default(), 1);
        let labels = "route=\"users\",decision=\"allow\"";
        for needle in [
            "# TYPE tokengate_proxy_request_duration_seconds histogram\n".to_owned(),
            format!("tokengate_proxy_request_duration_seconds_bucket{{{labels},le=\"0.001\"}} 0\n"),
            format!(
                "tokengate_proxy_request_duration_seconds_bucket{{{labels},le=\"0.0025\"}} 1\n"
            ),
            format!("tokengate_proxy_request_duration_seconds_bucket{{{labels},le=\"10\"}} 1\n"),
            format!("tokengate_proxy_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} 2\n"),
            format!("tokengate_proxy_request_duration_seconds_sum{{{labels}}} 20.0015\n"),
            format!("tokengate_proxy_request_duration_seconds_count{{{labels}}} 2\n"),
            "tokengate_proxy_upstream_responses_total{upstream=\"api\",class=\"2xx\"} 1\n"
                .to_owned(),
            "tokengate_proxy_upstream_responses_total{upstream=\"api\",class=\"5xx\"} 1\n"
                .to_owned(),
            "tokengate_proxy_upstream_responses_total{upstream=\"api\",class=\"4xx\"} 0\n"
                .to_owned(),
            format!(
                "tokengate_proxy_build_info{{version=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            ),
        ] {
            assert!(text.contains(&needle), "missing {needle:?} in\n{text}");
        }
    }
}
