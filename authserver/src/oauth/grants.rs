//! Carries out a checked [`GrantRequest`] against the store: the one place each grant turns into
//! tokens. No HTTP here: the handler in `token.rs` extracts the request and writes the answer.

use super::OAuthError;
use super::id_token::OpenIdGrant;
use crate::AppState;
use crate::config::AccessTokenFormat;
use crate::domain::Resource;
use crate::protocol::GrantRequest;
use crate::protocol::grant::check_exchange;
use crate::protocol::oidc;
use crate::protocol::resource::{self, MAX_RESOURCES};
use crate::protocol::scope::{self, Declared};
use crate::store::{
    Application, CodeOutcome, FamilySignIn, IssuedTokens, NewTokens, RefreshOutcome, StoreError,
    now,
};
use crate::throttle::Throttle;
use std::net::IpAddr;

/// What a grant issued, and to which user (none for client_credentials); with an ID token to
/// add when the scope holds `openid` (the authorization code grant and its refreshes), and the
/// access-token format its resources ask for.
pub struct Granted {
    pub issued: IssuedTokens,
    pub user: Option<(i64, String)>,
    pub openid: Option<OpenIdGrant>,
    pub token_format: Option<AccessTokenFormat>,
    /// When and how the user signed in, for a user's tokens (`auth_time`, `acr`, `amr` of
    /// their JWT).
    pub signed_in: Option<FamilySignIn>,
}

/// The registered resources among those `values` name (at most one more than a request may
/// name: [`resource::indicators`] refuses that many anyway). The server's default audience
/// (`access_token_audience`) is a resource without being registered, with the declared scopes:
/// a client that read it from a sidecar's metadata (RFC 9728) may name it.
pub async fn known_resources(
    state: &AppState,
    values: &[&str],
) -> Result<Vec<Resource>, StoreError> {
    let mut known = Vec::new();
    for value in values.iter().take(MAX_RESOURCES + 1) {
        if let Some(found) = state.store.find_resource(value).await? {
            known.push(found);
        } else if *value == state.settings.access_token_audience {
            known.push(Resource {
                id: 0,
                identifier: state.settings.access_token_audience.clone(),
                name: state.settings.access_token_audience.clone(),
                scopes: state.settings.scopes.keys().cloned().collect(),
                token_format: None,
                access_token_lifetime: None,
                created_at: 0,
            });
        }
    }
    Ok(known)
}

/// The audience of new tokens: the resources (RFC 8707) they are for, the scope and lifetime
/// those allow, and the format they ask for. No resource: the default audience.
struct Audience {
    identifiers: Option<String>,
    lifetime: Option<i64>,
    token_format: Option<AccessTokenFormat>,
}

impl Audience {
    const DEFAULT: Audience = Audience {
        identifiers: None,
        lifetime: None,
        token_format: None,
    };

    /// For `resources`: the shortest lifetime any sets, the format when they agree on one.
    fn of(resources: &[&Resource]) -> Audience {
        if resources.is_empty() {
            return Audience::DEFAULT;
        }
        let formats: Vec<Option<AccessTokenFormat>> =
            resources.iter().map(|r| r.token_format).collect();
        Audience {
            identifiers: Some(
                resources
                    .iter()
                    .map(|r| r.identifier.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            lifetime: resources
                .iter()
                .filter_map(|r| r.access_token_lifetime)
                .min(),
            token_format: formats
                .iter()
                .all(|f| *f == formats[0])
                .then_some(formats[0])
                .flatten(),
        }
    }
}

/// Whether `scope` is one of OpenID Connect's, which ride along with any resource's.
fn is_oidc_scope(scope: &str) -> bool {
    oidc::scope_description(scope).is_some()
}

/// The scope and audience of a new grant that names `requested` resources (none: the
/// declared scopes and the default audience).
fn scope_and_audience(
    state: &AppState,
    app: &Application,
    requested_scope: Option<&str>,
    requested: &[String],
    known: &[Resource],
) -> Result<(String, Audience), OAuthError> {
    let targets = resource::registered(requested, known)?;
    if targets.is_empty() {
        return Ok((
            scope::resolve(declared(state), app, requested_scope)?,
            Audience::DEFAULT,
        ));
    }
    let scope = resource::scope_for(&targets, app, requested_scope, is_oidc_scope)?;
    Ok((scope, Audience::of(&targets)))
}

/// The scope and audience of a refresh or a code exchange: `granted_audience` narrowed to the
/// `requested` resources, and `scope` to what those offer.
async fn narrowed(
    state: &AppState,
    scope: String,
    granted_audience: Option<&str>,
    requested: &[String],
) -> Result<(String, Audience), OAuthError> {
    let audience = resource::narrow_audience(granted_audience, requested)?;
    let Some(identifiers) = audience else {
        return Ok((scope, Audience::DEFAULT));
    };
    let values: Vec<&str> = identifiers.split(' ').collect();
    let known = known_resources(state, &values).await?;
    // A resource deleted since the grant: no new token names it.
    let targets = resource::registered(
        &values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>(),
        &known,
    )?;
    let scope = if requested.is_empty() {
        scope
    } else {
        resource::scope_within(&scope, &targets, is_oidc_scope)?
    };
    Ok((scope, Audience::of(&targets)))
}

/// The scopes the server declares, for [`scope::resolve`].
pub fn declared(state: &AppState) -> Declared<'_> {
    Declared {
        scopes: &state.settings.scopes,
        defaults: &state.settings.default_scopes,
    }
}

/// The client a grant is for: its registration, the thumbprint of the client certificate it
/// came with (RFC 8705) and that of the DPoP key it proved (RFC 9449), to which the tokens are
/// then bound.
pub struct Client<'a> {
    pub app: &'a Application,
    pub cert_x5t_s256: Option<String>,
    pub dpop_jkt: Option<String>,
}

