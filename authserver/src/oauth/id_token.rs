//! The ID tokens of the token endpoint (OpenID Connect Core 1.0 §3.1.3.3, §12.2): for a code
//! whose scope holds `openid`, and for refreshes of such a grant; and reading back an ID token
//! of ours presented as an `id_token_hint`.

use super::OAuthError;
use crate::AppState;
use crate::domain::Application;
use crate::jwt::Alg;
use crate::jwt::id_token::{self, IdTokenClaims};
use crate::protocol::acr;
use crate::store::{StoreResult, now};
use std::time::Instant;

/// How long an ID token is valid (seconds), at most: never longer than an access token, so the
/// key that signed it is published for as long ([`crate::jwt::keys`]).
pub const ID_TOKEN_LIFETIME: i64 = 3600;

/// What an ID token is issued for: whose sign-in, when, and the request's `nonce`.
#[derive(Debug, Clone)]
pub struct OpenIdGrant {
    pub user_id: i64,
    /// When and how they signed in (`auth_time`, `acr`, `amr`).
    pub signed_in: crate::store::FamilySignIn,
    /// The authorization request's (none on a refresh: Core 1.0 §12.2).
    pub nonce: Option<String>,
}

/// The ID token for `grant` to `app`, delivered with `access_token` (its `at_hash`), signed
/// with the application's `id_token_signed_response_alg`.
pub async fn issue(
    state: &AppState,
    app: &Application,
    grant: &OpenIdGrant,
    access_token: &str,
) -> Result<String, OAuthError> {
    let registration = state.store.oidc_client(app.id).await?;
    let alg = Alg::parse(&registration.id_token_alg).unwrap_or(Alg::RS256);
    let keys = state.keys.keys_with_signer(&state.store, alg).await?;
    let signer = keys
        .signer(alg, now())
        .ok_or_else(|| OAuthError::Server(anyhow::anyhow!("no {} signing key", alg.as_str())))?;
    let iat = now();
    let lifetime = ID_TOKEN_LIFETIME.min(state.settings.access_token_lifetime);
    let claims = IdTokenClaims {
        iss: state.settings.issuer.clone(),
        sub: grant.user_id.to_string(),
        aud: app.client_id.clone(),
        exp: iat + lifetime,
        iat,
        auth_time: grant.signed_in.auth_time,
        acr: Some(acr::acr_of(&grant.signed_in.amr).to_owned()),
        amr: Some(acr::amr_list(&grant.signed_in.amr)),
        nonce: grant.nonce.clone(),
        at_hash: Some(id_token::at_hash(access_token, alg)),
        azp: Some(app.client_id.clone()),
    };
    id_token::sign(signer, &claims)
        .map_err(|error| OAuthError::Server(anyhow::anyhow!("signing an ID token failed: {error}")))
}

/// The claims of `hint` when it is an ID token of ours (signature, issuer; expired ones too).
/// A kid this replica's copy of the keys lacks reads the keys again (at most once a second).
pub async fn read_id_token_hint(
    state: &AppState,
    hint: &str,
) -> StoreResult<Option<IdTokenClaims>> {
    let lifetime = state.settings.access_token_lifetime;
    let issuer = &state.settings.issuer;
    let asked = Instant::now();
    let keys = state.keys.keys(&state.store).await?;
    if let Some(claims) = id_token::verify_hint(&keys, hint, issuer, now(), lifetime) {
        return Ok(Some(claims));
    }
    let kid = jsonwebtoken::decode_header(hint).ok().and_then(|h| h.kid);
    let unknown = kid.is_some_and(|kid| keys.find_published(&kid, now(), lifetime).is_none());
    if !unknown {
        return Ok(None);
    }
    let keys = state.keys.keys_read_after(&state.store, asked).await?;
    Ok(id_token::verify_hint(&keys, hint, issuer, now(), lifetime))
}
