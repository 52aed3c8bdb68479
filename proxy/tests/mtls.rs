//! Client certificates (mTLS) and certificate-bound tokens (RFC 8705) through the running proxy,
//! with curl `--cert/--key` as the client and certificates from the openssl CLI: a listener that
//! requires a certificate and one where it is optional; a token whose introspection answer or JWT
//! carries `cnf.x5t#S256` accepted with its certificate and refused (401 `invalid_token`) with
//! another or none; the verified certificate forwarded upstream with the proxy secret, a forged
//! one stripped; the client CA bundle reloaded; bad settings refused with the field named; and a
//! client certificate shown to an upstream that requires one.

mod common;

use test_support::jwks;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{echo_upstream, echoed, serve, start_proxy, two_free_ports, unix_now};
use resource_server::CertThumbprint;
use resource_server::client_cert::der_from_escaped_pem;
use resource_server::identity::encode;
use serde_json::{Value, json};
use test_support::pki::Pki;

const SECRET: &str = "an-upstream-proxy-secret-of-40-characters";

/// The DER of the first certificate of a PEM file.
fn der(pem: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(pem).unwrap();
    der_from_escaped_pem(encode(&text).as_bytes()).expect("a PEM certificate")
}

/// `cnf.x5t#S256` for the certificate in `pem`.
fn x5t(pem: &Path) -> String {
    CertThumbprint::of_der(&der(pem)).x5t_s256()
}

/// Stand-in introspection: `plain` is active with scope read; `bound-X5T` the same bound to the
/// thumbprint X5T; `jkt` bound by a key (DPoP) the gate cannot check; anything else inactive.
async fn introspector() -> String {
    let addr = serve(|req| async move {
        let token = req.form_token();
        let mut claims = json!({"active": true, "scope": "read", "client_id": "app-1",
                                "exp": unix_now() + 3600, "token_type": "Bearer"});
        match token.strip_prefix("bound-") {
            Some(x5t) => claims["cnf"] = json!({ "x5t#S256": x5t }),
            None if token == "plain" => {}
            _ if token == "jkt" => {
                claims["cnf"] = json!({"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"})
            }
            _ => claims = json!({"active": false}),
        }
        (200, claims)
    })
    .await;
    format!("http://{addr}/introspect")
}

/// A proxy configuration: TLS with `tls_extra` lines, an echo upstream that gets the proxy
/// secret, the `gate` section (token source and its settings).
async fn config(pki: &Pki, tls_extra: &str, gate: &str) -> (String, u16, u16, PathBuf) {
    let (cert, key) = pki.server("proxy");
    let upstream = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let secret = pki.path("upstream.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let yaml = format!(
        r#"listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
threads: 1
work_stealing: true
grace_period: 1s
shutdown_timeout: 1s
tls:
  cert_file: {cert}
  key_file: {key}
{tls_extra}
upstreams:
  api: {{ address: "{upstream}", proxy_secret_file: "{secret}" }}
  bare: {{ address: "{upstream}" }}
{gate}
routes:
  - {{ name: public, prefix: /public/, upstream: api, public: true }}
  - {{ name: read, path: /read, upstream: api, scopes: [read] }}
  - {{ name: bare, path: /bare, upstream: bare, scopes: [read] }}
"#,
        cert = cert.display(),
        key = key.display(),
        secret = secret.display(),
    );
    (yaml, listen, admin, secret)
}

fn introspection_section(url: &str) -> String {
    format!(
        "introspection:\n  url: {url}\n  auth_token: t\n  connect_timeout: 500ms\n  request_timeout: 2s\n  cache: {{ max_ttl: 60s, negative_ttl: 5s, capacity: 100 }}\n"
    )
}

/// What curl got: status (`000`: no HTTP answer, e.g. a refused handshake), the
/// `WWW-Authenticate` header, the body.
struct Got {
    status: String,
    challenge: String,
    body: String,
}

