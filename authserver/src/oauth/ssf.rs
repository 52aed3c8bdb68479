//! The SSF 1.0 transmitter of the revocation stream (issue 24, docs/revocation-stream.md):
//! `/.well-known/ssf-configuration`, the stream configuration endpoint (create, read, update
//! with PATCH, replace with PUT, delete; a stream belongs to the client that created it), its
//! status (read, and set: `enabled`, `paused`, `disabled`), verification, the subjects a
//! receiver adds or removes (recorded: every stream delivers every subject), and poll delivery
//! (RFC 8936) with long polling and acknowledgements.
//!
//! Every call carries a bearer access token with `ssf.read` (read, status, verification, poll)
//! or `ssf.manage` (create, change, delete, set the status, subjects) of a confidential
//! application allowed the revocation stream (`may_use_ssf`). A poll answers at once
//! with the stream's oldest unacknowledged SETs; with none pending and `returnImmediately`
//! false it waits up to `ssf_poll_timeout`, woken by the store's [`EventBell`] when an event is
//! appended here or (PostgreSQL) on any replica, and reads the log once more at the timeout (a
//! lost notification is seen then). A SET stays pending until acknowledged: a poll answered
//! into a dead connection loses nothing, and any replica serves the next one.
//!
//! [`EventBell`]: crate::store

use super::access_jwt::find_presented;
use super::{OAuthError, no_store};
use crate::AppState;
use crate::domain::{SSF_MANAGE_SCOPE, SSF_READ_SCOPE};
use crate::jwt::set;
use crate::store::{
    ClientType, LoggedEvent, PushTarget, Revocation, StreamRecord, StreamStatus, TokenKind, now,
};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

pub const CONFIGURATION_PATH: &str = "/.well-known/ssf-configuration";
pub const STREAM_PATH: &str = "/ssf/stream";
pub const STATUS_PATH: &str = "/ssf/status";
pub const POLL_PATH: &str = "/ssf/poll";
pub const VERIFICATION_PATH: &str = "/ssf/verify";
pub const ADD_SUBJECT_PATH: &str = "/ssf/subjects/add";
pub const REMOVE_SUBJECT_PATH: &str = "/ssf/subjects/remove";
/// The fewest seconds between two verifications of one stream (`min_verification_interval`);
/// a request sooner is `429`.
const MIN_VERIFICATION_INTERVAL: i64 = 1;
/// The longest verification `state`, and the longest reason of a status, in bytes.
const MAX_STATE: usize = 256;
/// The longest subject a receiver may add, as JSON, in bytes.
const MAX_SUBJECT: usize = 2048;
/// RFC 8936 poll delivery.
pub const POLL_METHOD: &str = "urn:ietf:rfc:8936";
/// RFC 8935 push delivery.
pub const PUSH_METHOD: &str = "urn:ietf:rfc:8935";
/// The most characters of a receiver's `setErrs` entry written to the log.
const SET_ERROR_LOGGED: usize = 200;
/// The most SETs one poll answers with, whatever `maxEvents` asks.
pub(super) const MAX_EVENTS: i64 = 100;

pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route(CONFIGURATION_PATH, get(configuration))
        .route(
            STREAM_PATH,
            get(read_stream)
                .post(create_stream)
                .patch(update_stream)
                .put(replace_stream)
                .delete(delete_stream),
        )
        .route(STATUS_PATH, get(status).post(set_status))
        .route(VERIFICATION_PATH, post(verify))
        .route(ADD_SUBJECT_PATH, post(add_subject))
        .route(REMOVE_SUBJECT_PATH, post(remove_subject))
        .route(&format!("{POLL_PATH}/{{stream_id}}"), post(poll))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            only_with_key_encryption,
        ))
}

/// Why every stream endpoint answers 404 on a server without a key-encryption secret.
pub const STREAM_OFF: &str = "The revocation stream is off: this server has no key-encryption secret to sign events with (secrets_system_file, AUTHSERVER_SECRETS_SYSTEM).";

