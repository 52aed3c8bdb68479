//! Issue 24, black-box through the front door of the stack as shipped (cached answers live 1 h
//! while the revocation stream is healthy): warm a token through the proxy, end it in each way a
//! user can (RFC 7009 revocation of the access token, of its refresh token, a password reset,
//! deactivation, deletion, RP-initiated logout of the browser session the token came from), and
//! the proxy refuses it within 1 s. Prints the median and maximum. The password reset and the
//! deactivation are the store calls the operators' pages make (those pages need a browser
//! session), and so are the browser session and the code of the logout round (the sign-in and
//! consent pages are the authorization server's own tests'); the rest goes through the front
//! door.

mod common;

use authserver::store::{ApplicationInput, ClientType, GrantType, NewCode, Store};
use common::{password_grant, stack_config as config, token_request};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The relying party's registered redirect URI (never visited: the codes are the store's).
const RP_REDIRECT: &str = "https://rp.example/callback";

struct Door {
    http: reqwest::Client,
    base: String,
    admin_url: String,
    client: (String, String),
    admin_token: String,
}

impl Door {
    async fn status(&self, token: &str) -> StatusCode {
        self.http
            .get(format!("{}/users/", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// A new ordinary user and a token pair of theirs, warmed through the proxy.
    async fn user_with_tokens(&self, name: &str) -> (i64, String, String) {
        let response = self
            .http
            .post(format!("{}/users/", self.base))
            .bearer_auth(&self.admin_token)
            .form(&[("username", name), ("password", "pw-1-long-enough")])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let user: Value = response.json().await.unwrap();
        let client = (self.client.0.as_str(), self.client.1.as_str());
        let (status, body) = password_grant(
            &self.http,
            &self.base,
            client,
            (name, "pw-1-long-enough"),
            Some("read"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let access = body["access_token"].as_str().unwrap().to_owned();
        let refresh = body["refresh_token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for _ in 0..3 {
            assert_eq!(self.status(&access).await, StatusCode::OK);
        }
        (user["id"].as_i64().unwrap(), access, refresh)
    }

    /// A new browser session of user `user_id` (its cookie value), and the access and ID tokens
    /// of a code issued to the relying party `rp` in it, the access token warmed through the
    /// proxy.
    async fn session_tokens(
        &self,
        store: &Store,
        rp: &(String, String),
        user_id: i64,
    ) -> (String, String, String) {
        let session = store.create_session(user_id, 3600).await.unwrap();
        let key = store
            .find_session(&session.session_id)
            .await
            .unwrap()
            .unwrap()
            .key;
        let app = store
            .find_application_by_client_id(&rp.0)
            .await
            .unwrap()
            .unwrap();
        let code = store
            .issue_code(&NewCode {
                application_id: app.id,
                user_id,
                redirect_uri: RP_REDIRECT.into(),
                scope: "openid read".into(),
                code_challenge: None,
                lifetime: 60,
                nonce: None,
                auth_time: Some(authserver::store::now()),
                amr: None,
                resource: None,
                session_key: Some(key),
                dpop_jkt: None,
            })
            .await
            .unwrap();
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", RP_REDIRECT),
        ];
        let (status, body) = token_request(&self.http, &self.base, (&rp.0, &rp.1), &form).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let access = body["access_token"].as_str().unwrap().to_owned();
        for _ in 0..3 {
            assert_eq!(self.status(&access).await, StatusCode::OK);
        }
        let id_token = body["id_token"].as_str().unwrap().to_owned();
        (session.session_id, access, id_token)
    }

    /// RP-initiated logout of the browser session `session_id`, its ID token as the hint.
    async fn logout(&self, session_id: &str, id_token: &str) {
        let r = self
            .http
            .get(format!("{}/o/logout/", self.base))
            .query(&[("id_token_hint", id_token)])
            .header(
                reqwest::header::COOKIE,
                format!("tokengate_session={session_id}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.text().await.unwrap().contains(r#"id="logout-done""#));
    }

    async fn revoke(&self, token: &str, hint: &str) {
        let r = self
            .http
            .post(format!("{}/o/revoke_token/", self.base))
            .basic_auth(&self.client.0, Some(&self.client.1))
            .form(&[("token", token), ("token_type_hint", hint)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }

    async fn admin(&self, method: reqwest::Method, id: i64, body: &[(&str, &str)]) {
        let r = self
            .http
            .request(method, format!("{}/users/{id}/", self.base))
            .bearer_auth(&self.admin_token)
            .form(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }

    async fn readyz(&self) -> String {
        self.http
            .get(&self.admin_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// How long after `since` the proxy first refuses `token` (polled every 2 ms).
    async fn refused_after(&self, token: &str, since: Instant) -> Duration {
        loop {
            let status = self.status(token).await;
            if status == StatusCode::UNAUTHORIZED {
                return since.elapsed();
            }
            assert_eq!(status, StatusCode::OK);
            assert!(
                since.elapsed() < Duration::from_secs(5),
                "still served 5 s after its revocation"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_way_of_ending_a_token_reaches_the_front_door_within_a_second() {
    let dir = std::env::temp_dir().join(format!(
        "tg-revocation-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let config = config(&database_url, &[]);
    let lifetimes = config
        .proxy
        .gate
        .revocation
        .as_ref()
        .expect("the shipped proxy.yaml follows the revocation stream")
        .lifetimes;
    assert_eq!(lifetimes.healthy_max_ttl, Duration::from_secs(3600));
    let stack = tokengate::start(config).await.unwrap();
    let run = stack.first_run.clone().unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", stack.front_door);
    let client = (run.client_id.clone(), run.client_secret.clone());
    let (status, body) = password_grant(
        &http,
        &base,
        (&client.0, &client.1),
        (&run.admin_username, &run.admin_password),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let door = Door {
        http,
        base,
        admin_url: format!("http://{}/readyz", stack.proxy_admin),
        client,
        admin_token: body["access_token"].as_str().unwrap().to_owned(),
    };
    let started = Instant::now();
    while door.readyz().await != "ready\n" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the stream never became healthy: {}",
            door.readyz().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let rp_input = ApplicationInput {
        name: "relying party".into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: RP_REDIRECT.into(),
        allowed_scopes: vec!["openid".into(), "read".into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: false,
        token_format: None,
    };
    let (rp_app, rp_secret) = stack
        .store
        .create_application(&rp_input, None, None, None)
        .await
        .unwrap();
    let rp = (rp_app.client_id, rp_secret.unwrap());

    let mut latencies = Vec::new();
    for round in 0..3 {
        // RFC 7009: the access token.
        let (_, access, _) = door.user_with_tokens(&format!("a{round}")).await;
        let t = Instant::now();
        door.revoke(&access, "access_token").await;
        latencies.push(("revoke access token", door.refused_after(&access, t).await));
        // RFC 7009: its refresh token (the family).
        let (_, access, refresh) = door.user_with_tokens(&format!("r{round}")).await;
        let t = Instant::now();
        door.revoke(&refresh, "refresh_token").await;
        latencies.push(("revoke refresh token", door.refused_after(&access, t).await));
        // A password reset.
        let (id, access, _) = door.user_with_tokens(&format!("p{round}")).await;
        let t = Instant::now();
        assert!(
            stack
                .store
                .set_password(id, "pw-2-long-enough")
                .await
                .unwrap()
        );
        latencies.push(("password reset", door.refused_after(&access, t).await));
        // Deactivation.
        let (id, access, _) = door.user_with_tokens(&format!("d{round}")).await;
        let t = Instant::now();
        let update = authserver::store::UserUpdate {
            is_active: Some(false),
            ..Default::default()
        };
        assert!(
            stack
                .store
                .update_user(id, &update)
                .await
                .unwrap()
                .is_some()
        );
        latencies.push(("deactivation", door.refused_after(&access, t).await));
        // Deletion.
        let (id, access, _) = door.user_with_tokens(&format!("x{round}")).await;
        let t = Instant::now();
        door.admin(reqwest::Method::DELETE, id, &[]).await;
        latencies.push(("deletion", door.refused_after(&access, t).await));
        // RP-initiated logout: the tokens of that browser session end; the same user's token
        // from another session is still served.
        let (id, _, _) = door.user_with_tokens(&format!("l{round}")).await;
        let (session, access, id_token) = door.session_tokens(&stack.store, &rp, id).await;
        let (_, elsewhere, _) = door.session_tokens(&stack.store, &rp, id).await;
        let t = Instant::now();
        door.logout(&session, &id_token).await;
        latencies.push(("RP-initiated logout", door.refused_after(&access, t).await));
        assert_eq!(door.status(&elsewhere).await, StatusCode::OK);
    }
    // The revocation call itself is in the figure: from the moment it was sent.
    let mut all: Vec<Duration> = latencies.iter().map(|(_, d)| *d).collect();
    all.sort();
    let median = all[all.len() / 2];
    let max = *all.last().unwrap();
    for (way, d) in &latencies {
        eprintln!("{way}: {:.1} ms", d.as_secs_f64() * 1000.0);
    }
    eprintln!(
        "revocation through the front door, {} revocations: median {:.1} ms, max {:.1} ms",
        all.len(),
        median.as_secs_f64() * 1000.0,
        max.as_secs_f64() * 1000.0
    );
    assert!(max < Duration::from_secs(1), "{latencies:?}");
    assert_eq!(door.readyz().await, "ready\n");
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
