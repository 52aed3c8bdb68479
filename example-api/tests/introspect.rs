//! End to end over real sockets: the real authorization server and the example API in
//! `introspect` mode (the seed's separate resource-server mode), both on loopback ports.

mod support;

use std::time::Duration;

use authserver::store::GrantType;
use authserver::testing::{application, user};
use reqwest::Method;
use support::*;

/// The authorization server, a password-grant client with one user (the client may introspect,
/// so the seed's introspection-scoped token can be had), and the API's own introspection
/// credentials.
async fn setup(database_url: &str) -> (AuthServer, Client, (String, String), String) {
    let auth = AuthServer::start(database_url, "127.0.0.1:0".parse().unwrap()).await;
    let client = Client::new(
        &auth,
        application(&auth.store, GrantType::Password, true).await,
    );
    let api_credentials = application(&auth.store, GrantType::ClientCredentials, true).await;
    let username = unique("alice");
    user(&auth.store, &username, "alice-pw").await;
    (auth, client, api_credentials, username)
}

/// [`setup`] on SQLite, the API introspecting with this cache life, and a token of the user's.
async fn started(max_ttl: &str) -> (AuthServer, Client, Running, reqwest::Client, String) {
    let url = sqlite_url();
    let (auth, client, creds, alice) = setup(&url).await;
    let api = start_api(&url, &client_yaml(&auth, &creds, max_ttl)).await;
    let token = client.password_token(&alice, "alice-pw", None).await;
    (auth, client, api, reqwest::Client::new(), token)
}