/// Issues the tokens `request` asks `client` for (its registration already checked), for the
/// `resources` it names (RFC 8707; checked here).
pub async fn grant(
    state: &AppState,
    client: &Client<'_>,
    request: GrantRequest,
    resources: &[&str],
    address: Option<IpAddr>,
) -> Result<Granted, OAuthError> {
    let requested = resource::indicators(resources)?;
    let target = Target {
        known: known_resources(state, resources).await?,
        requested,
    };
    match request {
        GrantRequest::AuthorizationCode {
            code,
            redirect_uri,
            code_verifier,
        } => {
            authorization_code(
                state,
                client,
                &target,
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
                &target,
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
        } => refresh(state, client, &target, &refresh_token, scope.as_deref()).await,
        GrantRequest::ClientCredentials { scope } => {
            client_credentials(state, client, &target, scope.as_deref()).await
        }
    }
}

/// The resources a token request names, and those of them that are registered.
struct Target {
    requested: Vec<String>,
    known: Vec<Resource>,
}

/// Tokens for `client` into `family` (a new one when None), with a refresh token when asked,
/// bound to its certificate when it came with one.
fn new_tokens(
    state: &AppState,
    client: &Client<'_>,
    user_id: Option<i64>,
    (scope, audience): (String, &Audience),
    refresh: bool,
    family: Option<String>,
) -> NewTokens {
    NewTokens {
        application_id: client.app.id,
        user_id,
        scope,
        access_lifetime: audience
            .lifetime
            .unwrap_or(state.settings.access_token_lifetime),
        refresh_lifetime: refresh.then_some(state.settings.refresh_token_lifetime),
        family,
        cnf_x5t_s256: client.cert_x5t_s256.clone(),
        cnf_jkt: client.dpop_jkt.clone(),
        audience: audience.identifiers.clone(),
    }
}

/// RFC 6749 §4.1.3 with RFC 7636 §4.6: the code is spent at its first presentation, then
/// checked; its tokens go into the family the code was issued with, which a second
/// presentation revokes (also when it races the first).
async fn authorization_code(
    state: &AppState,
    client: &Client<'_>,
    target: &Target,
    code: &str,
    redirect_uri: &str,
    code_verifier: Option<&str>,
) -> Result<Granted, OAuthError> {
    const INVALID: OAuthError = OAuthError::InvalidGrant("Invalid authorization code.");
    let app = client.app;
    let record = match state.store.claim_code(code).await? {
        CodeOutcome::Claimed(record) => *record,
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
    // RFC 9449 §10: a code whose request named a key is exchanged with a proof of that key.
    same_key(record.dpop_jkt.as_deref(), client.dpop_jkt.as_deref())?;
    let user = match state.store.get_user(record.user_id).await? {
        Some(user) if user.is_active => user,
        _ => return Err(INVALID),
    };
    // What the application may still have: an operator may have withdrawn a scope since.
    let scope = scope::narrow(&record.scope, app, None)?;
    let (scope, audience) =
        narrowed(state, scope, record.resource.as_deref(), &target.requested).await?;
    let signed_in = FamilySignIn {
        // A code issued before OpenID Connect carries no sign-in time.
        auth_time: record.auth_time.unwrap_or_else(now),
        // Nor one issued before second factors its methods: a password.
        amr: record.amr.clone().unwrap_or_else(|| "pwd".to_owned()),
    };
    let openid = oidc::is_openid(&scope).then(|| OpenIdGrant {
        user_id: user.id,
        signed_in: signed_in.clone(),
        nonce: record.nonce.clone(),
    });
    let family = record.family;
    let new = new_tokens(
        state,
        client,
        Some(user.id),
        (scope, &audience),
        true,
        Some(family.clone()),
    );
    let issued = match state.store.issue_tokens(&new).await {
        // Revoked meanwhile: by a second presentation of the code, or by the user.
        Err(StoreError::FamilyRevoked) => return Err(INVALID),
        other => other?,
    };
    state
        .store
        .remember_sign_in(&family, user.id, signed_in.auth_time, &signed_in.amr)
        .await?;
    Ok(Granted {
        issued,
        user: Some((user.id, user.username)),
        openid,
        token_format: audience.token_format,
        signed_in: Some(signed_in),
    })
}

/// The throttle of [`crate::throttle`] is asked before the password is hashed.
async fn password_grant(
    state: &AppState,
    client: &Client<'_>,
    target: &Target,
    username: &str,
    password: &str,
    requested: Option<&str>,
    address: Option<IpAddr>,
) -> Result<Granted, OAuthError> {
    let app = client.app;
    let (scope, audience) =
        scope_and_audience(state, app, requested, &target.requested, &target.known)?;
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
    let new = new_tokens(state, client, Some(user.id), (scope, &audience), true, None);
    let issued = state.store.issue_tokens(&new).await?;
    // A password alone, now (RFC 8176 `pwd`): what the family's tokens say of the sign-in.
    let signed_in = FamilySignIn {
        auth_time: now(),
        amr: "pwd".to_owned(),
    };
    state
        .store
        .remember_sign_in(&issued.family, user.id, signed_in.auth_time, &signed_in.amr)
        .await?;
    Ok(Granted {
        issued,
        user: Some((user.id, user.username)),
        openid: None,
        token_format: audience.token_format,
        signed_in: Some(signed_in),
    })
}

async fn client_credentials(
    state: &AppState,
    client: &Client<'_>,
    target: &Target,
    requested: Option<&str>,
) -> Result<Granted, OAuthError> {
    let (scope, audience) = scope_and_audience(
        state,
        client.app,
        requested,
        &target.requested,
        &target.known,
    )?;
    let new = new_tokens(state, client, None, (scope, &audience), false, None);
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: None,
        openid: None,
        token_format: audience.token_format,
        signed_in: None,
    })
}

