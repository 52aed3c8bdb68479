//! The authorization code grant with PKCE (issue 13) over real HTTP against the real server, on
//! SQLite and (with `DATABASE_URL`) PostgreSQL: sign-in of an ordinary user, consent, codes and
//! their exchange, every error row of the contract (`/work/notes/authcode-contract.md`), code
//! reuse and the revocation it triggers, remembered consent, the authorized-applications page,
//! staff-only operator views, the metadata, and per-application token formats.

mod support;

use authserver::config::{AccessTokenFormat, Settings};
use authserver::store::{ApplicationInput, ClientType, GrantType, NewUser};
use authserver::testing;
use reqwest::StatusCode;
use reqwest::header;
use serde_json::Value;
use std::collections::HashMap;
use support::code_flow::*;

/// Parameters to replace (None: leave out) in a well-formed authorization request.
type Changes = Vec<(&'static str, Option<&'static str>)>;

fn assert_invalid_grant(reply: &Reply, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "{what}: {}",
        reply.body
    );
    assert_eq!(
        reply.json()["error"],
        "invalid_grant",
        "{what}: {}",
        reply.body
    );
}

/// The whole flow for a confidential and a public client: the consent page names the
/// application and the scopes, allow redirects with code, state and iss, the exchange issues an
/// access and a refresh token that introspect, and the refresh token rotates.
#[tokio::test]
async fn a_user_authorizes_and_the_client_exchanges_the_code() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let cookie = f.alice().await;
        for client_type in [ClientType::Confidential, ClientType::Public] {
            let client = f.client(client_type, true, &["*"]).await;
            let (verifier, challenge) = pkce_pair();
            let page = f
                .ask(
                    &client,
                    "read write",
                    "xyz",
                    Some(&challenge),
                    Some(&cookie),
                )
                .await;
            assert_eq!(page.status, StatusCode::OK, "{backend:?}: {}", page.body);
            assert!(
                page.body.contains("Photo &#60;Printer&#62;"),
                "{}",
                page.body
            );
            assert!(page.body.contains("Read scope") && page.body.contains("Write scope"));
            assert!(
                page.body
                    .contains(r#"<form method="post" action="/o/authorize/" id="consent""#)
            );
            assert!(
                page.body.contains(
                    r#"<button type="submit" name="decision" value="allow">Allow</button>"#
                )
            );
            assert!(page.body.contains(r#"name="decision" value="deny""#));
            let fields: HashMap<String, String> =
                hidden_fields(&page.body, "consent").into_iter().collect();
            for (name, value) in [
                ("response_type", "code"),
                ("client_id", client.id.as_str()),
                ("redirect_uri", REDIRECT),
                ("scope", "read write"),
                ("state", "xyz"),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
            ] {
                assert_eq!(fields.get(name).map(String::as_str), Some(value), "{name}");
            }
            assert!(!fields["csrfmiddlewaretoken"].is_empty());
            // The consent form may lead to the client: its origin is in form-action.
            assert_form_action_allows_the_client(&page);

            let answer = f
                .decide(&cookie, &page, "allow")
                .await
                .redirected_to(REDIRECT);
            assert_eq!(answer["state"], "xyz");
            assert_eq!(answer["iss"], f.issuer);
            let code = &answer["code"];
            // Stored as a digest only.
            let raw: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM authorization_codes WHERE digest = $1")
                    .bind(code)
                    .fetch_one(f.store.pool())
                    .await
                    .unwrap();
            assert_eq!(raw, 0);

            let reply = f.exchange(&client, code, Some(&verifier)).await;
            assert_eq!(reply.status, StatusCode::OK, "{backend:?}: {}", reply.body);
            assert_eq!(reply.headers[header::CACHE_CONTROL], "no-store");
            let tokens = reply.json();
            assert_eq!(tokens["token_type"], "Bearer");
            assert_eq!(tokens["scope"], "read write");
            let access = tokens["access_token"].as_str().unwrap();
            let refresh = tokens["refresh_token"].as_str().unwrap();
            let record = f.store.find_token(access).await.unwrap().unwrap();
            assert!(record.is_active());
            assert_eq!(record.username.as_deref(), Some("alice"));
            assert_eq!(record.client_id, client.id);

            // The refresh token rotates within the same family.
            let rotated = f
                .token(
                    &client,
                    &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
                )
                .await;
            assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.body);
            let next = rotated.json()["access_token"].as_str().unwrap().to_owned();
            assert!(!f.active(access).await && f.active(&next).await);
            let next_record = f.store.find_token(&next).await.unwrap().unwrap();
            assert_eq!(next_record.family, record.family);
        }
    }
}

