//! The example API in `introspect` mode against a hostile RFC 7662 server (the stand-in of
//! `resource-server/tests/hostile_server.rs`): unreadable answers are 503, answers that do not
//! let the token in are 401, never 200; absurdly long tokens are 400 and never sent.

mod support;

use test_support::fake_server;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_server::{FakeServer, Reply, json};
use resource_server::bearer::{MAX_TOKEN_LEN, TOO_LONG_TOKEN};
use resource_server::outage::PROBE_BACKOFF;
use serde_json::{Value, json as j};
use support::{get, sqlite_url, start_api};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// An answer the API accepts for `GET /users/`, with `field` set to `value` (`None` removes it).
fn answer(field: &str, value: Option<Value>) -> Reply {
    let mut v = j!({
        "active": true,
        "scope": "read write groups",
        "client_id": "app",
        "username": "josé",
        "token_type": "Bearer",
        "exp": now() + 3600,
        "iss": "https://auth.example",
        "aud": "api",
    });
    let map = v.as_object_mut().unwrap();
    match value {
        Some(value) => map.insert(field.into(), value),
        None => map.remove(field),
    };
    json(&v.to_string())
}

#[tokio::test]
async fn hostile_answers_are_503_or_401_never_200() {
    let server = FakeServer::start(json("{}")).await;
    let yaml = format!(
        "  url: '{}'\n  auth_token: rs-token\n  request_timeout: 500ms\n  issuer: https://auth.example\n  audience: api\n  cache: {{ max_ttl: 0s }}",
        server.url
    );
    let api = start_api(&sqlite_url(), &yaml).await;
    let http = reqwest::Client::new();
    let t = now();
    let cases = [
        ("well-formed (control)", answer("nothing", None), 200, None),
        (
            "active as a string",
            answer("active", Some(j!("true"))),
            503,
            None,
        ),
        ("exp 1e300", answer("exp", Some(j!(1e300))), 503, None),
        (
            "exp as a string",
            answer("exp", Some(j!(t.to_string()))),
            503,
            None,
        ),
        (
            "username object",
            answer("username", Some(j!({"n": 1}))),
            503,
            None,
        ),
        ("not JSON", json("<html></html>"), 503, None),
        (
            "5xx",
            Reply::Json {
                status: 502,
                body: "{}".into(),
                delay: Duration::ZERO,
            },
            503,
            None,
        ),
        (
            "slower than the timeout",
            Reply::Json {
                status: 200,
                body: "{\"active\":true}".into(),
                delay: Duration::from_millis(1500),
            },
            503,
            None,
        ),
        (
            "truncated",
            Reply::Raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"active\":tr".to_vec()),
            503,
            None,
        ),
        (
            "active missing",
            answer("active", None),
            401,
            Some("invalid, expired or revoked"),
        ),
        (
            "refresh token",
            answer("token_type", Some(j!("refresh_token"))),
            401,
            Some("invalid, expired or revoked"),
        ),
        (
            "nbf in the future",
            answer("nbf", Some(j!(t + 600))),
            401,
            Some("not valid yet"),
        ),
        (
            "expired",
            answer("exp", Some(j!(t - 60))),
            401,
            Some("expired"),
        ),
        (
            "other issuer",
            answer("iss", Some(j!("https://evil"))),
            401,
            Some("revoked"),
        ),
        (
            "other audience",
            answer("aud", Some(j!(["web"]))),
            401,
            Some("not meant for this API"),
        ),
    ];
    for (name, reply, status, description) in cases {
        server.set(reply);
        let a = get(&http, &api.url("/users/"), Some("some-token")).await;
        assert_eq!(a.status, status, "{name}: {}", a.json);
        match status {
            503 => assert_eq!(
                a.json,
                j!({"detail": "Authorization server unavailable."}),
                "{name}"
            ),
            401 => {
                let challenge = a.www_authenticate.unwrap_or_default();
                assert!(
                    challenge.contains("error=\"invalid_token\"")
                        && challenge.contains(description.unwrap()),
                    "{name}: {challenge}"
                );
            }
            _ => {}
        }
        // A failure that says the server is down begins an outage in the API's checker: wait
        // for its probe, so that the next case reaches the server too.
        if status == 503 {
            tokio::time::sleep(PROBE_BACKOFF.max).await;
        }
    }
    api.stop().await;
}

#[tokio::test]
async fn absurdly_long_tokens_are_400_without_an_introspection_call() {
    let server = FakeServer::start(answer("nothing", None)).await;
    let yaml = format!(
        "  url: '{}'\n  auth_token: rs-token\n  cache: {{ max_ttl: 0s }}",
        server.url
    );
    let api = start_api(&sqlite_url(), &yaml).await;
    let http = reqwest::Client::new();
    let longest = "a".repeat(MAX_TOKEN_LEN);
    assert_eq!(
        get(&http, &api.url("/users/"), Some(&longest)).await.status,
        200
    );
    assert_eq!(server.calls(), 1);
    for len in [MAX_TOKEN_LEN + 1, 64 * 1024] {
        let a = get(&http, &api.url("/users/"), Some(&"a".repeat(len))).await;
        assert_eq!(
            (a.status, a.www_authenticate.as_deref(), a.json),
            (
                400,
                Some(r#"Bearer realm="api", error="invalid_request""#),
                j!({"detail": TOO_LONG_TOKEN})
            ),
            "{len}"
        );
    }
    assert_eq!(server.calls(), 1, "never sent to the authorization server");
    api.stop().await;
}
