//! The revocation stream's transmitter (issue 24, items 1 and 2), on SQLite and PostgreSQL:
//! every change that ends tokens yields its SET with the right subject, verified by PyJWT
//! against the JWKS; the JWT's `jti` and the introspection answer's are the family's, as is the
//! event's; long polls woken within well under a second (across two replicas on PostgreSQL);
//! acknowledgements and redelivery; a lost notification delivered at the poll's timeout; the
//! wrong caller, scope and stream refused; a replica killed while holding a poll loses nothing,
//! and a receiver given both replicas resumes its stream on the other.

mod support;

use authserver::config::{AccessTokenFormat, Settings};
use authserver::store::{ApplicationInput, CodeOutcome, GrantType, NewCode, Store, UserUpdate};
use authserver::testing::{self, RunningServer};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ISSUER: &str = "http://127.0.0.1:8000";
const SESSION_REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
const CREDENTIAL_CHANGE: &str =
    "https://schemas.openid.net/secevent/caep/event-type/credential-change";
const KEY_WITHDRAWN: &str = "urn:tokengate:secevent:signing-key-withdrawn";
const STREAM_SCOPES: &str = "ssf.read ssf.manage";

/// An HTTP client of one authserver: tokens, streams, polls.
struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    fn new(base: &str) -> Client {
        Client {
            base: base.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    async fn form(
        &self,
        path: &str,
        client: &(String, String),
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        let reply = self
            .http
            .post(format!("{}{path}", self.base))
            .basic_auth(&client.0, Some(&client.1))
            .form(form)
            .send()
            .await
            .unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.unwrap_or(Value::Null))
    }

    /// A client-credentials access token of `scope`.
    async fn token(&self, client: &(String, String), scope: &str) -> String {
        let (status, body) = self
            .form(
                "/o/token/",
                client,
                &[("grant_type", "client_credentials"), ("scope", scope)],
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let reply = request.send().await.unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.unwrap_or(Value::Null))
    }

    /// A new poll stream: its id.
    async fn create_stream(&self, token: &str) -> String {
        let (status, stream) = self
            .call(
                reqwest::Method::POST,
                "/ssf/stream",
                Some(token),
                Some(json!({"delivery": {"method": "urn:ietf:rfc:8936"}})),
            )
            .await;
        assert_eq!(status, 201, "{stream}");
        stream["stream_id"].as_str().unwrap().to_owned()
    }

    async fn poll(&self, stream_id: &str, token: &str, request: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            &format!("/ssf/poll/{stream_id}"),
            Some(token),
            Some(request),
        )
        .await
    }

    /// The pending SETs, at once, not acknowledged: (jti, SET) in order.
    async fn pending(&self, stream_id: &str, token: &str) -> Vec<(String, String)> {
        let (status, reply) = self
            .poll(
                stream_id,
                token,
                json!({"returnImmediately": true, "maxEvents": 100}),
            )
            .await;
        assert_eq!(status, 200, "{reply}");
        sets_of(&reply)
    }
}

/// The SETs of a poll answer, in event order.
fn sets_of(reply: &Value) -> Vec<(String, String)> {
    let mut sets: Vec<(String, String)> = reply["sets"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(jti, set)| (jti.clone(), set.as_str().unwrap().to_owned()))
        .collect();
    sets.sort_by_key(|(jti, _)| jti.split('.').next().unwrap().parse::<i64>().unwrap());
    sets
}

/// The SET ids of (jti, SET) pairs (a SET sent again is signed again: its `iat` may differ).
fn jtis(sets: &[(String, String)]) -> Vec<&str> {
    sets.iter().map(|(jti, _)| jti.as_str()).collect()
}

