//! Background work: reload the rules and the TLS certificate when their files change or on
//! SIGHUP, keep the authorization server's readiness fresh with an occasional probe, start JWKS
//! fetching, and run the health checks and DNS re-resolution of the upstream pools in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::balance::Pool;
use crate::state::{READY_WINDOW, SharedState};

/// How often the file's modification time is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How often readiness is refreshed when no request has reached the authorization server.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// The reloader and the readiness prober, run as one Pingora background service.
pub struct Maintenance {
    pub shared: SharedState,
    probes: AtomicU64,
}

impl Maintenance {
    pub fn new(shared: SharedState) -> Maintenance {
        Maintenance {
            shared,
            probes: AtomicU64::new(0),
        }
    }

    async fn watch_files(&self) {
        let rules = self.shared.source().cloned();
        let tls = self.shared.tls.clone();
        if rules.is_none() && tls.is_none() {
            return std::future::pending().await;
        }
        let tls_files = tls.as_ref().map(|t| t.watched());
        let mut rules_watch = rules.map(|p| Watch::new(vec![p]));
        let mut tls_watch = tls_files.map(Watch::new);
        // SIGHUP only with a file to re-read (the stack's embedded proxy has none).
        let mut hup: Option<Signal> = signal(SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if rules_watch.as_mut().is_some_and(Watch::changed) {
                        self.reload().await;
                    }
                    if let (Some(w), Some(t)) = (tls_watch.as_mut(), &tls)
                        && w.changed()
                    {
                        let _ = t.reload();
                    }
                }
                Some(()) = next_hup(&mut hup) => {
                    tracing::info!("SIGHUP: reloading the rules and the TLS certificate");
                    if let Some(w) = rules_watch.as_mut() {
                        w.reset();
                        self.reload().await;
                    }
                    if let (Some(w), Some(t)) = (tls_watch.as_mut(), &tls) {
                        w.reset();
                        let _ = t.reload();
                    }
                }
            }
        }
    }

    /// [`crate::state::Shared::reload`] off the runtime's workers (new upstream names are
    /// resolved there, blocking).
    async fn reload(&self) {
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.reload()).await;
    }

    /// Keeps one background loop (health checks, DNS) running per pool of the routing in force:
    /// a pool that a reload dropped has its loop stopped, a new one gets its loop started.
    async fn balance(&self) {
        let mut loops = Loops::default();
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.shared.routing_changed.notified() => {}
            }
            let routing = self.shared.routing();
            let in_force: Vec<&Arc<Pool>> = routing
                .upstreams
                .values()
                .filter(|p| p.has_background())
                .collect();
            loops.0.retain(|(pool, stop)| {
                let keep = in_force.iter().any(|p| Arc::ptr_eq(p, pool));
                if !keep {
                    stop.send_replace(true);
                }
                keep
            });
            for pool in in_force {
                if !loops.0.iter().any(|(p, _)| Arc::ptr_eq(p, pool)) {
                    let (stop, watch) = tokio::sync::watch::channel(false);
                    let running = pool.clone();
                    tokio::spawn(async move { running.run(watch).await });
                    loops.0.push((pool.clone(), stop));
                }
            }
            self.shared.balance_loops.store(loops.0.len(), Relaxed);
        }
    }

    /// Asks about a throwaway token when the authorization server has not answered for a while,
    /// so that `/readyz` reflects whether it can be reached even without traffic.
    async fn probe(&self) {
        let stale_after = READY_WINDOW / 3;
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        let mut log = ProbeLog::default();
        loop {
            tick.tick().await;
            // The JWKS is fetched at start (and for a validator a reload brought), not at the
            // first request: readiness waits for its keys. Idempotent once started.
            let routing = self.shared.routing();
            if let Some(jwt) = routing.gate.check().jwt() {
                jwt.start().await;
            }
            // The revocation stream too: it is created at start, not at the first request.
            if let Some(r) = routing.gate.revocation() {
                r.start();
            }
            let Some(checker) = routing.gate.check().introspection() else {
                continue; // JWTs only: readiness is the JWKS's, kept fresh by the validator
            };
            let now = unix_now();
            let fresh = checker
                .metrics()
                .last_success()
                .is_some_and(|t| now.saturating_sub(t) < stale_after.as_secs() as i64);
            if fresh {
                // Requests reached the server (the checker logs that recovery itself).
                log = ProbeLog::default();
                continue;
            }
            let n = self.probes.fetch_add(1, Relaxed);
            let token = format!("tokengate-readiness-probe-{now}-{n}");
            let reached = checker.check(&token).await.is_ok();
            match (log.changed(reached), reached) {
                (true, false) => {
                    let why = self.shared.readiness().err().unwrap_or("no answer");
                    tracing::warn!(
                        "readiness probe failed: {why}; /readyz says 503 until the introspection \
                         endpoint answers (further failed probes are not logged)"
                    );
                }
                (true, true) => {
                    tracing::info!("readiness probe: the authorization server answers again");
                }
                (false, _) => {}
            }
        }
    }
}

