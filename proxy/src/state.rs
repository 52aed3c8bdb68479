//! State shared by the proxy, the admin listener and the reloader: the rules in force (swapped
//! atomically on reload), the token checker and the metrics.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use resource_server::TokenChecker;

use crate::app_probes::AppProbes;
use crate::config::{ConfigError, ProxyConfig, Routing, load_config_with_env};
use crate::drain::Drain;
use crate::metrics::ProxyMetrics;

/// How recently the authorization server must have answered for `/readyz` to say 200.
pub const READY_WINDOW: Duration = Duration::from_secs(30);

pub struct Shared {
    routing: RwLock<Arc<Routing>>,
    pub checker: TokenChecker,
    pub metrics: ProxyMetrics,
    pub drain: Arc<Drain>,
    /// The configuration the process started with (parts other than routing need a restart).
    started_with: ProxyConfig,
}

impl Shared {
    pub fn new(config: ProxyConfig, checker: TokenChecker) -> Shared {
        let metrics = ProxyMetrics::default();
        track_jwt(&metrics, &config.routing);
        Shared {
            routing: RwLock::new(config.routing.clone()),
            checker,
            metrics,
            drain: Arc::default(),
            started_with: config,
        }
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

    /// The file the configuration came from, if any.
    pub fn source(&self) -> Option<&PathBuf> {
        self.started_with.source.as_ref()
    }

    /// Re-reads the configuration file and swaps in its routes and upstreams. A file that fails
    /// to load or validate is refused and the rules in force stay.
    pub fn reload(&self) -> Result<usize, ConfigError> {
        let Some(path) = self.source() else {
            return Ok(self.routing().rules.routes().len());
        };
        let overrides = &self.started_with.upstream_overrides;
        let result = load_config_with_env(path, |key| {
            overrides
                .get(key)
                .cloned()
                .or_else(|| std::env::var(key).ok())
        })
        .map(|mut new| {
            new.upstream_overrides = overrides.clone();
            new
        });
        let result = result.and_then(|new| {
            if new.routing.rules.routes().is_empty() {
                Err(ConfigError::Invalid {
                    file: path.display().to_string(),
                    field: "routes".into(),
                    value: "[]".into(),
                    message: "a reload never swaps in an empty rule set".into(),
                })
            } else {
                Ok(new)
            }
        });
        self.metrics.reload(result.is_ok());
        let new = match result {
            Ok(c) => c,
            Err(error) => {
                tracing::error!(%error, "configuration reload refused; the rules in force stay");
                return Err(error);
            }
        };
        let old = &self.started_with;
        if new.listen != old.listen
            || new.admin_listen != old.admin_listen
            || new.threads != old.threads
            || new.work_stealing != old.work_stealing
            || new.introspection != old.introspection
        {
            tracing::warn!(
                "listen addresses, threads and introspection settings change only on restart"
            );
        }
        let routes = new.routing.rules.routes().len();
        track_jwt(&self.metrics, &new.routing);
        match self.routing.write() {
            Ok(mut r) => *r = new.routing,
            Err(poisoned) => *poisoned.into_inner() = new.routing,
        }
        tracing::info!(routes, file = %path.display(), "rules reloaded");
        Ok(routes)
    }

    /// Ready, or the first condition that fails: not draining, rules loaded, signing keys known
    /// (when JWTs are validated locally), and the authorization server answered within
    /// [`READY_WINDOW`] (when tokens are introspected).
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.drain.is_draining() {
            return Err("shutting down");
        }
        let routing = self.routing();
        if routing.rules.routes().is_empty() {
            return Err("no routes loaded");
        }
        let source = routing.rules.token_source();
        if source.jwt().is_some_and(|jwt| jwt.key_count() == 0) {
            return Err("no JWT signing key known (JWKS not fetched)");
        }
        if !uses_introspection(source) {
            return Ok(());
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let metrics = self.checker.metrics();
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

    /// Whether tokens reach the introspection endpoint (so its readiness matters).
    pub fn introspects(&self) -> bool {
        uses_introspection(self.routing().rules.token_source())
    }
}

/// `/metrics` reports the JWT validator of these rules, if any (set when the rules come in, not
/// per request).
fn track_jwt(metrics: &ProxyMetrics, routing: &Routing) {
    if let Some(jwt) = routing.rules.token_source().jwt() {
        metrics.track_jwt(jwt.metrics());
    }
}

fn uses_introspection(source: &resource_server::gate::TokenSource) -> bool {
    !matches!(source, resource_server::gate::TokenSource::Jwt(_))
}

/// Shared state behind an `Arc`.
pub type SharedState = Arc<Shared>;
