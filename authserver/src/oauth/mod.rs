//! The OAuth 2.0 endpoints under `/o/`, the RFC 8414 metadata and the JWKS, and OpenID Connect's
//! discovery document, ID tokens and UserInfo endpoint.

mod access_jwt;
mod cors;
mod discovery;
mod dpop;
mod error;
mod grants;
mod id_token;
mod introspect;
mod jwks;
mod metadata;
pub(crate) mod params;
pub mod push_networks;
mod register;
mod revoke;
pub mod ssf;
pub mod ssf_push;
mod token;
mod userinfo;

pub(crate) use discovery::END_SESSION_PATH;
pub use dpop::DpopState;
pub use error::OAuthError;
pub(crate) use grants::{declared as declared_scopes, known_resources};
pub(crate) use id_token::read_id_token_hint;
pub use introspect::INTROSPECTION_SCOPE;
pub use register::REGISTER_PATH;

use crate::AppState;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::Serialize;

/// The endpoints, each group a browser may call behind the CORS middleware with its policy
/// ([`cors`]); introspection, the bulk of the traffic, does without it.
pub fn router(state: &AppState) -> Router<AppState> {
    let settings = &state.settings;
    let token = Router::new()
        .route(TOKEN_PATH, post_only(post(token::token)))
        .route("/o/revoke_token/", post_only(post(revoke::revoke)));
    let documents = Router::new()
        .route(cors::METADATA_PATH, get(metadata::metadata))
        .route(JWKS_PATH, get(jwks::jwks))
        .route(
            cors::OIDC_DISCOVERY_PATH,
            get(discovery::openid_configuration),
        );
    Router::new()
        .route(INTROSPECTION_PATH, post_only(post(introspect::introspect)))
        .route(
            discovery::USERINFO_PATH,
            get(userinfo::userinfo).post(userinfo::userinfo),
        )
        .merge(ssf::router(state))
        .merge(register::router(settings.dynamic_registration))
        .merge(cors::with_policy(token, cors::token_policy(settings)))
        .merge(cors::with_policy(
            documents,
            cors::documents_policy(settings),
        ))
}

/// Every method but POST answered `405` with `Allow: POST` and an RFC 6749 error body, before
/// the request reaches a handler (its body was read within the server's `Limits`).
fn post_only(route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.fallback(|| async { OAuthError::PostOnly })
}

/// Where the JWKS is served (under the issuer), announced as `jwks_uri`.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";
/// The token endpoint (RFC 6749 §3.2).
pub const TOKEN_PATH: &str = "/o/token/";
/// The token introspection endpoint (RFC 7662).
pub const INTROSPECTION_PATH: &str = "/o/introspect/";

/// What `axum::Json(value)` answers (the same body, `Content-Type` and failure), serialized
/// into one buffer with room for a token response or an introspection answer, instead of a
/// growing `BytesMut` written to piece by piece.
fn json(value: &impl Serialize) -> Response {
    match to_json(value) {
        Some(body) => json_body(body),
        None => axum::Json(value).into_response(),
    }
}

/// `value` in JSON, `None` when it cannot be (what [`json`] answers then is `axum::Json`'s).
fn to_json(value: &impl Serialize) -> Option<Bytes> {
    let mut body = Vec::with_capacity(512);
    serde_json::to_writer(&mut body, value).ok()?;
    Some(body.into())
}

/// A `200` with this JSON body.
fn json_body(body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// RFC 6749 §5.1: token responses must not be cached.
fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}
