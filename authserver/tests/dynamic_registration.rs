//! Dynamic client registration (RFC 7591) and its management (RFC 7592) against a running
//! server: each policy (off, initial access token, open), the wrong callers (no, unknown,
//! expired or used-up initial access token; another client's registration access token), every
//! hostile input and its RFC 7591 answer, the rate limit, the operator's views (marked, revoked
//! there), and authlib registering a client and using it (`tests/dcr_client.py`).

mod support;

use authserver::config::{DynamicRegistration, Settings};
use authserver::store::{InitialAccessToken, Store, now};
use authserver::testing::{self, RunningServer};
use serde_json::{Value, json};
use support::binary::run;

/// A server on `store` with this registration policy.
async fn server(store: &Store, policy: DynamicRegistration) -> RunningServer {
    let mut settings = Settings::for_tests("unused");
    settings.dynamic_registration = policy;
    testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await
}

/// Stores an initial access token `token` valid until `expires_at` for `max_uses` registrations
/// (as `registration-token` does, without the binary).
async fn issue(store: &Store, token: &str, expires_at: i64, max_uses: Option<i64>) {
    let issued = InitialAccessToken {
        digest: authserver::secrets::digest(token),
        label: String::new(),
        created_at: now() - 100,
        expires_at,
        max_uses,
        uses: 0,
    };
    store.add_initial_access_token(&issued).await.unwrap();
}

