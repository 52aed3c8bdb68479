//! The example API in `behind-proxy` mode over a real socket, fed the identity headers exactly as
//! the proxy writes them (`resource_server::Identity::headers`): non-ASCII names get through.

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderValue};
use resource_server::Identity;
use support::{sqlite_url, start_api_behind_proxy};

fn exp() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 3600
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
        };
        let mut headers = HeaderMap::new();
        for (k, v) in identity.headers() {
            headers.append(k, HeaderValue::from_str(&v).unwrap());
        }
        let (status, body) = status(&http, &url, headers).await;
        assert_eq!(status, 200, "{name:?}: {body}");
    }
    // What the proxy used to send (raw UTF-8), and broken encodings: refused, never guessed at.
    for value in [&b"jos\xc3\xa9"[..], b"jos%C3", b"jos%"] {
        let mut headers = HeaderMap::new();
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
