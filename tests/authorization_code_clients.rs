//! The authorization code flow with PKCE (issue 13) driven by a well-known client library,
//! unmodified: `tests/clients/authlib_code_flow.py` (Authlib's `OAuth2Session` plus a requests
//! session that signs in and consents over HTTP) against the whole stack of `tokengate::start`
//! (the Pingora front door, the authorization server, the example API), then the tokens it got
//! checked in the store and at the introspection endpoint; once with opaque access tokens and
//! once with applications registered for JWT access tokens. On PostgreSQL when `DATABASE_URL`
//! names one, else on SQLite.
//!
//! Needs `python3` (or `$PYTHON`) with `authlib` and `requests`; without them the test prints a
//! skip notice, or fails when `CI` is set.

mod common;

use authserver::config::AccessTokenFormat;
use authserver::store::{ApplicationInput, ClientType, GrantType, Store};
use authserver::testing;
use common::stack_config;
use reqwest::StatusCode;
use serde_json::Value;
use std::process::Command;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/authlib_code_flow.py"
);

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// True when Authlib can run; prints a skip notice, or panics under CI, when it cannot.
fn authlib_available(test: &str) -> bool {
    let found = Command::new(python())
        .args(["-c", "import authlib, requests"])
        .status()
        .is_ok_and(|s| s.success());
    if found {
        true
    } else if std::env::var("CI").is_ok_and(|v| !v.is_empty()) {
        panic!("{test}: CI must install authlib and requests (pip install authlib requests)");
    } else {
        eprintln!("SKIPPED {test}: pip install authlib requests");
        false
    }
}

/// An authorization-code application allowed `read write` with these redirect URIs and token
/// format; its client id and (for a confidential client) secret.
async fn application(
    store: &Store,
    name: &str,
    client_type: ClientType,
    redirect_uris: &[&str],
    token_format: Option<AccessTokenFormat>,
) -> (String, Option<String>) {
    let input = ApplicationInput {
        name: name.into(),
        client_type,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: redirect_uris.join(" "),
        allowed_scopes: vec!["read".into(), "write".into()],
        may_introspect: false,
        may_use_ssf: false,
        // PKCE required (the default the contract gives confidential clients too).
        pkce_required: true,
        token_format,
    };
    let (app, secret) = store
        .create_application(&input, None, None, None)
        .await
        .expect("register an authorization-code application");
    (app.client_id, secret)
}

/// What one run of the script left: the stack, the user, the two client ids and the tokens the
/// script printed.
struct Flow {
    stack: tokengate::Stack,
    user_id: i64,
    confidential_id: String,
    public_id: String,
    summary: Value,
}

impl Flow {
    fn token(&self, key: &str) -> &str {
        self.summary[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} in {}", self.summary))
    }

    /// The introspection answer for `token`, asked through the front door with the
    /// credentials of the resource-server application the first start created.
    async fn introspect(&self, token: &str) -> Value {
        let first = self.stack.first_run.as_ref().expect("a first start");
        let response = reqwest::Client::new()
            .post(format!("http://{}/o/introspect/", self.stack.front_door))
            .basic_auth(
                &first.resource_server_id,
                Some(&first.resource_server_secret),
            )
            .form(&[("token", token)])
            .send()
            .await
            .expect("introspect");
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.expect("introspection JSON")
    }

    /// The token of the summary's `key` introspects as active, for dora and `client_id`.
    async fn assert_active_for_dora(&self, key: &str, client_id: &str) {
        let answer = self.introspect(self.token(key)).await;
        assert_eq!(
            (&answer["active"], &answer["username"], &answer["client_id"]),
            (
                &Value::Bool(true),
                &Value::from("dora"),
                &Value::from(client_id)
            )
        );
    }
}

