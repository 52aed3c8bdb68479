//! SPEC §3's access table and refusals, row by row, in `behind-proxy` mode; `introspect` mode with
//! the authorization server down; the unsafe `none` mode.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use resource_server::{
    AnswerPolicy, CacheSettings, Check, Claims, ClientAuth, Credential, Gate,
    IntrospectionSettings, TokenChecker,
};
use serde_json::json;

use super::*;

const UNAUTHENTICATED: &str = "Authentication credentials were not provided.";
const FORBIDDEN: &str = "You do not have permission to perform this action.";

/// Every (method, path) of the API with the scope it needs.
fn table() -> Vec<(Method, &'static str, &'static str)> {
    let mut rows = vec![
        (Method::GET, "/users/", "read"),
        (Method::HEAD, "/users/", "read"),
        (Method::GET, "/users/1/", "read"),
        (Method::POST, "/users/", "write"),
        (Method::PUT, "/users/1/", "write"),
        (Method::PATCH, "/users/1/", "write"),
        (Method::DELETE, "/users/1/", "write"),
    ];
    for method in [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::HEAD,
    ] {
        rows.push((method.clone(), "/groups/", "groups"));
        rows.push((method, "/groups/1/", "groups"));
    }
    rows
}

#[tokio::test]
async fn no_credentials_is_401_on_every_route() {
    let app = app_on_sqlite().await;
    for (method, path, needed) in table() {
        let head = method == Method::HEAD;
        let a = send(&app, method.clone(), path, &[], None).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{method} {path}");
        // The challenge says which scopes the route needs (RFC 6750 §3).
        assert_eq!(
            a.header("www-authenticate"),
            Some(format!(r#"Bearer realm="api", scope="{needed}""#).as_str()),
            "{method} {path}"
        );
        assert_eq!(a.header("content-type"), Some("application/json"));
        if !head {
            assert_eq!(
                a.json,
                json!({"detail": UNAUTHENTICATED}),
                "{method} {path}"
            );
        }
    }
    // A bearer token is no identity in this mode: only the proxy's headers are.
    let a = send(
        &app,
        Method::GET,
        "/users/",
        &[("authorization", "Bearer abc".into())],
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn missing_scope_is_403_naming_the_scope() {
    let app = app_on_sqlite().await;
    let every = ["read", "write", "groups"];
    for (method, path, needed) in table() {
        let others: Vec<&str> = every.iter().copied().filter(|s| *s != needed).collect();
        let a = call(&app, method.clone(), path, &others.join(" "), None).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{method} {path}");
        let challenge =
            format!(r#"Bearer realm="api", error="insufficient_scope", scope="{needed}""#);
        assert_eq!(
            a.header("www-authenticate"),
            Some(challenge.as_str()),
            "{method} {path}"
        );
        if method != Method::HEAD {
            assert_eq!(a.json, json!({"detail": FORBIDDEN}));
        }
        // With the scope the request reaches the handler (whatever it answers, never 401/403).
        let a = call(&app, method.clone(), path, needed, Some((JSON, "{}"))).await;
        assert!(
            ![
                StatusCode::UNAUTHORIZED,
                StatusCode::FORBIDDEN,
                StatusCode::INTERNAL_SERVER_ERROR
            ]
            .contains(&a.status),
            "{method} {path}: {}",
            a.status
        );
    }
    // The seed's examples: a `read` token may list users but not create one nor see groups.
    let a = call(&app, Method::GET, "/users/", "read", None).await;
    assert_eq!((a.status, a.json), (StatusCode::OK, json!([])));
    let a = call(
        &app,
        Method::POST,
        "/users/",
        "read",
        Some((FORM, "username=bob&password=pw")),
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(
        a.header("www-authenticate")
            .unwrap()
            .ends_with(r#"scope="write""#)
    );
    let a = call(&app, Method::GET, "/groups/", "read write", None).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(
        a.header("www-authenticate")
            .unwrap()
            .ends_with(r#"scope="groups""#)
    );
}

#[tokio::test]
async fn expired_identity_is_401_invalid_token() {
    let app = app_on_sqlite().await;
    let leeway = AnswerPolicy::DEFAULT_LEEWAY.as_secs() as i64;
    let mut headers = identity("read write groups");
    headers[3].1 = (authserver::store::now() - leeway - 1).to_string();
    let a = send(&app, Method::GET, "/users/", &headers, None).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let challenge = a.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with(r#"Bearer realm="api", error="invalid_token", error_description=""#),
        "{challenge}"
    );
    assert_eq!(a.json, json!({"detail": "Invalid token."}));
}

/// The proxy forwards a token up to its leeway past `exp`; the API, configured with the same
/// leeway (both default to 5 s), lets in exactly what the proxy decided to let in.
#[tokio::test]
async fn the_proxys_leeway_is_honoured_behind_it() {
    let app = app_on_sqlite().await;
    let rules = shipped().gate.rules;
    let route = rules.find(&Method::GET, "/users/");
    let now = authserver::store::now();
    let leeway = AnswerPolicy::DEFAULT_LEEWAY.as_secs() as i64;
    for exp in [
        now + 60,
        now,
        now - 1,
        now - leeway + 2,
        now - leeway - 2,
        now - 60,
    ] {
        // What the proxy decides (default leeway) for a token with this exp, at this second.
        let claims = Claims {
            active: true,
            scope: Some("read".into()),
            exp: Some(exp),
            ..Claims::default()
        };
        let proxy = resource_server::decision::decide_at(
            route,
            &Credential::Checked(std::sync::Arc::new(claims)),
            now,
            AnswerPolicy::DEFAULT_LEEWAY,
        );
        assert_eq!(proxy.is_allow(), exp > now - leeway, "{proxy:?}");
        let mut headers = identity("read");
        headers[3].1 = exp.to_string();
        let a = send(&app, Method::GET, "/users/", &headers, None).await;
        assert_eq!(
            a.status == StatusCode::OK,
            proxy.is_allow(),
            "exp = now {:+}: proxy {proxy:?}, API {}",
            exp - now,
            a.status
        );
    }
}

#[tokio::test]
async fn malformed_identity_headers_are_400() {
    let app = app_on_sqlite().await;
    let mut headers = identity("read");
    headers[3].1 = "tomorrow".into();
    let a = send(&app, Method::GET, "/users/", &headers, None).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        a.header("www-authenticate"),
        Some(r#"Bearer realm="api", error="invalid_request""#)
    );
    assert_eq!(
        a.json,
        json!({"detail": resource_server::forwarded::BAD_EXPIRES})
    );
    let mut headers = identity("read");
    headers.push(("x-auth-scope", "groups".into()));
    let a = send(&app, Method::GET, "/groups/", &headers, None).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn unknown_paths_are_404_whoever_asks() {
    let app = app_on_sqlite().await;
    for path in [
        "/",
        "/users",
        "/users/1/extra/",
        "/admin/",
        "/users/../groups/",
        "/groups/%2e%2e/",
    ] {
        for headers in [vec![], identity("read write groups")] {
            let a = send(&app, Method::GET, path, &headers, None).await;
            assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
            assert_eq!(a.json, json!({"detail": "Not found."}), "{path}");
        }
    }
}

#[tokio::test]
async fn unsupported_methods_are_405_once_allowed_in() {
    let app = app_on_sqlite().await;
    let a = call(&app, Method::PUT, "/users/", "write", Some((JSON, "{}"))).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.json, json!({"detail": "Method \"PUT\" not allowed."}));
    assert_eq!(a.header("allow"), Some("GET, POST, HEAD, OPTIONS"));
    let a = call(&app, Method::POST, "/groups/1/", "groups", None).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    // ... but only once the access check passed.
    let a = call(&app, Method::PUT, "/users/", "read", Some((JSON, "{}"))).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = call(&app, Method::OPTIONS, "/users/", "read", None).await;
    assert_eq!(
        (a.status, a.json["name"].as_str()),
        (StatusCode::OK, Some("User List"))
    );
}

/// The introspection endpoint of a server that is not running: a port bound then released.
async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/o/introspect/")
}

#[tokio::test]
async fn introspect_mode_fails_closed_with_503() {
    let mut settings =
        IntrospectionSettings::new(closed_port_url().await, ClientAuth::Bearer("t".into()));
    settings.connect_timeout = Duration::from_millis(500);
    let checker = TokenChecker::new(settings, CacheSettings::default()).unwrap();
    let app = app(AppState::new(
        sqlite_store().await,
        Guard::new(Gate::new(
            shipped().gate.rules,
            Check::Introspection(checker),
        )),
    ));
    let a = send(
        &app,
        Method::GET,
        "/users/",
        &[("authorization", "Bearer some-token".into())],
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        a.json,
        json!({"detail": "Authorization server unavailable."})
    );
    // Decided without asking: no token, a malformed one, an unknown path.
    let a = send(&app, Method::GET, "/users/", &[], None).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let a = send(
        &app,
        Method::GET,
        "/users/",
        &[("authorization", "Bearer ".into())],
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = send(&app, Method::GET, "/users/?access_token=abc", &[], None).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = send(
        &app,
        Method::GET,
        "/nowhere/",
        &[("authorization", "Bearer x".into())],
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    // In introspect mode the proxy's headers mean nothing.
    let a = send(&app, Method::GET, "/users/", &identity("read"), None).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn none_mode_checks_nothing() {
    let app = app(AppState::new(
        sqlite_store().await,
        Guard::new(Gate::new(shipped().gate.rules, Check::Unchecked)),
    ));
    let a = send(&app, Method::GET, "/groups/", &[], None).await;
    assert_eq!((a.status, a.json), (StatusCode::OK, json!([])));
    let a = send(&app, Method::GET, "/elsewhere/", &[], None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn trusting_modes_refuse_non_loopback_listeners() {
    let Ok(listener) = tokio::net::TcpListener::bind("0.0.0.0:0").await else {
        return;
    };
    let state = AppState::new(sqlite_store().await, shipped_guard());
    let error = crate::serve(listener, state, async {}).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(error.to_string().contains("loopback"), "{error}");
}
