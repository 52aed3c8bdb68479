//! Carries out a checked [`GrantRequest`] against the store: the one place each grant turns into
//! tokens. No HTTP here: the handler in `token.rs` extracts the request and writes the answer.

use super::OAuthError;
use super::id_token::OpenIdGrant;
use crate::AppState;
use crate::protocol::GrantRequest;
use crate::protocol::grant::check_exchange;
use crate::protocol::oidc;
use crate::protocol::scope::{self, Declared};
use crate::store::{
    Application, CodeOutcome, IssuedTokens, NewTokens, RefreshOutcome, StoreError, now,
};
use crate::throttle::Throttle;
use std::net::IpAddr;

/// What a grant issued, and to which user (none for client_credentials); with an ID token to
/// add when the scope holds `openid` (the authorization code grant and its refreshes).
pub struct Granted {
    pub issued: IssuedTokens,
    pub user: Option<(i64, String)>,
    pub openid: Option<OpenIdGrant>,
}

/// The scopes the server declares, for [`scope::resolve`].
pub fn declared(state: &AppState) -> Declared<'_> {
    Declared {
        scopes: &state.settings.scopes,
        defaults: &state.settings.default_scopes,
    }
}

/// The client a grant is for: its registration, and the thumbprint of the client certificate
/// it came with (RFC 8705), to which the tokens are then bound.
pub struct Client<'a> {
    pub app: &'a Application,
    pub cert_x5t_s256: Option<String>,
}

/// Issues the tokens `request` asks `client` for (its registration already checked).
pub async fn grant(
    state: &AppState,
    client: &Client<'_>,
    request: GrantRequest,
    address: Option<IpAddr>,
) -> Result<Granted, OAuthError> {
    match request {
        GrantRequest::AuthorizationCode {
            code,
            redirect_uri,
            code_verifier,
        } => {
            authorization_code(
                state,
                client,
                &code,
                &redirect_uri,
                code_verifier.as_deref(),
            )
            .await
        }
        GrantRequest::Password {
            username,
            password,
            scope,
        } => {
            password_grant(
                state,
                client,
                &username,
                &password,
                scope.as_deref(),
                address,
            )
            .await
        }
        GrantRequest::RefreshToken {
            refresh_token,
            scope,
        } => refresh(state, client, &refresh_token, scope.as_deref()).await,
        GrantRequest::ClientCredentials { scope } => {
            client_credentials(state, client, scope.as_deref()).await
        }
    }
}

/// Tokens for `client` into `family` (a new one when None), with a refresh token when asked,
/// bound to its certificate when it came with one.
fn new_tokens(
    state: &AppState,
    client: &Client<'_>,
    user_id: Option<i64>,
    scope: String,
    refresh: bool,
    family: Option<String>,
) -> NewTokens {
    NewTokens {
        application_id: client.app.id,
        user_id,
        scope,
        access_lifetime: state.settings.access_token_lifetime,
        refresh_lifetime: refresh.then_some(state.settings.refresh_token_lifetime),
        family,
        cnf_x5t_s256: client.cert_x5t_s256.clone(),
    }
}

