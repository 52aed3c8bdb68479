//! A second, independent SSF transmitter, written from the specs (SSF 1.0 §7.1 configuration and
//! §8.1.1 stream creation, RFC 8936 poll delivery with long polls and acknowledgements, RFC 8417
//! SETs signed with its own Ed25519 key, CAEP events), plus an RFC 6749 client-credentials token
//! endpoint and an RFC 7662 introspection endpoint, on a real HTTP server (axum) on 127.0.0.1:0.
//! It shares no code with the authorization server nor with the receiver (resource-server's and
//! the proxy's revocation tests).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};

pub const SESSION_REVOKED: &str =
    "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
pub const CREDENTIAL_CHANGE: &str =
    "https://schemas.openid.net/secevent/caep/event-type/credential-change";

pub const CLIENT_ID: &str = "receiver-1";
pub const CLIENT_SECRET: &str = "receiver secret with spaces & symbols";
const ACCESS_TOKEN: &str = "ssf-access-token";
pub const KID: &str = "tx-key-1";
/// The key access tokens are signed with (withdrawable).
pub const AT_KID: &str = "at-key-1";
pub const SIGNING_KEY_WITHDRAWN: &str = "urn:tokengate:secevent:signing-key-withdrawn";

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[derive(Default)]
struct StreamState {
    pending: BTreeMap<String, String>,
    /// Every jti acknowledged, and every setErrs entry received (jti, err).
    acked: Vec<String>,
    errors: Vec<(String, String)>,
}

/// How a hostile transmitter answers every poll.
#[derive(Clone, Copy, Debug)]
pub enum HostilePoll {
    /// A SET that is no JWT, new every poll, at once.
    Garbage,
    /// A JSON answer of this many bytes.
    Huge(usize),
}

#[derive(Default)]
struct TxState {
    streams: HashMap<String, StreamState>,
    /// Poll answers 503 while set.
    down: bool,
    /// Every poll answered this way while set.
    hostile: Option<HostilePoll>,
    /// Polls received.
    polls: usize,
    /// RFC 7662 answers by token.
    tokens: HashMap<String, Value>,
}

pub struct Transmitter {
    jwks: Arc<Mutex<Value>>,
    pub url: String,
    pub issuer: String,
    key: SigningKey,
    state: Arc<Mutex<TxState>>,
    wake: Arc<tokio::sync::Notify>,
    next: AtomicUsize,
    pub introspections: Arc<Mutex<HashMap<String, usize>>>,
    pub streams_created: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct App {
    issuer: String,
    state: Arc<Mutex<TxState>>,
    wake: Arc<tokio::sync::Notify>,
    jwks: Arc<Mutex<Value>>,
    hold: Duration,
    introspections: Arc<Mutex<HashMap<String, usize>>>,
    streams_created: Arc<AtomicUsize>,
}

fn key_from_seed(seed: u8) -> SigningKey {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = seed.wrapping_mul(31).wrapping_add(i as u8 * 7 + 1);
    }
    SigningKey::from_bytes(&bytes)
}