/// An unknown or missing client_id, and a missing or unregistered redirect_uri, are shown as a
/// 400 page and never redirected to (signed in or not).
#[tokio::test]
async fn bad_clients_and_redirect_uris_get_an_error_page_not_a_redirect() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Public, true, &["*"]).await;
        let (_, challenge) = pkce_pair();
        let cookie = f.alice().await;
        let cases = [
            ("unknown client", Some("no-such-client"), Some(REDIRECT)),
            ("missing client", None, Some(REDIRECT)),
            ("missing redirect_uri", Some(client.id.as_str()), None),
            (
                "prefix of a registered URI",
                Some(client.id.as_str()),
                Some("https://client.example/callbac"),
            ),
            (
                "registered URI extended",
                Some(client.id.as_str()),
                Some("https://client.example/callback/x"),
            ),
            (
                "other host",
                Some(client.id.as_str()),
                Some("https://evil.example/callback"),
            ),
            (
                "query differs",
                Some(client.id.as_str()),
                Some("http://127.0.0.1:9876/cb?x=2"),
            ),
        ];
        for (what, client_id, redirect_uri) in cases {
            let path = Fixture::authorize_path(&[
                ("response_type", Some("code")),
                ("client_id", client_id),
                ("redirect_uri", redirect_uri),
                ("state", Some("s")),
                ("code_challenge", Some(&challenge)),
                ("code_challenge_method", Some("S256")),
            ]);
            for session in [None, Some(cookie.as_str())] {
                let reply = f.get(&path, session).await;
                assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{what}");
                assert!(reply.headers.get(header::LOCATION).is_none(), "{what}");
                assert!(
                    reply.body.contains("Authorization request refused"),
                    "{what}"
                );
            }
        }
        // The other registered URI (with its own query) is matched exactly and kept.
        let path = Fixture::authorize_path(&[
            ("response_type", Some("code")),
            ("client_id", Some(&client.id)),
            ("redirect_uri", Some(OTHER_REDIRECT)),
            ("state", Some("s")),
            ("code_challenge", Some(&challenge)),
            ("code_challenge_method", Some("plain")),
        ]);
        let answer = f
            .get(&path, Some(&cookie))
            .await
            .redirected_to(OTHER_REDIRECT);
        assert_eq!(answer["error"], "invalid_request");
    }
}

/// RFC 8252 §7.3: a native app registered at `http://127.0.0.1/cb` listens on whatever port the
/// system gave it; any port is accepted there, the code goes back to that very URI and is bound
/// to it, and nothing else about the URI may change.
#[tokio::test]
async fn a_native_app_at_a_loopback_ip_may_use_any_port() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let cookie = f.alice().await;
        let client = f
            .register(&ApplicationInput {
                name: "Native CLI".into(),
                client_type: ClientType::Public,
                grant_type: GrantType::AuthorizationCode,
                redirect_uris: "http://127.0.0.1/cb http://localhost/cb".into(),
                allowed_scopes: vec!["read".into()],
                may_introspect: false,
                may_use_ssf: false,
                pkce_required: true,
                token_format: None,
            })
            .await;
        let (verifier, challenge) = pkce_pair();
        let ephemeral = "http://127.0.0.1:53124/cb";
        let ask = |redirect_uri: &str| {
            Fixture::request_to(&client.id, redirect_uri, "read", "st", Some(&challenge))
        };
        let page = f.get(&ask(ephemeral), Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let answer = f
            .decide(&cookie, &page, "allow")
            .await
            .redirected_to(ephemeral);
        let code = code_of(&answer);
        // The code is bound to the port it was issued for.
        let other_port = f
            .exchange_to(
                &client,
                &code,
                Some("http://127.0.0.1:53125/cb"),
                Some(&verifier),
            )
            .await;
        assert_invalid_grant(&other_port, "another port at the exchange");
        let page = f.get(&ask(ephemeral), Some(&cookie)).await;
        let code = code_of(
            &f.decide(&cookie, &page, "allow")
                .await
                .redirected_to(ephemeral),
        );
        let reply = f
            .exchange_to(&client, &code, Some(ephemeral), Some(&verifier))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert!(reply.json()["access_token"].is_string());
        for bad in [
            "http://127.0.0.1:53124/cb2",
            "http://127.0.0.1:53124/cb?x=1",
            "http://127.0.0.1:0/cb",
            "http://127.0.0.1:53124@evil.example/cb",
            "http://localhost:53124/cb",
        ] {
            let reply = f.get(&ask(bad), Some(&cookie)).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(reply.headers.get(header::LOCATION).is_none(), "{bad}");
        }
    }
}

