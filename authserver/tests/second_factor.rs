//! Second factors over real HTTP (issue 41): TOTP enrolment and the sign-in's second step driven
//! by `tests/totp_client.py` with pyotp as the authenticator app.

use authserver::config::Settings;
use authserver::testing;
use serde_json::Value;

/// Runs a python script of `tests/` with `args`; its last line parsed as JSON.
async fn python(script: &str, args: Vec<String>) -> Value {
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut command = std::process::Command::new("python3");
    command.arg(&script).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run python3"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// Whether python3 has `modules`; CI must.
fn have_python(modules: &str) -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(std::env::var("CI").is_err(), "CI must install {modules}");
        eprintln!("SKIPPED: pip install {modules}");
    }
    found
}

/// Enrolment from the user's page (otpauth:// URI and QR code, confirmed by a code one step
/// behind), then sign-ins: a wrong code 400, the right one signs in, the same code again 400, the
/// next step's code signs in, a recovery code once only, and 5 wrong codes before 429 with
/// `Retry-After: 900`, which refuses a right code too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyotp_enrols_and_signs_in_with_totp_and_recovery_codes() {
    if !have_python("pyotp, requests") {
        return;
    }
    let store = testing::store().await;
    let user = testing::user(&store, "otp-alice", "correct horse battery").await;
    let server = testing::spawn_server(
        store.clone(),
        Settings::for_tests("unused"),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let summary = python(
        "totp_client.py",
        vec![
            server.base_url.clone(),
            "otp-alice".into(),
            "correct horse battery".into(),
        ],
    )
    .await;
    assert_eq!(summary["uri_name"], "otp-alice");
    assert_eq!(summary["uri_issuer"], "tokengate 127.0.0.1:8000");
    assert_eq!(summary["confirm_wrong"], 400);
    assert_eq!(summary["recovery_codes"], 10);
    assert_eq!(summary["other_session_after_enrolment"], false);
    assert_eq!(summary["enrolling_session_after_enrolment"], true);
    assert_eq!(summary["wrong"], serde_json::json!([400, false]));
    assert_eq!(summary["right"], serde_json::json!([303, true]));
    assert_eq!(summary["right_location"], "/o/authorized-tokens/");
    assert_eq!(summary["replayed"], serde_json::json!([400, false]));
    assert_eq!(summary["next_step"], serde_json::json!([303, true]));
    assert_eq!(summary["recovery"], serde_json::json!([303, true]));
    assert_eq!(summary["recovery_again"], serde_json::json!([400, false]));
    // Failures so far in the window: the replayed code (cleared by the next success), then the
    // spent recovery code: 5 in all before the refusal.
    assert_eq!(summary["wrong_before_429"], 4);
    assert_eq!(summary["retry_after"], "900");
    assert_eq!(
        summary["right_while_throttled"],
        serde_json::json!([429, false])
    );
    assert_eq!(store.recovery_codes_left(user.id).await.unwrap(), 9);
    // The password grant is no way around the second factor: a user who has one is refused,
    // one who has none still gets tokens.
    testing::user(&store, "otp-none", "another long password").await;
    let (id, secret) =
        testing::application(&store, authserver::store::GrantType::Password, false).await;
    let http = reqwest::Client::new();
    let grant = |username: &'static str, password: &'static str| {
        http.post(format!("{}/o/token/", server.base_url))
            .header("Authorization", test_support::basic_auth(&id, &secret))
            .form(&[
                ("grant_type", "password"),
                ("username", username),
                ("password", password),
            ])
            .send()
    };
    let refused = grant("otp-alice", "correct horse battery").await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "invalid_grant", "{body}");
    let granted = grant("otp-none", "another long password").await.unwrap();
    assert_eq!(granted.status(), 200);
    server.stop().await;
}

/// An application of the code flow (openid, JWT access tokens) and an introspecting client:
/// (client id, secret, introspector id, introspector secret).
async fn code_flow_apps(store: &authserver::store::Store) -> (String, String, String, String) {
    use authserver::config::AccessTokenFormat;
    use authserver::store::{ApplicationInput, ClientType, GrantType};
    let input = ApplicationInput {
        name: "step-up app".into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: REDIRECT.into(),
        allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: Some(AccessTokenFormat::Jwt),
    };
    let (app, secret) = store
        .create_application(&input, None, None, None)
        .await
        .unwrap();
    let (introspector, introspector_secret) =
        testing::application(store, GrantType::ClientCredentials, true).await;
    (
        app.client_id,
        secret.unwrap(),
        introspector,
        introspector_secret,
    )
}

