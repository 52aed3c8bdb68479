//! gRPC through the proxy with grpcio (Python) as client and server (`tests/grpc/echo.py`):
//! h2c downstream and h2 over TLS, an h2c upstream and an h2-over-TLS one; unary, server, client and bidirectional
//! streaming calls allowed with their trailers, streams passed as they come; refusals seen by
//! the client library as UNAUTHENTICATED (16), PERMISSION_DENIED (7) and UNIMPLEMENTED (12).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{Introspector, config_yaml, echo_upstream, start_proxy, two_free_ports};
use serde_json::Value;
use test_support::pki::Pki;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/echo.py");

const ROUTES: &str = r#"
routes:
  - { name: echo, prefix: /test.Echo/, upstream: grpc, scopes: [read] }
  - { name: admin, path: /test.Admin/Do, upstream: grpc, scopes: [write] }
"#;

/// The Python gRPC server, killed on drop.
struct Server(Child, u16);

impl Server {
    /// Over h2c, or over TLS with `tls`: certificate and key files.
    fn start(tls: Option<(&std::path::Path, &std::path::Path)>) -> Server {
        let mut cmd = Command::new("python3");
        cmd.args([SCRIPT, "server"]);
        if let Some((cert, key)) = tls {
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the server prints its port");
        Server(child, port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the client against `target` and returns what it saw.
async fn client(target: String, ca: Option<String>) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new("python3");
        cmd.args([SCRIPT, "client", &target]);
        if let Some(ca) = ca {
            cmd.arg(ca);
        }
        cmd.output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(seen: &Value) {
    assert_eq!(seen["unary"], "echo:hi:alice", "{seen}");
    assert_eq!(seen["unary_trailer"], "kept", "{seen}");
    let ticks: Vec<(&str, f64)> = seen["server_stream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t[0].as_str().unwrap(), t[1].as_f64().unwrap()))
        .collect();
    assert_eq!(
        ticks.iter().map(|t| t.0).collect::<Vec<_>>(),
        ["tick0", "tick1", "tick2"]
    );
    // Sent 0.5 s apart: the first arrives long before the last (not buffered to the end).
    assert!(ticks[2].1 - ticks[0].1 >= 0.8, "{ticks:?}");
    assert_eq!(seen["server_stream_trailer"], "stream", "{seen}");
    assert_eq!(seen["client_stream"], "a+b+c");
    assert_eq!(
        seen["bidi"],
        serde_json::json!(["pong:0", "pong:1", "pong:2"])
    );
    assert_eq!(seen["no_token"], "UNAUTHENTICATED");
    assert_eq!(seen["bad_token"], "UNAUTHENTICATED");
    assert_eq!(seen["wrong_scope"], "PERMISSION_DENIED");
    assert_eq!(seen["unrouted"], "UNIMPLEMENTED");
    assert_eq!(
        seen["no_token_message"],
        "Authentication credentials were not provided."
    );
}

/// `settings`: the `grpc` upstream's settings after its address.
async fn proxy_yaml(extra: &str, grpc_port: u16, settings: &str) -> (String, u16) {
    let introspector = Introspector::start().await;
    let upstream = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let yaml = config_yaml(listen, admin, &introspector.url(), upstream, ROUTES);
    std::mem::forget(introspector);
    let yaml = yaml.replace(
        "upstreams:\n",
        &format!("upstreams:\n  grpc: {{ address: \"127.0.0.1:{grpc_port}\", {settings} }}\n"),
    );
    (format!("{extra}\n{yaml}"), listen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_through_h2c_and_tls_listeners() {
    let server = Server::start(None);

    let (yaml, listen) = proxy_yaml("h2c: true", server.1, "h2c: true").await;
    let (proxy, config) = start_proxy("grpc-h2c", &yaml).await;
    check(&client(format!("127.0.0.1:{listen}"), None).await);
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();

    let pki = Pki::new();
    let (cert, key) = pki.server("grpc");
    let tls = format!(
        "tls: {{ cert_file: {}, key_file: {} }}",
        cert.display(),
        key.display()
    );
    let (yaml, listen) = proxy_yaml(&tls, server.1, "h2c: true").await;
    let (proxy, config) = start_proxy("grpc-tls", &yaml).await;
    let ca = pki.ca().display().to_string();
    check(&client(format!("127.0.0.1:{listen}"), Some(ca)).await);
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// gRPC to an upstream over TLS (h2 by ALPN), verified with the test CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_to_a_tls_upstream() {
    let pki = Pki::new();
    let (cert, key) = pki.server("grpc-upstream");
    let server = Server::start(Some((&cert, &key)));
    let upstream = format!(
        "tls: {{ ca_file: \"{}\", sni: localhost }}",
        pki.ca().display()
    );
    let (yaml, listen) = proxy_yaml("h2c: true", server.1, &upstream).await;
    let (proxy, config) = start_proxy("grpc-upstream-tls", &yaml).await;
    check(&client(format!("127.0.0.1:{listen}"), None).await);
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