/// Missing PKCE, `plain`, a malformed challenge, a bad response_type, a scope beyond the
/// application's and an unknown scope: redirected with error, error_description, state, iss.
#[tokio::test]
async fn other_authorization_errors_are_redirected_with_state() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let public = f.client(ClientType::Public, true, &["read"]).await;
        let confidential = f.client(ClientType::Confidential, true, &["read"]).await;
        let cookie = f.alice().await;
        let (_, challenge) = pkce_pair();
        let rows: Vec<(&str, Changes, &str)> = vec![
            (
                "no PKCE (public)",
                vec![("code_challenge", None), ("code_challenge_method", None)],
                "invalid_request",
            ),
            (
                "plain",
                vec![("code_challenge_method", Some("plain"))],
                "invalid_request",
            ),
            (
                "no method means plain",
                vec![("code_challenge_method", None)],
                "invalid_request",
            ),
            (
                "malformed challenge",
                vec![("code_challenge", Some("too-short"))],
                "invalid_request",
            ),
            (
                "response_type token",
                vec![("response_type", Some("token"))],
                "unsupported_response_type",
            ),
            (
                "no response_type",
                vec![("response_type", None)],
                "invalid_request",
            ),
            (
                "scope beyond the application's",
                vec![("scope", Some("read write"))],
                "invalid_scope",
            ),
            (
                "unknown scope",
                vec![("scope", Some("read nope"))],
                "invalid_scope",
            ),
        ];
        for client in [&public, &confidential] {
            for (what, changes, error) in &rows {
                let mut pairs: Vec<(&str, Option<&str>)> = vec![
                    ("response_type", Some("code")),
                    ("client_id", Some(&client.id)),
                    ("redirect_uri", Some(REDIRECT)),
                    ("scope", Some("read")),
                    ("state", Some("s t&ate")),
                    ("code_challenge", Some(&challenge)),
                    ("code_challenge_method", Some("S256")),
                ];
                for (name, value) in changes {
                    for pair in pairs.iter_mut().filter(|(n, _)| n == name) {
                        pair.1 = *value;
                    }
                }
                // Signed in or not: an invalid request never asks for a sign-in.
                for session in [Some(cookie.as_str()), None] {
                    let answer = f
                        .get(&Fixture::authorize_path(&pairs), session)
                        .await
                        .redirected_to(REDIRECT);
                    assert_eq!(answer["error"], *error, "{what}: {answer:?}");
                    assert!(!answer["error_description"].is_empty(), "{what}");
                    assert_eq!(answer["state"], "s t&ate", "{what}");
                    assert_eq!(answer["iss"], f.issuer, "{what}");
                    assert!(!answer.contains_key("code"), "{what}");
                }
            }
        }
        // An application of another grant may not use the endpoint.
        let input = ApplicationInput {
            name: "password app".into(),
            client_type: ClientType::Confidential,
            grant_type: GrantType::Password,
            redirect_uris: REDIRECT.into(),
            allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
            may_introspect: false,
            may_use_ssf: false,
            pkce_required: true,
            token_format: None,
        };
        let (app, _) = f
            .store
            .create_application(&input, None, None, None)
            .await
            .unwrap();
        let other = Client {
            id: app.client_id,
            secret: None,
            app_id: app.id,
        };
        let answer = f
            .ask(&other, "read", "s", Some(&challenge), Some(&cookie))
            .await
            .redirected_to(REDIRECT);
        assert_eq!(answer["error"], "unauthorized_client");
    }
}

/// Anonymous: 303 to the sign-in page with the request as `next`; signing in answers 303 to it.
#[tokio::test]
async fn sign_in_comes_back_to_the_authorization_request() {
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let client = f.client(ClientType::Public, true, &["*"]).await;
    let (_, challenge) = pkce_pair();
    let request = Fixture::request(&client, "read", "s", Some(&challenge));
    let reply = f.get(&request, None).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let login = reply.location();
    let next = login
        .strip_prefix("/accounts/login/?next=")
        .unwrap_or_else(|| panic!("{login}"));
    let next: String = form_urlencoded::parse(format!("n={next}").as_bytes())
        .next()
        .unwrap()
        .1
        .into_owned();
    assert_eq!(next, request);
    // The sign-in page may end in a redirect to the client: form-action allows its origin.
    let page = f.get(login, None).await;
    assert_form_action_allows_the_client(&page);
    let (cookie, signed_in) = f.sign_in("alice", PASSWORD, &next).await;
    assert_eq!(signed_in.location(), request);
    assert_eq!(f.get(&request, Some(&cookie)).await.status, StatusCode::OK);
}

/// Deny: access_denied with the state, no code, and nothing remembered.
#[tokio::test]
async fn deny_redirects_access_denied_with_state() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Public, true, &["*"]).await;
        let cookie = f.alice().await;
        let (_, challenge) = pkce_pair();
        let request = Fixture::request(&client, "read", "deny-state", Some(&challenge));
        let page = f.get(&request, Some(&cookie)).await;
        let answer = f
            .decide(&cookie, &page, "deny")
            .await
            .redirected_to(REDIRECT);
        assert_eq!(answer["error"], "access_denied");
        assert_eq!(answer["state"], "deny-state");
        assert_eq!(answer["iss"], f.issuer);
        assert!(!answer.contains_key("code"));
        assert_eq!(f.get(&request, Some(&cookie)).await.status, StatusCode::OK);
    }
}

/// The consent POST without its CSRF token (or with another session's) is 403 and issues no
/// code; so is the revoke POST of the authorized applications.
#[tokio::test]
async fn consent_and_revocation_posts_need_their_csrf_token() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Public, true, &["*"]).await;
        let cookie = f.alice().await;
        let (_, challenge) = pkce_pair();
        let page = f
            .ask(&client, "read", "s", Some(&challenge), Some(&cookie))
            .await;
        let fields = hidden_fields(&page.body, "consent");
        let mut forged: Vec<(String, String)> = fields
            .iter()
            .filter(|(k, _)| k != "csrfmiddlewaretoken")
            .cloned()
            .collect();
        forged.push(("decision".into(), "allow".into()));
        let reply = f.post("/o/authorize/", Some(&cookie), &forged).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN);
        assert!(reply.headers.get(header::LOCATION).is_none());
        forged.push((
            "csrfmiddlewaretoken".into(),
            authserver::secrets::random_token(),
        ));
        assert_eq!(
            f.post("/o/authorize/", Some(&cookie), &forged).await.status,
            StatusCode::FORBIDDEN
        );
        // Nothing was remembered or issued.
        let alice = f.user_id("alice").await;
        assert!(
            f.store
                .consent(alice, client.app_id)
                .await
                .unwrap()
                .is_none()
        );
        let codes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM authorization_codes")
            .fetch_one(f.store.pool())
            .await
            .unwrap();
        assert_eq!(codes, 0);
        // Anonymous: no decision at all, sent to sign in.
        let mut with_token = fields.clone();
        with_token.push(("decision".into(), "allow".into()));
        let reply = f.post("/o/authorize/", None, &with_token).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        assert!(reply.location().starts_with("/accounts/login/"));

        let _ = f.code(&cookie, &client, "read", Some(&challenge)).await;
        let revoke = format!("/o/authorized-tokens/{}/delete/", client.app_id);
        let reply = f.post(&revoke, Some(&cookie), &[]).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN);
        let list = f.get("/o/authorized-tokens/", Some(&cookie)).await;
        assert!(list.body.contains("Photo &#60;Printer&#62;"));
    }
}

