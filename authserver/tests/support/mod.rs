//! What several test binaries share: a server on a store, posted to with client credentials,
//! the tokens a refresh-grant client is issued, and the log lines written.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

pub mod binary;
pub mod browser;
pub mod code_flow;
pub mod front;

use authserver::config::Settings;
use authserver::store::{NewTokens, NewUser, Store};
use authserver::testing::{self, RunningServer};
use serde_json::Value;
use std::sync::OnceLock;
use test_support::LogBuffer;

/// An HTTP client that shows redirects instead of following them, as a browser test needs.
pub fn browser_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A new password-grant application on `store`: its id.
pub async fn password_application_id(store: &Store) -> i64 {
    let (client_id, _) =
        testing::application(store, authserver::store::GrantType::Password, false).await;
    store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap()
        .id
}

/// One authserver replica: a server on its own store (its own pools and client cache).
pub struct Replica {
    server: RunningServer,
    http: reqwest::Client,
}

impl Replica {
    pub async fn start(store: Store) -> Replica {
        let settings = Settings::for_tests("unused");
        let addr = "127.0.0.1:0".parse().unwrap();
        Replica {
            server: testing::spawn_server(store, settings, addr).await,
            http: reqwest::Client::new(),
        }
    }

    /// The JSON body of a `GET` of `path` that must answer 200.
    pub async fn get_json(&self, path: &str) -> Value {
        let reply = self
            .http
            .get(format!("{}{path}", self.server.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "GET {path}");
        reply.json().await.unwrap()
    }

    /// Stops the server and waits for it to end.
    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// A form posted with `client`'s credentials (HTTP Basic): the status and the JSON body.
    pub async fn post(
        &self,
        path: &str,
        client: &(String, String),
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        let reply = self
            .http
            .post(format!("{}{path}", self.server.base_url))
            .basic_auth(&client.0, Some(&client.1))
            .form(form)
            .send()
            .await
            .unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.unwrap_or(Value::Null))
    }
}

/// An access token for `user_id` of scope `read`, with a refresh token, continuing `family`.
pub fn new_tokens(app_id: i64, user_id: i64, family: Option<String>) -> NewTokens {
    NewTokens {
        cnf_x5t_s256: None,
        cnf_jkt: None,
        audience: None,
        application_id: app_id,
        user_id: Some(user_id),
        scope: "read".into(),
        access_lifetime: 600,
        refresh_lifetime: Some(3600),
        family,
    }
}

/// Every log line of this test binary, at INFO and above, once [`capture_logs`] has run.
static LOG: OnceLock<LogBuffer> = OnceLock::new();

/// Installs the global subscriber that writes into [`LOG`], once per test binary.
pub fn capture_logs() {
    LOG.get_or_init(|| {
        let log = LogBuffer::default();
        let writer = log.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .init();
        log
    });
}

/// What this test binary has logged so far.
pub fn logged() -> String {
    LOG.get().map(LogBuffer::text).unwrap_or_default()
}

/// A staff user (a superuser if `superuser`) who signs in with `password`.
pub async fn staff(store: &Store, username: &str, password: &str, superuser: bool) {
    let new = NewUser {
        username: username.into(),
        password: Some(password.into()),
        is_active: true,
        is_staff: true,
        is_superuser: superuser,
        ..Default::default()
    };
    store.create_user(&new).await.expect("create an operator");
}
