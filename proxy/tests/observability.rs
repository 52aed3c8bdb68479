//! What the proxy tells its operator about each request: forward-auth decisions get an access
//! line (`server="forward_auth"`) and count in the request metrics (`listener="forward_auth"`),
//! as proxied requests do; every access line carries a request id, which the upstream receives
//! too. The access lines are captured by a JSON subscriber installed for this test binary.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{
    Introspector, ROUTES, config_yaml, echo_upstream, echoed, free_port, start_proxy,
    two_free_ports,
};
use serde_json::Value;
use test_support::LogBuffer;

/// Every log line written by this test binary (the subscriber is installed at the first call).
fn captured() -> &'static LogBuffer {
    static LOG: OnceLock<LogBuffer> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = LogBuffer::default();
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
    captured()
        .text()
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
    for (token, expected) in tokens.into_iter().zip([200, 200, 200, 401, 401, 403]) {
        let mut check = client
            .get(format!("http://{auth}/auth"))
            .header("X-Original-URI", "/fa-checked")
            .header("X-Original-Method", "GET");
        if let Some(t) = token {
            check = check.bearer_auth(t);
        }
        let status = check.send().await.unwrap().status();
        assert_eq!(status.as_u16(), expected, "{token:?}");
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

/// A proxy over an echo upstream, `trusted_peers:` as given.
async fn proxy_trusting(
    introspector: &Introspector,
    trusted: &str,
) -> (proxy::ProxyHandle, std::path::PathBuf) {
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let yaml = format!(
        "trusted_peers: {trusted}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, ROUTES)
    );
    start_proxy("observability-id", &yaml).await
}

/// GET `path` through `proxy` with the read token and `id` as `X-Request-Id`; returns what
/// the upstream received in `X-Request-Id` and the request's access line.
async fn through(proxy: &proxy::ProxyHandle, path: &str, id: Option<&str>) -> (Vec<String>, Value) {
    let mut req = reqwest::Client::new()
        .get(format!("http://{}{path}", proxy.listen_addr()))
        .bearer_auth("read");
    if let Some(id) = id {
        req = req.header("X-Request-Id", id);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    let lines = wait_lines(path, 1).await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    (echoed(&echo, "x-request-id"), lines[0].clone())
}

fn is_uuid(id: &str) -> bool {
    id.split('-').map(str::len).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && id.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_is_kept_from_trusted_peers_made_otherwise_logged_and_sent_upstream() {
    captured();
    let introspector = Introspector::start().await;

    let (trusting, config) = proxy_trusting(&introspector, "[127.0.0.1]").await;
    // Kept from a trusted peer: upstream and log.
    let (upstream, line) = through(&trusting, "/pass/id-kept", Some("trace-abc-123")).await;
    assert_eq!(upstream, ["trace-abc-123"]);
    assert_eq!(line["request_id"], "trace-abc-123", "{line}");
    // Absent: made here, the same in both places.
    let (upstream, line) = through(&trusting, "/pass/id-absent", None).await;
    assert_eq!(upstream.len(), 1);
    assert!(is_uuid(&upstream[0]), "{upstream:?}");
    assert_eq!(line["request_id"], upstream[0].as_str(), "{line}");
    // Malformed, even from a trusted peer: replaced.
    let (upstream, _) = through(&trusting, "/pass/id-spaced", Some("two words")).await;
    assert!(is_uuid(&upstream[0]), "{upstream:?}");
    // A refusal's line carries one too.
    let resp = reqwest::Client::new()
        .get(format!("http://{}/read?id-refused", trusting.listen_addr()))
        .header("X-Request-Id", "refused-1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let refused = wait_lines("/read", 1).await;
    assert!(
        refused
            .iter()
            .any(|l| l["request_id"] == "refused-1" && l["status"] == 401),
        "{refused:#?}"
    );
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || trusting.shutdown_now())
        .await
        .unwrap();

    // Not trusted (no trusted_peers): the client's id is replaced.
    let (untrusting, config) = proxy_trusting(&introspector, "[]").await;
    let (upstream, line) = through(&untrusting, "/pass/id-forged", Some("forged-id")).await;
    assert_eq!(upstream.len(), 1);
    assert_ne!(upstream[0], "forged-id");
    assert!(is_uuid(&upstream[0]), "{upstream:?}");
    assert_eq!(line["request_id"], upstream[0].as_str(), "{line}");
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || untrusting.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_keeps_the_ingress_request_id_and_answers_it() {
    captured();
    let introspector = Introspector::start().await;
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth_port = free_port();
    let yaml = format!(
        "forward_auth: {{ listen: \"127.0.0.1:{auth_port}\", ingress: nginx, trusted_peers: [127.0.0.1] }}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, ROUTES)
    );
    let (proxy, config) = start_proxy("observability-fa-id", &yaml).await;
    let auth = proxy.forward_auth_addr().unwrap();
    let resp = reqwest::Client::new()
        .get(format!("http://{auth}/auth"))
        .header("X-Original-URI", "/pass/fa-id")
        .header("X-Original-Method", "GET")
        .header("X-Request-Id", "ingress-id-7")
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "ingress-id-7");
    let lines = wait_lines("/pass/fa-id", 1).await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["request_id"], "ingress-id-7");
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grpc_call_is_logged_with_its_grpc_status() {
    captured();
    let introspector = Introspector::start().await;
    let (proxy, config) = proxy_trusting(&introspector, "[]").await;
    let client = reqwest::Client::new();
    let call = |token: Option<&'static str>| {
        let mut req = client
            .post(format!("http://{}/upload", proxy.listen_addr()))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(vec![0u8; 5]);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    // No token: UNAUTHENTICATED (16); a token without the scope: PERMISSION_DENIED (7).
    let resp = call(None).await.unwrap();
    assert_eq!(resp.headers()["grpc-status"], "16");
    let resp = call(Some("read")).await.unwrap();
    assert_eq!(resp.headers()["grpc-status"], "7");
    let lines = wait_lines("/upload", 2).await;
    let statuses: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["grpc_status"].as_str())
        .collect();
    assert_eq!(statuses, ["16", "7"], "{lines:#?}");
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
