//! The smallest Pingora reverse proxy: `upstream_peer` only, no checks, no headers, no metrics.
//! bench/proxy.sh runs it next to the tokengate proxy to show what tokengate adds on top of
//! Pingora. Same allocator, allocator settings ([`resource_server::allocator`]) and runtime
//! settings as the proxy binary, so only our code differs.
//!
//! `bare LISTEN UPSTREAM [THREADS] [WORK_STEALING]`, e.g. `bare 127.0.0.1:9000 127.0.0.1:8002 1 false`

use std::net::SocketAddr;

use async_trait::async_trait;
use pingora::prelude::{HttpPeer, Session};
use pingora::proxy::ProxyHttp;
use pingora::server::Server;
use pingora::server::configuration::ServerConf;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bare {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _: &mut Session, _: &mut ()) -> pingora::Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    resource_server::allocator::apply();
    let mut args = std::env::args().skip(1);
    let usage = "usage: bare LISTEN UPSTREAM [THREADS] [WORK_STEALING]";
    let listen = args.next().expect(usage);
    let upstream = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let threads = args.next().map_or(1, |t| t.parse().expect(usage));
    let work_stealing = args.next().is_some_and(|w| w.parse().expect(usage));
    let conf = ServerConf {
        version: 1,
        threads,
        work_stealing,
        upstream_keepalive_pool_size: 256,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    let mut proxy = pingora::proxy::http_proxy_service(&server.configuration, Bare { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.bootstrap();
    server.run_forever();
}
