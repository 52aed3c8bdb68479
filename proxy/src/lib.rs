//! tokengate's sidecar: a Pingora reverse proxy that checks bearer tokens through RFC 7662
//! introspection (cached by `resource-server`), applies per-route scope rules, and forwards
//! allowed requests to named upstreams with the caller's identity in `X-Auth-*` headers.
//!
//! ```no_run
//! let config = proxy::load_config("config/proxy.yaml")?;
//! let handle = proxy::spawn(config)?;          // returns once both listeners accept
//! println!("proxy on {}, admin on {}", handle.listen_addr(), handle.admin_addr());
//! handle.shutdown();                            // graceful, blocks until stopped
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

pub mod admin;
pub mod app_probes;
pub mod background;
pub mod balance;
pub mod config;
pub mod downstream;
pub mod drain;
pub mod forward_auth;
pub mod gateway;
pub mod h2_conn;
pub mod headers;
pub mod ingress;
pub mod inject;
pub mod metrics;
pub mod scope_check;
pub mod scrape;
pub mod server;
pub mod state;
pub mod tls;
pub mod waiting;

pub use config::{
    ConfigError, ProxyConfig, Upstream, load_config, load_config_with_env, parse_config,
};
pub use server::{ProxyHandle, Signals, StartError, spawn, spawn_with};
pub use state::Routing;