/// The stream's endpoints answer only on a server that can sign events; elsewhere `404` with
/// [`STREAM_OFF`] (a receiver then backs off, instead of polling into `500` for ever).
async fn only_with_key_encryption(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if state.store.has_key_encryption() {
        return next.run(request).await;
    }
    refuse(StatusCode::NOT_FOUND, "not_found", STREAM_OFF)
}

/// SSF 1.0 §7.1: the transmitter's configuration metadata.
async fn configuration(State(state): State<AppState>) -> Json<Value> {
    let issuer = &state.settings.issuer;
    Json(json!({
        "spec_version": "1_0",
        "issuer": issuer,
        "jwks_uri": format!("{issuer}{}", super::JWKS_PATH),
        "delivery_methods_supported": [POLL_METHOD, PUSH_METHOD],
        "configuration_endpoint": format!("{issuer}{STREAM_PATH}"),
        "status_endpoint": format!("{issuer}{STATUS_PATH}"),
        "verification_endpoint": format!("{issuer}{VERIFICATION_PATH}"),
        "add_subject_endpoint": format!("{issuer}{ADD_SUBJECT_PATH}"),
        "remove_subject_endpoint": format!("{issuer}{REMOVE_SUBJECT_PATH}"),
        "authorization_schemes": [{"spec_urn": "urn:ietf:rfc:6749"}],
        "default_subjects": "ALL",
    }))
}

/// A refusal of the stream endpoints that is not about the caller: `400`/`404` with a body
/// like RFC 6749's.
fn refuse(status: StatusCode, error: &str, description: &str) -> Response {
    let body = json!({"error": error, "error_description": description});
    (status, no_store(super::json(&body))).into_response()
}

fn no_stream() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "not_found",
        "No stream with this id belongs to this client.",
    )
}

/// The client id behind a bearer access token carrying `scope`, of a confidential application
/// still allowed the revocation stream: `401` without a usable token, `403` without the scope
/// or the permission.
async fn caller(state: &AppState, headers: &HeaderMap, scope: &str) -> Result<String, OAuthError> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "))
        .map(|v| v[7..].trim())
        .ok_or(OAuthError::Unauthenticated)?;
    let token = match find_presented(state, bearer).await? {
        Some(token) if token.kind == TokenKind::Access && token.is_active() => token,
        _ => return Err(OAuthError::Unauthenticated),
    };
    // The scope as the application may still have it (a withdrawn permission takes it away).
    if !token.current_scope().split_whitespace().any(|s| s == scope) {
        return Err(OAuthError::Forbidden);
    }
    let app = state
        .store
        .find_application_by_client_id(&token.client_id)
        .await?;
    match app {
        Some(app) if may_use_stream(&app) => Ok(app.client_id.clone()),
        _ => Err(OAuthError::Forbidden),
    }
}

/// Whether an application may (still) use the revocation stream.
pub(super) fn may_use_stream(app: &crate::store::Application) -> bool {
    app.may_use_ssf && app.client_type == ClientType::Confidential
}

fn bad_request(description: &str) -> Response {
    refuse(StatusCode::BAD_REQUEST, "invalid_request", description)
}

/// A JSON request body of type `T`, or the `400` naming `what` it must be.
fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes, what: &str) -> Result<T, Box<Response>> {
    serde_json::from_slice(body)
        .map_err(|_| Box::new(bad_request(&format!("The body must be {what}."))))
}

/// The event types a stream delivers: those asked for that are supported (all when none was
/// asked for).
pub(super) fn delivered(stream: &StreamRecord) -> Vec<&'static str> {
    set::SUPPORTED
        .into_iter()
        .filter(|t| {
            stream.events_requested.is_empty() || stream.events_requested.iter().any(|r| r == t)
        })
        .collect()
}