/// The probe's own log: a line when its result changes, not one per probe during an outage (the
/// checker already logs the failures themselves, rate-limited, with counts).
#[derive(Debug, Default)]
struct ProbeLog {
    failing: bool,
}

impl ProbeLog {
    /// Records a probe's result; whether it differs from the state so far (healthy at first).
    fn changed(&mut self, reached: bool) -> bool {
        let changed = self.failing == reached;
        self.failing = !reached;
        changed
    }
}

#[async_trait]
impl BackgroundService for Maintenance {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        tokio::select! {
            _ = self.watch_files() => {}
            _ = self.probe() => {}
            _ = self.balance() => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// The pools whose background loop runs, each with the sender that stops it; all are stopped
/// when this is dropped (Pingora's loop runs on when its stop sender is merely gone).
#[derive(Default)]
struct Loops(Vec<(Arc<Pool>, tokio::sync::watch::Sender<bool>)>);

impl Drop for Loops {
    fn drop(&mut self) {
        for (_, stop) in &self.0 {
            stop.send_replace(true);
        }
    }
}

async fn next_hup(hup: &mut Option<Signal>) -> Option<()> {
    match hup {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Files polled together (a certificate and its key): a change is reported once they have
/// stayed the same for one poll (not half-written), and every file exists.
struct Watch {
    paths: Vec<PathBuf>,
    loaded: Vec<Option<(SystemTime, u64)>>,
    seen: Vec<Option<(SystemTime, u64)>>,
}

impl Watch {
    fn new(paths: Vec<PathBuf>) -> Watch {
        let loaded: Vec<_> = paths.iter().map(|p| stamp(p)).collect();
        Watch {
            paths,
            seen: loaded.clone(),
            loaded,
        }
    }

    /// Whether the files changed since the last load (and were stable since the last poll).
    fn changed(&mut self) -> bool {
        let now: Vec<_> = self.paths.iter().map(|p| stamp(p)).collect();
        let changed = now != self.loaded && now == self.seen && now.iter().all(Option::is_some);
        if changed {
            self.loaded = now.clone();
        }
        self.seen = now;
        changed
    }

    /// The files as they are now count as loaded (after a reload for another reason).
    fn reset(&mut self) {
        self.loaded = self.paths.iter().map(|p| stamp(p)).collect();
        self.seen = self.loaded.clone();
    }
}

/// What identifies a version of a file: modification time and length. Through symbolic links,
/// as Kubernetes mounts a Secret (`..data` swapped atomically).
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::ProbeLog;

    #[test]
    fn the_probe_logs_changes_not_every_failure() {
        let mut log = ProbeLog::default();
        let results = [true, false, false, false, true, true, false];
        let lines: Vec<bool> = results.iter().map(|&r| log.changed(r)).collect();
        assert_eq!(lines, [false, true, false, false, true, false, true]);
    }
}
