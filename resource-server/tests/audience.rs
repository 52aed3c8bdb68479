//! A token is good only at the API it was issued for: the gate's `audience` (by default its
//! `resource`), configured as the binaries configure it (`GateConfig::resolve`), held against
//! every token source: introspection answers (first from the server, then from the cache),
//! locally validated JWTs, and both together. And the refusal's challenge points to the
//! resource's metadata.

use test_support::ed25519_jwt;
use test_support::fake_server;

use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_jwt::{JwksFile, jwk, key, sign};
use fake_server::{FakeServer, json};
use http::{HeaderMap, HeaderValue, Method};
use resource_server::jwt::raw::RawJwt;
use resource_server::settings::RawIntrospection;
use resource_server::yaml::OneOrMany;
use resource_server::{
    Denial, Gate, GateConfig, GateEnv, GateSettings, Outcome, RawAudience, RouteSpec, TokenSource,
    WRONG_AUDIENCE,
};
use serde_json::{Value, json as j};

const ISSUER: &str = "https://auth.example";
const ORDERS: &str = "https://orders.example/api";
const BILLING: &str = "https://billing.example";
const METADATA: &str = "https://orders.example/.well-known/oauth-protected-resource/api";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The gate's keys of a binary's file, with one route needing `read`.
fn settings(yaml: &str) -> GateSettings {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        token_source: Option<String>,
        introspection: Option<RawIntrospection>,
        jwt: Option<RawJwt>,
        resource: Option<String>,
        audience: Option<RawAudience>,
        authorization_servers: Option<OneOrMany>,
    }
    let f: File = serde_yaml_ng::from_str(yaml).unwrap();
    let routes: Vec<RouteSpec> =
        serde_yaml_ng::from_str("[{ name: r, path: /r, scopes: [read] }]").unwrap();
    GateConfig {
        token_source: f.token_source,
        introspection: f.introspection,
        jwt: f.jwt,
        routes,
        revocation: None,
        resource: f.resource,
        audience: f.audience,
        authorization_servers: f.authorization_servers,
        resource_name: None,
    }
    .resolve(
        "t.yaml",
        TokenSource::Introspection,
        &GateEnv {
            prefix: "PROXY",
            layers: &resource_server::layers::Layers::new(
                "t.yaml",
                &|_| None,
                &resource_server::layers::Overrides::default(),
            ),
        },
    )
    .unwrap()
}

fn introspection(server: &FakeServer) -> String {
    format!(
        "introspection: {{url: '{}', auth_token: t, issuer: '{ISSUER}'}}\n",
        server.url
    )
}

fn answer(aud: Option<Value>) -> String {
    let mut a = j!({"active": true, "scope": "read", "client_id": "app", "username": "alice",
                    "iss": ISSUER, "exp": now() + 3600});
    if let Some(aud) = aud {
        a["aud"] = aud;
    }
    a.to_string()
}

fn jwt_claims(aud: Option<Value>) -> Value {
    let t = now();
    let mut c = j!({"iss": ISSUER, "exp": t + 3600, "iat": t, "sub": "7", "client_id": "app",
                    "jti": format!("j-{t}"), "scope": "read", "username": "alice"});
    if let Some(aud) = aud {
        c["aud"] = aud;
    }
    c
}

async fn ask(gate: &Gate, token: &str) -> Result<(), Denial> {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    gate.authorize(&Method::GET, &"/r".parse().unwrap(), &h, None)
        .await
        .map(|_| ())
}

/// The refusal of a token not meant for this API: 401 `invalid_token`, the description, and
/// the metadata URL in the challenge.
fn assert_wrong_audience(result: Result<(), Denial>, what: &str) {
    let denial = result.expect_err(what);
    assert_eq!(
        (denial.refusal.status, denial.outcome),
        (401, Outcome::InvalidToken),
        "{what}"
    );
    let challenge = denial.refusal.www_authenticate.unwrap();
    assert_eq!(
        challenge,
        format!(
            "Bearer realm=\"api\", error=\"invalid_token\", error_description=\"{WRONG_AUDIENCE}\", \
             resource_metadata=\"{METADATA}\""
        ),
        "{what}"
    );
}