#[tokio::test]
async fn tokens_scopes_and_refusals() {
    for url in database_urls() {
        let (auth, client, creds, alice) = setup(&url).await;
        let api = start_api(&url, &client_yaml(&auth, &creds, "60s")).await;
        let http = reqwest::Client::new();

        // A token from the password grant (default scopes read write groups) reads users.
        let token = client.password_token(&alice, "alice-pw", None).await;
        let a = get(&http, &api.url("/users/"), Some(&token)).await;
        assert_eq!(a.status, 200, "{}", a.json);
        assert!(
            a.json
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u["username"] == alice.as_str())
        );
        assert!(
            a.json
                .as_array()
                .unwrap()
                .iter()
                .all(|u| u.get("password").is_none())
        );
        assert_eq!(
            get(&http, &api.url("/groups/"), Some(&token)).await.status,
            200
        );

        // A `read` token: users yes, groups no (403 naming the scope), writing no.
        let read = client
            .password_token(&alice, "alice-pw", Some("read"))
            .await;
        assert_eq!(
            get(&http, &api.url("/users/"), Some(&read)).await.status,
            200
        );
        let a = get(&http, &api.url("/groups/"), Some(&read)).await;
        assert_eq!(a.status, 403);
        assert_eq!(
            a.www_authenticate.as_deref(),
            Some(r#"Bearer realm="api", error="insufficient_scope", scope="groups""#)
        );
        assert_eq!(
            a.json,
            serde_json::json!({"detail": "You do not have permission to perform this action."})
        );
        let a = request(
            &http,
            Method::POST,
            &api.url("/users/"),
            Some(&read),
            Some(&[("username", "x")]),
        )
        .await;
        assert_eq!(a.status, 403);
        assert!(a.www_authenticate.unwrap().ends_with(r#"scope="write""#));

        // No token, a bogus token.
        let a = get(&http, &api.url("/users/"), None).await;
        assert_eq!(
            (a.status, a.www_authenticate.as_deref()),
            (401, Some(r#"Bearer realm="api", scope="read""#))
        );
        assert_eq!(
            a.json,
            serde_json::json!({"detail": "Authentication credentials were not provided."})
        );
        let a = get(&http, &api.url("/users/"), Some("not-a-real-token")).await;
        assert_eq!(a.status, 401);
        let challenge = a.www_authenticate.unwrap();
        assert!(
            challenge
                .starts_with(r#"Bearer realm="api", error="invalid_token", error_description=""#),
            "{challenge}"
        );

        // A user created through the API with a password signs in with the password grant.
        let bob = unique("bob");
        let a = request(
            &http,
            Method::POST,
            &api.url("/users/"),
            Some(&token),
            Some(&[("username", &bob), ("password", "bob-pw-1")]),
        )
        .await;
        assert_eq!(a.status, 201, "{}", a.json);
        assert_eq!(a.json["username"], bob.as_str());
        assert!(a.json.get("password").is_none());
        let bobs = client.password_token(&bob, "bob-pw-1", Some("read")).await;
        let a = get(
            &http,
            &api.url(&format!("/users/{}/", a.json["id"])),
            Some(&bobs),
        )
        .await;
        assert_eq!(
            (a.status, a.json["username"].as_str()),
            (200, Some(bob.as_str()))
        );

        api.stop().await;
        auth.running.stop().await;
    }
}

#[tokio::test]
async fn the_seeds_way_a_bearer_token_with_the_introspection_scope() {
    let url = sqlite_url();
    let (auth, client, _, alice) = setup(&url).await;
    let introspector = client
        .password_token(&alice, "alice-pw", Some("introspection"))
        .await;
    let yaml = format!(
        "  url: '{}'\n  auth_token: '{introspector}'",
        auth.url("/o/introspect/")
    );
    let api = start_api(&url, &yaml).await;
    let http = reqwest::Client::new();
    let token = client
        .password_token(&alice, "alice-pw", Some("read"))
        .await;
    assert_eq!(
        get(&http, &api.url("/users/"), Some(&token)).await.status,
        200
    );
    // The introspection-only token opens nothing at the API.
    assert_eq!(
        get(&http, &api.url("/users/"), Some(&introspector))
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn revocation_is_seen_once_the_cache_entry_expires() {
    let (_auth, client, api, http, token) = started("1s").await;
    assert_eq!(
        get(&http, &api.url("/users/"), Some(&token)).await.status,
        200
    );
    let revoked_at = tokio::time::Instant::now();
    client.revoke(&token).await;
    let seen = eventually(Duration::from_secs(10), || async {
        get(&http, &api.url("/users/"), Some(&token)).await.status == 401
    })
    .await;
    assert!(seen, "revocation never seen");
    // Within the cache's life (1 s), plus scheduling slack.
    assert!(
        revoked_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        revoked_at.elapsed()
    );
}

#[tokio::test]
async fn revocation_is_seen_at_once_with_the_cache_off() {
    let (_auth, client, api, http, token) = started("0s").await;
    assert_eq!(
        get(&http, &api.url("/users/"), Some(&token)).await.status,
        200
    );
    client.revoke(&token).await;
    let a = get(&http, &api.url("/users/"), Some(&token)).await;
    assert_eq!(a.status, 401);
    assert!(
        a.www_authenticate
            .unwrap()
            .contains(r#"error="invalid_token""#)
    );
}

#[tokio::test]
async fn concurrent_requests_with_a_new_token_make_one_introspection_call() {
    let (auth, _client, api, http, token) = started("60s").await;
    let before = auth.introspections();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (http, url, token, barrier) = (
            http.clone(),
            api.url("/users/"),
            token.clone(),
            barrier.clone(),
        );
        tasks.spawn(async move {
            barrier.wait().await;
            get(&http, &url, Some(&token)).await.status
        });
    }
    let statuses: Vec<u16> = tasks.join_all().await;
    assert_eq!(statuses, vec![200; 20]);
    assert_eq!(auth.introspections() - before, 1);
    // Later requests are cache hits too.
    assert_eq!(
        get(&http, &api.url("/groups/"), Some(&token)).await.status,
        200
    );
    assert_eq!(auth.introspections() - before, 1);
}

#[tokio::test]
async fn authorization_server_down_is_503_then_served_again_after_restart() {
    // No cache, so every request needs the authorization server.
    let (auth, _client, api, http, token) = started("0s").await;
    assert_eq!(
        get(&http, &api.url("/users/"), Some(&token)).await.status,
        200
    );

    let stopped = auth.stop().await;
    let a = get(&http, &api.url("/users/"), Some(&token)).await;
    assert_eq!(a.status, 503);
    assert_eq!(
        a.json,
        serde_json::json!({"detail": "Authorization server unavailable."})
    );
    // Refusals that need no introspection are still given.
    assert_eq!(get(&http, &api.url("/users/"), None).await.status, 401);

    let auth = AuthServer::restart(stopped).await;
    let served = eventually(Duration::from_secs(10), || async {
        get(&http, &api.url("/users/"), Some(&token)).await.status == 200
    })
    .await;
    assert!(served, "not served after the restart");
    drop(auth);
}
