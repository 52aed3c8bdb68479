//! Upstream connections held for a client's requests (security round 4, Deliver 1): one HTTP/2
//! connection cannot hold more upstream connections than its streams (at most
//! `H2_MAX_STREAMS`, 100: the 50 streams beyond are refused), and an upstream connection is
//! released about a second after the upstream has answered, though the request body never
//! comes (Pingora keeps it to send the rest of the body; the proxy's `body_idle_timeout`, 30 s
//! here, would otherwise decide), over HTTP/2 (python `h2` as the client) and HTTP/1.1, an
//! answer with a body or one complete with its head.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ROUTES, config_yaml, start_proxy, two_free_ports};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy's `body_idle_timeout` here: far longer than the release the tests expect.
const BODY_IDLE: Duration = Duration::from_secs(30);
/// Released within this of the answer (the proxy's 1 s, and a loaded machine's slack).
const RELEASED_WITHIN: Duration = Duration::from_secs(8);

/// An upstream that answers `200` as soon as a request head arrives, without reading the body,
/// and keeps the connection until the proxy closes it; counts the connections open now, the
/// most at once, and when the last one closed.
#[derive(Clone, Default)]
struct Upstream {
    open: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    last_close: Arc<Mutex<Option<Instant>>>,
    /// Answer `401` with no body (`Content-Length: 0`) instead.
    empty: bool,
}

