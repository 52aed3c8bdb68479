//! Builds the Pingora server (proxy, admin listener, background work) and runs it on its own
//! thread; [`ProxyHandle`] reports the addresses, reloads, and stops it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::listeners::ALPN;
use pingora::listeners::tls::Acceptor;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::admin::Admin;
use crate::background::Maintenance;
use crate::config::{ConfigError, ProxyConfig};
use crate::downstream::{self, Guarded};
use crate::forward_auth::ForwardAuth;
use crate::gateway::Gateway;
use crate::state::{Shared, SharedState};

/// How long [`spawn`] waits for the listeners to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Gate(String),
    #[error("cannot start the proxy thread: {0}")]
    Thread(std::io::Error),
    #[error("the proxy did not start listening on {0} within {START_TIMEOUT:?}")]
    NotListening(SocketAddr),
}

/// How the proxy should stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Graceful,
    Fast,
}

/// Whether the server reacts to SIGTERM (graceful), SIGINT (fast) and SIGQUIT (graceful, no
/// socket hand-over configured). SIGHUP (reload) is always handled when the configuration came
/// from a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signals {
    Handle,
    Ignore,
}

/// A running proxy. Dropping the handle stops the proxy at once (without waiting for it).
pub struct ProxyHandle {
    listen: SocketAddr,
    admin: SocketAddr,
    forward_auth: Option<SocketAddr>,
    stop: watch::Sender<Option<Stop>>,
    thread: Option<JoinHandle<()>>,
    shared: SharedState,
}

impl ProxyHandle {
    /// The proxy listener's address (with the port chosen if the configuration said 0).
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The forward-auth listener's address, if configured.
    pub fn forward_auth_addr(&self) -> Option<SocketAddr> {
        self.forward_auth
    }

    /// Re-reads the configuration file now (as SIGHUP does) and returns the number of routes in
    /// force; a broken file is refused and the rules in force stay.
    pub fn reload(&self) -> Result<usize, ConfigError> {
        self.shared.reload()
    }

    /// Graceful stop, as SIGTERM: the drain (see [`crate::drain`]) for at most `grace_period`,
    /// then the listeners close and the runtimes get `shutdown_timeout`. Blocks until the server
    /// has stopped.
    pub fn shutdown(mut self) {
        self.stop.send_replace(Some(Stop::Graceful));
        self.join();
    }

    /// Immediate stop, as SIGINT: in-flight requests are cut. Blocks until the server has stopped.
    pub fn shutdown_now(mut self) {
        self.stop.send_replace(Some(Stop::Fast));
        self.join();
    }

    /// Blocks until the server stops (by a signal, with [`Signals::Handle`]).
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("the proxy thread panicked");
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop.send_replace(Some(Stop::Fast));
        }
    }
}

/// Starts the proxy on a thread of its own without handling process signals (for tests and for
/// embedding in a bigger process); returns once both listeners accept connections.
pub fn spawn(config: ProxyConfig) -> Result<ProxyHandle, StartError> {
    spawn_with(config, Signals::Ignore)
}

