//! The proxy's own counters and their Prometheus text rendering (with the checker's cache and
//! introspection metrics, malformed and refused introspection answers among them, and the JWT
//! validator's: validations by outcome, JWKS fetches and failures, keys known).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use resource_server::CheckerMetrics;
use resource_server::jwt::JwtMetrics;

use crate::downstream::ListenerGate;

/// The outcome of one request, as a metrics label (each [`resource_server::Denial`] carries its
/// own).
pub use resource_server::Outcome;

/// Route label of requests that matched no route.
pub const UNMATCHED: &str = "_unmatched";

type PerOutcome = [AtomicU64; 7];

/// Counters owned by the proxy. Cheap on the request path: a read lock and an atomic add.
#[derive(Default)]
pub struct ProxyMetrics {
    requests: RwLock<HashMap<String, PerOutcome>>,
    upstream_errors: RwLock<HashMap<String, AtomicU64>>,
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
        out.push_str(&checker.render_prometheus("tokengate_proxy"));
        if let Ok(jwt) = self.jwt.read()
            && let Some(jwt) = jwt.as_ref()
        {
            out.push_str(&jwt.render_prometheus("tokengate_proxy"));
        }
        out
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
}
