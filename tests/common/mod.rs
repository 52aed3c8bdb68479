//! What the root suites running the whole stack share (`tests/stack.rs`, `tests/adversarial`):
//! the shipped configuration on loopback ports, and token requests through the front door.
#![allow(dead_code)]

use reqwest::StatusCode;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The shipped config files on free loopback ports (unless `extra` names the port) and
/// `database_url`, with `extra` environment variables; the proxy does not wait out a grace
/// period when stopped (an override, as the stack's are).
pub fn stack_config(database_url: &str, extra: &[(&str, &str)]) -> tokengate::StackConfig {
    let env = |key: &str| match extra.iter().find(|(k, _)| *k == key) {
        Some((_, v)) => Some((*v).to_owned()),
        None => match key {
            "AUTHSERVER_LISTEN" | "EXAMPLE_API_LISTEN" | "PROXY_LISTEN" | "PROXY_ADMIN_LISTEN" => {
                Some("127.0.0.1:0".to_owned())
            }
            "AUTHSERVER_DATABASE_URL" | "EXAMPLE_API_DATABASE_URL" => Some(database_url.to_owned()),
            _ => None,
        },
    };
    let authserver =
        authserver::config::Settings::load_with_env(Some(Path::new("config/authserver.yaml")), env)
            .unwrap();
    let api =
        example_api::config::Config::load_with_env(Some(Path::new("config/example-api.yaml")), env)
            .unwrap();
    let proxy = quick_stop(proxy::load_config_with_env("config/proxy.yaml", env).unwrap());
    let data_dir = match database_url.strip_prefix("sqlite://") {
        Some(_) => tokengate::default_data_dir(database_url),
        // PostgreSQL: a directory of this test's own.
        None => std::env::temp_dir().join(format!(
            "tg-data-{}",
            authserver::secrets::random_client_id()
        )),
    };
    tokengate::StackConfig {
        authserver,
        api,
        proxy,
        data_dir,
    }
}

/// `proxy` stopping at once (no grace period, a second for the runtimes): the test's overrides.
pub fn quick_stop(proxy: proxy::ProxyConfig) -> proxy::ProxyConfig {
    let overrides =
        proxy::config::Overrides::from([("grace_period", "0s"), ("shutdown_timeout", "1s")]);
    proxy.with_overrides(&overrides).unwrap()
}

/// The token endpoint's answer (`Null` if not JSON) to `form`, the client authenticating with
/// HTTP Basic.
pub async fn token_request(
    http: &reqwest::Client,
    base: &str,
    client: (&str, &str),
    form: &[(&str, &str)],
) -> (StatusCode, Value) {
    let response = http
        .post(format!("{base}/o/token/"))
        .basic_auth(client.0, Some(client.1))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// [`token_request`] for a password grant.
pub async fn password_grant(
    http: &reqwest::Client,
    base: &str,
    client: (&str, &str),
    user: (&str, &str),
    scope: Option<&str>,
) -> (StatusCode, Value) {
    let mut form = vec![
        ("grant_type", "password"),
        ("username", user.0),
        ("password", user.1),
    ];
    form.extend(scope.map(|s| ("scope", s)));
    token_request(http, base, client, &form).await
}

/// An access token from the client credentials grant (which must succeed).
pub async fn client_credentials_token(
    http: &reqwest::Client,
    base: &str,
    client: (&str, &str),
    scope: Option<&str>,
) -> String {
    let mut form = vec![("grant_type", "client_credentials")];
    form.extend(scope.map(|s| ("scope", s)));
    let (status, body) = token_request(http, base, client, &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["access_token"].as_str().unwrap().to_owned()
}

/// Waits until something accepts connections on `port` (30 s at most).
pub async fn listening(port: u16, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} never listened on {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
