//! TLS and HTTP/2 on the proxy listener, with clients nobody here wrote (curl, Python's ssl,
//! reqwest over rustls) and certificates from the openssl CLI: HTTP/1.1 and h2 by ALPN over TLS
//! 1.2 and 1.3, the head deadline kept over TLS, bad certificate files refused at load, a reload
//! that swaps the certificate while kept-alive connections and steady traffic go on, and h2c with
//! prior knowledge only where a listener opts in.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Introspector, ROUTES, config_yaml, echo_upstream, start_proxy, two_free_ports};
use test_support::pki::Pki;

/// A proxy configuration on free ports with `extra` top-level YAML (a `tls:` section).
async fn yaml_with(extra: &str) -> (String, u16, u16) {
    let introspector = Introspector::start().await;
    let upstream = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let yaml = config_yaml(listen, admin, &introspector.url(), upstream, ROUTES);
    // The introspector lives as long as the test's runtime (its task keeps serving).
    std::mem::forget(introspector);
    (format!("{extra}\n{yaml}"), listen, admin)
}

fn tls_section(cert: &Path, key: &Path) -> String {
    format!(
        "tls:\n  cert_file: {}\n  key_file: {}\n",
        cert.display(),
        key.display()
    )
}

/// curl's status line and HTTP version for `url`, with `args` (blocking: run off the runtime).
fn curl(args: &[&str], url: &str) -> (String, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            "--max-time",
            "5",
        ])
        .args(args)
        .arg(url)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, version) = text.split_once(' ').unwrap_or((&text, ""));
    (code.to_owned(), version.to_owned())
}

async fn curl_async(args: &[&str], url: &str) -> (String, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args, &url)
    })
    .await
    .unwrap()
}

