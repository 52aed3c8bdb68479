//! The SIGTERM drain (issue 9): keep-alive clients sending across the stop lose no request, each
//! connection is told `Connection: close` on its next response, `/readyz` turns 503 at once, an
//! in-flight request finishes, and an idle proxy stops without waiting out the grace period.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Introspector, config_yaml, echo_upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GRACE: &str = "grace_period: 10s";

async fn start_proxy() -> proxy::ProxyHandle {
    let introspector = Introspector::start().await;
    let upstream = echo_upstream().await;
    let (listen, admin) = common::two_free_ports();
    let yaml = config_yaml(listen, admin, &introspector.url(), upstream, common::ROUTES)
        .replace("grace_period: 1s", GRACE);
    let (proxy, path) = common::start_proxy("drain", &yaml).await;
    let _ = std::fs::remove_file(&path);
    proxy
}

/// One response read off a kept-alive connection: status and whether it closes the connection.
async fn read_response(stream: &mut TcpStream) -> std::io::Result<(u16, bool)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await?;
    Ok((status, text.contains("\r\nconnection: close")))
}

/// What one keep-alive client saw.
#[derive(Debug, Default)]
struct Seen {
    answered: usize,
    /// Requests written that got no complete answer.
    failed: usize,
    told_to_close: bool,
}

/// Sends `GET path` on one connection until told to close (as a client behind a load balancer
/// would then go elsewhere) or `stop` is set; each answer must be `status`.
async fn keep_alive_client(
    addr: SocketAddr,
    path: &str,
    status: u16,
    stop: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen::default();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    while !stop.load(Ordering::Relaxed) {
        if stream.write_all(request.as_bytes()).await.is_err() {
            seen.failed += 1;
            break;
        }
        match read_response(&mut stream).await {
            Ok((answer, close)) if answer == status => {
                seen.answered += 1;
                if close {
                    seen.told_to_close = true;
                    break;
                }
            }
            _ => {
                seen.failed += 1;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_clients_sending_across_sigterm_lose_nothing() {
    let proxy = start_proxy().await;
    let addr = proxy.listen_addr();
    let admin = proxy.admin_addr();
    let stop = Arc::new(AtomicBool::new(false));
    // Forwarded requests, and refusals written by the proxy itself (no token: 401).
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let (path, status) = if i % 2 == 0 {
                ("/public/drain", 200)
            } else {
                ("/read", 401)
            };
            tokio::spawn(keep_alive_client(addr, path, status, stop.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let stopping = tokio::task::spawn_blocking(move || proxy.shutdown());
    // Not ready at once, with the reason.
    let mut saw_draining = false;
    while started.elapsed() < Duration::from_secs(1) {
        if let Ok(response) = reqwest::get(format!("http://{admin}/readyz")).await {
            let status = response.status().as_u16();
            if status == 503 && response.text().await.unwrap().contains("shutting down") {
                saw_draining = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(saw_draining, "/readyz did not turn 503 within a second");

    let mut total = 0;
    for client in clients {
        let seen = tokio::time::timeout(Duration::from_secs(5), client)
            .await
            .expect("every client is told to close during the drain")
            .unwrap();
        assert_eq!(seen.failed, 0, "{seen:?}");
        assert!(seen.told_to_close, "{seen:?}");
        total += seen.answered;
    }
    stop.store(true, Ordering::Relaxed);
    stopping.await.unwrap();
    let took = started.elapsed();
    assert!(total > 50, "the clients were sending: {total}");
    assert!(
        took < Duration::from_secs(5),
        "stopped {took:?} after the signal, long before the 10 s grace"
    );
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_request_finishes_and_an_idle_proxy_stops_quickly() {
    let proxy = start_proxy().await;
    let addr = proxy.listen_addr();
    // An idle kept-alive connection, and a slow request in flight.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /public/idle HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut idle).await.unwrap(), (200, false));
    let slow = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /public/slow HTTP/1.1\r\nHost: x\r\nx-test-delay-ms: 700\r\n\r\n")
            .await
            .unwrap();
        read_response(&mut stream).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let started = Instant::now();
    tokio::task::spawn_blocking(move || proxy.shutdown())
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(slow.await.unwrap().unwrap(), (200, true));
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(3),
        "{took:?}: waits for the request in flight, not for the 10 s grace"
    );
    // The idle connection was closed.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(1), idle.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
}
