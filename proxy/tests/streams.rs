//! WebSocket and server-sent events through the proxy, with clients nobody here wrote: Python's
//! `websockets` over TLS (ALPN http/1.1, or none) and in cleartext, idle for longer than
//! `body_idle_timeout`, refused without a token; curl reading an event stream over h2 and
//! http/1.1 over TLS and over h2c, each event as it comes. WebSocket over HTTP/2 (RFC 8441
//! extended CONNECT) is not offered: the proxy's SETTINGS say so, and a client that negotiated h2
//! cannot upgrade (`tests/streams/peers.py`).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{INTROSPECTOR_TOKEN, Introspector, start_proxy, two_free_ports};
use serde_json::Value;
use test_support::pki::Pki;

const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/streams/peers.py");

/// The Python WebSocket and SSE servers, killed on drop.
struct Servers {
    child: Child,
    ws: u16,
    sse: u16,
}

impl Servers {
    fn start() -> Servers {
        let mut child = Command::new("python3")
            .args([PEERS, "server"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut ports = line
            .split_whitespace()
            .map(|p| p.parse().expect("two ports"));
        let (ws, sse) = (ports.next().unwrap(), ports.next().unwrap());
        Servers { child, ws, sse }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy in front of `servers`, with `extra` top-level YAML (`tls:` or `h2c: true`) and a 1 s
/// body idle timeout. Returns the handle and the listen port.
async fn proxy(
    introspector: &Introspector,
    servers: &Servers,
    extra: &str,
) -> (proxy::ProxyHandle, std::path::PathBuf, u16) {
    let (listen, admin) = two_free_ports();
    let yaml = format!(
        r#"{extra}
listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
threads: 1
grace_period: 1s
shutdown_timeout: 1s
connections: {{ body_idle_timeout: 1s }}
upstreams:
  ws: {{ address: "127.0.0.1:{}" }}
  sse: {{ address: "127.0.0.1:{}" }}
introspection:
  url: {}
  auth_token: {INTROSPECTOR_TOKEN}
routes:
  - {{ name: ws, path: /ws, upstream: ws, scopes: [read] }}
  - {{ name: sse, path: /sse, upstream: sse, scopes: [read] }}
"#,
        servers.ws,
        servers.sse,
        introspector.url()
    );
    let (handle, path) = start_proxy("streams", &yaml).await;
    (handle, path, listen)
}

async fn python(args: Vec<String>) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(PEERS)
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        panic!(
            "peers.py printed {text:?}, stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The `websockets` client: `hello` echoed, idle for `idle` seconds, `again` echoed, and what the
/// server saw of the identity.
async fn ws(url: &str, ca: &str, token: &str, alpn: &str, idle: f64) -> Value {
    python(
        ["ws", url, ca, token, alpn, &idle.to_string()]
            .map(str::to_owned)
            .to_vec(),
    )
    .await
}

fn tls_section(pki: &Pki) -> String {
    let (cert, key) = pki.server("localhost");
    format!(
        "tls:\n  cert_file: {}\n  key_file: {}\n",
        cert.display(),
        key.display()
    )
}

fn assert_echoed(seen: &Value, alpn: Option<&str>) {
    assert_eq!(seen["echo"], "hello", "{seen}");
    assert_eq!(
        seen["echo2"], "again",
        "idle past body_idle_timeout: {seen}"
    );
    assert_eq!(
        seen["who"]["user"], "alice",
        "identity headers reach the upstream: {seen}"
    );
    assert_eq!(
        seen["who"]["authorization"],
        Value::Null,
        "the bearer does not: {seen}"
    );
    if let Some(alpn) = alpn {
        assert_eq!(seen["alpn"], alpn, "{seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_through_tls_and_in_cleartext() {
    let introspector = Introspector::start().await;
    let servers = Servers::start();
    let pki = Pki::new();
    let ca = pki.ca().display().to_string();

    let (tls_proxy, tls_path, tls_port) = proxy(&introspector, &servers, &tls_section(&pki)).await;
    let url = format!("wss://localhost:{tls_port}/ws");
    // ALPN http/1.1, as a browser's WebSocket connection offers; and no ALPN at all.
    let seen = ws(&url, &ca, "read", "http/1.1", 2.0).await;
    assert_echoed(&seen, Some("http/1.1"));
    let seen = ws(&url, &ca, "read", "-", 0.0).await;
    assert_echoed(&seen, None);
    // The gate applies to the upgrade like to any request.
    assert_eq!(ws(&url, &ca, "-", "http/1.1", 0.0).await["status"], 401);
    assert_eq!(ws(&url, &ca, "none", "http/1.1", 0.0).await["status"], 403);
    // A client that lets the server pick h2 gets h2, on which there is no Upgrade: WebSocket
    // needs an HTTP/1.1 connection (browsers open one when SETTINGS lack extended CONNECT).
    let seen = ws(&url, &ca, "read", "h2,http/1.1", 0.0).await;
    assert!(seen.get("echo").is_none(), "{seen}");

    let (plain_proxy, plain_path, plain_port) = proxy(&introspector, &servers, "").await;
    let seen = ws(
        &format!("ws://127.0.0.1:{plain_port}/ws"),
        &ca,
        "read",
        "-",
        2.0,
    )
    .await;
    assert_echoed(&seen, None);

    for (p, path) in [(tls_proxy, tls_path), (plain_proxy, plain_path)] {
        let _ = std::fs::remove_file(path);
        tokio::task::spawn_blocking(move || p.shutdown_now())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_connect_is_not_offered_over_h2() {
    let introspector = Introspector::start().await;
    let servers = Servers::start();
    let pki = Pki::new();
    let ca = pki.ca().display().to_string();
    let (p, path, port) = proxy(&introspector, &servers, &tls_section(&pki)).await;
    let seen = python(vec!["h2settings".into(), port.to_string(), ca]).await;
    assert_eq!(seen["alpn"], "h2", "{seen}");
    assert_eq!(
        seen["enable_connect_protocol"], 0,
        "RFC 8441 not offered: {seen}"
    );
    assert_eq!(seen["max_concurrent_streams"], 100, "{seen}");
    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || p.shutdown_now())
        .await
        .unwrap();
}

/// curl reading `url` for at most `max_time`: (exit code, body, HTTP version).
async fn curl(args: &[&str], url: &str, max_time: &str) -> (i32, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sN",
        "-H",
        "Authorization: Bearer read",
        "--max-time",
        max_time,
    ])
    .args(["-w", "\n%{http_version}"])
    .args(args)
    .arg(url);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, version) = text.rsplit_once('\n').unwrap_or((&text, ""));
    (
        out.status.code().unwrap_or(-1),
        body.to_owned(),
        version.to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_pass_as_they_come_over_h2_and_http1() {
    let introspector = Introspector::start().await;
    let servers = Servers::start();
    let pki = Pki::new();
    let ca = pki.ca().display().to_string();
    let (tls_proxy, tls_path, tls_port) = proxy(&introspector, &servers, &tls_section(&pki)).await;
    let (h2c_proxy, h2c_path, h2c_port) = proxy(&introspector, &servers, "h2c: true").await;
    let tls_url = format!("https://localhost:{tls_port}/sse");
    let h2c_url = format!("http://127.0.0.1:{h2c_port}/sse");
    let cases: [(&[&str], &str, &str); 3] = [
        (&["--http2", "--cacert", &ca], &tls_url, "2"),
        (&["--http1.1", "--cacert", &ca], &tls_url, "1.1"),
        (&["--http2-prior-knowledge"], &h2c_url, "2"),
    ];
    for (args, url, version) in cases {
        // The first event comes at once, the second a second later: cut at 0.7 s, curl has the
        // first (it was not held back until the stream ended).
        let started = Instant::now();
        let (code, body, _) = curl(args, url, "0.7").await;
        assert_eq!(code, 28, "cut by --max-time: {body:?}");
        assert!(body.contains("data: tick 0"), "{version}: {body:?}");
        assert!(!body.contains("tick 1"), "{version}: {body:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        // Whole, it ends cleanly with all three.
        let (code, body, seen_version) = curl(args, url, "5").await;
        assert_eq!((code, seen_version.as_str()), (0, version), "{body:?}");
        for i in 0..3 {
            assert!(
                body.contains(&format!("id: {i}\ndata: tick {i}\n\n")),
                "{body:?}"
            );
        }
    }
    for (p, path) in [(tls_proxy, tls_path), (h2c_proxy, h2c_path)] {
        let _ = std::fs::remove_file(path);
        tokio::task::spawn_blocking(move || p.shutdown_now())
            .await
            .unwrap();
    }
}
