//! The proxy's one metrics registry, encoded by `/metrics` on the admin listener: the families
//! of [`crate::metrics::ProxyMetrics`], build info, the process metrics, and what the state in
//! force holds (routes, listeners, upstream addresses, the certificate, the checker's, JWT
//! validator's and revocation stream's metrics), read at each scrape.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use resource_server::metrics::{Collect, Registry, Scrape};

use crate::downstream::ListenerGate;
use crate::state::SharedState;

/// The proxy's registry: its own families and build info under `tokengate_proxy_`, what the
/// state in force holds (read at each scrape), and the process metrics.
pub fn registry(shared: &SharedState) -> Registry {
    let mut root = Registry::default();
    resource_server::process::register(&mut root);
    let proxy = root.sub_registry_with_prefix("tokengate_proxy");
    shared.metrics.register(proxy);
    resource_server::metrics::register_build_info(
        proxy,
        "The proxy's version (always 1)",
        env!("CARGO_PKG_VERSION"),
    );
    let shared = shared.clone();
    proxy.register_collector(Box::new(Collect(move |s: &mut Scrape| {
        collect_state(&shared, s)
    })));
    root
}

/// What the state in force holds: routes, listeners, upstream addresses, the certificate, and
/// the checker's, JWT validator's and revocation stream's metrics.
fn collect_state(shared: &SharedState, s: &mut Scrape) -> std::fmt::Result {
    let routing = shared.routing();
    s.gauge(
        "routes",
        "Routes in the rules in force",
        routing.gate.rules().routes().len(),
    )?;
    let mut listeners = shared.listeners.to_vec();
    listeners.extend(shared.forward_auth.clone());
    collect_listeners(&listeners, s)?;
    crate::balance::collect(
        routing.upstreams.values(),
        shared.balance_loops.load(Relaxed),
        s,
    )?;
    if let Some(tls) = &shared.tls {
        tls.collect("proxy", s)?;
    }
    let check = routing.gate.check();
    match check.introspection() {
        Some(checker) => checker.collect(s)?,
        // The families stay, at zero, without introspection.
        None => resource_server::CheckerMetrics::default().collect(s)?,
    }
    if let Some(jwt) = check.jwt() {
        jwt.metrics().collect(s)?;
    }
    if let Some(r) = routing.gate.revocation() {
        r.revoked().collect(s)?;
    }
    Ok(())
}

/// The connection counts of the listeners: open, the cap, refused at the cap, closed for a
/// request head that did not arrive in time, a failed TLS handshake, a stalled HTTP/2 body.
fn collect_listeners(gates: &[Arc<ListenerGate>], s: &mut Scrape) -> std::fmt::Result {
    let by_listener = |read: fn(&ListenerGate) -> u64| {
        gates.iter().map(move |g| ([("listener", g.name)], read(g)))
    };
    s.gauges(
        "connections",
        "Client connections open, by listener",
        by_listener(|g| g.open() as u64),
    )?;
    s.gauges(
        "connections_max",
        "The cap on client connections open at once, by listener",
        by_listener(|g| g.max as u64),
    )?;
    s.counters(
        "connections_refused",
        "Connections refused (503, closed) because the listener was at its cap",
        by_listener(ListenerGate::refused),
    )?;
    s.counters(
        "head_timeouts",
        "Connections closed because a request head did not arrive within connections.head_timeout",
        by_listener(ListenerGate::head_timeouts),
    )?;
    s.counters(
        "tls_handshake_failures",
        "Connections closed because their TLS handshake failed or took longer than connections.head_timeout",
        by_listener(ListenerGate::tls_failures),
    )?;
    s.counters(
        "connections_evicted",
        "Connections waiting for their client closed to let a new one in at the cap (admin listener)",
        by_listener(ListenerGate::evicted),
    )?;
    s.counters(
        "h2_body_timeouts",
        "HTTP/2 connections closed because a request body stopped for connections.body_idle_timeout",
        by_listener(|g| g.h2.body_timeouts()),
    )?;
    s.counters(
        "h2_streams_refused",
        "HTTP/2 streams answered 503 because connections.max streams were being served",
        by_listener(|g| g.h2.streams_refused()),
    )
}
