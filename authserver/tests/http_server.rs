//! The server loop over real sockets, with raw bytes: oversized and slow requests, graceful
//! shutdown, and the socket peer as the client's address.

use authserver::config::Settings;
use authserver::store::GrantType;
use authserver::{AppState, app, testing};
use http_serving::{Limits, serve};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Short deadlines, so the slow clients below are given up on quickly.
const QUICK: Limits = Limits {
    max_body: 64 * 1024,
    header_timeout: Duration::from_millis(300),
    body_timeout: Duration::from_millis(300),
};

struct Server {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(limits: Limits) -> Server {
    start_on(testing::sqlite_store().await, limits).await
}

async fn start_on(store: authserver::store::Store, limits: Limits) -> Server {
    let state = AppState::new(Settings::for_tests("unused"), store);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app(state), limits, async move {
        let _ = stopped.await;
    }));
    Server { addr, stop, task }
}

/// Everything the server sends until it closes the connection, or what came within `within`.
async fn read_all(stream: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut received = Vec::new();
    let deadline = Instant::now() + within;
    let mut buffer = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&received).into(), true),
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => return (String::from_utf8_lossy(&received).into(), false),
        }
    }
}

const TOKEN_HEAD: &str =
    "POST /o/token/ HTTP/1.1\r\nHost: auth\r\nContent-Type: application/x-www-form-urlencoded\r\n";

