//! `POST /o/introspect/` (RFC 7662): what a token is, for callers allowed to ask.

use super::access_jwt::{find_introspected, find_presented};
use super::params::{Params, authenticate_client_if_presented};
use super::{OAuthError, json, json_body, no_store, to_json};
use crate::AppState;
use crate::protocol::acr;
use crate::request_log::with_caller;
use crate::store::{Application, ClientType, Introspected, TokenKind};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use serde::Serialize;
use std::borrow::Cow;
use std::sync::Arc;

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
    let active = found.as_deref().filter(|found| {
        found.record.is_active()
            && (found.record.kind == TokenKind::Access || want_refresh)
            && !found.current_scope.is_empty()
    });
    crate::metrics::METRICS.introspected(active.is_some());
    let response = match active {
        Some(found) => active_answer(found, &state.settings.access_token_audience),
        None => json_body(Bytes::from_static(br#"{"active":false}"#)),
    };
    Ok(no_store(with_caller(response, &caller.client_id, None)))
}

/// A bearer token carrying the `introspection` scope of an application (still) allowed to
/// introspect, or the client credentials of such an application; that application.
async fn authorize_caller(
    state: &AppState,
    headers: &HeaderMap,
    params: &Params,
) -> Result<Arc<Application>, OAuthError> {
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
            Some(app) if may_introspect(&app) => Ok(app),
            _ => Err(OAuthError::Forbidden),
        };
    }
    let cert = crate::mtls::presented(headers, state.settings.proxy_secret.as_ref());
    match authenticate_client_if_presented(&state.store, headers, params, cert.as_ref()).await {
        Ok(Some(app)) if may_introspect(&app) => Ok(app),
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

/// The answer about an active token: made at its first introspection and kept with the cached
/// lookup, which never changes (a change evicts it).
fn active_answer(found: &Introspected, default_audience: &str) -> Response {
    if let Some(answer) = found.active_answer.get() {
        return json_body(answer.clone());
    }
    let claims = active_claims(found, default_audience);
    match to_json(&claims) {
        // Kept in a buffer of its own size (the one written has room for 512 bytes).
        Some(answer) => json_body(
            found
                .active_answer
                .get_or_init(|| Bytes::copy_from_slice(&answer))
                .clone(),
        ),
        None => json(&claims),
    }
}

/// The answer about an active token (RFC 7662 §2.2), its members in alphabetical order.
#[derive(Serialize)]
struct ActiveClaims<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    acr: Option<&'static str>,
    active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    amr: Option<Vec<String>>,
    aud: Aud<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_time: Option<i64>,
    client_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cnf: Option<Confirmation<'a>>,
    exp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<&'a [String]>,
    iat: i64,
    jti: &'a str,
    scope: &'a str,
    sub: Cow<'a, str>,
    token_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    username: Option<&'a str>,
}

/// `aud`: the token's one resource (or the server's default audience) as a string, several as
/// an array, as in its JWT.
#[derive(Serialize)]
#[serde(untagged)]
enum Aud<'a> {
    One(&'a str),
    Many(Vec<&'a str>),
}

/// RFC 8705 §3.2: the certificate the token is bound to; RFC 9449 §6.2: the DPoP key.
#[derive(Serialize)]
struct Confirmation<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    jkt: Option<&'a str>,
    #[serde(rename = "x5t#S256", skip_serializing_if = "Option::is_none")]
    x5t_s256: Option<&'a str>,
}

/// The claims of an active token with its scope as it stands now: the user's groups only when
/// the scope still has [`GROUPS_SCOPE`].
fn active_claims<'a>(found: &'a Introspected, default_audience: &'a str) -> ActiveClaims<'a> {
    let record = &found.record;
    let scope = found.current_scope.as_str();
    let groups = found
        .groups
        .as_deref()
        .filter(|_| scope.split_whitespace().any(|s| s == GROUPS_SCOPE));
    let (sub, username) = match (&record.username, record.user_id) {
        (Some(username), Some(id)) => (Cow::Owned(id.to_string()), Some(username.as_str())),
        _ => (Cow::Borrowed(record.client_id.as_str()), None),
    };
    let aud = match record.audience.as_deref() {
        None => Aud::One(default_audience),
        Some(one) if !one.contains(' ') => Aud::One(one),
        Some(many) => Aud::Many(many.split(' ').collect()),
    };
    let signed_in = found.signed_in.as_ref();
    ActiveClaims {
        acr: signed_in.map(|s| acr::acr_of(&s.amr)),
        active: true,
        amr: signed_in.map(|s| acr::amr_list(&s.amr)),
        aud,
        auth_time: signed_in.map(|s| s.auth_time),
        client_id: &record.client_id,
        cnf: (record.cnf_x5t_s256.is_some() || record.cnf_jkt.is_some()).then_some(Confirmation {
            jkt: record.cnf_jkt.as_deref(),
            x5t_s256: record.cnf_x5t_s256.as_deref(),
        }),
        exp: record.expires_at,
        groups,
        iat: record.issued_at,
        // The family's public id: the `jti` of its JWTs and of its revocation events.
        jti: &found.jti,
        scope,
        sub,
        token_type: if record.kind == TokenKind::Access {
            if record.cnf_jkt.is_some() {
                "DPoP"
            } else {
                "Bearer"
            }
        } else {
            "refresh_token"
        },
        username,
    }
}
