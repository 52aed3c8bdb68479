//! Privilege checks through the front door: an ordinary user's or a client's token against the
//! administrator, the `introspection` scope, and the password-grant throttle with forged
//! `X-Forwarded-For` headers.

use crate::{Harness, client_from};
use authserver::store::{ApplicationInput, ClientType, GrantType};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PERMISSION_DENIED: &str = "You do not have permission to perform this action.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_tokens_cannot_touch_the_administrator() {
    let h = Harness::start().await;
    let http = reqwest::Client::new();
    let admin_id = h
        .stack
        .store
        .find_user_by_username(&h.admin.0)
        .await
        .unwrap()
        .unwrap()
        .id;
    h.ordinary_user("mallory", "mallory pw").await;
    let user_token = h.token(("mallory", "mallory pw"), None).await;
    let (app, secret) = h
        .stack
        .store
        .create_application(
            &ApplicationInput {
                name: "machine".into(),
                client_type: ClientType::Confidential,
                grant_type: GrantType::ClientCredentials,
                redirect_uris: String::new(),
                allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
                may_introspect: false,
                may_use_ssf: false,
                pkce_required: true,
                token_format: None,
            },
            None,
            None,
            None,
        )
        .await
        .unwrap();
    let machine_token = h
        .client_token((&app.client_id, &secret.unwrap()), None)
        .await;

    let admin_uri = format!("{}/users/{admin_id}/", h.base);
    for token in [&user_token, &machine_token] {
        for (method, body) in [
            (
                reqwest::Method::PATCH,
                json!({"password": "pwned-by-mallory"}),
            ),
            (
                reqwest::Method::PATCH,
                json!({"username": "mallory-was-here"}),
            ),
            (
                reqwest::Method::PUT,
                json!({"username": "admin", "email": "m@evil.test"}),
            ),
            (reqwest::Method::PATCH, json!({"is_superuser": false})),
            (reqwest::Method::DELETE, Value::Null),
        ] {
            let response = http
                .request(method.clone(), &admin_uri)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {body}");
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer, json!({"detail": PERMISSION_DENIED}));
        }
        // No self-promotion at creation either.
        let response = http
            .post(format!("{}/users/", h.base))
            .bearer_auth(token)
            .json(&json!({"username": "mallory2", "password": "x", "is_staff": true, "is_superuser": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
    // The administrator is intact: same name, same password, still signs in.
    let admin = h.stack.store.get_user(admin_id).await.unwrap().unwrap();
    assert_eq!(
        (
            admin.username.as_str(),
            admin.is_superuser,
            admin.email.as_str()
        ),
        (h.admin.0.as_str(), true, "")
    );
    h.token((&h.admin.0, &h.admin.1), None).await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_introspection_scope_needs_an_application_allowed_to_introspect() {
    let h = Harness::start().await;
    let http = reqwest::Client::new();
    h.ordinary_user("eve", "eve pw").await;
    // The demo application may not introspect: nobody gets the scope through it, staff or not.
    for user in [("eve", "eve pw"), (h.admin.0.as_str(), h.admin.1.as_str())] {
        let (status, body) = h
            .password_grant(&http, user, Some("read introspection"))
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_scope")),
            "{body}"
        );
        let (status, body) = h.password_grant(&http, user, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["scope"], "read write groups");
    }
    // A token without the scope cannot read another user's token metadata.
    let eve = h.token(("eve", "eve pw"), None).await;
    let victim = h.token((&h.admin.0, &h.admin.1), None).await;
    let response = http
        .post(format!("{}/o/introspect/", h.base))
        .bearer_auth(&eve)
        .form(&[("token", &victim)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = response.text().await.unwrap();
    assert!(!body.contains(&h.admin.0), "{body}");
    h.shutdown().await;
}

/// A password grant for `victim` from `http` (bound to some loopback address), claiming to come
/// from `forwarded`.
async fn victim_grant(
    h: &Harness,
    http: &reqwest::Client,
    forwarded: &str,
    password: &str,
) -> reqwest::Response {
    http.post(format!("{}/o/token/", h.base))
        .basic_auth(&h.client.0, Some(&h.client.1))
        .header("X-Forwarded-For", forwarded)
        .form(&[
            ("grant_type", "password"),
            ("username", "victim"),
            ("password", password),
        ])
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_grant_throttle_ignores_forged_forwarding_headers() {
    let h = Harness::start().await;
    h.ordinary_user("victim", "right pw").await;
    // The attacker on 127.0.0.2 guesses, each time claiming another address.
    let attacker = client_from("127.0.0.2");
    for i in 0..5 {
        let response = victim_grant(&h, &attacker, &format!("203.0.113.{i}"), "wrong").await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "guess {i}");
    }
    // Changing the forged address does not reset the count: the sixth try, even with the right
    // password, is throttled.
    let response = victim_grant(&h, &attacker, "198.51.100.77", "right pw").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert!(body["error"].is_string(), "{body}");
    assert!(body.get("access_token").is_none());

    // The real user, from another address, is not locked out, even when the attacker's
    // address is named in a forged header.
    let user = client_from("127.0.0.3");
    let response = victim_grant(&h, &user, "127.0.0.2", "right pw").await;
    assert_eq!(response.status(), StatusCode::OK);
    h.shutdown().await;
}
