//! The proxy follows a revocation stream (resource-server's independent test transmitter: its
//! own Ed25519 key, a real HTTP server): an event refuses a cached token at once, a forged SET is
//! refused and counted, and a stream down longer than `unhealthy_after` makes `/readyz` say
//! "degraded" and the metrics say unhealthy.

mod common;
use test_support::ssf_transmitter;

use std::time::{Duration, Instant};

use common::{echo_upstream, start_proxy, two_free_ports};
use reqwest::StatusCode;
use serde_json::json;
use ssf_transmitter::{CLIENT_ID, CLIENT_SECRET, SESSION_REVOKED, Transmitter, now};

async fn text(client: &reqwest::Client, url: &str) -> String {
    client.get(url).send().await.unwrap().text().await.unwrap()
}

async fn until(what: &str, bound: Duration, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_follows_the_stream_and_says_when_it_is_unhealthy() {
    let tx = Transmitter::start(Duration::from_millis(200)).await;
    let upstream = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let yaml = format!(
        r#"
listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
grace_period: 1s
shutdown_timeout: 1s
upstreams:
  api: {{ address: "{upstream}" }}
introspection:
  url: {url}/introspect
  auth_token: rs-token
  cache: {{ max_ttl: 60s }}
revocation:
  configuration_url: {config}
  client_id: {CLIENT_ID}
  client_secret: "{CLIENT_SECRET}"
  token_url: {url}/token
  healthy_max_ttl: 1h
  fallback_ttl: 1s
  unhealthy_after: 1s
routes:
  - {{ name: r, prefix: /r/, upstream: api, scopes: [read] }}
"#,
        url = tx.url,
        config = tx.configuration_url(),
    );
    let (proxy, path) = start_proxy("revocation", &yaml).await;
    let http = reqwest::Client::new();
    let readyz = format!("http://{}/readyz", proxy.admin_addr());
    let metrics = format!("http://{}/metrics", proxy.admin_addr());
    let front = format!("http://{}/r/x", proxy.listen_addr());
    until("healthy", Duration::from_secs(10), async || {
        text(&http, &readyz).await == "ready\n"
    })
    .await;

    tx.answer(
        "tok",
        json!({"active": true, "scope": "read", "client_id": "app", "sub": "9", "jti": "fam",
               "iat": now() - 5, "exp": now() + 3600}),
    );
    let get = async || {
        http.get(&front)
            .bearer_auth("tok")
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(get().await, StatusCode::OK);
    assert_eq!(get().await, StatusCode::OK);
    assert_eq!(tx.introspections_of("tok"), 1);
    tx.emit(
        SESSION_REVOKED,
        json!({"event_timestamp": now()}),
        json!({"format": "jwt_id", "iss": tx.issuer, "jti": "fam"}),
    );
    let took = until("refused", Duration::from_secs(1), async || {
        get().await == StatusCode::UNAUTHORIZED
    })
    .await;
    eprintln!("refused {took:?} after the event");
    let m = text(&http, &metrics).await;
    assert!(
        m.contains("\ntokengate_proxy_revocation_sets_applied_total 1\n"),
        "{m}"
    );
    assert!(
        m.contains("\ntokengate_proxy_revocation_stream_healthy 1\n"),
        "{m}"
    );

    // A forgery: refused, counted, and the stream unhealthy for unhealthy_after.
    tx.emit_forged(
        SESSION_REVOKED,
        json!({}),
        json!({"format": "opaque", "id": "app"}),
    );
    until("forgery counted", Duration::from_secs(3), async || {
        text(&http, &metrics)
            .await
            .contains("\ntokengate_proxy_revocation_sets_refused_total 1\n")
    })
    .await;
    assert_eq!(
        text(&http, &readyz).await,
        "ready (degraded: revocation stream unhealthy: a SET failed verification)\n"
    );
    until("healthy again", Duration::from_secs(5), async || {
        text(&http, &readyz).await == "ready\n"
    })
    .await;

    // The stream down for longer than the bound.
    tx.set_down(true);
    until("degraded", Duration::from_secs(5), async || {
        text(&http, &readyz).await
            == "ready (degraded: revocation stream unhealthy: no successful poll within \
                unhealthy_after)\n"
    })
    .await;
    let m = text(&http, &metrics).await;
    assert!(
        m.contains("\ntokengate_proxy_revocation_stream_healthy 0\n"),
        "{m}"
    );
    tx.set_down(false);
    until(
        "healthy after the outage",
        Duration::from_secs(10),
        async || text(&http, &readyz).await == "ready\n",
    )
    .await;
    let _ = std::fs::remove_file(path);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