fn payload(jwt: &str) -> Value {
    let part = jwt.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

/// (event type, sub_id) of a SET.
fn event_of(set: &str) -> (String, Value) {
    let claims = payload(set);
    let events = claims["events"].as_object().unwrap();
    assert_eq!(events.len(), 1, "{claims}");
    let (event_type, body) = events.iter().next().unwrap();
    assert!(body["event_timestamp"].as_i64().unwrap() > 0, "{claims}");
    (event_type.clone(), claims["sub_id"].clone())
}

/// PyJWT's verdict on `sets` against the JWKS at `base`: their claims.
async fn third_party_verify(base: &str, audience: &str, sets: &[String]) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verify_set.py");
    let mut command = Command::new("python3");
    command
        .arg(script)
        .arg(format!("{base}/.well-known/jwks.json"))
        .arg(ISSUER)
        .arg(audience)
        .args(sets);
    let out = tokio::task::spawn_blocking(move || command.output().expect("run python3"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "PyJWT refused a SET: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn settings(poll_timeout: i64) -> Settings {
    let mut settings = Settings::for_tests("unused");
    settings.ssf_poll_timeout = poll_timeout;
    // The push receivers of these tests listen on loopback.
    settings.ssf_push_networks = authserver::client_ip::IpRange::loopback();
    settings
}

async fn start(store: &Store, poll_timeout: i64) -> RunningServer {
    testing::spawn_server(
        store.clone(),
        settings(poll_timeout),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
}

/// A receiver's application (allowed to introspect and the revocation stream), a token of both
/// stream scopes, and a new stream.
async fn receiver(store: &Store, client: &Client) -> ((String, String), String, String) {
    let app = testing::application(store, GrantType::ClientCredentials, true).await;
    let token = client.token(&app, STREAM_SCOPES).await;
    let stream = client.create_stream(&token).await;
    (app, token, stream)
}

fn input(app: &authserver::store::Application) -> ApplicationInput {
    ApplicationInput {
        name: app.name.clone(),
        client_type: app.client_type,
        grant_type: app.grant_type,
        redirect_uris: app.redirect_uris.clone(),
        allowed_scopes: app.allowed_scopes.clone(),
        may_introspect: app.may_introspect,
        may_use_ssf: app.may_use_ssf,
        pkce_required: app.pkce_required,
        token_format: app.token_format,
    }
}

async fn app_of(store: &Store, client: &(String, String)) -> authserver::store::Application {
    store
        .find_application_by_client_id(&client.0)
        .await
        .unwrap()
        .unwrap()
        .as_ref()
        .clone()
}

#[tokio::test]
async fn every_change_that_ends_tokens_is_a_verified_set_with_its_subject() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (receiver_app, token, stream) = receiver(&store, &client).await;
        let mut expected: Vec<(&str, Value)> = Vec::new();

        // A password-grant application issuing JWTs, and users.
        let password_app = testing::application(&store, GrantType::Password, false).await;
        let app = app_of(&store, &password_app).await;
        let mut jwt_input = input(&app);
        jwt_input.token_format = Some(AccessTokenFormat::Jwt);
        store.update_application(app.id, &jwt_input).await.unwrap();
        let alice = testing::user(&store, "alice", "wonderland").await;
        let login = [
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "wonderland"),
        ];
        let alice_sub = json!({"format": "iss_sub", "iss": ISSUER, "sub": alice.id.to_string()});

        // RFC 7009 revocation of a JWT: the event's jti is the JWT's and the introspection's.
        let (status, issued) = client.form("/o/token/", &password_app, &login).await;
        assert_eq!(status, 200, "{issued}");
        let jwt = issued["access_token"].as_str().unwrap();
        let jwt_jti = payload(jwt)["jti"].as_str().unwrap().to_owned();
        let (status, introspected) = client
            .form("/o/introspect/", &receiver_app, &[("token", jwt)])
            .await;
        assert_eq!(status, 200);
        assert_eq!(introspected["active"], true, "{introspected}");
        assert_eq!(introspected["jti"], jwt_jti.as_str(), "{backend:?}");
        assert!(introspected["iat"].as_i64().is_some());
        let (status, _) = client
            .form("/o/revoke_token/", &password_app, &[("token", jwt)])
            .await;
        assert_eq!(status, 200);
        expected.push((
            SESSION_REVOKED,
            json!({"format": "jwt_id", "iss": ISSUER, "jti": jwt_jti}),
        ));

        // Refresh-token reuse: the family of the refresh token.
        let (_, issued) = client.form("/o/token/", &password_app, &login).await;
        let family_jti = payload(issued["access_token"].as_str().unwrap())["jti"].clone();
        let refresh = issued["refresh_token"].as_str().unwrap();
        let form = [("grant_type", "refresh_token"), ("refresh_token", refresh)];
        let (status, refreshed) = client.form("/o/token/", &password_app, &form).await;
        assert_eq!(status, 200, "{refreshed}");
        // The rotated token continues the family: same jti.
        assert_eq!(
            payload(refreshed["access_token"].as_str().unwrap())["jti"],
            family_jti
        );
        let (status, _) = client.form("/o/token/", &password_app, &form).await;
        assert_eq!(status, 400);
        expected.push((
            SESSION_REVOKED,
            json!({"format": "jwt_id", "iss": ISSUER, "jti": family_jti}),
        ));

        // Authorization-code reuse: the family the code's tokens go into.
        let code = store
            .issue_code(&NewCode {
                application_id: app.id,
                user_id: alice.id,
                redirect_uri: "https://rp.example/cb".into(),
                scope: "read".into(),
                code_challenge: None,
                lifetime: 60,
                nonce: None,
                auth_time: None,
                amr: None,
                resource: None,
                session_key: None,
                dpop_jkt: None,
            })
            .await
            .unwrap();
        let CodeOutcome::Claimed(record) = store.claim_code(&code).await.unwrap() else {
            panic!("the first use claims the code");
        };
        assert!(matches!(
            store.claim_code(&code).await.unwrap(),
            CodeOutcome::Reused
        ));
        let code_jti = authserver::store::family_jti(&record.family);
        expected.push((
            SESSION_REVOKED,
            json!({"format": "jwt_id", "iss": ISSUER, "jti": code_jti}),
        ));

        // Password reset, then deactivation: the user, by the sub tokens carry.
        assert!(store.set_password(alice.id, "looking-glass").await.unwrap());
        expected.push((CREDENTIAL_CHANGE, alice_sub.clone()));
        let deactivate = UserUpdate {
            is_active: Some(false),
            ..Default::default()
        };
        store
            .update_user(alice.id, &deactivate)
            .await
            .unwrap()
            .unwrap();
        expected.push((SESSION_REVOKED, alice_sub.clone()));

        // Consent withdrawn: the user and the application.
        let bob = testing::user(&store, "bob", "builder").await;
        store
            .remember_consent(bob.id, app.id, "read")
            .await
            .unwrap();
        assert!(store.revoke_authorization(bob.id, app.id).await.unwrap());
        expected.push((
            SESSION_REVOKED,
            json!({"format": "complex",
                   "user": {"format": "iss_sub", "iss": ISSUER, "sub": bob.id.to_string()},
                   "application": {"format": "opaque", "id": password_app.0}}),
        ));

        // User deleted.
        assert!(store.delete_user(bob.id).await.unwrap());
        expected.push((
            SESSION_REVOKED,
            json!({"format": "iss_sub", "iss": ISSUER, "sub": bob.id.to_string()}),
        ));

        // A secret rotation does not end tokens (they stay valid): no event. An application
        // losing a scope, then the introspection permission, then deleted: the application.
        let service = testing::application(&store, GrantType::ClientCredentials, true).await;
        let service_app = app_of(&store, &service).await;
        store
            .regenerate_secret(service_app.id, std::time::Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        let mut narrowed = input(&service_app);
        narrowed.allowed_scopes = vec!["read".into(), "introspection".into()];
        store
            .update_application(service_app.id, &narrowed)
            .await
            .unwrap();
        // Unchanged: no event.
        store
            .update_application(service_app.id, &narrowed)
            .await
            .unwrap();
        let service_sub = json!({"format": "opaque", "id": service.0});
        expected.push((SESSION_REVOKED, service_sub.clone()));
        narrowed.may_introspect = false;
        store
            .update_application(service_app.id, &narrowed)
            .await
            .unwrap();
        expected.push((SESSION_REVOKED, service_sub.clone()));
        assert!(store.delete_application(service_app.id).await.unwrap());
        expected.push((SESSION_REVOKED, service_sub));

        // A signing key withdrawn (one not yet signing, so the SETs stay verifiable).
        let keys = store.signing_keys().await.unwrap();
        let generation = keys.iter().map(|k| k.generation).max().unwrap() + 1;
        let spare = authserver::jwt::keys::generate(generation, 0, i64::MAX / 2).unwrap();
        assert!(store.add_signing_key(&spare).await.unwrap());
        assert!(store.delete_signing_key(&spare.kid).await.unwrap());
        expected.push((KEY_WITHDRAWN, json!({"format": "opaque", "id": spare.kid})));

        let sets = client.pending(&stream, &token).await;
        let got: Vec<(String, Value)> = sets.iter().map(|(_, set)| event_of(set)).collect();
        let want: Vec<(String, Value)> = expected
            .iter()
            .map(|(t, s)| (t.to_string(), s.clone()))
            .collect();
        assert_eq!(got, want, "{backend:?}");
        let key_event = payload(&sets.last().unwrap().1);
        assert_eq!(
            key_event["events"][KEY_WITHDRAWN]["kid"],
            spare.kid.as_str()
        );
        let password_event = payload(&sets[3].1);
        assert_eq!(
            password_event["events"][CREDENTIAL_CHANGE],
            json!({"event_timestamp": password_event["events"][CREDENTIAL_CHANGE]["event_timestamp"],
                   "credential_type": "password", "change_type": "update"})
        );

        // An independent verifier accepts every SET against the JWKS, for this receiver.
        let tokens: Vec<String> = sets.iter().map(|(_, set)| set.clone()).collect();
        let verified = third_party_verify(&server.base_url, &receiver_app.0, &tokens).await;
        assert_eq!(verified.len(), expected.len());
        for ((jti, _), claims) in sets.iter().zip(&verified) {
            assert_eq!(claims["jti"], jti.as_str());
            assert_eq!(claims["aud"], receiver_app.0.as_str());
        }
        // Another audience is refused.
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verify_set.py");
        let refused = Command::new("python3")
            .arg(script)
            .arg(format!("{}/.well-known/jwks.json", server.base_url))
            .arg(ISSUER)
            .arg("someone-else")
            .arg(&tokens[0])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!refused.success(), "a SET for another audience");
    }
}

#[tokio::test]
async fn acknowledged_sets_are_gone_and_the_others_come_again() {
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (_, token, stream) = receiver(&store, &client).await;
        // Events before the stream was created are not its own.
        assert!(store.revoke_family("before").await.unwrap());
        let stream = {
            let _ = stream;
            client.create_stream(&token).await
        };
        for family in ["one", "two", "three"] {
            assert!(store.revoke_family(family).await.unwrap());
        }
        let first = client.pending(&stream, &token).await;
        assert_eq!(first.len(), 3);
        // Not acknowledged: delivered again, same ids.
        assert_eq!(jtis(&client.pending(&stream, &token).await), jtis(&first));
        // maxEvents 1: the oldest, and more available.
        let (status, one) = client
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": true, "maxEvents": 1}),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(jtis(&sets_of(&one)), jtis(&first[..1]));
        assert_eq!(one["moreAvailable"], true);
        // Acknowledge two (and a made-up id, ignored); the third stays.
        let (status, reply) = client
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": true, "ack": [first[0].0, first[1].0, "99.nope"]}),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(jtis(&sets_of(&reply)), jtis(&first[2..]));
        assert_eq!(reply["moreAvailable"], false);
        // An error reported for a SET acknowledges it as well.
        let (_, reply) = client
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": true,
                       "setErrs": {first[2].0.clone(): {"err": "invalid_key", "description": "test"}}}),
            )
            .await;
        assert_eq!(reply["sets"], json!({}));
        // A second stream of the same client has its own acknowledgements.
        let other = client.create_stream(&token).await;
        assert!(store.revoke_family("four").await.unwrap());
        assert_eq!(client.pending(&other, &token).await.len(), 1);
        assert_eq!(client.pending(&stream, &token).await.len(), 1);
    }
}

/// A poll held by the server is answered within `bound` of `revoke` returning.
async fn woken_within(
    client: &Client,
    stream: &str,
    token: &str,
    revoke: impl std::future::Future<Output = ()>,
    bound: Duration,
) -> Duration {
    let poll = client.poll(stream, token, json!({"returnImmediately": false}));
    let revoke = async {
        // Long enough for the poll to be waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        revoke.await;
        Instant::now()
    };
    let ((status, reply), revoked_at) = tokio::join!(poll, revoke);
    let latency = revoked_at.elapsed();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(sets_of(&reply).len(), 1, "{reply}");
    assert!(latency < bound, "woken after {latency:?}");
    latency
}

#[tokio::test]
async fn a_waiting_poll_is_woken_at_once_by_an_event() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (_, token, stream) = receiver(&store, &client).await;
        let revoke = async {
            assert!(store.revoke_family("woken").await.unwrap());
        };
        let latency =
            woken_within(&client, &stream, &token, revoke, Duration::from_millis(500)).await;
        eprintln!("{backend:?}: poll woken {latency:?} after the revocation");
        // Acknowledged, nothing pending, returnImmediately: an empty answer at once.
        let pending = client.pending(&stream, &token).await;
        let (_, reply) = client
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": true, "ack": [pending[0].0]}),
            )
            .await;
        assert_eq!(reply, json!({"sets": {}, "moreAvailable": false}));
    }
}