#[tokio::test]
async fn introspected_tokens_for_another_api_are_refused_also_from_the_cache() {
    let server = FakeServer::start(json("{}")).await;
    let yaml = format!("{}resource: '{ORDERS}'\n", introspection(&server));
    let gate = Gate::build(settings(&yaml), None).unwrap();
    let cases = [
        ("aud a string", Some(j!(ORDERS)), true),
        ("aud a list", Some(j!([BILLING, ORDERS])), true),
        ("another API", Some(j!(BILLING)), false),
        ("no aud", None, false),
        ("empty aud", Some(j!([])), false),
        ("a lookalike", Some(j!(format!("{ORDERS}/"))), false),
    ];
    for (name, aud, good) in cases {
        server.set(json(&answer(aud)));
        let calls = server.calls();
        // The first time from the server, the second from the cache: the same verdict.
        for round in ["server", "cache"] {
            let result = ask(&gate, &name.replace(' ', "-")).await;
            match good {
                true => assert!(result.is_ok(), "{name} ({round}): {result:?}"),
                false => assert_wrong_audience(result, &format!("{name} ({round})")),
            }
        }
        assert_eq!(
            server.calls() - calls,
            1,
            "{name}: the second answer was cached"
        );
    }
    // The audience is held against the cached claims, not baked into the cache: the gate of a
    // reload that names the other API (the introspection client, and its cache, kept) now
    // accepts the billing token from the cache, and refuses the orders one.
    let calls = server.calls();
    let billing_yaml = format!("{}audience: ['{BILLING}']\n", introspection(&server));
    let billing = Gate::build(settings(&billing_yaml), Some(&gate)).unwrap();
    assert!(ask(&billing, "another-API").await.is_ok());
    let refused = ask(&billing, "aud-a-string").await.unwrap_err();
    assert_eq!(refused.outcome, Outcome::InvalidToken);
    assert_eq!(server.calls(), calls, "all from the cache");
}

#[tokio::test]
async fn jwts_for_another_api_are_refused() {
    let k = key(21);
    let file = JwksFile::new(&[jwk(&k, Some("k"))]);
    let yaml = format!(
        "token_source: jwt\nresource: '{ORDERS}'\njwt: {{jwks_file: '{}', issuer: '{ISSUER}', algorithms: [EdDSA]}}\n",
        file.0.display()
    );
    let gate = Gate::build(settings(&yaml), None).unwrap();
    for (name, aud, good) in [
        ("aud a string", Some(j!(ORDERS)), true),
        ("aud a list", Some(j!([BILLING, ORDERS])), true),
        ("another API", Some(j!(BILLING)), false),
        ("no aud", None, false),
    ] {
        let token = sign(&k, Some("k"), &jwt_claims(aud));
        for round in ["validated", "cached"] {
            let result = ask(&gate, &token).await;
            match good {
                true => assert!(result.is_ok(), "{name} ({round}): {result:?}"),
                false => assert_wrong_audience(result, &format!("{name} ({round})")),
            }
        }
    }
}

#[tokio::test]
async fn both_token_sources_of_one_gate_hold_the_same_audience() {
    let k = key(22);
    let file = JwksFile::new(&[jwk(&k, Some("k"))]);
    let server = FakeServer::start(json("{}")).await;
    // The old spellings, both saying the same: still one audience for both sources.
    let yaml = format!(
        "token_source: jwt_or_introspection\nresource: '{ORDERS}'\n\
         introspection: {{url: '{}', auth_token: t, issuer: '{ISSUER}', audience: '{ORDERS}'}}\n\
         jwt: {{jwks_file: '{}', issuer: '{ISSUER}', audience: ['{ORDERS}'], algorithms: [EdDSA]}}\n",
        server.url,
        file.0.display()
    );
    let gate = Gate::build(settings(&yaml), None).unwrap();
    server.set(json(&answer(Some(j!(BILLING)))));
    assert_wrong_audience(ask(&gate, "opaque-billing").await, "opaque, another API");
    server.set(json(&answer(Some(j!(ORDERS)))));
    assert!(ask(&gate, "opaque-orders").await.is_ok());
    let jwt = |aud| sign(&k, Some("k"), &jwt_claims(aud));
    assert_wrong_audience(
        ask(&gate, &jwt(Some(j!(BILLING)))).await,
        "JWT, another API",
    );
    assert_wrong_audience(ask(&gate, &jwt(None)).await, "JWT without aud");
    assert!(ask(&gate, &jwt(Some(j!(ORDERS)))).await.is_ok());
}

#[tokio::test]
async fn without_an_audience_any_introspected_token_passes_and_challenges_name_no_metadata() {
    let server = FakeServer::start(json(&answer(None))).await;
    let gate = Gate::build(settings(&introspection(&server)), None).unwrap();
    assert!(gate.audience().is_none());
    assert!(ask(&gate, "no-aud").await.is_ok());
    let mut h = HeaderMap::new();
    h.insert("authorization", HeaderValue::from_static("Basic x"));
    let denial = gate
        .authorize(&Method::GET, &"/r".parse().unwrap(), &h, None)
        .await
        .unwrap_err();
    assert_eq!(
        denial.refusal.www_authenticate.as_deref(),
        Some("Bearer realm=\"api\", scope=\"read\"")
    );
    assert!(
        gate.metadata(&Method::GET, "/.well-known/oauth-protected-resource")
            .is_none()
    );
}