/// The JSON document at `path`.
async fn document(server: &RunningServer, path: &str) -> Value {
    reqwest::get(format!("{}{path}", server.base_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An answer: status, headers, JSON body (Null when none).
struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    let reply = request.send().await.unwrap();
    let status = reply.status().as_u16();
    let headers = reply.headers().clone();
    let text = reply.text().await.unwrap();
    Reply {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}

/// `POST /o/register` with this JSON body and, if given, initial access token.
async fn register(server: &RunningServer, token: Option<&str>, body: &Value) -> Reply {
    let mut request = reqwest::Client::new()
        .post(format!("{}/o/register", server.base_url))
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    send(request).await
}

/// A public client of the code flow on loopback.
fn public_client() -> Value {
    json!({
        "client_name": "CLI tool",
        "redirect_uris": ["http://127.0.0.1:8976/callback"],
        "token_endpoint_auth_method": "none",
    })
}

/// A confidential client of the client credentials grant.
fn service_client() -> Value {
    json!({
        "client_name": "billing job",
        "grant_types": ["client_credentials"],
        "token_endpoint_auth_method": "client_secret_basic",
        "scope": "read",
    })
}

/// An initial access token the CLI issued on `db` (`registration-token`).
fn cli_token(db: &str, extra: &[&str]) -> String {
    let mut args = vec!["registration-token", "--json"];
    args.extend(extra);
    let out = run(&args, db, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    printed["initial_access_token"].as_str().unwrap().to_owned()
}

async fn application_count(store: &Store) -> usize {
    store.list_applications(None).await.unwrap().len()
}

fn assert_refused(reply: &Reply, status: u16, code: &str, what: &str) {
    assert_eq!(reply.status, status, "{what}: {}", reply.body);
    assert_eq!(reply.body["error"], code, "{what}: {}", reply.body);
    assert!(
        reply.body["error_description"].is_string(),
        "{what}: {}",
        reply.body
    );
}

#[tokio::test]
async fn off_by_default_no_endpoint_and_no_metadata() {
    let store = testing::store().await;
    let settings = Settings::for_tests("unused");
    assert_eq!(settings.dynamic_registration, DynamicRegistration::Off);
    let server =
        testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await;
    let reply = register(&server, None, &public_client()).await;
    assert_eq!(reply.status, 404);
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let metadata = document(&server, path).await;
        assert!(
            metadata.get("registration_endpoint").is_none(),
            "{metadata}"
        );
    }
    assert_eq!(application_count(&store).await, 0);
}

/// The open policy: a public client with PKCE registers; RFC 7592 reads, updates and deletes
/// it with its own registration access token only.
#[tokio::test]
async fn open_policy_registers_public_clients_and_manages_them() {
    let store = testing::store().await;
    let server = server(&store, DynamicRegistration::Open).await;
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let metadata = document(&server, path).await;
        assert_eq!(
            metadata["registration_endpoint"],
            format!("http://127.0.0.1:8000/o/register"),
            "{metadata}"
        );
    }
    let reply = register(&server, None, &public_client()).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let body = &reply.body;
    let client_id = body["client_id"].as_str().unwrap().to_owned();
    assert!(body.get("client_secret").is_none(), "{body}");
    assert!(body["client_id_issued_at"].as_i64().unwrap() > 0);
    assert_eq!(body["token_endpoint_auth_method"], "none");
    assert_eq!(body["grant_types"], json!(["authorization_code"]));
    assert_eq!(body["response_types"], json!(["code"]));
    assert_eq!(
        body["redirect_uris"],
        json!(["http://127.0.0.1:8976/callback"])
    );
    assert_eq!(body["client_name"], "CLI tool");
    assert_eq!(
        body["scope"], "read write groups openid profile email",
        "the policy's scopes when none is asked for"
    );
    assert_eq!(reply.headers["cache-control"], "no-store");
    let token = body["registration_access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let uri = body["registration_client_uri"].as_str().unwrap().to_owned();
    assert_eq!(uri, format!("http://127.0.0.1:8000/o/register/{client_id}"));
    // The issuer of the tests' settings is not this server's address: the path is the same.
    let local = format!("{}/o/register/{client_id}", server.base_url);
    let app = store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap();
    assert!(app.pkce_required);
    assert_eq!(app.client_type, authserver::store::ClientType::Public);
    // Its ID-token key is published already (it may ask for openid).
    let jwks = document(&server, "/.well-known/jwks.json").await;
    assert_eq!(jwks["keys"][0]["alg"], "RS256", "{jwks}");

    // A confidential client needs an initial access token under this policy.
    let reply = register(&server, None, &service_client()).await;
    assert_refused(&reply, 400, "invalid_client_metadata", "confidential, open");
    let mut confidential_code = public_client();
    confidential_code["token_endpoint_auth_method"] = "client_secret_post".into();
    let reply = register(&server, None, &confidential_code).await;
    assert_refused(
        &reply,
        400,
        "invalid_client_metadata",
        "client_secret_post, open",
    );

    let http = reqwest::Client::new();
    // RFC 7592 read with its token.
    let read = send(http.get(&local).bearer_auth(&token)).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["client_id"], client_id.as_str());
    assert_eq!(read.body["redirect_uris"], body["redirect_uris"]);
    assert!(read.body.get("registration_access_token").is_none());
    // Wrong callers: none, a wrong token, another client's token; an unknown client.
    let other = register(&server, None, &public_client()).await;
    let other_token = other.body["registration_access_token"].as_str().unwrap();
    let other_id = other.body["client_id"].as_str().unwrap();
    for (request, what) in [
        (http.get(&local), "no token"),
        (http.get(&local).bearer_auth("not-the-token"), "wrong token"),
        (
            http.get(&local).bearer_auth(other_token),
            "another client's token",
        ),
        (
            http.delete(&local).bearer_auth(other_token),
            "another client's token, delete",
        ),
        (
            http.put(&local)
                .bearer_auth(other_token)
                .json(&json!({"client_id": client_id})),
            "another client's token, update",
        ),
        (
            http.get(format!("{}/o/register/nobody", server.base_url))
                .bearer_auth(&token),
            "unknown client",
        ),
    ] {
        let reply = send(request).await;
        assert_refused(&reply, 401, "invalid_token", what);
        assert!(
            reply.headers["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer"),
            "{what}"
        );
    }
    // An operator-registered application has no registration access token at all.
    let (operator_app, _) = testing::application(
        &store,
        authserver::store::GrantType::ClientCredentials,
        false,
    )
    .await;
    let reply = send(
        http.get(format!("{}/o/register/{operator_app}", server.base_url))
            .bearer_auth(&token),
    )
    .await;
    assert_refused(&reply, 401, "invalid_token", "an operator's application");

    // RFC 7592 update: the whole metadata again; client_id must be this client's.
    let mut changed = public_client();
    changed["client_id"] = client_id.clone().into();
    changed["redirect_uris"] = json!(["https://tool.example/cb", "http://[::1]:9/cb"]);
    changed["scope"] = "read".into();
    let updated = send(http.put(&local).bearer_auth(&token).json(&changed)).await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(updated.body["scope"], "read");
    let app = store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        app.redirect_uris,
        "https://tool.example/cb http://[::1]:9/cb"
    );
    assert_eq!(app.allowed_scopes, ["read"]);
    let mut wrong_id = changed.clone();
    wrong_id["client_id"] = other_id.into();
    let reply = send(http.put(&local).bearer_auth(&token).json(&wrong_id)).await;
    assert_refused(
        &reply,
        400,
        "invalid_client_metadata",
        "another client_id in the body",
    );
    let mut to_confidential = changed.clone();
    to_confidential["token_endpoint_auth_method"] = "client_secret_basic".into();
    let reply = send(http.put(&local).bearer_auth(&token).json(&to_confidential)).await;
    assert_refused(
        &reply,
        400,
        "invalid_client_metadata",
        "update to confidential, open",
    );

    // RFC 7592 delete: gone, and its token no longer opens anything.
    let deleted = send(http.delete(&local).bearer_auth(&token)).await;
    assert_eq!(deleted.status, 204);
    assert!(
        store
            .find_application_by_client_id(&client_id)
            .await
            .unwrap()
            .is_none()
    );
    let reply = send(http.get(&local).bearer_auth(&token)).await;
    assert_refused(&reply, 401, "invalid_token", "after delete");
}

/// The initial-access-token policy: no, unknown, expired or used-up tokens are 401 and store
/// nothing; a refused registration does not take a use; a confidential client gets a secret
/// that works at the token endpoint.
#[tokio::test]
async fn initial_access_tokens_from_the_cli_admit_confidential_clients() {
    for db in testing::all_database_urls().await {
        let store = testing::connect(&db).await;
        let server = server(&store, DynamicRegistration::InitialAccessToken).await;
        let once = cli_token(&db, &["--uses", "1", "--expires-in", "1h", "--label", "ci"]);
        // No token, a wrong one, a malformed one.
        for (token, what) in [
            (None, "no token"),
            (Some("wrong-token"), "unknown token"),
            (Some("a b"), "malformed"),
        ] {
            let reply = register(&server, token, &service_client()).await;
            assert_refused(&reply, 401, "invalid_token", what);
        }
        // Expired.
        let expired = "expired-initial-access-token-0123456789abcdef";
        issue(&store, expired, now() - 1, None).await;
        let reply = register(&server, Some(expired), &service_client()).await;
        assert_refused(&reply, 401, "invalid_token", "expired");
        // A refused registration leaves the use.
        let reply = register(&server, Some(&once), &json!({"grant_types": ["password"]})).await;
        assert_refused(&reply, 400, "invalid_client_metadata", "password grant");
        assert_eq!(application_count(&store).await, 0);
        let reply = register(&server, Some(&once), &service_client()).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        let client_id = reply.body["client_id"].as_str().unwrap().to_owned();
        let secret = reply.body["client_secret"].as_str().unwrap().to_owned();
        assert_eq!(reply.body["client_secret_expires_at"], 0);
        assert_eq!(reply.body["grant_types"], json!(["client_credentials"]));
        // Used up.
        let reply = register(&server, Some(&once), &service_client()).await;
        assert_refused(&reply, 401, "invalid_token", "used up");
        assert_eq!(application_count(&store).await, 1);
        // The client works, within its registered scope.
        let http = reqwest::Client::new();
        let token = send(
            http.post(format!("{}/o/token/", server.base_url))
                .basic_auth(&client_id, Some(&secret))
                .form(&[("grant_type", "client_credentials"), ("scope", "read")]),
        )
        .await;
        assert_eq!(token.status, 200, "{}", token.body);
        let token = send(
            http.post(format!("{}/o/token/", server.base_url))
                .basic_auth(&client_id, Some(&secret))
                .form(&[("grant_type", "client_credentials"), ("scope", "write")]),
        )
        .await;
        assert_eq!(token.status, 400, "{}", token.body);
        // The same public client as under the open policy registers too.
        let many = cli_token(&db, &[]);
        let reply = register(&server, Some(&many), &public_client()).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        server.stop().await;
    }
}

/// Every hostile input gets 400 and its RFC 7591 error (or 401 for an unusable token), never a
/// 500, and stores nothing.
#[tokio::test]
async fn hostile_metadata_is_refused_with_rfc_7591_errors() {
    let store = testing::store().await;
    let server = server(&store, DynamicRegistration::InitialAccessToken).await;
    let token = "hostile-inputs-initial-access-token-0123456789";
    issue(&store, token, now() + 3600, None).await;
    let code = |uris: Value| json!({"redirect_uris": uris});
    let with = |name: &str, value: Value| {
        let mut body = code(json!(["https://app.example/cb"]));
        body[name] = value;
        body
    };
    let many: Vec<String> = (0..11)
        .map(|i| format!("https://app.example/{i}"))
        .collect();
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            code(json!(["javascript:alert(1)"])),
            "invalid_redirect_uri",
            "javascript: scheme",
        ),
        (
            code(json!(["data:text/html,<script>x</script>"])),
            "invalid_redirect_uri",
            "data: scheme",
        ),
        (
            code(json!(["file:///etc/passwd"])),
            "invalid_redirect_uri",
            "file: scheme",
        ),
        (
            code(json!(["https://app.example/cb#frag"])),
            "invalid_redirect_uri",
            "fragment",
        ),
        (
            code(json!(["http://app.example/cb"])),
            "invalid_redirect_uri",
            "http, not loopback",
        ),
        (
            code(json!(["https://user@app.example/cb"])),
            "invalid_redirect_uri",
            "user information",
        ),
        (
            code(json!(["/relative"])),
            "invalid_redirect_uri",
            "relative",
        ),
        (
            code(json!(many)),
            "invalid_redirect_uri",
            "too many redirect URIs",
        ),
        (
            code(json!([format!("https://app.example/{}", "a".repeat(2100))])),
            "invalid_redirect_uri",
            "oversized redirect URI",
        ),
        (
            code(json!("https://app.example/cb")),
            "invalid_redirect_uri",
            "redirect_uris a string",
        ),
        (
            code(json!([7])),
            "invalid_redirect_uri",
            "redirect_uris of numbers",
        ),
        (
            json!({"client_name": "no uris"}),
            "invalid_redirect_uri",
            "code flow without redirect URIs",
        ),
        (
            with("post_logout_redirect_uris", json!(["javascript:x"])),
            "invalid_redirect_uri",
            "post-logout javascript:",
        ),
        (
            with("grant_types", json!(["implicit"])),
            "invalid_client_metadata",
            "implicit grant",
        ),
        (
            with("grant_types", json!(["password"])),
            "invalid_client_metadata",
            "password grant",
        ),
        (
            with(
                "grant_types",
                json!(["urn:ietf:params:oauth:grant-type:device_code"]),
            ),
            "invalid_client_metadata",
            "unknown grant",
        ),
        (
            with("grant_types", json!("authorization_code")),
            "invalid_client_metadata",
            "grant_types a string",
        ),
        (
            with(
                "grant_types",
                json!(["authorization_code", "client_credentials"]),
            ),
            "invalid_client_metadata",
            "two grants",
        ),
        (
            with("response_types", json!(["token"])),
            "invalid_client_metadata",
            "response type token",
        ),
        (
            with("response_types", json!(["code id_token"])),
            "invalid_client_metadata",
            "hybrid response type",
        ),
        (
            with("token_endpoint_auth_method", json!("private_key_jwt")),
            "invalid_client_metadata",
            "private_key_jwt",
        ),
        (
            with("token_endpoint_auth_method", json!("tls_client_auth")),
            "invalid_client_metadata",
            "tls_client_auth",
        ),
        (
            with("token_endpoint_auth_method", json!(1)),
            "invalid_client_metadata",
            "auth method a number",
        ),
        (
            with("scope", json!("introspection")),
            "invalid_client_metadata",
            "introspection scope",
        ),
        (
            with("scope", json!("read ssf.read")),
            "invalid_client_metadata",
            "revocation stream scope",
        ),
        (
            with("scope", json!("admin")),
            "invalid_client_metadata",
            "undeclared scope",
        ),
        (
            with("scope", json!(["read"])),
            "invalid_client_metadata",
            "scope a list",
        ),
        (
            with("client_name", json!("x".repeat(300))),
            "invalid_client_metadata",
            "oversized name",
        ),
        (
            with("client_name", json!({"en": "x"})),
            "invalid_client_metadata",
            "name an object",
        ),
        (
            with("client_name", json!("bad\u{0000}name")),
            "invalid_client_metadata",
            "NUL in name",
        ),
        (
            with("client_name", json!("evil\u{202E}txt.exe")),
            "invalid_client_metadata",
            "bidi override in name",
        ),
        (
            with("client_uri", json!("javascript:alert(1)")),
            "invalid_client_metadata",
            "client_uri javascript:",
        ),
        (
            with("logo_uri", json!("http://app.example/logo.png")),
            "invalid_client_metadata",
            "logo_uri http",
        ),
        (
            with("contacts", json!(vec!["a@example.com"; 11])),
            "invalid_client_metadata",
            "too many contacts",
        ),
        (
            with("id_token_signed_response_alg", json!("none")),
            "invalid_client_metadata",
            "alg none",
        ),
        (
            with("id_token_signed_response_alg", json!("HS256")),
            "invalid_client_metadata",
            "alg HS256",
        ),
        (
            json!({"grant_types": ["client_credentials"], "token_endpoint_auth_method": "none"}),
            "invalid_client_metadata",
            "public client_credentials",
        ),
        (
            json!({"grant_types": ["client_credentials"], "redirect_uris": ["https://a.example/cb"]}),
            "invalid_redirect_uri",
            "client_credentials with redirect URIs",
        ),
    ];
    for (body, code, what) in &cases {
        let reply = register(&server, Some(token), body).await;
        assert_refused(&reply, 400, code, what);
        assert_eq!(reply.headers["cache-control"], "no-store", "{what}");
    }
    // Bodies that are not a JSON object, or not JSON at all.
    let http = reqwest::Client::new();
    let url = format!("{}/o/register", server.base_url);
    let raw = |content_type: &str, body: Vec<u8>| {
        http.post(&url)
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body)
    };
    for (request, what) in [
        (raw("application/json", b"[1, 2]".to_vec()), "an array"),
        (raw("application/json", b"\"text\"".to_vec()), "a string"),
        (raw("application/json", b"42".to_vec()), "a number"),
        (raw("application/json", b"null".to_vec()), "null"),
        (
            raw("application/json", b"{\"redirect_uris\": [".to_vec()),
            "truncated JSON",
        ),
        (
            raw("application/json", vec![0xff, 0xfe, b'{', b'}']),
            "not UTF-8",
        ),
        (raw("application/json", b"".to_vec()), "empty body"),
        (raw("text/plain", b"{}".to_vec()), "text/plain"),
        (
            raw(
                "application/x-www-form-urlencoded",
                b"redirect_uris=https://a.example/cb".to_vec(),
            ),
            "a form",
        ),
        (
            raw(
                "application/json",
                format!("{{\"client_name\": \"{}\"}}", "x".repeat(20_000)).into_bytes(),
            ),
            "oversized body",
        ),
        (http.post(&url).bearer_auth(token), "no content type"),
    ] {
        let reply = send(request).await;
        assert_refused(&reply, 400, "invalid_client_metadata", what);
    }
    assert_eq!(application_count(&store).await, 0, "nothing stored");
    // A body bigger than the server's whole request limit is refused before it is read, still
    // with an RFC 7591 body or the server's 413, never a 500.
    let reply = send(raw("application/json", vec![b' '; 3 << 20])).await;
    assert!(matches!(reply.status, 400 | 413), "{}", reply.status);
}

