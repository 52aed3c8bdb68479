//! Several addresses per upstream over real sockets: traffic spread over two servers; one killed
//! is ejected and no request fails (a failed connection is retried on the other address); it
//! comes back and takes traffic again; least connections favours the server that answers
//! sooner; a reload swaps the pools and their health-check loops without leaving one behind; a
//! DNS name with several addresses (a hosts file in a mount namespace) is used fully and
//! followed when it changes; weights spread traffic in proportion; an address answering 502s
//! to authenticated requests is ejected, retried after the period, and used again once it
//! answers well; anonymous requests to a public route eject nothing, whatever the upstream
//! answers; with every address ejected the traffic is still spread.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{INTROSPECTOR_TOKEN, Introspector, free_port, start_proxy, two_free_ports};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A server that names itself in every answer, counts the connections it accepted, and can be
/// killed (every socket closed at once: its runtime is shut down) and started again on its
/// address.
struct Server {
    name: &'static str,
    addr: SocketAddr,
    delay: Duration,
    accepted: Arc<AtomicUsize>,
    /// The status it answers with (200 unless a test changes it).
    status: Arc<AtomicU16>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Server {
    fn start(name: &'static str, addr: SocketAddr, delay: Duration) -> Server {
        let mut s = Server {
            name,
            addr,
            delay,
            accepted: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            runtime: None,
        };
        s.revive();
        s
    }

    fn revive(&mut self) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind(self.addr).expect("bind the server's address");
        listener.set_nonblocking(true).unwrap();
        self.addr = listener.local_addr().unwrap();
        let (name, delay, accepted) = (self.name, self.delay, self.accepted.clone());
        let status = self.status.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            while let Ok((stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let status = status.clone();
                tokio::spawn(async move {
                    let mut r = BufReader::new(stream);
                    loop {
                        // Request line and headers (the test sends no bodies).
                        let mut line = String::new();
                        loop {
                            line.clear();
                            match r.read_line(&mut line).await {
                                Ok(0) | Err(_) => return,
                                Ok(_) if line.trim().is_empty() => break,
                                Ok(_) => {}
                            }
                        }
                        tokio::time::sleep(delay).await;
                        let body = format!("{{\"server\":\"{name}\"}}");
                        let head = format!(
                            "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            status.load(Ordering::Relaxed),
                            body.len()
                        );
                        let s = r.get_mut();
                        if s.write_all(head.as_bytes()).await.is_err()
                            || s.write_all(body.as_bytes()).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        self.runtime = Some(runtime);
    }

    fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn yaml(listen: u16, admin: u16, introspector: &Introspector, upstream: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
threads: 2
grace_period: 1s
shutdown_timeout: 1s
upstreams:
  api:
{upstream}
introspection:
  url: {}
  auth_token: {INTROSPECTOR_TOKEN}
routes:
  - {{ name: public, prefix: /public/, upstream: api, public: true }}
  - {{ name: api, prefix: /api/, upstream: api }}
"#,
        introspector.url()
    )
}

/// Sends `n` requests (`parallel` at a time) and counts the answers by server name; a failed
/// request counts under its status (or "error").
async fn spread(
    client: &reqwest::Client,
    url: &str,
    n: usize,
    parallel: usize,
) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    let mut left = n;
    while left > 0 {
        let batch = left.min(parallel);
        left -= batch;
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let (client, url) = (client.clone(), url.to_owned());
            set.spawn(async move {
                match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        let v: serde_json::Value = r.json().await.unwrap_or_default();
                        v["server"].as_str().unwrap_or("?").to_owned()
                    }
                    Ok(r) => r.status().to_string(),
                    Err(_) => "error".to_owned(),
                }
            });
        }
        while let Some(answer) = set.join_next().await {
            *counts.entry(answer.unwrap()).or_default() += 1;
        }
    }
    counts
}

/// The value of the `/metrics` line starting with `prefix`.
async fn metric(client: &reqwest::Client, admin: u16, prefix: &str) -> Option<f64> {
    let text = client
        .get(format!("http://127.0.0.1:{admin}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits up to `within` for `metric` to read `want`.
async fn wait_metric(
    client: &reqwest::Client,
    admin: u16,
    prefix: &str,
    want: f64,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let got = metric(client, admin, prefix).await;
        if got == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{prefix} is {got:?}, not {want}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client whose every request carries the stand-in's `read` token.
fn authenticated_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_static("Bearer read"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// How many of `counts` were answered with `status` (counted as "503 Service Unavailable").
fn answered(counts: &HashMap<String, usize>, status: &str) -> usize {
    counts
        .iter()
        .filter(|(k, _)| k.split(' ').next() == Some(status))
        .map(|(_, n)| n)
        .sum()
}

fn ejections_line(addr: SocketAddr) -> String {
    format!(
        "tokengate_proxy_upstream_address_ejections_total{{upstream=\"api\",address=\"{addr}\"}}"
    )
}

fn up_line(addr: SocketAddr) -> String {
    format!("tokengate_proxy_upstream_address_up{{upstream=\"api\",address=\"{addr}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_spreads_a_dead_server_is_ejected_without_failures_and_comes_back() {
    let introspector = Introspector::start().await;
    let mut a = Server::start("a", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let b = Server::start("b", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let (listen, admin) = two_free_ports();
    let upstream = format!(
        "    addresses: [\"{}\", \"{}\"]\n    health_check: {{ interval: 200ms, timeout: 200ms, unhealthy_after: 1, healthy_after: 1 }}\n    eject: {{ duration: 30s }}",
        a.addr, b.addr
    );
    let (proxy, path) =
        start_proxy("balance", &yaml(listen, admin, &introspector, &upstream)).await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{listen}/public/x");

    let counts = spread(&client, &url, 200, 4).await;
    assert_eq!(
        counts.get("a").copied().unwrap_or(0) + counts.get("b").copied().unwrap_or(0),
        200,
        "{counts:?}"
    );
    for s in ["a", "b"] {
        assert!(counts[s] >= 80, "round robin spreads evenly: {counts:?}");
    }

    // Killed between requests: the next requests that pick it fail to connect and are retried
    // on b (none fails); it is ejected, and its health checks keep it out.
    a.kill();
    let counts = spread(&client, &url, 100, 4).await;
    assert_eq!(
        counts.get("b"),
        Some(&100),
        "no failed request, all on b: {counts:?}"
    );
    wait_metric(
        &client,
        admin,
        &up_line(a.addr),
        0.0,
        Duration::from_secs(3),
    )
    .await;
    let ejections = format!(
        "tokengate_proxy_upstream_address_ejections_total{{upstream=\"api\",address=\"{}\"}}",
        a.addr
    );
    let counts = spread(&client, &url, 100, 4).await;
    assert_eq!(counts.get("b"), Some(&100), "after ejection: {counts:?}");
    assert!(
        metric(&client, admin, &ejections).await >= Some(1.0),
        "a was ejected passively"
    );

    // Back: the health check sees it (ending the 30 s ejection early) and it takes traffic.
    a.revive();
    wait_metric(
        &client,
        admin,
        &up_line(a.addr),
        1.0,
        Duration::from_secs(3),
    )
    .await;
    let counts = spread(&client, &url, 100, 4).await;
    assert!(
        counts.get("a").copied().unwrap_or(0) >= 30,
        "a is used again: {counts:?}"
    );
    assert_eq!(
        counts.values().sum::<usize>(),
        counts.get("a").unwrap_or(&0) + counts.get("b").unwrap_or(&0)
    );

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_connections_sends_more_to_the_server_that_answers_sooner() {
    let introspector = Introspector::start().await;
    let slow = Server::start(
        "slow",
        "127.0.0.1:0".parse().unwrap(),
        Duration::from_millis(300),
    );
    let fast = Server::start("fast", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let mut shares = Vec::new();
    for balance in ["round_robin", "least_connections"] {
        let (listen, admin) = two_free_ports();
        let upstream = format!(
            "    addresses: [\"{}\", \"{}\"]\n    balance: {balance}",
            slow.addr, fast.addr
        );
        let (proxy, path) =
            start_proxy("least", &yaml(listen, admin, &introspector, &upstream)).await;
        let client = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{listen}/public/x");
        // Eight clients, each sending its next request when the last is answered.
        let counts = Arc::new(std::sync::Mutex::new(HashMap::<String, usize>::new()));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (client, url, counts) = (client.clone(), url.clone(), counts.clone());
            tasks.push(tokio::spawn(async move {
                let until = Instant::now() + Duration::from_millis(1500);
                while Instant::now() < until {
                    let r = client.get(&url).send().await.unwrap();
                    let v: serde_json::Value = r.json().await.unwrap();
                    *counts
                        .lock()
                        .unwrap()
                        .entry(v["server"].as_str().unwrap().to_owned())
                        .or_default() += 1;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let counts = counts.lock().unwrap().clone();
        let fast_n = counts.get("fast").copied().unwrap_or(0) as f64;
        let total = counts.values().sum::<usize>() as f64;
        shares.push((balance, fast_n / total, counts));
        let _ = std::fs::remove_file(path);
        tokio::task::spawn_blocking(move || proxy.shutdown_now())
            .await
            .unwrap();
    }
    let (_, rr, rr_counts) = &shares[0];
    let (_, lc, lc_counts) = &shares[1];
    assert!(
        (0.4..=0.6).contains(rr),
        "round robin alternates: {rr_counts:?}"
    );
    assert!(
        *lc >= 0.8,
        "least connections favours the fast server: {lc_counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_pools_and_stops_the_old_health_checks() {
    let introspector = Introspector::start().await;
    let a = Server::start("a", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let b = Server::start("b", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let (listen, admin) = two_free_ports();
    let checked = |addrs: &str, interval: &str| {
        format!(
            "    addresses: [{addrs}]\n    health_check: {{ interval: {interval}, timeout: 200ms }}"
        )
    };
    let both = format!("\"{}\", \"{}\"", a.addr, b.addr);
    let only_b = format!("\"{}\"", b.addr);
    let (proxy, path) = start_proxy(
        "reload",
        &yaml(listen, admin, &introspector, &checked(&both, "100ms")),
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{listen}/public/x");
    let loops = "tokengate_proxy_upstream_background_loops ";
    wait_metric(&client, admin, loops, 1.0, Duration::from_secs(3)).await;

    // Every reload below changes the pool: a new one, with a loop of its own, the old one's
    // stopped. Ten of them leave one loop.
    for i in 0..10 {
        let interval = format!("{}ms", 100 + i);
        std::fs::write(
            &path,
            yaml(listen, admin, &introspector, &checked(&both, &interval)),
        )
        .unwrap();
        tokio::task::block_in_place(|| proxy.reload()).expect("reload");
        wait_metric(&client, admin, loops, 1.0, Duration::from_secs(3)).await;
    }
    let counts = spread(&client, &url, 40, 4).await;
    assert!(
        counts.contains_key("a") && counts.contains_key("b"),
        "{counts:?}"
    );

    // a leaves the pool: its health checks stop (no new connection in a second) and it gets no
    // request.
    std::fs::write(
        &path,
        yaml(listen, admin, &introspector, &checked(&only_b, "100ms")),
    )
    .unwrap();
    tokio::task::block_in_place(|| proxy.reload()).expect("reload");
    wait_metric(&client, admin, loops, 1.0, Duration::from_secs(3)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = a.accepted.load(Ordering::Relaxed);
    let counts = spread(&client, &url, 40, 4).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(counts.get("b"), Some(&40), "{counts:?}");
    assert_eq!(
        a.accepted.load(Ordering::Relaxed),
        before,
        "no health check reaches a any more"
    );
    assert!(b.accepted.load(Ordering::Relaxed) > 0);

    // One IP address and no health check: no loop at all.
    std::fs::write(
        &path,
        yaml(
            listen,
            admin,
            &introspector,
            &format!("    address: {only_b}"),
        ),
    )
    .unwrap();
    tokio::task::block_in_place(|| proxy.reload()).expect("reload");
    wait_metric(&client, admin, loops, 0.0, Duration::from_secs(3)).await;

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// The proxy binary in a mount namespace of its own whose /etc/hosts is `hosts` (root only).
fn proxy_with_hosts(config: &std::path::Path, hosts: &std::path::Path) -> Option<Child> {
    let script = format!(
        "mount --bind {} /etc/hosts && exec {} --config {}",
        hosts.display(),
        env!("CARGO_BIN_EXE_proxy"),
        config.display()
    );
    let probe = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!("mount --bind {} /etc/hosts", hosts.display()),
        ])
        .stderr(Stdio::null())
        .status()
        .ok()?;
    if !probe.success() {
        return None;
    }
    Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_several_addresses_is_used_fully_and_followed() {
    let introspector = Introspector::start().await;
    let port = free_port();
    let two = Server::start(
        "two",
        format!("127.0.0.2:{port}").parse().unwrap(),
        Duration::ZERO,
    );
    let three = Server::start(
        "three",
        format!("127.0.0.3:{port}").parse().unwrap(),
        Duration::ZERO,
    );
    let hosts = common::temp_path("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.2 api.test\n127.0.0.3 api.test\n",
    )
    .unwrap();
    let (listen, admin) = two_free_ports();
    let config = common::temp_path("dns");
    let upstream = format!("    address: api.test:{port}\n    resolve_interval: 200ms");
    std::fs::write(&config, yaml(listen, admin, &introspector, &upstream)).unwrap();
    let Some(mut child) = proxy_with_hosts(&config, &hosts) else {
        eprintln!("skipped: no mount namespace here (needs root and unshare)");
        return;
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client
        .get(format!("http://127.0.0.1:{admin}/healthz"))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the proxy did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("http://127.0.0.1:{listen}/public/x");
    let counts = spread(&client, &url, 100, 4).await;
    let result = std::panic::AssertUnwindSafe(async {
        assert!(counts.get("two").copied().unwrap_or(0) >= 30, "{counts:?}");
        assert!(
            counts.get("three").copied().unwrap_or(0) >= 30,
            "{counts:?}"
        );
        // The name now has one address (the file changed in place: the mount follows the
        // inode); within a resolve_interval or so, only that one is used.
        std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.3 api.test\n").unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        let counts = spread(&client, &url, 40, 4).await;
        assert_eq!(counts.get("three"), Some(&40), "{counts:?}");
    });
    let outcome = futures_catch(result).await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = (std::fs::remove_file(&hosts), std::fs::remove_file(&config));
    drop((two, three));
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

/// Runs `f`, catching a panic so that the child process is killed before the test fails.
async fn futures_catch<F: std::future::Future<Output = ()>>(
    f: std::panic::AssertUnwindSafe<F>,
) -> std::thread::Result<()> {
    let mut f = Box::pin(f.0);
    std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(())) => std::task::Poll::Ready(Ok(())),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(p) => std::task::Poll::Ready(Err(p)),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_spread_traffic_in_proportion() {
    let introspector = Introspector::start().await;
    let a = Server::start("a", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let b = Server::start("b", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let (listen, admin) = two_free_ports();
    let upstream = format!(
        "    addresses: [{{ address: \"{}\", weight: 3 }}, \"{}\"]",
        a.addr, b.addr
    );
    let (proxy, path) =
        start_proxy("weights", &yaml(listen, admin, &introspector, &upstream)).await;
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{listen}/public/x");

    let counts = spread(&client, &url, 400, 4).await;
    let (on_a, on_b) = (counts.get("a").copied(), counts.get("b").copied());
    assert_eq!(on_a.unwrap_or(0) + on_b.unwrap_or(0), 400, "{counts:?}");
    // 3 : 1 is 300 : 100; round robin over the weighted list is exact but for the order in
    // which parallel requests pick, so the bounds are wide.
    assert!(
        (260..=340).contains(&on_a.unwrap_or(0)),
        "weight 3 against 1 sends about 75 % to a: {counts:?}"
    );

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_answering_502_is_ejected_retried_after_the_period_and_used_again() {
    let introspector = Introspector::start().await;
    let a = Server::start("a", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let b = Server::start("b", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let (listen, admin) = two_free_ports();
    let upstream = format!(
        "    addresses: [\"{}\", \"{}\"]\n    eject: {{ after_failures: 3, duration: 2s, statuses: [502, 503] }}",
        a.addr, b.addr
    );
    let (proxy, path) =
        start_proxy("eject502", &yaml(listen, admin, &introspector, &upstream)).await;
    // Answers count only for requests that passed the token check.
    let client = authenticated_client();
    let url = format!("http://127.0.0.1:{listen}/api/x");
    let ejections = format!(
        "tokengate_proxy_upstream_address_ejections_total{{upstream=\"api\",address=\"{}\"}}",
        a.addr
    );
    let bad = |counts: &HashMap<String, usize>| {
        counts
            .iter()
            .filter(|(k, _)| k.starts_with("502"))
            .map(|(_, n)| *n)
            .sum::<usize>()
    };

    // Both answer well: a's 200s keep it in (a 502 now and then would not add up to 3 in a row).
    let counts = spread(&client, &url, 40, 4).await;
    assert!(counts["a"] >= 10 && counts["b"] >= 10, "{counts:?}");

    // a answers 502: after 3 in a row it is out; the 502s were passed on (the request had been
    // sent, it is not retried), at most the 3 plus those already on their way.
    a.status.store(502, Ordering::Relaxed);
    let counts = spread(&client, &url, 100, 4).await;
    assert!(bad(&counts) >= 3 && bad(&counts) <= 3 + 4, "{counts:?}");
    assert_eq!(counts.get("b").copied().unwrap_or(0) + bad(&counts), 100);
    assert_eq!(metric(&client, admin, &ejections).await, Some(1.0));
    assert_eq!(metric(&client, admin, &up_line(a.addr)).await, Some(0.0));
    // While it is out, b takes everything.
    let counts = spread(&client, &url, 40, 4).await;
    assert_eq!(counts.get("b"), Some(&40), "{counts:?}");

    // After the period a is tried again; still failing, it is ejected again.
    wait_metric(
        &client,
        admin,
        &up_line(a.addr),
        1.0,
        Duration::from_secs(10),
    )
    .await;
    let counts = spread(&client, &url, 40, 4).await;
    assert!(bad(&counts) >= 3, "a retried after the period: {counts:?}");
    assert_eq!(metric(&client, admin, &ejections).await, Some(2.0));

    // Healthy again: once the period is over it takes its share.
    a.status.store(200, Ordering::Relaxed);
    wait_metric(
        &client,
        admin,
        &up_line(a.addr),
        1.0,
        Duration::from_secs(10),
    )
    .await;
    let counts = spread(&client, &url, 100, 4).await;
    assert_eq!(bad(&counts), 0, "{counts:?}");
    assert!(counts.get("a").copied().unwrap_or(0) >= 30, "{counts:?}");

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_to_a_public_route_answered_503_eject_nothing() {
    let introspector = Introspector::start().await;
    let a = Server::start("a", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let b = Server::start("b", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    a.status.store(503, Ordering::Relaxed);
    b.status.store(503, Ordering::Relaxed);
    let (listen, admin) = two_free_ports();
    let upstream = format!(
        "    addresses: [\"{}\", \"{}\"]\n    eject: {{ after_failures: 1, duration: 30s, statuses: [503] }}",
        a.addr, b.addr
    );
    let (proxy, path) =
        start_proxy("eject-anon", &yaml(listen, admin, &introspector, &upstream)).await;
    let anonymous = reqwest::Client::new();

    // The attack of the report was 2 requests; 20 show it is not a matter of count.
    let counts = spread(
        &anonymous,
        &format!("http://127.0.0.1:{listen}/public/x"),
        20,
        2,
    )
    .await;
    assert_eq!(answered(&counts, "503"), 20, "{counts:?}");
    for addr in [a.addr, b.addr] {
        assert_eq!(
            metric(&anonymous, admin, &ejections_line(addr)).await,
            Some(0.0)
        );
        assert_eq!(metric(&anonymous, admin, &up_line(addr)).await, Some(1.0));
    }
    // A token on an unauthenticated route changes nothing: the public route never reads it.
    let counts = spread(
        &authenticated_client(),
        &format!("http://127.0.0.1:{listen}/public/x"),
        4,
        1,
    )
    .await;
    assert_eq!(answered(&counts, "503"), 4, "{counts:?}");
    assert_eq!(
        metric(&anonymous, admin, &ejections_line(a.addr)).await,
        Some(0.0)
    );

    // The same answers to authenticated requests do eject (the feature still works).
    let counts = spread(
        &authenticated_client(),
        &format!("http://127.0.0.1:{listen}/api/x"),
        2,
        1,
    )
    .await;
    assert_eq!(answered(&counts, "503"), 2, "{counts:?}");
    assert_eq!(
        metric(&anonymous, admin, &ejections_line(a.addr)).await,
        Some(1.0)
    );
    assert_eq!(
        metric(&anonymous, admin, &ejections_line(b.addr)).await,
        Some(1.0)
    );

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_address_ejected_requests_still_spread_over_them_all() {
    let introspector = Introspector::start().await;
    let a = Server::start("a", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    let b = Server::start("b", "127.0.0.1:0".parse().unwrap(), Duration::ZERO);
    a.status.store(503, Ordering::Relaxed);
    b.status.store(503, Ordering::Relaxed);
    let (listen, admin) = two_free_ports();
    let upstream = format!(
        "    addresses: [\"{}\", \"{}\"]\n    eject: {{ after_failures: 1, duration: 60s, statuses: [503] }}",
        a.addr, b.addr
    );
    let (proxy, path) =
        start_proxy("eject-all", &yaml(listen, admin, &introspector, &upstream)).await;
    let client = authenticated_client();
    let url = format!("http://127.0.0.1:{listen}/api/x");

    // One failure each ejects both (for 60 s, longer than the test).
    let counts = spread(&client, &url, 2, 1).await;
    assert_eq!(answered(&counts, "503"), 2, "{counts:?}");
    for addr in [a.addr, b.addr] {
        assert_eq!(metric(&client, admin, &up_line(addr)).await, Some(0.0));
    }
    // Both answer well again but stay ejected: the proxy takes them in turn, not one only.
    a.status.store(200, Ordering::Relaxed);
    b.status.store(200, Ordering::Relaxed);
    let counts = spread(&client, &url, 40, 2).await;
    let (on_a, on_b) = (
        counts.get("a").copied().unwrap_or(0),
        counts.get("b").copied().unwrap_or(0),
    );
    assert_eq!(on_a + on_b, 40, "{counts:?}");
    assert!(on_a >= 10 && on_b >= 10, "spread over both: {counts:?}");
    for addr in [a.addr, b.addr] {
        assert_eq!(metric(&client, admin, &up_line(addr)).await, Some(0.0));
    }

    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
