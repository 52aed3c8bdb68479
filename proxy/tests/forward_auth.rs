//! Forward-auth mode with each ingress's real header behaviour. Debian's nginx runs the block
//! documented in docs/proxy.md (read from that file): `auth_request` to the decision endpoint,
//! every identity header set from the decision over the client's own, refusals (401 with its
//! challenge, 403) passed back, a client's look-alike `X-Original-*` / `X-Forwarded-*` and
//! `X-Tokengate-Client-Cert` headers without effect, and over TLS the certificate nginx verified
//! believed. The checks Traefik's `forwardAuth` sends (every client header copied, its own
//! `X-Forwarded-*` set over them) and Envoy's `ext_authz` sends (the original method, the path
//! under a prefix) are decided on the original request only; a target with `#` is 400; and a
//! peer that is not trusted is judged on its own request. Without nginx on the machine the nginx
//! tests are skipped, except under CI (which installs it).

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Introspector, ROUTES, config_yaml, echo_upstream, echoed, free_port, start_proxy,
    two_free_ports,
};
use resource_server::CertThumbprint;
use resource_server::client_cert::der_from_escaped_pem;
use resource_server::identity::encode;
use serde_json::Value;
use test_support::pki::Pki;

struct Nginx(Child, std::path::PathBuf);

impl Drop for Nginx {
    /// SIGTERM, so that the master stops its worker too (SIGKILL would orphan it).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Whether nginx can run here; under CI its absence fails the test (`.ci/run` installs it).
fn have_nginx() -> bool {
    let found = Command::new("nginx")
        .arg("-v")
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("CI").map_or(true, |v| v.is_empty()),
            "CI must install nginx (apt-get install nginx-light)"
        );
        eprintln!("skipped: no nginx here (apt-get install nginx-light)");
    }
    found
}

/// The nginx block of docs/proxy.md's forward-auth section, pointed at `auth` and `app`.
fn documented_block(auth: SocketAddr, app: SocketAddr) -> String {
    let doc = include_str!("../../docs/proxy.md");
    let section = &doc[doc.find("## Forward-auth mode").expect("the section")..];
    let start = section.find("```nginx\n").expect("an nginx block") + "```nginx\n".len();
    let block = &section[start..];
    let block = &block[..block.find("```").unwrap()];
    for address in [
        "proxy_pass http://app;",
        "proxy_pass http://127.0.0.1:8004;",
    ] {
        assert!(block.contains(address), "the block has {address}");
    }
    block
        .replace("http://app;", &format!("http://{app};"))
        .replace("http://127.0.0.1:8004;", &format!("http://{auth};"))
}