/// More than [`authserver::throttle::MAX_REGISTRATIONS_PER_ADDRESS`] registrations from one
/// address within the window: 429 with `Retry-After`, nothing stored.
#[tokio::test]
async fn registrations_are_rate_limited_per_address() {
    let store = testing::store().await;
    let server = server(&store, DynamicRegistration::Open).await;
    let limit = authserver::throttle::MAX_REGISTRATIONS_PER_ADDRESS as usize;
    for i in 0..limit {
        let reply = register(&server, None, &public_client()).await;
        assert_eq!(reply.status, 201, "registration {i}: {}", reply.body);
    }
    let reply = register(&server, None, &public_client()).await;
    assert_refused(&reply, 429, "too_many_requests", "over the limit");
    assert!(reply.headers.contains_key("retry-after"));
    assert_eq!(application_count(&store).await, limit);
}

/// An operator sees a registered client marked in the views and deletes it there: its tokens
/// stop working, as any deleted application's.
#[tokio::test]
async fn operators_see_registered_clients_and_revoke_them_in_the_views() {
    let store = testing::store().await;
    support::staff(&store, "root", "operator-pass", true).await;
    let server = server(&store, DynamicRegistration::InitialAccessToken).await;
    let token = "views-initial-access-token-0123456789abcdef";
    issue(&store, token, now() + 3600, Some(1)).await;
    let reply = register(&server, Some(token), &service_client()).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let client_id = reply.body["client_id"].as_str().unwrap().to_owned();
    let secret = reply.body["client_secret"].as_str().unwrap().to_owned();
    let http = support::browser_client();
    let access = send(
        http.post(format!("{}/o/token/", server.base_url))
            .basic_auth(&client_id, Some(&secret))
            .form(&[("grant_type", "client_credentials"), ("scope", "read")]),
    )
    .await;
    let access = access.body["access_token"].as_str().unwrap().to_owned();
    let (introspector, introspector_secret) = testing::application(
        &store,
        authserver::store::GrantType::ClientCredentials,
        true,
    )
    .await;
    let active = |token: String| {
        let http = http.clone();
        let (url, id, secret) = (
            format!("{}/o/introspect/", server.base_url),
            introspector.clone(),
            introspector_secret.clone(),
        );
        async move {
            let reply = send(
                http.post(url)
                    .basic_auth(id, Some(secret))
                    .form(&[("token", token.as_str())]),
            )
            .await;
            reply.body["active"] == true
        }
    };
    assert!(active(access.clone()).await);

    // Sign in as the superuser.
    let base = &server.base_url;
    let login = http
        .get(format!("{base}/accounts/login/"))
        .send()
        .await
        .unwrap();
    let csrf_cookie = cookie(&login, "tokengate_csrf");
    let page = login.text().await.unwrap();
    let reply = http
        .post(format!("{base}/accounts/login/"))
        .header("cookie", &csrf_cookie)
        .form(&[
            ("csrf_token", hidden(&page, "csrf_token").as_str()),
            ("username", "root"),
            ("password", "operator-pass"),
            ("next", ""),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 303);
    let session = cookie(&reply, "tokengate_session");
    let list = http
        .get(format!("{base}/o/applications/"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let row = list
        .split("<tr>")
        .find(|row| row.contains(&client_id))
        .expect("the registered client is listed");
    assert!(row.contains("dynamically registered"), "{row}");
    let operator_row = list
        .split("<tr>")
        .find(|row| row.contains(&introspector))
        .expect("the operator's application is listed");
    assert!(!operator_row.contains("dynamically registered"));
    let app = store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap();
    let detail = http
        .get(format!("{base}/o/applications/{}/", app.id))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(detail.contains("id=\"dynamic\""), "{detail}");
    let delete_page = http
        .get(format!("{base}/o/applications/{}/delete/", app.id))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let reply = http
        .post(format!("{base}/o/applications/{}/delete/", app.id))
        .header("cookie", &session)
        .form(&[("csrf_token", hidden(&delete_page, "csrf_token").as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 303);
    assert!(!active(access).await, "its token is revoked");
    let reply = send(
        http.post(format!("{base}/o/token/"))
            .basic_auth(&client_id, Some(&secret))
            .form(&[("grant_type", "client_credentials")]),
    )
    .await;
    assert_eq!(reply.status, 401, "{}", reply.body);
}

/// The `name=value` of the cookie `name` a reply sets.
fn cookie(reply: &reqwest::Response, name: &str) -> String {
    reply
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no {name} cookie"))
        .to_owned()
}

/// The value of the hidden field `name` of a page.
fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker).expect("the hidden field") + marker.len();
    let end = page[start..].find('"').unwrap() + start;
    page[start..end].to_owned()
}

/// Authlib, a client nobody here wrote: registers a confidential client with an initial access
/// token (RFC 7591), reads it back (RFC 7592), and uses it with Authlib's OAuth2Session for
/// client credentials (`tests/dcr_client.py`). Skipped without python3 + authlib + requests,
/// unless `CI` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authlib_registers_a_client_and_uses_it() {
    let found = std::process::Command::new("python3")
        .args(["-c", "import authlib, requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").is_err(),
            "CI must install authlib, requests"
        );
        eprintln!("SKIPPED: pip install authlib requests");
        return;
    }
    let store = testing::store().await;
    let mut settings = Settings::for_tests("unused");
    settings.dynamic_registration = DynamicRegistration::InitialAccessToken;
    // The issuer is the server's own address, so that the announced endpoints are reachable.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    settings.issuer = format!("http://{addr}");
    settings.access_token_audience = settings.issuer.clone();
    let server = testing::spawn_server(store.clone(), settings, addr).await;
    let token = "authlib-initial-access-token-0123456789abcdef";
    issue(&store, token, now() + 3600, Some(1)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dcr_client.py");
    let mut command = std::process::Command::new("python3");
    command.args([script, &server.base_url, token]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "dcr_client.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let client_id = summary["client_id"].as_str().unwrap();
    assert_eq!(summary["read_back"]["client_id"], client_id);
    assert_eq!(summary["token"]["token_type"], "Bearer");
    assert_eq!(summary["token"]["scope"], "read");
    assert_eq!(summary["deleted"], 204);
    assert!(
        store
            .find_application_by_client_id(client_id)
            .await
            .unwrap()
            .is_none(),
        "deleted with RFC 7592"
    );
    server.stop().await;
}