/// Every refusal at the token endpoint is invalid_grant: wrong verifier, missing verifier, a
/// verifier for a code without challenge, another client's code, another redirect_uri, an
/// expired code, an unknown code.
#[tokio::test]
async fn bad_exchanges_are_invalid_grant() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let other = f.client(ClientType::Confidential, true, &["*"]).await;
        let public = f.client(ClientType::Public, true, &["*"]).await;
        let cookie = f.alice().await;

        let (verifier, challenge) = pkce_pair();
        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        let (wrong, _) = pkce_pair();
        assert_invalid_grant(
            &f.exchange(&client, &code, Some(&wrong)).await,
            "wrong verifier",
        );
        // The code was spent by that attempt: the right verifier is too late.
        assert_invalid_grant(&f.exchange(&client, &code, Some(&verifier)).await, "spent");

        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        assert_invalid_grant(&f.exchange(&client, &code, None).await, "no verifier");

        for (someone, what) in [(&other, "other client"), (&public, "public client")] {
            let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
            assert_invalid_grant(&f.exchange(someone, &code, Some(&verifier)).await, what);
        }

        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        let reply = f
            .exchange_to(&client, &code, Some(OTHER_REDIRECT), Some(&verifier))
            .await;
        assert_invalid_grant(&reply, "another registered redirect_uri");

        assert_invalid_grant(
            &f.exchange(&client, "no-such-code", Some(&verifier)).await,
            "unknown",
        );
        // Without redirect_uri: invalid_request.
        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        let reply = f.exchange_to(&client, &code, None, Some(&verifier)).await;
        assert_eq!(reply.json()["error"], "invalid_request");
        // A client of another grant: unauthorized_client.
        let (pw_id, pw_secret) = testing::application(&f.store, GrantType::Password, false).await;
        let password_client = Client {
            id: pw_id,
            secret: Some(pw_secret),
            app_id: 0,
        };
        let reply = f.exchange(&password_client, &code, Some(&verifier)).await;
        assert_eq!(reply.json()["error"], "unauthorized_client");
        // A wrong secret: invalid_client.
        let forged = Client {
            id: client.id.clone(),
            secret: Some("nope".into()),
            app_id: 0,
        };
        assert_eq!(
            f.exchange(&forged, &code, Some(&verifier)).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    // Expired: a server whose codes live 0 s (the clock is not waited for).
    let f = Fixture::start(testing::store().await, |s| {
        s.authorization_code_lifetime = 0
    })
    .await;
    let client = f.client(ClientType::Public, true, &["*"]).await;
    let cookie = f.alice().await;
    let (verifier, challenge) = pkce_pair();
    let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
    assert_invalid_grant(
        &f.exchange(&client, &code, Some(&verifier)).await,
        "expired",
    );
}

/// The default lifetime is 60 s: a code is accepted well within it.
#[tokio::test]
async fn codes_live_sixty_seconds_by_default() {
    assert_eq!(Settings::for_tests("x").authorization_code_lifetime, 60);
    assert_eq!(
        Settings::from_yaml("", "x.yaml")
            .unwrap()
            .authorization_code_lifetime,
        60
    );
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let client = f.client(ClientType::Public, true, &["*"]).await;
    let cookie = f.alice().await;
    let (verifier, challenge) = pkce_pair();
    let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
    let expires: i64 =
        sqlx::query_scalar("SELECT expires_at - created_at FROM authorization_codes")
            .fetch_one(f.store.pool())
            .await
            .unwrap();
    assert_eq!(expires, 60);
    assert_eq!(
        f.exchange(&client, &code, Some(&verifier)).await.status,
        StatusCode::OK
    );
}

