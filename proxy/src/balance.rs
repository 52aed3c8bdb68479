//! Several addresses per upstream, through Pingora's own `pingora-load-balancing`: a [`Pool`] per
//! upstream holds its addresses (DNS names resolved to every address they have, at start, on
//! reload and every `resolve_interval`), picks one per request (weighted round robin, or least
//! connections per weight), and leaves out addresses that active health checks find down or
//! that failed in a row (passive ejection: refused connections, and the statuses configured,
//! counted only on requests that passed the token check). When every address is down or
//! ejected, they are all tried anyway, in turn.
//! The background loops (health checks, re-resolution) are started and stopped by
//! [`crate::background`] for the pools in force only.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::lb::discovery::ServiceDiscovery;
use pingora::lb::health_check::{
    HealthCheck as Check, HealthObserve, HttpHealthCheck, TcpHealthCheck,
};
use pingora::lb::selection::{BackendIter, BackendSelection, RoundRobin};
use pingora::lb::{Backend, Backends, LoadBalancer};
use pingora::prelude::HttpPeer;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::server::ShutdownWatch;

use crate::config::{Balance, HealthCheck, Upstream, UpstreamAddr};
use resource_server::metrics::Scrape;

/// Streams the proxy opens at once on one HTTP/2 connection to an upstream.
pub const H2_UPSTREAM_STREAMS: usize = 100;
/// Bound on the candidates one selection looks at.
const MAX_ITERATIONS: usize = 256;

/// The Pingora peer for one address of `up`: TLS (SNI, roots, verification), HTTP/2 by ALPN or
/// prior knowledge, timeouts. Used by requests and by HTTP health checks alike.
pub fn http_peer(up: &Upstream, addr: SocketAddr) -> HttpPeer {
    let mut peer = match &up.tls {
        Some(tls) => {
            let mut peer = HttpPeer::new(addr, true, tls.sni.clone());
            peer.options.verify_cert = tls.verify;
            peer.options.verify_hostname = tls.verify;
            peer.options.ca = tls.ca.clone();
            peer.group_key = tls.pool_key();
            peer.client_cert_key = tls.client.as_ref().map(|(_, pair)| pair.clone());
            // ALPN h2 then http/1.1: gRPC servers get HTTP/2, the others what they speak.
            peer.options.set_http_version(2, 1);
            peer.options.max_h2_streams = H2_UPSTREAM_STREAMS;
            peer
        }
        None => HttpPeer::new(addr, false, String::new()),
    };
    if up.h2c {
        // HTTP/2 with prior knowledge (gRPC servers), streams multiplexed on a connection.
        peer.options.set_http_version(2, 2);
        peer.options.max_h2_streams = H2_UPSTREAM_STREAMS;
    }
    peer.options.connection_timeout = Some(up.connect_timeout);
    peer.options.read_timeout = up.read_timeout;
    peer
}

/// What the proxy knows of one address: requests in flight, failures in a row, and until when
/// it is ejected. Kept in each [`Backend`]'s extensions.
#[derive(Debug, Default)]
pub struct AddressStats {
    in_flight: AtomicUsize,
    failures: AtomicU32,
    /// Milliseconds since [`epoch`] until which the address is left out; 0: not ejected.
    ejected_until: AtomicU64,
    ejections: AtomicU64,
}

impl AddressStats {
    fn ejected(&self, now: u64) -> bool {
        self.ejected_until.load(Relaxed) > now
    }
}

/// One request's use of an address, counted in flight until dropped.
#[derive(Debug)]
pub struct Lease(Arc<AddressStats>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// One upstream's addresses and how they are picked.
pub struct Pool {
    pub upstream: Arc<Upstream>,
    lb: Selector,
    /// The only address, when the upstream has one IP address and no health check: picked
    /// without asking the balancer.
    single: Option<Backend>,
    stats: Arc<StatsTable>,
    /// The turn of [`Pool::any_untried`], when no address is up.
    fallback_turn: AtomicUsize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("upstream", &self.upstream.name)
            .field("addresses", &self.addresses())
            .finish()
    }
}

/// The upstream's settings, as on [`Upstream`].
impl Deref for Pool {
    type Target = Upstream;

    fn deref(&self) -> &Upstream {
        &self.upstream
    }
}

