//! The example API validating JWT access tokens itself (`mode: jwt`), over a real socket: tokens
//! shaped like Keycloak's and Entra ID's, signed by a third-party library (Python's Authlib),
//! accepted with the right scopes; the adversarial corpus refused with 401 `invalid_token`; and
//! `jwt-or-introspect` mode sending opaque tokens to introspection.

mod support;

use test_support::jwks;

use std::sync::OnceLock;

use authserver::store::Store;
use example_api::config::Config;
use example_api::guard::Guard;
use jwks::{Corpus, JwksServer};
use support::{get, sqlite_url};
use tokio::sync::oneshot;

const ISSUER: &str = "https://login.microsoftonline.example/tenant/v2.0";
const AUDIENCE: &str = "api://tokengate-example";

fn corpus() -> &'static Corpus {
    static C: OnceLock<Corpus> = OnceLock::new();
    C.get_or_init(|| Corpus::generate(ISSUER, AUDIENCE))
}

/// The API as configured by `mode` and `jwt` (YAML lines), with the shipped routes.
async fn start(mode: &str, jwt: &str) -> (String, oneshot::Sender<()>) {
    let text = example_api::config::EXAMPLE_CONFIG;
    let routes = &text[text.find("\nroutes:").unwrap()..];
    let yaml = format!(
        "mode: {mode}\nlisten: 127.0.0.1:0\ndatabase_url: '{}'\nintrospection: {{ url: 'http://127.0.0.1:9/o/introspect/', auth_token: t, connect_timeout: 200ms }}\njwt:\n{jwt}\n{routes}",
        sqlite_url()
    );
    let config = Config::from_yaml(&yaml, "jwt-test.yaml").unwrap_or_else(|e| panic!("{e}"));
    let store = Store::connect(&config.database_url).await.unwrap();
    let state = example_api::AppState::new(store, Guard::from_config(&config).unwrap());
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(example_api::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    (base, stop)
}

fn section(jwks: &JwksServer, extra: &str) -> String {
    format!(
        "  jwks_url: {}\n  issuer: '{ISSUER}'\n  audience: '{AUDIENCE}'\n{extra}",
        jwks.url()
    )
}

#[tokio::test]
async fn keycloak_and_entra_shaped_tokens_with_their_scopes() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let http = reqwest::Client::new();
    let keycloak = "  typ: JWT\n  client_id_claim: azp\n  username_claim: preferred_username\n";
    let (base, stop) = start("jwt", &section(&jwks, keycloak)).await;
    let token = Some(corpus().token("keycloak"));
    // Keycloak's token: read write.
    assert_eq!(
        get(&http, &format!("{base}/users/"), token).await.status,
        200
    );
    let a = get(&http, &format!("{base}/groups/"), token).await;
    assert_eq!(a.status, 403);
    assert!(
        a.www_authenticate
            .unwrap()
            .contains("error=\"insufficient_scope\", scope=\"groups\"")
    );
    let _ = stop.send(());

    let entra = "  typ: JWT\n  scope_claim: scp\n  client_id_claim: azp\n  username_claim: preferred_username\n  require_jti: false\n";
    let (base, stop) = start("jwt", &section(&jwks, entra)).await;
    let token = Some(corpus().token("entra"));
    // Entra ID's token: scp [read, groups].
    assert_eq!(
        get(&http, &format!("{base}/users/"), token).await.status,
        200
    );
    assert_eq!(
        get(&http, &format!("{base}/groups/"), token).await.status,
        200
    );
    let _ = stop.send(());
}

#[tokio::test]
async fn the_adversarial_corpus_is_refused() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let http = reqwest::Client::new();
    let (base, stop) = start("jwt", &section(&jwks, "")).await;
    let url = format!("{base}/users/");
    assert_eq!(
        get(&http, &url, Some(corpus().token("rs256"))).await.status,
        200
    );
    for name in jwks::ADVERSARIAL {
        let a = get(&http, &url, Some(corpus().token(name))).await;
        assert_eq!(a.status, 401, "{name}");
        let challenge = a.www_authenticate.unwrap_or_default();
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{name}: {challenge}"
        );
        assert_eq!(
            a.json,
            serde_json::json!({"detail": "Invalid token."}),
            "{name}"
        );
    }
    assert_eq!(
        jwks.fetches(),
        2,
        "the start, and one refetch for the unknown kid"
    );
    let _ = stop.send(());
}

#[tokio::test]
async fn opaque_tokens_go_to_introspection_in_jwt_or_introspect_mode() {
    let jwks = JwksServer::start(&corpus().jwks, "max-age=300").await;
    let http = reqwest::Client::new();
    let (base, stop) = start("jwt-or-introspect", &section(&jwks, "")).await;
    let url = format!("{base}/users/");
    assert_eq!(
        get(&http, &url, Some(corpus().token("eddsa"))).await.status,
        200
    );
    // Nothing answers at the introspection URL: an opaque token is 503 (fail closed) ...
    assert_eq!(get(&http, &url, Some("opaque-token")).await.status, 503);
    // ... while a forged JWT is refused here, never sent there.
    assert_eq!(
        get(&http, &url, Some(corpus().token("tampered_signature")))
            .await
            .status,
        401
    );
    let _ = stop.send(());
}
