//! Router tests: the app driven with `tower::ServiceExt::oneshot`, mostly in `behind-proxy` mode
//! with the shipped `config/example-api.yaml` rules, on SQLite (and PostgreSQL when
//! `DATABASE_URL` names one).

mod access;
mod groups;
mod users;

use authserver::store::Store;
pub use authserver::testing::{all_stores, sqlite_store};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use crate::config::{Config, EXAMPLE_CONFIG};
use crate::guard::Guard;
use crate::{AppState, app};

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", authserver::secrets::random_client_id())
}

/// The secret the tests' proxy proves itself with.
pub const PROXY_SECRET: &str = "test-proxy-secret-0123456789abcdef";

/// The shipped configuration, with [`PROXY_SECRET`] as the proxy's secret.
pub fn shipped() -> Config {
    let mut config = Config::from_yaml(EXAMPLE_CONFIG, "config/example-api.yaml")
        .expect("the shipped config is valid");
    config.gate.proxy_secret = Some(resource_server::ProxySecret::new(PROXY_SECRET).unwrap());
    config
}

/// The guard of the shipped configuration: `behind-proxy` mode, the default leeway.
pub fn shipped_guard() -> Guard {
    Guard::from_config(&shipped()).expect("the shipped guard")
}

/// The app in `behind-proxy` mode over `store`.
pub fn proxied(store: Store) -> Router {
    app(AppState::new(store, shipped_guard()))
}

/// The app in `behind-proxy` mode over a fresh SQLite database.
pub async fn app_on_sqlite() -> Router {
    proxied(sqlite_store().await)
}

/// The proxy's identity headers for a token with `scope`, valid for an hour, with its secret.
pub fn identity(scope: &str) -> Vec<(&'static str, String)> {
    let exp = authserver::store::now() + 3600;
    vec![
        ("x-auth-username", "alice".into()),
        ("x-auth-client-id", "app".into()),
        ("x-auth-scope", scope.into()),
        ("x-auth-expires", exp.to_string()),
        (resource_server::PROXY_SECRET_HEADER, PROXY_SECRET.into()),
    ]
}

/// An answer: status, headers, and the body as JSON (`Null` when empty).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Sends one request; `body` is `(content type, text)`.
pub async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    headers: &[(&'static str, String)],
    body: Option<(&str, &str)>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = match body {
        Some((content_type, text)) => request
            .header("content-type", content_type)
            .body(Body::from(text.to_owned())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
    };
    Answer {
        status,
        headers,
        json,
    }
}

/// A request with the identity of a token carrying `scope`.
pub async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    scope: &str,
    body: Option<(&str, &str)>,
) -> Answer {
    send(app, method, uri, &identity(scope), body).await
}

pub const JSON: &str = "application/json";
pub const FORM: &str = "application/x-www-form-urlencoded";