/// SSF 1.0 §8.1.1: the stream configuration as the transmitter answers it.
fn stream_configuration(state: &AppState, stream: &StreamRecord) -> Value {
    let issuer = &state.settings.issuer;
    // The receiver's Authorization header is never echoed.
    let delivery = match &stream.push {
        Some(push) => json!({"method": PUSH_METHOD, "endpoint_url": push.endpoint_url}),
        None => json!({
            "method": POLL_METHOD,
            "endpoint_url": format!("{issuer}{POLL_PATH}/{}", stream.stream_id),
        }),
    };
    json!({
        "stream_id": stream.stream_id,
        "iss": issuer,
        "aud": stream.client_id,
        "delivery": delivery,
        "events_supported": set::SUPPORTED,
        "events_requested": stream.events_requested,
        "events_delivered": delivered(stream),
        "min_verification_interval": MIN_VERIFICATION_INTERVAL,
    })
}

#[derive(Deserialize)]
struct StreamQuery {
    stream_id: Option<String>,
}

#[derive(Deserialize)]
struct NewStream {
    #[serde(default)]
    delivery: Option<Delivery>,
    #[serde(default)]
    events_requested: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Delivery {
    method: String,
    endpoint_url: Option<String>,
    authorization_header: Option<String>,
}

/// The push target of a requested delivery: None for poll delivery, an error description for
/// an unsupported method, a push without an http(s) URL, or one to an address a push may not
/// go to ([`super::ssf_push::url_allowed`] with `allowed`, the `ssf_push_networks`).
fn push_target(
    delivery: Option<Delivery>,
    allowed: &[crate::client_ip::IpRange],
) -> Result<Option<PushTarget>, &'static str> {
    let Some(delivery) = delivery else {
        return Ok(None);
    };
    match delivery.method.as_str() {
        POLL_METHOD => Ok(None),
        PUSH_METHOD => {
            let url = delivery
                .endpoint_url
                .filter(|u| {
                    reqwest::Url::parse(u)
                        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
                })
                .ok_or("Push delivery needs an http or https endpoint_url.")?;
            let parsed = reqwest::Url::parse(&url).map_err(|_| "Unreadable endpoint_url.")?;
            if !super::push_networks::url_allowed(&parsed, allowed) {
                return Err(super::push_networks::NOT_PUBLIC);
            }
            Ok(Some(PushTarget {
                endpoint_url: url,
                authorization: delivery.authorization_header,
            }))
        }
        _ => Err("Delivery is by poll (urn:ietf:rfc:8936) or push (urn:ietf:rfc:8935)."),
    }
}

/// `POST configuration_endpoint`: a new poll stream of the caller, delivering from now on.
async fn create_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_MANAGE_SCOPE).await?;
    let request: NewStream = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(_) => {
            return Ok(refuse(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "The body must be a JSON stream configuration.",
            ));
        }
    };
    let push = match push_target(request.delivery, &state.settings.ssf_push_networks) {
        Ok(push) => push,
        Err(problem) => return Ok(refuse(StatusCode::BAD_REQUEST, "invalid_request", problem)),
    };
    let requested = request.events_requested.unwrap_or_default();
    let Some(stream) = state
        .store
        .create_stream(&client_id, &requested, push)
        .await?
    else {
        return Ok(refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "invalid_request",
            "This client has as many streams as it may: delete one first.",
        ));
    };
    if stream.push.is_some() {
        state.store.ring_push();
    }
    tracing::info!(client_id = %client_id, stream_id = %stream.stream_id, "revocation stream created");
    let created = no_store(super::json(&stream_configuration(&state, &stream)));
    Ok((StatusCode::CREATED, created).into_response())
}

/// `GET configuration_endpoint?stream_id=`: one stream of the caller; without `stream_id`, all.
async fn read_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<StreamQuery>,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_READ_SCOPE).await?;
    let body = match query.stream_id {
        Some(id) => match state.store.find_stream(&id, &client_id).await? {
            Some(stream) => stream_configuration(&state, &stream),
            None => return Ok(no_stream()),
        },
        None => Value::Array(
            state
                .store
                .streams_of(&client_id)
                .await?
                .iter()
                .map(|s| stream_configuration(&state, s))
                .collect(),
        ),
    };
    Ok(no_store(super::json(&body)))
}

