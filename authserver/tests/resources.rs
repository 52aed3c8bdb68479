//! API resources and audiences (issue 39, RFC 8707) over real HTTP, on every backend: a token
//! requested with `resource` carries that resource as its audience and only its scopes, in the
//! introspection answer and in its JWT; refreshes and code exchanges may only narrow it; a
//! malformed, unknown or ungranted resource is `invalid_target`.

use authserver::AppState;
use authserver::config::{AccessTokenFormat, Settings};
use authserver::store::{GrantType, ResourceInput, Store};
use authserver::testing;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use test_support::basic_auth;

const ORDERS: &str = "https://orders.example/";
const BILLING: &str = "https://billing.example/api";
const DEFAULT_AUDIENCE: &str = "https://default.example";

struct Server {
    base: String,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
    /// A password-grant client, and one allowed to introspect.
    password: (String, String),
    introspector: (String, String),
}

async fn resource(store: &Store, identifier: &str, scopes: &str, lifetime: Option<i64>) {
    store
        .create_resource(&ResourceInput {
            identifier: identifier.into(),
            name: identifier.into(),
            scopes: scopes.split(' ').map(str::to_owned).collect(),
            token_format: None,
            access_token_lifetime: lifetime,
        })
        .await
        .expect("create a resource");
}

async fn start(store: Store) -> Server {
    testing::user(&store, "alice", "wonderland").await;
    resource(&store, ORDERS, "orders:read orders:write", None).await;
    resource(&store, BILLING, "billing:read", Some(120)).await;
    let password = testing::application(&store, GrantType::Password, false).await;
    let introspector = testing::application(&store, GrantType::ClientCredentials, true).await;
    let mut settings = Settings::for_tests("unused");
    settings.access_token_audience = DEFAULT_AUDIENCE.into();
    settings.access_token_audience_is_issuer = false;
    let state = AppState::new(settings, store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(authserver::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    Server {
        base,
        http: reqwest::Client::new(),
        _stop: stop,
        password,
        introspector,
    }
}

impl Server {
    /// POSTs `form` (pairs, repeats kept) to the token endpoint as `client`.
    async fn token(&self, client: &(String, String), form: &[(&str, &str)]) -> (u16, Value) {
        let body = serde_urlencoded::to_string(form).unwrap();
        let reply = self
            .http
            .post(format!("{}/o/token/", self.base))
            .header("Authorization", basic_auth(&client.0, &client.1))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        (reply.status().as_u16(), reply.json().await.unwrap())
    }

    async fn password_grant(&self, extra: &[(&str, &str)]) -> (u16, Value) {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "wonderland"),
        ];
        form.extend_from_slice(extra);
        self.token(&self.password, &form).await
    }

    async fn introspect(&self, token: &str) -> Value {
        let (status, answer) = self
            .token_like("/o/introspect/", &self.introspector, &[("token", token)])
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    async fn token_like(
        &self,
        path: &str,
        client: &(String, String),
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        let reply = self
            .http
            .post(format!("{}{path}", self.base))
            .header("Authorization", basic_auth(&client.0, &client.1))
            .form(form)
            .send()
            .await
            .unwrap();
        (reply.status().as_u16(), reply.json().await.unwrap())
    }
}

fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v[name].as_str().unwrap_or_else(|| panic!("{name} in {v}"))
}