fn pair(code: &str, version: &str) -> (String, String) {
    (code.to_owned(), version.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_gets_http1_and_h2_over_tls_12_and_13() {
    let pki = Pki::new();
    let (cert, key) = pki.server("a");
    let (yaml, listen, _) = yaml_with(&tls_section(&cert, &key)).await;
    let (proxy, config) = start_proxy("tls", &yaml).await;
    let ca = pki.ca().display().to_string();
    let base = format!("https://localhost:{listen}");
    let resolve = format!("localhost:{listen}:127.0.0.1");
    let common = ["--cacert", ca.as_str(), "--resolve", resolve.as_str()];
    let with = |more: &[&'static str]| -> Vec<&str> {
        common.iter().copied().chain(more.iter().copied()).collect()
    };

    let url = format!("{base}/public/x");
    assert_eq!(
        curl_async(&with(&["--http1.1"]), &url).await,
        pair("200", "1.1")
    );
    assert_eq!(
        curl_async(&with(&["--http2"]), &url).await,
        pair("200", "2")
    );
    for tls in [
        ["--tlsv1.2", "--tls-max", "1.2"],
        ["--tlsv1.3", "--tls-max", "1.3"],
    ] {
        assert_eq!(
            curl_async(&with(&["--http2", tls[0], tls[1], tls[2]]), &url).await,
            pair("200", "2")
        );
        assert_eq!(
            curl_async(&with(&["--http1.1", tls[0], tls[1], tls[2]]), &url).await,
            pair("200", "1.1")
        );
    }
    // The gate works the same over h2: a token is checked, a missing one is 401.
    let read = format!("{base}/read");
    assert_eq!(
        curl_async(
            &with(&["--http2", "-H", "Authorization: Bearer read"]),
            &read
        )
        .await,
        pair("200", "2")
    );
    assert_eq!(
        curl_async(&with(&["--http2"]), &read).await,
        pair("401", "2")
    );
    // TLS 1.1 and below are refused; a client that does not trust the CA refuses the server.
    assert_eq!(
        curl_async(&with(&["--tlsv1.1", "--tls-max", "1.1"]), &url)
            .await
            .0,
        "000"
    );
    assert_eq!(curl_async(&["--resolve", &resolve], &url).await.0, "000");
    // Cleartext on the TLS port is not served.
    assert_eq!(
        curl_async(&[], &format!("http://127.0.0.1:{listen}/public/x"))
            .await
            .0,
        "000"
    );

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// A Python ssl client that sends part of a request head over TLS and waits: answered 408 and
/// closed at the head deadline, as over cleartext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_deadline_holds_over_tls() {
    let pki = Pki::new();
    let (cert, key) = pki.server("a");
    let extra = format!(
        "{}connections: {{ head_timeout: 1s }}\n",
        tls_section(&cert, &key)
    );
    let (yaml, listen, _) = yaml_with(&extra).await;
    let (proxy, config) = start_proxy("tls-slow", &yaml).await;
    let script = format!(
        r#"
import socket, ssl, time
ctx = ssl.create_default_context(cafile="{ca}")
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", {listen})), server_hostname="localhost")
s.sendall(b"GET /public/x HTTP/1.1\r\nHost: a\r\nX-Slow: ")
start = time.time()
s.settimeout(10)
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.split(b"\r\n")[0].decode(), round(time.time() - start, 1))
"#,
        ca = pki.ca().display()
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, secs) = text.trim().rsplit_once(' ').unwrap();
    assert_eq!(status, "HTTP/1.1 408 Request Timeout");
    let secs: f64 = secs.parse().unwrap();
    assert!((0.8..3.0).contains(&secs), "closed after {secs} s");

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// A client that finishes the TLS handshake with ALPN h2 and then sends nothing (or half the
/// HTTP/2 preface) is closed at the head deadline, not held for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_h2_client_is_closed_at_the_head_deadline() {
    let pki = Pki::new();
    let (cert, key) = pki.server("a");
    let extra = format!(
        "{}connections: {{ head_timeout: 1s }}\n",
        tls_section(&cert, &key)
    );
    let (yaml, listen, admin) = yaml_with(&extra).await;
    let (proxy, config) = start_proxy("tls-h2-silent", &yaml).await;
    for send in ["", "PRI * HTTP/2.0\\r\\n"] {
        let script = format!(
            r#"
import socket, ssl, time
ctx = ssl.create_default_context(cafile="{ca}")
ctx.set_alpn_protocols(["h2"])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", {listen})), server_hostname="localhost")
assert s.selected_alpn_protocol() == "h2"
s.sendall(b"{send}")
start = time.time()
s.settimeout(10)
try:
    while s.recv(4096):
        pass
except (ConnectionResetError, ssl.SSLError):
    pass
print(round(time.time() - start, 1))
"#,
            ca = pki.ca().display()
        );
        let out = tokio::task::spawn_blocking(move || {
            Command::new("python3")
                .arg("-c")
                .arg(script)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let secs: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(
            (0.8..3.0).contains(&secs),
            "sent {send:?}: closed after {secs} s"
        );
    }
    let metrics = common::admin_metrics(admin).await;
    assert!(
        metrics.contains("tokengate_proxy_head_timeouts_total{listener=\"proxy\"} 2"),
        "{metrics}"
    );

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// `admin_tls` and `forward_auth.tls` serve the listener's certificate (HTTP/1.1); and a
/// certificate file broken on disk holds back its own reload, not a rules reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_and_forward_auth_over_tls_and_a_bad_certificate_holds_back_only_itself() {
    let pki = Pki::new();
    let (cert, key) = pki.server("a");
    let fa = common::free_port();
    let extra = format!(
        "{}admin_tls: true\nforward_auth: {{ listen: 127.0.0.1:{fa}, ingress: envoy, tls: true }}\n",
        tls_section(&cert, &key)
    );
    let (yaml, listen, admin) = yaml_with(&extra).await;
    let (proxy, config) = start_proxy("tls-admin", &yaml).await;
    let ca = pki.ca().display().to_string();
    let tls = ["--cacert", ca.as_str()];
    assert_eq!(
        curl_async(&tls, &format!("https://localhost:{admin}/healthz")).await,
        pair("200", "1.1")
    );
    // HTTP/1.1 only there, even for a client that offers h2.
    assert_eq!(
        curl_async(
            &["--cacert", &ca, "--http2"],
            &format!("https://localhost:{admin}/healthz")
        )
        .await,
        pair("200", "1.1")
    );
    assert_eq!(
        curl_async(&[], &format!("http://127.0.0.1:{admin}/healthz"))
            .await
            .0,
        "000",
        "no cleartext on a TLS listener"
    );
    assert_eq!(
        curl_async(&tls, &format!("https://localhost:{fa}/public/x")).await,
        pair("200", "1.1")
    );
    assert_eq!(
        curl_async(&tls, &format!("https://localhost:{fa}/read"))
            .await
            .0,
        "401"
    );

    // The certificate file is broken; the rules change too. The rules reload goes through, the
    // certificate reload is refused and the old certificate is still served on every listener.
    std::fs::write(&cert, "not a certificate").unwrap();
    let routes = "routes:\n  - { name: extra, path: /extra, upstream: open, public: true }\n";
    let yaml = yaml.replacen("routes:\n", routes, 1);
    std::fs::write(&config, &yaml).unwrap();
    let n = tokio::task::block_in_place(|| proxy.reload()).expect("the rules reload");
    assert!(n > 1);
    assert_eq!(
        curl_async(&tls, &format!("https://localhost:{listen}/extra")).await,
        pair("200", "2")
    );
    assert_eq!(
        curl_async(&tls, &format!("https://localhost:{admin}/healthz")).await,
        pair("200", "1.1")
    );
    let refused =
        "tokengate_proxy_tls_certificate_reloads_total{listener=\"proxy\",result=\"refused\"} ";
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = Command::new("curl")
            .args(["-s", "--cacert", &ca])
            .arg(format!("https://localhost:{admin}/metrics"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let n: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(refused))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if n >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no refused certificate reload: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[test]
fn tls_on_other_listeners_needs_the_tls_section() {
    let base = "listen: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\nupstreams: { api: { address: \"127.0.0.1:3\" } }\nintrospection: { url: \"http://127.0.0.1:4/\", auth_token: t }\nroutes: [ { name: r, prefix: /, upstream: api, public: true } ]\n";
    for (extra, field) in [
        ("admin_tls: true\n", "admin_tls"),
        (
            "forward_auth: { listen: 127.0.0.1:5, ingress: nginx, tls: true }\n",
            "forward_auth.tls",
        ),
    ] {
        let e = proxy::parse_config(&format!("{base}{extra}"), "proxy.yaml", |_| None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "proxy.yaml: key \"{field}\": true: serves the certificate of the tls: section, which is missing"
            )
        );
    }
}

#[test]
fn bad_certificate_files_are_refused_with_the_file_named() {
    let pki = Pki::new();
    let (cert, key) = pki.server("a");
    let (_, other_key) = pki.server("b");
    let base = "listen: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\nupstreams: { api: { address: \"127.0.0.1:3\" } }\ntoken_source: introspection\nintrospection: { url: \"http://127.0.0.1:4/\", auth_token: t }\nroutes: [ { name: r, prefix: /, upstream: api, public: true } ]\n";
    let parse = |tls: String| {
        proxy::parse_config(&format!("{base}{tls}"), "proxy.yaml", |_| None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(parse(tls_section(&cert, &key)), Ok(()));

    let missing = pki.path("missing.pem");
    let err = parse(tls_section(&missing, &key)).unwrap_err();
    assert!(
        err.starts_with("proxy.yaml: key \"tls.cert_file\""),
        "{err}"
    );
    assert!(
        err.contains("missing.pem") && err.contains("cannot read"),
        "{err}"
    );

    let err = parse(tls_section(&cert, &other_key)).unwrap_err();
    assert!(err.contains("\"tls.key_file\""), "{err}");
    assert!(err.contains("does not match the certificate"), "{err}");

    // A key where the certificate should be, and the reverse.
    let err = parse(tls_section(&key, &key)).unwrap_err();
    assert!(
        err.contains("\"tls.cert_file\"") && err.contains("no CERTIFICATE"),
        "{err}"
    );
    let err = parse(tls_section(&cert, &cert)).unwrap_err();
    assert!(
        err.contains("\"tls.key_file\"") && err.contains("no PRIVATE KEY"),
        "{err}"
    );

    // h2c is for cleartext listeners.
    let err = parse(format!("h2c: true\n{}", tls_section(&cert, &key))).unwrap_err();
    assert!(err.contains("key \"h2c\""), "{err}");

    // Validity is checked against the clock: before notBefore and after notAfter are refused.
    let files = proxy::tls::TlsFiles {
        cert_file: cert.clone(),
        key_file: key.clone(),
        client_auth: None,
    };
    let now = proxy::tls::unix_now();
    let ok = proxy::tls::load(&files, now).unwrap();
    assert!(ok.not_after > now + 86_400 && ok.not_after <= now + 2 * 86_400 + 60);
    let early = proxy::tls::load(&files, ok.not_before - 10).unwrap_err();
    assert_eq!(early.field, "cert_file");
    assert!(early.message.contains("not valid yet"), "{early}");
    let late = proxy::tls::load(&files, ok.not_after).unwrap_err();
    assert!(late.message.contains("has expired"), "{late}");
}

/// The DER of the certificate a fresh connection is served, through `client`.
async fn served_cert(client: &reqwest::Client, url: &str) -> Vec<u8> {
    let resp = client.get(url).send().await.expect("response");
    assert_eq!(resp.status(), 200);
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("TLS info")
        .to_vec()
}

fn der(pem: &Path) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(pem)
        .output()
        .unwrap();
    out.stdout
}

/// An HTTP/1.1 client over rustls that trusts the test CA and reports the peer certificate.
fn client(ca: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .tls_info(true)
        .pool_idle_timeout(Duration::from_secs(60))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Replaces `to` with `from` by renaming a copy over it (what cert-manager's atomic swap of a
/// mounted Secret amounts to for a reader).
fn replace(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

async fn metric(admin: u16, series: &str) -> u64 {
    let text = reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// What the Python h2 client (httpx over the `h2` package) does during a reload: requests for
/// `secs` seconds, alternating one kept-alive connection and a fresh one each time; prints the
/// successes, the failures, the certificates the kept-alive connection saw and the first and
/// last a fresh connection saw (SHA-256 of the DER, hex).
const H2_CLIENT: &str = r#"
import hashlib, ssl, sys, time, httpx
ca, url, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
def cert(r):
    der = r.extensions["network_stream"].get_extra_info("ssl_object").getpeercert(True)
    return hashlib.sha256(der).hexdigest()
kept = httpx.Client(http2=True, verify=ctx, timeout=5)
ok = failed = 0
kept_certs, fresh_certs = set(), []
end = time.time() + secs
while time.time() < end:
    for fresh in (False, True):
        try:
            if fresh:
                with httpx.Client(http2=True, verify=ctx, timeout=5) as c:
                    r = c.get(url)
                    fresh_certs.append(cert(r))
            else:
                r = kept.get(url)
                kept_certs.add(cert(r))
            if r.status_code == 200 and r.http_version == "HTTP/2":
                ok += 1
            else:
                failed += 1
        except Exception as e:
            failed += 1
            print("error", repr(e), file=sys.stderr)
print(ok, failed, ",".join(sorted(kept_certs)), fresh_certs[0], fresh_certs[-1])
"#;

/// The SHA-256 fingerprint of a PEM certificate, lower-case hex.
fn fingerprint(pem: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (_, hex) = text.trim().split_once('=').unwrap();
    hex.replace(':', "").to_lowercase()
}

/// Certificate B replaces A on disk under steady traffic (HTTP/1.1 from reqwest and h2 from
/// Python's httpx, each on kept-alive and on fresh connections): new handshakes get B, the
/// connections opened under A keep working on A, and no request fails. A key that does not
/// match is then refused and B stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_certificate_without_dropping_connections() {
    let pki = Pki::new();
    let (cert_a, key_a) = pki.server("a");
    let (cert_b, key_b) = pki.server("b");
    let (_, key_c) = pki.server("c");
    let served_cert_file = pki.path("served.pem");
    let served_key_file = pki.path("served.key");
    std::fs::copy(&cert_a, &served_cert_file).unwrap();
    std::fs::copy(&key_a, &served_key_file).unwrap();
    let (yaml, listen, admin) = yaml_with(&tls_section(&served_cert_file, &served_key_file)).await;
    let (proxy, config) = start_proxy("tls-reload", &yaml).await;
    let url = format!("https://127.0.0.1:{listen}/public/x");
    let expiry = "tokengate_proxy_tls_certificate_expiry_seconds{listener=\"proxy\"} ";
    assert!(metric(admin, expiry).await > proxy::tls::unix_now() as u64);

    // A kept-alive HTTP/1.1 connection opened under A.
    let kept = client(&pki.ca());
    assert_eq!(served_cert(&kept, &url).await, der(&cert_a));

    // Steady traffic: reqwest workers alternate their kept-alive connection and a fresh one;
    // the Python h2 client does the same over HTTP/2.
    let h2 = {
        let (ca, url) = (pki.ca(), url.clone());
        tokio::task::spawn_blocking(move || {
            Command::new("python3")
                .arg("-c")
                .arg(H2_CLIENT)
                .arg(ca)
                .arg(url)
                .arg("4")
                .output()
                .unwrap()
        })
    };
    let stop = Arc::new(AtomicUsize::new(0));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (stop, ok, failed, url, ca) = (
            stop.clone(),
            ok.clone(),
            failed.clone(),
            url.clone(),
            pki.ca(),
        );
        workers.push(tokio::spawn(async move {
            let kept = client(&ca);
            while stop.load(Ordering::Relaxed) == 0 {
                let fresh = client(&ca);
                for c in [&kept, &fresh] {
                    match c.get(&url).send().await {
                        Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    replace(&key_b, &served_key_file);
    replace(&cert_b, &served_cert_file);
    let reloads =
        "tokengate_proxy_tls_certificate_reloads_total{listener=\"proxy\",result=\"ok\"} ";
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, reloads).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the certificate was not reloaded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let h2 = h2.await.unwrap();
    stop.store(1, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert_eq!(
        failed, 0,
        "{failed} HTTP/1.1 requests failed during the reload ({ok} succeeded)"
    );
    assert!(ok > 20, "only {ok} HTTP/1.1 requests");

    let report = String::from_utf8_lossy(&h2.stdout);
    let fields: Vec<&str> = report.split_whitespace().collect();
    assert_eq!(
        fields.len(),
        5,
        "h2 client: {report} {}",
        String::from_utf8_lossy(&h2.stderr)
    );
    let (a, b) = (fingerprint(&cert_a), fingerprint(&cert_b));
    assert_eq!(
        fields[1],
        "0",
        "h2 requests failed: {}",
        String::from_utf8_lossy(&h2.stderr)
    );
    assert!(
        fields[0].parse::<u64>().unwrap() > 10,
        "h2 requests: {report}"
    );
    assert_eq!(
        fields[2], a,
        "the kept-alive h2 connection saw only A, all along"
    );
    assert_eq!(
        (fields[3], fields[4]),
        (a.as_str(), b.as_str()),
        "fresh h2 connections: A, then B"
    );

    // A new connection gets B; the connection opened under A is still the same one.
    assert_eq!(served_cert(&client(&pki.ca()), &url).await, der(&cert_b));
    assert_eq!(served_cert(&kept, &url).await, der(&cert_a));

    // A key that does not match is refused; B stays.
    replace(&key_c, &served_key_file);
    let refused =
        "tokengate_proxy_tls_certificate_reloads_total{listener=\"proxy\",result=\"refused\"} ";
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, refused).await == 0 {
        assert!(Instant::now() < deadline, "the bad key was not refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served_cert(&client(&pki.ca()), &url).await, der(&cert_b));

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// h2c with prior knowledge where the listener says `h2c: true` (HTTP/1.1 still served there),
/// and not elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_with_prior_knowledge_only_where_enabled() {
    let (yaml, listen, _) = yaml_with("h2c: true\n").await;
    let (proxy, config) = start_proxy("h2c", &yaml).await;
    let url = format!("http://127.0.0.1:{listen}/public/x");
    assert_eq!(
        curl_async(&["--http2-prior-knowledge"], &url).await,
        pair("200", "2")
    );
    assert_eq!(curl_async(&["--http1.1"], &url).await, pair("200", "1.1"));
    let read = format!("http://127.0.0.1:{listen}/read");
    assert_eq!(
        curl_async(
            &[
                "--http2-prior-knowledge",
                "-H",
                "Authorization: Bearer read"
            ],
            &read
        )
        .await,
        pair("200", "2")
    );
    assert_eq!(
        curl_async(&["--http2-prior-knowledge"], &read).await,
        pair("401", "2")
    );
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();

    let (yaml, listen, _) = yaml_with("").await;
    let (proxy, config) = start_proxy("no-h2c", &yaml).await;
    let url = format!("http://127.0.0.1:{listen}/public/x");
    assert_ne!(curl_async(&["--http2-prior-knowledge"], &url).await.1, "2");
    assert_eq!(curl_async(&["--http1.1"], &url).await, pair("200", "1.1"));
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// h2load (nghttp2) over TLS: 2,000 requests as 100 concurrent streams on one connection, all
/// answered; and a header list over the 32 KiB limit is refused, not passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_many_streams_on_one_tls_connection() {
    let pki = Pki::new();
    let (cert, key) = pki.server("a");
    let (yaml, listen, _) = yaml_with(&tls_section(&cert, &key)).await;
    let (proxy, config) = start_proxy("h2load", &yaml).await;
    let url = format!("https://127.0.0.1:{listen}/public/x");
    let out = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("h2load")
                .args(["-n", "2000", "-c", "1", "-m", "100", &url])
                .output()
                .expect("h2load runs (apt-get install nghttp2-client)")
        })
        .await
        .unwrap()
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2000 succeeded, 0 failed, 0 errored"),
        "h2load: {text}"
    );
    assert!(text.contains("Application protocol: h2"), "h2load: {text}");

    let ca = pki.ca().display().to_string();
    let big = format!("X-Big: {}", "a".repeat(40 * 1024));
    let (code, _) = curl_async(&["--cacert", &ca, "--http2", "-H", &big], &url).await;
    assert_ne!(code, "200", "a 40 KiB header list went through");

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// The `proxy` binary re-reads the certificate on SIGHUP, even when polling cannot see the change
/// (the new files are given the old ones' modification times and have the same lengths).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificate() {
    let pki = Pki::new();
    let (cert_a, key_a) = pki.server("a");
    // ECDSA signatures vary in length by a byte or two: a B as long as A, to hide from the poll.
    let len = |p: &Path| std::fs::metadata(p).unwrap().len();
    let (cert_b, key_b) = ('b'..='z')
        .map(|n| pki.server(&n.to_string()))
        .find(|(c, k)| len(c) == len(&cert_a) && len(k) == len(&key_a))
        .expect("a certificate as long as A");
    let (cert, key) = (pki.path("served.pem"), pki.path("served.key"));
    std::fs::copy(&cert_a, &cert).unwrap();
    std::fs::copy(&key_a, &key).unwrap();
    let (yaml, listen, _) = yaml_with(&tls_section(&cert, &key)).await;
    let config = common::temp_path("tls-hup");
    std::fs::write(&config, yaml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy"))
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("https://127.0.0.1:{listen}/public/x");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client(&pki.ca()).get(&url).send().await.is_err() {
        assert!(Instant::now() < deadline, "the proxy did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served_cert(&client(&pki.ca()), &url).await, der(&cert_a));

    // B in place of A, invisible to the poll: same lengths, A's modification times.
    for (from, to) in [(&cert_b, &cert), (&key_b, &key)] {
        let before = std::fs::metadata(to).unwrap();
        assert_eq!(std::fs::metadata(from).unwrap().len(), before.len());
        std::fs::write(to, std::fs::read(from).unwrap()).unwrap();
        let file = std::fs::File::options().write(true).open(to).unwrap();
        file.set_modified(before.modified().unwrap()).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        served_cert(&client(&pki.ca()), &url).await,
        der(&cert_a),
        "the poll saw no change"
    );
    let status = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while served_cert(&client(&pki.ca()), &url).await != der(&cert_b) {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(config);
}