impl Transmitter {
    /// Starts the server; a long poll is held `hold` when nothing is pending.
    pub async fn start(hold: Duration) -> Transmitter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let issuer = format!("{url}/tx");
        let key = key_from_seed(1);
        let jwk = |k: &SigningKey, kid: &str| {
            json!({
                "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(k.verifying_key().to_bytes()),
            })
        };
        let jwks = Arc::new(Mutex::new(
            json!({"keys": [jwk(&key, KID), jwk(&key_from_seed(2), AT_KID)]}),
        ));
        let state = Arc::new(Mutex::new(TxState::default()));
        let wake = Arc::new(tokio::sync::Notify::new());
        let introspections = Arc::new(Mutex::new(HashMap::new()));
        let streams_created = Arc::new(AtomicUsize::new(0));
        let app = App {
            issuer: issuer.clone(),
            state: state.clone(),
            wake: wake.clone(),
            jwks: jwks.clone(),
            hold,
            introspections: introspections.clone(),
            streams_created: streams_created.clone(),
        };
        let router = Router::new()
            .route("/.well-known/ssf-configuration", get(configuration))
            .route("/jwks", get(jwks_doc))
            .route("/token", post(token))
            .route("/ssf/stream", post(create_stream))
            .route("/ssf/poll/{id}", post(poll))
            .route("/introspect", post(introspect))
            .with_state(app);
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Transmitter {
            jwks,
            url,
            issuer,
            key,
            state,
            wake,
            next: AtomicUsize::new(1),
            introspections,
            streams_created,
        }
    }

    pub fn configuration_url(&self) -> String {
        format!("{}/.well-known/ssf-configuration", self.url)
    }

    /// Signs a JWS with the transmitter's key (or `key`), header `typ` and `kid`.
    pub fn sign_with(&self, key: &SigningKey, typ: &str, kid: &str, claims: &Value) -> String {
        let header = json!({"alg": "EdDSA", "typ": typ, "kid": kid});
        let message = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = key.sign(message.as_bytes()).to_bytes();
        format!("{message}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    pub fn sign(&self, typ: &str, claims: &Value) -> String {
        self.sign_with(&self.key, typ, KID, claims)
    }

    /// An RFC 9068 access token signed by the transmitter's access-token key (it is the issuer).
    pub fn access_jwt(&self, jti: &str, sub: &str, client: &str, iat: i64) -> String {
        self.sign_with(
            &key_from_seed(2),
            "at+jwt",
            AT_KID,
            &json!({"iss": self.issuer, "aud": "api", "sub": sub, "client_id": client,
                     "jti": jti, "iat": iat, "exp": now() + 3600, "scope": "read"}),
        )
    }

    /// The claims of a SET for one event.
    pub fn set_claims(&self, event: &str, body: Value, sub_id: Value) -> Value {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        json!({"iss": self.issuer, "aud": CLIENT_ID, "iat": now(), "jti": format!("set-{n}"),
               "sub_id": sub_id, "events": {event: body}})
    }

    /// Queues a compact SET (whose claims are `claims`) on every stream and wakes the polls.
    pub fn deliver(&self, claims: &Value, compact: String) {
        let jti = claims["jti"].as_str().unwrap().to_owned();
        let mut s = self.state.lock().unwrap();
        for stream in s.streams.values_mut() {
            stream.pending.insert(jti.clone(), compact.clone());
        }
        drop(s);
        self.wake.notify_waiters();
    }

    /// Emits one event, signed properly; returns the SET's jti.
    pub fn emit(&self, event: &str, body: Value, sub_id: Value) -> String {
        let claims = self.set_claims(event, body, sub_id);
        let set = self.sign("secevent+jwt", &claims);
        self.deliver(&claims, set);
        claims["jti"].as_str().unwrap().to_owned()
    }

    /// Emits an event signed by another key under the transmitter's kid: a forgery.
    pub fn emit_forged(&self, event: &str, body: Value, sub_id: Value) -> String {
        let claims = self.set_claims(event, body, sub_id);
        let set = self.sign_with(&key_from_seed(99), "secevent+jwt", KID, &claims);
        self.deliver(&claims, set);
        claims["jti"].as_str().unwrap().to_owned()
    }

    /// Emits the withdrawal event of the access-token key; with `unpublish`, takes it out of the
    /// JWKS first (else the event alone must do).
    pub fn withdraw_access_key(&self, unpublish: bool) -> String {
        if unpublish {
            let mut jwks = self.jwks.lock().unwrap();
            let keys = jwks["keys"].as_array_mut().unwrap();
            keys.retain(|k| k["kid"] != AT_KID);
        }
        self.emit(
            SIGNING_KEY_WITHDRAWN,
            json!({"kid": AT_KID, "event_timestamp": now()}),
            json!({"format": "opaque", "id": AT_KID}),
        )
    }

    /// Sets what introspection answers for `token`.
    pub fn answer(&self, token: &str, answer: Value) {
        self.state
            .lock()
            .unwrap()
            .tokens
            .insert(token.to_owned(), answer);
    }

    pub fn introspections_of(&self, token: &str) -> usize {
        self.introspections
            .lock()
            .unwrap()
            .get(token)
            .copied()
            .unwrap_or(0)
    }

    /// Polls answer 503 (true) or work again.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
        self.wake.notify_waiters();
    }

    /// Every poll answered as `hostile` says (None: as the specs say).
    pub fn set_hostile(&self, hostile: Option<HostilePoll>) {
        self.state.lock().unwrap().hostile = hostile;
        self.wake.notify_waiters();
    }

    /// Polls received so far.
    pub fn polls(&self) -> usize {
        self.state.lock().unwrap().polls
    }

    /// Every stream forgotten: polls answer 404.
    pub fn lose_streams(&self) {
        self.state.lock().unwrap().streams.clear();
        self.wake.notify_waiters();
    }

    pub fn acked(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.streams.values().flat_map(|st| st.acked.clone()).collect()
    }

    pub fn errors(&self) -> Vec<(String, String)> {
        let s = self.state.lock().unwrap();
        s.streams
            .values()
            .flat_map(|st| st.errors.clone())
            .collect()
    }

    pub fn stream_count(&self) -> usize {
        self.state.lock().unwrap().streams.len()
    }
}

async fn configuration(State(app): State<App>) -> Json<Value> {
    let base = app.issuer.trim_end_matches("/tx").to_owned();
    Json(json!({
        "spec_version": "1_0",
        "issuer": app.issuer,
        "jwks_uri": format!("{base}/jwks"),
        "delivery_methods_supported": ["urn:ietf:rfc:8936"],
        "configuration_endpoint": format!("{base}/ssf/stream"),
        "authorization_schemes": [{"spec_urn": "urn:ietf:rfc:6749"}],
    }))
}