#[tokio::test]
async fn an_announced_body_over_the_limit_is_413_at_once() {
    let server = start(Limits::DEFAULT).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(format!("{TOKEN_HEAD}Content-Length: 99999999999\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (reply, closed) = read_all(&mut stream, Duration::from_secs(1)).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:?}");
    assert!(reply.contains("Request body is too large."), "{reply}");
    assert!(
        closed,
        "the connection is closed, the body is not waited for"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_413() {
    let server = start(QUICK).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let chunk = "a".repeat(40 * 1024);
    let request = format!(
        "{TOKEN_HEAD}Transfer-Encoding: chunked\r\n\r\n{len:x}\r\n{chunk}\r\n{len:x}\r\n{chunk}\r\n0\r\n\r\n",
        len = chunk.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (reply, _) = read_all(&mut stream, Duration::from_secs(2)).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:?}");
}

#[tokio::test]
async fn a_body_sent_in_chunks_reaches_the_handler_whole() {
    let store = testing::sqlite_store().await;
    let (id, secret) = testing::application(&store, GrantType::ClientCredentials, false).await;
    let server = start_on(store, QUICK).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let basic = test_support::basic_auth(&id, &secret);
    let head = format!("{TOKEN_HEAD}Authorization: {basic}\r\nTransfer-Encoding: chunked\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // Three chunks written apart, so the server reads them as three frames: a lost or
    // reordered one would not spell the grant type.
    for part in ["grant_type=cl", "ient_crede", "ntials"] {
        let chunk = format!("{:x}\r\n{part}\r\n", part.len());
        stream.write_all(chunk.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let (reply, _) = read_all(&mut stream, Duration::from_millis(500)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
    assert!(reply.contains("\"access_token\""), "{reply}");
}

#[tokio::test]
async fn a_body_with_a_malformed_chunk_is_400() {
    let server = start(QUICK).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request =
        format!("{TOKEN_HEAD}Transfer-Encoding: chunked\r\n\r\nzz\r\ngrant_type\r\n0\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (reply, _) = read_all(&mut stream, Duration::from_secs(1)).await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply:?}");
    assert!(
        reply.contains("The request body could not be read."),
        "{reply}"
    );
    assert!(reply.contains("connection: close"), "{reply}");
}

/// The limit is the largest body accepted: `max_body` bytes reach the handler (which refuses
/// the form for what it says, not for its size), one byte more is 413.
#[tokio::test]
async fn a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413() {
    let server = start(QUICK).await;
    for (length, too_large) in [(QUICK.max_body, false), (QUICK.max_body + 1, true)] {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let request = format!(
            "{TOKEN_HEAD}Content-Length: {length}\r\n\r\n{}",
            "a".repeat(length)
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let (reply, _) = read_all(&mut stream, Duration::from_secs(1)).await;
        assert_eq!(
            reply.starts_with("HTTP/1.1 413"),
            too_large,
            "{length} bytes: {}",
            reply.lines().next().unwrap_or_default()
        );
        assert!(reply.starts_with("HTTP/1.1 4"), "{reply:?}");
    }
}

/// The body is read before routing: a path nothing serves is refused an oversized body with
/// 413 like any other, and a stalled one with 408, not kept waiting for a 404.
#[tokio::test]
async fn the_body_limits_hold_on_a_path_nothing_serves() {
    let server = start(QUICK).await;
    let head = "POST /nowhere HTTP/1.1\r\nHost: auth\r\n";
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(format!("{head}Content-Length: 99999999999\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (reply, _) = read_all(&mut stream, Duration::from_secs(1)).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:?}");
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(format!("{head}Content-Length: 10\r\n\r\nabc").as_bytes())
        .await
        .unwrap();
    let (reply, _) = read_all(&mut stream, Duration::from_secs(2)).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
}

#[tokio::test]
async fn a_client_that_stalls_in_its_headers_is_disconnected() {
    let server = start(QUICK).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /o/token/ HTTP/1.1\r\nHost: auth\r\nContent-Ty")
        .await
        .unwrap();
    let started = Instant::now();
    let (_, closed) = read_all(&mut stream, Duration::from_secs(3)).await;
    assert!(closed, "still connected after {:?}", started.elapsed());
    assert_closed_at_the_deadline(started.elapsed());
    // A connection that never says anything is closed the same way.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let (_, closed) = read_all(&mut silent, Duration::from_secs(3)).await;
    assert!(closed);
    assert_closed_at_the_deadline(started.elapsed());
}

/// A connection closed for its headers was closed at [`QUICK`]'s header deadline, not before
/// and not half a deadline after.
fn assert_closed_at_the_deadline(after: Duration) {
    assert!(
        after >= QUICK.header_timeout - Duration::from_millis(50)
            && after < QUICK.header_timeout * 3 / 2,
        "closed after {after:?}, the deadline is {:?}",
        QUICK.header_timeout
    );
}

/// Each request's headers have the whole deadline from the end of the answer before: a kept-alive
/// connection whose requests come in time stays open for longer than one deadline, and is
/// closed one deadline after its last answer. (The pauses put that last deadline just after two
/// deadlines from the connection's start, so a server that checked the deadline only once every
/// deadline-long interval would close it most of a deadline late.)
#[tokio::test]
async fn each_request_on_a_kept_alive_connection_has_its_own_header_deadline() {
    let server = start(QUICK).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: auth\r\n\r\n";
    let pause = QUICK.header_timeout * 8 / 15;
    for _ in 0..3 {
        stream.write_all(request).await.unwrap();
        let (reply, closed) = read_all(&mut stream, pause).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
        assert!(!closed, "closed after an answer sent in time");
    }
    let last = Instant::now();
    let (_, closed) = read_all(&mut stream, Duration::from_secs(3)).await;
    assert!(closed);
    assert_closed_at_the_deadline(last.elapsed() + pause);
}

#[tokio::test]
async fn a_client_that_stalls_in_its_body_gets_408() {
    let server = start(QUICK).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(format!("{TOKEN_HEAD}Content-Length: 100\r\n\r\ngrant_type=pa").as_bytes())
        .await
        .unwrap();
    let (reply, closed) = read_all(&mut stream, Duration::from_secs(3)).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
    assert!(closed);
}

#[tokio::test]
async fn shutdown_stops_accepting_and_lets_requests_in_flight_finish() {
    let server = start(Limits::DEFAULT).await;
    let body = "grant_type=password&username=a&password=b";
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(format!("{TOKEN_HEAD}Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(&body.as_bytes()[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "no new connections"
    );
    assert!(
        !server.task.is_finished(),
        "waits for the request in flight"
    );
    stream.write_all(&body.as_bytes()[10..]).await.unwrap();
    let (reply, closed) = read_all(&mut stream, Duration::from_secs(3)).await;
    // No client authentication: the endpoint's own answer, not a dropped connection.
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply:?}");
    assert!(closed);
    tokio::time::timeout(Duration::from_secs(3), server.task)
        .await
        .expect("the server returns once drained")
        .unwrap()
        .unwrap();
}

/// A password grant over a socket with this `X-Forwarded-For`; the status code.
async fn grant(addr: SocketAddr, basic: &str, forwarded: &str, password: &str) -> u16 {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/o/token/"))
        .header("Authorization", basic)
        .header("X-Forwarded-For", forwarded)
        .form(&[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", password),
        ])
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

#[tokio::test]
async fn the_socket_peer_decides_whose_forwarded_for_is_believed() {
    for trust_loopback in [true, false] {
        let store = testing::sqlite_store().await;
        testing::user(&store, "alice", "wonderland").await;
        let (id, secret) = testing::application(&store, GrantType::Password, false).await;
        let basic = test_support::basic_auth(&id, &secret);
        let mut settings = Settings::for_tests("unused");
        if !trust_loopback {
            settings.trusted_proxies.clear();
        }
        let server = testing::spawn_server(store, settings, "127.0.0.1:0".parse().unwrap()).await;
        for i in 0..5 {
            let spoofed = if trust_loopback {
                "203.0.113.1".to_owned()
            } else {
                format!("203.0.113.{i}")
            };
            assert_eq!(grant(server.addr, &basic, &spoofed, "guess").await, 400);
        }
        let expected = if trust_loopback {
            // The default trusts loopback: its X-Forwarded-For names the client.
            assert_eq!(
                grant(server.addr, &basic, "203.0.113.1", "wonderland").await,
                429
            );
            200
        } else {
            // Nothing trusted: the socket peer is the client, whatever the header says.
            429
        };
        assert_eq!(
            grant(server.addr, &basic, "203.0.113.2", "wonderland").await,
            expected,
            "trust loopback: {trust_loopback}"
        );
        server.stop().await;
    }
}
