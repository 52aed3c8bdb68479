//! HTTP/2 and TLS connections that never finish, against the `proxy` binary over TLS (security
//! round 4, item 1): started under a 1,024 open-file soft limit, which it raises to the hard
//! limit and says so; 1,030 HTTP/2 connections with a stream each, and 10 with 100 streams each,
//! whose request bodies never come (python `h2` as the client) are closed at the body idle
//! deadline, and 1,100 TLS handshakes that never start are cut at the head deadline, counted
//! against the listener's cap; meanwhile good clients (a new TLS connection per request) and
//! `/healthz` keep at least 95 % success, and the RSS stays in a sidecar's 128 MiB.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Collected, config_yaml, echo_upstream, temp_path, two_free_ports};
use serde_json::Value;
use test_support::pki::Pki;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_proxy");
const DEADLINE: Duration = Duration::from_secs(2);
/// Each attack connection is closed within its deadline and this much more (a loaded machine).
const SLACK: Duration = Duration::from_secs(8);
const MIB: u64 = 1024 * 1024;
const STALLED_H2: usize = 1030;
const STALLED_TLS: usize = 1100;

/// Raises this process's soft open-file limit (children inherit it) to `want`, with prlimit(1).
fn raise_own_open_files(want: u64) {
    let _ = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={want}:{want}"))
        .status();
}

struct Proxy {
    process: Collected,
    listen: u16,
    admin: u16,
    stderr: Arc<Mutex<String>>,
    config: std::path::PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

impl Proxy {
    fn rss(&self) -> u64 {
        self.process.rss()
    }

    async fn metric(&self, name: &str) -> u64 {
        let text = common::admin_metrics(self.admin).await;
        let key = format!("{name}{{listener=\"proxy\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key}"))
    }
}

/// The `proxy` binary with TLS, started with open files limited to 1,024 (soft) and 8,192.
async fn start(pki: &Pki) -> Proxy {
    let (cert, key) = pki.server("proxy");
    let upstream = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let secs = DEADLINE.as_secs();
    let yaml = format!(
        "{}\ntls: {{ cert_file: \"{}\", key_file: \"{}\" }}\nconnections: {{ head_timeout: {secs}s, body_idle_timeout: {secs}s, max: 4000 }}\n",
        config_yaml(
            listen,
            admin,
            "http://127.0.0.1:9/",
            upstream,
            common::ROUTES
        ),
        cert.display(),
        key.display()
    );
    let config = temp_path("h2-stalls");
    std::fs::write(&config, yaml).unwrap();
    let process = Collected::spawn(
        Command::new("prlimit")
            .arg("--nofile=1024:8192")
            .arg(BIN)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info"),
    );
    let stderr = process.stderr.clone();
    let proxy = Proxy {
        process,
        listen,
        admin,
        stderr,
        config,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(format!("http://127.0.0.1:{admin}/healthz"))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "proxy did not start: {}",
            proxy.stderr.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy
}

/// The stalled HTTP/2 clients: `conns` connections of `streams` streams each.
fn stall_h2(pki: &Pki, port: u16, conns: usize, streams: usize) -> Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2/stall.py");
    Command::new("python3")
        .arg(script)
        .args(["127.0.0.1", &port.to_string()])
        .arg(pki.ca())
        .args([&conns.to_string(), &streams.to_string(), "/public/upload"])
        .arg("20")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs")
}

/// The JSON line the stall script ends with.
fn stall_result(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|_| panic!("stall.py said: {text}"))
}

