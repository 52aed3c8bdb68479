//! The example API checking tokens itself (`introspection`) with a `resource`: it serves its
//! RFC 9728 metadata (both path forms), names it in its 401s with the route's scope, and lets
//! in only tokens whose `aud` names it; without a `resource`, there is no metadata (404).

mod support;

use test_support::fake_server;

use std::time::{SystemTime, UNIX_EPOCH};

use fake_server::{FakeServer, json};
use serde_json::json as j;
use support::{get, sqlite_url, start_api};

const RESOURCE: &str = "http://127.0.0.1:9/people";
const METADATA: &str = "http://127.0.0.1:9/.well-known/oauth-protected-resource/people";

fn answer(aud: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    j!({"active": true, "scope": "read", "client_id": "app", "username": "alice",
        "exp": exp, "aud": aud})
    .to_string()
}

#[tokio::test]
async fn metadata_challenge_and_audience() {
    let server = FakeServer::start(json(&answer(RESOURCE))).await;
    // The introspection section, then the API's own keys at the top level.
    let yaml = format!(
        "  url: '{}'\n  auth_token: t\n  cache: {{ max_ttl: 0s }}\nresource: '{RESOURCE}'\n\
         authorization_servers: [https://auth.example]",
        server.url
    );
    let api = start_api(&sqlite_url(), &yaml).await;
    let http = reqwest::Client::new();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/people",
    ] {
        let resp = http.get(api.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["access-control-allow-origin"], "*");
        let doc: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(
            doc,
            j!({"resource": RESOURCE, "authorization_servers": ["https://auth.example"],
                "scopes_supported": ["groups", "read", "write"],
                "bearer_methods_supported": ["header"]}),
            "{path}"
        );
    }
    let other = http
        .get(api.url("/.well-known/oauth-protected-resource/orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    let calls = server.calls();
    let a = get(&http, &api.url("/users/"), None).await;
    assert_eq!(
        (a.status, a.www_authenticate.as_deref()),
        (
            401,
            Some(
                format!(r#"Bearer realm="api", scope="read", resource_metadata="{METADATA}""#)
                    .as_str()
            )
        )
    );
    assert_eq!(server.calls(), calls, "no token, no introspection");
    let a = get(&http, &api.url("/users/"), Some("for-this-api")).await;
    assert_eq!(a.status, 200);
    server.set(json(&answer("http://127.0.0.1:9/billing")));
    let a = get(&http, &api.url("/users/"), Some("for-another-api")).await;
    assert_eq!(a.status, 401);
    assert!(
        a.www_authenticate.as_deref().unwrap().contains(
            r#"error_description="The access token is not meant for this API.", resource_metadata="#
        ),
        "{:?}",
        a.www_authenticate
    );
    api.stop().await;
}

#[tokio::test]
async fn without_a_resource_there_is_no_metadata() {
    let server = FakeServer::start(json(&answer(RESOURCE))).await;
    let yaml = format!("  url: '{}'\n  auth_token: t", server.url);
    let api = start_api(&sqlite_url(), &yaml).await;
    let http = reqwest::Client::new();
    let a = get(
        &http,
        &api.url("/.well-known/oauth-protected-resource"),
        None,
    )
    .await;
    assert_eq!(a.status, 404);
    // And no audience: the token passes whatever its aud.
    let a = get(&http, &api.url("/users/"), Some("any")).await;
    assert_eq!(a.status, 200);
    assert_eq!(
        get(&http, &api.url("/users/"), None)
            .await
            .www_authenticate
            .as_deref(),
        Some(r#"Bearer realm="api", scope="read""#)
    );
    api.stop().await;
}