impl Pool {
    /// The pool of `upstream`, its names resolved now (blocking: call it off the async
    /// runtime's workers). A name that does not resolve is logged and tried again later.
    pub fn new(upstream: Arc<Upstream>) -> Pool {
        let stats = Arc::new(StatsTable::default());
        let resolve = Resolve::new(&upstream, stats.clone());
        resolve.seed_blocking();
        let has_names = resolve.has_names();
        let mut backends = Backends::new(Box::new(resolve));
        if let Some(hc) = &upstream.health_check {
            backends.set_health_check(health_check(&upstream, hc, stats.clone()));
        }
        let health = upstream.health_check.as_ref().map(|h| h.interval);
        let update = has_names.then_some(upstream.resolve_interval);
        let lb = Selector::new(upstream.balance, backends, health, update);
        let single = match (upstream.addresses.as_slice(), &upstream.health_check) {
            ([UpstreamAddr::Socket(_)], None) => lb.current().iter().next().cloned(),
            _ => None,
        };
        Pool {
            upstream,
            lb,
            single,
            stats,
            fallback_turn: AtomicUsize::new(0),
        }
    }

    /// Whether the pool has background work: health checks, or names to resolve again.
    pub fn has_background(&self) -> bool {
        self.upstream.health_check.is_some()
            || self
                .upstream
                .addresses
                .iter()
                .any(|a| matches!(a, UpstreamAddr::Name { .. }))
    }

    /// Runs the health checks and re-resolution until `stop` says true.
    pub async fn run(&self, stop: ShutdownWatch) {
        self.lb.run(stop).await;
    }

    /// The addresses in force now.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.lb.current().iter().filter_map(inet).collect()
    }

    /// An address for a request, none of `tried`: one the health checks find up and not
    /// ejected, by the pool's policy; when there is none, any other, in turn (every address
    /// down still gets tried rather than answering 502 unasked, and the traffic stays spread).
    pub fn select(&self, tried: &[SocketAddr]) -> Option<Backend> {
        let untried = |b: &Backend| inet(b).is_some_and(|a| !tried.contains(&a));
        if let Some(only) = &self.single {
            return untried(only).then(|| only.clone());
        }
        let now = now_ms();
        self.lb
            .select_with(|b, healthy| {
                healthy && untried(b) && stats_of(b).is_none_or(|s| !s.ejected(now))
            })
            .or_else(|| self.any_untried(untried))
    }

    /// One of the addresses `untried` accepts, round robin over them all. Not the balancer's
    /// own fallback: a selection that accepts nothing advances its round-robin counter by the
    /// same even number of steps every time, so its next pick was always the same address.
    fn any_untried(&self, untried: impl Fn(&Backend) -> bool) -> Option<Backend> {
        let current = self.lb.current();
        let candidates: Vec<&Backend> = current.iter().filter(|b| untried(b)).collect();
        if candidates.is_empty() {
            return None;
        }
        let turn = self.fallback_turn.fetch_add(1, Relaxed);
        Some(candidates[turn % candidates.len()].clone())
    }

    /// Counts a request to `backend` in flight until the lease is dropped.
    pub fn lease(&self, backend: &Backend) -> Option<Lease> {
        let stats = stats_of(backend)?.clone();
        stats.in_flight.fetch_add(1, Relaxed);
        Some(Lease(stats))
    }

    /// A connection to `addr` failed: see [`Pool::failed`].
    pub fn connect_failed(&self, addr: SocketAddr) {
        self.failed(addr, "failed connections");
    }

    /// `addr` answered with `status`: a failure when `eject.statuses` lists it, else the end
    /// of its run of failures. The gateway reports only the answers to requests that passed
    /// the token check: an anonymous client (a public route) cannot eject an address by asking
    /// for what fails, nor keep one in by asking for what succeeds.
    pub fn responded(&self, addr: SocketAddr, status: u16) {
        if self.upstream.eject.statuses.contains(&status) {
            self.failed(addr, "failed answers");
        } else {
            self.succeeded(addr);
        }
    }

    /// After `eject.after_failures` failures in a row, `addr` is ejected for `eject.duration`.
    /// Failures of requests still on their way when it was ejected are not counted: once the
    /// period is over, it takes `after_failures` new ones to eject it again.
    fn failed(&self, addr: SocketAddr, what: &'static str) {
        let Some(stats) = self.stats.get(addr) else {
            return;
        };
        if stats.ejected(now_ms()) {
            return;
        }
        let failures = stats.failures.fetch_add(1, Relaxed) + 1;
        let eject = &self.upstream.eject;
        if failures >= eject.after_failures {
            stats.failures.store(0, Relaxed);
            let until = now_ms() + eject.duration.as_millis() as u64;
            if stats.ejected_until.swap(until, Relaxed) <= now_ms() {
                stats.ejections.fetch_add(1, Relaxed);
                tracing::warn!(
                    upstream = %self.upstream.name,
                    address = %addr,
                    failures,
                    seconds = eject.duration.as_secs_f64(),
                    "upstream address ejected after {what}"
                );
            }
        }
    }

    /// A connection to `addr` succeeded: its run of failures ends, unless answers count too
    /// (then the answer decides, [`Pool::responded`]).
    pub fn connected(&self, addr: SocketAddr) {
        if self.upstream.eject.statuses.is_empty() {
            self.succeeded(addr);
        }
    }

    fn succeeded(&self, addr: SocketAddr) {
        if let Some(stats) = self.stats.get(addr)
            && stats.failures.load(Relaxed) != 0
        {
            stats.failures.store(0, Relaxed);
        }
    }

    /// Whether an address other than `tried` remains.
    pub fn has_untried(&self, tried: &[SocketAddr]) -> bool {
        self.lb
            .current()
            .iter()
            .filter_map(inet)
            .any(|a| !tried.contains(&a))
    }

    /// This pool's addresses now: `(labels, up, in flight, ejections)`.
    fn address_figures(&self) -> Vec<(AddressLabels, i64, i64, u64)> {
        let now = now_ms();
        let name = &self.upstream.name;
        self.lb
            .current()
            .iter()
            .filter_map(|backend| {
                let (addr, stats) = (inet(backend)?, stats_of(backend)?);
                let up = self.lb.ready(backend) && !stats.ejected(now);
                let labels = [("upstream", name.clone()), ("address", addr.to_string())];
                let in_flight = stats.in_flight.load(Relaxed) as i64;
                Some((
                    labels,
                    i64::from(up),
                    in_flight,
                    stats.ejections.load(Relaxed),
                ))
            })
            .collect()
    }
}