impl Upstream {
    async fn start(&self) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let me = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move { me.serve(stream).await });
            }
        });
        addr
    }

    async fn serve(&self, mut stream: TcpStream) {
        self.accepted.fetch_add(1, Ordering::SeqCst);
        let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        let mut answered = false;
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    head.extend_from_slice(&buf[..n]);
                    if !answered && head.windows(4).any(|w| w == b"\r\n\r\n") {
                        answered = true;
                        let answer: &[u8] = if self.empty {
                            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"
                        } else {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                        };
                        if stream.write_all(answer).await.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
        *self.last_close.lock().unwrap() = Some(Instant::now());
    }

    /// Waits up to `within` until no connection is open; how long that took (`None`: never).
    async fn all_closed(&self, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < within {
            if self.accepted.load(Ordering::SeqCst) > 0 && self.open.load(Ordering::SeqCst) == 0 {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

async fn proxy(
    stem: &str,
    upstream: std::net::SocketAddr,
) -> (proxy::ProxyHandle, std::path::PathBuf, u16) {
    let (listen, admin) = two_free_ports();
    let yaml = format!(
        "{}\nh2c: true\nconnections: {{ body_idle_timeout: {}s }}\n",
        config_yaml(listen, admin, "http://127.0.0.1:9/", upstream, ROUTES),
        BODY_IDLE.as_secs()
    );
    let (handle, path) = start_proxy(stem, &yaml).await;
    (handle, path, listen)
}

/// `streams` stalled POSTs on one h2c connection (python `h2`), the first 100 sending `first`
/// bytes of their body, read for `hold`: its JSON result.
async fn many_streams(port: u16, streams: usize, first: usize, hold: Duration) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2/many_streams.py");
    let args = [
        script.to_owned(),
        "127.0.0.1".to_owned(),
        port.to_string(),
        streams.to_string(),
        "/public/upload".to_owned(),
        hold.as_secs().to_string(),
        first.to_string(),
    ];
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .expect("python3 runs")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("many_streams.py said: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_h2_connection_holds_at_most_100_upstream_connections_released_once_answered() {
    if !common::have_h2() {
        return;
    }
    let upstream = Upstream::default();
    let addr = upstream.start().await;
    let (handle, path, listen) = proxy("h2-upstream-bound", addr).await;

    // A piece of each body comes: a stream whose body never starts gets no upstream connection
    // at all (`many_streams_without_a_body_get_no_upstream_connection`).
    let result = many_streams(listen, 150, 10, Duration::from_secs(20)).await;
    let most = upstream.most.load(Ordering::SeqCst);
    let accepted = upstream.accepted.load(Ordering::SeqCst);
    eprintln!(
        "150 streams on one connection: {result}; upstream connections: {most} at once, {accepted} in all"
    );
    assert!(
        most <= 100,
        "upstream connections at once: {most} ({result})"
    );
    assert!(
        accepted <= 100,
        "upstream connections in all: {accepted} ({result})"
    );
    assert!(result["refused"].as_u64() >= Some(50), "{result}");
    assert!(result["responses"].as_u64() >= Some(1), "{result}");
    // Every stream either answered or refused, none lost.
    assert_eq!(
        result["responses"].as_u64().unwrap_or(0) + result["refused"].as_u64().unwrap_or(0),
        150,
        "{result}"
    );
    // The upstream answered every stream at once; their bodies never came. The connection (and
    // with it every upstream connection) ends about a second after the answers, not after
    // body_idle_timeout.
    let closed = result["closed_after"].as_f64();
    assert!(
        closed.is_some_and(|s| s < RELEASED_WITHIN.as_secs_f64()),
        "connection closed after {closed:?} s ({result})"
    );
    assert!(
        upstream.all_closed(RELEASED_WITHIN).await.is_some(),
        "upstream connections still open: {}",
        upstream.open.load(Ordering::SeqCst)
    );

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || handle.shutdown_now())
        .await
        .unwrap();
}

/// A stream whose request body never starts costs no upstream connection (the proxy connects
/// upstream once a first piece of the body has come): 50 such streams, no upstream connection
/// and no answer while they wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_without_a_body_get_no_upstream_connection() {
    if !common::have_h2() {
        return;
    }
    let upstream = Upstream::default();
    let addr = upstream.start().await;
    let (handle, path, listen) = proxy("h2-no-body-no-upstream", addr).await;

    let result = many_streams(listen, 50, 0, Duration::from_secs(3)).await;
    let accepted = upstream.accepted.load(Ordering::SeqCst);
    assert_eq!(accepted, 0, "upstream connections: {accepted} ({result})");
    assert_eq!(result["responses"], 0, "{result}");
    assert_eq!(result["refused"], 0, "{result}");

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || handle.shutdown_now())
        .await
        .unwrap();
}

/// HTTP/2 streams across the listener are bounded by `connections.max`: each holds memory until
/// it ends (a stalled body up to `body_idle_timeout`), so past the budget a stream is answered
/// `503` at once and counted, and the budget comes back as streams end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_listeners_budget_are_answered_503_at_once() {
    if !common::have_h2() {
        return;
    }
    let upstream = Upstream::default();
    let addr = upstream.start().await;
    let (listen, admin) = two_free_ports();
    let yaml = format!(
        "{}\nh2c: true\nconnections: {{ max: 30, body_idle_timeout: 5s }}\n",
        config_yaml(listen, admin, "http://127.0.0.1:9/", addr, ROUTES),
    );
    let (handle, path) = start_proxy("h2-stream-budget", &yaml).await;

    let result = many_streams(listen, 50, 0, Duration::from_secs(1)).await;
    assert_eq!(result["responses"], 20, "{result}");
    assert_eq!(result["statuses"]["503"], 20, "{result}");
    assert_eq!(result["refused"], 0, "{result}");
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0, "{result}");
    let metrics = common::admin_metrics(admin).await;
    assert!(
        metrics.contains("tokengate_proxy_h2_streams_refused_total{listener=\"proxy\"} 20"),
        "{metrics}"
    );
    // The first connection is gone (the client closed it): its 30 places are free again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = many_streams(listen, 30, 0, Duration::from_secs(1)).await;
    assert_eq!(again["responses"], 0, "{again}");

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || handle.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_upstream_connection_is_released_once_answered() {
    // A body, then an answer complete with its head (no body filter follows it).
    for empty in [false, true] {
        http1_released(empty).await;
    }
}

async fn http1_released(empty: bool) {
    let upstream = Upstream {
        empty,
        ..Upstream::default()
    };
    let addr = upstream.start().await;
    let (handle, path, listen) = proxy("h1-upstream-release", addr).await;

    let mut client = TcpStream::connect(("127.0.0.1", listen)).await.unwrap();
    client
        .write_all(
            b"POST /public/upload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n",
        )
        .await
        .unwrap();
    // The answer comes though the body never does.
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let answered = Instant::now();
    let end: &[u8] = if empty { b"\r\n\r\n" } else { b"ok" };
    while !got.windows(end.len()).any(|w| w == end) {
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
            .await
            .expect("answered")
            .unwrap();
        assert!(n > 0, "closed before the answer");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(if empty {
            b"HTTP/1.1 401"
        } else {
            b"HTTP/1.1 200"
        }),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let released = upstream.all_closed(RELEASED_WITHIN).await;
    eprintln!(
        "HTTP/1.1 (empty: {empty}): upstream connection released {released:?} after the answer"
    );
    assert!(
        released.is_some(),
        "the upstream connection was still held {:?} after the answer",
        answered.elapsed()
    );

    drop(client);
    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || handle.shutdown_now())
        .await
        .unwrap();
}