async fn jwks_doc(State(app): State<App>) -> Json<Value> {
    Json(app.jwks.lock().unwrap().clone())
}

fn error(status: StatusCode, code: &str) -> Response {
    (status, Json(json!({"error": code}))).into_response()
}

fn bearer_ok(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {ACCESS_TOKEN}"))
}

async fn token(headers: HeaderMap, body: String) -> Response {
    let expected = format!(
        "Basic {}",
        STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"))
    );
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&expected) {
        return error(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    if !body.contains("grant_type=client_credentials") || !body.contains("ssf.read") {
        return error(StatusCode::BAD_REQUEST, "invalid_request");
    }
    Json(
        json!({"access_token": ACCESS_TOKEN, "token_type": "Bearer", "expires_in": 3600,
                "scope": "ssf.read ssf.manage"}),
    )
    .into_response()
}

async fn create_stream(
    State(app): State<App>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !bearer_ok(&headers) {
        return error(StatusCode::UNAUTHORIZED, "invalid_token");
    }
    if body["delivery"]["method"] != "urn:ietf:rfc:8936" {
        return error(StatusCode::BAD_REQUEST, "invalid_request");
    }
    let n = app.streams_created.fetch_add(1, Ordering::Relaxed) + 1;
    let id = format!("stream-{n}");
    app.state
        .lock()
        .unwrap()
        .streams
        .insert(id.clone(), StreamState::default());
    let base = app.issuer.trim_end_matches("/tx").to_owned();
    (
        StatusCode::CREATED,
        Json(json!({
            "stream_id": id, "iss": app.issuer, "aud": CLIENT_ID,
            "delivery": {"method": "urn:ietf:rfc:8936", "endpoint_url": format!("{base}/ssf/poll/{id}")},
            "events_supported": [SESSION_REVOKED, CREDENTIAL_CHANGE],
            "events_requested": body["events_requested"],
            "events_delivered": [SESSION_REVOKED, CREDENTIAL_CHANGE],
        })),
    )
        .into_response()
}

/// RFC 8936 §2.4: acknowledgements and errors first, then the pending SETs, held up to `hold`
/// while there are none.
async fn poll(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !bearer_ok(&headers) {
        return error(StatusCode::UNAUTHORIZED, "invalid_token");
    }
    {
        let mut s = app.state.lock().unwrap();
        s.polls += 1;
        match s.hostile {
            Some(HostilePoll::Garbage) => {
                let jti = format!("garbage-{}", s.polls);
                return Json(json!({"sets": {jti: "not.a.set"}})).into_response();
            }
            Some(HostilePoll::Huge(n)) => {
                return Json(json!({"sets": {"big": "x".repeat(n)}})).into_response();
            }
            None => {}
        }
        if let Some(stream) = s.streams.get_mut(&id) {
            for jti in body["ack"].as_array().into_iter().flatten() {
                let jti = jti.as_str().unwrap_or_default().to_owned();
                stream.pending.remove(&jti);
                stream.acked.push(jti);
            }
            for (jti, e) in body["setErrs"].as_object().into_iter().flatten() {
                stream.pending.remove(jti);
                let err = e["err"].as_str().unwrap_or_default().to_owned();
                stream.errors.push((jti.clone(), err));
            }
        }
    }
    let deadline = tokio::time::Instant::now() + app.hold;
    loop {
        let wait = app.wake.notified();
        {
            let s = app.state.lock().unwrap();
            if s.down {
                return error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable");
            }
            let Some(stream) = s.streams.get(&id) else {
                return error(StatusCode::NOT_FOUND, "not_found");
            };
            let immediate = body["returnImmediately"].as_bool().unwrap_or(false);
            if !stream.pending.is_empty() || immediate || tokio::time::Instant::now() >= deadline {
                let max = body["maxEvents"].as_u64().unwrap_or(100) as usize;
                let sets: serde_json::Map<String, Value> = stream
                    .pending
                    .iter()
                    .take(max)
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let more = stream.pending.len() > sets.len();
                return Json(json!({"sets": sets, "moreAvailable": more})).into_response();
            }
        }
        let _ = tokio::time::timeout_at(deadline, wait).await;
    }
}

async fn introspect(State(app): State<App>, body: String) -> Json<Value> {
    let token = body
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .unwrap_or_default()
        .to_owned();
    *app.introspections
        .lock()
        .unwrap()
        .entry(token.clone())
        .or_default() += 1;
    let answer = app.state.lock().unwrap().tokens.get(&token).cloned();
    Json(answer.unwrap_or_else(|| json!({"active": false})))
}