/// RFC 6749 §4.1.3 with RFC 7636 §4.6: the code is spent at its first presentation, then
/// checked; its tokens go into the family the code was issued with, which a second
/// presentation revokes (also when it races the first).
async fn authorization_code(
    state: &AppState,
    client: &Client<'_>,
    code: &str,
    redirect_uri: &str,
    code_verifier: Option<&str>,
) -> Result<Granted, OAuthError> {
    const INVALID: OAuthError = OAuthError::InvalidGrant("Invalid authorization code.");
    let app = client.app;
    let record = match state.store.claim_code(code).await? {
        CodeOutcome::Claimed(record) => record,
        CodeOutcome::Unknown => return Err(INVALID),
        CodeOutcome::Reused => {
            tracing::warn!(client_id = %app.client_id, "authorization code reused: its tokens are revoked");
            return Err(INVALID);
        }
    };
    check_exchange(
        &record.binding(),
        app.id,
        redirect_uri,
        code_verifier,
        now(),
    )?;
    let user = match state.store.get_user(record.user_id).await? {
        Some(user) if user.is_active => user,
        _ => return Err(INVALID),
    };
    // What the application may still have: an operator may have withdrawn a scope since.
    let scope = scope::narrow(&record.scope, app, None)?;
    let openid = oidc::is_openid(&scope).then(|| OpenIdGrant {
        user_id: user.id,
        // A code issued before OpenID Connect carries no sign-in time.
        auth_time: record.auth_time.unwrap_or_else(now),
        nonce: record.nonce.clone(),
    });
    let family = record.family;
    let new = new_tokens(
        state,
        client,
        Some(user.id),
        scope,
        true,
        Some(family.clone()),
    );
    let issued = match state.store.issue_tokens(&new).await {
        // Revoked meanwhile: by a second presentation of the code, or by the user.
        Err(StoreError::FamilyRevoked) => return Err(INVALID),
        other => other?,
    };
    if let Some(grant) = &openid {
        state
            .store
            .remember_auth_time(&family, user.id, grant.auth_time)
            .await?;
    }
    Ok(Granted {
        issued,
        user: Some((user.id, user.username)),
        openid,
    })
}

/// The throttle of [`crate::throttle`] is asked before the password is hashed.
async fn password_grant(
    state: &AppState,
    client: &Client<'_>,
    username: &str,
    password: &str,
    requested: Option<&str>,
    address: Option<IpAddr>,
) -> Result<Granted, OAuthError> {
    let app = client.app;
    let scope = scope::resolve(declared(state), app, requested)?;
    let throttle = Throttle::check(&state.store, username, address).await?;
    if throttle.refused() {
        tracing::warn!(address = %throttle.client, client_id = %app.client_id, "password grant refused: too many failures");
        crate::metrics::METRICS.throttled(crate::metrics::Throttled::PasswordGrant);
        return Err(OAuthError::Throttled);
    }
    let Some(user) = state.store.authenticate_user(username, password).await? else {
        throttle.failed(&state.store).await?;
        return Err(OAuthError::InvalidGrant("Invalid credentials given."));
    };
    throttle.succeeded(&state.store).await?;
    let new = new_tokens(state, client, Some(user.id), scope, true, None);
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: Some((user.id, user.username)),
        openid: None,
    })
}

async fn client_credentials(
    state: &AppState,
    client: &Client<'_>,
    requested: Option<&str>,
) -> Result<Granted, OAuthError> {
    let scope = scope::resolve(declared(state), client.app, requested)?;
    let new = new_tokens(state, client, None, scope, false, None);
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: None,
        openid: None,
    })
}

/// Rotation on every use: the presented refresh token and its access token stop working, and a
/// second presentation of a spent token revokes the whole family.
async fn refresh(
    state: &AppState,
    client: &Client<'_>,
    presented: &str,
    requested: Option<&str>,
) -> Result<Granted, OAuthError> {
    let app = client.app;
    // Check the scope against the original before spending the token, so a bad request costs nothing.
    let original = match state.store.find_token(presented).await? {
        Some(record) if record.application_id == app.id => record.scope,
        _ => return Err(OAuthError::InvalidGrant("Invalid refresh token.")),
    };
    let scope = scope::narrow(&original, app, requested)?;
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
    // A fresh ID token when the refreshed scope holds `openid` and the grant had one (its
    // family's sign-in time is kept).
    let openid = match record.user_id {
        Some(user_id) if oidc::is_openid(&scope) => state
            .store
            .auth_time_of(&record.family)
            .await?
            .map(|auth_time| OpenIdGrant {
                user_id,
                auth_time,
                nonce: None,
            }),
        _ => None,
    };
    let new = new_tokens(
        state,
        client,
        record.user_id,
        scope,
        true,
        Some(record.family),
    );
    // invalid_grant (`FamilyRevoked`) when a racer presenting the same token revoked the family
    // meanwhile; tokens issued just before that revocation are dead at every lookup anyway.
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: record.user_id.zip(record.username),
        openid,
    })
}
