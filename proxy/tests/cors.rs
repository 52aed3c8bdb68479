//! CORS per route and groups to the upstream, over real sockets: the proxy in front of a counting
//! echo upstream, with the stand-in introspection endpoint of `common` (the browser test with the
//! real authorization server is `tests/cors_browser.rs` at the root).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Introspector, config_yaml, echoed, serve, start_proxy, two_free_ports};
use serde_json::{Value, json};

const APP: &str = "https://app.example.com";
const EVIL: &str = "https://evil.example.com";

const ROUTES: &str = r#"
routes:
  - name: items
    prefix: /items/
    methods: [GET, PUT]
    upstream: api
    scopes: [read]
    cors:
      allowed_origins: [https://app.example.com, http://localhost:5173]
      allowed_headers: [authorization, content-type, x-trace]
      exposed_headers: [x-request-id]
      max_age: 120
  - { name: plain, prefix: /plain/, upstream: api, scopes: [read] }
  - { name: admin, prefix: /admin/, upstream: api, scopes: [read], groups_any: [admins, ops team] }
  - { name: staff, prefix: /staff/, upstream: api, groups_any: [staff] }
"#;

struct Setup {
    proxy: proxy::ProxyHandle,
    forwarded: Arc<AtomicUsize>,
    client: reqwest::Client,
}

impl Setup {
    async fn start() -> Setup {
        let introspector = Introspector::start().await;
        let forwarded = Arc::new(AtomicUsize::new(0));
        let counted = forwarded.clone();
        let upstream = serve(move |req| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                let headers: Vec<Value> = req.headers.iter().map(|(n, v)| json!([n, v])).collect();
                (200, json!({"method": req.method, "headers": headers}))
            }
        })
        .await;
        let (listen, admin) = two_free_ports();
        let yaml = config_yaml(listen, admin, &introspector.url(), upstream, ROUTES);
        let (proxy, path) = start_proxy("cors", &yaml).await;
        let _ = std::fs::remove_file(path);
        Setup {
            proxy,
            forwarded,
            client: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy.listen_addr())
    }

    fn forwarded(&self) -> usize {
        self.forwarded.load(Ordering::SeqCst)
    }

    async fn preflight(&self, path: &str, origin: &str, method: &str) -> reqwest::Response {
        self.client
            .request(reqwest::Method::OPTIONS, self.url(path))
            .header("origin", origin)
            .header("access-control-request-method", method)
            .header("access-control-request-headers", "authorization")
            .send()
            .await
            .unwrap()
    }

    async fn stop(self) {
        let proxy = self.proxy;
        tokio::task::spawn_blocking(move || proxy.shutdown_now())
            .await
            .unwrap();
    }
}

fn header<'a>(resp: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

