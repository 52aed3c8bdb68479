//! JWT access tokens end to end: the stack's authorization server issues RFC 9068 JWTs, the proxy
//! validates them locally with the authorization server's JWKS (`jwt_or_introspection`), and a
//! signing-key rotation at the authorization server under continuous load through the proxy fails
//! no request.

mod common;

use common::{password_grant, stack_config};
use reqwest::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use test_support::free_port;

/// Part `index` of a JWT (0 the header, 1 the claims), decoded.
fn part(token: &str, index: usize) -> serde_json::Value {
    use base64::Engine;
    let part = token.split('.').nth(index).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// The `kid` of a JWT's header.
fn kid(token: &str) -> String {
    part(token, 0)["kid"].as_str().unwrap().to_owned()
}

/// With the front door on a fixed port, the issuer moves there, and a defaulted audience with
/// it: a token's `aud` names the stack that issued it (it named the shipped 127.0.0.1:8000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_audience_follows_the_front_doors_issuer() {
    let dir = std::env::temp_dir().join(format!(
        "tg-aud-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let front_door = format!("127.0.0.1:{}", free_port());
    let config = stack_config(
        &database_url,
        &[
            ("AUTHSERVER_ACCESS_TOKEN_FORMAT", "jwt"),
            ("PROXY_LISTEN", &front_door),
        ],
    );
    let stack = tokengate::start(config).await.unwrap();
    let first = stack.first_run.clone().unwrap();
    let base = format!("http://{front_door}");
    let (status, body) = password_grant(
        &reqwest::Client::new(),
        &base,
        (&first.client_id, &first.client_secret),
        (&first.admin_username, &first.admin_password),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let claims = part(body["access_token"].as_str().unwrap(), 1);
    assert_eq!(claims["iss"], base.as_str(), "{claims}");
    assert_eq!(claims["aud"], base.as_str(), "{claims}");
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_under_load_through_the_proxy_fails_no_request() {
    let dir = std::env::temp_dir().join(format!(
        "tg-jwt-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let auth_port = free_port();
    let auth_listen = format!("127.0.0.1:{auth_port}");
    let mut config = stack_config(
        &database_url,
        &[
            ("AUTHSERVER_LISTEN", &auth_listen),
            ("AUTHSERVER_ACCESS_TOKEN_FORMAT", "jwt"),
            ("AUTHSERVER_JWKS_MAX_AGE", "1"),
        ],
    );
    // The shipped proxy file, validating the authorization server's JWTs locally; the issuer is
    // the front door's address (the stack moves it there).
    let front_port = free_port();
    let issuer = format!("http://127.0.0.1:{front_port}");
    let yaml = format!(
        "{}\ntoken_source: jwt_or_introspection\njwt:\n  jwks_url: http://127.0.0.1:{auth_port}/.well-known/jwks.json\n  issuer: {issuer}\n  audience: {issuer}\n  algorithms: [EdDSA]\n  username_claim: username\n  jwks_refresh_min: 200ms\n",
        std::fs::read_to_string("config/proxy.yaml").unwrap()
    );
    let env = |key: &str| match key {
        "PROXY_LISTEN" => Some(format!("127.0.0.1:{front_port}")),
        "PROXY_ADMIN_LISTEN" => Some("127.0.0.1:0".to_owned()),
        _ => None,
    };
    config.proxy = common::quick_stop(proxy::parse_config(&yaml, "proxy.yaml", env).unwrap());
    let stack = tokengate::start(config).await.unwrap();
    let first = stack.first_run.clone().unwrap();
    let base = format!("http://{}", stack.front_door);
    let http = reqwest::Client::new();
    let client = (first.client_id.clone(), first.client_secret.clone());
    let admin = (first.admin_username.clone(), first.admin_password.clone());
    let token = {
        let (http, base, client, admin) =
            (http.clone(), base.clone(), client.clone(), admin.clone());
        move || {
            let (http, base, client, admin) =
                (http.clone(), base.clone(), client.clone(), admin.clone());
            async move {
                let (status, json) = password_grant(
                    &http,
                    &base,
                    (&client.0, &client.1),
                    (&admin.0, &admin.1),
                    Some("read"),
                )
                .await;
                assert_eq!(status, StatusCode::OK, "{json}");
                json["access_token"].as_str().unwrap().to_owned()
            }
        }
    };
    let before = token().await;
    assert_eq!(before.split('.').count(), 3, "a JWT: {before}");

    // Continuous load: new tokens, each used a few times, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (stop, sent, failed, http, base, token) = (
            stop.clone(),
            sent.clone(),
            failed.clone(),
            http.clone(),
            base.clone(),
            token.clone(),
        );
        tokio::spawn(async move {
            let mut kids = std::collections::BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                let t = token().await;
                kids.insert(kid(&t));
                for _ in 0..5 {
                    let status = http
                        .get(format!("{base}/users/"))
                        .bearer_auth(&t)
                        .send()
                        .await
                        .map(|r| r.status());
                    sent.fetch_add(1, Ordering::Relaxed);
                    if status.ok() != Some(StatusCode::OK) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            kids
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rotated = authserver::jwt::rotation::rotate(&stack.store, 2, 36000)
        .await
        .unwrap();
    // The new key is published now and signs two seconds later (each replica re-reads its keys
    // within 10 s): keep the load on until tokens carry the new key, and a little past that.
    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    while kid(&token().await) != rotated.key.kid {
        assert!(
            std::time::Instant::now() < deadline,
            "the new key never signed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let kids = load.await.unwrap();
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(sent > 20, "too little load to mean anything: {sent}");
    assert_eq!(
        failed, 0,
        "{failed} of {sent} requests failed across the rotation"
    );
    assert!(
        kids.contains(&rotated.key.kid) && kids.contains(&kid(&before)),
        "tokens from both keys were used: {kids:?}"
    );
    // The token signed by the old key still passes, validated locally.
    let status = http
        .get(format!("{base}/users/"))
        .bearer_auth(&before)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::OK);
    let metrics = http
        .get(format!("http://{}/metrics", stack.proxy_admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tokengate_proxy_jwt_validations_total") && l.contains("ok")),
        "{metrics}"
    );
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