/// A second use of a code is invalid_grant and revokes the access and refresh tokens the first
/// exchange issued, and those issued from them by refreshing.
#[tokio::test]
async fn code_reuse_revokes_every_token_issued_from_it() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let cookie = f.alice().await;
        let (verifier, challenge) = pkce_pair();
        let code = f
            .code(&cookie, &client, "read write", Some(&challenge))
            .await;
        let first = f.exchange(&client, &code, Some(&verifier)).await.json();
        let access = first["access_token"].as_str().unwrap();
        let refresh = first["refresh_token"].as_str().unwrap();
        let rotated = f
            .token(
                &client,
                &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
            )
            .await
            .json();
        let rotated_access = rotated["access_token"].as_str().unwrap();
        let rotated_refresh = rotated["refresh_token"].as_str().unwrap();
        assert!(f.active(rotated_access).await && f.active(rotated_refresh).await);
        // An unrelated grant of the same user stays.
        let (other_verifier, other_challenge) = pkce_pair();
        let other_code = f
            .code(&cookie, &client, "read", Some(&other_challenge))
            .await;
        let other = f
            .exchange(&client, &other_code, Some(&other_verifier))
            .await
            .json();

        assert_invalid_grant(&f.exchange(&client, &code, Some(&verifier)).await, "reuse");
        for token in [access, refresh, rotated_access, rotated_refresh] {
            assert!(
                !f.active(token).await,
                "{backend:?}: a token of the reused code lives"
            );
        }
        let reply = f
            .token(
                &client,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", rotated_refresh),
                ],
            )
            .await;
        assert_invalid_grant(&reply, "refresh after reuse");
        assert!(f.active(other["access_token"].as_str().unwrap()).await);
        // Introspection agrees.
        let (rs_id, rs_secret) =
            testing::application(&f.store, GrantType::ClientCredentials, true).await;
        let reply = f
            .send(
                f.http
                    .post(f.url("/o/introspect/"))
                    .basic_auth(&rs_id, Some(&rs_secret))
                    .form(&[("token", access)]),
                None,
            )
            .await;
        assert_eq!(reply.json()["active"], false);
    }
}

/// Consent is remembered per user and application: the same or fewer scopes skip the page,
/// wider ones show it again (for the new set); another user is asked.
#[tokio::test]
async fn consent_is_remembered_for_the_same_or_fewer_scopes() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Public, true, &["*"]).await;
        let cookie = f.alice().await;
        let (_, challenge) = pkce_pair();
        let _ = f
            .code(&cookie, &client, "read write", Some(&challenge))
            .await;
        for fewer in ["read", "write read", "read write"] {
            let reply = f
                .ask(&client, fewer, "s2", Some(&challenge), Some(&cookie))
                .await;
            let answer = reply.redirected_to(REDIRECT);
            assert!(answer.contains_key("code"), "{fewer}");
            assert_eq!(answer["state"], "s2");
        }
        let wider = f
            .ask(
                &client,
                "read groups",
                "s3",
                Some(&challenge),
                Some(&cookie),
            )
            .await;
        assert_eq!(wider.status, StatusCode::OK, "wider scopes ask again");
        assert!(wider.body.contains("Access to your groups"));
        let _ = f
            .decide(&cookie, &wider, "allow")
            .await
            .redirected_to(REDIRECT);
        // Now all three are remembered.
        let reply = f
            .ask(
                &client,
                "groups write",
                "s4",
                Some(&challenge),
                Some(&cookie),
            )
            .await;
        assert!(reply.redirected_to(REDIRECT).contains_key("code"));
        // Another user has consented to nothing.
        testing::user(&f.store, "bob", "builder-pass").await;
        let (bob, _) = f.sign_in("bob", "builder-pass", "").await;
        let reply = f
            .ask(&client, "read", "s5", Some(&challenge), Some(&bob))
            .await;
        assert_eq!(reply.status, StatusCode::OK);
    }
}

/// The authorized applications page lists what the user authorized; revoking ends the consent
/// and kills every token the application holds for the user (not other users' tokens).
#[tokio::test]
async fn revoking_an_authorized_application_kills_its_tokens() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Public, true, &["*"]).await;
        let untouched = f.client(ClientType::Confidential, true, &["*"]).await;
        let cookie = f.alice().await;
        let empty = f.get("/o/authorized-tokens/", Some(&cookie)).await;
        assert!(
            empty
                .body
                .contains("You have not authorized any application.")
        );

        let (verifier, challenge) = pkce_pair();
        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        let tokens = f.exchange(&client, &code, Some(&verifier)).await.json();
        // A code issued but not yet exchanged dies too.
        let pending = f.code(&cookie, &client, "read", Some(&challenge)).await;
        let code = f.code(&cookie, &untouched, "read", Some(&challenge)).await;
        let kept = f.exchange(&untouched, &code, Some(&verifier)).await.json();
        testing::user(&f.store, "bob", "builder-pass").await;
        let (bob, _) = f.sign_in("bob", "builder-pass", "").await;
        let code = f.code(&bob, &client, "read", Some(&challenge)).await;
        let bobs = f.exchange(&client, &code, Some(&verifier)).await.json();

        let page = f.get("/o/authorized-tokens/", Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK);
        let revoke = format!("/o/authorized-tokens/{}/delete/", client.app_id);
        assert!(
            page.body.contains(&format!("action=\"{revoke}\"")),
            "{}",
            page.body
        );
        let csrf = input_value(&page.body, "csrfmiddlewaretoken");
        let reply = f
            .post(
                &revoke,
                Some(&cookie),
                &[("csrfmiddlewaretoken".into(), csrf)],
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        // Back to the list, with the one-time notice that confirms the revoke.
        assert!(
            reply.location().starts_with("/o/authorized-tokens/?flash="),
            "{}",
            reply.location()
        );

        for token in ["access_token", "refresh_token"] {
            assert!(
                !f.active(tokens[token].as_str().unwrap()).await,
                "{backend:?} {token}"
            );
            assert!(
                f.active(kept[token].as_str().unwrap()).await,
                "{backend:?} {token}"
            );
            assert!(
                f.active(bobs[token].as_str().unwrap()).await,
                "{backend:?} {token}"
            );
        }
        assert_invalid_grant(
            &f.exchange(&client, &pending, Some(&verifier)).await,
            "pending",
        );
        let after = f.get("/o/authorized-tokens/", Some(&cookie)).await;
        assert!(!after.body.contains(&revoke));
        // The consent is gone: the page is shown again.
        let again = f
            .ask(&client, "read", "s", Some(&challenge), Some(&cookie))
            .await;
        assert_eq!(again.status, StatusCode::OK);
    }
}

