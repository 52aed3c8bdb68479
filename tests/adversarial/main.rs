//! The standing adversarial suite (issue 8): the attacks tried on tokengate, kept as tests so they
//! stay closed. Every test runs against the real one-process stack (the Pingora proxy in front of
//! the authorization server and the example API, loopback ports, a fresh SQLite database).

#[path = "../common/mod.rs"]
mod common;
mod framing;
mod privilege;

use reqwest::StatusCode;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};

/// A running stack with the first start's administrator and demo client.
pub struct Harness {
    pub stack: tokengate::Stack,
    pub base: String,
    pub client: (String, String),
    pub admin: (String, String),
    dir: std::path::PathBuf,
}

impl Harness {
    /// The stack from the shipped config files, on fresh loopback ports and a fresh database.
    /// Only 127.0.0.1 is a trusted proxy, so a client bound to another loopback address (see
    /// [`client_from`]) is an ordinary remote client to the authorization server.
    pub async fn start() -> Harness {
        let dir = std::env::temp_dir().join(format!(
            "tg-adversarial-{}",
            authserver::secrets::random_client_id()
        ));
        let database_url = format!("sqlite://{}/authserver.db", dir.display());
        let config = common::stack_config(
            &database_url,
            &[
                ("AUTHSERVER_TRUSTED_PROXIES", "127.0.0.1/32"),
                ("EXAMPLE_API_PROXY_SECRET", framing::PROXY_SECRET),
            ],
        );
        let stack = tokengate::start(config).await.unwrap();
        let first = stack.first_run.clone().expect("a fresh database");
        Harness {
            base: format!("http://{}", stack.front_door),
            client: (first.client_id, first.client_secret),
            admin: (first.admin_username, first.admin_password),
            stack,
            dir,
        }
    }

    pub fn front_door(&self) -> SocketAddr {
        self.stack.front_door
    }

    /// An active, non-staff user with `password`.
    pub async fn ordinary_user(&self, username: &str, password: &str) -> i64 {
        self.stack
            .store
            .create_user(&authserver::store::NewUser {
                username: username.into(),
                password: Some(password.into()),
                is_active: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .id
    }

    /// The token endpoint's answer to a password grant with the demo client.
    pub async fn password_grant(
        &self,
        http: &reqwest::Client,
        user: (&str, &str),
        scope: Option<&str>,
    ) -> (StatusCode, Value) {
        let client = (self.client.0.as_str(), self.client.1.as_str());
        common::password_grant(http, &self.base, client, user, scope).await
    }

    /// An access token for the application `client` (client credentials grant).
    pub async fn client_token(&self, client: (&str, &str), scope: Option<&str>) -> String {
        common::client_credentials_token(&reqwest::Client::new(), &self.base, client, scope).await
    }

    /// An access token for `user` (password grant, demo client).
    pub async fn token(&self, user: (&str, &str), scope: Option<&str>) -> String {
        let (status, body) = self
            .password_grant(&reqwest::Client::new(), user, scope)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    pub async fn shutdown(self) {
        self.stack.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP client whose connections come from `ip` (any 127.x.y.z address works on Linux).
pub fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}