/// A TCP connection to the TLS listener that never sends its ClientHello: how long until the
/// proxy closes it (`None`: not within `give_up`).
async fn stalled_handshake(port: u16, give_up: Duration) -> Option<Duration> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let started = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(give_up, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_h2_streams_and_tls_handshakes_are_cut_while_good_clients_pass() {
    if !common::have_h2() {
        return;
    }
    raise_own_open_files(16384);
    let pki = Pki::new();
    let proxy = start(&pki).await;
    {
        let log = proxy.stderr.lock().unwrap();
        assert!(
            log.contains("raised the open-file soft limit to the hard limit")
                && log.contains("from=1024")
                && log.contains("to=8192"),
            "{log}"
        );
    }
    let baseline = proxy.rss();

    // Good clients: a new TLS connection (and handshake) per request, and /healthz, all along.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.ca()).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (good, bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (probes_ok, probes_bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let good_clients = {
        let (stop, good, bad) = (stop.clone(), good.clone(), bad.clone());
        let url = format!("https://localhost:{}/public/x", proxy.listen);
        let client = client.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let ok = client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200);
                (if ok { &good } else { &bad }).fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let prober = {
        let (stop, ok, failed) = (stop.clone(), probes_ok.clone(), probes_bad.clone());
        let url = format!("http://127.0.0.1:{}/healthz", proxy.admin);
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let up = client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200);
                (if up { &ok } else { &failed }).fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let attack_started = Instant::now();
    // Many connections with one stalled stream each; a few with 100 stalled streams each.
    let wide = stall_h2(&pki, proxy.listen, STALLED_H2, 1);
    let deep = stall_h2(&pki, proxy.listen, 10, 100);
    // Handshakes that never start.
    let give_up = DEADLINE + SLACK;
    let handshakes: Vec<_> = (0..STALLED_TLS)
        .map(|_| tokio::spawn(stalled_handshake(proxy.listen, give_up)))
        .collect();
    let mut peak = proxy.rss();
    let mut open_peak = 0;
    let sampler_until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < sampler_until {
        peak = peak.max(proxy.rss());
        open_peak = open_peak.max(proxy.metric("tokengate_proxy_connections").await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut cut = Vec::new();
    for h in handshakes {
        cut.push(h.await.unwrap());
    }
    let (wide, deep) =
        tokio::task::spawn_blocking(move || (stall_result(wide), stall_result(deep)))
            .await
            .unwrap();
    let attack = attack_started.elapsed();
    peak = peak.max(proxy.rss());
    stop.store(true, Ordering::Relaxed);
    let _ = good_clients.await;
    let _ = prober.await;

    let (good, bad) = (good.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
    let (probes_ok, probes_bad) = (
        probes_ok.load(Ordering::Relaxed),
        probes_bad.load(Ordering::Relaxed),
    );
    let longest_tls = cut.iter().flatten().max().copied().unwrap_or_default();
    eprintln!(
        "attack of {attack:?}: h2 {wide} / {deep}; {} of {STALLED_TLS} stalled handshakes cut, the last after {longest_tls:?}; {open_peak} connections open at most; good requests {good} ok, {bad} failed; /healthz {probes_ok} ok, {probes_bad} failed; RSS {} KiB before, {} KiB peak",
        cut.iter().flatten().count(),
        baseline / 1024,
        peak / 1024,
    );
    for (name, r, conns) in [("wide", &wide, STALLED_H2), ("deep", &deep, 10)] {
        assert_eq!(
            r["open"], conns as u64,
            "{name}: every attack connection opened"
        );
        assert_eq!(
            r["closed"], r["open"],
            "{name}: every attack connection closed"
        );
        let longest = r["longest"].as_f64().unwrap();
        assert!(
            longest < (DEADLINE + SLACK).as_secs_f64(),
            "{name}: a connection was held {longest} s"
        );
    }
    assert!(
        cut.iter().all(Option::is_some),
        "every stalled handshake cut within {give_up:?}"
    );
    assert!(
        open_peak > 1000,
        "the attack held connections at once ({open_peak}): it was one"
    );
    assert!(good >= 20, "good clients made {good} requests");
    assert!(
        good * 100 >= (good + bad) * 95,
        "good clients: {good} ok, {bad} failed"
    );
    assert!(
        probes_ok * 100 >= (probes_ok + probes_bad) * 95,
        "/healthz: {probes_ok} ok, {probes_bad} failed"
    );
    // The sidecar's budget is 128 MiB. Release: 181 MiB peak while each stalled stream was
    // proxied at once (an upstream connection and its 64 KiB read buffer each); 101 MiB since
    // the upstream is connected only once a body has begun (2026-11-28); on a VM whose kernel
    // grants transparent huge pages on request, 132-159 MiB (this test failed), and 104-107 MiB
    // since the binary turns them off (resource_server::allocator). A debug build keeps
    // more per connection (152-197 MiB before, 192 MiB after: its bound is a guard against
    // leaks only); `cargo test --release` checks the budget itself, and
    // `h2_upstream_bound.rs::many_streams_without_a_body_get_no_upstream_connection` the cause.
    let budget = if cfg!(debug_assertions) { 256 } else { 128 };
    assert!(peak < budget * MIB, "peak RSS {} MiB", peak / MIB);
    assert!(
        proxy.metric("tokengate_proxy_h2_body_timeouts_total").await >= (STALLED_H2 + 10) as u64
    );
    assert!(
        proxy
            .metric("tokengate_proxy_tls_handshake_failures_total")
            .await
            >= STALLED_TLS as u64
    );
    let log = proxy.stderr.lock().unwrap();
    assert!(
        !log.contains("ERROR"),
        "no error line per stalled handshake: {}",
        log.lines()
            .filter(|l| l.contains("ERROR"))
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