/// A confidential client that opted out of PKCE may leave it out (and then may not send a
/// verifier); a public client cannot opt out.
#[tokio::test]
async fn a_confidential_client_may_opt_out_of_pkce() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, false, &["*"]).await;
        let cookie = f.alice().await;
        let code = f.code(&cookie, &client, "read", None).await;
        let reply = f.exchange(&client, &code, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let code = f.code(&cookie, &client, "read", None).await;
        let (verifier, challenge) = pkce_pair();
        assert_invalid_grant(
            &f.exchange(&client, &code, Some(&verifier)).await,
            "verifier without challenge",
        );
        // PKCE still works, and is then checked.
        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        assert_invalid_grant(
            &f.exchange(&client, &code, None).await,
            "challenge without verifier",
        );
        let code = f.code(&cookie, &client, "read", Some(&challenge)).await;
        assert_eq!(
            f.exchange(&client, &code, Some(&verifier)).await.status,
            StatusCode::OK
        );
        // `plain` is refused even here.
        let path = Fixture::authorize_path(&[
            ("response_type", Some("code")),
            ("client_id", Some(&client.id)),
            ("redirect_uri", Some(REDIRECT)),
            ("code_challenge", Some(&challenge)),
            ("code_challenge_method", Some("plain")),
        ]);
        let answer = f.get(&path, Some(&cookie)).await.redirected_to(REDIRECT);
        assert_eq!(answer["error"], "invalid_request");
        // A public client registered with pkce_required false must still send it.
        let public = f.client(ClientType::Public, false, &["*"]).await;
        let answer = f
            .ask(&public, "read", "s", None, Some(&cookie))
            .await
            .redirected_to(REDIRECT);
        assert_eq!(answer["error"], "invalid_request");
    }
}

