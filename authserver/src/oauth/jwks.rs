//! `GET /.well-known/jwks.json` (RFC 7517): the public keys that sign JWT access tokens.

use crate::AppState;
use crate::store::now;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::OAuthError;

/// The published keys (pending, signing, and retired ones whose tokens may still be live),
/// cacheable for `jwks_max_age`, from the cached key ring (the first key is created when the
/// server starts with JWT access tokens, not by a caller of this endpoint).
pub async fn jwks(State(state): State<AppState>) -> Result<Response, OAuthError> {
    let keys = state.keys.keys(&state.store).await?;
    let body = keys.jwks(now(), state.settings.access_token_lifetime);
    let mut response = Json(body).into_response();
    let cache = format!("public, max-age={}", state.settings.jwks_max_age);
    if let Ok(value) = HeaderValue::from_str(&cache) {
        response.headers_mut().insert(header::CACHE_CONTROL, value);
    }
    Ok(response)
}
