//! JWT access tokens through the running proxy: tokens shaped like Keycloak's and Entra ID's,
//! signed by a third-party library (Python's Authlib), accepted with the right scopes and the
//! caller's identity forwarded; the adversarial corpus refused with 401 `invalid_token` and no
//! refetch storm; opaque tokens introspected beside JWTs; a key rotation under continuous load
//! with no failed request; and the JWT metrics on `/metrics`.

mod common;

use test_support::jwks;

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    AUDIENCE, Introspector, ROUTES, config_yaml, echo_upstream, echoed, free_port, start_proxy,
};
use jwks::{Corpus, JwksServer};
use serde_json::{Value, json};

const ISSUER: &str = "https://login.example.test/realms/shop";

fn corpus() -> &'static Corpus {
    static C: OnceLock<Corpus> = OnceLock::new();
    C.get_or_init(|| Corpus::generate(ISSUER, AUDIENCE))
}

/// A proxy whose tokens come from `token_source` with this `jwt:` section (JWKS at `jwks`).
struct JwtProxy {
    proxy: proxy::ProxyHandle,
    introspector: Introspector,
    client: reqwest::Client,
    path: std::path::PathBuf,
}

impl JwtProxy {
    async fn start(token_source: &str, jwt: &str) -> JwtProxy {
        let introspector = Introspector::start().await;
        let upstream = echo_upstream().await;
        let (listen, admin) = common::two_free_ports();
        let base = config_yaml(listen, admin, &introspector.url(), upstream, ROUTES);
        // work_stealing: true: with one single-threaded runtime per thread (the default since
        // issue 14), a second proxy started in the same test process does not listen (noted).
        let yaml =
            format!("work_stealing: true\ntoken_source: {token_source}\njwt:\n{jwt}\n{base}");
        let (proxy, path) = start_proxy("jwt", &yaml).await;
        JwtProxy {
            proxy,
            introspector,
            client: reqwest::Client::new(),
            path,
        }
    }

