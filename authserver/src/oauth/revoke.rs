//! `POST /o/revoke_token/` (RFC 7009): a client revokes one of its own tokens and its family.

use super::access_jwt::find_presented;
use super::params::{Params, authenticate_client};
use super::{OAuthError, no_store};
use crate::AppState;
use crate::request_log::with_caller;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

/// `200` with an empty body, also for unknown tokens and for other clients' tokens (which are
/// left alone), so the answer tells nothing about tokens the caller does not own.
pub async fn revoke(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let params = Params::from_form(&headers, &body)?;
    let cert = crate::mtls::presented(&headers, state.settings.proxy_secret.as_ref());
    let app = authenticate_client(&state.store, &headers, &params, cert.as_ref()).await?;
    let token = params.require("token")?;
    // A JWT is revoked through the row its `ref` opens to; forged and tampered JWTs are unknown
    // tokens. Another client's token is left alone.
    let revoked = match find_presented(&state, token).await? {
        Some(record) if record.application_id == app.id => {
            state.store.revoke_family(&record.family).await?;
            true
        }
        _ => false,
    };
    tracing::info!(client_id = %app.client_id, revoked, "revocation request");
    Ok(no_store(with_caller(
        StatusCode::OK.into_response(),
        &app.client_id,
        None,
    )))
}
