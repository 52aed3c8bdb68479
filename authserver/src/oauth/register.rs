//! Dynamic client registration: `POST /o/register` (RFC 7591) and, on each client's
//! `registration_client_uri`, RFC 7592 read, update and delete with its registration access
//! token. Routed only when `dynamic_registration` is not `off`; every registration goes through
//! [`crate::registration`], rate-limited per client address ([`crate::throttle::Turn`]).
//! A client's mistake is a 400 with an RFC 7591 error, a wrong caller a 401, never a 500.

use crate::AppState;
use crate::client_ip::ClientAddress;
use crate::config::DynamicRegistration;
use crate::registration::dynamic::{self, Checked, MAX_BODY, MetadataError};
use crate::registration::{self, RegistrationError};
use crate::request_log::Outcome;
use crate::secrets;
use crate::store::{Application, DynamicRecord, StoreError};
use crate::throttle::{FAILURE_WINDOW, PerAddress, Turn};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_serving::with_error;
use resource_server::bearer::{Bearer, bearer_token};
use serde_json::{Map, Value, json};

/// Where clients register (under the issuer), announced as `registration_endpoint`.
pub const REGISTER_PATH: &str = "/o/register";

/// The routes, when the policy lets clients register.
pub fn router(policy: DynamicRegistration) -> Router<AppState> {
    if policy == DynamicRegistration::Off {
        return Router::new();
    }
    Router::new().route(REGISTER_PATH, post(register)).route(
        &format!("{REGISTER_PATH}/{{client_id}}"),
        get(read).put(update).delete(delete),
    )
}

/// Why a registration request was refused.
enum Refusal {
    /// RFC 7591 §3.2.2: 400 with its code.
    Metadata(MetadataError),
    /// RFC 6750 §3.1: no usable initial or registration access token.
    Token(&'static str),
    /// Too many registrations from this address.
    Throttled,
    /// The database pool stayed full (503, `Retry-After`).
    Busy,
    Server(anyhow::Error),
}

impl From<MetadataError> for Refusal {
    fn from(error: MetadataError) -> Self {
        Refusal::Metadata(error)
    }
}

impl From<StoreError> for Refusal {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::InitialAccessTokenSpent => {
                Refusal::Token("The initial access token is expired or used up.")
            }
            StoreError::UnstorableText => Refusal::Metadata(MetadataError {
                code: "invalid_client_metadata",
                description: "A value holds a character that cannot be stored.".into(),
            }),
            StoreError::Busy => Refusal::Busy,
            other => Refusal::Server(other.into()),
        }
    }
}

impl From<RegistrationError> for Refusal {
    fn from(error: RegistrationError) -> Self {
        match error {
            RegistrationError::Store(error) => error.into(),
            other => Refusal::Server(other.into()),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, code, description) = match self {
            Refusal::Metadata(error) => (StatusCode::BAD_REQUEST, error.code, error.description),
            Refusal::Token(description) => (
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                description.to_owned(),
            ),
            Refusal::Throttled => (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                "Too many registrations from this address; try again later.".to_owned(),
            ),
            Refusal::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "The server is busy; try again shortly.".to_owned(),
            ),
            Refusal::Server(error) => {
                let body = json!({ "error": "server_error" });
                let response =
                    (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
                return with_error(response, error);
            }
        };
        let body = json!({ "error": code, "error_description": description });
        let mut response = (status, axum::Json(body)).into_response();
        response.extensions_mut().insert(Outcome(code));
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        match status {
            StatusCode::UNAUTHORIZED => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
            }
            StatusCode::TOO_MANY_REQUESTS => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(FAILURE_WINDOW));
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(StoreError::RETRY_AFTER),
                );
            }
            _ => {}
        }
        response
    }
}

type Answer = Result<Response, Refusal>;

/// The bearer token of the request, or the refusal of a request without a usable one.
fn token(headers: &HeaderMap, missing: &'static str) -> Result<String, Refusal> {
    match bearer_token(headers, None) {
        Bearer::Token(token) => Ok(token),
        Bearer::Missing => Err(Refusal::Token(missing)),
        Bearer::Malformed(reason) => Err(Refusal::Token(reason)),
    }
}

/// `map` checked under `policy` ([`dynamic::check`]), with the registered APIs' scopes a
/// client may also register for.
async fn checked(
    state: &AppState,
    policy: DynamicRegistration,
    map: &Map<String, Value>,
) -> Result<Checked, Refusal> {
    let resource_scopes = state.store.resource_scopes().await?;
    Ok(dynamic::check(
        &state.settings,
        &resource_scopes,
        policy,
        map,
    )?)
}

/// The body as a metadata object: `application/json` only, at most [`MAX_BODY`] bytes.
async fn metadata_body(headers: &HeaderMap, body: Body) -> Result<Map<String, Value>, Refusal> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(MetadataError {
            code: "invalid_client_metadata",
            description: "The client metadata must be sent as application/json.".into(),
        }
        .into());
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY + 1)
        .await
        .map_err(|_| MetadataError {
            code: "invalid_client_metadata",
            description: format!("The client metadata is larger than {MAX_BODY} bytes."),
        })?;
    Ok(dynamic::parse_body(&bytes)?)
}