/// The body of `PATCH` and `PUT` (SSF 1.0 §8.1.1.3-4): the stream, and the receiver-supplied
/// properties. Transmitter-supplied ones (`iss`, `aud`, `events_supported`...), which a receiver
/// may send back as it read them, are ignored.
#[derive(Deserialize)]
struct StreamUpdate {
    stream_id: Option<String>,
    #[serde(default)]
    delivery: Option<Delivery>,
    #[serde(default)]
    events_requested: Option<Vec<String>>,
}

/// `PATCH configuration_endpoint`: the properties given replace the stream's, the others stay.
async fn update_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    change_stream(state, headers, body, false).await
}

/// `PUT configuration_endpoint`: the stream's receiver-supplied properties become those given
/// (absent: every supported event, poll delivery).
async fn replace_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    change_stream(state, headers, body, true).await
}

/// `200` with the stream's configuration as updated; the events pending stay pending.
async fn change_stream(
    state: AppState,
    headers: HeaderMap,
    body: Bytes,
    replace: bool,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_MANAGE_SCOPE).await?;
    let Ok(request) = serde_json::from_slice::<StreamUpdate>(&body) else {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The body must be a JSON stream configuration.",
        ));
    };
    let Some(id) = request.stream_id else {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Name the stream: stream_id.",
        ));
    };
    let Some(stream) = state.store.find_stream(&id, &client_id).await? else {
        return Ok(no_stream());
    };
    let push = match (request.delivery, replace) {
        (Some(delivery), _) => match push_target(Some(delivery), &state.settings.ssf_push_networks)
        {
            Ok(push) => push,
            Err(problem) => return Ok(refuse(StatusCode::BAD_REQUEST, "invalid_request", problem)),
        },
        (None, true) => None,
        (None, false) => stream.push,
    };
    let requested = match (request.events_requested, replace) {
        (Some(requested), _) => requested,
        (None, true) => Vec::new(),
        (None, false) => stream.events_requested,
    };
    let Some(stream) = state
        .store
        .update_stream(&id, &client_id, &requested, push)
        .await?
    else {
        return Ok(no_stream());
    };
    if stream.push.is_some() {
        state.store.ring_push();
    }
    tracing::info!(client_id = %client_id, stream_id = %stream.stream_id, "revocation stream updated");
    Ok(no_store(super::json(&stream_configuration(
        &state, &stream,
    ))))
}

/// `DELETE configuration_endpoint?stream_id=`: `204`, or `404` for no stream of the caller.
async fn delete_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<StreamQuery>,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_MANAGE_SCOPE).await?;
    let Some(id) = query.stream_id else {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Name the stream: ?stream_id=",
        ));
    };
    Ok(if state.store.delete_stream(&id, &client_id).await? {
        StatusCode::NO_CONTENT.into_response()
    } else {
        no_stream()
    })
}

/// SSF 1.0 §8.1.2: `{stream_id, status, reason?}`, not to be cached.
fn status_response(stream: &StreamRecord) -> Response {
    let mut body = json!({"stream_id": stream.stream_id, "status": stream.status.as_str()});
    if let Some(reason) = &stream.status_reason {
        body["reason"] = reason.clone().into();
    }
    no_store(super::json(&body))
}

/// `GET status_endpoint?stream_id=` (SSF 1.0 §8.1.2.1).
async fn status(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<StreamQuery>,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_READ_SCOPE).await?;
    let Some(id) = query.stream_id else {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Name the stream: ?stream_id=",
        ));
    };
    Ok(match state.store.find_stream(&id, &client_id).await? {
        Some(stream) => status_response(&stream),
        None => no_stream(),
    })
}

