//! The example API in `behind-proxy` mode over a real socket, fed the identity headers exactly as
//! the proxy writes them (`resource_server::Identity::headers`): non-ASCII names get through.

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderValue};
use resource_server::Identity;
use resource_server::PROXY_SECRET_HEADER;
use support::{PROXY_SECRET, sqlite_url, start_api_behind_proxy};

fn exp() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 3600
}

/// Headers carrying the proxy's secret.
fn proven() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(PROXY_SECRET_HEADER, HeaderValue::from_static(PROXY_SECRET));
    headers
}

async fn status(http: &reqwest::Client, url: &str, headers: HeaderMap) -> (u16, String) {
    let response = http.get(url).headers(headers).send().await.unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

#[tokio::test]
async fn non_ascii_identities_from_the_proxy_are_accepted() {
    let api = start_api_behind_proxy(&sqlite_url()).await;
    let http = reqwest::Client::new();
    let url = api.url("/users/");
    for name in ["josé", "日本", "🦀", "ann marie", "100%", "o'brien\t"] {
        let identity = Identity {
            username: Some(name.into()),
            client_id: Some(format!("app {name}")),
            scope: "read write groups".into(),
            exp: Some(exp()),
            groups: vec![format!("team {name}")],
        };
        let mut headers = proven();
        for (k, v) in identity.headers() {
            headers.append(k, HeaderValue::from_str(&v).unwrap());
        }
        let (status, body) = status(&http, &url, headers).await;
        assert_eq!(status, 200, "{name:?}: {body}");
    }
    // What the proxy used to send (raw UTF-8), and broken encodings: refused, never guessed at.
    for value in [&b"jos\xc3\xa9"[..], b"jos%C3", b"jos%"] {
        let mut headers = proven();
        headers.insert("x-auth-username", HeaderValue::from_bytes(value).unwrap());
        headers.insert("x-auth-scope", HeaderValue::from_static("read"));
        let (status, body) = status(&http, &url, headers).await;
        assert_eq!(
            (status, body.as_str()),
            (
                400,
                r#"{"detail":"Identity header is not percent-encoded UTF-8."}"#
            ),
            "{value:?}"
        );
    }
    api.stop().await;
}

/// Issue 21: a local process that reaches the API's port directly is not believed, whatever
/// identity it claims, without the proxy's secret (or with a wrong one, or two of them).
#[tokio::test]
async fn identity_headers_without_the_proxy_secret_are_not_believed() {
    let api = start_api_behind_proxy(&sqlite_url()).await;
    let http = reqwest::Client::new();
    let claim = |secret: Option<&[&str]>| {
        let mut headers = HeaderMap::new();
        headers.insert("x-auth-username", HeaderValue::from_static("admin"));
        headers.insert(
            "x-auth-scope",
            HeaderValue::from_static("read write groups"),
        );
        for s in secret.unwrap_or_default() {
            headers.append(PROXY_SECRET_HEADER, HeaderValue::from_str(s).unwrap());
        }
        headers
    };
    let wrong = "x".repeat(PROXY_SECRET.len());
    for secret in [
        None,
        Some(&[wrong.as_str()][..]),
        Some(&[&PROXY_SECRET[..PROXY_SECRET.len() - 1]][..]),
        Some(&[PROXY_SECRET, PROXY_SECRET][..]),
    ] {
        for path in ["/users/", "/groups/"] {
            let (status, body) = status(&http, &api.url(path), claim(secret)).await;
            assert_eq!(status, 401, "{secret:?} {path}: {body}");
        }
        let created = http
            .post(api.url("/users/"))
            .headers(claim(secret))
            .json(&serde_json::json!({"username": "intruder", "password": "long-enough-1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 401, "{secret:?}");
    }
    let (status, _) = status(&http, &api.url("/users/"), claim(Some(&[PROXY_SECRET]))).await;
    assert_eq!(status, 200);
    api.stop().await;
}