/// Starts a stack on a fresh database, registers an ordinary user and two applications (with
/// `token_format`), and runs `authlib_code_flow.py` against its front door.
async fn run_flow(token_format: Option<AccessTokenFormat>) -> Flow {
    let database_url = match testing::postgres_schema_url().await {
        Some(url) => url,
        None => testing::sqlite_url(),
    };
    let stack = tokengate::start(stack_config(&database_url, &[]))
        .await
        .expect("start the stack");
    // An ordinary account: not staff, so it may authorize but not run the operator views.
    let user = testing::user(&stack.store, "dora", "explorer-password").await;
    assert!(!user.is_staff && !user.is_superuser);
    // Two registered URIs: the flow uses the second, and exact matching refuses neighbours.
    let confidential_redirect = "http://127.0.0.1:9/authlib/callback";
    let (confidential_id, secret) = application(
        &stack.store,
        "Authlib confidential",
        ClientType::Confidential,
        &["https://client.example/callback", confidential_redirect],
        token_format,
    )
    .await;
    let secret = secret.expect("a confidential client has a secret");
    let public_redirect = "http://localhost:9/authlib/public";
    let (public_id, none) = application(
        &stack.store,
        "Authlib public",
        ClientType::Public,
        &[public_redirect],
        token_format,
    )
    .await;
    assert!(none.is_none(), "a public client has no secret");

    let args = [
        SCRIPT.to_owned(),
        format!("http://{}", stack.front_door),
        "dora".into(),
        "explorer-password".into(),
        "Authlib confidential".into(),
        confidential_id.clone(),
        secret,
        confidential_redirect.into(),
        "Authlib public".into(),
        public_id.clone(),
        public_redirect.into(),
    ];
    let output = tokio::task::spawn_blocking(move || Command::new(python()).args(args).output())
        .await
        .expect("join the Python runner")
        .expect("start python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "authlib_code_flow.py failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let summary: Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON summary"))
        .unwrap_or_else(|| panic!("no summary from the script:\n{stdout}"));
    Flow {
        stack,
        user_id: user.id,
        confidential_id,
        public_id,
        summary,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authlib_runs_the_authorization_code_flow_through_the_front_door() {
    if !authlib_available("authlib_runs_the_authorization_code_flow_through_the_front_door") {
        return;
    }
    // No format of its own: the server's (opaque in the shipped config).
    let flow = run_flow(None).await;
    let store = &flow.stack.store;
    let find = async |key: &str| {
        store
            .find_token(flow.token(key))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{key} is not stored"))
    };

    // The tokens are the signed-in user's, for the application that asked.
    let confidential = find("access_token").await;
    assert_eq!(confidential.user_id, Some(flow.user_id));
    assert_eq!(confidential.client_id, flow.confidential_id);
    assert_eq!(sorted(&confidential.scope), ["read", "write"]);
    assert!(confidential.is_active());
    let public = find("public_access_token").await;
    assert_eq!(
        (
            public.user_id,
            public.client_id.as_str(),
            public.scope.as_str()
        ),
        (Some(flow.user_id), flow.public_id.as_str(), "read")
    );
    assert!(public.is_active());
    // The second use of a code revoked the access token the first use issued.
    let reused = find("reused_code_access_token").await;
    assert_eq!(reused.user_id, Some(flow.user_id));
    assert!(
        reused.revoked && !reused.is_active(),
        "a token issued from a reused code is still active"
    );
    let answer = flow
        .introspect(flow.token("reused_code_access_token"))
        .await;
    assert_eq!(answer, serde_json::json!({"active": false}));
    flow.assert_active_for_dora("access_token", &flow.confidential_id)
        .await;
    flow.stack.shutdown().await;
}

/// Applications registered for JWT access tokens (RFC 9068) on a server whose default is opaque:
/// the same flow, the proxy accepts the JWTs (it introspects them), and the code reuse revokes
/// the JWT issued from the code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authlib_gets_jwt_access_tokens_from_the_code_flow() {
    if !authlib_available("authlib_gets_jwt_access_tokens_from_the_code_flow") {
        return;
    }
    let flow = run_flow(Some(AccessTokenFormat::Jwt)).await;
    for key in [
        "access_token",
        "public_access_token",
        "reused_code_access_token",
    ] {
        assert_eq!(
            flow.token(key).split('.').count(),
            3,
            "{key} is a JWT: {}",
            flow.token(key)
        );
    }
    flow.assert_active_for_dora("public_access_token", &flow.public_id)
        .await;
    let answer = flow
        .introspect(flow.token("reused_code_access_token"))
        .await;
    assert_eq!(answer, serde_json::json!({"active": false}));
    flow.stack.shutdown().await;
}

fn sorted(scope: &str) -> Vec<&str> {
    let mut scopes: Vec<&str> = scope.split_whitespace().collect();
    scopes.sort_unstable();
    scopes
}
