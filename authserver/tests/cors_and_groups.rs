//! CORS on the endpoints a browser application calls (token, revocation, metadata, JWKS; never
//! introspection), and the user's groups in introspection answers and JWT access tokens under the
//! `groups` scope. Router tests (tower `oneshot`) on SQLite, and PostgreSQL when configured.

use authserver::config::{AccessTokenFormat, CorsOrigins, Settings};
use authserver::store::GrantType;
use authserver::testing;
use authserver::{AppState, app};
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use base64::Engine;
use serde_json::Value;
use test_support::basic_auth;
use tower::ServiceExt;

const APP: &str = "http://localhost:5173";
const EVIL: &str = "https://evil.example.com";

async fn send(state: &AppState, request: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn preflight(path: &str, origin: &str, method: &str) -> Request<Body> {
    Request::builder()
        .method("OPTIONS")
        .uri(path)
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, method)
        .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "content-type")
        .body(Body::empty())
        .unwrap()
}

fn allow_origin(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .map(|v| v.to_str().unwrap())
}

fn cors_count(headers: &HeaderMap) -> usize {
    headers
        .keys()
        .filter(|k| k.as_str().starts_with("access-control-"))
        .count()
}

#[tokio::test]
async fn browsers_of_listed_origins_may_call_the_token_endpoints_and_anyone_read_the_documents() {
    let store = testing::store().await;
    testing::user(&store, "alice", "wonderland").await;
    let (client_id, secret) = testing::application(&store, GrantType::Password, false).await;
    let mut settings = Settings::for_tests("unused");
    settings.cors_origins = vec![APP.into()];
    let state = AppState::new(settings, store.clone());

    for path in ["/o/token/", "/o/revoke_token/"] {
        let (status, headers, _) = send(&state, preflight(path, APP, "POST")).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}");
        assert_eq!(allow_origin(&headers), Some(APP));
        assert_eq!(
            headers[header::ACCESS_CONTROL_ALLOW_METHODS]
                .to_str()
                .unwrap(),
            "POST"
        );
        assert!(
            headers
                .get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS)
                .is_none()
        );
        for (origin, method) in [(EVIL, "POST"), (APP, "DELETE"), ("null", "POST")] {
            let (status, headers, body) = send(&state, preflight(path, origin, method)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path} {origin} {method}");
            assert_eq!(cors_count(&headers), 0);
            assert_eq!(body["error"], "access_denied");
        }
    }
    // The token answer itself carries the header for the listed origin only.
    let token = |origin: &'static str| {
        Request::builder()
            .method("POST")
            .uri("/o/token/")
            .header(header::ORIGIN, origin)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::AUTHORIZATION, basic_auth(&client_id, &secret))
            .body(Body::from(
                "grant_type=password&username=alice&password=wonderland",
            ))
            .unwrap()
    };
    let (status, headers, body) = send(&state, token(APP)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(allow_origin(&headers), Some(APP));
    assert!(
        headers
            .get_all(header::VARY)
            .iter()
            .any(|v| v.to_str().unwrap().contains("Origin"))
    );
    let (status, headers, _) = send(&state, token(EVIL)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cors_count(&headers), 0);

    // Metadata, OpenID Connect discovery and JWKS: public documents, `*` by default.
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/.well-known/jwks.json",
    ] {
        let request = Request::builder()
            .uri(path)
            .header(header::ORIGIN, EVIL)
            .body(Body::empty())
            .unwrap();
        let (status, headers, _) = send(&state, request).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(allow_origin(&headers), Some("*"), "{path}");
        let mut asked = preflight(path, EVIL, "GET");
        asked
            .headers_mut()
            .remove(header::ACCESS_CONTROL_REQUEST_HEADERS);
        let (status, headers, _) = send(&state, asked).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}");
        assert_eq!(allow_origin(&headers), Some("*"));
        // Headers beyond the safelisted ones are not asked for on a document.
        let (status, _, _) = send(&state, preflight(path, EVIL, "GET")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    // Introspection is for resource servers: no CORS at all, a preflight is a 405.
    let (status, headers, _) = send(&state, preflight("/o/introspect/", APP, "POST")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(cors_count(&headers), 0);

    // Without cors_origins, the token endpoint answers a preflight 405, as any non-POST, and
    // documents may be closed with an empty list.
    let mut settings = Settings::for_tests("unused");
    settings.cors_metadata_origins = None;
    let closed = AppState::new(settings, store);
    let (status, headers, _) = send(&closed, preflight("/o/token/", APP, "POST")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(cors_count(&headers), 0);
    let request = Request::builder()
        .uri("/.well-known/jwks.json")
        .header(header::ORIGIN, APP)
        .body(Body::empty())
        .unwrap();
    assert_eq!(cors_count(&send(&closed, request).await.1), 0);
}

#[test]
fn cors_settings_are_validated_and_name_the_key() {
    let ok = Settings::from_yaml(
        "cors_origins: [http://localhost:5173, https://app.example.com]\ncors_metadata_origins: [https://app.example.com]\n",
        "a.yaml",
    )
    .unwrap();
    assert_eq!(ok.cors_origins, [APP, "https://app.example.com"]);
    assert_eq!(
        ok.cors_metadata_origins,
        Some(CorsOrigins::List(vec!["https://app.example.com".into()]))
    );
    assert_eq!(
        Settings::from_yaml("{}", "a.yaml")
            .unwrap()
            .cors_metadata_origins,
        Some(CorsOrigins::Any)
    );
    for (yaml, key) in [
        ("cors_origins: [\"*\"]\n", "cors_origins"),
        ("cors_origins: [https://app.example.com/]\n", "cors_origins"),
        (
            "cors_metadata_origins: [\"https://*.example.com\"]\n",
            "cors_metadata_origins",
        ),
    ] {
        let e = Settings::from_yaml(yaml, "a.yaml").unwrap_err().to_string();
        assert!(e.starts_with(&format!("a.yaml: key \"{key}\"")), "{e}");
        assert!(e.contains("scheme://host[:port]"), "{e}");
    }
    let from_env = Settings::load_with_env(None, |k| {
        (k == "AUTHSERVER_CORS_ORIGINS")
            .then(|| "http://localhost:5173, http://127.0.0.1:3000".into())
    })
    .unwrap();
    assert_eq!(from_env.cors_origins, [APP, "http://127.0.0.1:3000"]);
}

/// The claims of a JWT, unverified (the verification is the resource server's, tested there).
fn payload(jwt: &str) -> Value {
    let part = jwt.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn the_groups_scope_names_the_users_groups_in_introspection_and_jwts() {
    for store in testing::all_stores().await {
        let alice = testing::user(&store, "alice", "wonderland").await;
        let admins = store.create_group("admins").await.unwrap();
        let ops = store.create_group("ops team").await.unwrap();
        store.create_group("unrelated").await.unwrap();
        store.add_member(admins.id, alice.id).await.unwrap();
        store.add_member(ops.id, alice.id).await.unwrap();
        let app_ids = testing::application(&store, GrantType::Password, false).await;
        let rs = testing::application(&store, GrantType::ClientCredentials, true).await;

        for format in [AccessTokenFormat::Opaque, AccessTokenFormat::Jwt] {
            let mut settings = Settings::for_tests("unused");
            settings.access_token_format = format;
            let state = AppState::new(settings, store.clone());
            let post = |path: &'static str, auth: String, form: String| {
                Request::builder()
                    .method("POST")
                    .uri(path)
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .header(header::AUTHORIZATION, auth)
                    .body(Body::from(form))
                    .unwrap()
            };
            let token = |scope: &'static str| {
                post(
                    "/o/token/",
                    basic_auth(&app_ids.0, &app_ids.1),
                    format!("grant_type=password&username=alice&password=wonderland&scope={scope}"),
                )
            };
            let introspect = |token: String| {
                post(
                    "/o/introspect/",
                    basic_auth(&rs.0, &rs.1),
                    format!("token={token}"),
                )
            };
            let (status, _, with) = send(&state, token("read%20groups")).await;
            assert_eq!(status, StatusCode::OK, "{with}");
            let with = with["access_token"].as_str().unwrap().to_owned();
            let (_, _, without) = send(&state, token("read")).await;
            let without = without["access_token"].as_str().unwrap().to_owned();

            let (_, _, answer) = send(&state, introspect(with.clone())).await;
            assert_eq!(answer["active"], true);
            assert_eq!(answer["groups"], serde_json::json!(["admins", "ops team"]));
            let (_, _, answer) = send(&state, introspect(without.clone())).await;
            assert_eq!(answer["active"], true);
            assert!(answer.get("groups").is_none(), "{answer}");

            if format == AccessTokenFormat::Jwt {
                assert_eq!(
                    payload(&with)["groups"],
                    serde_json::json!(["admins", "ops team"])
                );
                assert!(payload(&without).get("groups").is_none());
            }
            // Introspection says what is true now: a member removed is no longer named.
            store.remove_member(ops.id, alice.id).await.unwrap();
            let (_, _, answer) = send(&state, introspect(with)).await;
            assert_eq!(answer["groups"], serde_json::json!(["admins"]));
            store.add_member(ops.id, alice.id).await.unwrap();
        }
        // A client's own token names no groups.
        let mut settings = Settings::for_tests("unused");
        settings.access_token_format = AccessTokenFormat::Opaque;
        let state = AppState::new(settings, store.clone());
        let request = Request::builder()
            .method("POST")
            .uri("/o/token/")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::AUTHORIZATION, basic_auth(&rs.0, &rs.1))
            .body(Body::from(
                "grant_type=client_credentials&scope=read%20groups",
            ))
            .unwrap();
        let (status, _, body) = send(&state, request).await;
        if status == StatusCode::OK {
            let token = body["access_token"].as_str().unwrap().to_owned();
            let request = Request::builder()
                .method("POST")
                .uri("/o/introspect/")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(header::AUTHORIZATION, basic_auth(&rs.0, &rs.1))
                .body(Body::from(format!("token={token}")))
                .unwrap();
            let (_, _, answer) = send(&state, request).await;
            assert!(answer.get("groups").is_none(), "{answer}");
        }
    }
}