#[derive(Deserialize)]
struct StatusUpdate {
    stream_id: String,
    status: String,
    reason: Option<String>,
}

/// `POST status_endpoint` (SSF 1.0 §8.1.2.2): `{stream_id, status, reason?}` sets the status
/// (`enabled`, `paused`: events held until enabled, `disabled`: events dropped) → `200` with
/// the status as set. The transmitter changes a status only when asked, so it sends no
/// stream-updated event (§8.1.5 asks for one when it changes a status on its own).
async fn set_status(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_MANAGE_SCOPE).await?;
    let request: StatusUpdate = match json_body(&body, "{stream_id, status, reason?}") {
        Ok(request) => request,
        Err(refused) => return Ok(*refused),
    };
    let Some(status) = StreamStatus::parse(&request.status) else {
        return Ok(bad_request("The status is enabled, paused or disabled."));
    };
    if request.reason.as_ref().is_some_and(|r| r.len() > MAX_STATE) {
        return Ok(bad_request("The reason is too long."));
    }
    let Some(stream) = state
        .store
        .set_stream_status(
            &request.stream_id,
            &client_id,
            status,
            request.reason.as_deref(),
        )
        .await?
    else {
        return Ok(no_stream());
    };
    tracing::info!(client_id = %client_id, stream_id = %stream.stream_id, status = status.as_str(), "revocation stream status set");
    Ok(status_response(&stream))
}

#[derive(Deserialize)]
struct VerificationRequest {
    stream_id: String,
    state: Option<String>,
}

/// `POST verification_endpoint` (SSF 1.0 §8.1.4.2): `{stream_id, state?}` → `204`, and a
/// verification SET with that `state` on that stream alone, delivered like any other event
/// (held while the stream is paused, dropped while disabled). `429` sooner than
/// [`MIN_VERIFICATION_INTERVAL`] after the stream's previous one.
async fn verify(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_READ_SCOPE).await?;
    let request: VerificationRequest = match json_body(&body, "{stream_id, state?}") {
        Ok(request) => request,
        Err(refused) => return Ok(*refused),
    };
    if request.state.as_ref().is_some_and(|s| s.len() > MAX_STATE) {
        return Ok(bad_request("The state is too long."));
    }
    let Some(stream) = state
        .store
        .find_stream(&request.stream_id, &client_id)
        .await?
    else {
        return Ok(no_stream());
    };
    let last = state.store.last_verification(&stream.stream_id).await?;
    if last.is_some_and(|last| now() < last + MIN_VERIFICATION_INTERVAL) {
        return Ok(refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "slow_down",
            "A verification of this stream was just asked for.",
        ));
    }
    state
        .store
        .log_event(&Revocation::Verification {
            stream_id: stream.stream_id,
            state: request.state,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct SubjectRequest {
    stream_id: String,
    subject: Value,
    verified: Option<bool>,
}

/// The members a subject of `format` must have (RFC 9493 §3.2, SSF 1.0 §3); None for a format
/// not known.
fn required_members(format: &str) -> Option<&'static [&'static str]> {
    Some(match format {
        "account" | "uri" => &["uri"],
        "email" => &["email"],
        "iss_sub" => &["iss", "sub"],
        "opaque" => &["id"],
        "phone_number" => &["phone_number"],
        "did" => &["url"],
        "jwt_id" => &["iss", "jti"],
        "saml_assertion_id" => &["issuer", "assertion_id"],
        _ => return None,
    })
}

/// Whether `subject` is a subject identifier as SSF 1.0 §3 has them: a simple one of a known
/// format with its members as strings, `aliases` of simple ones, or a `complex` subject whose
/// members are simple ones.
fn well_formed_subject(subject: &Value) -> bool {
    let simple = |s: &Value| {
        let Some(format) = s.get("format").and_then(Value::as_str) else {
            return false;
        };
        required_members(format).is_some_and(|members| {
            members.iter().all(|m| {
                s.get(m)
                    .and_then(Value::as_str)
                    .is_some_and(|v| !v.is_empty())
            })
        })
    };
    let Some(object) = subject.as_object() else {
        return false;
    };
    match object.get("format").and_then(Value::as_str) {
        Some("aliases") => object
            .get("identifiers")
            .and_then(Value::as_array)
            .is_some_and(|ids| !ids.is_empty() && ids.iter().all(simple)),
        Some(_) => simple(subject),
        // A complex subject (SSF 1.0 §3.2): no format, members such as user, device, tenant.
        None => {
            !object.is_empty()
                && object
                    .values()
                    .all(|member| member.is_object() && simple(member))
        }
    }
}

/// `POST add_subject_endpoint` / `remove_subject_endpoint` (SSF 1.0 §8.1.3): the stream of the
/// caller and a well-formed subject, recorded (add, `verified` defaulting to true) or
/// forgotten (remove). Every stream delivers every subject (`default_subjects: "ALL"`):
/// adding one changes nothing that is delivered, removing one does not filter it out.
async fn change_subject(
    state: AppState,
    headers: HeaderMap,
    body: Bytes,
    add: bool,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_MANAGE_SCOPE).await?;
    let request: SubjectRequest = match json_body(&body, "{stream_id, subject, verified?}") {
        Ok(request) => request,
        Err(refused) => return Ok(*refused),
    };
    let subject = request.subject.to_string();
    if subject.len() > MAX_SUBJECT || !well_formed_subject(&request.subject) {
        return Ok(bad_request(
            "The subject must be an SSF subject identifier of a known format.",
        ));
    }
    let Some(stream) = state
        .store
        .find_stream(&request.stream_id, &client_id)
        .await?
    else {
        return Ok(no_stream());
    };
    let verified = add.then_some(request.verified.unwrap_or(true));
    state
        .store
        .record_subject(&stream.stream_id, &subject, verified)
        .await?;
    Ok(if add {
        StatusCode::OK.into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    })
}