#[tokio::test]
async fn a_token_for_a_resource_has_its_audience_and_only_its_scopes() {
    for store in testing::all_stores().await {
        let server = start(store).await;
        let (status, token) = server.password_grant(&[("resource", ORDERS)]).await;
        assert_eq!(status, 200, "{token}");
        // No scope asked: every scope of the resource, none of the declared ones.
        assert_eq!(field(&token, "scope"), "orders:read orders:write");
        let answer = server.introspect(field(&token, "access_token")).await;
        assert_eq!(answer["active"], true);
        assert_eq!(answer["aud"], ORDERS, "{answer}");
        assert_eq!(answer["scope"], "orders:read orders:write");

        // One scope of it.
        let (status, token) = server
            .password_grant(&[("resource", ORDERS), ("scope", "orders:read")])
            .await;
        assert_eq!(status, 200, "{token}");
        assert_eq!(field(&token, "scope"), "orders:read");

        // A scope of another API, or a declared scope, is not a scope of this resource.
        for scope in ["billing:read", "read", "orders:read read"] {
            let (status, error) = server
                .password_grant(&[("resource", ORDERS), ("scope", scope)])
                .await;
            assert_eq!(status, 400, "{scope}: {error}");
            assert_eq!(error["error"], "invalid_scope", "{scope}");
        }

        // Without resource: today's behaviour, the server's default audience.
        let (status, token) = server.password_grant(&[]).await;
        assert_eq!(status, 200, "{token}");
        assert_eq!(field(&token, "scope"), "read write groups");
        let answer = server.introspect(field(&token, "access_token")).await;
        assert_eq!(answer["aud"], DEFAULT_AUDIENCE, "{answer}");
    }
}

#[tokio::test]
async fn several_resources_make_an_audience_array_and_the_shortest_lifetime() {
    for store in testing::all_stores().await {
        let server = start(store).await;
        let (status, token) = server
            .password_grant(&[
                ("resource", ORDERS),
                ("resource", BILLING),
                ("scope", "orders:read billing:read"),
            ])
            .await;
        assert_eq!(status, 200, "{token}");
        // BILLING's lifetime (120 s) is shorter than the server's.
        assert_eq!(token["expires_in"], 120);
        let answer = server.introspect(field(&token, "access_token")).await;
        assert_eq!(
            answer["aud"],
            serde_json::json!([ORDERS, BILLING]),
            "{answer}"
        );

        // A resource repeated is one resource.
        let (status, token) = server
            .password_grant(&[("resource", ORDERS), ("resource", ORDERS)])
            .await;
        assert_eq!(status, 200, "{token}");
        let answer = server.introspect(field(&token, "access_token")).await;
        assert_eq!(answer["aud"], ORDERS);
    }
}

#[tokio::test]
async fn malformed_unknown_and_hostile_resources_are_invalid_target() {
    for store in testing::all_stores().await {
        let server = start(store).await;
        for bad in [
            "https://unknown.example/",
            "orders",
            "https://orders.example/#x",
            "javascript:alert(1)",
            "http://orders.example/",
            "file:///etc/passwd",
            "https://orders.example/\u{0}",
        ] {
            let (status, error) = server.password_grant(&[("resource", bad)]).await;
            assert_eq!(status, 400, "{bad:?}: {error}");
            assert_eq!(error["error"], "invalid_target", "{bad:?}");
            assert!(error["error_description"].is_string());
        }
        // Too many.
        let many: Vec<String> = (0..20).map(|i| format!("https://r{i}.example/")).collect();
        let form: Vec<(&str, &str)> = many.iter().map(|r| ("resource", r.as_str())).collect();
        let (status, error) = server.password_grant(&form).await;
        assert_eq!((status, field(&error, "error")), (400, "invalid_target"));
        // Other parameters still may not repeat.
        let (status, error) = server
            .password_grant(&[("scope", "read"), ("scope", "write")])
            .await;
        assert_eq!((status, field(&error, "error")), (400, "invalid_request"));
        // client_credentials takes resource too.
        let (status, error) = server
            .token(
                &server.introspector,
                &[
                    ("grant_type", "client_credentials"),
                    ("resource", "https://nope.example/"),
                ],
            )
            .await;
        assert_eq!((status, field(&error, "error")), (400, "invalid_target"));
        let (status, token) = server
            .token(
                &server.introspector,
                &[("grant_type", "client_credentials"), ("resource", BILLING)],
            )
            .await;
        assert_eq!(status, 200, "{token}");
        assert_eq!(field(&token, "scope"), "billing:read");
    }
}