const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// `acr`, `amr` and `auth_time` in the ID token, the JWT access token and the introspection
/// answer of each authorization: a password session gives `urn:tokengate:acr:pwd` and
/// `["pwd"]`; `acr_values=urn:tokengate:acr:mfa` sends that session to sign in again with a
/// code (pyotp) and gives `urn:tokengate:acr:mfa` and `["pwd","otp","mfa"]` with a later
/// `auth_time`; that session then meets the request without a sign-in; `prompt=login` and
/// `max_age=0` force one (the password and a code, or a recovery code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acr_amr_and_auth_time_follow_the_sign_in_and_acr_values_steps_up() {
    if !have_python("pyotp, requests") {
        return;
    }
    let store = testing::store().await;
    testing::user(&store, "acr-bob", "a long enough password").await;
    let (client_id, secret, introspector, introspector_secret) = code_flow_apps(&store).await;
    let server = testing::spawn_server(
        store.clone(),
        Settings::for_tests("unused"),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let s = python(
        "acr_client.py",
        vec![
            server.base_url.clone(),
            client_id,
            secret,
            REDIRECT.into(),
            "acr-bob".into(),
            "a long enough password".into(),
            introspector,
            introspector_secret,
        ],
    )
    .await;
    let started = s["started"].as_i64().unwrap();
    let pwd = serde_json::json!(["pwd"]);
    let mfa = serde_json::json!(["pwd", "otp", "mfa"]);
    for (case, acr, amr, signed_in, asked_code) in [
        (
            "password_session",
            "urn:tokengate:acr:pwd",
            &pwd,
            false,
            false,
        ),
        ("step_up", "urn:tokengate:acr:mfa", &mfa, true, true),
        ("mfa_session", "urn:tokengate:acr:mfa", &mfa, false, false),
        ("prompt_login", "urn:tokengate:acr:mfa", &mfa, true, true),
        ("max_age_0", "urn:tokengate:acr:mfa", &mfa, true, true),
        ("no_max_age", "urn:tokengate:acr:mfa", &mfa, false, false),
    ] {
        let answer = &s[case];
        assert_eq!(answer["signed_in"], signed_in, "{case}: {answer}");
        assert_eq!(answer["asked_code"], asked_code, "{case}: {answer}");
        let tokens = &answer["tokens"];
        let auth_time = tokens["id_token"]["auth_time"].as_i64().unwrap();
        for (what, claims) in tokens.as_object().unwrap() {
            assert_eq!(claims["acr"], acr, "{case} {what}: {answer}");
            assert_eq!(&claims["amr"], amr, "{case} {what}: {answer}");
            assert_eq!(claims["auth_time"], auth_time, "{case} {what}: {answer}");
        }
        assert!(auth_time >= started, "{case}");
        // Every later sign-in is no older than the first (whole seconds: maybe the same).
        let first = s["password_session"]["tokens"]["id_token"]["auth_time"].as_i64();
        assert!(Some(auth_time) >= first, "{case}");
    }
    // The discovery document lists the values.
    let discovery: Value = reqwest::get(format!(
        "{}/.well-known/openid-configuration",
        server.base_url
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        discovery["acr_values_supported"],
        serde_json::json!(["urn:tokengate:acr:pwd", "urn:tokengate:acr:mfa"])
    );
    server.stop().await;
}

/// Operators: an application registered with "require a second factor" (`require_mfa`, through
/// the registration service's OIDC registration) refuses a user without one (`access_denied`)
/// and asks a password-only session for the code once they have one; a superuser's reset of the
/// user's factor from the admin ends their session and tokens (a `session-revoked` event on the
/// revocation stream) and leaves them a password sign-in; with `require_mfa_for_staff` the admin
/// sends a superuser without a factor to set one up, then to sign in again with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_require_second_factors_and_reset_them() {
    if !have_python("pyotp, requests") {
        return;
    }
    let store = testing::store().await;
    let user = testing::user(&store, "mfa-dave", "dave's long password").await;
    let admin = store
        .create_user(&authserver::store::NewUser {
            username: "mfa-root".into(),
            password: Some("root's long password".into()),
            is_active: true,
            is_staff: true,
            is_superuser: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let (client_id, secret, introspector, introspector_secret) = code_flow_apps(&store).await;
    let app = store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap();
    let registration = authserver::store::OidcClient {
        require_mfa: true,
        ..Default::default()
    };
    store.set_oidc_client(app.id, &registration).await.unwrap();
    let server = testing::spawn_server(
        store.clone(),
        Settings::for_tests("unused"),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let mut staff_settings = Settings::for_tests("unused");
    staff_settings.require_mfa_for_staff = true;
    let staff_server = testing::spawn_server(
        store.clone(),
        staff_settings,
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let s = python(
        "operator_mfa.py",
        vec![
            server.base_url.clone(),
            staff_server.base_url.clone(),
            client_id,
            secret,
            REDIRECT.into(),
            "mfa-root".into(),
            "root's long password".into(),
            "mfa-dave".into(),
            "dave's long password".into(),
            user.id.to_string(),
            introspector,
            introspector_secret,
        ],
    )
    .await;
    assert_eq!(s["without_factor"]["error"], "access_denied", "{s}");
    assert!(
        s["without_factor"]["error_description"]
            .as_str()
            .unwrap()
            .contains("/accounts/two-factor/")
    );
    assert_eq!(
        s["after_enrolment"],
        serde_json::json!({"signed_in_again": true, "acr": "urn:tokengate:acr:mfa", "amr": ["pwd", "otp", "mfa"]})
    );
    assert_eq!(s["admin_saw_factor"], true, "{s}");
    assert_eq!(s["reset_notice"], true, "{s}");
    assert_eq!(s["user_session_after_reset"], 303, "{s}");
    assert_eq!(s["token_after_reset"], false, "{s}");
    assert_eq!(s["password_alone_after_reset"], "/o/authorized-tokens/");
    assert_eq!(
        s["staff_without_factor"],
        serde_json::json!([303, "/accounts/two-factor/"])
    );
    assert_eq!(
        s["staff_password_session"],
        serde_json::json!([303, "/accounts/login/?next=%2Fadmin%2F&prompt=login"])
    );
    assert_eq!(s["staff_after_code"], 200, "{s}");
    assert!(!store.has_second_factor(user.id).await.unwrap());
    assert!(store.has_second_factor(admin.id).await.unwrap());
    let events: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM ssf_events WHERE event_type = 'session-revoked' AND subject_format = 'iss_sub' AND subject = $1",
    )
    .bind(user.id.to_string())
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(events, 1);
    server.stop().await;
    staff_server.stop().await;
}