/// PostgreSQL, two replicas: a poll held by A is woken by a revocation through B's HTTP API
/// (LISTEN/NOTIFY), well under a second.
#[tokio::test]
async fn a_poll_on_one_replica_is_woken_by_a_revocation_on_the_other() {
    let Some(url) = testing::postgres_schema_url().await else {
        eprintln!("skipped: DATABASE_URL names no PostgreSQL");
        return;
    };
    let (a, b) = (testing::connect(&url).await, testing::connect(&url).await);
    let (server_a, server_b) = (start(&a, 25).await, start(&b, 25).await);
    let (client_a, client_b) = (
        Client::new(&server_a.base_url),
        Client::new(&server_b.base_url),
    );
    let (_, token, stream) = receiver(&a, &client_a).await;
    let holder = testing::application(&a, GrantType::ClientCredentials, false).await;
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let victim = client_b.token(&holder, "read").await;
        let revoke = async {
            let (status, _) = client_b
                .form("/o/revoke_token/", &holder, &[("token", &victim)])
                .await;
            assert_eq!(status, 200);
        };
        latencies.push(
            woken_within(
                &client_a,
                &stream,
                &token,
                revoke,
                Duration::from_millis(500),
            )
            .await,
        );
        let pending = client_a.pending(&stream, &token).await;
        let acks: Vec<&str> = pending.iter().map(|(jti, _)| jti.as_str()).collect();
        client_a
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": true, "ack": acks, "maxEvents": 0}),
            )
            .await;
    }
    latencies.sort();
    eprintln!("PostgreSQL, across replicas: woken after {latencies:?}");
}