    async fn get(&self, path: &str, token: &str) -> reqwest::Response {
        self.client
            .get(format!("http://{}{path}", self.proxy.listen_addr()))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    async fn metrics(&self) -> String {
        self.client
            .get(format!("http://{}/metrics", self.proxy.admin_addr()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn stop(self) {
        let _ = std::fs::remove_file(&self.path);
        tokio::task::spawn_blocking(move || self.proxy.shutdown_now())
            .await
            .unwrap();
    }
}

fn jwt_section(jwks: &JwksServer, extra: &str) -> String {
    let refresh = if extra.contains("jwks_refresh_min") {
        ""
    } else {
        "  jwks_refresh_min: 200ms\n"
    };
    format!(
        "  jwks_url: {}\n  issuer: {ISSUER}\n  audience: {AUDIENCE}\n{refresh}{extra}",
        jwks.url()
    )
}

/// Status, and the identity headers the upstream received (empty when refused).
async fn identity(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    if status != 200 {
        return (status, Value::Null);
    }
    let echo: Value = resp.json().await.unwrap();
    let one = |name| echoed(&echo, name).first().cloned();
    (
        status,
        json!({
            "username": one("x-auth-username"),
            "client_id": one("x-auth-client-id"),
            "scope": one("x-auth-scope"),
            "authorization": one("authorization"),
        }),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn keycloak_shaped_tokens_through_the_proxy() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let p = JwtProxy::start(
        "jwt",
        &jwt_section(
            &jwks,
            "  typ: JWT\n  client_id_claim: azp\n  username_claim: preferred_username\n",
        ),
    )
    .await;
    let token = corpus().token("keycloak");
    let (status, id) = identity(p.get("/all", token).await).await;
    assert_eq!(status, 200);
    assert_eq!(
        id,
        json!({"username": "alice", "client_id": "shop-frontend",
               "scope": "openid profile email read write", "authorization": null})
    );
    assert_eq!(p.get("/read", token).await.status(), 200);
    // Identity headers a client sends are dropped, not kept beside the token's (JWT mode too).
    let spoofed = p
        .client
        .get(format!("http://{}/all", p.proxy.listen_addr()))
        .bearer_auth(token)
        .header("X-Auth-Username", "mallory")
        .header("X-Auth-Scope", "admin")
        .header("X-Auth-Client-Id", "evil")
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status(), 200);
    let echo: Value = spoofed.json().await.unwrap();
    assert_eq!(echoed(&echo, "x-auth-username"), ["alice"]);
    assert_eq!(echoed(&echo, "x-auth-client-id"), ["shop-frontend"]);
    assert_eq!(
        echoed(&echo, "x-auth-scope"),
        ["openid profile email read write"]
    );
    // Its scopes are read and write: not groups.
    let resp = p.get("/any", token).await;
    assert_eq!(resp.status(), 200, "any_of [write, groups] with write");
    assert_eq!(p.introspector.calls(token), 0, "validated locally");
    // An RFC 9068 token (typ at+jwt) is not what this deployment accepts.
    assert_eq!(p.get("/read", corpus().token("rs256")).await.status(), 401);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn entra_shaped_tokens_through_the_proxy() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let p = JwtProxy::start(
        "jwt",
        &jwt_section(
            &jwks,
            "  typ: JWT\n  scope_claim: scp\n  client_id_claim: azp\n  username_claim: preferred_username\n  require_jti: false\n",
        ),
    )
    .await;
    let token = corpus().token("entra");
    let (status, id) = identity(p.get("/any", token).await).await;
    assert_eq!(status, 200);
    assert_eq!(
        id,
        json!({"username": "alice@contoso.example",
               "client_id": "11111111-2222-3333-4444-555555555555",
               "scope": "read groups", "authorization": null})
    );
    assert_eq!(p.get("/read", token).await.status(), 200);
    let resp = p.get("/all", token).await;
    assert_eq!(resp.status(), 403, "read and groups, but no write");
    assert_eq!(
        resp.headers()["www-authenticate"],
        r#"Bearer realm="api", error="insufficient_scope", scope="read write""#
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_adversarial_corpus_is_refused_by_the_proxy() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let p = JwtProxy::start("jwt", &jwt_section(&jwks, "  jwks_refresh_min: 60s\n")).await;
    assert_eq!(p.get("/read", corpus().token("rs256")).await.status(), 200);
    for name in jwks::ADVERSARIAL {
        for _ in 0..5 {
            let resp = p.get("/read", corpus().token(name)).await;
            assert_eq!(resp.status(), 401, "{name}");
            let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
            assert!(
                challenge.contains("error=\"invalid_token\""),
                "{name}: {challenge}"
            );
            assert_eq!(
                resp.text().await.unwrap(),
                r#"{"detail":"Invalid token."}"#,
                "{name}"
            );
        }
    }
    assert_eq!(
        jwks.fetches(),
        2,
        "the start, and one refetch for the unknown kid"
    );
    let metrics = p.metrics().await;
    for line in [
        // rs256, and wrong_aud: its signature holds, the gate's audience refuses it.
        "tokengate_proxy_jwt_validations_total{outcome=\"verified\"} 2\n",
        "tokengate_proxy_jwt_validations_total{outcome=\"unknown_key\"} 5\n",
        "tokengate_proxy_jwt_validations_total{outcome=\"bad_signature\"} 15\n",
        "tokengate_proxy_jwt_jwks_fetches_total 2\n",
        "tokengate_proxy_jwt_jwks_fetch_failures_total 0\n",
        "tokengate_proxy_jwt_keys 4\n",
        "tokengate_proxy_requests_total{route=\"read\",decision=\"invalid_token\",listener=\"proxy\"} 60\n",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn opaque_tokens_are_introspected_beside_jwts() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let p = JwtProxy::start("jwt_or_introspection", &jwt_section(&jwks, "")).await;
    // An opaque token of the stand-in authorization server.
    let (status, id) = identity(p.get("/read", "read").await).await;
    assert_eq!((status, &id["client_id"]), (200, &json!("app-1")));
    assert_eq!(p.introspector.calls("read"), 1);
    // A JWT: validated here, never introspected, even when refused.
    assert_eq!(p.get("/read", corpus().token("eddsa")).await.status(), 200);
    assert_eq!(
        p.get("/read", corpus().token("tampered_payload"))
            .await
            .status(),
        401
    );
    for name in ["eddsa", "tampered_payload"] {
        assert_eq!(p.introspector.calls(corpus().token(name)), 0, "{name}");
    }
    p.stop().await;
}

/// The issuer publishes a new key and signs with it at once, then withdraws the old key, while
/// requests keep coming: not one fails.
#[tokio::test(flavor = "multi_thread")]
async fn key_rotation_under_load_fails_no_request() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=1").await;
    let p =
        Arc::new(JwtProxy::start("jwt", &jwt_section(&jwks, "  jwks_refresh_min: 500ms\n")).await);
    let rotated = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (p, rotated, stop, ok, failed) = (
            p.clone(),
            rotated.clone(),
            stop.clone(),
            ok.clone(),
            failed.clone(),
        );
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let name = if rotated.load(Ordering::Relaxed) {
                    "rotated_in"
                } else {
                    "rs256"
                };
                let status = p.get("/read", corpus().token(name)).await.status();
                if status == 200 { &ok } else { &failed }.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Publish rsa-b beside rsa-a and switch the signing key in the same instant.
    let mut both = corpus().jwks.clone();
    let new_key = corpus().jwks_rotated["keys"][0].clone();
    both["keys"].as_array_mut().unwrap().push(new_key);
    jwks.set(&both);
    rotated.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(700)).await;
    // rsa-a's tokens are gone: withdraw it.
    jwks.set(&corpus().jwks_rotated);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert_eq!(failed, 0, "{failed} failed, {ok} succeeded");
    assert!(ok > 100, "continuous load: {ok} requests");
    // The withdrawn key is no longer trusted, cached tokens included.
    assert_eq!(p.get("/read", corpus().token("rs256")).await.status(), 401);
    match Arc::try_unwrap(p) {
        Ok(p) => p.stop().await,
        Err(_) => panic!("workers still hold the proxy"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwt_token_source_needs_its_section() {
    let introspector_url = "http://127.0.0.1:9/o/introspect/";
    let (listen, admin) = common::two_free_ports();
    let base = config_yaml(
        listen,
        admin,
        introspector_url,
        "127.0.0.1:9".parse().unwrap(),
        ROUTES,
    );
    let err = proxy::parse_config(&format!("token_source: jwt\n{base}"), "p.yaml", |_| None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("key \"jwt\""), "{err}");
    let err = proxy::parse_config(
        &format!("token_source: jwt\njwt: {{jwks_url: 'http://127.0.0.1:9/', issuer: i, audience: a, algorithms: [HS256]}}\n{base}"),
        "p.yaml",
        |_| None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("jwt.algorithms") && err.contains("HS256"),
        "{err}"
    );
    let err = proxy::parse_config(&format!("token_source: opaque\n{base}"), "p.yaml", |_| None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("token_source"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_in_jwt_mode_follows_the_jwks_not_introspection() {
    async fn readyz(p: &JwtProxy) -> (u16, String) {
        let resp = p
            .client
            .get(format!("http://{}/readyz", p.proxy.admin_addr()))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }
    // Keys fetched at start, before any request: ready, and the introspection endpoint is
    // never asked (not even by the readiness probe).
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let p = JwtProxy::start("jwt", &jwt_section(&jwks, "  typ: JWT\n")).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while readyz(&p).await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            readyz(&p).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(p.introspector.total_calls(), 0);
    p.stop().await;

    // No JWKS to be had: not ready, and /readyz says why.
    let dead = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let p = JwtProxy::start(
        "jwt",
        &format!("  jwks_url: {dead}\n  issuer: {ISSUER}\n  audience: {AUDIENCE}\n"),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        readyz(&p).await,
        (
            503,
            "not ready: no JWT signing key known (JWKS not fetched)\n".to_owned()
        )
    );
    p.stop().await;
}

/// `config_yaml` without its `introspection:` section.
fn without_introspection(yaml: &str) -> String {
    let start = yaml.find("introspection:\n").unwrap();
    let end = start + yaml[start..].find("\nroutes:").unwrap() + 1;
    format!("{}{}", &yaml[..start], &yaml[end..])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwt_only_proxy_needs_no_introspection_endpoint() {
    let upstream = echo_upstream().await;
    let (listen, admin) = common::two_free_ports();
    let base = config_yaml(listen, admin, "http://127.0.0.1:9/unused", upstream, ROUTES);
    let base = without_introspection(&base);
    assert!(!base.contains("introspection:"), "{base}");
    // Any token source that introspects still needs the section, and says so.
    for source in ["introspection", "jwt_or_introspection"] {
        let jwks = "  jwks_url: http://127.0.0.1:9/\n  issuer: i\n  audience: a\n";
        let err = proxy::parse_config(
            &format!("token_source: {source}\njwt:\n{jwks}{base}"),
            "p.yaml",
            |_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("key \"introspection\"") && err.contains(source),
            "{err}"
        );
    }
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let yaml = format!(
        "work_stealing: true\ntoken_source: jwt\njwt:\n{}\n{base}",
        jwt_section(
            &jwks,
            "  typ: JWT\n  client_id_claim: azp\n  username_claim: preferred_username\n"
        )
    );
    let (proxy, path) = start_proxy("jwt-only", &yaml).await;
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let ready = client
            .get(format!("http://{}/readyz", proxy.admin_addr()))
            .send()
            .await
            .unwrap()
            .status();
        if ready == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never ready: {ready}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let resp = client
        .get(format!("http://{}/read", proxy.listen_addr()))
        .bearer_auth(corpus().token("keycloak"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let _ = std::fs::remove_file(&path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
