//! End-to-end tests of the browser views in a real Chromium (driven by playwright-core from
//! the workspace's `tests/browser/views.mjs` and `authorize.mjs`) against the real server on a
//! loopback port.
//!
//! Needs Debian's `chromium` (at `/usr/bin/chromium`, or `$CHROMIUM`), `node`, and `npm ci`
//! run in `tests/browser/` at the workspace root. Without them the tests print a skip notice,
//! or fail with that message when `CI` is set.

mod support;

use authserver::config::Settings;
use authserver::store::{GrantType, Store};
use authserver::testing;
use serde_json::Value;
use std::process::Command;
use support::browser::{browser_available, run_scenario, run_script, screenshot_dir};
use support::staff;
use test_support::free_port;

async fn start(store: Store) -> testing::RunningServer {
    let mut settings = Settings::for_tests("unused");
    // The issuer is http here, so the session cookie has no Secure flag and works on 127.0.0.1.
    settings.issuer = "http://127.0.0.1".into();
    let server = testing::spawn_server(store, settings, "127.0.0.1:0".parse().unwrap()).await;
    // Ready when the health endpoint answers; no sleeps.
    let client = reqwest::Client::new();
    for _ in 0..100 {
        if client
            .get(format!("{}/healthz", server.base_url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return server;
        }
        tokio::task::yield_now().await;
    }
    panic!("the server did not become healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_registers_uses_updates_and_deletes_an_application_in_a_browser() {
    if !browser_available(
        "an_operator_registers_uses_updates_and_deletes_an_application_in_a_browser",
    ) {
        return;
    }
    let store = testing::sqlite_store().await;
    // A superuser: the scenario ticks "May introspect tokens", which only superusers see.
    staff(&store, "operator", "operator-password", true).await;
    testing::user(&store, "alice", "wonderland").await;
    let server = start(store.clone()).await;
    let summary = run_scenario(
        "applications",
        server.base_url.clone(),
        vec![
            ("OPERATOR", "operator".into()),
            ("OPERATOR_PASSWORD", "operator-password".into()),
            ("RESOURCE_OWNER", "alice".into()),
            ("RESOURCE_OWNER_PASSWORD", "wonderland".into()),
        ],
    )
    .await;
    let client_id = summary["client_id"].as_str().expect("client id");
    assert!(
        store
            .find_application_by_client_id(client_id)
            .await
            .unwrap()
            .is_none(),
        "the application is gone"
    );
    // Deleting the application took its tokens along.
    assert!(
        store
            .find_token(summary["access_token"].as_str().unwrap())
            .await
            .unwrap()
            .is_none()
    );
    for shot in [
        "application-registered.png",
        "applications-list.png",
        "applications-list-phone.png",
    ] {
        assert!(screenshot_dir().join(shot).exists(), "{shot}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superuser_creates_a_user_and_a_group_who_then_gets_a_token() {
    if !browser_available("a_superuser_creates_a_user_and_a_group_who_then_gets_a_token") {
        return;
    }
    let store = testing::sqlite_store().await;
    staff(&store, "root", "root-password", true).await;
    let (client_id, secret) = testing::application(&store, GrantType::Password, false).await;
    let server = start(store.clone()).await;
    let summary = run_scenario(
        "admin",
        server.base_url.clone(),
        vec![
            ("SUPERUSER", "root".into()),
            ("SUPERUSER_PASSWORD", "root-password".into()),
            ("CLIENT_ID", client_id),
            ("CLIENT_SECRET", secret),
        ],
    )
    .await;
    let carol = store
        .find_user_by_username("carol")
        .await
        .unwrap()
        .expect("carol was created");
    assert_eq!(
        (carol.email.as_str(), carol.is_active, carol.is_staff),
        ("carol@example.org", true, false)
    );
    let groups = store.user_groups(carol.id).await.unwrap();
    assert_eq!(
        groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["readers"]
    );
    let token = store
        .find_token(summary["access_token"].as_str().unwrap())
        .await
        .unwrap()
        .expect("the token is stored");
    assert_eq!(token.user_id, Some(carol.id));
    assert!(screenshot_dir().join("admin-users.png").exists());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_user_authorizes_denies_and_revokes_a_client_in_a_browser() {
    let test = "an_ordinary_user_authorizes_denies_and_revokes_a_client_in_a_browser";
    if !browser_available(test) {
        return;
    }
    let database_url = testing::sqlite_url();
    let store = Store::connect(&database_url)
        .await
        .expect("open the test database");
    // An ordinary account: active, neither staff nor superuser.
    let alice = testing::user(&store, "alice", "wonderland").await;
    assert!(!alice.is_staff && !alice.is_superuser);

    // The test client runs inside the browser script on this port, registered with the
    // operator command line: a confidential web application (its back end holds the secret; a
    // remembered consent answers it without the page), two redirect URIs (`--redirect-uri`
    // repeated).
    let client_port = free_port();
    let redirect_uri = format!("http://127.0.0.1:{client_port}/callback");
    let other_uri = format!("http://127.0.0.1:{client_port}/elsewhere");
    let created = Command::new(env!("CARGO_BIN_EXE_authserver"))
        .args([
            "app",
            "create",
            "--name",
            "Browser client",
            "--grant-type",
            "authorization-code",
            "--client-type",
            "confidential",
            "--redirect-uri",
            &redirect_uri,
            "--redirect-uri",
            &other_uri,
            "--scopes",
            "read write",
            "--json",
            "--database-url",
            &database_url,
        ])
        .env_remove("AUTHSERVER_DATABASE_URL")
        .output()
        .expect("run authserver app create");
    assert!(
        created.status.success(),
        "authserver app create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let app: Value = serde_json::from_slice(&created.stdout).expect("JSON from --json");
    let client_id = app["client_id"].as_str().expect("a client id").to_owned();
    let client_secret = app["client_secret"]
        .as_str()
        .expect("a confidential client's secret, shown once")
        .to_owned();
    let registered = store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .expect("the application is stored");
    assert_eq!(
        registered
            .redirect_uris
            .split_whitespace()
            .collect::<Vec<_>>(),
        [redirect_uri.as_str(), other_uri.as_str()]
    );

    let shots = [
        "authorize-consent.png",
        "authorize-denied.png",
        "authorize-exchanged.png",
        "authorized-applications.png",
    ];
    for shot in shots {
        let _ = std::fs::remove_file(screenshot_dir().join(shot));
    }
    let server = start(store.clone()).await;
    let summary = run_script(
        vec!["authorize.mjs"],
        server.base_url.clone(),
        vec![
            ("ISSUER", "http://127.0.0.1".into()),
            ("CLIENT_ID", client_id.clone()),
            ("CLIENT_SECRET", client_secret),
            ("APP_NAME", "Browser client".into()),
            ("CLIENT_PORT", client_port.to_string()),
            ("REDIRECT_URI", redirect_uri),
            ("RESOURCE_OWNER", "alice".into()),
            ("RESOURCE_OWNER_PASSWORD", "wonderland".into()),
        ],
    )
    .await;

    // Three exchanges succeeded (the allowed consent, then the remembered one twice: signed in,
    // and signing in again): alice's tokens for this client, and revoking the application on
    // "Authorized applications" revoked them.
    let tokens = summary["tokens"].as_array().expect("the access tokens");
    assert_eq!(tokens.len(), 3, "{summary}");
    let scopes = ["read write", "read", "read"];
    for (token, scope) in tokens.iter().zip(scopes) {
        let record = store
            .find_token(token.as_str().expect("a token"))
            .await
            .unwrap()
            .expect("the token is stored");
        assert_eq!(record.user_id, Some(alice.id));
        assert_eq!(record.client_id, client_id);
        assert_eq!(record.scope, scope);
        assert!(
            record.revoked,
            "revoking the application's access revoked its tokens"
        );
    }
    for shot in shots {
        assert!(screenshot_dir().join(shot).exists(), "{shot}");
    }
    server.stop().await;
}

/// OpenID Connect in Chromium (`tests/browser/oidc.mjs`): a relying party signs alice in with
/// `openid profile email`, the consent page names the claims, its back end verifies the RS256 ID
/// token against the JWKS and shows UserInfo's name, and RP-initiated logout ends the session
/// and comes back to the registered post-logout URI with the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relying_party_signs_a_user_in_and_out_with_openid_connect_in_a_browser() {
    let test = "a_relying_party_signs_a_user_in_and_out_with_openid_connect_in_a_browser";
    if !browser_available(test) {
        return;
    }
    // With the tests' key-encryption secret: the RS256 key is made at start.
    let store = testing::connect(&testing::sqlite_url()).await;
    let alice = testing::user(&store, "alice", "wonderland").await;
    let update = authserver::store::UserUpdate {
        email: Some("alice@wonderland.example".into()),
        first_name: Some("Alice".into()),
        last_name: Some("Liddell".into()),
        ..Default::default()
    };
    store.update_user(alice.id, &update).await.unwrap();
    let client_port = free_port();
    let input = authserver::store::ApplicationInput {
        name: "Sign-in site".into(),
        client_type: authserver::store::ClientType::Confidential,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: format!("http://127.0.0.1:{client_port}/callback"),
        allowed_scopes: vec!["openid".into(), "profile".into(), "email".into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    };
    let (app, secret) = store
        .create_application(&input, None, None, None)
        .await
        .unwrap();
    let registration = authserver::store::OidcClient {
        post_logout_redirect_uris: format!("http://127.0.0.1:{client_port}/signed-out"),
        ..Default::default()
    };
    store.set_oidc_client(app.id, &registration).await.unwrap();
    let server = start(store.clone()).await;
    let summary = run_script(
        vec!["oidc.mjs"],
        server.base_url.clone(),
        vec![
            ("ISSUER", "http://127.0.0.1".into()),
            ("CLIENT_ID", app.client_id.clone()),
            ("CLIENT_SECRET", secret.unwrap()),
            ("APP_NAME", "Sign-in site".into()),
            ("CLIENT_PORT", client_port.to_string()),
            ("RESOURCE_OWNER", "alice".into()),
            ("RESOURCE_OWNER_PASSWORD", "wonderland".into()),
        ],
    )
    .await;
    assert_eq!(summary["sub"], alice.id.to_string().as_str(), "{summary}");
    for check in ["signature", "nonce", "at_hash"] {
        assert!(summary["checks"].to_string().contains(check), "{summary}");
    }
    for shot in [
        "oidc-consent.png",
        "oidc-signed-in.png",
        "oidc-signed-out.png",
    ] {
        assert!(screenshot_dir().join(shot).exists(), "{shot}");
    }
    server.stop().await;
}

/// Second factors in a real Chromium (issue 41): a user enrols an authenticator app (QR page)
/// and a passkey (Chromium's virtual authenticator: CTAP2, internal, discoverable, verifying its
/// user), signs out, then signs in to an OpenID Connect client with password + passkey, with the
/// passkey alone, and with password + TOTP code. The ID tokens and introspection (asked before
/// the sign-out that revokes them) carry each sign-in's methods; the virtual authenticator's counter moved on with each use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_enrols_totp_and_a_passkey_and_signs_in_with_each_in_a_browser() {
    let test = "a_user_enrols_totp_and_a_passkey_and_signs_in_with_each_in_a_browser";
    if !browser_available(test) {
        return;
    }
    use authserver::store::{ApplicationInput, ClientType};
    let store = testing::store().await;
    let user = testing::user(&store, "passkey-carol", "carol-long-password").await;
    let client_port = free_port();
    let redirect_uri = format!("http://127.0.0.1:{client_port}/cb");
    let (app, secret) = store
        .create_application(
            &ApplicationInput {
                name: "Passkey client".into(),
                client_type: ClientType::Confidential,
                grant_type: GrantType::AuthorizationCode,
                redirect_uris: redirect_uri.clone(),
                allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
                may_introspect: false,
                may_use_ssf: false,
                pkce_required: true,
                token_format: None,
            },
            None,
            None,
            None,
        )
        .await
        .unwrap();
    let (introspector, introspector_secret) =
        testing::application(&store, GrantType::ClientCredentials, true).await;
    // WebAuthn needs a host name (not an IP address) for the relying party, and a secure
    // context: http://localhost is one. The issuer names it, with the port.
    let port = free_port();
    let mut settings = Settings::for_tests("unused");
    settings.issuer = format!("http://localhost:{port}");
    let server =
        testing::spawn_server(store.clone(), settings, ([127, 0, 0, 1], port).into()).await;
    let summary = run_script(
        vec!["passkeys.mjs"],
        format!("http://localhost:{port}"),
        vec![
            ("USERNAME", "passkey-carol".into()),
            ("PASSWORD", "carol-long-password".into()),
            ("CLIENT_ID", app.client_id.clone()),
            ("CLIENT_SECRET", secret.unwrap()),
            ("REDIRECT_URI", redirect_uri),
            ("INTROSPECTOR_ID", introspector),
            ("INTROSPECTOR_SECRET", introspector_secret),
        ],
    )
    .await;
    assert_eq!(summary["recovery_codes"], 10, "{summary}");
    assert_eq!(
        summary["passkeys_listed"],
        serde_json::json!(["Virtual authenticator"])
    );
    assert_eq!(summary["credentials"], 1);
    assert_eq!(summary["resident"], true, "a discoverable credential");
    assert_eq!(
        summary["factor_step_offers"],
        serde_json::json!({"passkey": true, "code": true})
    );
    for (case, amr, acr) in [
        (
            "password_and_passkey",
            ["pwd", "swk", "mfa"],
            "urn:tokengate:acr:mfa",
        ),
        (
            "passkey_alone",
            ["swk", "user", "mfa"],
            "urn:tokengate:acr:mfa",
        ),
        (
            "password_and_totp",
            ["pwd", "otp", "mfa"],
            "urn:tokengate:acr:mfa",
        ),
    ] {
        let id_token = &summary[case]["id_token"];
        assert_eq!(
            id_token["amr"],
            serde_json::json!(amr),
            "{case}: {id_token}"
        );
        assert_eq!(id_token["acr"], acr, "{case}");
        assert_eq!(id_token["sub"], user.id.to_string(), "{case}");
        let introspected = &summary[case]["introspection"];
        assert_eq!(introspected["active"], true, "{case}: {introspected}");
        assert_eq!(introspected["amr"], serde_json::json!(amr), "{case}");
        assert_eq!(introspected["acr"], acr, "{case}");
    }
    // Registered, then used twice: the virtual authenticator counts, the store kept up.
    assert!(summary["sign_count"].as_u64().unwrap() >= 2, "{summary}");
    let passkeys = store.passkeys_of(user.id).await.unwrap();
    assert_eq!(passkeys.len(), 1);
    assert!(passkeys[0].last_used_at.is_some());
    for shot in [
        "two-factor-enrol-totp.png",
        "two-factor-recovery-codes.png",
        "two-factor-passkey-registered.png",
        "sign-in-factor-step.png",
        "sign-in-passwordless.png",
        "sign-in-totp-code.png",
    ] {
        assert!(screenshot_dir().join(shot).exists(), "{shot}");
    }
    server.stop().await;
}