/// curl to `https://localhost:PORT{path}` trusting `pki`'s CA, with `args` (`--cert`...).
async fn curl(pki: &Pki, port: u16, path: &str, args: Vec<String>) -> Got {
    let ca = pki.ca();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let headers = std::env::temp_dir().join(format!(
            "tokengate-mtls-h-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", "-D"])
            .arg(&headers)
            .arg("--cacert")
            .arg(&ca)
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
            .args(&args)
            .arg(format!("https://localhost:{port}{path}"))
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        let head = std::fs::read_to_string(&headers).unwrap_or_default();
        let _ = std::fs::remove_file(&headers);
        let challenge = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .starts_with("www-authenticate:")
                    .then(|| l[17..].trim().to_owned())
            })
            .unwrap_or_default();
        Got {
            status: status.to_owned(),
            challenge,
            body: body.to_owned(),
        }
    })
    .await
    .unwrap()
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// curl arguments: the client certificate and key `name` of `pki`, a bearer token, more.
fn with(cert: Option<&(PathBuf, PathBuf)>, token: Option<&str>, more: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    if let Some((c, k)) = cert {
        args.extend([
            "--cert".into(),
            c.display().to_string(),
            "--key".into(),
            k.display().to_string(),
        ]);
    }
    if let Some(t) = token {
        args.extend(["-H".into(), format!("Authorization: Bearer {t}")]);
    }
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

async fn stop(proxy: proxy::ProxyHandle, path: PathBuf) {
    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_client_certificate_is_checked_against_the_ca_bundle() {
    let pki = Pki::new();
    let other = Pki::new();
    let alice = pki.client("alice");
    let mallory = other.client("mallory");
    let ca = pki.ca().display().to_string();
    let gate = introspection_section(&introspector().await);
    let (yaml, listen, _, _) = config(&pki, &format!("  client_ca_file: {ca}"), &gate).await;
    let (proxy, path) = start_proxy("mtls-required", &yaml).await;

    // No certificate, or one from another CA: no HTTP answer at all (the handshake fails).
    let got = curl(&pki, listen, "/public/x", with(None, None, &[])).await;
    assert_eq!(got.status, "000", "no certificate: {}", got.body);
    let got = curl(&pki, listen, "/public/x", with(Some(&mallory), None, &[])).await;
    assert_eq!(got.status, "000", "another CA: {}", got.body);
    for http in ["--http1.1", "--http2"] {
        let got = curl(&pki, listen, "/public/x", with(Some(&alice), None, &[http])).await;
        assert_eq!(got.status, "200", "{http}: {}", got.body);
        let got = curl(
            &pki,
            listen,
            "/read",
            with(Some(&alice), Some("plain"), &[http]),
        )
        .await;
        assert_eq!(got.status, "200", "{http}: {}", got.body);
    }
    stop(proxy, path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_introspected_token_stands_only_with_its_certificate() {
    let pki = Pki::new();
    let other = Pki::new();
    let alice = pki.client("alice");
    let bob = pki.client("bob");
    let mallory = other.client("mallory");
    let ca = pki.ca().display().to_string();
    let gate = introspection_section(&introspector().await);
    let (yaml, listen, _, _) = config(
        &pki,
        &format!("  client_ca_file: {ca}\n  client_auth: optional"),
        &gate,
    )
    .await;
    let (proxy, path) = start_proxy("mtls-optional", &yaml).await;
    let bound = format!("bound-{}", x5t(&alice.0));

    // Optional: a connection without a certificate is served; with a bad one it is not.
    let got = curl(&pki, listen, "/public/x", with(None, None, &[])).await;
    assert_eq!(got.status, "200");
    let got = curl(&pki, listen, "/read", with(None, Some("plain"), &[])).await;
    assert_eq!(got.status, "200", "an unbound token needs no certificate");
    let got = curl(&pki, listen, "/public/x", with(Some(&mallory), None, &[])).await;
    assert_eq!(
        got.status, "000",
        "a certificate from another CA fails the handshake"
    );

    // The bound token: with its certificate (HTTP/1.1 and h2), not with another or none.
    for http in ["--http1.1", "--http2"] {
        let got = curl(
            &pki,
            listen,
            "/read",
            with(Some(&alice), Some(&bound), &[http]),
        )
        .await;
        assert_eq!(got.status, "200", "{http}: {}", got.body);
        for (who, cert) in [("bob", Some(&bob)), ("nobody", None)] {
            let got = curl(&pki, listen, "/read", with(cert, Some(&bound), &[http])).await;
            assert_eq!(got.status, "401", "{who} {http}: {}", got.body);
            assert!(
                got.challenge.contains("error=\"invalid_token\"")
                    && got.challenge.contains("bound to a client certificate"),
                "{who}: {}",
                got.challenge
            );
        }
    }
    // A thumbprint in a client-sent header is not a certificate: refused, and never forwarded.
    let forged = format!(
        "X-Tokengate-Client-Cert: {}",
        encode(&std::fs::read_to_string(&alice.0).unwrap())
    );
    let got = curl(
        &pki,
        listen,
        "/read",
        with(None, Some(&bound), &["-H", &forged]),
    )
    .await;
    assert_eq!(got.status, "401");
    let got = curl(
        &pki,
        listen,
        "/read",
        with(None, Some("plain"), &["-H", &forged]),
    )
    .await;
    let echo: Value = serde_json::from_str(&got.body).unwrap();
    assert!(
        echoed(&echo, "x-tokengate-client-cert").is_empty(),
        "{echo}"
    );
    // A token bound to a DPoP key (RFC 9449 `jkt`) sent as a bearer token is refused even with
    // a certificate (docs/dpop.md).
    let got = curl(&pki, listen, "/read", with(Some(&alice), Some("jkt"), &[])).await;
    assert_eq!(got.status, "401");
    assert!(
        got.challenge.starts_with("DPoP error=\"invalid_token\""),
        "{}",
        got.challenge
    );

    // The verified certificate goes upstream (escaped PEM) to an upstream with the proxy secret,
    // not to one without.
    let got = curl(&pki, listen, "/read", with(Some(&bob), Some("plain"), &[])).await;
    let echo: Value = serde_json::from_str(&got.body).unwrap();
    let sent = echoed(&echo, "x-tokengate-client-cert");
    assert_eq!(sent.len(), 1, "{echo}");
    assert_eq!(der_from_escaped_pem(sent[0].as_bytes()), Some(der(&bob.0)));
    assert_eq!(echoed(&echo, "x-tokengate-proxy-secret"), vec![SECRET]);
    let got = curl(&pki, listen, "/bare", with(Some(&bob), Some("plain"), &[])).await;
    let echo: Value = serde_json::from_str(&got.body).unwrap();
    assert!(
        echoed(&echo, "x-tokengate-client-cert").is_empty(),
        "{echo}"
    );
    stop(proxy, path).await;
}

/// A JWKS with one EC P-256 key `k`, and JWTs signed by it (PyJWT), bound to each thumbprint.
fn jwts(issuer: &str, audience: &str, x5ts: &[String]) -> (Value, Vec<String>) {
    const SCRIPT: &str = r#"
import json, sys, time, uuid, jwt
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
key = ec.generate_private_key(ec.SECP256R1())
jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
jwk.update({"kid": "k", "alg": "ES256", "use": "sig"})
iss, aud = sys.argv[1], sys.argv[2]
now = int(time.time())
tokens = []
for x5t in sys.argv[3:]:
    claims = {"iss": iss, "aud": aud, "sub": "7", "client_id": "app-1", "scope": "read",
              "iat": now, "exp": now + 600, "jti": str(uuid.uuid4())}
    if x5t:
        claims["cnf"] = {"x5t#S256": x5t}
    tokens.append(jwt.encode(claims, key, algorithm="ES256", headers={"kid": "k", "typ": "at+jwt"}))
print(json.dumps({"jwks": {"keys": [jwk]}, "tokens": tokens}))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .args([issuer, audience])
        .args(x5ts)
        .output()
        .expect("python3 with pyjwt and cryptography");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tokens = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    (v["jwks"].clone(), tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_jwt_stands_only_with_its_certificate() {
    let pki = Pki::new();
    let alice = pki.client("alice");
    let bob = pki.client("bob");
    let (issuer, audience) = ("https://as.example.test", "api");
    let (jwks, tokens) = jwts(issuer, audience, &[x5t(&alice.0), String::new()]);
    let jwks = jwks::JwksServer::start(&jwks, "max-age=300").await;
    let gate = format!(
        "token_source: jwt\njwt:\n  jwks_url: {}\n  issuer: {issuer}\n  audience: {audience}\n",
        jwks.url()
    );
    let ca = pki.ca().display().to_string();
    let (yaml, listen, _, _) = config(
        &pki,
        &format!("  client_ca_file: {ca}\n  client_auth: optional"),
        &gate,
    )
    .await;
    let (proxy, path) = start_proxy("mtls-jwt", &yaml).await;
    let (bound, plain) = (&tokens[0], &tokens[1]);
    let got = curl(&pki, listen, "/read", with(Some(&alice), Some(bound), &[])).await;
    assert_eq!(got.status, "200", "{}", got.body);
    for (who, cert) in [("bob", Some(&bob)), ("nobody", None)] {
        let got = curl(&pki, listen, "/read", with(cert, Some(bound), &[])).await;
        assert_eq!(got.status, "401", "{who}: {}", got.body);
        assert!(got.challenge.contains("invalid_token"), "{}", got.challenge);
    }
    let got = curl(&pki, listen, "/read", with(None, Some(plain), &[])).await;
    assert_eq!(got.status, "200", "an unbound JWT: {}", got.body);
    stop(proxy, path).await;
}

async fn metric(admin: u16, series: &str) -> u64 {
    common::admin_metrics(admin)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_ca_bundle_is_reloaded_with_the_certificate() {
    let pki = Pki::new();
    let other = Pki::new();
    let alice = pki.client("alice");
    let mallory = other.client("mallory");
    let served_ca = pki.path("clients-ca.pem");
    std::fs::copy(pki.ca(), &served_ca).unwrap();
    let gate = introspection_section(&introspector().await);
    let (yaml, listen, admin, _) = config(
        &pki,
        &format!("  client_ca_file: {}", served_ca.display()),
        &gate,
    )
    .await;
    let (proxy, path) = start_proxy("mtls-reload", &yaml).await;
    assert_eq!(
        curl(&pki, listen, "/public/x", with(Some(&alice), None, &[]))
            .await
            .status,
        "200"
    );
    assert_eq!(
        curl(&pki, listen, "/public/x", with(Some(&mallory), None, &[]))
            .await
            .status,
        "000"
    );
    // An unreadable bundle is refused and the one in force stays.
    std::fs::write(&served_ca, "not PEM").unwrap();
    let refused =
        "tokengate_proxy_tls_certificate_reloads_total{listener=\"proxy\",result=\"refused\"} ";
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, refused).await == 0 {
        assert!(Instant::now() < deadline, "the bad bundle was not noticed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        curl(&pki, listen, "/public/x", with(Some(&alice), None, &[]))
            .await
            .status,
        "200"
    );
    // The other CA's bundle: now mallory gets in and alice does not.
    let tmp = served_ca.with_extension("tmp");
    std::fs::copy(other.ca(), &tmp).unwrap();
    std::fs::rename(&tmp, &served_ca).unwrap();
    let ok = "tokengate_proxy_tls_certificate_reloads_total{listener=\"proxy\",result=\"ok\"} ";
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, ok).await == 0 {
        assert!(Instant::now() < deadline, "the bundle was not reloaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        curl(&pki, listen, "/public/x", with(Some(&mallory), None, &[]))
            .await
            .status,
        "200"
    );
    assert_eq!(
        curl(&pki, listen, "/public/x", with(Some(&alice), None, &[]))
            .await
            .status,
        "000"
    );
    stop(proxy, path).await;
}

#[test]
fn bad_client_certificate_settings_are_refused_with_the_field_named() {
    let pki = Pki::new();
    let (cert, key) = pki.server("proxy");
    let (c, k) = (cert.display(), key.display());
    let base = "listen: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\nupstreams: { u: { address: '127.0.0.1:3' } }\n\
                token_source: jwt\njwt: { jwks_url: 'http://127.0.0.1:9/', issuer: i, audience: a }\n\
                allow_empty_routes: true\n";
    let parse = |tls: &str| {
        proxy::parse_config(
            &format!("{base}tls:\n  cert_file: {c}\n  key_file: {k}\n{tls}"),
            "p.yaml",
            |_| None,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let err = parse("  client_auth: optional\n").unwrap_err();
    assert!(
        err.contains("tls.client_auth") && err.contains("client_ca_file"),
        "{err}"
    );
    let ca = pki.ca().display().to_string();
    let err = parse(&format!("  client_ca_file: {ca}\n  client_auth: maybe\n")).unwrap_err();
    assert!(
        err.contains("tls.client_auth") && err.contains("maybe"),
        "{err}"
    );
    let err = parse("  client_ca_file: /nonexistent/ca.pem\n").unwrap_err();
    assert!(
        err.contains("tls.client_ca_file") && err.contains("/nonexistent/ca.pem"),
        "{err}"
    );
    parse(&format!("  client_ca_file: {ca}\n")).unwrap();

    // Upstream client certificates: both files, matching.
    let upstream = |tls: &str| {
        proxy::parse_config(
            &format!("listen: 127.0.0.1:1\nadmin_listen: 127.0.0.1:2\ntoken_source: jwt\njwt: {{ jwks_url: 'http://127.0.0.1:9/', issuer: i, audience: a }}\nallow_empty_routes: true\nupstreams:\n  u: {{ address: '127.0.0.1:3', tls: {{ {tls} }} }}\n"),
            "p.yaml",
            |_| None,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let (alice, alice_key) = pki.client("alice");
    let (_, bob_key) = pki.client("bob");
    let err = upstream(&format!("client_cert_file: '{}'", alice.display())).unwrap_err();
    assert!(
        err.contains("upstreams.u.tls.client_cert_file") && err.contains("client_key_file"),
        "{err}"
    );
    let err = upstream(&format!(
        "client_cert_file: '{}', client_key_file: '{}'",
        alice.display(),
        bob_key.display()
    ))
    .unwrap_err();
    assert!(
        err.contains("upstreams.u.tls.client_key_file") && err.contains("does not match"),
        "{err}"
    );
    upstream(&format!(
        "client_cert_file: '{}', client_key_file: '{}'",
        alice.display(),
        alice_key.display()
    ))
    .unwrap();
}

/// An HTTPS server (Python's ssl) that requires a client certificate from `ca` and answers with
/// its common name.
const MTLS_SERVER: &str = r#"
import http.server, ssl, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        cert = self.connection.getpeercert()
        cn = dict(x[0] for x in cert["subject"])["commonName"]
        body = ("client " + cn).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
ctx.verify_mode = ssl.CERT_REQUIRED
ctx.load_verify_locations(sys.argv[3])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_requires_a_client_certificate_gets_the_configured_one() {
    let pki = Pki::new();
    let (cert, key) = pki.server("upstream");
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(MTLS_SERVER)
        .args([&cert, &key, &pki.ca()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let server = Server(
        child,
        line.trim().parse().expect("the server prints its port"),
    );
    let (client, client_key) = pki.client("proxy-client");
    let ca = pki.ca().display().to_string();
    let at = format!("127.0.0.1:{}", server.1);
    let (listen, admin) = two_free_ports();
    let yaml = format!(
        r#"listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
threads: 1
work_stealing: true
grace_period: 1s
shutdown_timeout: 1s
token_source: jwt
jwt: {{ jwks_url: 'http://127.0.0.1:9/', issuer: i, audience: a }}
upstreams:
  with: {{ address: "{at}", tls: {{ ca_file: "{ca}", client_cert_file: "{c}", client_key_file: "{k}" }} }}
  without: {{ address: "{at}", tls: {{ ca_file: "{ca}" }} }}
routes:
  - {{ name: with, prefix: /with/, upstream: with, public: true }}
  - {{ name: without, prefix: /without/, upstream: without, public: true }}
"#,
        c = client.display(),
        k = client_key.display(),
    );
    let (proxy, path) = start_proxy("mtls-upstream", &yaml).await;
    let base = format!("http://127.0.0.1:{listen}");
    let resp = reqwest::get(format!("{base}/with/x")).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "client proxy-client");
    let resp = reqwest::get(format!("{base}/without/x")).await.unwrap();
    assert_eq!(
        resp.status(),
        502,
        "no client certificate: refused by the upstream"
    );
    stop(proxy, path).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_believes_the_ingress_certificate_from_trusted_peers_only() {
    let pki = Pki::new();
    let alice = pki.client("alice");
    let bob = pki.client("bob");
    let bound = format!("bound-{}", x5t(&alice.0));
    let escaped = |pem: &Path| encode(&std::fs::read_to_string(pem).unwrap());
    let gate = introspection_section(&introspector().await);
    let client = reqwest::Client::new();
    // Believed only when switched on, and then from trusted peers only.
    for (peers, on, alice_status) in [
        ("127.0.0.1", true, 200),
        ("127.0.0.1", false, 401),
        ("10.0.0.0/8", true, 401),
    ] {
        let (yaml, _, _, _) = config(&pki, "", &gate).await;
        let port = common::free_port();
        let yaml = format!(
            "forward_auth: {{ listen: \"127.0.0.1:{port}\", ingress: nginx, trusted_peers: [{peers}], client_cert_header: {on} }}\n{yaml}"
        );
        let (proxy, path) = start_proxy("mtls-forward-auth", &yaml).await;
        let auth = proxy.forward_auth_addr().unwrap();
        let check = |cert: Option<String>| {
            let mut request = client
                .get(format!("http://{auth}/read"))
                .header("X-Original-URI", "/read")
                .header("X-Original-Method", "GET")
                .bearer_auth(&bound);
            if let Some(cert) = cert {
                request = request.header("X-Tokengate-Client-Cert", cert);
            }
            request.send()
        };
        let status = check(Some(escaped(&alice.0))).await.unwrap().status();
        assert_eq!(
            status, alice_status,
            "alice's certificate, trusted peers {peers}, client_cert_header: {on}"
        );
        let status = check(Some(escaped(&bob.0))).await.unwrap().status();
        assert_eq!(status, 401, "bob's certificate, trusted peers {peers}");
        let status = check(None).await.unwrap().status();
        assert_eq!(status, 401, "no certificate, trusted peers {peers}");
        stop(proxy, path).await;
    }
}