fn cors_headers(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_preflight_is_answered_by_the_proxy_without_a_token_for_listed_origins_only() {
    let s = Setup::start().await;
    let ok = s.preflight("/items/7", APP, "PUT").await;
    assert_eq!(ok.status(), 204);
    assert_eq!(header(&ok, "access-control-allow-origin"), Some(APP));
    assert_eq!(
        header(&ok, "access-control-allow-methods"),
        Some("GET, PUT")
    );
    assert_eq!(
        header(&ok, "access-control-allow-headers"),
        Some("authorization, content-type, x-trace")
    );
    assert_eq!(header(&ok, "access-control-max-age"), Some("120"));
    assert_eq!(header(&ok, "access-control-allow-credentials"), None);
    assert!(header(&ok, "vary").unwrap().contains("Origin"));

    // Another origin, a method the route does not take, a header not allowed: 403, no CORS
    // header, so the browser refuses. Still no token asked for, still not forwarded.
    for (origin, method, headers) in [
        (EVIL, "PUT", "authorization"),
        ("https://app.example.com.evil.com", "GET", "authorization"),
        ("null", "GET", "authorization"),
        (APP, "DELETE", "authorization"),
        (APP, "GET", "x-secret"),
    ] {
        let resp = s
            .client
            .request(reqwest::Method::OPTIONS, s.url("/items/7"))
            .header("origin", origin)
            .header("access-control-request-method", method)
            .header("access-control-request-headers", headers)
            .send()
            .await
            .unwrap();
        // DELETE is no method of the route: no route answers for it, so the gate's 404.
        let expected = if method == "DELETE" { 404 } else { 403 };
        assert_eq!(resp.status(), expected, "{origin} {method} {headers}");
        assert!(
            cors_headers(&resp).is_empty(),
            "{origin}: {:?}",
            cors_headers(&resp)
        );
    }
    assert_eq!(s.forwarded(), 0, "no preflight reached the upstream");

    // OPTIONS without Access-Control-Request-Method, or on a route without cors, is an ordinary
    // request: the gate asks for a token.
    let bare = s
        .client
        .request(reqwest::Method::OPTIONS, s.url("/plain/x"))
        .header("origin", APP)
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    assert!(cors_headers(&bare).is_empty());
    let not_preflight = s
        .client
        .request(reqwest::Method::OPTIONS, s.url("/items/7"))
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(
        not_preflight.status(),
        404,
        "OPTIONS is no method of the route"
    );
    assert_eq!(s.forwarded(), 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_carry_cors_headers_for_listed_origins_refusals_too() {
    let s = Setup::start().await;
    let get = |origin: Option<&'static str>, token: Option<&'static str>| {
        let mut req = s.client.get(s.url("/items/1"));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let ok = get(Some(APP), Some("read")).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(header(&ok, "access-control-allow-origin"), Some(APP));
    assert_eq!(
        header(&ok, "access-control-expose-headers"),
        Some("x-request-id, www-authenticate, dpop-nonce")
    );
    assert!(
        ok.headers()
            .get_all("vary")
            .iter()
            .any(|v| v.to_str().unwrap().contains("Origin"))
    );
    let other = get(Some(EVIL), Some("read")).await.unwrap();
    assert_eq!(
        other.status(),
        200,
        "the browser, not the proxy, withholds the answer"
    );
    assert!(cors_headers(&other).is_empty());
    let none = get(None, Some("read")).await.unwrap();
    assert!(cors_headers(&none).is_empty());
    // A page of an allowed origin can read why it was refused (to sign in again).
    let refused = get(Some(APP), None).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(header(&refused, "access-control-allow-origin"), Some(APP));
    let refused = get(Some(EVIL), None).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(cors_headers(&refused).is_empty());
    // A route without cors adds nothing.
    let plain = s
        .client
        .get(s.url("/plain/x"))
        .header("origin", APP)
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert!(cors_headers(&plain).is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn groups_are_required_by_rules_and_passed_upstream_and_spoofs_are_stripped() {
    let s = Setup::start().await;
    let get = |path: &'static str, token: &'static str| {
        s.client
            .get(s.url(path))
            .bearer_auth(token)
            .header("X-Auth-Groups", "admins")
            .header("x_auth_groups", "staff")
            .send()
    };
    // In a listed group: allowed, with the groups as the token names them.
    let ok = get("/admin/x", "admin").await.unwrap();
    assert_eq!(ok.status(), 200);
    let echo: Value = ok.json().await.unwrap();
    assert_eq!(echoed(&echo, "x-auth-groups"), ["admins ops%20team"]);
    assert!(echoed(&echo, "x_auth_groups").is_empty());
    // In none: 403, however the client spells the header.
    for (path, token) in [("/admin/x", "read"), ("/staff/x", "admin")] {
        let refused = get(path, token).await.unwrap();
        assert_eq!(refused.status(), 403, "{path} {token}");
        let challenge = header(&refused, "www-authenticate").unwrap();
        assert!(challenge.contains("not in a group"), "{challenge}");
    }
    // A token without groups reaches a route without groups_any, and no X-Auth-Groups is sent:
    // the client's are stripped.
    let echo: Value = get("/plain/x", "read").await.unwrap().json().await.unwrap();
    assert!(echoed(&echo, "x-auth-groups").is_empty(), "{echo}");
    assert!(echoed(&echo, "x_auth_groups").is_empty(), "{echo}");
    s.stop().await;
}