#[tokio::test]
async fn a_refresh_may_narrow_the_audience_but_never_widen_it() {
    for store in testing::all_stores().await {
        let server = start(store).await;
        let (_, token) = server
            .password_grant(&[
                ("resource", ORDERS),
                ("resource", BILLING),
                ("scope", "orders:read billing:read"),
            ])
            .await;
        let refresh = field(&token, "refresh_token").to_owned();
        // Asking for a resource the grant did not name costs nothing: the token still works.
        let (status, error) = server
            .token(
                &server.password,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", &refresh),
                    ("resource", "https://unknown.example/"),
                ],
            )
            .await;
        assert_eq!((status, field(&error, "error")), (400, "invalid_target"));
        let (status, narrowed) = server
            .token(
                &server.password,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", &refresh),
                    ("resource", BILLING),
                ],
            )
            .await;
        assert_eq!(status, 200, "{narrowed}");
        assert_eq!(field(&narrowed, "scope"), "billing:read");
        let answer = server.introspect(field(&narrowed, "access_token")).await;
        assert_eq!(answer["aud"], BILLING, "{answer}");
        // Refreshed without resource: the audience stays what it was.
        let (status, again) = server
            .token(
                &server.password,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", field(&narrowed, "refresh_token")),
                ],
            )
            .await;
        assert_eq!(status, 200, "{again}");
        let answer = server.introspect(field(&again, "access_token")).await;
        assert_eq!(answer["aud"], BILLING, "{answer}");
        // A token of the default audience cannot be turned into one for a resource.
        let (_, plain) = server.password_grant(&[]).await;
        let (status, error) = server
            .token(
                &server.password,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", field(&plain, "refresh_token")),
                    ("resource", ORDERS),
                ],
            )
            .await;
        assert_eq!((status, field(&error, "error")), (400, "invalid_target"));
    }
}

#[tokio::test]
async fn a_jwt_access_token_carries_the_resource_as_aud() {
    let store = testing::store().await;
    store
        .create_resource(&ResourceInput {
            identifier: "https://jwt-api.example/".into(),
            name: "JWT API".into(),
            scopes: vec!["jwt:read".into()],
            token_format: Some(AccessTokenFormat::Jwt),
            access_token_lifetime: None,
        })
        .await
        .unwrap();
    let server = start(store).await;
    let (status, token) = server
        .password_grant(&[("resource", "https://jwt-api.example/")])
        .await;
    assert_eq!(status, 200, "{token}");
    let jwt = field(&token, "access_token");
    let payload = jwt.split('.').nth(1).expect("a JWT: the resource's format");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert_eq!(claims["aud"], "https://jwt-api.example/", "{claims}");
    assert_eq!(claims["scope"], "jwt:read");
    let answer = server.introspect(jwt).await;
    assert_eq!(answer["aud"], "https://jwt-api.example/");
    // The resource's format does not change the others' tokens.
    let (_, plain) = server.password_grant(&[("resource", ORDERS)]).await;
    assert!(!field(&plain, "access_token").contains('.'));
}

#[tokio::test]
async fn the_metadata_lists_the_resources_scopes() {
    let server = start(testing::store().await).await;
    let metadata: Value = server
        .http
        .get(format!(
            "{}/.well-known/oauth-authorization-server",
            server.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let scopes = metadata["scopes_supported"].as_array().unwrap();
    for scope in ["read", "orders:read", "orders:write", "billing:read"] {
        assert!(scopes.iter().any(|s| s == scope), "{scope} in {metadata}");
    }
    assert_eq!(metadata["resource_indicators_supported"], true);
}

/// The server's default audience is a resource without being registered: a client that read it
/// from a sidecar's metadata may name it, and gets a token for it with the declared scopes.
#[tokio::test]
async fn the_default_audience_may_be_named_without_being_registered() {
    let server = start(testing::store().await).await;
    let (status, token) = server
        .password_grant(&[("resource", DEFAULT_AUDIENCE), ("scope", "read")])
        .await;
    assert_eq!(status, 200, "{token}");
    let answer = server.introspect(field(&token, "access_token")).await;
    assert_eq!(answer["aud"], DEFAULT_AUDIENCE);
    assert_eq!(answer["scope"], "read");
    // A resource's scope is not the default audience's.
    let (status, error) = server
        .password_grant(&[("resource", DEFAULT_AUDIENCE), ("scope", "orders:read")])
        .await;
    assert_eq!((status, field(&error, "error")), (400, "invalid_scope"));
}