/// [`spawn`], choosing whether the proxy handles SIGTERM/SIGINT/SIGQUIT itself.
///
/// A listen port of 0 is replaced by a free port, reported by the handle.
pub fn spawn_with(mut config: ProxyConfig, signals: Signals) -> Result<ProxyHandle, StartError> {
    config.listen = claim_port(config.listen)?;
    config.admin_listen = claim_port(config.admin_listen)?;
    if let Some(warning) = crate::config::identity_warning(&config) {
        tracing::warn!("{warning}");
    }
    if let Some(f) = config.forward_auth.as_mut() {
        f.listen = claim_port(f.listen)?;
    }
    let shared: SharedState = Arc::new(Shared::new(config.clone()).map_err(StartError::Gate)?);

    let mut server_conf = ServerConf {
        version: 1,
        threads: config.threads,
        // A process of its own: nginx's model, each thread its own runtime (less CPU per request
        // than one work-stealing pool, bench/proxy.sh); inside another program: the shared pool.
        work_stealing: config.work_stealing.unwrap_or(signals == Signals::Ignore),
        // The drain happens before Pingora hears of the stop (StopWatch), so Pingora's own
        // grace period, which sleeps whether or not anything is in flight, is not used.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(ceil_secs(config.shutdown_timeout)),
        ..ServerConf::default()
    };
    server_conf.upstream_keepalive_pool_size = 256;
    let mut server = Server::new_with_opt_and_conf(None, server_conf);

    let gateway = Gateway {
        shared: shared.clone(),
    };
    let [proxy_gate, admin_gate] = shared.listeners.clone();
    let mut http = pingora::proxy::http_proxy(&server.configuration, gateway);
    http.server_options = Some(downstream::server_options(config.h2c, &config.connections));
    http.h2_options = Some(downstream::h2_options());
    let mut proxy = Service::new(
        "tokengate proxy".to_owned(),
        Guarded::new(http, config.connections, proxy_gate)
            .with_tls(shared.tls.as_ref().map(|t| t.settings(true).build())),
    );
    proxy.add_listener(downstream::endpoint(&config.listen.to_string()));
    let mut admin = Service::new(
        "tokengate admin".to_owned(),
        Guarded::new(Admin::new(&shared), config.connections, admin_gate)
            .with_tls(listener_tls(config.admin_tls, &shared)),
    );
    admin.add_listener(downstream::endpoint(&config.admin_listen.to_string()));
    admin.threads = Some(1);
    server.add_service(proxy);
    server.add_service(admin);
    if let (Some(f), Some(gate)) = (&config.forward_auth, shared.forward_auth.clone()) {
        let mut service = Service::new(
            "tokengate forward-auth".to_owned(),
            Guarded::new(
                ForwardAuth {
                    shared: shared.clone(),
                    config: f.clone(),
                },
                config.connections,
                gate,
            )
            .with_tls(listener_tls(f.tls, &shared)),
        );
        service.add_listener(downstream::endpoint(&f.listen.to_string()));
        service.threads = Some(1);
        server.add_service(service);
    }
    server.add_service(background_service(
        "tokengate maintenance",
        Maintenance::new(shared.clone()),
    ));

    let (stop, stop_rx) = watch::channel(None);
    let watcher = StopWatch {
        rx: stop_rx,
        signals,
        shared: shared.clone(),
        grace: config.grace_period,
    };
    let thread = std::thread::Builder::new()
        .name("tokengate-proxy".into())
        .spawn(move || {
            server.bootstrap();
            server.run(RunArgs {
                shutdown_signal: Box::new(watcher),
            });
        })
        .map_err(StartError::Thread)?;
    let handle = ProxyHandle {
        listen: config.listen,
        admin: config.admin_listen,
        forward_auth: config.forward_auth.as_ref().map(|f| f.listen),
        stop,
        thread: Some(thread),
        shared,
    };
    for addr in [handle.listen, handle.admin]
        .into_iter()
        .chain(handle.forward_auth)
    {
        wait_listening(addr, &handle)?;
    }
    match handle.forward_auth {
        Some(forward_auth) => tracing::info!(
            listen = %handle.listen,
            admin = %handle.admin,
            %forward_auth,
            "proxy listening"
        ),
        None => tracing::info!(listen = %handle.listen, admin = %handle.admin, "proxy listening"),
    }
    Ok(handle)
}

/// TLS when `tls`: the proxy listener's certificate (reloaded with it), ALPN `http/1.1` only
/// (the admin and forward-auth endpoints speak HTTP/1.1).
fn listener_tls(tls: bool, shared: &Shared) -> Option<Acceptor> {
    let store = shared.tls.as_ref().filter(|_| tls)?;
    let mut settings = store.settings(false);
    settings.set_alpn(ALPN::H1);
    Some(settings.build())
}

/// Checks that `addr` can be bound (so that a busy port is an error here, not a panic inside
/// Pingora) and picks a free port for port 0.
pub fn claim_port(addr: SocketAddr) -> Result<SocketAddr, StartError> {
    let listener = TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
    listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })
}

fn wait_listening(addr: SocketAddr, handle: &ProxyHandle) -> Result<(), StartError> {
    let target = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    };
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if handle.thread.as_ref().is_none_or(|t| t.is_finished()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(StartError::NotListening(addr))
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Pingora's shutdown trigger: the handle's stop request, and optionally the Unix signals. A
/// graceful stop drains first.
struct StopWatch {
    rx: watch::Receiver<Option<Stop>>,
    signals: Signals,
    shared: SharedState,
    grace: Duration,
}

#[async_trait]
impl ShutdownSignalWatch for StopWatch {
    async fn recv(&self) -> ShutdownSignal {
        let mut rx = self.rx.clone();
        let from_handle = async move {
            loop {
                if let Some(stop) = *rx.borrow_and_update() {
                    return stop;
                }
                if rx.changed().await.is_err() {
                    // Handle gone without a request: it was dropped, which means stop.
                    return Stop::Fast;
                }
            }
        };
        let stop = match self.signals {
            Signals::Ignore => from_handle.await,
            Signals::Handle => tokio::select! {
                stop = from_handle => stop,
                stop = from_signals() => stop,
            },
        };
        if stop == Stop::Fast {
            return ShutdownSignal::FastShutdown;
        }
        // Draining; a fast stop (the handle's, or SIGINT) still cuts it short.
        let mut rx = self.rx.clone();
        let fast_from_handle = async move {
            while *rx.borrow_and_update() != Some(Stop::Fast) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        let fast_from_signal = async {
            match (self.signals, signal(SignalKind::interrupt())) {
                (Signals::Handle, Ok(mut int)) => drop(int.recv().await),
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.shared.drain.drain(self.grace) => ShutdownSignal::GracefulTerminate,
            _ = fast_from_handle => ShutdownSignal::FastShutdown,
            _ = fast_from_signal => ShutdownSignal::FastShutdown,
        }
    }
}

async fn from_signals() -> Stop {
    let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the proxy through its handle");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: graceful shutdown"); Stop::Graceful }
        _ = quit.recv() => { tracing::info!("SIGQUIT: graceful shutdown"); Stop::Graceful }
        _ = int.recv() => { tracing::info!("SIGINT: fast shutdown"); Stop::Fast }
    }
}
