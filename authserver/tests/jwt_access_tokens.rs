//! JWT access tokens (issue 10, the authorization server's half), on SQLite and PostgreSQL:
//! RFC 9068 tokens from every grant, verified by PyJWT and authlib against the JWKS fetched
//! over HTTP; introspection and revocation through the `jti`; tampered, forged and bare-`jti`
//! tokens inactive; key rotation that publishes before it signs; replicas sharing their keys.

use authserver::config::{AccessTokenFormat, Settings};
use authserver::jwt::{KeyRing, rotation};
use authserver::store::{GrantType, Store};
use authserver::{AppState, testing};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use std::time::Duration;

const ISSUER: &str = "http://127.0.0.1:8000";
const AUDIENCE: &str = "https://api.example";

/// A server over `store` on a loopback port, its keys cached for 100 ms (rotation tests wait
/// for the switch, not for the cache).
struct Server {
    base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

enum Auth<'a> {
    Client(&'a (String, String)),
    Bearer(&'a str),
}

impl Server {
    async fn start(store: Store, format: AccessTokenFormat) -> Server {
        Server::start_with(store, format, Duration::from_millis(100)).await
    }

    async fn start_with(store: Store, format: AccessTokenFormat, key_cache: Duration) -> Server {
        let mut settings = Settings::for_tests("unused");
        settings.access_token_format = format;
        settings.access_token_audience = AUDIENCE.into();
        let state = AppState::with_keys(settings, store, KeyRing::with_cache_ttl(key_cache));
        let state = authserver::server::ready(state).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(authserver::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        Server {
            base,
            http: reqwest::Client::new(),
            stop: Some(stop),
        }
    }

    fn jwks_url(&self) -> String {
        format!("{}/.well-known/jwks.json", self.base)
    }

    async fn post(&self, path: &str, auth: Auth<'_>, form: &[(&str, &str)]) -> (u16, Value) {
        let request = self.http.post(format!("{}{path}", self.base)).form(form);
        let request = match auth {
            Auth::Client((id, secret)) => request.basic_auth(id, Some(secret)),
            Auth::Bearer(token) => request.bearer_auth(token),
        };
        let reply = request.send().await.unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (reqwest::header::HeaderMap, Value) {
        let reply = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
        (reply.headers().clone(), reply.json().await.unwrap())
    }

    async fn password_grant(&self, client: &(String, String)) -> (String, String) {
        let (status, body) = self
            .post(
                "/o/token/",
                Auth::Client(client),
                &[
                    ("grant_type", "password"),
                    ("username", "alice"),
                    ("password", "wonderland"),
                ],
            )
            .await;
        assert_eq!(status, 200, "{body}");
        (
            access(&body),
            body["refresh_token"].as_str().unwrap().into(),
        )
    }

    async fn refresh(&self, client: &(String, String), refresh: &str) -> (u16, Value) {
        self.post(
            "/o/token/",
            Auth::Client(client),
            &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
        )
        .await
    }

    async fn client_credentials(&self, client: &(String, String), scope: &str) -> String {
        let (status, body) = self
            .post(
                "/o/token/",
                Auth::Client(client),
                &[("grant_type", "client_credentials"), ("scope", scope)],
            )
            .await;
        assert_eq!(status, 200, "{body}");
        access(&body)
    }

    /// Introspection by the service client (allowed to introspect).
    async fn introspect(&self, clients: &Clients, token: &str) -> Value {
        let (status, body) = self
            .post(
                "/o/introspect/",
                Auth::Client(&clients.service),
                &[("token", token)],
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn kids(&self) -> Vec<String> {
        let (_, jwks) = self.get("/.well-known/jwks.json").await;
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                // Public halves only: the private scalar `d` must never be published.
                let fields: Vec<&str> = k.as_object().unwrap().keys().map(String::as_str).collect();
                assert_eq!(fields, ["alg", "crv", "kid", "kty", "use", "x"], "{k}");
                k["kid"].as_str().unwrap().to_owned()
            })
            .collect()
    }
}

fn access(body: &Value) -> String {
    body["access_token"].as_str().unwrap().to_owned()
}

/// Alice, a password-grant client and a client-credentials client allowed to introspect.
struct Clients {
    alice_id: i64,
    password: (String, String),
    service: (String, String),
}

async fn clients(store: &Store) -> Clients {
    let alice = testing::user(store, "alice", "wonderland").await;
    Clients {
        alice_id: alice.id,
        password: testing::application(store, GrantType::Password, false).await,
        service: testing::application(store, GrantType::ClientCredentials, true).await,
    }
}

/// What PyJWT and authlib make of `tokens`, with the JWKS fetched from `jwks_url`: fails the
/// test unless both verify every token (signature by kid, typ, alg, iss, aud, exp).
async fn third_party_verify(jwks_url: &str, tokens: &[&str]) -> Value {
    let out = run_verifier(jwks_url, tokens).await;
    assert!(
        out.status.success(),
        "third-party verification failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn run_verifier(jwks_url: &str, tokens: &[&str]) -> std::process::Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verify_jwt.py");
    let mut command = std::process::Command::new("python3");
    command
        .arg(script)
        .arg(jwks_url)
        .arg(ISSUER)
        .arg(AUDIENCE)
        .args(tokens);
    tokio::task::spawn_blocking(move || command.output().expect("run python3"))
        .await
        .unwrap()
}

fn segment(token: &str, index: usize) -> Value {
    let part = token.split('.').nth(index).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

fn with_payload(token: &str, payload: &Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(payload).unwrap());
    format!("{}.{payload}.{}", parts[0], parts[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_grant_issues_an_rfc9068_jwt_that_third_party_libraries_verify() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let clients = clients(&store).await;
        let server = Server::start(store, AccessTokenFormat::Jwt).await;
        let (first, refresh) = server.password_grant(&clients.password).await;
        assert!(
            !refresh.contains('.') && refresh.len() == 56,
            "refresh tokens stay opaque"
        );
        let (status, refreshed) = server.refresh(&clients.password, &refresh).await;
        assert_eq!(status, 200, "{refreshed}");
        let user_token = access(&refreshed);
        let service_token = server
            .client_credentials(&clients.service, "read introspection")
            .await;

        let verified =
            third_party_verify(&server.jwks_url(), &[&first, &user_token, &service_token]).await;
        assert_eq!(verified["cache_control"], "public, max-age=300");
        let kids = verified["kids"].as_array().unwrap();
        assert_eq!(kids.len(), 1, "{backend:?}: {verified}");
        let tokens = verified["tokens"].as_array().unwrap();
        for token in tokens {
            assert_eq!(token["header"]["kid"], kids[0]);
            let claims = &token["claims"];
            assert_eq!(claims["iss"], ISSUER);
            assert_eq!(claims["aud"], AUDIENCE);
            assert_eq!(
                claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
                36_000
            );
            // 12-byte nonce, the 56-character stored value sealed, 16-byte tag: base64url.
            assert_eq!(claims["ref"].as_str().unwrap().len(), 112);
            // The family's public id (issue 24).
            assert_eq!(claims["jti"].as_str().unwrap().len(), 32);
        }
        for user in &tokens[..2] {
            let claims = &user["claims"];
            assert_eq!(claims["sub"], clients.alice_id.to_string());
            assert_eq!(claims["username"], "alice");
            assert_eq!(claims["client_id"], clients.password.0.as_str());
            assert_eq!(claims["scope"], "read write groups");
        }
        // A refresh continues the family: the same jti (what revocation events name), another ref.
        assert_eq!(tokens[0]["claims"]["jti"], tokens[1]["claims"]["jti"]);
        assert_ne!(tokens[0]["claims"]["ref"], tokens[1]["claims"]["ref"]);
        assert_ne!(tokens[1]["claims"]["jti"], tokens[2]["claims"]["jti"]);
        let service = &tokens[2]["claims"];
        assert_eq!(service["sub"], clients.service.0.as_str());
        assert_eq!(service["client_id"], clients.service.0.as_str());
        assert_eq!(service["scope"], "read introspection");
        assert!(service.get("username").is_none());

        // Introspection, by client credentials and by the service's own JWT as bearer.
        let claims = &tokens[1]["claims"];
        let by_client = server.introspect(&clients, &user_token).await;
        let (status, by_bearer) = server
            .post(
                "/o/introspect/",
                Auth::Bearer(&service_token),
                &[("token", &user_token)],
            )
            .await;
        assert_eq!(status, 200, "{by_bearer}");
        for reply in [&by_client, &by_bearer] {
            assert_eq!(reply["active"], true, "{backend:?}: {reply}");
            assert_eq!(reply["username"], "alice");
            assert_eq!(reply["sub"], claims["sub"]);
            assert_eq!(reply["client_id"], claims["client_id"]);
            assert_eq!(reply["scope"], claims["scope"]);
            assert_eq!(reply["token_type"], "Bearer");
            let row_exp = reply["exp"].as_i64().unwrap();
            let jwt_exp = claims["exp"].as_i64().unwrap();
            assert!(
                (0..=2).contains(&(row_exp - jwt_exp)),
                "{row_exp} {jwt_exp}"
            );
        }
        let service_reply = server.introspect(&clients, &service_token).await;
        assert_eq!(service_reply["active"], true);
        assert_eq!(service_reply["sub"], clients.service.0.as_str());
        // The refresh spent the first access token: a valid signature does not revive it.
        assert_eq!(
            server.introspect(&clients, &first).await,
            json!({"active": false})
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_forged_and_bare_jti_tokens_are_inactive() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let clients = clients(&store).await;
        let server = Server::start(store.clone(), AccessTokenFormat::Jwt).await;
        let (token, _) = server.password_grant(&clients.password).await;
        assert_eq!(server.introspect(&clients, &token).await["active"], true);
        let inactive = json!({"active": false});

        // The payload widened, the original signature kept.
        let mut payload = segment(&token, 1);
        payload["scope"] = "read write groups introspection".into();
        let tampered = with_payload(&token, &payload);
        assert_eq!(server.introspect(&clients, &tampered).await, inactive);
        // The third-party verifier refuses it too (it can fail).
        let refused = run_verifier(&server.jwks_url(), &[&tampered]).await;
        assert!(!refused.status.success());
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("InvalidSignatureError"),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
        // Another subject with the same jti.
        let mut payload = segment(&token, 1);
        payload["sub"] = "999".into();
        assert_eq!(
            server
                .introspect(&clients, &with_payload(&token, &payload))
                .await,
            inactive
        );
        // One signature byte changed.
        let (rest, signature) = token.rsplit_once('.').unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap();
        bytes[0] ^= 1;
        let bad_signature = format!("{rest}.{}", URL_SAFE_NO_PAD.encode(bytes));
        assert_eq!(server.introspect(&clients, &bad_signature).await, inactive);
        // alg none, same claims.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"at+jwt"}"#),
            token.split('.').nth(1).unwrap()
        );
        assert_eq!(server.introspect(&clients, &none).await, inactive);
        // Signed by a key of ours in name only (our kid, another Ed25519 key).
        let kid = segment(&token, 0)["kid"].as_str().unwrap().to_owned();
        let foreign = authserver::jwt::keys::generate(1, 0, 0).unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.typ = Some("at+jwt".into());
        header.kid = Some(kid);
        let forged = jsonwebtoken::encode(
            &header,
            &segment(&token, 1),
            &jsonwebtoken::EncodingKey::from_ed_der(
                &STANDARD.decode(&foreign.private_key).unwrap(),
            ),
        )
        .unwrap();
        assert_eq!(server.introspect(&clients, &forged).await, inactive);

        // Neither the bare jti (the family's public id) nor the bare ref (the sealed stored value)
        // is a token: not to introspection, not as a bearer, not to revocation.
        let family = segment(&token, 1)["jti"].as_str().unwrap().to_owned();
        assert_eq!(server.introspect(&clients, &family).await, inactive);
        let jti = segment(&token, 1)["ref"].as_str().unwrap().to_owned();
        assert_eq!(
            server.introspect(&clients, &jti).await,
            inactive,
            "{backend:?}"
        );
        let service = server
            .client_credentials(&clients.service, "introspection")
            .await;
        let service_jti = segment(&service, 1)["ref"].as_str().unwrap().to_owned();
        let (status, body) = server
            .post(
                "/o/introspect/",
                Auth::Bearer(&service_jti),
                &[("token", &token)],
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("invalid_token"))
        );
        let (status, _) = server
            .post(
                "/o/revoke_token/",
                Auth::Client(&clients.password),
                &[("token", &jti)],
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(server.introspect(&clients, &token).await["active"], true);
        let (status, _) = server
            .post(
                "/o/revoke_token/",
                Auth::Client(&clients.password),
                &[("token", &tampered)],
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(server.introspect(&clients, &token).await["active"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_and_refresh_rotation_reach_jwts() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let clients = clients(&store).await;
        let server = Server::start(store, AccessTokenFormat::Jwt).await;
        let inactive = json!({"active": false});

        // RFC 7009 with the JWT: the token and its family (its refresh token) are revoked.
        let (token, refresh) = server.password_grant(&clients.password).await;
        let (status, _) = server
            .post(
                "/o/revoke_token/",
                Auth::Client(&clients.password),
                &[("token", &token)],
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(
            server.introspect(&clients, &token).await,
            inactive,
            "{backend:?}"
        );
        let (status, body) = server.refresh(&clients.password, &refresh).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_grant"))
        );

        // Another client's revocation of it changes nothing.
        let (token, refresh) = server.password_grant(&clients.password).await;
        let (status, _) = server
            .post(
                "/o/revoke_token/",
                Auth::Client(&clients.service),
                &[("token", &token)],
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(server.introspect(&clients, &token).await["active"], true);

        // Rotation: the refresh spends the old JWT; reusing the spent refresh token revokes
        // the family, the new JWT included.
        let (status, body) = server.refresh(&clients.password, &refresh).await;
        assert_eq!(status, 200, "{body}");
        let next = access(&body);
        assert_eq!(server.introspect(&clients, &token).await, inactive);
        assert_eq!(server.introspect(&clients, &next).await["active"], true);
        let (status, _) = server.refresh(&clients.password, &refresh).await;
        assert_eq!(status, 400);
        assert_eq!(server.introspect(&clients, &next).await, inactive);
        let next_refresh = body["refresh_token"].as_str().unwrap();
        let (status, _) = server.refresh(&clients.password, next_refresh).await;
        assert_eq!(status, 400, "the whole family is revoked");
    }
}

/// Polls until the Unix clock reaches `at`.
async fn wait_until(at: i64) {
    while authserver::store::now() < at {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_publishes_the_new_key_before_it_signs_and_keeps_the_old_one() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let clients = clients(&store).await;
        let server = Server::start(store.clone(), AccessTokenFormat::Jwt).await;
        let (before, _) = server.password_grant(&clients.password).await;
        let old_kid = segment(&before, 0)["kid"].as_str().unwrap().to_owned();
        assert_eq!(server.kids().await, std::slice::from_ref(&old_kid));

        let rotated = rotation::rotate(&store, 2, 36_000).await.unwrap();
        let new_kid = rotated.key.kid.clone();
        assert_eq!(rotated.key.generation, 2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Published at once, newest first; the old key still signs.
        assert_eq!(
            server.kids().await,
            [new_kid.clone(), old_kid.clone()],
            "{backend:?}"
        );
        let (pending, _) = server.password_grant(&clients.password).await;
        assert_eq!(segment(&pending, 0)["kid"], old_kid.as_str());

        wait_until(rotated.key.signs_from).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (after, _) = server.password_grant(&clients.password).await;
        assert_eq!(segment(&after, 0)["kid"], new_kid.as_str());

        let verified = third_party_verify(&server.jwks_url(), &[&before, &pending, &after]).await;
        assert_eq!(verified["kids"], json!([new_kid, old_kid]));
        for token in [&before, &pending, &after] {
            assert_eq!(server.introspect(&clients, token).await["active"], true);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_on_the_keys_and_accept_each_others_tokens() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        let clients = clients(&a).await;
        let first = Server::start(a.clone(), AccessTokenFormat::Jwt).await;
        let second = Server::start(b, AccessTokenFormat::Jwt).await;
        // Both create the first key on first need, at once: one wins, both publish it.
        let (kids_a, kids_b) = tokio::join!(first.kids(), second.kids());
        assert_eq!(kids_a.len(), 1, "{backend:?}");
        assert_eq!(kids_a, kids_b);
        assert_eq!(a.signing_keys().await.unwrap().len(), 1);

        let (from_a, _) = first.password_grant(&clients.password).await;
        let (from_b, _) = second.password_grant(&clients.password).await;
        assert_eq!(second.introspect(&clients, &from_a).await["active"], true);
        assert_eq!(first.introspect(&clients, &from_b).await["active"], true);
        third_party_verify(&first.jwks_url(), &[&from_b]).await;
        third_party_verify(&second.jwks_url(), &[&from_a]).await;

        // A rotation made through one replica's store reaches both.
        let rotated = rotation::rotate(&a, 1, 36_000).await.unwrap();
        wait_until(rotated.key.signs_from).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for server in [&first, &second] {
            let (token, _) = server.password_grant(&clients.password).await;
            assert_eq!(segment(&token, 0)["kid"], rotated.key.kid.as_str());
            assert_eq!(server.kids().await.len(), 2);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_formats_keeps_earlier_tokens_working() {
    for url in testing::all_database_urls().await {
        let store = authserver::testing::connect(&url).await;
        let clients = clients(&store).await;
        let opaque = Server::start(store.clone(), AccessTokenFormat::Opaque).await;
        // An opaque deployment announces the JWKS but creates no key.
        let (headers, jwks) = opaque.get("/.well-known/jwks.json").await;
        assert_eq!(jwks, json!({"keys": []}));
        assert_eq!(headers["cache-control"], "public, max-age=300");
        let (_, metadata) = opaque.get("/.well-known/oauth-authorization-server").await;
        assert_eq!(
            metadata["jwks_uri"],
            "http://127.0.0.1:8000/.well-known/jwks.json"
        );
        let (old, _) = opaque.password_grant(&clients.password).await;
        assert!(!old.contains('.'));
        assert!(store.signing_keys().await.unwrap().is_empty());

        let jwt = Server::start(
            authserver::testing::connect(&url).await,
            AccessTokenFormat::Jwt,
        )
        .await;
        let (new, _) = jwt.password_grant(&clients.password).await;
        assert_eq!(segment(&new, 0)["typ"], "at+jwt");
        for server in [&opaque, &jwt] {
            assert_eq!(server.introspect(&clients, &old).await["active"], true);
            assert_eq!(server.introspect(&clients, &new).await["active"], true);
            assert_eq!(server.kids().await.len(), 1);
        }
    }
}

#[test]
fn the_keys_commands_list_and_rotate() {
    let db = testing::created_sqlite_url();
    let keys = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_authserver"))
            .env("AUTHSERVER_SECRETS_SYSTEM", testing::TEST_SECRET)
            .arg("keys")
            .args(args)
            .arg("--database-url")
            .arg(&db)
            .env_remove("AUTHSERVER_JWKS_MAX_AGE")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(keys(&["list"]).contains("no signing key yet"));
    // The first key signs at once: no validator can have cached a JWKS without it.
    let first = keys(&["rotate"]);
    assert!(
        first.contains("(generation 1): published now, signing now"),
        "{first}"
    );
    // The default delay: twice the JWKS max-age (300 s) plus the replicas' 10 s cache.
    let second = keys(&["rotate"]);
    assert!(
        second.contains("(generation 2): published now, signing in 610 s"),
        "{second}"
    );
    assert!(!second.contains("warning"), "{second}");
    let third = keys(&["rotate", "--delay", "5"]);
    assert!(third.contains("signing in 5 s"), "{third}");
    assert!(
        third.contains("warning: validators that cached the JWKS"),
        "{third}"
    );
    let listed: Value = serde_json::from_str(&keys(&["list", "--json"])).unwrap();
    let states: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["signing", "pending", "pending"]);
    let text = keys(&["list"]);
    assert!(text.contains("generation 1  signing"), "{text}");
    assert!(
        text.contains("generation 3  pending: published, signs in"),
        "{text}"
    );

    // The key that signs cannot be deleted; a pending (or retired) one can.
    let kid_of = |i: usize| listed[i]["kid"].as_str().unwrap().to_owned();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_authserver"))
        .env("AUTHSERVER_SECRETS_SYSTEM", testing::TEST_SECRET)
        .args(["keys", "delete", &kid_of(0), "--database-url", &db])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("signs new tokens: run `keys rotate` first")
    );
    assert!(keys(&["delete", &kid_of(2)]).contains(&format!("deleted signing key {}", kid_of(2))));
    let left: Value = serde_json::from_str(&keys(&["list", "--json"])).unwrap();
    assert_eq!(left.as_array().unwrap().len(), 2);
    // A kid is base64url and may begin with `-`: still the argument, not an option.
    let dashed = std::process::Command::new(env!("CARGO_BIN_EXE_authserver"))
        .env("AUTHSERVER_SECRETS_SYSTEM", testing::TEST_SECRET)
        .args(["keys", "delete", "-no-such-kid", "--database-url", &db])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&dashed.stderr).trim(),
        "authserver: no signing key -no-such-kid"
    );
    let left_kids: Vec<&str> = left
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(
        left_kids,
        [kid_of(0), kid_of(1)],
        "the key named was the one deleted"
    );

    // A delay that would overflow unix time (and so retire, then delete, the signing key) is
    // refused before anything is written.
    let huge = std::process::Command::new(env!("CARGO_BIN_EXE_authserver"))
        .env("AUTHSERVER_SECRETS_SYSTEM", testing::TEST_SECRET)
        .args([
            "keys",
            "rotate",
            "--delay",
            "9223372036854775807",
            "--database-url",
            &db,
        ])
        .output()
        .unwrap();
    assert!(!huge.status.success());
    assert!(
        String::from_utf8_lossy(&huge.stderr).contains("is not a number of seconds from 0 to"),
        "{}",
        String::from_utf8_lossy(&huge.stderr)
    );
    let after: Value = serde_json::from_str(&keys(&["list", "--json"])).unwrap();
    assert_eq!(after, left, "nothing written, nothing pruned");
}

/// A replica whose copy of the keys is fresh but predates a key created by another replica
/// (the first key, or one rotated with no delay) reads the keys again for the unknown kid
/// instead of calling a valid token inactive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reads_the_keys_again_for_a_kid_it_has_not_seen() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        let clients = clients(&a).await;
        let ttl = authserver::jwt::KEY_CACHE_TTL;
        let stale = Server::start_with(a, AccessTokenFormat::Opaque, ttl).await;
        // The stale replica reads the keys (none yet) and keeps that copy for 10 s...
        assert!(stale.kids().await.is_empty());
        // ...while the other starts, creating the first key, and signs with it.
        let signer = Server::start(b, AccessTokenFormat::Jwt).await;
        let (token, _) = signer.password_grant(&clients.password).await;
        let started = std::time::Instant::now();
        assert_eq!(
            stale.introspect(&clients, &token).await["active"],
            true,
            "{backend:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        // That read refreshed the copy the JWKS is served from as well.
        assert_eq!(stale.kids().await.len(), 1);
    }
}

/// With JWT access tokens the first signing key exists once the server has started, before any
/// token is issued (validators starting early see it); an anonymous JWKS request never creates
/// one; with opaque tokens none is ever created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_key_is_made_at_start_not_by_a_jwks_caller() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let opaque = Server::start(store.clone(), AccessTokenFormat::Opaque).await;
        for _ in 0..3 {
            assert!(opaque.kids().await.is_empty(), "{backend:?}");
        }
        assert!(
            store.signing_keys().await.unwrap().is_empty(),
            "{backend:?}"
        );
        let jwt = Server::start(store.clone(), AccessTokenFormat::Jwt).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while store.signing_keys().await.unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: no key at start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stored = store.signing_keys().await.unwrap();
        assert_eq!(stored.len(), 1, "{backend:?}");
        assert_eq!(jwt.kids().await, [stored[0].kid.clone()], "{backend:?}");
    }
}
