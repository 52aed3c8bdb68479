//! `POST /o/token/`: the password, refresh_token and client_credentials grants (RFC 6749 §4.3, §4.4, §6).

use super::access_jwt::{Subject, jwt_for};
use super::introspect::INTROSPECTION_SCOPE;
use super::params::{Params, authenticate_client};
use super::{OAuthError, no_store};
use crate::AppState;
use crate::client_ip::ClientAddress;
use crate::config::{AccessTokenFormat, Settings};
use crate::store::{
    Application, ClientType, GrantType, IssuedTokens, NewTokens, RefreshOutcome, now,
};
use crate::throttle::Throttle;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::net::IpAddr;

pub async fn token(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let params = Params::from_form(&headers, &body)?;
    let grant = match params.get("grant_type") {
        Some(g @ ("password" | "refresh_token" | "client_credentials")) => g,
        _ => return Err(OAuthError::UnsupportedGrantType),
    };
    let app = authenticate_client(&state.store, &headers, &params).await?;
    let issued_at = now();
    let Granted { mut issued, user } = match grant {
        "password" => password_grant(&state, &app, &params, address).await?,
        "refresh_token" => refresh_grant(&state, &app, &params).await?,
        _ => client_credentials_grant(&state, &app, &params).await?,
    };
    if state.settings.access_token_format == AccessTokenFormat::Jwt {
        let subject = match &user {
            Some((id, username)) => Subject::User { id: *id, username },
            None => Subject::Client,
        };
        issued.access_token = jwt_for(&state, &app.client_id, subject, &issued, issued_at).await?;
    }
    let mut body = json!({
        "access_token": issued.access_token,
        "expires_in": issued.expires_in,
        "token_type": "Bearer",
        "scope": issued.scope,
    });
    if let Some(refresh) = issued.refresh_token {
        body["refresh_token"] = refresh.into();
    }
    Ok(no_store(Json(body).into_response()))
}

/// What a grant issued, and to which user (none for client_credentials).
struct Granted {
    issued: IssuedTokens,
    user: Option<(i64, String)>,
}

fn require_registered(app: &Application, grant: GrantType) -> Result<(), OAuthError> {
    if app.grant_type == grant {
        Ok(())
    } else {
        Err(OAuthError::UnauthorizedClient(
            "This client is not registered for this grant type.",
        ))
    }
}

/// The throttle of [`crate::throttle`] is asked before the password is hashed.
async fn password_grant(
    state: &AppState,
    app: &Application,
    params: &Params,
    address: Option<IpAddr>,
) -> Result<Granted, OAuthError> {
    require_registered(app, GrantType::Password)?;
    let username = params.require("username")?;
    let password = params.require("password")?;
    let scope = resolve_scope(&state.settings, app, params.get("scope"))?;
    let throttle = Throttle::check(&state.store, username, address).await?;
    if throttle.refused() {
        tracing::warn!(address = %throttle.client, client_id = %app.client_id, "password grant refused: too many failures");
        return Err(OAuthError::Throttled);
    }
    let Some(user) = state.store.authenticate_user(username, password).await? else {
        throttle.failed(&state.store).await?;
        return Err(OAuthError::InvalidGrant("Invalid credentials given."));
    };
    throttle.succeeded(&state.store).await?;
    let settings = &state.settings;
    let new = NewTokens {
        application_id: app.id,
        user_id: Some(user.id),
        scope,
        access_lifetime: settings.access_token_lifetime,
        refresh_lifetime: Some(settings.refresh_token_lifetime),
        family: None,
    };
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: Some((user.id, user.username)),
    })
}

async fn client_credentials_grant(
    state: &AppState,
    app: &Application,
    params: &Params,
) -> Result<Granted, OAuthError> {
    require_registered(app, GrantType::ClientCredentials)?;
    if app.client_type != ClientType::Confidential {
        return Err(OAuthError::UnauthorizedClient(
            "Public clients cannot use client_credentials.",
        ));
    }
    let scope = resolve_scope(&state.settings, app, params.get("scope"))?;
    let new = NewTokens {
        application_id: app.id,
        user_id: None,
        scope,
        access_lifetime: state.settings.access_token_lifetime,
        refresh_lifetime: None,
        family: None,
    };
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: None,
    })
}

