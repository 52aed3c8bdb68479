//! The `proxy` binary's log at `RUST_LOG=info` holds what an operator needs and no noise:
//! Pingora's start-up and shutdown steps are left out (they are debug matter), the start-up line
//! names every listener (forward-auth included), and TCP connections opened and closed on the
//! TLS port without a handshake (a load balancer's probes) write no ERROR line; identity headers
//! sent to an upstream without a proxy secret are warned about in one line.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Collected, config_yaml, echo_upstream, free_port, temp_path, two_free_ports};
use test_support::pki::Pki;

const BIN: &str = env!("CARGO_BIN_EXE_proxy");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_and_probes_write_no_pingora_chatter_and_no_error() {
    let pki = Pki::new();
    let (cert, key) = pki.server("proxy");
    let upstream = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth = free_port();
    let yaml = format!(
        "{}\ntls: {{ cert_file: \"{}\", key_file: \"{}\" }}\nforward_auth: {{ listen: \"127.0.0.1:{auth}\", ingress: nginx }}\n",
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
    let config = temp_path("quiet-logs");
    std::fs::write(&config, yaml).unwrap();
    let process = Collected::spawn(
        Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .env("LOG_FORMAT", "text"),
    );
    let stderr = || process.stderr.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stderr().contains("proxy listening") {
        assert!(Instant::now() < deadline, "no start-up line:\n{}", stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Ten connect-and-close probes on the TLS port, then wait until all are counted.
    for _ in 0..10 {
        drop(
            tokio::net::TcpStream::connect(("127.0.0.1", listen))
                .await
                .unwrap(),
        );
    }
    let failures = || async {
        let text = reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|l| {
                l.strip_prefix("tokengate_proxy_tls_handshake_failures_total{listener=\"proxy\"} ")
            })?
            .trim()
            .parse::<u64>()
            .ok()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while failures().await.unwrap_or(0) < 10 {
        assert!(
            Instant::now() < deadline,
            "probes not counted:\n{}",
            stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stopped gracefully (its shutdown steps are Pingora's chatter too).
    let _ = Command::new("kill")
        .args(["-TERM", &process.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stderr().contains("proxy stopped") {
        assert!(Instant::now() < deadline, "did not stop:\n{}", stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = stderr();
    let _ = std::fs::remove_file(&config);
    let start = log.lines().find(|l| l.contains("proxy listening")).unwrap();
    assert!(
        start.contains(&format!("forward_auth=127.0.0.1:{auth}")),
        "{start}"
    );
    // Issue 43: identity headers go to upstreams without a proxy secret (api, and open through
    // its route needing a token): said once, at warn, naming both.
    let unproven: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("receive identity headers (X-Auth-*)"))
        .collect();
    assert_eq!(unproven.len(), 1, "{log}");
    assert!(unproven[0].contains(" WARN "), "{}", unproven[0]);
    assert!(
        unproven[0].contains("(X-Auth-*): api, open;"),
        "{}",
        unproven[0]
    );
    for line in log.lines() {
        assert!(!line.contains(" ERROR "), "an ERROR line: {line}\n{log}");
        assert!(
            !(line.contains(" INFO ") && line.contains("pingora")),
            "Pingora's chatter at info: {line}\n{log}"
        );
    }
}
