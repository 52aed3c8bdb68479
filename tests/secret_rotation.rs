//! Issue 38, item 10: rotating the proxy's introspection client secret under steady load loses
//! no request. The real authorization server and the real Pingora proxy, whose secret comes from
//! `introspection.client_secret_file`: every request carries a fresh token (so every request is
//! introspected), the secret is rotated with a grace period and the file rewritten as a
//! Kubernetes Secret volume is (a new file renamed over the old), the grace ends, and the proxy,
//! refused at last with the old secret, reads the file again and retries.
//! On PostgreSQL when `DATABASE_URL` names one, else on SQLite.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use authserver::config::Settings;
use authserver::registration;
use authserver::store::GrantType;
use authserver::testing;
use reqwest::StatusCode;
use test_support::free_port;

/// Writes `secret` to `path` the way the kubelet updates a Secret volume: whole, then swapped in.
fn write_secret(path: &std::path::Path, secret: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, format!("{secret}\n")).unwrap();
    std::fs::rename(&next, path).unwrap();
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_proxys_secret_with_a_grace_fails_no_request() {
    let (auth_port, proxy_port, admin_port, api_port) =
        (free_port(), free_port(), free_port(), free_port());
    let issuer = format!("http://127.0.0.1:{auth_port}");

    let store = testing::store().await;
    let (sidecar_id, first_secret) =
        testing::application(&store, GrantType::ClientCredentials, true).await;
    let caller = testing::application(&store, GrantType::ClientCredentials, false).await;
    let mut settings = Settings::for_tests("unused");
    settings.issuer = issuer.clone();
    settings.access_token_audience = issuer.clone();
    let auth = testing::spawn_server(
        store.clone(),
        settings,
        format!("127.0.0.1:{auth_port}").parse().unwrap(),
    )
    .await;

    // The API behind the proxy.
    let api = tokio::net::TcpListener::bind(("127.0.0.1", api_port))
        .await
        .unwrap();
    let api_task = tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async { "ok" });
        let _ = axum::serve(api, app).await;
    });

    let dir = std::env::temp_dir().join(format!("secret-rotation-{proxy_port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let secret_file = dir.join("client-secret");
    write_secret(&secret_file, &first_secret);
    let yaml = format!(
        r#"
listen: 127.0.0.1:{proxy_port}
admin_listen: 127.0.0.1:{admin_port}
threads: 1
grace_period: 0s
shutdown_timeout: 1s
upstreams:
  api: {{ address: "127.0.0.1:{api_port}" }}
introspection:
  url: {issuer}/o/introspect/
  client_id: {sidecar_id}
  client_secret_file: {file}
  cache: {{ max_ttl: 0s }}
routes:
  - {{ name: api, prefix: /api/, upstream: api }}
"#,
        file = secret_file.display()
    );
    let config_path = dir.join("proxy.yaml");
    std::fs::write(&config_path, yaml).unwrap();
    let config = proxy::load_config_with_env(&config_path, |_| None).expect("the proxy's config");
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .expect("start the proxy");
    common::listening(proxy_port, "the proxy").await;

    // Steady load: two clients, each request with a token of its own.
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (counts, stop, issuer, caller) =
            (counts.clone(), stop.clone(), issuer.clone(), caller.clone());
        workers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let token =
                    common::client_credentials_token(&http, &issuer, (&caller.0, &caller.1), None)
                        .await;
                let answer = http
                    .get(format!("http://127.0.0.1:{proxy_port}/api/x"))
                    .bearer_auth(&token)
                    .send()
                    .await;
                match answer {
                    Ok(r) if r.status() == StatusCode::OK => {
                        counts.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        failures.push(format!("{:?}", other.map(|r| r.status())));
                    }
                }
            }
            failures
        }));
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = counts.ok.load(Ordering::Relaxed);
    // The operator: rotate with a grace, then update the sidecars' secret file.
    let id = store
        .find_application_by_client_id(&sidecar_id)
        .await
        .unwrap()
        .unwrap()
        .id;
    let grace = Duration::from_secs(2);
    let rotated_at = Instant::now();
    let second_secret = registration::rotate_secret(&store, id, grace)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    write_secret(&secret_file, &second_secret);
    // Past the grace (whole seconds), and some load after it.
    tokio::time::sleep(grace + Duration::from_millis(1100) - rotated_at.elapsed()).await;
    let at_expiry = counts.ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for worker in workers {
        failures.extend(worker.await.unwrap());
    }
    let (ok, failed) = (
        counts.ok.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "secret rotation under load: {ok} requests served ({before} before the rotation, {} \
         during the grace, {} after it), {failed} failed",
        at_expiry - before,
        ok - at_expiry
    );
    assert_eq!(failed, 0, "failed requests: {failures:?}");
    assert!(
        before > 0 && at_expiry > before && ok > at_expiry,
        "load never ran steadily"
    );

    // The old secret is refused now, so the requests after the grace were introspected with the
    // new one, which the proxy read from the file.
    let http = reqwest::Client::new();
    let introspect = |secret: String| {
        let http = http.clone();
        let (url, sidecar_id) = (format!("{issuer}/o/introspect/"), sidecar_id.clone());
        async move {
            http.post(url)
                .basic_auth(sidecar_id, Some(secret))
                .form(&[("token", "x")])
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(introspect(first_secret).await, StatusCode::UNAUTHORIZED);
    assert_eq!(introspect(second_secret).await, StatusCode::OK);
    // And the sidecar is ready.
    let ready = http
        .get(format!("http://127.0.0.1:{admin_port}/readyz"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(ready, StatusCode::OK);

    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
    api_task.abort();
    auth.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