/// An event appended without the in-process wake or a notification reaches the waiting poll:
/// on SQLite through the file's change counter, within a second; on PostgreSQL (a lost NOTIFY)
/// at the poll's timeout.
#[tokio::test]
async fn an_event_whose_notification_is_lost_is_delivered_at_the_poll_timeout() {
    for store in testing::all_stores().await {
        let server = start(&store, 2).await;
        let client = Client::new(&server.base_url);
        let (_, token, stream) = receiver(&store, &client).await;
        let started = Instant::now();
        let poll = client.poll(&stream, &token, json!({"returnImmediately": false}));
        let silent_append = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            sqlx::query(
                "INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at)
                 VALUES ('session-revoked', 'iss_sub', '42', 1)",
            )
            .execute(store.pool())
            .await
            .unwrap();
        };
        let ((status, reply), ()) = tokio::join!(poll, silent_append);
        let took = started.elapsed();
        assert_eq!(status, 200);
        assert_eq!(sets_of(&reply).len(), 1, "{reply}");
        assert!(took < Duration::from_secs(4), "{took:?}");
        // On SQLite the change counter woke the poll well before its timeout (2 s). On
        // PostgreSQL the channel is the schema's (the change bus), so no other test's event
        // wakes it; the event comes at the timeout, or sooner if the listener (re)connects
        // (waiting polls then read the log again): the delivery within the timeout is what
        // counts there.
        if store.backend() == authserver::store::Backend::Sqlite {
            assert!(took < Duration::from_millis(1500), "{took:?}");
        }
        // With nothing at all, a poll answers empty at its timeout.
        let acks: Vec<String> = sets_of(&reply).into_iter().map(|(jti, _)| jti).collect();
        let started = Instant::now();
        let (_, reply) = client
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": false, "ack": acks}),
            )
            .await;
        assert_eq!(reply["sets"], json!({}));
        assert!(
            started.elapsed() >= Duration::from_millis(1900),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn the_wrong_caller_scope_or_stream_is_refused() {
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (receiver_app, token, stream) = receiver(&store, &client).await;
        let poll_path = format!("/ssf/poll/{stream}");
        let read_path = format!("/ssf/stream?stream_id={stream}");
        use reqwest::Method;

        // The configuration is public.
        let (status, config) = client
            .call(Method::GET, "/.well-known/ssf-configuration", None, None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(config["spec_version"], "1_0");
        assert_eq!(config["issuer"], ISSUER);
        assert_eq!(
            config["configuration_endpoint"],
            format!("{ISSUER}/ssf/stream")
        );
        assert_eq!(
            config["delivery_methods_supported"],
            json!(["urn:ietf:rfc:8936", "urn:ietf:rfc:8935"])
        );
        assert_eq!(
            config["jwks_uri"],
            format!("{ISSUER}/.well-known/jwks.json")
        );

        // No token, a made-up token: 401 invalid_token.
        for bearer in [None, Some("made-up")] {
            for (method, path) in [
                (Method::POST, poll_path.as_str()),
                (Method::GET, read_path.as_str()),
                (Method::POST, "/ssf/stream"),
                (Method::DELETE, read_path.as_str()),
            ] {
                let (status, body) = client
                    .call(method.clone(), path, bearer, Some(json!({})))
                    .await;
                assert_eq!(
                    (status, body["error"].as_str()),
                    (401, Some("invalid_token")),
                    "{method} {path}"
                );
            }
        }
        // A token of the same application without the stream scopes: 403 insufficient_scope.
        let introspection_only = client.token(&receiver_app, "introspection").await;
        let (status, body) = client
            .call(
                Method::POST,
                &poll_path,
                Some(&introspection_only),
                Some(json!({})),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (403, Some("insufficient_scope"))
        );
        // ssf.read alone may poll and read, not create or delete.
        let read_only = client.token(&receiver_app, "ssf.read").await;
        let (status, _) = client
            .call(Method::GET, &read_path, Some(&read_only), None)
            .await;
        assert_eq!(status, 200);
        for (method, path) in [
            (Method::POST, "/ssf/stream"),
            (Method::DELETE, read_path.as_str()),
        ] {
            let (status, body) = client
                .call(method, path, Some(&read_only), Some(json!({})))
                .await;
            assert_eq!(
                (status, body["error"].as_str()),
                (403, Some("insufficient_scope"))
            );
        }
        // An application not allowed to introspect is not granted the stream scopes.
        let plain = testing::application(&store, GrantType::ClientCredentials, false).await;
        for scope in ["ssf.read", "ssf.manage"] {
            let (status, body) = client
                .form(
                    "/o/token/",
                    &plain,
                    &[("grant_type", "client_credentials"), ("scope", scope)],
                )
                .await;
            assert_eq!(
                (status, body["error"].as_str()),
                (400, Some("invalid_scope"))
            );
        }
        // The permission withdrawn: the scopes its tokens carry no longer count.
        let withdrawn = testing::application(&store, GrantType::ClientCredentials, true).await;
        let withdrawn_token = client.token(&withdrawn, STREAM_SCOPES).await;
        let withdrawn_stream = client.create_stream(&withdrawn_token).await;
        let app = app_of(&store, &withdrawn).await;
        let mut changed = input(&app);
        changed.may_use_ssf = false;
        store.update_application(app.id, &changed).await.unwrap();
        let (status, _) = client
            .poll(
                &withdrawn_stream,
                &withdrawn_token,
                json!({"returnImmediately": true}),
            )
            .await;
        assert_eq!(status, 403);
        // Another receiver's token: 404 for this stream, whatever the call.
        let other = testing::application(&store, GrantType::ClientCredentials, true).await;
        let other_token = client.token(&other, STREAM_SCOPES).await;
        for (method, path) in [
            (Method::POST, poll_path.as_str()),
            (Method::GET, read_path.as_str()),
            (Method::DELETE, read_path.as_str()),
        ] {
            let (status, body) = client
                .call(
                    method.clone(),
                    path,
                    Some(&other_token),
                    Some(json!({"returnImmediately": true})),
                )
                .await;
            assert_eq!(
                (status, body["error"].as_str()),
                (404, Some("not_found")),
                "{method} {path}"
            );
        }
        let (status, _) = client
            .call(
                Method::GET,
                &format!("/ssf/status?stream_id={stream}"),
                Some(&other_token),
                None,
            )
            .await;
        assert_eq!(status, 404);
        // Malformed requests: 400 invalid_request.
        let (status, body) = client
            .call(
                Method::POST,
                &poll_path,
                Some(&token),
                Some(json!({"maxEvents": "ten"})),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_request"))
        );
        let (status, body) = client
            .call(
                Method::POST,
                "/ssf/stream",
                Some(&token),
                Some(json!({"delivery": {"method": "urn:ietf:rfc:8935"}})),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_request"))
        );
        // The owner reads, gets the status of, and deletes its stream; then it is gone.
        let (status, read) = client
            .call(Method::GET, &read_path, Some(&token), None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(read["aud"], receiver_app.0.as_str());
        assert_eq!(
            read["delivery"]["endpoint_url"],
            format!("{ISSUER}/ssf/poll/{stream}")
        );
        let (status, state) = client
            .call(
                Method::GET,
                &format!("/ssf/status?stream_id={stream}"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!((status, state["status"].as_str()), (200, Some("enabled")));
        let (status, _) = client
            .call(Method::DELETE, &read_path, Some(&token), None)
            .await;
        assert_eq!(status, 204);
        let (status, _) = client.poll(&stream, &token, json!({})).await;
        assert_eq!(status, 404);
    }
}

/// The purge deletes events older than its cut-off and streams idle for long.
#[tokio::test]
async fn old_events_and_idle_streams_are_purged() {
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (_, token, stream) = receiver(&store, &client).await;
        assert!(store.revoke_family("old").await.unwrap());
        let now = authserver::store::now();
        assert_eq!(
            store.purge_events(now - 60, now - 60).await.unwrap(),
            (0, 0)
        );
        assert_eq!(client.pending(&stream, &token).await.len(), 1);
        assert_eq!(store.purge_events(now + 1, now - 60).await.unwrap(), (1, 0));
        assert!(client.pending(&stream, &token).await.is_empty());
        assert_eq!(store.purge_events(now + 1, now + 10).await.unwrap(), (0, 1));
        let (status, _) = client.poll(&stream, &token, json!({})).await;
        assert_eq!(status, 404);
    }
}

/// The `authserver` binary serving `db` on a free port, its `ssf_poll_timeout` at 20 s.
async fn serve_binary(db: &str) -> (std::process::Child, String) {
    let port = test_support::free_port();
    let child = support::binary::command(&["serve", "--database-url", db])
        .env("AUTHSERVER_LISTEN", format!("127.0.0.1:{port}"))
        .env("AUTHSERVER_ISSUER", ISSUER)
        .env("AUTHSERVER_SSF_POLL_TIMEOUT", "20")
        .env("AUTHSERVER_PURGE_INTERVAL", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..400 {
        if http
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return (child, base);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
    panic!("the server did not come up");
}

/// Two `authserver` processes on one database. A answers a poll of stream S2 whose SET the
/// receiver never acknowledges, then is killed (SIGKILL) while holding a poll of stream S1;
/// meanwhile B revokes a token. Polled on B, S1 gets the new event and S2 both, none lost.
#[tokio::test]
async fn a_replica_killed_while_holding_a_poll_loses_no_event() {
    for db in testing::all_database_urls().await {
        let store = testing::connect(&db).await;
        let backend = store.backend();
        let (mut a, base_a) = serve_binary(&db).await;
        let (mut b, base_b) = serve_binary(&db).await;
        let (client_a, client_b) = (Client::new(&base_a), Client::new(&base_b));
        let (_, token, s2) = receiver(&store, &client_a).await;
        let holder = testing::application(&store, GrantType::ClientCredentials, false).await;

        let first = client_a.token(&holder, "read").await;
        client_a
            .form("/o/revoke_token/", &holder, &[("token", &first)])
            .await;
        let lost = client_a.pending(&s2, &token).await;
        assert_eq!(lost.len(), 1, "{backend:?}");

        // A holds a poll of S1 (created after the first event: nothing pending).
        let s1 = client_a.create_stream(&token).await;
        let held = tokio::spawn({
            let (s1, token, base_a) = (s1.clone(), token.clone(), base_a.clone());
            async move {
                reqwest::Client::new()
                    .post(format!("{base_a}/ssf/poll/{s1}"))
                    .bearer_auth(token)
                    .json(&json!({"returnImmediately": false}))
                    .send()
                    .await
                    .map(|r| r.status())
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!held.is_finished(), "{backend:?}: the poll is waiting");
        a.kill().unwrap();
        a.wait().unwrap();
        assert!(held.await.unwrap().is_err(), "the held poll died with A");

        let second = client_b.token(&holder, "read").await;
        let (status, _) = client_b
            .form("/o/revoke_token/", &holder, &[("token", &second)])
            .await;
        assert_eq!(status, 200);
        let resumed = client_b.pending(&s1, &token).await;
        assert_eq!(resumed.len(), 1, "{backend:?}");
        let again = client_b.pending(&s2, &token).await;
        assert_eq!(again.len(), 2, "{backend:?}");
        assert_eq!(again[0].0, lost[0].0, "the unacknowledged SET comes again");
        assert_eq!(event_of(&again[1].1), event_of(&resumed[0].1));
        let _ = b.kill();
        let _ = b.wait();
    }
}

/// SSF 1.0 §8.1.1.3-4: PATCH changes the properties given and keeps the others, PUT replaces
/// them all (absent: every event, poll delivery); the stream keeps its position (what is pending
/// stays pending); only the owner with `ssf.manage` may, with the stream named.
#[tokio::test]
async fn a_stream_is_updated_with_patch_and_replaced_with_put() {
    use reqwest::Method;
    for store in testing::all_stores().await {
        let backend = store.backend();
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (app, token, stream) = receiver(&store, &client).await;
        let holder = testing::application(&store, GrantType::ClientCredentials, false).await;
        let revoke = async || {
            let token = client.token(&holder, "read").await;
            client
                .form("/o/revoke_token/", &holder, &[("token", &token)])
                .await;
        };
        revoke().await;

        let (status, updated) = client
            .call(
                Method::PATCH,
                "/ssf/stream",
                Some(&token),
                Some(
                    json!({"stream_id": stream, "events_requested": [CREDENTIAL_CHANGE],
                            "iss": "ignored"}),
                ),
            )
            .await;
        assert_eq!(status, 200, "{backend:?}: {updated}");
        assert_eq!(updated["stream_id"], stream.as_str());
        assert_eq!(updated["events_delivered"], json!([CREDENTIAL_CHANGE]));
        assert_eq!(updated["delivery"]["method"], "urn:ietf:rfc:8936");
        let (_, read) = client
            .call(
                Method::GET,
                &format!("/ssf/stream?stream_id={stream}"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(read, updated, "{backend:?}: the update is stored");
        // A session-revoked event is no longer delivered.
        assert!(client.pending(&stream, &token).await.is_empty());

        // PUT without events_requested: every event again; the stream delivers from where it
        // was (the event above was passed over while not asked for, the next one comes).
        let (status, replaced) = client
            .call(
                Method::PUT,
                "/ssf/stream",
                Some(&token),
                Some(json!({"stream_id": stream, "delivery": {"method": "urn:ietf:rfc:8936"}})),
            )
            .await;
        assert_eq!(status, 200, "{replaced}");
        assert_eq!(replaced["events_requested"], json!([]));
        assert!(
            replaced["events_delivered"]
                .as_array()
                .unwrap()
                .contains(&json!(SESSION_REVOKED))
        );
        revoke().await;
        let pending = client.pending(&stream, &token).await;
        assert_eq!(pending.len(), 1, "{backend:?}");
        assert_eq!(event_of(&pending[0].1).0, SESSION_REVOKED);

        // Refused: no stream named, a bad delivery, another client's stream, ssf.read only,
        // no token.
        let other = receiver(&store, &client).await;
        let read_only = client.token(&app, "ssf.read").await;
        for (method, bearer, body, want) in [
            (
                Method::PATCH,
                Some(token.as_str()),
                json!({}),
                (400, "invalid_request"),
            ),
            (
                Method::PUT,
                Some(token.as_str()),
                json!({"stream_id": stream, "delivery": {"method": "urn:example:carrier-pigeon"}}),
                (400, "invalid_request"),
            ),
            (
                Method::PATCH,
                Some(token.as_str()),
                json!({"stream_id": stream, "delivery": {"method": "urn:ietf:rfc:8935",
                                                          "endpoint_url": "file:///etc/passwd"}}),
                (400, "invalid_request"),
            ),
            (
                Method::PATCH,
                Some(other.1.as_str()),
                json!({"stream_id": stream}),
                (404, "not_found"),
            ),
            (
                Method::PUT,
                Some(read_only.as_str()),
                json!({"stream_id": stream}),
                (403, "insufficient_scope"),
            ),
            (
                Method::PATCH,
                None,
                json!({"stream_id": stream}),
                (401, "invalid_token"),
            ),
        ] {
            let (status, reply) = client
                .call(method.clone(), "/ssf/stream", bearer, Some(body.clone()))
                .await;
            assert_eq!(
                (status, reply["error"].as_str().unwrap_or("")),
                want,
                "{method} {body}"
            );
        }
        let (status, _) = client
            .call(Method::PATCH, "/ssf/stream", Some(&token), None)
            .await;
        assert_eq!(status, 400, "no body");
        let (_, read) = client
            .call(
                Method::GET,
                &format!("/ssf/stream?stream_id={stream}"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(read, replaced, "{backend:?}: the refusals changed nothing");
    }
}

/// Waits until `check` holds, for at most `bound`.
async fn until(what: &str, bound: Duration, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A receiver (resource-server's, as the proxy runs it) given both replicas follows its stream
/// on A; A is killed (SIGKILL) while holding its long poll; the receiver turns to B, polls the
/// same stream there (no new stream, no flush) and gets the event revoked through B.
#[tokio::test]
async fn a_receiver_resumes_its_stream_on_the_other_replica_when_its_own_is_killed() {
    use resource_server::ssf::{Receiver, RevocationSettings};
    use std::sync::atomic::Ordering::Relaxed;
    for db in testing::all_database_urls().await {
        let store = testing::connect(&db).await;
        let backend = store.backend();
        let (mut a, base_a) = serve_binary(&db).await;
        let (mut b, base_b) = serve_binary(&db).await;
        let (client_a, client_b) = (Client::new(&base_a), Client::new(&base_b));
        let app = testing::application(&store, GrantType::ClientCredentials, true).await;
        let configuration = |base: &str| format!("{base}/.well-known/ssf-configuration");
        let mut settings = RevocationSettings::new(&configuration(&base_a), &app.0, &app.1);
        settings.replica_urls = vec![configuration(&base_b)];
        let receiver = Receiver::new(settings);
        let m = &receiver.revoked().metrics;
        until("stream created", Duration::from_secs(20), async || {
            m.streams_created.load(Relaxed) == 1
        })
        .await;
        let token = client_b.token(&app, STREAM_SCOPES).await;
        let (_, streams) = client_b
            .call(reqwest::Method::GET, "/ssf/stream", Some(&token), None)
            .await;
        let stream = streams[0]["stream_id"].as_str().unwrap().to_owned();

        let holder = testing::application(&store, GrantType::ClientCredentials, false).await;
        let first = client_a.token(&holder, "read").await;
        client_a
            .form("/o/revoke_token/", &holder, &[("token", &first)])
            .await;
        until("first SET applied", Duration::from_secs(20), async || {
            m.sets_applied.load(Relaxed) == 1
        })
        .await;
        // Its acknowledgement reached A with the next poll, which A now holds.
        until("acknowledged", Duration::from_secs(20), async || {
            client_b.pending(&stream, &token).await.is_empty()
        })
        .await;
        a.kill().unwrap();
        a.wait().unwrap();

        let second = client_b.token(&holder, "read").await;
        let (status, _) = client_b
            .form("/o/revoke_token/", &holder, &[("token", &second)])
            .await;
        assert_eq!(status, 200);
        until(
            "second SET applied via B",
            Duration::from_secs(20),
            async || m.sets_applied.load(Relaxed) == 2,
        )
        .await;
        assert_eq!(
            m.streams_created.load(Relaxed),
            1,
            "{backend:?}: same stream"
        );
        assert_eq!(m.sets_refused.load(Relaxed), 0);
        assert_eq!(receiver.revoked().deny_list_len(), 2, "{backend:?}");
        until("acknowledged on B", Duration::from_secs(20), async || {
            client_b.pending(&stream, &token).await.is_empty()
        })
        .await;
        assert!(receiver.revoked().is_healthy(), "{backend:?}");
        let _ = b.kill();
        let _ = b.wait();
    }
}

/// A server stopping answers its held polls at once instead of draining for their timeout.
#[tokio::test]
async fn a_stopping_server_answers_its_held_polls_at_once() {
    let store = testing::sqlite_store().await;
    let server = start(&store, 25).await;
    let client = Client::new(&server.base_url);
    let (_, token, stream) = receiver(&store, &client).await;
    let held = tokio::spawn(async move {
        client
            .poll(&stream, &token, json!({"returnImmediately": false}))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished());
    let stopping = Instant::now();
    server.stop().await;
    let (status, reply) = held.await.unwrap();
    assert_eq!((status, &reply["sets"]), (200, &json!({})));
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopping.elapsed()
    );
}

/// What a push receiver was sent: (Content-Type, Authorization, body) per request.
type Pushed = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// An RFC 8935 receiver on a loopback port that refuses its first request with `503` and
/// accepts every later one with `202`.
async fn push_receiver() -> (String, Pushed) {
    use axum::http::HeaderMap;
    let pushed: Pushed = Default::default();
    let record = pushed.clone();
    let app = axum::Router::new().route(
        "/events",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let record = record.clone();
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                let mut record = record.lock().unwrap();
                record.push((header("content-type"), header("authorization"), body));
                let status = if record.len() == 1 { 503 } else { 202 };
                axum::http::StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, pushed)
}

/// Waits up to `within` until the receiver has been sent `count` requests.
async fn pushed_count(pushed: &Pushed, count: usize, within: Duration) -> Duration {
    let started = Instant::now();
    while pushed.lock().unwrap().len() < count {
        assert!(
            started.elapsed() < within,
            "{count} pushes not made within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

/// RFC 8935 push: each SET POSTed as `application/secevent+jwt` with the receiver's
/// Authorization header, at once; one not accepted is pushed again later; polling a push
/// stream is refused.
#[tokio::test]
async fn a_push_stream_gets_each_set_posted_and_retried_until_accepted() {
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let app = testing::application(&store, GrantType::ClientCredentials, true).await;
        let token = client.token(&app, STREAM_SCOPES).await;
        let (url, pushed) = push_receiver().await;
        let (status, stream) = client
            .call(
                reqwest::Method::POST,
                "/ssf/stream",
                Some(&token),
                Some(
                    json!({"delivery": {"method": "urn:ietf:rfc:8935", "endpoint_url": url,
                                         "authorization_header": "Bearer receiver-secret"}}),
                ),
            )
            .await;
        assert_eq!(status, 201, "{stream}");
        assert_eq!(
            stream["delivery"],
            json!({"method": "urn:ietf:rfc:8935", "endpoint_url": url})
        );
        let stream_id = stream["stream_id"].as_str().unwrap();
        let (status, body) = client.poll(stream_id, &token, json!({})).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_request"))
        );

        // Refused once (503), pushed again within the retry interval.
        assert!(store.revoke_family("pushed-1").await.unwrap());
        pushed_count(&pushed, 1, Duration::from_secs(1)).await;
        pushed_count(&pushed, 2, Duration::from_secs(8)).await;
        // The next one at once.
        assert!(store.revoke_family("pushed-2").await.unwrap());
        let took = pushed_count(&pushed, 3, Duration::from_secs(1)).await;
        eprintln!(
            "{:?}: pushed {took:?} after the revocation",
            store.backend()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let requests = pushed.lock().unwrap().clone();
        assert_eq!(requests.len(), 3, "an accepted SET is not pushed again");
        for (content_type, authorization, _) in &requests {
            assert_eq!(content_type, "application/secevent+jwt");
            assert_eq!(authorization, "Bearer receiver-secret");
        }
        let sets: Vec<String> = requests[1..].iter().map(|r| r.2.clone()).collect();
        let claims = third_party_verify(&server.base_url, &app.0, &sets).await;
        let families: Vec<&Value> = claims.iter().map(|c| &c["sub_id"]["jti"]).collect();
        assert_eq!(
            families,
            [
                &json!(authserver::store::family_jti("pushed-1")),
                &json!(authserver::store::family_jti("pushed-2"))
            ]
        );
        assert_eq!(payload(&requests[0].2)["jti"], claims[0]["jti"]);
        // Push targets with no http(s) URL are refused.
        for delivery in [
            json!({"method": "urn:ietf:rfc:8935"}),
            json!({"method": "urn:ietf:rfc:8935", "endpoint_url": "file:///etc/passwd"}),
            json!({"method": "urn:example:carrier-pigeon"}),
        ] {
            let (status, _) = client
                .call(
                    reqwest::Method::POST,
                    "/ssf/stream",
                    Some(&token),
                    Some(json!({ "delivery": delivery })),
                )
                .await;
            assert_eq!(status, 400, "{delivery}");
        }
    }
}

/// The status, verification and subject endpoints refuse what the configuration endpoint does:
/// no or a bad token (401), the wrong scope (403), another client's stream (404), a malformed
/// body (400 `invalid_request`, an RFC 6749-shaped JSON error).
#[tokio::test]
async fn status_verification_and_subjects_refuse_the_wrong_caller_scope_stream_and_body() {
    use reqwest::Method;
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (receiver_app, token, stream) = receiver(&store, &client).await;
        let (_, config) = client
            .call(Method::GET, "/.well-known/ssf-configuration", None, None)
            .await;
        for (key, path) in [
            ("status_endpoint", "/ssf/status"),
            ("verification_endpoint", "/ssf/verify"),
            ("add_subject_endpoint", "/ssf/subjects/add"),
            ("remove_subject_endpoint", "/ssf/subjects/remove"),
        ] {
            assert_eq!(config[key], format!("{ISSUER}{path}"), "{key}");
        }
        let subject = json!({"format": "email", "email": "a@example.com"});
        let status_path = format!("/ssf/status?stream_id={stream}");
        // (method, path, a well-formed body, whether it needs ssf.manage)
        let calls: Vec<(Method, &str, Option<Value>, bool)> = vec![
            (Method::GET, status_path.as_str(), None, false),
            (
                Method::POST,
                "/ssf/status",
                Some(json!({"stream_id": stream, "status": "paused"})),
                true,
            ),
            (
                Method::POST,
                "/ssf/verify",
                Some(json!({"stream_id": stream, "state": "s"})),
                false,
            ),
            (
                Method::POST,
                "/ssf/subjects/add",
                Some(json!({"stream_id": stream, "subject": subject, "verified": true})),
                true,
            ),
            (
                Method::POST,
                "/ssf/subjects/remove",
                Some(json!({"stream_id": stream, "subject": subject})),
                true,
            ),
        ];
        let read_only = client.token(&receiver_app, "ssf.read").await;
        let introspection_only = client.token(&receiver_app, "introspection").await;
        let other = testing::application(&store, GrantType::ClientCredentials, true).await;
        let other_token = client.token(&other, STREAM_SCOPES).await;
        for (method, path, body, manage) in &calls {
            let call = async |token: Option<String>| {
                client
                    .call(method.clone(), path, token.as_deref(), body.clone())
                    .await
            };
            for bearer in [None, Some("made-up".to_owned())] {
                let (status, reply) = call(bearer).await;
                assert_eq!(
                    (status, reply["error"].as_str()),
                    (401, Some("invalid_token")),
                    "{method} {path}"
                );
            }
            let wrong_scope = if *manage {
                &read_only
            } else {
                &introspection_only
            };
            let (status, reply) = call(Some(wrong_scope.clone())).await;
            assert_eq!(
                (status, reply["error"].as_str()),
                (403, Some("insufficient_scope")),
                "{method} {path}"
            );
            let (status, reply) = call(Some(other_token.clone())).await;
            assert_eq!(
                (status, reply["error"].as_str()),
                (404, Some("not_found")),
                "{method} {path}"
            );
        }
        // Malformed bodies: 400 invalid_request, with a description; nothing changed.
        let malformed: Vec<(&str, Value)> = vec![
            ("/ssf/status", json!({"stream_id": stream})),
            (
                "/ssf/status",
                json!({"stream_id": stream, "status": "stopped"}),
            ),
            ("/ssf/status", json!({"status": "paused"})),
            (
                "/ssf/status",
                json!({"stream_id": stream, "status": "paused", "reason": "r".repeat(300)}),
            ),
            ("/ssf/verify", json!({"state": "s"})),
            ("/ssf/verify", json!({"stream_id": stream, "state": 7})),
            (
                "/ssf/verify",
                json!({"stream_id": stream, "state": "s".repeat(300)}),
            ),
            ("/ssf/subjects/add", json!({"stream_id": stream})),
            (
                "/ssf/subjects/add",
                json!({"stream_id": stream, "subject": "a@example.com"}),
            ),
            (
                "/ssf/subjects/add",
                json!({"stream_id": stream, "subject": {"format": "email"}}),
            ),
            (
                "/ssf/subjects/add",
                json!({"stream_id": stream, "subject": {"format": "made-up", "id": "x"}}),
            ),
            (
                "/ssf/subjects/add",
                json!({"stream_id": stream, "subject": {"format": "iss_sub", "iss": "i", "sub": 7}}),
            ),
            (
                "/ssf/subjects/add",
                json!({"stream_id": stream, "subject": subject, "verified": "yes"}),
            ),
            (
                "/ssf/subjects/remove",
                json!({"stream_id": stream, "subject": {"format": "opaque"}}),
            ),
        ];
        for (path, body) in malformed {
            let (status, reply) = client
                .call(Method::POST, path, Some(&token), Some(body.clone()))
                .await;
            assert_eq!(
                (status, reply["error"].as_str()),
                (400, Some("invalid_request")),
                "{path} {body}"
            );
            assert!(reply["error_description"].is_string(), "{reply}");
        }
        let not_json = client
            .http
            .post(format!("{}/ssf/verify", client.base))
            .bearer_auth(&token)
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(not_json.status().as_u16(), 400);
        let (_, state) = client
            .call(Method::GET, &status_path, Some(&token), None)
            .await;
        assert_eq!(state, json!({"stream_id": stream, "status": "enabled"}));
        // Well-formed: a subject added (200) and removed (204), of every shape SSF 1.0 has.
        for subject in [
            subject.clone(),
            json!({"format": "iss_sub", "iss": ISSUER, "sub": "42"}),
            json!({"format": "aliases", "identifiers": [{"format": "opaque", "id": "x"}]}),
            json!({"user": {"format": "iss_sub", "iss": ISSUER, "sub": "42"},
                   "application": {"format": "opaque", "id": "app"}}),
        ] {
            let (status, _) = client
                .call(
                    Method::POST,
                    "/ssf/subjects/add",
                    Some(&token),
                    Some(json!({"stream_id": stream, "subject": subject})),
                )
                .await;
            assert_eq!(status, 200, "{subject}");
        }
        assert_eq!(store.stream_subjects(&stream).await.unwrap().len(), 4);
        let (status, _) = client
            .call(
                Method::POST,
                "/ssf/subjects/remove",
                Some(&token),
                Some(json!({"stream_id": stream, "subject": subject})),
            )
            .await;
        assert_eq!(status, 204);
        assert_eq!(store.stream_subjects(&stream).await.unwrap().len(), 3);
        // Subjects filter nothing: every stream delivers every subject.
        assert!(store.revoke_family("all-subjects").await.unwrap());
        assert_eq!(client.pending(&stream, &token).await.len(), 1);
    }
}

/// A verification request (SSF 1.0 §8.1.4.2) yields one verification SET, with the receiver's
/// `state` and the stream as its subject, on that stream alone, delivered like any other event
/// (a waiting poll woken, verified by PyJWT).
#[tokio::test]
async fn a_verification_set_carries_the_state_on_its_own_stream_alone() {
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (receiver_app, token, stream) = receiver(&store, &client).await;
        let bystander = client.create_stream(&token).await;
        let read_only = client.token(&receiver_app, "ssf.read").await;
        let poll = client.poll(&stream, &token, json!({"returnImmediately": false}));
        let verify = client.call(
            reqwest::Method::POST,
            "/ssf/verify",
            Some(&read_only),
            Some(json!({"stream_id": stream, "state": "state with spaces"})),
        );
        let started = Instant::now();
        let ((status, reply), (verified, _)) = tokio::join!(poll, verify);
        assert_eq!(verified, 204);
        assert_eq!(status, 200, "{reply}");
        assert!(started.elapsed() < Duration::from_secs(10), "not woken");
        let sets = sets_of(&reply);
        assert_eq!(sets.len(), 1, "{reply}");
        let claims = payload(&sets[0].1);
        assert_eq!(
            claims["events"],
            json!({"https://schemas.openid.net/secevent/ssf/event-type/verification":
                   {"state": "state with spaces"}})
        );
        assert_eq!(claims["sub_id"], json!({"format": "opaque", "id": stream}));
        let checked =
            third_party_verify(&server.base_url, &receiver_app.0, &[sets[0].1.clone()]).await;
        assert_eq!(checked[0]["jti"], sets[0].0.as_str());
        // Not on the other stream, nor another client's.
        assert!(client.pending(&bystander, &token).await.is_empty());
        // A stream asking only for revocations still gets its verification.
        let (status, narrow) = client
            .call(
                reqwest::Method::POST,
                "/ssf/stream",
                Some(&token),
                Some(json!({"events_requested": [SESSION_REVOKED]})),
            )
            .await;
        assert_eq!(status, 201);
        let narrow = narrow["stream_id"].as_str().unwrap().to_owned();
        let (status, _) = client
            .call(
                reqwest::Method::POST,
                "/ssf/verify",
                Some(&token),
                Some(json!({"stream_id": narrow})),
            )
            .await;
        assert_eq!(status, 204);
        let sets = client.pending(&narrow, &token).await;
        assert_eq!(sets.len(), 1);
        let claims = payload(&sets[0].1);
        assert_eq!(
            claims["events"],
            json!({"https://schemas.openid.net/secevent/ssf/event-type/verification": {}})
        );
    }
}

/// SSF 1.0 §8.1.2: a paused stream holds its events and delivers them once enabled (a waiting
/// poll answered then); a disabled one drops them, and delivers those logged once enabled.
#[tokio::test]
async fn a_paused_stream_holds_its_events_and_a_disabled_one_drops_them() {
    use reqwest::Method;
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (_, token, stream) = receiver(&store, &client).await;
        let set_status = |status: &'static str, reason: Option<&'static str>| {
            let mut body = json!({"stream_id": stream, "status": status});
            if let Some(reason) = reason {
                body["reason"] = reason.into();
            }
            client.call(Method::POST, "/ssf/status", Some(&token), Some(body))
        };
        let status_path = format!("/ssf/status?stream_id={stream}");

        let (status, reply) = set_status("paused", Some("maintenance")).await;
        assert_eq!(status, 200);
        assert_eq!(
            reply,
            json!({"stream_id": stream, "status": "paused", "reason": "maintenance"})
        );
        let (_, read) = client
            .call(Method::GET, &status_path, Some(&token), None)
            .await;
        assert_eq!(read, reply);
        assert!(store.revoke_family("held").await.unwrap());
        assert!(client.pending(&stream, &token).await.is_empty(), "paused");
        // Enabled while a poll waits: the held event is answered, long before the timeout.
        let poll = client.poll(&stream, &token, json!({"returnImmediately": false}));
        let started = Instant::now();
        let ((status, held), (enabled, _)) = tokio::join!(poll, set_status("enabled", None));
        assert_eq!((status, enabled), (200, 200));
        assert!(started.elapsed() < Duration::from_secs(20), "not answered");
        let held = sets_of(&held);
        assert_eq!(held.len(), 1);
        assert_eq!(
            event_of(&held[0].1).1["jti"],
            authserver::store::family_jti("held")
        );
        let (_, reply) = client
            .poll(
                &stream,
                &token,
                json!({"returnImmediately": true, "ack": [held[0].0]}),
            )
            .await;
        assert_eq!(reply["sets"], json!({}));

        let (status, _) = set_status("disabled", None).await;
        assert_eq!(status, 200);
        assert!(store.revoke_family("dropped").await.unwrap());
        assert!(client.pending(&stream, &token).await.is_empty(), "disabled");
        let (_, read) = client
            .call(Method::GET, &status_path, Some(&token), None)
            .await;
        assert_eq!(read, json!({"stream_id": stream, "status": "disabled"}));
        set_status("enabled", None).await;
        assert!(
            client.pending(&stream, &token).await.is_empty(),
            "an event logged while disabled is not kept"
        );
        assert!(store.revoke_family("after").await.unwrap());
        let after = client.pending(&stream, &token).await;
        assert_eq!(after.len(), 1);
        assert_eq!(
            event_of(&after[0].1).1["jti"],
            authserver::store::family_jti("after")
        );
    }
}

/// The stream scopes follow their own permission (`may_use_ssf`), not introspection: granted
/// only with it; a token loses stream access when it is withdrawn (and the application's
/// tokens are announced ended, as for introspection); withdrawing introspection alone leaves
/// the stream.
#[tokio::test]
async fn the_stream_has_its_own_permission() {
    for store in testing::all_stores().await {
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let (_, watcher_token, watcher) = receiver(&store, &client).await;
        let app_with = async |introspect: bool, ssf: bool| {
            let app = testing::application(&store, GrantType::ClientCredentials, true).await;
            let mut changed = input(&app_of(&store, &app).await);
            changed.may_introspect = introspect;
            changed.may_use_ssf = ssf;
            let id = app_of(&store, &app).await.id;
            store.update_application(id, &changed).await.unwrap();
            app
        };
        let scope_answer = async |app: &(String, String), scope: &str| {
            let (status, body) = client
                .form(
                    "/o/token/",
                    app,
                    &[("grant_type", "client_credentials"), ("scope", scope)],
                )
                .await;
            (status, body["error"].as_str().map(str::to_owned))
        };
        // Introspection without the stream: no stream scopes.
        let introspector = app_with(true, false).await;
        assert_eq!(scope_answer(&introspector, "introspection").await.0, 200);
        for scope in ["ssf.read", "ssf.manage"] {
            assert_eq!(
                scope_answer(&introspector, scope).await,
                (400, Some("invalid_scope".to_owned()))
            );
        }
        // The stream without introspection: the stream, no introspection.
        let follower = app_with(false, true).await;
        assert_eq!(
            scope_answer(&follower, "introspection").await,
            (400, Some("invalid_scope".to_owned()))
        );
        let token = client.token(&follower, STREAM_SCOPES).await;
        let stream = client.create_stream(&token).await;
        assert_eq!(client.pending(&stream, &token).await.len(), 0);
        // Withdrawn: 403, and the application's tokens announced ended on other streams.
        client.pending(&watcher, &watcher_token).await;
        let app = app_of(&store, &follower).await;
        let mut changed = input(&app);
        changed.may_use_ssf = false;
        store.update_application(app.id, &changed).await.unwrap();
        let (status, body) = client
            .poll(&stream, &token, json!({"returnImmediately": true}))
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (403, Some("insufficient_scope"))
        );
        let announced: Vec<Value> = client
            .pending(&watcher, &watcher_token)
            .await
            .iter()
            .map(|(_, set)| event_of(set).1)
            .collect();
        assert!(
            announced.contains(&json!({"format": "opaque", "id": follower.0})),
            "{announced:?}"
        );
        // Introspection withdrawn, the stream kept: stream access stays.
        let both = app_with(true, true).await;
        let both_token = client.token(&both, STREAM_SCOPES).await;
        let both_stream = client.create_stream(&both_token).await;
        let app = app_of(&store, &both).await;
        let mut changed = input(&app);
        changed.may_introspect = false;
        store.update_application(app.id, &changed).await.unwrap();
        let (status, _) = client
            .poll(
                &both_stream,
                &both_token,
                json!({"returnImmediately": true}),
            )
            .await;
        assert_eq!(status, 200);
    }
}

/// The receiver (`resource-server`) against this transmitter: it asks for a verification once
/// its stream exists and counts it when it arrives; a paused stream makes it unhealthy (short
/// cache lifetimes) after the next empty poll, and enabled again, healthy.
#[tokio::test]
async fn a_receiver_verifies_its_stream_and_is_unhealthy_while_it_is_paused() {
    use resource_server::ssf::{Receiver, RevocationSettings};
    use std::sync::atomic::Ordering::Relaxed;
    for store in testing::all_stores().await {
        let server = start(&store, 1).await;
        let client = Client::new(&server.base_url);
        let app = testing::application(&store, GrantType::ClientCredentials, true).await;
        let configuration = format!("{}/.well-known/ssf-configuration", server.base_url);
        let receiver = Receiver::new(RevocationSettings::new(&configuration, &app.0, &app.1));
        let revoked = receiver.revoked().clone();
        until("verified", Duration::from_secs(20), async || {
            revoked.metrics.verifications.load(Relaxed) == 1
        })
        .await;
        assert!(revoked.is_healthy(), "{:?}", revoked.health());
        assert_eq!(revoked.metrics.sets_refused.load(Relaxed), 0);
        assert_eq!(revoked.metrics.sets_applied.load(Relaxed), 0);

        let token = client.token(&app, STREAM_SCOPES).await;
        let (_, streams) = client
            .call(reqwest::Method::GET, "/ssf/stream", Some(&token), None)
            .await;
        let stream = streams[0]["stream_id"].as_str().unwrap().to_owned();
        let set_status = async |status: &str| {
            let (code, _) = client
                .call(
                    reqwest::Method::POST,
                    "/ssf/status",
                    Some(&token),
                    Some(json!({"stream_id": stream, "status": status})),
                )
                .await;
            assert_eq!(code, 200);
        };
        set_status("paused").await;
        until(
            "unhealthy while paused",
            Duration::from_secs(20),
            async || {
                revoked.health()
                    == Err("revocation stream unhealthy: the stream is paused or disabled")
            },
        )
        .await;
        assert_eq!(revoked.max_age(), revoked.lifetimes.fallback_ttl);
        set_status("enabled").await;
        until(
            "healthy once enabled",
            Duration::from_secs(20),
            async || revoked.is_healthy(),
        )
        .await;
        drop(receiver);
    }
}

/// Security round 4, the revocation stream's push delivery: a stream whose receiver never
/// answers delays no other stream (each stream is pushed in a task of its own, with its own
/// backoff); a redirect is not followed; without `ssf_push_networks`, push targets on loopback,
/// private and link-local addresses are refused in every spelling.
#[tokio::test]
async fn push_delivery_is_per_stream_follows_no_redirect_and_reaches_no_internal_address() {
    // SQLite: the event rings the pusher in process. (On PostgreSQL the bell is the database's
    // NOTIFY channel, which every other test of this binary rings too; what is measured here,
    // one stream not waiting for another, does not depend on the backend.)
    let store = testing::sqlite_store().await;
    let server = start(&store, 25).await;
    let client = Client::new(&server.base_url);
    let app = testing::application(&store, GrantType::ClientCredentials, true).await;
    let token = client.token(&app, STREAM_SCOPES).await;
    let push_stream = |url: String| {
        let client = &client;
        let token = &token;
        async move {
            let (status, stream) = client
                .call(
                    reqwest::Method::POST,
                    "/ssf/stream",
                    Some(token),
                    Some(json!({"delivery": {"method": "urn:ietf:rfc:8935", "endpoint_url": url}})),
                )
                .await;
            assert_eq!(status, 201, "{stream}");
        }
    };
    // Six black holes: they take the connection and never answer.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_url = format!("http://{}/events", hole.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hole.accept().await {
            held.push(socket);
        }
    });
    for _ in 0..6 {
        push_stream(hole_url.clone()).await;
    }
    // A redirect to a good receiver, and the good receiver itself.
    let (good_url, pushed) = push_receiver().await;
    let redirector = axum::Router::new().route(
        "/events",
        axum::routing::post({
            let to = good_url.clone();
            move || async move { axum::response::Redirect::temporary(&to) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirect_url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirector).await.unwrap() });
    push_stream(redirect_url).await;
    push_stream(good_url).await;

    // The receiver refuses its first push (503) and takes the retry: both within the bound,
    // whatever the black holes do (before: 6 x 5 s in series, then the retry). The bounds leave
    // room for a loaded test machine; in series the first push alone would take 30 s.
    assert!(store.revoke_family("pushed-past-the-holes").await.unwrap());
    let took = pushed_count(&pushed, 1, Duration::from_secs(5)).await;
    eprintln!("first push {took:?} after the revocation, six black holes beside");
    pushed_count(&pushed, 2, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The redirect was not followed: the receiver got the SET twice (503, then 202), never
    // from the redirector's stream.
    assert_eq!(pushed.lock().unwrap().len(), 2);
    drop(server);

    // Internal addresses, as the URL parser reads them too, are refused at creation.
    let strict = testing::spawn_server(
        store.clone(),
        Settings::for_tests("unused"),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let client = Client::new(&strict.base_url);
    for url in [
        "http://127.0.0.1:9/e",
        "http://2130706433/e",
        "http://0x7f.0.0.1/e",
        "http://[::ffff:127.0.0.1]/e",
        "http://[::1]/e",
        "http://10.0.0.8/e",
        "http://192.168.0.1/e",
        "http://169.254.169.254/latest/meta-data",
    ] {
        let (status, body) = client
            .call(
                reqwest::Method::POST,
                "/ssf/stream",
                Some(&token),
                Some(json!({"delivery": {"method": "urn:ietf:rfc:8935", "endpoint_url": url}})),
            )
            .await;
        assert_eq!(status, 400, "{url}: {body}");
        assert_eq!(body["error"], "invalid_request", "{url}");
    }
    // A name is checked where it resolves: localhost reaches nothing.
    let (status, stream) = client
        .call(
            reqwest::Method::POST,
            "/ssf/stream",
            Some(&token),
            Some(json!({"delivery": {"method": "urn:ietf:rfc:8935",
                                     "endpoint_url": "http://localhost:9/e"}})),
        )
        .await;
    assert_eq!(status, 201, "{stream}");
}

/// A client may have at most `MAX_STREAMS_PER_CLIENT` streams (a flood of creations made 300
/// in 0.8 s before); at the limit, its poll streams abandoned for `ABANDONED_AFTER` are
/// deleted to make room, and without any the creation is refused with 429.
#[tokio::test]
async fn a_client_has_a_bounded_number_of_streams() {
    use authserver::store::{ABANDONED_AFTER, MAX_STREAMS_PER_CLIENT};
    for store in testing::all_stores().await {
        for _ in 0..MAX_STREAMS_PER_CLIENT {
            assert!(
                store
                    .create_stream("flood", &[], None)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        assert!(
            store
                .create_stream("flood", &[], None)
                .await
                .unwrap()
                .is_none()
        );
        // Another client is not limited by it.
        assert!(
            store
                .create_stream("other", &[], None)
                .await
                .unwrap()
                .is_some()
        );
        // Through the endpoint: 429.
        let server = start(&store, 25).await;
        let client = Client::new(&server.base_url);
        let app = testing::application(&store, GrantType::ClientCredentials, true).await;
        let token = client.token(&app, STREAM_SCOPES).await;
        sqlx::query("UPDATE ssf_streams SET client_id = $1 WHERE client_id = 'flood'")
            .bind(&app.0)
            .execute(store.pool())
            .await
            .unwrap();
        let (status, body) = client
            .call(
                reqwest::Method::POST,
                "/ssf/stream",
                Some(&token),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 429, "{body}");
        // Abandoned ones make room.
        sqlx::query("UPDATE ssf_streams SET polled_at = polled_at - $1 - 1 WHERE client_id = $2")
            .bind(ABANDONED_AFTER)
            .bind(&app.0)
            .execute(store.pool())
            .await
            .unwrap();
        let (status, body) = client
            .call(
                reqwest::Method::POST,
                "/ssf/stream",
                Some(&token),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ssf_streams WHERE client_id = $1")
            .bind(&app.0)
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(left, 1);
    }
}

/// Security round 4: on SQLite, an event another process appends to the same file (the command
/// line's `user delete`, `user set-password`) wakes the waiting polls within a second, not at
/// their timeout (21-25 s before), so every sidecar hears of it at once.
#[tokio::test]
async fn another_process_event_reaches_a_waiting_poll_on_sqlite_at_once() {
    let url = testing::created_sqlite_url();
    let store = testing::connect(&url).await;
    let server = start(&store, 20).await;
    let client = Client::new(&server.base_url);
    let (_, token, stream_id) = receiver(&store, &client).await;
    let waiting = {
        let client = Client::new(&server.base_url);
        let (token, stream_id) = (token.clone(), stream_id.clone());
        tokio::spawn(async move {
            let asked = Instant::now();
            let (status, reply) = client
                .poll(&stream_id, &token, json!({"returnImmediately": false}))
                .await;
            (status, reply, asked.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another connection to the same file, with a bell of its own, as another process has.
    let other = testing::connect(&url).await;
    let appended = Instant::now();
    assert!(other.revoke_family("revoked-elsewhere").await.unwrap());
    let (status, reply, _) = waiting.await.unwrap();
    let took = appended.elapsed();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(sets_of(&reply).len(), 1, "{reply}");
    assert!(
        took < Duration::from_secs(1),
        "the poll answered {took:?} after the event"
    );
    eprintln!("another process's event reached the waiting poll in {took:?}");
}

/// A server without a key-encryption secret can sign no event: its stream endpoints answer
/// 404 with one explanation (a receiver backs off), not 500 to every poll for ever.
#[tokio::test]
async fn without_a_key_encryption_secret_the_stream_is_off_with_one_clear_answer() {
    let store = Store::connect(&testing::sqlite_url()).await.unwrap();
    let server = start(&store, 25).await;
    let http = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::GET, "/.well-known/ssf-configuration"),
        (reqwest::Method::POST, "/ssf/stream"),
        (reqwest::Method::POST, "/ssf/poll/any"),
    ] {
        let reply = http
            .request(method.clone(), format!("{}{path}", server.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 404, "{method} {path}");
        let body: Value = reply.json().await.unwrap();
        assert_eq!(body["error"], "not_found");
        assert!(
            body["error_description"]
                .as_str()
                .unwrap()
                .contains("no key-encryption secret"),
            "{body}"
        );
    }
    // The rest of the server works.
    let health = http
        .get(format!("{}/healthz", server.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}
