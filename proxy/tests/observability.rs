//! What the proxy tells its operator about each request: forward-auth decisions get an access
//! line (`server="forward_auth"`) and count in the request metrics (`listener="forward_auth"`),
//! as proxied requests do; every access line carries a request id, which the upstream receives
//! too. The access lines are captured by a JSON subscriber installed for this test binary.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{
    Introspector, ROUTES, config_yaml, echo_upstream, free_port, start_proxy, two_free_ports,
};
use serde_json::Value;

/// Every log line written by this test binary.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured lines (the subscriber is installed at the first call).
fn captured() -> &'static Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Captured::default();
        let writer = log.clone();
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .init();
        log
    })
}

/// The access lines captured so far whose `path` is `path` (each test uses paths of its own).
fn access_lines(path: &str) -> Vec<Value> {
    let bytes = captured().0.lock().unwrap().clone();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "access" && l["path"] == path)
        .collect()
}

/// Polls until `count` access lines for `path` are written (the proxy writes them just after
/// the answer); returns them.
async fn wait_lines(path: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = access_lines(path);
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn metrics(client: &reqwest::Client, admin: std::net::SocketAddr) -> String {
    client
        .get(format!("http://{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_forward_auth_decision_is_logged_and_counted() {
    captured();
    let introspector = Introspector::start().await;
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth_port = free_port();
    let routes = format!(
        "{ROUTES}  - {{ name: fa_checked, path: /fa-checked, upstream: api, scopes: [read] }}\n"
    );
    let yaml = format!(
        "forward_auth: {{ listen: \"127.0.0.1:{auth_port}\", ingress: nginx, trusted_peers: [127.0.0.1] }}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, &routes)
    );
    let (proxy, config) = start_proxy("observability-fa", &yaml).await;
    let auth = proxy.forward_auth_addr().unwrap();
    let client = reqwest::Client::new();
    // Six decisions: three allowed, two without a token, one token without the scope.
    let tokens = [
        Some("read"),
        Some("read"),
        Some("read"),
        None,
        None,
        Some("none"),
    ];
    for token in tokens {
        let mut check = client
            .get(format!("http://{auth}/auth"))
            .header("X-Original-URI", "/fa-checked")
            .header("X-Original-Method", "GET");
        if let Some(t) = token {
            check = check.bearer_auth(t);
        }
        let status = check.send().await.unwrap().status();
        assert!([200, 401, 403].contains(&status.as_u16()), "{status}");
    }
    let lines = wait_lines("/fa-checked", tokens.len()).await;
    assert_eq!(lines.len(), tokens.len(), "{lines:#?}");
    for line in &lines {
        assert_eq!(line["server"], "forward_auth", "{line}");
        assert_eq!(line["route"], "fa_checked", "{line}");
        assert_eq!(line["method"], "GET", "{line}");
        assert!(line["latency_ms"].as_f64().is_some(), "{line}");
    }
    let decisions = |d: &str| lines.iter().filter(|l| l["decision"] == d).count();
    assert_eq!(decisions("allow"), 3);
    assert_eq!(decisions("unauthenticated"), 2);
    assert_eq!(decisions("insufficient_scope"), 1);
    assert!(lines.iter().any(|l| l["user"] == "alice"));

    let text = metrics(&client, proxy.admin_addr()).await;
    for needle in [
        "tokengate_proxy_requests_total{route=\"fa_checked\",decision=\"allow\",listener=\"forward_auth\"} 3\n",
        "tokengate_proxy_requests_total{route=\"fa_checked\",decision=\"unauthenticated\",listener=\"forward_auth\"} 2\n",
        "tokengate_proxy_requests_total{route=\"fa_checked\",decision=\"insufficient_scope\",listener=\"forward_auth\"} 1\n",
        "tokengate_proxy_request_duration_seconds_count{route=\"fa_checked\",decision=\"allow\",listener=\"forward_auth\"} 3\n",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // No decision of the proxy listener was counted for it.
    assert!(!text.contains("route=\"fa_checked\",decision=\"allow\",listener=\"proxy\""));

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
