//! `POST /o/introspect/` (RFC 7662): what a token is, for callers allowed to ask.

use super::access_jwt::{find_introspected, find_presented};
use super::params::{Params, authenticate_client_if_presented};
use super::{OAuthError, no_store};
use crate::AppState;
use crate::request_log::with_caller;
use crate::store::{Application, ClientType, Introspected, TokenKind, TokenRecord};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::domain::GROUPS_SCOPE;
pub use crate::protocol::scope::INTROSPECTION_SCOPE;

pub async fn introspect(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let params = Params::from_form(&headers, &body)?;
    let caller = authorize_caller(&state, &headers, &params).await?;
    let token = params.require("token")?;
    let want_refresh = params.get("token_type_hint") == Some("refresh_token");
    let found = find_introspected(&state, token).await?;
    // A token whose every scope its application has since lost grants nothing: inactive.
    // Expiry is checked now (`is_active`): a cached lookup never outlives its token.
    let body = match found.as_deref() {
        Some(Introspected { record, groups, .. })
            if record.is_active() && (record.kind == TokenKind::Access || want_refresh) =>
        {
            match record.current_scope() {
                scope if scope.is_empty() => json!({ "active": false }),
                scope => {
                    let groups = groups
                        .clone()
                        .filter(|_| scope.split_whitespace().any(|s| s == GROUPS_SCOPE));
                    active_claims(record, scope, groups)
                }
            }
        }
        _ => json!({ "active": false }),
    };
    crate::metrics::METRICS.introspected(body["active"] == true);
    Ok(no_store(with_caller(
        Json(body).into_response(),
        &caller,
        None,
    )))
}

/// A bearer token carrying the `introspection` scope of an application (still) allowed to
/// introspect, or the client credentials of such an application; its client id.
async fn authorize_caller(
    state: &AppState,
    headers: &HeaderMap,
    params: &Params,
) -> Result<String, OAuthError> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "))
        .map(|v| v[7..].trim());
    if let Some(token) = bearer {
        let caller = match find_presented(state, token).await? {
            Some(caller) if caller.kind == TokenKind::Access && caller.is_active() => caller,
            _ => return Err(OAuthError::Unauthenticated),
        };
        if !caller
            .scope
            .split_whitespace()
            .any(|s| s == INTROSPECTION_SCOPE)
        {
            return Err(OAuthError::Forbidden);
        }
        // The scope is only as good as its application's permission, which may have been
        // withdrawn since the token was issued.
        let app = state
            .store
            .find_application_by_client_id(&caller.client_id)
            .await?;
        return match app {
            Some(app) if may_introspect(&app) => Ok(app.client_id),
            _ => Err(OAuthError::Forbidden),
        };
    }
    let cert = crate::mtls::presented(headers, state.settings.proxy_secret.as_ref());
    match authenticate_client_if_presented(&state.store, headers, params, cert.as_ref()).await {
        Ok(Some(app)) if may_introspect(&app) => Ok(app.client_id),
        Ok(Some(_)) => Err(OAuthError::Forbidden),
        Ok(None) | Err(OAuthError::InvalidClient) => Err(OAuthError::Unauthenticated),
        Err(other) => Err(other),
    }
}

/// Introspection is granted to confidential clients only: a public client authenticates by its
/// `client_id` alone, which is no secret, so a public client allowed to introspect would let
/// anyone ask about any token.
fn may_introspect(app: &Application) -> bool {
    app.may_introspect && app.client_type == ClientType::Confidential
}

/// The names of the groups of the token's user, as they are now, when the token has the
/// [`GROUPS_SCOPE`]; `None` otherwise (and for a client's own token).
pub(super) async fn user_groups(
    state: &AppState,
    user_id: Option<i64>,
    scope: &str,
) -> Result<Option<Vec<String>>, OAuthError> {
    match user_id {
        Some(id) if scope.split_whitespace().any(|s| s == GROUPS_SCOPE) => {
            let groups = state.store.user_groups(id).await?;
            Ok(Some(groups.into_iter().map(|g| g.name).collect()))
        }
        _ => Ok(None),
    }
}

fn active_claims(
    record: &TokenRecord,
    scope: String,
    groups: Option<Vec<String>>,
) -> serde_json::Value {
    let mut claims = json!({
        "active": true,
        "scope": scope,
        "client_id": record.client_id,
        "exp": record.expires_at,
        "iat": record.issued_at,
        // The family's public id: the `jti` of its JWTs and of its revocation events.
        "jti": crate::store::family_jti(&record.family),
        "token_type": if record.kind == TokenKind::Access { "Bearer" } else { "refresh_token" },
    });
    if let Some(x5t) = &record.cnf_x5t_s256 {
        claims["cnf"] = json!({ "x5t#S256": x5t });
    }
    match (&record.username, record.user_id) {
        (Some(username), Some(id)) => {
            claims["username"] = username.clone().into();
            claims["sub"] = id.to_string().into();
        }
        _ => claims["sub"] = record.client_id.clone().into(),
    }
    if let Some(groups) = groups {
        claims["groups"] = groups.into();
    }
    claims
}
