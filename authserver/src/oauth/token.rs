//! `POST /o/token/`: the password, refresh_token and client_credentials grants (RFC 6749 §4.3, §4.4, §6).

use super::params::{Params, authenticate_client};
use super::{OAuthError, no_store};
use crate::AppState;
use crate::config::Settings;
use crate::store::{Application, ClientType, GrantType, IssuedTokens, NewTokens, RefreshOutcome};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub async fn token(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let params = Params::from_form(&headers, &body)?;
    let grant = match params.get("grant_type") {
        Some(g @ ("password" | "refresh_token" | "client_credentials")) => g,
        _ => return Err(OAuthError::UnsupportedGrantType),
    };
    let app = authenticate_client(&state.store, &headers, &params).await?;
    let issued = match grant {
        "password" => password_grant(&state, &app, &params).await?,
        "refresh_token" => refresh_grant(&state, &app, &params).await?,
        _ => client_credentials_grant(&state, &app, &params).await?,
    };
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

fn require_registered(app: &Application, grant: GrantType) -> Result<(), OAuthError> {
    if app.grant_type == grant {
        Ok(())
    } else {
        Err(OAuthError::UnauthorizedClient(
            "This client is not registered for this grant type.",
        ))
    }
}

async fn password_grant(
    state: &AppState,
    app: &Application,
    params: &Params,
) -> Result<IssuedTokens, OAuthError> {
    require_registered(app, GrantType::Password)?;
    let username = params.require("username")?;
    let password = params.require("password")?;
    let scope = resolve_scope(&state.settings, app, params.get("scope"))?;
    let Some(user) = state.store.authenticate_user(username, password).await? else {
        return Err(OAuthError::InvalidGrant("Invalid credentials given."));
    };
    let settings = &state.settings;
    let new = NewTokens {
        application_id: app.id,
        user_id: Some(user.id),
        scope,
        access_lifetime: settings.access_token_lifetime,
        refresh_lifetime: Some(settings.refresh_token_lifetime),
        family: None,
    };
    Ok(state.store.issue_tokens(&new).await?)
}

async fn client_credentials_grant(
    state: &AppState,
    app: &Application,
    params: &Params,
) -> Result<IssuedTokens, OAuthError> {
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
    Ok(state.store.issue_tokens(&new).await?)
}

/// Rotation on every use: the presented refresh token and its access token stop working, and a
/// second presentation of a spent token revokes the whole family.
async fn refresh_grant(
    state: &AppState,
    app: &Application,
    params: &Params,
) -> Result<IssuedTokens, OAuthError> {
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
    let scope = match params.get("scope") {
        None => original.clone(),
        Some(requested) => {
            let granted: Vec<&str> = original.split_whitespace().collect();
            let requested = dedup(requested);
            if let Some(wider) = requested.iter().find(|s| !granted.contains(&s.as_str())) {
                return Err(OAuthError::InvalidScope(format!(
                    "The scope \"{wider}\" was not granted originally."
                )));
            }
            requested.join(" ")
        }
    };
    let record = match state.store.claim_refresh_token(presented, app.id).await? {
        RefreshOutcome::Claimed(record) => record,
        RefreshOutcome::Invalid => return Err(OAuthError::InvalidGrant("Invalid refresh token.")),
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
    Ok(state.store.issue_tokens(&new).await?)
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

/// The scope to grant: the configured defaults (within what the client may have) when none is
/// asked for; otherwise exactly what was asked, each declared and allowed for this client.
pub fn resolve_scope(
    settings: &Settings,
    app: &Application,
    requested: Option<&str>,
) -> Result<String, OAuthError> {
    let allowed =
        |s: &str| app.allowed_scopes.is_empty() || app.allowed_scopes.iter().any(|a| a == s);
    let scopes: Vec<String> = match requested {
        None => settings
            .default_scopes
            .iter()
            .filter(|s| allowed(s))
            .cloned()
            .collect(),
        Some(requested) => {
            let requested = dedup(requested);
            if let Some(unknown) = requested.iter().find(|s| !settings.scopes.contains_key(*s)) {
                return Err(OAuthError::InvalidScope(format!(
                    "The scope \"{unknown}\" is not declared."
                )));
            }
            if let Some(refused) = requested.iter().find(|s| !allowed(s)) {
                return Err(OAuthError::InvalidScope(format!(
                    "The scope \"{refused}\" is not allowed for this client."
                )));
            }
            requested
        }
    };
    if scopes.is_empty() {
        return Err(OAuthError::InvalidScope(
            "No scope could be granted.".into(),
        ));
    }
    Ok(scopes.join(" "))
}