async fn add_subject(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    change_subject(state, headers, body, true).await
}

async fn remove_subject(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    change_subject(state, headers, body, false).await
}

/// An RFC 8936 §2.4 poll request.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PollRequest {
    max_events: Option<i64>,
    #[serde(default)]
    return_immediately: bool,
    #[serde(default)]
    ack: Vec<String>,
    #[serde(default)]
    set_errs: serde_json::Map<String, Value>,
}

/// The SET id of `event` on `stream`: unique per stream and event, and read back on ack.
fn set_jti(stream: &StreamRecord, event: &LoggedEvent) -> String {
    format!("{}.{}", event.id, stream.stream_id)
}

/// The event id a SET id of `stream` names; None for anything else.
fn acked_event(stream: &StreamRecord, jti: &str) -> Option<i64> {
    let (id, stream_id) = jti.split_once('.')?;
    (stream_id == stream.stream_id)
        .then(|| id.parse().ok())
        .flatten()
}

/// `POST endpoint_url` (RFC 8936): acknowledges, then answers the pending SETs, waiting for
/// one when none is pending and the receiver asked to wait.
async fn poll(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(stream_id): Path<String>,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let client_id = caller(&state, &headers, SSF_READ_SCOPE).await?;
    let request: PollRequest = if body.iter().all(u8::is_ascii_whitespace) {
        PollRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(_) => {
                return Ok(refuse(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "The body must be an RFC 8936 poll request.",
                ));
            }
        }
    };
    let Some(stream) = state.store.find_stream(&stream_id, &client_id).await? else {
        return Ok(no_stream());
    };
    if stream.push.is_some() {
        return Ok(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This stream pushes its events (RFC 8935).",
        ));
    }
    // Logged only for SETs of this stream, and cut short: the receiver writes this text.
    for (jti, error) in &request.set_errs {
        if acked_event(&stream, jti).is_some() {
            let error: String = error.to_string().chars().take(SET_ERROR_LOGGED).collect();
            tracing::warn!(stream_id = %stream.stream_id, jti = %jti, error, "the receiver refused a SET");
        }
    }
    // An error reported for a SET acknowledges it too: sending it again would not help.
    let acked: Vec<i64> = request
        .ack
        .iter()
        .chain(request.set_errs.keys())
        .filter_map(|jti| acked_event(&stream, jti))
        .collect();
    state.store.acknowledge(&stream.stream_id, &acked).await?;
    let max = request
        .max_events
        .unwrap_or(MAX_EVENTS)
        .clamp(0, MAX_EVENTS);
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(state.settings.ssf_poll_timeout as u64);
    let bell = state.store.event_bell();
    let types = delivered(&stream);
    let events = loop {
        // Listen before reading, so that an event appended after the read wakes this poll.
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        // Read again: its status may have changed while this poll waited.
        let Some(current) = state.store.find_stream(&stream_id, &client_id).await? else {
            break (Vec::new(), false);
        };
        let events = pending(&state, &current, &types, max).await?;
        let waited_enough = tokio::time::Instant::now() >= deadline || state.store.polls_closing();
        if !events.0.is_empty() || request.return_immediately || max == 0 || waited_enough {
            break events;
        }
        tokio::select! {
            _ = rung => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    };
    let (events, more) = events;
    let sets: serde_json::Map<String, Value> = signed(&state, &stream, &events)
        .await?
        .into_iter()
        .map(|(jti, token)| (jti, token.into()))
        .collect();
    Ok(no_store(super::json(
        &json!({"sets": sets, "moreAvailable": more}),
    )))
}