/// Rotation on every use: the presented refresh token and its access token stop working, and a
/// second presentation of a spent token revokes the whole family.
async fn refresh_grant(
    state: &AppState,
    app: &Application,
    params: &Params,
) -> Result<Granted, OAuthError> {
    if app.grant_type != GrantType::Password && app.grant_type != GrantType::AuthorizationCode {
        return Err(OAuthError::UnauthorizedClient(
            "This client is not registered for a grant with refresh tokens.",
        ));
    }
    let presented = params.require("refresh_token")?;
    // Check the scope against the original before spending the token, so a bad request costs nothing.
    let original = match state.store.find_token(presented).await? {
        Some(record) if record.application_id == app.id => record.scope,
        _ => return Err(OAuthError::InvalidGrant("Invalid refresh token.")),
    };
    // Scope omitted: the original, less what the application may no longer have.
    let scope: Vec<String> = match params.get("scope") {
        None => original
            .split_whitespace()
            .filter(|s| may_have(app, s))
            .map(str::to_owned)
            .collect(),
        Some(requested) => {
            let granted: Vec<&str> = original.split_whitespace().collect();
            let requested = dedup(requested);
            if let Some(wider) = requested.iter().find(|s| !granted.contains(&s.as_str())) {
                return Err(OAuthError::InvalidScope(format!(
                    "The scope \"{wider}\" was not granted originally."
                )));
            }
            if let Some(refused) = requested.iter().find(|s| !may_have(app, s)) {
                return Err(not_allowed(refused));
            }
            requested
        }
    };
    let scope = granted(scope)?;
    let record = match state.store.claim_refresh_token(presented, app.id).await? {
        RefreshOutcome::Claimed(record) => record,
        // A family revoked earlier: no new warning, the reuse that revoked it was logged then.
        RefreshOutcome::Invalid | RefreshOutcome::Revoked => {
            return Err(OAuthError::InvalidGrant("Invalid refresh token."));
        }
        RefreshOutcome::Reused => {
            tracing::warn!(client_id = %app.client_id, "refresh token reused: family revoked");
            return Err(OAuthError::InvalidGrant("Invalid refresh token."));
        }
    };
    let new = NewTokens {
        application_id: app.id,
        user_id: record.user_id,
        scope,
        access_lifetime: state.settings.access_token_lifetime,
        refresh_lifetime: Some(state.settings.refresh_token_lifetime),
        family: Some(record.family),
    };
    // invalid_grant (`FamilyRevoked`) when a racer presenting the same token revoked the family
    // meanwhile; tokens issued just before that revocation are dead at every lookup anyway.
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: record.user_id.zip(record.username),
    })
}

fn dedup(scope: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope.split_whitespace() {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    out
}

/// Whether `app` may be granted `scope`: within its allowed scopes, and `introspection` only
/// when it is allowed to introspect.
fn may_have(app: &Application, scope: &str) -> bool {
    (app.allowed_scopes.is_empty() || app.allowed_scopes.iter().any(|a| a == scope))
        && (scope != INTROSPECTION_SCOPE || app.may_introspect)
}

fn not_allowed(scope: &str) -> OAuthError {
    OAuthError::InvalidScope(format!(
        "The scope \"{scope}\" is not allowed for this client."
    ))
}

/// The scopes as the token's `scope`; none at all is `invalid_scope`.
fn granted(scopes: Vec<String>) -> Result<String, OAuthError> {
    if scopes.is_empty() {
        return Err(OAuthError::InvalidScope(
            "No scope could be granted.".into(),
        ));
    }
    Ok(scopes.join(" "))
}

/// The scope to grant: the configured defaults (within what the client may have, never
/// `introspection`) when none is asked for; otherwise exactly what was asked, each declared
/// and allowed for this client.
pub fn resolve_scope(
    settings: &Settings,
    app: &Application,
    requested: Option<&str>,
) -> Result<String, OAuthError> {
    let scopes: Vec<String> = match requested {
        None => settings
            .default_scopes
            .iter()
            .filter(|s| *s != INTROSPECTION_SCOPE && may_have(app, s))
            .cloned()
            .collect(),
        Some(requested) => {
            let requested = dedup(requested);
            if let Some(unknown) = requested.iter().find(|s| !settings.scopes.contains_key(*s)) {
                return Err(OAuthError::InvalidScope(format!(
                    "The scope \"{unknown}\" is not declared."
                )));
            }
            if let Some(refused) = requested.iter().find(|s| !may_have(app, s)) {
                return Err(not_allowed(refused));
            }
            requested
        }
    };
    granted(scopes)
}