type AddressLabels = [(&'static str, String); 2];

/// Writes the addresses of `pools` and how many background loops run (`loops`).
pub fn collect<'a>(
    pools: impl Iterator<Item = &'a Arc<Pool>>,
    loops: usize,
    s: &mut Scrape,
) -> std::fmt::Result {
    let rows: Vec<_> = pools.flat_map(|p| p.address_figures()).collect();
    s.gauges(
        "upstream_address_up",
        "Whether an upstream address takes traffic (0: down by its health checks, or ejected)",
        rows.iter().map(|r| (r.0.clone(), r.1)),
    )?;
    s.gauges(
        "upstream_address_in_flight",
        "Requests in flight to an upstream address",
        rows.iter().map(|r| (r.0.clone(), r.2)),
    )?;
    s.counters(
        "upstream_address_ejections",
        "Times an upstream address was ejected after failures in a row",
        rows.iter().map(|r| (r.0.clone(), r.3)),
    )?;
    s.gauge(
        "upstream_background_loops",
        "Health-check and DNS loops running (one per upstream that has them)",
        loops,
    )
}

/// The balancer of either policy.
enum Selector {
    RoundRobin(LoadBalancer<RoundRobin>),
    Least(LoadBalancer<LeastConnections>),
}

impl Selector {
    fn new(
        balance: Balance,
        backends: Backends,
        health: Option<Duration>,
        update: Option<Duration>,
    ) -> Selector {
        let selector = match balance {
            Balance::RoundRobin => Selector::RoundRobin(balancer(backends, health, update)),
            Balance::LeastConnections => Selector::Least(balancer(backends, health, update)),
        };
        // The discovery answers at once the first time (addresses resolved in Pool::new).
        let updated = match &selector {
            Selector::RoundRobin(lb) => poll_once(lb.update()),
            Selector::Least(lb) => poll_once(lb.update()),
        };
        if !matches!(updated, Some(Ok(()))) {
            tracing::error!("the upstream's first address list was not taken");
        }
        selector
    }

    fn select_with(&self, accept: impl Fn(&Backend, bool) -> bool) -> Option<Backend> {
        match self {
            Selector::RoundRobin(lb) => lb.select_with(b"", MAX_ITERATIONS, accept),
            Selector::Least(lb) => lb.select_with(b"", MAX_ITERATIONS, accept),
        }
    }

    fn current(&self) -> Arc<BTreeSet<Backend>> {
        match self {
            Selector::RoundRobin(lb) => lb.backends().get_backend(),
            Selector::Least(lb) => lb.backends().get_backend(),
        }
    }

    fn ready(&self, backend: &Backend) -> bool {
        match self {
            Selector::RoundRobin(lb) => lb.backends().ready(backend),
            Selector::Least(lb) => lb.backends().ready(backend),
        }
    }

    async fn run(&self, stop: ShutdownWatch) {
        match self {
            Selector::RoundRobin(lb) => lb.run(stop, None).await,
            Selector::Least(lb) => lb.run(stop, None).await,
        }
    }
}

/// A balancer over `backends` checking health every `health` and running discovery every
/// `update` (`None`: once).
fn balancer<S>(
    backends: Backends,
    health: Option<Duration>,
    update: Option<Duration>,
) -> LoadBalancer<S>
where
    S: BackendSelection + 'static,
    S::Iter: BackendIter,
{
    let mut lb = LoadBalancer::from_backends(backends);
    lb.health_check_frequency = health;
    lb.update_frequency = update;
    lb.parallel_health_check = true;
    lb
}

/// Least connections over this proxy's requests in flight, per weight (nginx's `least_conn`):
/// the address with the fewest per unit of weight first, ties in turn; then the others by load,
/// for when the first is down.
pub struct LeastConnections {
    backends: Box<[Backend]>,
    next: AtomicUsize,
}

impl BackendSelection for LeastConnections {
    type Iter = LeastIter;
    type Config = ();

    fn build(backends: &BTreeSet<Backend>) -> Self {
        LeastConnections {
            backends: backends.iter().cloned().collect(),
            next: AtomicUsize::new(0),
        }
    }

    fn iter(self: &Arc<Self>, _key: &[u8]) -> LeastIter {
        let n = self.backends.len();
        let start = if n == 0 {
            0
        } else {
            self.next.fetch_add(1, Relaxed) % n
        };
        let mut order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        // Fewest in flight per weight first (in_flight / weight, compared crosswise). Stable:
        // equal loads keep the rotation.
        let load = |i: usize| {
            let b = &self.backends[i];
            let in_flight = stats_of(b).map_or(0, |s| s.in_flight.load(Relaxed));
            (in_flight, b.weight.max(1))
        };
        order.sort_by(|&a, &b| {
            let ((fa, wa), (fb, wb)) = (load(a), load(b));
            (fa * wb).cmp(&(fb * wa))
        });
        LeastIter {
            selection: self.clone(),
            order,
            at: 0,
        }
    }
}

/// See [`LeastConnections`].
pub struct LeastIter {
    selection: Arc<LeastConnections>,
    order: Vec<usize>,
    at: usize,
}

impl BackendIter for LeastIter {
    fn next(&mut self) -> Option<&Backend> {
        let i = *self.order.get(self.at)?;
        self.at += 1;
        self.selection.backends.get(i)
    }
}

/// Each address's [`AddressStats`], kept across re-resolutions.
#[derive(Default)]
struct StatsTable(Mutex<HashMap<SocketAddr, Arc<AddressStats>>>);

impl StatsTable {
    fn get(&self, addr: SocketAddr) -> Option<Arc<AddressStats>> {
        self.lock().get(&addr).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Arc<AddressStats>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backends of `addrs` (with their weights; an address listed twice, by a name and by
    /// itself, counts once, with its first weight), each with its stats; addresses no longer
    /// listed are forgotten.
    fn backends(&self, addrs: &[(SocketAddr, usize)]) -> BTreeSet<Backend> {
        let mut table = self.lock();
        table.retain(|a, _| addrs.iter().any(|(b, _)| a == b));
        let mut seen = Vec::with_capacity(addrs.len());
        addrs
            .iter()
            .filter(|(a, _)| {
                let first = !seen.contains(a);
                seen.push(*a);
                first
            })
            .map(|&(a, weight)| {
                let stats = table.entry(a).or_default().clone();
                let mut backend = Backend {
                    addr: PeerAddr::Inet(a),
                    weight,
                    ext: Default::default(),
                };
                backend.ext.insert(stats);
                backend
            })
            .collect()
    }
}

/// The upstream's addresses as Pingora's service discovery: IP addresses as they are, names
/// resolved (a name that fails keeps its last addresses).
struct Resolve {
    upstream: String,
    addrs: Vec<UpstreamAddr>,
    /// The weight of each entry of `addrs`.
    weights: Vec<usize>,
    stats: Arc<StatsTable>,
    /// What the first discovery answers (resolved in [`Pool::new`]).
    seed: Mutex<Option<Vec<(SocketAddr, usize)>>>,
    /// Per entry of `addrs`: its last addresses and whether its lookups fail.
    names: Mutex<Vec<(Vec<SocketAddr>, bool)>>,
}

impl Resolve {
    fn new(up: &Upstream, stats: Arc<StatsTable>) -> Resolve {
        Resolve {
            upstream: up.name.clone(),
            addrs: up.addresses.clone(),
            weights: up.weights.clone(),
            stats,
            seed: Mutex::new(None),
            names: Mutex::new(vec![(Vec::new(), false); up.addresses.len()]),
        }
    }

    fn has_names(&self) -> bool {
        self.addrs
            .iter()
            .any(|a| matches!(a, UpstreamAddr::Name { .. }))
    }

    /// Resolves every name now, blocking, for the first discovery.
    fn seed_blocking(&self) {
        let mut out = Vec::new();
        for (i, a) in self.addrs.iter().enumerate() {
            let weight = self.weight(i);
            match a {
                UpstreamAddr::Socket(s) => out.push((*s, weight)),
                UpstreamAddr::Name { host, port } => {
                    let got = (host.as_str(), *port)
                        .to_socket_addrs()
                        .map(|it| it.collect::<Vec<_>>());
                    out.extend(self.remember(i, a, got).into_iter().map(|s| (s, weight)));
                }
            }
        }
        *self.seed.lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
    }

    fn weight(&self, i: usize) -> usize {
        self.weights.get(i).copied().unwrap_or(1)
    }

    /// Records a lookup's answer for entry `i`; the addresses it stands for now.
    fn remember(
        &self,
        i: usize,
        name: &UpstreamAddr,
        got: std::io::Result<Vec<SocketAddr>>,
    ) -> Vec<SocketAddr> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let (last, failing) = &mut names[i];
        match got {
            Ok(mut addrs) if !addrs.is_empty() => {
                addrs.sort_unstable();
                addrs.dedup();
                if *last != addrs {
                    tracing::info!(upstream = %self.upstream, %name, addresses = ?addrs, "upstream name resolved");
                }
                *failing = false;
                *last = addrs.clone();
                addrs
            }
            other => {
                if !*failing {
                    let error = match other {
                        Err(e) => e.to_string(),
                        Ok(_) => "no address".to_owned(),
                    };
                    tracing::warn!(
                        upstream = %self.upstream,
                        %name,
                        %error,
                        kept = ?last,
                        "cannot resolve an upstream name; its last addresses stay (tried again every resolve_interval)"
                    );
                }
                *failing = true;
                last.clone()
            }
        }
    }
}

#[async_trait]
impl ServiceDiscovery for Resolve {
    async fn discover(&self) -> pingora::Result<(BTreeSet<Backend>, HashMap<u64, bool>)> {
        let seed = self.seed.lock().unwrap_or_else(|p| p.into_inner()).take();
        let addrs = match seed {
            Some(addrs) => addrs,
            None => {
                let mut out = Vec::new();
                for (i, a) in self.addrs.iter().enumerate() {
                    let weight = self.weight(i);
                    match a {
                        UpstreamAddr::Socket(s) => out.push((*s, weight)),
                        UpstreamAddr::Name { host, port } => {
                            let got = tokio::net::lookup_host((host.as_str(), *port))
                                .await
                                .map(|it| it.collect::<Vec<_>>());
                            out.extend(self.remember(i, a, got).into_iter().map(|s| (s, weight)));
                        }
                    }
                }
                out
            }
        };
        Ok((self.stats.backends(&addrs), HashMap::new()))
    }
}

/// Logs health changes, and lets an address found healthy again back in at once.
struct Observer {
    upstream: String,
    stats: Arc<StatsTable>,
}

#[async_trait]
impl HealthObserve for Observer {
    async fn observe(&self, target: &Backend, healthy: bool) {
        let Some(addr) = inet(target) else { return };
        if healthy {
            if let Some(stats) = self.stats.get(addr) {
                stats.ejected_until.store(0, Relaxed);
                stats.failures.store(0, Relaxed);
            }
            tracing::info!(upstream = %self.upstream, address = %addr, "upstream address healthy again");
        } else {
            tracing::warn!(upstream = %self.upstream, address = %addr, "upstream address failed its health checks");
        }
    }
}

/// The active check of `hc`: a TCP connect (and the TLS handshake for a TLS upstream), or an
/// HTTP GET of `path` through the same peer settings as requests.
fn health_check(
    up: &Upstream,
    hc: &HealthCheck,
    stats: Arc<StatsTable>,
) -> Box<dyn Check + Send + Sync> {
    let observer = Box::new(Observer {
        upstream: up.name.clone(),
        stats,
    });
    let placeholder = SocketAddr::from(([0, 0, 0, 0], 1));
    match &hc.path {
        None => {
            let mut check = TcpHealthCheck::default();
            check.consecutive_success = hc.healthy_after;
            check.consecutive_failure = hc.unhealthy_after;
            let peer = http_peer(up, placeholder);
            check.peer_template.sni = peer.sni.clone();
            check.peer_template.options = peer.options.clone();
            check.peer_template.options.connection_timeout = Some(hc.timeout);
            check.health_changed_callback = Some(observer);
            Box::new(check)
        }
        Some(path) => {
            let host = match &up.host {
                Some(h) => h.to_str().unwrap_or_default().to_owned(),
                None => up.addresses[0].to_string(),
            };
            let mut check = HttpHealthCheck::new(&host, up.tls.is_some());
            check.consecutive_success = hc.healthy_after;
            check.consecutive_failure = hc.unhealthy_after;
            check.peer_template = http_peer(up, placeholder);
            check.peer_template.options.connection_timeout = Some(hc.timeout);
            check.peer_template.options.read_timeout = Some(hc.timeout);
            if let Ok(mut req) = pingora::http::RequestHeader::build("GET", path.as_bytes(), None) {
                let _ = req.insert_header(http::header::HOST, host.as_str());
                if let Some(secret) = &up.proxy_secret {
                    let _ = req.insert_header(resource_server::PROXY_SECRET_HEADER, secret.clone());
                }
                check.req = req;
            }
            check.health_changed_callback = Some(observer);
            Box::new(check)
        }
    }
}

fn inet(b: &Backend) -> Option<SocketAddr> {
    b.addr.as_inet().copied()
}

fn stats_of(b: &Backend) -> Option<&Arc<AddressStats>> {
    b.ext.get::<Arc<AddressStats>>()
}

/// Milliseconds since the first call (a monotonic clock for ejection deadlines; never 0).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Polls `f` once: its output if it was ready at once.
fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(addr: &str, in_flight: usize) -> Backend {
        weighted(addr, in_flight, 1)
    }

    fn weighted(addr: &str, in_flight: usize, weight: usize) -> Backend {
        let mut b = Backend::new_with_weight(addr, weight).unwrap();
        let stats = Arc::new(AddressStats::default());
        stats.in_flight.store(in_flight, Relaxed);
        b.ext.insert(stats);
        b
    }

    #[test]
    fn least_connections_puts_the_least_loaded_first_and_rotates_ties() {
        let set: BTreeSet<Backend> = [
            backend("10.0.0.1:80", 3),
            backend("10.0.0.2:80", 0),
            backend("10.0.0.3:80", 0),
        ]
        .into_iter()
        .collect();
        let lc = Arc::new(LeastConnections::build(&set));
        let mut firsts = Vec::new();
        for _ in 0..4 {
            let mut it = lc.iter(b"");
            let order: Vec<String> =
                std::iter::from_fn(|| it.next().map(|b| b.addr.to_string())).collect();
            assert_eq!(order.len(), 3);
            assert_eq!(order[2], "10.0.0.1:80", "the busy one last: {order:?}");
            firsts.push(order[0].clone());
        }
        assert!(firsts.contains(&"10.0.0.2:80".to_owned()));
        assert!(firsts.contains(&"10.0.0.3:80".to_owned()));
    }

    #[test]
    fn least_connections_counts_per_weight() {
        // 2 in flight on weight 3 is less loaded than 1 on weight 1.
        let set: BTreeSet<Backend> = [weighted("10.0.0.1:80", 2, 3), weighted("10.0.0.2:80", 1, 1)]
            .into_iter()
            .collect();
        let lc = Arc::new(LeastConnections::build(&set));
        for _ in 0..3 {
            assert_eq!(lc.iter(b"").next().unwrap().addr.to_string(), "10.0.0.1:80");
        }
    }
}