/// The SETs of `events` for `stream`, signed with the current key: (SET id, SET).
pub(super) async fn signed(
    state: &AppState,
    stream: &StreamRecord,
    events: &[LoggedEvent],
) -> Result<Vec<(String, String)>, OAuthError> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let keys = state
        .keys
        .keys_with_signer(&state.store, crate::jwt::Alg::EdDSA)
        .await?;
    let signer = keys
        .signer(crate::jwt::Alg::EdDSA, now())
        .ok_or_else(|| OAuthError::Server(anyhow::anyhow!("no signing key")))?;
    let issuer = &state.settings.issuer;
    events
        .iter()
        .map(|event| {
            let jti = set_jti(stream, event);
            let claims = set::claims(issuer, &stream.client_id, &jti, now(), event);
            let token = set::sign(signer, &claims).map_err(|error| {
                OAuthError::Server(anyhow::anyhow!("signing a SET failed: {error}"))
            })?;
            Ok((jti, token))
        })
        .collect()
}

/// At most `max` pending events of the types the stream delivers, and whether more are
/// pending. Events of other types are acknowledged on the stream's behalf.
pub(super) async fn pending(
    state: &AppState,
    stream: &StreamRecord,
    types: &[&str],
    max: i64,
) -> Result<(Vec<LoggedEvent>, bool), OAuthError> {
    // Paused: held until enabled; disabled: dropped when enabled again (the store moves it on).
    if max == 0 || stream.status != StreamStatus::Enabled {
        return Ok((Vec::new(), false));
    }
    loop {
        let mut events = state.store.pending_events(stream, max + 1).await?;
        let (wanted, unwanted): (Vec<LoggedEvent>, Vec<LoggedEvent>) =
            events.drain(..).partition(|e| {
                matches!(e.revocation, Revocation::Verification { .. })
                    || types.contains(&set::event_type(&e.revocation))
            });
        if !unwanted.is_empty() {
            let ids: Vec<i64> = unwanted.iter().map(|e| e.id).collect();
            state.store.acknowledge(&stream.stream_id, &ids).await?;
            if wanted.is_empty() {
                continue;
            }
        }
        let more = wanted.len() as i64 > max;
        let mut wanted = wanted;
        wanted.truncate(max as usize);
        return Ok((wanted, more));
    }
}