/// `POST /o/register`: the initial access token (policy `initial_access_token`), the rate limit,
/// the metadata, then one registration.
async fn register(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let policy = state.settings.dynamic_registration;
    let initial = match policy {
        DynamicRegistration::InitialAccessToken => {
            let token = token(&headers, "An initial access token is required.")?;
            let digest = secrets::digest(&token);
            match state.store.initial_access_token(&digest).await? {
                Some(issued) if issued.usable(crate::store::now()) => Some(digest),
                _ => {
                    return Err(Refusal::Token(
                        "The initial access token is unknown, expired or used up.",
                    ));
                }
            }
        }
        _ => None,
    };
    let Some(turn) = Turn::check(&state.store, PerAddress::Registration, address).await? else {
        tracing::warn!(address = ?address, "dynamic registration refused: too many from this address");
        crate::metrics::METRICS.throttled(crate::metrics::Throttled::Registration);
        return Err(Refusal::Throttled);
    };
    let map = metadata_body(&headers, body).await?;
    let Checked {
        registration,
        metadata,
    } = checked(&state, policy, &map).await?;
    let access_token = secrets::random_token();
    let create = registration::Create {
        registration,
        owner_id: None,
        client_id: None,
        client_secret: None,
        dynamic: Some(DynamicRecord {
            access_token_digest: secrets::digest(&access_token),
            metadata: Value::Object(metadata.clone()).to_string(),
            initial_token_digest: initial,
        }),
    };
    let registered =
        registration::create(&state.store, &state.keys, &state.settings, create).await?;
    turn.counted(&state.store).await?;
    let app = registered.app;
    tracing::info!(client_id = %app.client_id, "client registered itself (RFC 7591)");
    let mut body = answer(&state, &app, metadata, app.created_at);
    if let Some(secret) = registered.secret {
        body.insert("client_secret".into(), secret.into());
        body.insert("client_secret_expires_at".into(), 0.into());
    }
    body.insert("registration_access_token".into(), access_token.into());
    Ok(json_answer(StatusCode::CREATED, body))
}

/// The RFC 7591 §3.2.1 fields every answer has: the client id, when it was issued, where it is
/// managed, and its metadata as registered.
fn answer(
    state: &AppState,
    app: &Application,
    metadata: Map<String, Value>,
    issued_at: i64,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("client_id".into(), app.client_id.clone().into());
    body.insert("client_id_issued_at".into(), issued_at.into());
    body.insert(
        "registration_client_uri".into(),
        format!("{}{REGISTER_PATH}/{}", state.settings.issuer, app.client_id).into(),
    );
    body.extend(metadata);
    body
}

fn json_answer(status: StatusCode, body: Map<String, Value>) -> Response {
    let mut response = (status, axum::Json(Value::Object(body))).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

/// The client of `client_id` and its stored metadata, when the request's bearer token is that
/// client's registration access token (compared in constant time); otherwise 401, whether the
/// client exists or not (RFC 7592 §2.1).
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    client_id: &str,
) -> Result<(std::sync::Arc<Application>, Map<String, Value>, i64), Refusal> {
    const REFUSED: &str = "The registration access token is not valid for this client.";
    let token = token(headers, "A registration access token is required.")?;
    let Some(app) = state.store.find_application_by_client_id(client_id).await? else {
        return Err(Refusal::Token(REFUSED));
    };
    let Some(record) = state.store.dynamic_client(app.id).await? else {
        return Err(Refusal::Token(REFUSED));
    };
    if !secrets::digest_matches(&record.access_token_digest, &token) {
        return Err(Refusal::Token(REFUSED));
    }
    let metadata = match serde_json::from_str(&record.metadata) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    Ok((app, metadata, record.issued_at))
}

/// RFC 7592 §2.1: the client's registration as stored (its secret is never shown again).
async fn read(
    State(state): State<AppState>,
    Path(client_id): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let (app, metadata, issued_at) = caller(&state, &headers, &client_id).await?;
    Ok(json_answer(
        StatusCode::OK,
        answer(&state, &app, metadata, issued_at),
    ))
}

/// RFC 7592 §2.2: replaces the client's metadata with the request's (checked as a registration
/// under the same policy); the body's `client_id` must be this client's.
async fn update(
    State(state): State<AppState>,
    Path(client_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let (app, _, issued_at) = caller(&state, &headers, &client_id).await?;
    let map = metadata_body(&headers, body).await?;
    if map.get("client_id").and_then(Value::as_str) != Some(app.client_id.as_str()) {
        return Err(MetadataError {
            code: "invalid_client_metadata",
            description: "client_id must be this client's.".into(),
        }
        .into());
    }
    if let Some(secret) = map.get("client_secret")
        && !secret
            .as_str()
            .is_some_and(|secret| app.secret_matches(secret))
    {
        return Err(MetadataError {
            code: "invalid_client_metadata",
            description: "client_secret is not this client's.".into(),
        }
        .into());
    }
    let policy = state.settings.dynamic_registration;
    let Checked {
        registration,
        metadata,
    } = checked(&state, policy, &map).await?;
    let updated = registration::update(
        &state.store,
        &state.keys,
        &state.settings,
        app.id,
        registration,
        Some(Value::Object(metadata.clone()).to_string()),
    )
    .await?
    .ok_or(Refusal::Token(
        "The registration access token is not valid for this client.",
    ))?;
    tracing::info!(client_id = %app.client_id, "client updated its registration (RFC 7592)");
    let mut body = answer(&state, &updated.app, metadata, issued_at);
    if let Some(secret) = updated.secret {
        body.insert("client_secret".into(), secret.into());
        body.insert("client_secret_expires_at".into(), 0.into());
    }
    Ok(json_answer(StatusCode::OK, body))
}

/// RFC 7592 §2.3: deletes the client and every token issued to it.
async fn delete(
    State(state): State<AppState>,
    Path(client_id): Path<String>,
    headers: HeaderMap,
) -> Answer {
    let (app, _, _) = caller(&state, &headers, &client_id).await?;
    registration::delete(&state.store, app.id).await?;
    tracing::info!(client_id = %app.client_id, "client deleted its registration (RFC 7592)");
    Ok(StatusCode::NO_CONTENT.into_response())
}