/// nginx listening on 127.0.0.1:`port` (`listen` lines and TLS settings in `server`) with the
/// documented block; returns once it answers.
async fn nginx(port: u16, server: &str, block: &str) -> Nginx {
    let dir = std::env::temp_dir().join(format!("tokengate-nginx-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {dir};
  proxy_temp_path {dir};
  fastcgi_temp_path {dir};
  uwsgi_temp_path {dir};
  scgi_temp_path {dir};
  server {{
    {server}
    {block}
  }}
}}
"#,
        dir = dir.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .args(["-e", "stderr", "-c"])
        .arg(dir.join("nginx.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx runs");
    let nginx = Nginx(child, dir);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "nginx did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nginx
}

/// A proxy with `forward_auth` (`section`, inside the braces, after `listen`) over an echo
/// upstream and the common introspector; returns it, its file, the decision endpoint, the app.
async fn proxy_with(
    introspector: &Introspector,
    section: &str,
) -> (
    proxy::ProxyHandle,
    std::path::PathBuf,
    SocketAddr,
    SocketAddr,
) {
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth_port = free_port();
    let yaml = format!(
        "forward_auth: {{ listen: \"127.0.0.1:{auth_port}\", {section} }}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, ROUTES)
    );
    let (proxy, config) = start_proxy("forward-auth", &yaml).await;
    let auth = proxy.forward_auth_addr().unwrap();
    (proxy, config, auth, app)
}

async fn stop(proxy: proxy::ProxyHandle, config: std::path::PathBuf) {
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

/// The status line's code of a raw HTTP/1.1 request `head` (ending in an empty line) to `addr`.
async fn raw_status(addr: SocketAddr, head: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

const NGINX: &str = "ingress: nginx, trusted_peers: [127.0.0.1], client_cert_header: true";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_runs_the_documented_block() {
    if !have_nginx() {
        return;
    }
    let introspector = Introspector::start().await;
    let (proxy, config, auth, app) = proxy_with(&introspector, NGINX).await;
    let port = free_port();
    let server = format!("listen 127.0.0.1:{port};");
    let _nginx = nginx(port, &server, &documented_block(auth, app)).await;
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");

    // Allowed: the app gets the identity nginx took from the decision, and only that: a
    // client's own X-Auth-* headers are replaced, or dropped where the decision has none.
    let resp = client
        .get(url("/read"))
        .bearer_auth("read")
        .header("X-Auth-Username", "root")
        .header("X-Auth-Client-Id", "forged-client")
        .header("X-Auth-Scope", "admin")
        .header("X-Auth-Expires", "99999999999")
        .header("X-Auth-Groups", "admins")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echoed(&echo, "x-auth-username"), ["alice"]);
    assert_eq!(echoed(&echo, "x-auth-client-id"), ["app-1"]);
    assert_eq!(echoed(&echo, "x-auth-scope"), ["read"]);
    let expires = echoed(&echo, "x-auth-expires");
    assert!(
        expires.len() == 1 && expires[0] != "99999999999",
        "{expires:?}"
    );
    assert!(echoed(&echo, "x-auth-groups").is_empty(), "{echo}");
    assert_eq!(echo["target"], "/read");
    // A public route: no identity, and none of the client's.
    let resp = client
        .get(url("/public/x"))
        .header("X-Auth-Username", "root")
        .header("X-Auth-Scope", "admin")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    for h in ["x-auth-username", "x-auth-scope", "x-auth-client-id"] {
        assert!(echoed(&echo, h).is_empty(), "{h}: {echo}");
    }

    // Refused: 401 with the challenge, 403 for a missing scope; the app never asked.
    let resp = client.get(url("/read")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer realm="), "{challenge}");
    let resp = client
        .get(url("/read"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client
        .get(url("/all"))
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    // The method counts (the subrequest itself is a GET): /upload takes POST and PUT only.
    let resp = client
        .get(url("/upload"))
        .bearer_auth("rw")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let resp = client
        .post(url("/upload"))
        .bearer_auth("rw")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    // A client's look-alikes of either family change nothing: nginx sets its own.
    for (m, u) in [
        ("x-original-method", "x-original-uri"),
        ("x-forwarded-method", "x-forwarded-uri"),
    ] {
        let resp = client
            .post(url("/upload"))
            .bearer_auth("read")
            .header(m, "GET")
            .header(u, "/public/x")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{u}");
        let resp = client
            .get(url("/read"))
            .header(u, "/public/x")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{u}");
    }

    // A fragment in the target: nginx hands $request_uri to the check whole, the check is 400,
    // and nginx answers 500 without asking the app.
    let status = raw_status(
        format!("127.0.0.1:{port}").parse().unwrap(),
        "GET /public/x#/../read HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 500);

    // Over cleartext $ssl_client_escaped_cert is empty: a client's certificate header is
    // dropped, so a certificate-bound token without its TLS certificate is refused.
    let pki = Pki::new();
    let alice = pki.client("alice").0;
    let bound = format!("bound-{}", x5t(&alice));
    let resp = client
        .get(url("/read"))
        .bearer_auth(&bound)
        .header("X-Tokengate-Client-Cert", escaped(&alice))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "a client's own certificate header");
    stop(proxy, config).await;
}

fn escaped(pem: &std::path::Path) -> String {
    encode(&std::fs::read_to_string(pem).unwrap())
}

fn x5t(pem: &std::path::Path) -> String {
    let der = der_from_escaped_pem(escaped(pem).as_bytes()).expect("a PEM certificate");
    CertThumbprint::of_der(&der).x5t_s256()
}

/// curl over TLS to nginx on `port`: the status code (`000` when no HTTP answer came).
async fn curl(pki: &Pki, port: u16, args: Vec<String>) -> String {
    let ca = pki.ca();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--max-time",
                "5",
                "-w",
                "%{http_code}",
            ])
            .arg("--cacert")
            .arg(&ca)
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
            .args(&args)
            .arg(format!("https://localhost:{port}/read"))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_passes_the_certificate_it_verified_and_no_other() {
    if !have_nginx() {
        return;
    }
    let pki = Pki::new();
    let (cert, key) = pki.server("nginx");
    let (alice, alice_key) = pki.client("alice");
    let (bob, bob_key) = pki.client("bob");
    let bound = format!("Authorization: Bearer bound-{}", x5t(&alice));
    let introspector = Introspector::start().await;
    let (proxy, config, auth, app) = proxy_with(&introspector, NGINX).await;
    let port = free_port();
    let server = format!(
        "listen 127.0.0.1:{port} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};\n    \
         ssl_client_certificate {};\n    ssl_verify_client optional;",
        cert.display(),
        key.display(),
        pki.ca().display()
    );
    let _nginx = nginx(port, &server, &documented_block(auth, app)).await;
    let with = |c: &std::path::Path, k: &std::path::Path| {
        vec![
            "--cert".to_owned(),
            c.display().to_string(),
            "--key".to_owned(),
            k.display().to_string(),
            "-H".to_owned(),
            bound.clone(),
        ]
    };
    assert_eq!(curl(&pki, port, with(&alice, &alice_key)).await, "200");
    assert_eq!(curl(&pki, port, with(&bob, &bob_key)).await, "401");
    // No TLS certificate, alice's (public) certificate in the header: nginx clears it.
    let forged = vec![
        "-H".to_owned(),
        bound.clone(),
        "-H".to_owned(),
        format!("X-Tokengate-Client-Cert: {}", escaped(&alice)),
    ];
    assert_eq!(curl(&pki, port, forged).await, "401");
    // Bob's TLS certificate and alice's in the header: nginx's own wins.
    let mut both = with(&bob, &bob_key);
    both.extend([
        "-H".to_owned(),
        format!("X-Tokengate-Client-Cert: {}", escaped(&alice)),
    ]);
    assert_eq!(curl(&pki, port, both).await, "401");
    stop(proxy, config).await;
}

/// The check Traefik's forwardAuth sends for a client's request: every client header copied,
/// then its own X-Forwarded-Method, -Proto, -Host, -Uri and -For set over them.
fn traefik_check(
    client: &reqwest::Client,
    auth: SocketAddr,
    method: &str,
    target: &str,
    client_headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let mut req = client.get(format!("http://{auth}/"));
    for (n, v) in client_headers {
        let n = n.to_ascii_lowercase();
        if !n.starts_with("x-forwarded-") {
            req = req.header(n, *v);
        }
    }
    req.header("X-Forwarded-Method", method)
        .header("X-Forwarded-Proto", "http")
        .header("X-Forwarded-Host", "api.example")
        .header("X-Forwarded-Uri", target)
        .header("X-Forwarded-For", "203.0.113.9")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_and_envoy_checks_are_decided_on_the_original_request_only() {
    let introspector = Introspector::start().await;
    let client = reqwest::Client::new();
    let look_alikes = [
        ("X-Original-URI", "/public/x"),
        ("X-Original-Method", "GET"),
        ("X-Forwarded-Uri", "/public/x"),
        ("X-Forwarded-Method", "GET"),
    ];

    let (proxy, config, auth, _) = proxy_with(
        &introspector,
        "ingress: traefik, trusted_peers: [127.0.0.1]",
    )
    .await;
    // GET /read without a token, the client's X-Original-URI naming a public path: 401.
    let resp = traefik_check(&client, auth, "GET", "/read", &look_alikes)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    // POST /upload with a read token, the client claiming GET /read: 403 (no write scope).
    let read = [
        ("Authorization", "Bearer read"),
        look_alikes[0],
        look_alikes[1],
    ];
    let resp = traefik_check(&client, auth, "POST", "/upload", &read)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let ok = [("Authorization", "Bearer read")];
    let resp = traefik_check(&client, auth, "GET", "/read", &ok)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-auth-username"], "alice");
    // Only nginx's headers from a trusted peer behind Traefik: not read, so 400, not a
    // decision on the check's own "/".
    let resp = client
        .get(format!("http://{auth}/read"))
        .header("X-Original-URI", "/public/x")
        .header("X-Original-Method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["detail"], "x-forwarded-method is missing");
    // A fragment in the target: 400, never a decision on what precedes the #.
    let resp = traefik_check(&client, auth, "GET", "/public/x#/../read", &[])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = traefik_check(&client, auth, "GET", "http://api.example/read", &ok)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    stop(proxy, config).await;

    // Envoy's ext_authz HTTP check: the original method, the path under path_prefix, the
    // client's headers as allowed; none of them names the request.
    let (proxy, config, auth, _) = proxy_with(
        &introspector,
        "ingress: envoy, trusted_peers: [127.0.0.1], path_prefix: /ext-authz",
    )
    .await;
    let mut req = client.get(format!("http://{auth}/ext-authz/read"));
    for (n, v) in look_alikes {
        req = req.header(n, v);
    }
    assert_eq!(req.send().await.unwrap().status(), 401);
    let resp = client
        .post(format!("http://{auth}/ext-authz/upload"))
        .bearer_auth("rw")
        .header("X-Original-Method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A check in absolute form: 400 (Pingora itself drops a fragment from a request line, as
    // Envoy does before it asks).
    let status = raw_status(
        auth,
        "GET http://x/ext-authz/read HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400);
    stop(proxy, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_request_headers_only_from_trusted_peers() {
    let introspector = Introspector::start().await;
    // 127.0.0.1 is not trusted here: X-Original-URI is ignored, the request's own path counts.
    let (proxy, config, auth, _) =
        proxy_with(&introspector, "ingress: nginx, trusted_peers: [10.0.0.0/8]").await;
    let client = reqwest::Client::new();
    let resp = client
        .get(format!("http://{auth}/read"))
        .header("X-Original-URI", "/public/x")
        .header("X-Original-Method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        401,
        "judged on /read, not on the claimed /public/x"
    );
    let resp = client
        .get(format!("http://{auth}/read"))
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-auth-username"], "alice");
    stop(proxy, config).await;
}

/// RFC 9470 step-up in forward-auth mode: a route requiring `acr_values` and `max_age` answers
/// the check with the same 401 and challenge as the gateway; a two-factor sign-in recent enough
/// passes, one older than a shorter `max_age` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_up_routes_answer_forward_auth_checks_with_the_rfc_9470_challenge() {
    let introspector = Introspector::start().await;
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth_port = free_port();
    let routes = "\nroutes:\n  - { name: step-up, path: /stepup, upstream: api, acr_values: [urn:tokengate:acr:mfa], max_age: 600 }\n  - { name: fresh, path: /fresh, upstream: api, acr_values: [urn:tokengate:acr:mfa], max_age: 60 }\n";
    let yaml = format!(
        "forward_auth: {{ listen: \"127.0.0.1:{auth_port}\", ingress: traefik, trusted_peers: [127.0.0.1] }}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, routes)
    );
    let (proxy, config) = start_proxy("forward-auth-step-up", &yaml).await;
    let auth = proxy.forward_auth_addr().unwrap();
    let client = reqwest::Client::new();
    let check = |target: &str, token: &str| {
        let bearer = format!("Bearer {token}");
        traefik_check(
            &client,
            auth,
            "GET",
            target,
            &[("Authorization", bearer.as_str())],
        )
        .send()
    };
    let refused = check("/stepup", "read").await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(
        refused.headers()["www-authenticate"],
        "Bearer realm=\"api\", error=\"insufficient_user_authentication\", error_description=\"A different authentication level is required.\", acr_values=\"urn:tokengate:acr:mfa\", max_age=\"600\""
    );
    let passed = check("/stepup", "mfa").await.unwrap();
    assert_eq!(passed.status(), 200);
    let stale = check("/fresh", "mfa").await.unwrap();
    assert_eq!(stale.status(), 401);
    assert_eq!(
        stale.headers()["www-authenticate"],
        "Bearer realm=\"api\", error=\"insufficient_user_authentication\", error_description=\"More recent authentication is required.\", acr_values=\"urn:tokengate:acr:mfa\", max_age=\"60\""
    );
    stop(proxy, config).await;
}

/// DPoP at the decision endpoint (RFC 9449): a Traefik check of a DPoP-bound token is decided on
/// a proof of the original request, `htu` from Traefik's `X-Forwarded-Proto` and
/// `X-Forwarded-Host` (a trusted peer); the check request's own URL, a bearer downgrade and a
/// replay are refused with a `DPoP` challenge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dpop_bound_token_is_checked_against_the_original_request() {
    use resource_server::dpop::signer::ProofSigner;
    let introspector = Introspector::start().await;
    let client = reqwest::Client::new();
    let (proxy, config, auth, _) = proxy_with(
        &introspector,
        "ingress: traefik, trusted_peers: [127.0.0.1]",
    )
    .await;
    let signer = ProofSigner::es256();
    let token = format!("dpop-{}", signer.thumbprint());
    let dpop = format!("DPoP {token}");
    let now = common::unix_now();
    let check = |proof: String, authorization: String| {
        let headers = [("Authorization", authorization), ("DPoP", proof)];
        let client = &client;
        async move {
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            traefik_check(client, auth, "GET", "/read?page=2", &pairs)
                .send()
                .await
                .unwrap()
        }
    };
    // The URL the client saw: http://api.example/read (Traefik's forwarded scheme and host).
    let proof = signer.proof("GET", "http://api.example/read", now, Some(&token));
    let ok = check(proof.clone(), dpop.clone()).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["x-auth-username"], "alice");
    let challenge =
        |r: &reqwest::Response| r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    let replay = check(proof, dpop.clone()).await;
    assert_eq!(replay.status(), 401);
    assert!(challenge(&replay).starts_with("DPoP error=\"invalid_dpop_proof\""));
    // A proof for the decision endpoint's own URL, or for another method: refused.
    for (method, url) in [
        ("GET", format!("http://{auth}/read")),
        ("POST", "http://api.example/read".to_owned()),
    ] {
        let proof = signer.proof(method, &url, now, Some(&token));
        let refused = check(proof, dpop.clone()).await;
        assert_eq!(refused.status(), 401, "{method} {url}");
        assert!(
            challenge(&refused).starts_with("DPoP error=\"invalid_dpop_proof\""),
            "{method} {url}"
        );
    }
    // The bound token as a bearer token (§7.2).
    let proof = signer.proof("GET", "http://api.example/read", now, Some(&token));
    let downgrade = check(proof, format!("Bearer {token}")).await;
    assert_eq!(downgrade.status(), 401);
    assert!(challenge(&downgrade).starts_with("DPoP error=\"invalid_token\""));
    stop(proxy, config).await;
}
