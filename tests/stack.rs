//! The one-command stack (`tokengate::start`, what `cargo run --release` runs): first start on an
//! empty database prints working credentials, the seed's walkthrough works through the front
//! door, and a second start on the same database keeps working with a rotated proxy secret.

use reqwest::StatusCode;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn config(database_url: &str) -> tokengate::StackConfig {
    let env = |key: &str| match key {
        "AUTHSERVER_LISTEN" | "EXAMPLE_API_LISTEN" | "PROXY_LISTEN" | "PROXY_ADMIN_LISTEN" => {
            Some("127.0.0.1:0".to_owned())
        }
        "AUTHSERVER_DATABASE_URL" | "EXAMPLE_API_DATABASE_URL" => Some(database_url.to_owned()),
        _ => None,
    };
    let authserver =
        authserver::config::Settings::load_with_env(Some(Path::new("config/authserver.yaml")), env)
            .unwrap();
    let api =
        example_api::config::Config::load_with_env(Some(Path::new("config/example-api.yaml")), env)
            .unwrap();
    let mut proxy = proxy::load_config_with_env("config/proxy.yaml", env).unwrap();
    proxy.grace_period = Duration::ZERO;
    proxy.shutdown_timeout = Duration::from_secs(1);
    tokengate::StackConfig {
        authserver,
        api,
        proxy,
    }
}

async fn token(
    http: &reqwest::Client,
    base: &str,
    client: (&str, &str),
    user: (&str, &str),
    scope: Option<&str>,
) -> String {
    let mut form = vec![
        ("grant_type", "password"),
        ("username", user.0),
        ("password", user.1),
    ];
    form.extend(scope.map(|s| ("scope", s)));
    let response = http
        .post(format!("{base}/o/token/"))
        .basic_auth(client.0, Some(client.1))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let json: Value = response.json().await.unwrap();
    json["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_prints_credentials_that_work_through_the_front_door() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(config(&database_url)).await.unwrap();
    let first = stack
        .first_run
        .clone()
        .expect("an empty database is a first start");
    let banner = tokengate::bootstrap::banner(
        stack.front_door,
        stack.authserver,
        stack.api,
        stack.proxy_admin,
        Some(&first),
    );
    assert!(banner.contains(&first.client_secret) && banner.contains(&first.admin_password));
    assert!(banner.contains(&format!("http://{}/users/", stack.front_door)));

    let http = reqwest::Client::new();
    let base = format!("http://{}", stack.front_door);
    let client = (first.client_id.as_str(), first.client_secret.as_str());
    let admin = (first.admin_username.as_str(), first.admin_password.as_str());
    let all = token(&http, &base, client, admin, None).await;
    let response = http
        .get(format!("{base}/users/"))
        .bearer_auth(&all)
        .send()
        .await
        .unwrap();
    let (status, text) = (response.status(), response.text().await.unwrap());
    assert_eq!(status, StatusCode::OK, "{text}");
    let users: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(users[0]["username"], "admin");
    let read = token(&http, &base, client, admin, Some("read")).await;
    let refused = http
        .get(format!("{base}/groups/"))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    // The demo application may not introspect; the resource-server one may.
    let refused = http
        .post(format!("{base}/o/token/"))
        .basic_auth(client.0, Some(client.1))
        .form(&[
            ("grant_type", "password"),
            ("username", admin.0),
            ("password", admin.1),
            ("scope", "introspection"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert!(banner.contains(&first.resource_server_secret));
    let rs: Value = http
        .post(format!("{base}/o/token/"))
        .basic_auth(
            &first.resource_server_id,
            Some(&first.resource_server_secret),
        )
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "introspection"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rs = rs["access_token"].as_str().unwrap().to_owned();
    let claims: Value = http
        .post(format!("{base}/o/introspect/"))
        .bearer_auth(&rs)
        .form(&[("token", &all)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(claims["active"], true);
    let metadata: Value = http
        .get(format!("{base}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["issuer"], "http://127.0.0.1:8000");
    let login = http
        .get(format!("{base}/accounts/login/"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    stack.shutdown().await;

    // A second start on the same database: no new credentials, the old ones still work, and
    // the proxy introspects with its freshly rotated secret.
    let stack = tokengate::start(config(&database_url)).await.unwrap();
    assert!(stack.first_run.is_none());
    let base = format!("http://{}", stack.front_door);
    let again = token(&http, &base, client, admin, None).await;
    assert_eq!(
        http.get(format!("{base}/users/"))
            .bearer_auth(&again)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
