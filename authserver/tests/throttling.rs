//! The password grant's throttle (tower `oneshot` with a mocked socket peer): per username and
//! address, per address, and which address counts with and without trusted proxies.

mod support;

use authserver::config::Settings;
use authserver::store::GrantType;
use authserver::throttle::{FAILURE_WINDOW, MAX_FAILURES_PER_ADDRESS};
use authserver::{AppState, app, testing};
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use std::net::SocketAddr;
use tower::ServiceExt;

/// Two clients on their own addresses, and a proxy in front that is trusted.
const A: &str = "192.0.2.10";
const B: &str = "192.0.2.20";
const PROXY: &str = "10.0.0.1";

struct Fixture {
    state: AppState,
    /// The client's id and secret.
    client: (String, String),
    basic: String,
}

async fn fixture() -> Fixture {
    let store = testing::store().await;
    testing::user(&store, "alice", "wonderland").await;
    testing::user(&store, "bob", "builder").await;
    let (id, secret) = testing::application(&store, GrantType::Password, false).await;
    let mut settings = Settings::for_tests("unused");
    settings.trusted_proxies = ["127.0.0.0/8", "::1", "10.0.0.0/8"]
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();
    Fixture {
        state: AppState::new(settings, store),
        basic: test_support::basic_auth(&id, &secret),
        client: (id, secret),
    }
}

struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    json: Value,
}

impl Fixture {
    /// A password grant from the socket peer `peer`, with these `X-Forwarded-For` lines.
    async fn grant(&self, peer: &str, forwarded: &[&str], username: &str, password: &str) -> Reply {
        let mut request = Request::post("/o/token/")
            .header(header::AUTHORIZATION, &self.basic)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        for line in forwarded {
            request = request.header("x-forwarded-for", *line);
        }
        let body = format!("grant_type=password&username={username}&password={password}");
        let peer = SocketAddr::new(peer.parse().unwrap(), 40000);
        let response = app(self.state.clone())
            .layer(MockConnectInfo(peer))
            .oneshot(request.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        Reply {
            status,
            retry_after,
            json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    /// Five wrong passwords for alice, each refused as `invalid_grant`.
    async fn five_failures(&self, peer: &str, forwarded: impl Fn(usize) -> Vec<String>) {
        for i in 0..5 {
            let lines = forwarded(i);
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let reply = self.grant(peer, &lines, "alice", "guess").await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json);
            assert_eq!(reply.json["error"], "invalid_grant");
        }
    }
}

#[tokio::test]
async fn five_failures_lock_the_username_at_that_address_only() {
    let f = fixture().await;
    f.five_failures(A, |_| Vec::new()).await;
    // The sixth attempt from A is refused before the password is looked at, even a right one.
    let reply = f.grant(A, &[], "alice", "wonderland").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.retry_after, Some(FAILURE_WINDOW.to_string()));
    assert_eq!(
        reply.json,
        serde_json::json!({
            "error": "invalid_grant",
            "error_description": "Too many failed attempts; try again later."
        })
    );
    // Usernames are compared without case.
    assert_eq!(
        f.grant(A, &[], "ALICE", "wonderland").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The real alice, elsewhere, is not locked out; other users at A are not either.
    assert_eq!(
        f.grant(B, &[], "alice", "wonderland").await.status,
        StatusCode::OK
    );
    assert_eq!(
        f.grant(A, &[], "bob", "builder").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn one_address_gets_a_higher_limit_across_usernames() {
    let f = fixture().await;
    for i in 0..MAX_FAILURES_PER_ADDRESS {
        let reply = f.grant(A, &[], &format!("user{i}"), "guess").await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "attempt {i}");
    }
    assert_eq!(
        f.grant(A, &[], "bob", "builder").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        f.grant(B, &[], "bob", "builder").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_neither_locks_nor_bypasses() {
    let f = fixture().await;
    // A claims to be B, and to be someone new on every attempt.
    f.five_failures(A, |i| vec![B.to_owned(), format!("198.51.100.{i}")])
        .await;
    // No bypass: a new spoofed value does not make A a new client.
    assert_eq!(
        f.grant(A, &["198.51.100.99"], "alice", "wonderland")
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // No lockout of the spoofed addresses: B, directly or through the trusted proxy, is fine.
    assert_eq!(
        f.grant(PROXY, &[B], "alice", "wonderland").await.status,
        StatusCode::OK
    );
    assert_eq!(
        f.grant(PROXY, &["198.51.100.1"], "alice", "wonderland")
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_right_most_untrusted_entry_counts() {
    let f = fixture().await;
    // A, behind two trusted proxies (10.0.0.2 added its own line), writes a new left-most
    // entry every time.
    f.five_failures(PROXY, |i| {
        vec![format!("198.51.100.{i}, {A}"), "10.0.0.2".to_owned()]
    })
    .await;
    for lines in [vec![A], vec!["203.0.113.77", A], vec![A, "10.0.0.3"]] {
        assert_eq!(
            f.grant(PROXY, &lines, "alice", "wonderland").await.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{lines:?}"
        );
    }
    // Another client behind the same proxy signs in.
    assert_eq!(
        f.grant(PROXY, &[B, "10.0.0.2"], "alice", "wonderland")
            .await
            .status,
        StatusCode::OK
    );
    // A success clears that client's count for the username: four failures, a success, four
    // more, and still a success.
    for _ in 0..2 {
        for _ in 0..4 {
            assert_eq!(
                f.grant(PROXY, &[B], "alice", "guess").await.status,
                StatusCode::BAD_REQUEST
            );
        }
        assert_eq!(
            f.grant(PROXY, &[B], "alice", "wonderland").await.status,
            StatusCode::OK
        );
    }
}

#[tokio::test]
async fn no_username_password_or_client_secret_reaches_the_log() {
    support::capture_logs();
    let f = fixture().await;
    f.five_failures(A, |_| Vec::new()).await;
    let reply = f.grant(A, &[], "alice", "wonderland").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    let log = support::logged();
    let refusal = log
        .lines()
        .find(|line| line.contains("password grant refused") && line.contains(&f.client.0))
        .unwrap_or_else(|| panic!("the refusal is logged: {log}"));
    assert!(refusal.contains(&format!("address={A}")), "{refusal}");
    // Nothing this binary logged (other tests' attempts included) names a secret.
    for secret in ["alice", "ALICE", "guess", "wonderland", &f.client.1] {
        assert!(!log.contains(secret), "{secret:?} logged: {log}");
    }
}
