//! State shared by the proxy, the admin listener and the reloader: the gate and the upstreams in
//! force (swapped as one on reload) and the metrics.

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::collections::HashMap;

use resource_server::Gate;
use resource_server::access_log::AccessLog;
use tokio::sync::Notify;

use crate::app_probes::AppProbes;
use crate::balance::Pool;
use crate::config::{ConfigError, ProxyConfig, reload_config};
use crate::downstream::ListenerGate;
use crate::drain::Drain;
use crate::h2_conn::H2Watch;
use crate::metrics::{ProxyMetrics, RouteSeries, UNMATCHED, UpstreamSeries};
use crate::tls::CertStore;

/// How recently the authorization server must have answered for `/readyz` to say 200.
pub const READY_WINDOW: Duration = Duration::from_secs(30);

/// The gate and the upstreams its routes name, each a [`Pool`] of addresses: replaced as one on
/// reload.
#[derive(Debug)]
pub struct Routing {
    pub gate: Gate,
    pub upstreams: HashMap<String, Arc<Pool>>,
    /// Each route's series and upstream, in file order (as `gate.rules().routes()`).
    pub routes: Vec<RouteTarget>,
    /// The series of requests that matched no route.
    pub unmatched: RouteSeries,
}

/// What a route's requests are counted in and sent to: looked up once per reload, not per
/// request.
#[derive(Debug)]
pub struct RouteTarget {
    pub series: RouteSeries,
    /// The route's upstream and its series; `None`: the route names no known upstream.
    pub upstream: Option<(Arc<Pool>, Arc<UpstreamSeries>)>,
}

impl Routing {
    /// The series of the route at `index` (its position in the file); `None`: the unmatched
    /// series.
    pub fn series(&self, index: Option<usize>) -> &RouteSeries {
        index
            .and_then(|i| self.routes.get(i))
            .map_or(&self.unmatched, |t| &t.series)
    }

    /// Builds the gate of `config`, keeping `previous`'s introspection client (see
    /// [`Gate::build`]), and `previous`'s pool of each upstream whose settings did not change
    /// (with its health state); the other pools are new, their names resolved now (blocking).
    fn build(
        config: &ProxyConfig,
        previous: Option<&Routing>,
        metrics: &ProxyMetrics,
    ) -> Result<Routing, String> {
        let gate = Gate::build(config.gate.clone(), previous.map(|r| &r.gate))?;
        let upstreams: HashMap<String, Arc<Pool>> = config
            .upstreams
            .iter()
            .map(|(name, upstream)| {
                let same = previous
                    .and_then(|r| r.upstreams.get(name))
                    .filter(|p| *p.upstream == **upstream)
                    .cloned();
                let pool = same.unwrap_or_else(|| Arc::new(Pool::new(upstream.clone())));
                (name.clone(), pool)
            })
            .collect();
        let upstream_series: HashMap<&str, Arc<UpstreamSeries>> = upstreams
            .keys()
            .map(|name| (name.as_str(), Arc::new(metrics.upstream(name))))
            .collect();
        let routes = gate
            .rules()
            .routes()
            .iter()
            .map(|route| RouteTarget {
                series: metrics.route(&route.name),
                upstream: route.upstream.as_deref().and_then(|name| {
                    let pool = upstreams.get(name)?.clone();
                    Some((pool, upstream_series.get(name)?.clone()))
                }),
            })
            .collect();
        Ok(Routing {
            gate,
            upstreams,
            routes,
            unmatched: metrics.route(UNMATCHED),
        })
    }
}

pub struct Shared {
    routing: RwLock<Arc<Routing>>,
    pub metrics: ProxyMetrics,
    /// Which requests get an access line (settings from the start; a restart changes them).
    pub access_log: AccessLog,
    pub drain: Arc<Drain>,
    /// The connection caps and counts of the proxy and admin listeners.
    pub listeners: [Arc<ListenerGate>; 2],
    /// The forward-auth listener's connection cap and counts, when there is one.
    pub forward_auth: Option<Arc<ListenerGate>>,
    /// The proxy listener's certificate, when it serves TLS.
    pub tls: Option<Arc<CertStore>>,
    /// Woken when new routing is swapped in (the background loops of its pools follow).
    pub routing_changed: Notify,
    /// Upstream background loops (health checks, DNS) running now.
    pub balance_loops: AtomicUsize,
    /// The configuration the process started with (parts other than routing need a restart).
    started_with: ProxyConfig,
}

impl Shared {
    /// The proxy listener's HTTP/2 watch: its stream budget, body deadlines and idle timeout.
    pub fn proxy_h2(&self) -> &Arc<H2Watch> {
        &self.listeners[0].h2
    }