/// Ordinary users sign in, but every operator view answers them 403 (GET and POST); anonymous
/// visitors are sent to sign in.
#[tokio::test]
async fn operator_views_are_staff_only() {
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let client = f.client(ClientType::Public, true, &["*"]).await;
    let cookie = f.alice().await;
    let id = client.app_id;
    let pages = [
        "/o/applications/".to_owned(),
        "/o/applications/register/".to_owned(),
        format!("/o/applications/{id}/"),
        format!("/o/applications/{id}/update/"),
        format!("/o/applications/{id}/delete/"),
        format!("/o/applications/{id}/regenerate-secret/"),
        "/admin/".to_owned(),
        "/admin/users/".to_owned(),
        "/admin/users/add/".to_owned(),
        "/admin/users/1/".to_owned(),
        "/admin/users/1/password/".to_owned(),
        "/admin/users/1/delete/".to_owned(),
        "/admin/groups/".to_owned(),
    ];
    for page in &pages {
        assert_eq!(
            f.get(page, Some(&cookie)).await.status,
            StatusCode::FORBIDDEN,
            "{page}"
        );
        let anonymous = f.get(page, None).await;
        assert_eq!(anonymous.status, StatusCode::SEE_OTHER, "{page}");
        assert!(
            anonymous.location().starts_with("/accounts/login/"),
            "{page}"
        );
    }
    let posts = [
        "/o/applications/register/".to_owned(),
        format!("/o/applications/{id}/update/"),
        format!("/o/applications/{id}/delete/"),
        format!("/o/applications/{id}/regenerate-secret/"),
        "/admin/users/add/".to_owned(),
        "/admin/users/1/".to_owned(),
        "/admin/users/1/password/".to_owned(),
        "/admin/users/1/delete/".to_owned(),
        "/admin/groups/".to_owned(),
        "/admin/groups/1/".to_owned(),
        "/admin/groups/1/members/add/".to_owned(),
        "/admin/groups/1/members/1/remove/".to_owned(),
        "/admin/groups/1/delete/".to_owned(),
    ];
    for post in &posts {
        let reply = f
            .post(post, Some(&cookie), &[("name".into(), "x".into())])
            .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{post}");
    }
    assert!(f.store.get_application(id).await.unwrap().is_some());
    // Their own page works, and the header does not offer the operator views.
    let own = f.get("/o/authorized-tokens/", Some(&cookie)).await;
    assert_eq!(own.status, StatusCode::OK);
    assert!(!own.body.contains("href=\"/o/applications/\">Applications"));
    // A deactivated user's session ends.
    let alice = f.user_id("alice").await;
    f.store
        .update_user(
            alice,
            &authserver::store::UserUpdate {
                is_active: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let reply = f.get("/o/authorized-tokens/", Some(&cookie)).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
}

/// RFC 8414: the endpoint, the grant, the response type, S256 only, and RFC 9207's flag.
#[tokio::test]
async fn metadata_announces_the_code_flow() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let metadata = f
        .get("/.well-known/oauth-authorization-server", None)
        .await
        .json();
    assert_eq!(
        metadata["authorization_endpoint"],
        format!("{}/o/authorize/", f.issuer)
    );
    let grants = metadata["grant_types_supported"].as_array().unwrap();
    for grant in [
        "authorization_code",
        "password",
        "refresh_token",
        "client_credentials",
    ] {
        assert!(grants.contains(&Value::from(grant)), "{grant}");
    }
    assert_eq!(
        metadata["response_types_supported"],
        serde_json::json!(["code"])
    );
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    assert_eq!(
        metadata["authorization_response_iss_parameter_supported"],
        true
    );
    assert_eq!(metadata["issuer"], f.issuer);
}

/// Per-application token formats: a JWT application on an opaque server gets JWTs from the
/// code flow (and its key is in the JWKS from the start), an opaque one on the same server
/// opaque tokens; an application without a format follows the server's setting.
#[tokio::test]
async fn each_application_has_its_token_format() {
    for store in testing::all_stores().await {
        let probe = Fixture::start(store.clone(), |_| {}).await;
        let jwt = probe
            .client_with(
                ClientType::Public,
                true,
                &["*"],
                Some(AccessTokenFormat::Jwt),
            )
            .await;
        let opaque = probe
            .client_with(
                ClientType::Public,
                true,
                &["*"],
                Some(AccessTokenFormat::Opaque),
            )
            .await;
        let inherits = probe.client(ClientType::Public, true, &["*"]).await;
        probe.server.stop().await;
        // The server starts after the JWT application exists: the key is made at start.
        let f = Fixture::start_again(probe.store, |_| {}).await;
        let keys = f.get("/.well-known/jwks.json", None).await.json();
        assert_eq!(keys["keys"].as_array().unwrap().len(), 1, "{keys}");
        let cookie = f.alice().await;
        let (verifier, challenge) = pkce_pair();
        let mut issued = Vec::new();
        for client in [&jwt, &opaque, &inherits] {
            let code = f.code(&cookie, client, "read", Some(&challenge)).await;
            let tokens = f.exchange(client, &code, Some(&verifier)).await.json();
            issued.push(tokens["access_token"].as_str().unwrap().to_owned());
            assert!(!tokens["refresh_token"].as_str().unwrap().contains('.'));
        }
        assert_eq!(issued[0].split('.').count(), 3, "a JWT: {}", issued[0]);
        assert!(!issued[1].contains('.') && !issued[2].contains('.'));
        f.server.stop().await;
        // With the server's default JWT, the application without a format follows it; the
        // opaque one keeps its own.
        let f =
            Fixture::start_again(f.store, |s| s.access_token_format = AccessTokenFormat::Jwt).await;
        let cookie = f.alice().await;
        for (client, is_jwt) in [(&opaque, false), (&inherits, true)] {
            let code = f.code(&cookie, client, "read", Some(&challenge)).await;
            let tokens = f.exchange(client, &code, Some(&verifier)).await.json();
            let access = tokens["access_token"].as_str().unwrap();
            assert_eq!(access.split('.').count() == 3, is_jwt, "{access}");
        }
    }
}

/// The application views take the redirect URIs (one per line, refused with the field's
/// message when not https or loopback http, or with a fragment), the PKCE opt-out and the
/// token format; a JWT application gets its signing key at registration.
#[tokio::test]
async fn the_views_register_redirect_uris_pkce_and_token_format() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let staff = NewUser {
            username: "olivia".into(),
            password: Some("operator-pass".into()),
            is_active: true,
            is_staff: true,
            ..Default::default()
        };
        f.store.create_user(&staff).await.unwrap();
        let (cookie, _) = f.sign_in("olivia", "operator-pass", "").await;
        let page = f.get("/o/applications/register/", Some(&cookie)).await;
        assert!(page.body.contains("name=\"pkce_optional\""));
        assert!(
            page.body
                .contains("<select id=\"token_format\" name=\"token_format\"")
        );
        let csrf = csrf_token(&page.body);
        let form = |uris: &str, client_type: &str| -> Vec<(String, String)> {
            [
                ("csrf_token", csrf.as_str()),
                ("name", "Web"),
                ("client_type", client_type),
                ("grant_type", "authorization-code"),
                ("redirect_uris", uris),
                ("pkce_optional", "on"),
                ("token_format", "jwt"),
                // Every declared scope (openid among them), ticked explicitly.
                ("scope", "*"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .to_vec()
        };
        for (uris, client_type, field, message) in [
            (
                "http://web.example/cb",
                "confidential",
                "redirect_uris",
                "uses http to a host that is not loopback",
            ),
            (
                "https://web.example/cb#x",
                "confidential",
                "redirect_uris",
                "has a fragment",
            ),
            (
                "https://web.example/cb",
                "public",
                "pkce_optional",
                "Public clients must always use PKCE",
            ),
        ] {
            let reply = f
                .post(
                    "/o/applications/register/",
                    Some(&cookie),
                    &form(uris, client_type),
                )
                .await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{uris}");
            assert!(
                reply.body.contains(&format!("id=\"{field}-error\"")),
                "{uris}"
            );
            assert!(reply.body.contains(message), "{uris}");
        }
        let keys = f.get("/.well-known/jwks.json", None).await.json();
        assert!(keys["keys"].as_array().unwrap().is_empty());
        let reply = f
            .post(
                "/o/applications/register/",
                Some(&cookie),
                &form(
                    "https://web.example/cb\r\nhttp://[::1]:8080/cb",
                    "confidential",
                ),
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        let apps = f.store.list_applications(None).await.unwrap();
        let app = apps.last().unwrap();
        assert_eq!(
            app.redirect_uris,
            "https://web.example/cb http://[::1]:8080/cb"
        );
        assert!(!app.pkce_required);
        assert_eq!(app.token_format, Some(AccessTokenFormat::Jwt));
        let detail = f.get(reply.location(), Some(&cookie)).await;
        assert!(
            detail
                .body
                .contains("optional (this confidential client opted out)")
        );
        assert!(detail.body.contains("JWT (RFC 9068"));
        // The keys are published before the application's first token: the JWT access tokens'
        // (EdDSA) and, since the client may ask for `openid`, its ID tokens' (RS256).
        let keys = f.get("/.well-known/jwks.json", None).await.json();
        let mut algs: Vec<&str> = keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["alg"].as_str().unwrap())
            .collect();
        algs.sort();
        assert_eq!(algs, ["EdDSA", "RS256"], "{keys}");
        // The edit form shows the stored choices.
        let edit = f
            .get(
                &format!("/o/applications/{}/update/", app.id),
                Some(&cookie),
            )
            .await;
        assert!(edit.body.contains("id=\"pkce_optional\" checked"));
        assert!(edit.body.contains("<option value=\"jwt\" selected>"));
    }
}

/// RFC 8707 on the code flow: the resource named at the authorization request is the audience
/// of the code's tokens and bounds their scope; the exchange may only narrow it (a wider one
/// is `invalid_target`), and an unknown resource goes back to the client as `invalid_target`.
#[tokio::test]
async fn the_code_carries_the_resource_it_was_granted_for() {
    use authserver::store::ResourceInput;
    const ORDERS: &str = "https://orders.example/";
    for store in testing::all_stores().await {
        for (identifier, scope) in [
            (ORDERS, "orders:read"),
            ("https://billing.example/", "billing:read"),
        ] {
            store
                .create_resource(&ResourceInput {
                    identifier: identifier.into(),
                    name: "Orders <API>".into(),
                    scopes: vec![scope.into()],
                    token_format: None,
                    access_token_lifetime: None,
                })
                .await
                .unwrap();
        }
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let alice = f.alice().await;
        let ask = |resource: &'static str, challenge: String| {
            Fixture::authorize_path(&[
                ("response_type", Some("code")),
                ("client_id", Some(client.id.as_str())),
                ("redirect_uri", Some(REDIRECT)),
                ("scope", Some("orders:read")),
                ("state", Some("st")),
                ("code_challenge", Some(challenge.leak())),
                ("code_challenge_method", Some("S256")),
                ("resource", Some(resource)),
            ])
        };
        let mut codes = Vec::new();
        for round in 0..2 {
            let (verifier, challenge) = pkce_pair();
            let page = f.get(&ask(ORDERS, challenge), Some(&alice)).await;
            let reply = if round == 0 {
                assert_eq!(page.status, StatusCode::OK, "{}", page.location());
                // The consent page names the API, and its form carries the resource on.
                assert!(page.body.contains("At Orders &"), "{}", page.body);
                assert!(
                    hidden_fields(&page.body, "consent")
                        .iter()
                        .any(|(k, v)| k == "resource" && v == ORDERS),
                    "{}",
                    page.body
                );
                f.decide(&alice, &page, "allow").await
            } else {
                // The consent is remembered.
                page
            };
            codes.push((code_of(&reply.redirected_to(REDIRECT)), verifier));
        }
        // Exchanged as granted: the resource is the audience.
        let reply = f.exchange(&client, &codes[0].0, Some(&codes[0].1)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let access = reply.json()["access_token"].as_str().unwrap().to_owned();
        let record = f.store.find_token(&access).await.unwrap().unwrap();
        assert_eq!(record.audience.as_deref(), Some(ORDERS));
        assert_eq!(reply.json()["scope"], "orders:read");
        // Exchanged for another resource: refused.
        let (code, verifier) = &codes[1];
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier.as_str()),
            ("resource", "https://billing.example/"),
        ];
        let reply = f.token(&client, &form).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
        assert_eq!(reply.json()["error"], "invalid_target");
        // An unknown resource goes back to the client.
        let (_, challenge) = pkce_pair();
        let reply = f
            .get(&ask("https://unknown.example/", challenge), Some(&alice))
            .await;
        let answer = reply.redirected_to(REDIRECT);
        assert_eq!(
            answer.get("error").map(String::as_str),
            Some("invalid_target")
        );
    }
}
