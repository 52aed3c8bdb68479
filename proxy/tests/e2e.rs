//! End-to-end tests over real sockets: the proxy in front of an echo upstream, with a stand-in
//! RFC 7662 server (the full-stack tests with the real authorization server live at the root).

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, Introspector, echoed, free_port};
use serde_json::Value;

const NO_CREDENTIALS: &str = r#"{"detail":"Authentication credentials were not provided."}"#;
const NO_PERMISSION: &str = r#"{"detail":"You do not have permission to perform this action."}"#;

fn header<'a>(resp: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn status_and_body(resp: reqwest::Response) -> (u16, String) {
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn public_route_is_forwarded_without_a_token() {
    let f = Fixture::start().await;
    let resp = f.get("/public/hello?x=1", None).await;
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echo["target"], "/public/hello?x=1");
    assert_eq!(echo["method"], "GET");
    // No identity on a public route, even with a (bad) token.
    let echo: Value = f
        .get("/public/x", Some("garbage"))
        .await
        .json()
        .await
        .unwrap();
    assert!(echoed(&echo, "x-auth-username").is_empty());
    assert_eq!(
        f.introspector.calls("garbage"),
        0,
        "public routes never introspect"
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_token_is_401_with_the_reference_body() {
    let f = Fixture::start().await;
    let resp = f.get("/read", None).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(
        header(&resp, "www-authenticate"),
        Some(r#"Bearer realm="api", scope="read""#)
    );
    assert_eq!(header(&resp, "content-type"), Some("application/json"));
    assert_eq!(resp.text().await.unwrap(), NO_CREDENTIALS);
    // Another scheme is no credentials either.
    let resp = f
        .client
        .get(f.url("/read"))
        .header("Authorization", "Basic dTpw")
        .send()
        .await
        .unwrap();
    assert_eq!(
        status_and_body(resp).await,
        (401, NO_CREDENTIALS.to_owned())
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_token_is_401_invalid_token() {
    let f = Fixture::start().await;
    let resp = f.get("/read", Some("revoked-or-unknown")).await;
    assert_eq!(resp.status(), 401);
    let challenge = header(&resp, "www-authenticate").unwrap().to_owned();
    assert!(
        challenge.starts_with(r#"Bearer realm="api", error="invalid_token", error_description=""#),
        "{challenge}"
    );
    assert_eq!(header(&resp, "content-type"), Some("application/json"));
    let body: Value = resp.json().await.unwrap();
    assert!(body["detail"].is_string());
    // Bearer scheme in any case; an empty token is a bad request.
    let resp = f
        .client
        .get(f.url("/read"))
        .header("Authorization", "bEaReR read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = f
        .client
        .get(f.url("/read"))
        .header("Authorization", "Bearer ")
        .send()
        .await
        .unwrap();
    assert!(
        matches!(resp.status().as_u16(), 400 | 401),
        "{}",
        resp.status()
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn insufficient_scope_is_403_naming_the_scopes() {
    let f = Fixture::start().await;
    let resp = f.get("/all", Some("read")).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(
        header(&resp, "www-authenticate"),
        Some(r#"Bearer realm="api", error="insufficient_scope", scope="read write""#)
    );
    assert_eq!(header(&resp, "content-type"), Some("application/json"));
    assert_eq!(resp.text().await.unwrap(), NO_PERMISSION);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn all_of_and_any_of_routes() {
    let f = Fixture::start().await;
    let cases = [
        ("/read", "read", 200),
        ("/read", "groups", 403),
        ("/all", "rw", 200),
        ("/all", "read", 403),
        ("/any", "rw", 200),
        ("/any", "groups", 200),
        ("/any", "read", 403),
        ("/authn", "none", 200),
        ("/authn", "inactive", 401),
    ];
    for (path, token, want) in cases {
        let got = f.get(path, Some(token)).await.status().as_u16();
        assert_eq!(got, want, "{path} with token {token}");
    }
    // Methods are part of the route: GET /upload matches nothing.
    assert_eq!(f.get("/upload", Some("rw")).await.status(), 404);
    // The cache keeps answers, not decisions: one call for "read" across routes.
    assert_eq!(f.introspector.calls("read"), 1);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unmatched_paths_are_denied() {
    let f = Fixture::start().await;
    for path in ["/nowhere", "/read/", "/READ"] {
        let resp = f.get(path, Some("rw")).await;
        assert_eq!(resp.status(), 404, "{path}");
        assert_eq!(resp.text().await.unwrap(), r#"{"detail":"Not found."}"#);
    }
    // Dot segments (which an HTTP client would normalise away) never reach a permissive rule.
    for path in ["/public/../read", "/public/%2e%2e/read", "/public/./x"] {
        let head = raw_get(f.proxy.listen_addr(), path, "rw").await;
        assert!(head.starts_with("HTTP/1.1 404"), "{path}: {head}");
    }
    assert_eq!(
        f.introspector.calls("rw"),
        0,
        "unmatched requests are not introspected"
    );
    f.stop().await;
}

/// Sends `GET path` exactly as given (no client-side normalisation); returns the status line.
async fn raw_get(addr: std::net::SocketAddr, path: &str, token: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn spoofed_identity_headers_never_reach_the_upstream() {
    let f = Fixture::start().await;
    let resp = f
        .client
        .get(f.url("/read"))
        .bearer_auth("read")
        .header("X-Auth-Username", "mallory")
        .header("x-auth-username", "mallory2")
        .header("X-AUTH-SCOPE", "admin")
        .header("X-Auth-Client-Id", "evil")
        .header("X-Auth-Expires", "9999999999")
        .header("X_Auth_Username", "underscored")
        .header("X-Auth-Role", "root")
        .header("X-Request-Id", "forged")
        .header("X-Client-Note", "kept")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echoed(&echo, "x-auth-username"), ["alice"]);
    assert_eq!(echoed(&echo, "x-auth-client-id"), ["app-1"]);
    assert_eq!(echoed(&echo, "x-auth-scope"), ["read"]);
    assert_eq!(echoed(&echo, "x-auth-expires").len(), 1);
    assert_ne!(echoed(&echo, "x-auth-expires"), ["9999999999"]);
    assert!(echoed(&echo, "x_auth_username").is_empty());
    assert!(echoed(&echo, "x-auth-role").is_empty());
    assert_eq!(echoed(&echo, "x-client-note"), ["kept"]);
    // A request id from a peer outside trusted_peers is replaced by one of the proxy's.
    let ids = echoed(&echo, "x-request-id");
    assert_eq!(ids.len(), 1);
    assert_ne!(ids[0], "forged");

    // On a public route the spoofed headers are removed too, and none are set.
    let resp = f
        .client
        .get(f.url("/public/x"))
        .header("X-Auth-Username", "mallory")
        .send()
        .await
        .unwrap();
    let echo: Value = resp.json().await.unwrap();
    assert!(echoed(&echo, "x-auth-username").is_empty());
    f.stop().await;
}

/// The upstream's header names as received, with `name` (any case) among them.
fn echoed_names(echo: &Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap().to_owned())
        .filter(|n| n.eq_ignore_ascii_case(name))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn header_names_reach_the_upstream_in_lower_case_unless_preserved() {
    let introspector = Introspector::start().await;
    let upstream = common::echo_upstream().await;
    let (listen, admin) = common::two_free_ports();
    let yaml = common::config_yaml(listen, admin, &introspector.url(), upstream, common::ROUTES)
        .replace(
            "api: { address",
            "kept: { address: \"UPSTREAM\", preserve_header_case: true }\n  api: { address",
        )
        .replace("UPSTREAM", &upstream.to_string())
        .replace(
            "upstream: api, scopes: [read] }",
            "upstream: api, scopes: [read] }\n  - { name: kept, path: /kept, upstream: kept, scopes: [read] }",
        );
    let (handle, path) = common::start_proxy("case", &yaml).await;
    let client = reqwest::Client::new();
    // reqwest (hyper) writes names in lower case: a raw request keeps the client's spelling.
    let send = |path: &str| {
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer read\r\nX-Client-Note: kept\r\nX-Auth-Username: mallory\r\nConnection: close\r\n\r\n"
        );
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", listen))
                .await
                .unwrap();
            s.write_all(raw.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            s.read_to_end(&mut answer).await.unwrap();
            let answer = String::from_utf8(answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            let body = answer.split_once("\r\n\r\n").unwrap().1;
            // Chunked or not: the JSON object is the body's one `{...}`.
            let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
            serde_json::from_str::<Value>(json).unwrap()
        }
    };
    let echo = send("/read").await;
    assert_eq!(echoed_names(&echo, "x-client-note"), ["x-client-note"]);
    assert_eq!(
        echoed_names(&echo, "host"),
        ["Host"],
        "standard names titled"
    );
    assert_eq!(
        echoed(&echo, "x-auth-username"),
        ["alice"],
        "spoofed one stripped"
    );
    assert_eq!(echoed_names(&echo, "x-forwarded-for"), ["x-forwarded-for"]);
    assert_eq!(echoed(&echo, "authorization"), Vec::<String>::new());
    let echo = send("/kept").await;
    assert_eq!(echoed_names(&echo, "x-client-note"), ["X-Client-Note"]);
    assert_eq!(
        echoed(&echo, "x-auth-username"),
        ["alice"],
        "spoofed one stripped"
    );
    assert_eq!(echoed_names(&echo, "x-forwarded-for"), ["X-Forwarded-For"]);
    assert_eq!(echoed(&echo, "authorization"), Vec::<String>::new());
    drop(client);
    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || handle.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn authorization_is_stripped_or_passed_per_upstream() {
    let f = Fixture::start().await;
    let echo: Value = f.get("/read", Some("read")).await.json().await.unwrap();
    assert!(
        echoed(&echo, "authorization").is_empty(),
        "api upstream: stripped"
    );
    let echo: Value = f.get("/pass/x", Some("read")).await.json().await.unwrap();
    assert_eq!(
        echoed(&echo, "authorization"),
        ["Bearer read"],
        "open upstream: passed"
    );
    // The client's Host is kept; X-Forwarded-For is added.
    let host = f.proxy.listen_addr().to_string();
    assert_eq!(echoed(&echo, "host"), [host]);
    assert_eq!(echoed(&echo, "x-forwarded-for"), ["127.0.0.1"]);
    // An existing list, on several lines, becomes one line with the peer appended (issue 8).
    let echo: Value = f
        .client
        .get(f.url("/pass/x"))
        .bearer_auth("read")
        .header("x-forwarded-for", "198.51.100.1")
        .header("x-forwarded-for", "10.0.0.2, 10.0.0.3")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        echoed(&echo, "x-forwarded-for"),
        ["198.51.100.1, 10.0.0.2, 10.0.0.3, 127.0.0.1"]
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn authorization_server_down_is_503_and_not_ready() {
    let introspector = Introspector::start().await;
    let dead = format!("http://127.0.0.1:{}/o/introspect/", free_port());
    let f = Fixture::start_with(introspector, &dead, common::ROUTES).await;
    let resp = f.get("/read", Some("read")).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(header(&resp, "content-type"), Some("application/json"));
    assert_eq!(
        resp.text().await.unwrap(),
        r#"{"detail":"Authorization server unavailable."}"#
    );
    // Public routes still work; readiness says 503.
    assert_eq!(f.get("/public/x", None).await.status(), 200);
    let ready = f.client.get(f.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let health = f.client.get(f.admin_url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_with_a_new_token_make_one_introspection_call() {
    let f = Fixture::start().await;
    let url = f.url("/read");
    let requests = (0..32).map(|_| f.client.get(&url).bearer_auth("slow-1").send());
    let statuses: Vec<u16> = futures_join_all(requests).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(f.introspector.calls("slow-1"), 1);
    f.stop().await;
}

/// `join_all` without the futures crate: spawn each request and await them in order.
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<u16>
where
    F: std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap().unwrap().status().as_u16());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_reload_on_change_and_a_broken_file_keeps_the_old_rules() {
    let f = Fixture::start().await;
    assert_eq!(f.get("/new", Some("read")).await.status(), 404);

    // Add a route: picked up by the file watcher.
    let original = std::fs::read_to_string(&f.config_path).unwrap();
    let extended =
        format!("{original}  - {{ name: new, path: /new, upstream: api, scopes: [read] }}\n");
    std::fs::write(&f.config_path, &extended).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if f.get("/new", Some("read")).await.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the new rule never took effect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A broken file (route naming an unknown upstream) is refused; the rules in force stay.
    let broken = format!("{extended}  - {{ name: bad, path: /bad, upstream: nowhere }}\n");
    std::fs::write(&f.config_path, &broken).unwrap();
    let err = f
        .proxy
        .reload()
        .expect_err("broken file refused")
        .to_string();
    assert!(
        err.contains("routes[8] (bad)") && err.contains("nowhere"),
        "{err}"
    );
    std::fs::write(&f.config_path, "routes: [ this is not yaml").unwrap();
    assert!(f.proxy.reload().is_err());
    // A file cut short at `routes:`, or an explicitly empty rule set, is never swapped in, even
    // with allow_empty_routes (that only lets a proxy start empty).
    let head = &extended[..extended.find("routes:").unwrap()];
    for empty in [
        format!("{head}routes:\n"),
        format!("{head}routes: []\nallow_empty_routes: true\n"),
    ] {
        std::fs::write(&f.config_path, &empty).unwrap();
        let err = f
            .proxy
            .reload()
            .expect_err("empty rule set refused")
            .to_string();
        assert!(err.contains("routes"), "{err}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await; // let the watcher see it too
    assert_eq!(f.get("/new", Some("read")).await.status(), 200);
    assert_eq!(f.get("/read", Some("read")).await.status(), 200);

    let metrics = f.metrics().await;
    assert!(
        metrics.contains("tokengate_proxy_rule_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("tokengate_proxy_rule_reloads_total{result=\"error\"} 0"),
        "{metrics}"
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_upload_is_streamed_through() {
    let f = Fixture::start().await;
    let body: Vec<u8> = (0..20 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let sum = body.iter().fold(0u64, |s, b| s.wrapping_add(u64::from(*b)));
    let resp = f
        .client
        .post(f.url("/upload"))
        .bearer_auth("rw")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echo["body_len"], 20 * 1024 * 1024);
    assert_eq!(echo["body_sum"], sum);
    // Refused before any byte goes upstream.
    let resp = f
        .client
        .post(f.url("/upload"))
        .bearer_auth("read")
        .body(vec![0u8; 1 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_endpoints() {
    let f = Fixture::start().await;
    let health = f.client.get(f.admin_url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    // The readiness probe reaches the stand-in authorization server shortly after start.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = f.client.get(f.admin_url("/readyz")).send().await.unwrap();
        if ready.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    f.get("/read", Some("read")).await;
    f.get("/read", Some("read")).await;
    f.get("/read", None).await;
    f.get("/nowhere", None).await;
    let resp = f.client.get(f.admin_url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "content-type").unwrap(),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let m = resp.text().await.unwrap();
    for needle in [
        "tokengate_proxy_requests_total{route=\"read\",decision=\"allow\",listener=\"proxy\"} 2",
        "tokengate_proxy_requests_total{route=\"read\",decision=\"unauthenticated\",listener=\"proxy\"} 1",
        "tokengate_proxy_requests_total{route=\"_unmatched\",decision=\"no_route\",listener=\"proxy\"} 1",
        "tokengate_proxy_cache_hits_total 1",
        "tokengate_proxy_cache_coalesced_total 0",
        "# TYPE tokengate_proxy_introspection_duration_seconds histogram",
        "tokengate_proxy_introspection_duration_seconds_bucket{le=\"+Inf\"}",
        "# TYPE tokengate_proxy_upstream_errors counter",
        "tokengate_proxy_upstream_errors_total{upstream=\"api\"} 0",
    ] {
        assert!(m.contains(needle), "missing {needle:?} in\n{m}");
    }
    assert!(m.contains("tokengate_proxy_cache_misses_total "), "{m}");
    assert_eq!(
        f.client
            .get(f.admin_url("/other"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_down_is_a_json_502_and_counted() {
    let introspector = Introspector::start().await;
    let url = introspector.url();
    let f = Fixture::start_with(introspector, &url, common::ROUTES).await;
    // Point a new configuration at a closed port and reload.
    let text = std::fs::read_to_string(&f.config_path).unwrap();
    let closed = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        &f.config_path,
        text.replace(&f.upstream.to_string(), &closed),
    )
    .unwrap();
    f.proxy.reload().unwrap();
    let resp = f.get("/read", Some("read")).await;
    assert_eq!(resp.status(), 502);
    // JSON like every refusal, and no `Server: Pingora` (issue 27, item 3).
    assert_eq!(resp.headers().get("server"), None, "{:?}", resp.headers());
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(
        resp.text().await.unwrap(),
        r#"{"detail":"The upstream service is unavailable."}"#
    );
    // Counted in Pingora's logging phase, which may run just after the client has its answer:
    // polled, not read once.
    let counted = "tokengate_proxy_upstream_errors_total{upstream=\"api\"} 1";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let m = loop {
        let m = f.metrics().await;
        if m.contains(counted) || std::time::Instant::now() > deadline {
            break m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(m.contains(counted), "{m}");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstreams_server_header_is_not_passed_on() {
    let f = Fixture::start().await;
    let resp = f.get("/read", Some("read")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("server"), None, "{:?}", resp.headers());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_port_is_an_error_not_a_panic() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let introspector = Introspector::start().await;
    let yaml = common::config_yaml(
        port,
        free_port(),
        &introspector.url(),
        introspector.addr,
        common::ROUTES,
    );
    let config = proxy::parse_config(&yaml, "test.yaml", |_| None).unwrap();
    let err = tokio::task::spawn_blocking(move || proxy::spawn(config).err())
        .await
        .unwrap()
        .expect("start refused");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_introspection_credentials_are_named_in_readiness() {
    let introspector = common::Introspector::start().await;
    let upstream = common::echo_upstream().await;
    let (listen, admin) = common::two_free_ports();
    let yaml = common::config_yaml(listen, admin, &introspector.url(), upstream, common::ROUTES)
        .replace(common::INTROSPECTOR_TOKEN, "a-token-the-server-refuses");
    let (handle, path) = common::start_proxy("refused", &yaml).await;
    let client = reqwest::Client::new();
    // Requests get 503 (the server is up but will not answer us), and /readyz says why.
    let resp = client
        .get(format!("http://127.0.0.1:{listen}/read"))
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let ready = client
        .get(format!("http://127.0.0.1:{admin}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(
        ready.text().await.unwrap(),
        "not ready: the authorization server refused the proxy's introspection credentials\n"
    );
    tokio::task::spawn_blocking(move || handle.shutdown())
        .await
        .unwrap();
    let _ = std::fs::remove_file(path);
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_address_overrides_hold_across_reloads() {
    let introspector = Introspector::start().await;
    let upstream = common::echo_upstream().await;
    let closed: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (listen, admin) = common::two_free_ports();
    // The file names a closed port; the embedding process (as the stack does) decides the
    // real upstream's address as an override.
    let yaml = common::config_yaml(listen, admin, &introspector.url(), closed, common::ROUTES);
    let path = common::temp_path("override");
    std::fs::write(&path, &yaml).unwrap();
    let from_file = proxy::load_config_with_env(&path, |_| None).expect("valid");
    // An override wins over the environment variable too.
    let env_var = |k: &str| (k == "PROXY_UPSTREAM_API_ADDRESS").then(|| closed.to_string());
    let from_env = proxy::load_config_with_env(&path, env_var).expect("valid");
    let overrides =
        proxy::config::Overrides::from([("upstreams.api.address", upstream.to_string())]);
    let config = from_env.with_overrides(&overrides).expect("valid");
    assert_eq!(
        config.upstreams["api"].addresses[0].to_string(),
        upstream.to_string()
    );
    assert!(
        config.upstreams["open"].addresses[0]
            .to_string()
            .contains(&closed.to_string()),
        "only the named upstream moves"
    );
    let typo = proxy::config::Overrides::from([("upstreams.api.adress", "x")]);
    let err = from_file.with_overrides(&typo).unwrap_err().to_string();
    assert!(
        err.starts_with("key \"upstreams.api.adress\" set by the stack: "),
        "{err}"
    );
    let bad = proxy::config::Overrides::from([("upstreams.api.address", "no port")]);
    let err = from_file.with_overrides(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with("key \"upstreams.api.address\" set by the stack: \"no port\""),
        "{err}"
    );
    let handle = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .unwrap();
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(format!("http://127.0.0.1:{listen}/read"))
            .bearer_auth("read")
            .send()
    };
    assert_eq!(get().await.unwrap().status(), 200);
    // A reload of the unchanged file keeps the override (it used to turn reloads off instead).
    std::fs::write(
        &path,
        format!("{yaml}  - {{ name: new, path: /new, upstream: api }}\n"),
    )
    .unwrap();
    handle.reload().unwrap();
    assert_eq!(get().await.unwrap().status(), 200);

    let bad = |k: &str| (k == "PROXY_UPSTREAM_API_ADDRESS").then(|| "no port".to_owned());
    let err = proxy::load_config_with_env(&path, bad)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("environment variable PROXY_UPSTREAM_API_ADDRESS"),
        "{err}"
    );
    tokio::task::spawn_blocking(move || handle.shutdown())
        .await
        .unwrap();
    let _ = std::fs::remove_file(path);
}

/// `/metrics` read by the Prometheus project's own Python parser of OpenMetrics text
/// (`prometheus_client.openmetrics`, strict: `# EOF`, suffixes, histogram buckets): the
/// request duration histogram by route and decision, upstream answers by status class and
/// build info are well-formed families with the values the requests made. Skipped (with a
/// notice) without `prometheus_client`, except under CI.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_with_the_prometheus_parser() {
    use std::io::Write as _;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let found = std::process::Command::new(&python)
        .args(["-c", "import prometheus_client"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").map_or(true, |v| v.is_empty()),
            "CI must install prometheus-client (pip install prometheus-client)"
        );
        eprintln!("SKIPPED: pip install prometheus-client");
        return;
    }
    let f = Fixture::start().await;
    assert_eq!(f.get("/read", Some("read")).await.status(), 200);
    assert_eq!(f.get("/read", Some("read")).await.status(), 200);
    assert_eq!(f.get("/read", None).await.status(), 401);
    // Observed in Pingora's logging phase, just after the client has its answer: polled.
    let wanted = "tokengate_proxy_request_duration_seconds_count{route=\"read\",decision=\"unauthenticated\",listener=\"proxy\"} 1";
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = f.metrics().await;
        if text.contains(wanted) && text.contains("class=\"2xx\"} 2") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    f.stop().await;

    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    out[family.name] = {"type": family.type, "samples": [[s.name, s.labels, s.value] for s in family.samples]}
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let families: Value = serde_json::from_slice(&output.stdout).unwrap();
    let sample = |family: &str, name: &str, labels: &[(&str, &str)]| -> f64 {
        let f = &families[family];
        f["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("no family {family} in {families}"))
            .iter()
            .find(|s| s[0] == name && labels.iter().all(|(k, v)| s[1][k] == *v))
            .unwrap_or_else(|| panic!("no {name}{labels:?} in {f}"))[2]
            .as_f64()
            .unwrap()
    };
    let duration = "tokengate_proxy_request_duration_seconds";
    assert_eq!(families[duration]["type"], "histogram");
    let allow = [("route", "read"), ("decision", "allow")];
    assert_eq!(sample(duration, &format!("{duration}_count"), &allow), 2.0);
    let inf = [("route", "read"), ("decision", "allow"), ("le", "+Inf")];
    assert_eq!(sample(duration, &format!("{duration}_bucket"), &inf), 2.0);
    assert!(sample(duration, &format!("{duration}_sum"), &allow) > 0.0);
    let refused = [("route", "read"), ("decision", "unauthenticated")];
    assert_eq!(
        sample(duration, &format!("{duration}_count"), &refused),
        1.0
    );
    let responses = "tokengate_proxy_upstream_responses";
    assert_eq!(families[responses]["type"], "counter");
    let ok = [("upstream", "api"), ("class", "2xx")];
    assert_eq!(sample(responses, &format!("{responses}_total"), &ok), 2.0);
    let server_errors = [("upstream", "api"), ("class", "5xx")];
    assert_eq!(
        sample(responses, &format!("{responses}_total"), &server_errors),
        0.0
    );
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    let build = "tokengate_proxy_build_info";
    assert_eq!(families[build]["type"], "gauge");
    assert_eq!(sample(build, build, &version), 1.0);
}
