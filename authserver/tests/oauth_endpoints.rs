//! Router tests of the OAuth endpoints (tower `oneshot`), one per row of SPEC §2.1–2.4.

use authserver::config::Settings;
use authserver::store::{ApplicationInput, GrantType, Store};
use authserver::testing;
use authserver::{AppState, app};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use test_support::basic_auth;
use tower::ServiceExt;

struct Fixture {
    state: AppState,
    client_id: String,
    secret: String,
}

async fn fixture() -> Fixture {
    let store = testing::store().await;
    fixture_on(store).await
}

async fn fixture_on(store: Store) -> Fixture {
    testing::user(&store, "alice", "wonderland").await;
    let (client_id, secret) = testing::application(&store, GrantType::Password, false).await;
    Fixture {
        state: AppState::new(Settings::for_tests("unused"), store),
        client_id,
        secret,
    }
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    json: Value,
}

async fn send(state: &AppState, method: &str, uri: &str, auth: Option<&str>, form: &str) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(auth) = auth {
        request = request.header(header::AUTHORIZATION, auth);
    }
    let response = app(state.clone())
        .oneshot(request.body(Body::from(form.to_owned())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        json,
    }
}

impl Fixture {
    async fn token(&self, form: &str) -> Reply {
        send(
            &self.state,
            "POST",
            "/o/token/",
            Some(&basic_auth(&self.client_id, &self.secret)),
            form,
        )
        .await
    }
    async fn password_token(&self, scope: Option<&str>) -> Value {
        let form = match scope {
            Some(scope) => {
                format!("grant_type=password&username=alice&password=wonderland&scope={scope}")
            }
            None => "grant_type=password&username=alice&password=wonderland".to_owned(),
        };
        let reply = self.token(&form).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
        reply.json
    }
    /// A second password-grant application, allowed to introspect; its client id, and alice's
    /// token with the introspection scope from it as an `Authorization` value.
    async fn introspector(&self) -> (String, String) {
        let (id, secret) = testing::application(&self.state.store, GrantType::Password, true).await;
        let reply = send(
            &self.state,
            "POST",
            "/o/token/",
            Some(&basic_auth(&id, &secret)),
            "grant_type=password&username=alice&password=wonderland&scope=introspection",
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
        assert_eq!(reply.json["scope"], "introspection");
        let bearer = format!("Bearer {}", reply.json["access_token"].as_str().unwrap());
        (id, bearer)
    }
    async fn introspect_as(&self, auth: &str, token: &str) -> Reply {
        send(
            &self.state,
            "POST",
            "/o/introspect/",
            Some(auth),
            &format!("token={token}"),
        )
        .await
    }
}

fn error_of(reply: &Reply) -> &str {
    reply.json["error"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn password_grant_issues_the_seed_response() {
    let f = fixture().await;
    let reply = f
        .token("grant_type=password&username=alice&password=wonderland")
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(reply.headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(reply.headers[header::PRAGMA], "no-cache");
    assert_eq!(reply.json["token_type"], "Bearer");
    assert_eq!(reply.json["expires_in"], 36000);
    assert_eq!(reply.json["scope"], "read write groups");
    assert!(reply.json["access_token"].as_str().unwrap().len() >= 40);
    assert!(reply.json["refresh_token"].as_str().is_some());
}

#[tokio::test]
async fn requested_scope_is_granted_exactly() {
    let f = fixture().await;
    assert_eq!(f.password_token(Some("read")).await["scope"], "read");
    assert_eq!(
        f.password_token(Some("write+read+write")).await["scope"],
        "write read"
    );
    let reply = f
        .token("grant_type=password&username=alice&password=wonderland&scope=admin")
        .await;
    assert_eq!(
        (reply.status, error_of(&reply)),
        (StatusCode::BAD_REQUEST, "invalid_scope")
    );
}

#[tokio::test]
async fn the_introspection_scope_only_for_applications_allowed_to_introspect() {
    // alice is no staff member; her application may not introspect.
    let f = fixture().await;
    for scope in ["introspection", "read+introspection"] {
        let reply = f
            .token(&format!(
                "grant_type=password&username=alice&password=wonderland&scope={scope}"
            ))
            .await;
        assert_eq!(
            (reply.status, error_of(&reply)),
            (StatusCode::BAD_REQUEST, "invalid_scope"),
            "{scope}: {}",
            reply.json
        );
    }
    let default = f.password_token(None).await;
    assert_eq!(default["scope"], "read write groups");

    // Even with settings that name it as a default (the config file refuses that), and for an
    // application that may introspect, a default token never carries it.
    let store = f.state.store.clone();
    let (id, secret) = testing::application(&store, GrantType::Password, true).await;
    let mut settings = Settings::for_tests("unused");
    settings.default_scopes = vec!["read".into(), "introspection".into()];
    let state = AppState::new(settings, store);
    let reply = send(
        &state,
        "POST",
        "/o/token/",
        Some(&basic_auth(&id, &secret)),
        "grant_type=password&username=alice&password=wonderland",
    )
    .await;
    assert_eq!(reply.json["scope"], "read", "{}", reply.json);
}

/// An operator narrows an application's scopes after it was issued a token: introspection
/// reports only what the application still may have, and a token left with no scope at all is
/// inactive (a refresh narrows the same way).
#[tokio::test]
async fn introspection_reports_only_the_scopes_the_application_still_has() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = fixture_on(store).await;
        let issued = f.password_token(Some("read+write")).await;
        let token = issued["access_token"].as_str().unwrap();
        let (_, bearer) = f.introspector().await;
        let before = f.introspect_as(&bearer, token).await.json;
        assert_eq!(before["scope"], "read write", "{backend:?}");
        let app = f
            .state
            .store
            .find_application_by_client_id(&f.client_id)
            .await
            .unwrap()
            .unwrap();
        for (allowed, expected) in [
            (vec!["read", "groups"], Some("read")),
            (vec!["groups"], None),
            (vec!["*"], Some("read write")),
        ] {
            let input = ApplicationInput {
                name: app.name.clone(),
                client_type: app.client_type,
                grant_type: app.grant_type,
                redirect_uris: app.redirect_uris.clone(),
                allowed_scopes: allowed.iter().map(|s| s.to_string()).collect(),
                may_introspect: app.may_introspect,
                may_use_ssf: app.may_use_ssf,
                pkce_required: app.pkce_required,
                token_format: app.token_format,
            };
            f.state
                .store
                .update_application(app.id, &input)
                .await
                .unwrap();
            let now = f.introspect_as(&bearer, token).await.json;
            match expected {
                Some(scope) => {
                    assert_eq!(now["active"], true, "{backend:?} {allowed:?}");
                    assert_eq!(now["scope"], scope, "{backend:?} {allowed:?}");
                }
                None => assert_eq!(
                    now,
                    serde_json::json!({"active": false}),
                    "{backend:?} {allowed:?}"
                ),
            }
        }
    }
}

#[tokio::test]
async fn withdrawing_the_permission_disarms_introspection_tokens() {
    let f = fixture().await;
    let user_token = f.password_token(None).await;
    let token = user_token["access_token"].as_str().unwrap();
    let (introspector_id, bearer) = f.introspector().await;
    assert_eq!(f.introspect_as(&bearer, token).await.json["active"], true);
    // A refresh token of the introspecting application, with the scope.
    let (id, secret) = testing::application(&f.state.store, GrantType::Password, true).await;
    let issued = send(
        &f.state,
        "POST",
        "/o/token/",
        Some(&basic_auth(&id, &secret)),
        "grant_type=password&username=alice&password=wonderland&scope=introspection+read",
    )
    .await
    .json;

    // A superuser withdraws both applications' permission.
    let store = &f.state.store;
    for client_id in [&introspector_id, &id] {
        let app = store
            .find_application_by_client_id(client_id)
            .await
            .unwrap()
            .unwrap();
        let input = ApplicationInput {
            name: app.name.clone(),
            client_type: app.client_type,
            grant_type: app.grant_type,
            redirect_uris: app.redirect_uris.clone(),
            allowed_scopes: app.allowed_scopes.clone(),
            may_introspect: false,
            may_use_ssf: false,
            pkce_required: app.pkce_required,
            token_format: app.token_format,
        };
        store.update_application(app.id, &input).await.unwrap();
    }
    // The token still carries the scope, but its application may no longer introspect.
    assert_eq!(
        f.introspect_as(&bearer, token).await.status,
        StatusCode::FORBIDDEN
    );
    // On refresh the scope cannot be kept: asked for, invalid_scope (and the token is not
    // spent); not asked for, left out.
    let refresh = issued["refresh_token"].as_str().unwrap();
    let reply = send(
        &f.state,
        "POST",
        "/o/token/",
        Some(&basic_auth(&id, &secret)),
        &format!("grant_type=refresh_token&refresh_token={refresh}&scope=introspection"),
    )
    .await;
    assert_eq!(
        (reply.status, error_of(&reply)),
        (StatusCode::BAD_REQUEST, "invalid_scope")
    );
    let reply = send(
        &f.state,
        "POST",
        "/o/token/",
        Some(&basic_auth(&id, &secret)),
        &format!("grant_type=refresh_token&refresh_token={refresh}"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["scope"], "read");
}

#[tokio::test]
async fn client_authentication_failures_are_invalid_client_401() {
    let f = fixture().await;
    let form = "grant_type=password&username=alice&password=wonderland";
    for auth in [
        Some(basic_auth(&f.client_id, "wrong")),
        Some(basic_auth("nobody", &f.secret)),
        None,
    ] {
        let reply = send(&f.state, "POST", "/o/token/", auth.as_deref(), form).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(error_of(&reply), "invalid_client");
        assert!(reply.headers.contains_key(header::WWW_AUTHENTICATE));
    }
    // client_secret_post works too.
    let posted = format!(
        "{form}&client_id={}&client_secret={}",
        f.client_id, f.secret
    );
    assert_eq!(
        send(&f.state, "POST", "/o/token/", None, &posted)
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn user_credential_and_request_errors() {
    let f = fixture().await;
    let cases = [
        (
            "grant_type=password&username=alice&password=nope",
            StatusCode::BAD_REQUEST,
            "invalid_grant",
        ),
        (
            "grant_type=password&username=nobody&password=wonderland",
            StatusCode::BAD_REQUEST,
            "invalid_grant",
        ),
        (
            "grant_type=password&username=alice",
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "grant_type=password&password=wonderland",
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "grant_type=password&username=alice&username=bob&password=x",
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "grant_type=refresh_token",
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "grant_type=magic",
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
        ),
        (
            "username=alice",
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
        ),
        (
            "grant_type=client_credentials",
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
        ),
    ];
    for (form, status, error) in cases {
        let reply = f.token(form).await;
        assert_eq!(
            (reply.status, error_of(&reply)),
            (status, error),
            "{form}: {}",
            reply.json
        );
        assert_eq!(reply.headers[header::CACHE_CONTROL], "no-store");
    }
}

#[tokio::test]
async fn inactive_user_cannot_sign_in() {
    let f = fixture().await;
    let alice = f
        .state
        .store
        .find_user_by_username("alice")
        .await
        .unwrap()
        .unwrap();
    let update = authserver::store::UserUpdate {
        is_active: Some(false),
        ..Default::default()
    };
    f.state.store.update_user(alice.id, &update).await.unwrap();
    let reply = f
        .token("grant_type=password&username=alice&password=wonderland")
        .await;
    assert_eq!(
        (reply.status, error_of(&reply)),
        (StatusCode::BAD_REQUEST, "invalid_grant")
    );
}

#[tokio::test]
async fn only_post_is_allowed_on_the_token_endpoint() {
    let f = fixture().await;
    for method in ["GET", "PUT", "DELETE"] {
        let reply = send(&f.state, method, "/o/token/", None, "").await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
    }
}

#[tokio::test]
async fn refresh_rotates_and_reuse_revokes_the_family() {
    let f = fixture().await;
    let first = f.password_token(None).await;
    let refresh1 = first["refresh_token"].as_str().unwrap();
    let reply = f
        .token(&format!(
            "grant_type=refresh_token&refresh_token={refresh1}&scope=read"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["scope"], "read");
    let second = reply.json;
    let refresh2 = second["refresh_token"].as_str().unwrap();
    assert_ne!(refresh1, refresh2);

    // The old access token stopped working at once.
    let store = &f.state.store;
    assert!(
        !store
            .find_token(first["access_token"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap()
            .is_active()
    );
    assert!(
        store
            .find_token(second["access_token"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap()
            .is_active()
    );

    // Wider than the original on refresh: invalid_scope, and the token is not spent.
    let reply = f
        .token(&format!(
            "grant_type=refresh_token&refresh_token={refresh2}&scope=read+write"
        ))
        .await;
    assert_eq!(
        (reply.status, error_of(&reply)),
        (StatusCode::BAD_REQUEST, "invalid_scope")
    );

    // Reuse of the first refresh token: invalid_grant, and the whole family is revoked.
    let reply = f
        .token(&format!(
            "grant_type=refresh_token&refresh_token={refresh1}"
        ))
        .await;
    assert_eq!(
        (reply.status, error_of(&reply)),
        (StatusCode::BAD_REQUEST, "invalid_grant")
    );
    assert!(
        !store
            .find_token(second["access_token"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap()
            .is_active()
    );
    let reply = f
        .token(&format!(
            "grant_type=refresh_token&refresh_token={refresh2}"
        ))
        .await;
    assert_eq!(
        (reply.status, error_of(&reply)),
        (StatusCode::BAD_REQUEST, "invalid_grant")
    );
}

#[tokio::test]
async fn client_credentials_grant_returns_no_refresh_token() {
    let store = testing::store().await;
    let (id, secret) = testing::application(&store, GrantType::ClientCredentials, false).await;
    let state = AppState::new(Settings::for_tests("unused"), store);
    let reply = send(
        &state,
        "POST",
        "/o/token/",
        Some(&basic_auth(&id, &secret)),
        "grant_type=client_credentials&scope=read",
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["scope"], "read");
    assert!(reply.json.get("refresh_token").is_none());
    let reply = send(
        &state,
        "POST",
        "/o/token/",
        Some(&basic_auth(&id, &secret)),
        "grant_type=password&username=a&password=b",
    )
    .await;
    assert_eq!(error_of(&reply), "unauthorized_client");
}

#[tokio::test]
async fn introspection_with_a_bearer_token_carrying_the_introspection_scope() {
    let f = fixture().await;
    let (_, auth) = f.introspector().await;
    let user_token = f.password_token(Some("read+write")).await;
    let token = user_token["access_token"].as_str().unwrap();

    let reply = f.introspect_as(&auth, token).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
    let claims = reply.json;
    assert_eq!(claims["active"], true);
    assert_eq!(claims["scope"], "read write");
    assert_eq!(claims["client_id"], f.client_id.as_str());
    assert_eq!(claims["username"], "alice");
    assert_eq!(claims["token_type"], "Bearer");
    let exp = claims["exp"].as_i64().unwrap();
    assert!((exp - claims["iat"].as_i64().unwrap() - 36000).abs() <= 1);

    // GET ?token= is refused (RFC 7662 §2.1: POST); review_round3 covers every method.
    let get = send(
        &f.state,
        "GET",
        &format!("/o/introspect/?token={token}"),
        Some(&auth),
        "",
    )
    .await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);

    // Unknown and revoked tokens: {"active": false} and nothing else.
    assert_eq!(
        f.introspect_as(&auth, "not-a-token").await.json,
        serde_json::json!({"active": false})
    );
    let revoked = send(
        &f.state,
        "POST",
        "/o/revoke_token/",
        Some(&basic_auth(&f.client_id, &f.secret)),
        &format!("token={token}"),
    )
    .await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert_eq!(
        f.introspect_as(&auth, token).await.json,
        serde_json::json!({"active": false})
    );

    // A refresh token is not a bearer credential: inactive unless asked for by hint.
    let refresh = user_token["refresh_token"].as_str().unwrap();
    let fresh = f.password_token(None).await;
    let refresh_live = fresh["refresh_token"].as_str().unwrap();
    assert_eq!(
        f.introspect_as(&auth, refresh_live).await.json["active"],
        false
    );
    let hinted = send(
        &f.state,
        "POST",
        "/o/introspect/",
        Some(&auth),
        &format!("token={refresh_live}&token_type_hint=refresh_token"),
    )
    .await;
    assert_eq!(hinted.json["active"], true);
    assert_eq!(hinted.json["token_type"], "refresh_token");
    assert_eq!(f.introspect_as(&auth, refresh).await.json["active"], false);

    // Missing token.
    let missing = send(&f.state, "POST", "/o/introspect/", Some(&auth), "").await;
    assert_eq!(
        (missing.status, error_of(&missing)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
}

#[tokio::test]
async fn introspection_refuses_callers_that_may_not_introspect() {
    let f = fixture().await;
    let token = f.password_token(None).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // Anonymous: 401 with a challenge.
    let reply = send(
        &f.state,
        "POST",
        "/o/introspect/",
        None,
        &format!("token={token}"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(reply.headers.contains_key(header::WWW_AUTHENTICATE));
    // A bearer token without the introspection scope: 403.
    assert_eq!(
        f.introspect_as(&format!("Bearer {token}"), &token)
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    // A bogus bearer token: 401.
    assert_eq!(
        f.introspect_as("Bearer bogus", &token).await.status,
        StatusCode::UNAUTHORIZED
    );
    // An application not allowed to introspect: 403; wrong secret: 401.
    assert_eq!(
        f.introspect_as(&basic_auth(&f.client_id, &f.secret), &token)
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        f.introspect_as(&basic_auth(&f.client_id, "x"), &token)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // An application allowed to introspect: 200.
    let (rs_id, rs_secret) =
        testing::application(&f.state.store, GrantType::ClientCredentials, true).await;
    let reply = f
        .introspect_as(&basic_auth(&rs_id, &rs_secret), &token)
        .await;
    assert_eq!(
        (reply.status, reply.json["active"].clone()),
        (StatusCode::OK, Value::Bool(true))
    );
}

#[tokio::test]
async fn revocation_is_per_client_and_covers_the_refresh_token() {
    let f = fixture().await;
    let issued = f.password_token(None).await;
    let (access, refresh) = (
        issued["access_token"].as_str().unwrap(),
        issued["refresh_token"].as_str().unwrap(),
    );
    // Another client cannot revoke it (and learns nothing: 200).
    let (other_id, other_secret) =
        testing::application(&f.state.store, GrantType::Password, false).await;
    let reply = send(
        &f.state,
        "POST",
        "/o/revoke_token/",
        Some(&basic_auth(&other_id, &other_secret)),
        &format!("token={access}"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        f.state
            .store
            .find_token(access)
            .await
            .unwrap()
            .unwrap()
            .is_active()
    );
    // Unknown token: 200, empty body.
    let reply = send(
        &f.state,
        "POST",
        "/o/revoke_token/",
        Some(&basic_auth(&f.client_id, &f.secret)),
        "token=unknown",
    )
    .await;
    assert_eq!(
        (reply.status, reply.json.clone()),
        (StatusCode::OK, Value::Null)
    );
    // No client authentication: 401.
    let reply = send(
        &f.state,
        "POST",
        "/o/revoke_token/",
        None,
        &format!("token={access}"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    // The owner revokes the access token: its refresh token stops working too.
    send(
        &f.state,
        "POST",
        "/o/revoke_token/",
        Some(&basic_auth(&f.client_id, &f.secret)),
        &format!("token={access}"),
    )
    .await;
    let reply = f
        .token(&format!("grant_type=refresh_token&refresh_token={refresh}"))
        .await;
    assert_eq!(error_of(&reply), "invalid_grant");
}

#[tokio::test]
async fn metadata_describes_the_endpoints() {
    let f = fixture().await;
    let reply = send(
        &f.state,
        "GET",
        "/.well-known/oauth-authorization-server",
        None,
        "",
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json["issuer"], "http://127.0.0.1:8000");
    assert_eq!(
        reply.json["token_endpoint"],
        "http://127.0.0.1:8000/o/token/"
    );
    assert_eq!(
        reply.json["introspection_endpoint"],
        "http://127.0.0.1:8000/o/introspect/"
    );
    assert_eq!(
        reply.json["revocation_endpoint"],
        "http://127.0.0.1:8000/o/revoke_token/"
    );
    assert_eq!(
        reply.json["scopes_supported"],
        serde_json::json!(["groups", "introspection", "read", "write"])
    );
}