    /// The state `config` describes, its gate built (the introspection client, the JWT
    /// validator): an error names what could not be built.
    pub fn new(config: ProxyConfig) -> Result<Shared, String> {
        let metrics = ProxyMetrics::default();
        let routing = Routing::build(&config, None, &metrics)?;
        let tls = match &config.tls {
            Some(files) => Some(CertStore::open(files.clone()).map_err(|e| e.to_string())?),
            None => None,
        };
        let body_idle = config.connections.body_idle_timeout;
        Ok(Shared {
            routing: RwLock::new(Arc::new(routing)),
            metrics,
            access_log: AccessLog::new(config.access_log),
            drain: Arc::default(),
            listeners: [
                ListenerGate::new("proxy", config.connections.max, body_idle),
                ListenerGate::making_room("admin", config.connections.admin_max, body_idle),
            ],
            forward_auth: config
                .forward_auth
                .as_ref()
                .map(|_| ListenerGate::new("forward_auth", config.connections.max, body_idle)),
            tls,
            routing_changed: Notify::new(),
            balance_loops: AtomicUsize::new(0),
            started_with: config,
        })
    }

    /// The routes and upstreams in force (a cheap `Arc` clone).
    pub fn routing(&self) -> Arc<Routing> {
        match self.routing.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The application's probes the admin listener answers (fixed at start).
    pub fn app_probes(&self) -> &AppProbes {
        &self.started_with.app_probes
    }

    /// The peers whose `X-Request-Id` is kept (fixed at start).
    pub fn trusted_peers(&self) -> &[crate::ingress::Cidr] {
        &self.started_with.trusted_peers
    }

    /// The file the configuration came from, if any.
    pub fn source(&self) -> Option<&PathBuf> {
        self.started_with.source.as_ref()
    }

    /// Re-reads the configuration file and swaps in its routes and upstreams. A file that fails
    /// to load or validate is refused and the rules in force stay.
    pub fn reload(&self) -> Result<usize, ConfigError> {
        let Some(path) = self.source() else {
            return Ok(self.routing().gate.rules().routes().len());
        };
        // The overrides of whoever started the proxy hold; the certificate files are not read
        // here: a bad one holds back its own reload only.
        let result = reload_config(
            path,
            |key| std::env::var(key).ok(),
            &self.started_with.document.overrides,
        );
        let result = result.and_then(|new| {
            if new.gate.rules.routes().is_empty() {
                Err(ConfigError::key(
                    &path.display().to_string(),
                    "routes",
                    "[]",
                    "a reload never swaps in an empty rule set",
                ))
            } else {
                Ok(new)
            }
        });
        let current = self.routing();
        let result = result.and_then(|new| {
            let routing =
                Routing::build(&new, Some(&current), &self.metrics).map_err(|message| {
                    let file = path.display().to_string();
                    ConfigError::key(&file, "token_source", new.gate.token_source, message)
                })?;
            Ok((new, routing))
        });
        self.metrics.reload(result.is_ok());
        let (new, routing) = match result {
            Ok(c) => c,
            Err(error) => {
                tracing::error!(%error, "configuration reload refused; the rules in force stay");
                return Err(error);
            }
        };
        if new.restart_settings() != self.started_with.restart_settings() {
            tracing::warn!(
                "listen addresses, tls files, connection limits, threads, shutdown times, access log, probes, trusted peers, introspection and revocation settings change only on restart"
            );
        }
        let routes = routing.gate.rules().routes().len();
        let routing = Arc::new(routing);
        match self.routing.write() {
            Ok(mut r) => *r = routing,
            Err(poisoned) => *poisoned.into_inner() = routing,
        }
        self.routing_changed.notify_one();
        tracing::info!(routes, file = %path.display(), "rules reloaded");
        crate::scope_check::spawn_after_reload(&new.gate);
        Ok(routes)
    }

    /// Why the proxy is degraded though ready: the revocation stream is unhealthy, so cached
    /// answers live at most its fallback TTL (and JWT revocations wait for the stream).
    pub fn degraded(&self) -> Option<&'static str> {
        self.routing()
            .gate
            .revocation()
            .and_then(|r| r.revoked().health().err())
    }

    /// Ready, or the first condition that fails: not draining, rules loaded, signing keys known
    /// (when JWTs are validated locally), and the authorization server answered within
    /// [`READY_WINDOW`] (when tokens are introspected).
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.drain.is_draining() {
            return Err("shutting down");
        }
        let routing = self.routing();
        if routing.gate.rules().routes().is_empty() {
            return Err("no routes loaded");
        }
        let check = routing.gate.check();
        if check.jwt().is_some_and(|jwt| jwt.key_count() == 0) {
            return Err("no JWT signing key known (JWKS not fetched)");
        }
        let Some(checker) = check.introspection() else {
            return Ok(());
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let metrics = checker.metrics();
        if metrics.last_call_refused() {
            return Err("the authorization server refused the proxy's introspection credentials");
        }
        match metrics.last_success() {
            Some(last)
                if metrics.last_call_ok()
                    && now.saturating_sub(last) <= READY_WINDOW.as_secs() as i64 =>
            {
                Ok(())
            }
            _ => Err("no recent answer from the authorization server"),
        }
    }
}

/// Shared state behind an `Arc`.
pub type SharedState = Arc<Shared>;