/// Rotation on every use: the presented refresh token and its access token stop working, and a
/// second presentation of a spent token revokes the whole family.
async fn refresh(
    state: &AppState,
    client: &Client<'_>,
    target: &Target,
    presented: &str,
    requested: Option<&str>,
) -> Result<Granted, OAuthError> {
    let app = client.app;
    // Check the scope and audience against the original before spending the token, so a bad
    // request costs nothing.
    let original = match state.store.find_token(presented).await? {
        Some(record) if record.application_id == app.id => record,
        _ => return Err(OAuthError::InvalidGrant("Invalid refresh token.")),
    };
    same_key(original.cnf_jkt.as_deref(), client.dpop_jkt.as_deref())?;
    let scope = scope::narrow(&original.scope, app, requested)?;
    let (scope, audience) = narrowed(
        state,
        scope,
        original.audience.as_deref(),
        &target.requested,
    )
    .await?;
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
    let signed_in = match record.user_id {
        Some(_) => state.store.sign_in_of(&record.family).await?,
        None => None,
    };
    let openid = match (record.user_id, &signed_in) {
        (Some(user_id), Some(signed_in)) if oidc::is_openid(&scope) => Some(OpenIdGrant {
            user_id,
            signed_in: signed_in.clone(),
            nonce: None,
        }),
        _ => None,
    };
    let new = new_tokens(
        state,
        client,
        record.user_id,
        (scope, &audience),
        true,
        Some(record.family),
    );
    // invalid_grant (`FamilyRevoked`) when a racer presenting the same token revoked the family
    // meanwhile; tokens issued just before that revocation are dead at every lookup anyway.
    Ok(Granted {
        issued: state.store.issue_tokens(&new).await?,
        user: record.user_id.zip(record.username),
        openid,
        token_format: audience.token_format,
        signed_in,
    })
}

/// A refresh token bound to a DPoP key (RFC 9449 §5.0, §5.2) is spent only with a proof of
/// that key, whoever the client is (bound refresh tokens are not kept to public clients here);
/// so is a code whose request named a key (§10).
fn same_key(bound: Option<&str>, proven: Option<&str>) -> Result<(), OAuthError> {
    match (bound, proven) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(OAuthError::InvalidDpopProof(
            "The grant (refresh token or code) is bound to a DPoP key: send a proof of it.",
        )),
        (Some(bound), Some(proven)) if resource_server::dpop::thumbprint_matches(bound, proven) => {
            Ok(())
        }
        (Some(_), Some(_)) => Err(OAuthError::InvalidDpopProof(
            "The grant (refresh token or code) is bound to another DPoP key.",
        )),
    }
}
