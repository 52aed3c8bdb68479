//! Access tokens handed out as RFC 9068 JWTs, and finding the stored token behind a presented one.
//!
//! A JWT access token is an ordinary token row whose random value travels in the JWT's `ref`
//! claim, sealed by the signing key: the row is found by the digest of the value the `ref` opens
//! to, as an opaque token's is by the digest of the token. Only a JWT that verifies against our
//! keys leads to the row; the `ref` on its own (read from a log of claims, say) is no token.
//! Its `jti` is the public id of its rotation family (`crate::store::family_jti`), the id its
//! introspection answers and revocation events carry.

use super::OAuthError;
use crate::AppState;
use crate::domain::GROUPS_SCOPE;
use crate::jwt::access_token::{self, AccessTokenClaims, Audience};
use crate::jwt::{KeySet, Verified};
use crate::protocol::acr;
use crate::store::{FamilySignIn, Introspected, IssuedTokens, TokenKind, TokenRecord, now};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// Whose token it is.
pub enum Subject<'a> {
    User { id: i64, username: &'a str },
    Client,
}

/// The JWT to hand out instead of the opaque access token of `issued`, issued at `issued_at`
/// (taken before the row was written, so the JWT never outlives its row).
pub async fn jwt_for(
    state: &AppState,
    client_id: &str,
    subject: Subject<'_>,
    issued: &IssuedTokens,
    issued_at: i64,
    cnf: Option<access_token::Confirmation>,
    signed_in: Option<&FamilySignIn>,
) -> Result<String, OAuthError> {
    let settings = &state.settings;
    let keys = state
        .keys
        .keys_with_signer(&state.store, crate::jwt::Alg::EdDSA)
        .await?;
    let signer = keys
        .signer(crate::jwt::Alg::EdDSA, now())
        .ok_or_else(|| OAuthError::Server(anyhow::anyhow!("no signing key")))?;
    let reference = signer
        .seal_jti(&issued.access_token)
        .map_err(OAuthError::Server)?;
    let (sub, username, user_id) = match subject {
        Subject::User { id, username } => (id.to_string(), Some(username.to_owned()), Some(id)),
        Subject::Client => (client_id.to_owned(), None, None),
    };
    let groups = user_groups(state, user_id, &issued.scope).await?;
    let claims = AccessTokenClaims {
        iss: settings.issuer.clone(),
        sub,
        aud: audience_of(settings, issued.audience.as_deref()),
        client_id: client_id.to_owned(),
        iat: issued_at,
        exp: issued_at + issued.expires_in,
        jti: crate::store::family_jti(&issued.family),
        reference,
        scope: issued.scope.clone(),
        username,
        groups,
        cnf,
        auth_time: signed_in.map(|s| s.auth_time),
        acr: signed_in.map(|s| acr::acr_of(&s.amr).to_owned()),
        amr: signed_in.map(|s| acr::amr_list(&s.amr)),
    };
    access_token::sign(signer, &claims)
        .map_err(|error| OAuthError::Server(anyhow::anyhow!("signing a JWT failed: {error}")))
}

/// The `aud` of a token whose resources are `identifiers` (space-separated): one identifier as
/// a string, several as an array; none, the server's default audience.
pub fn audience_of(settings: &crate::config::Settings, identifiers: Option<&str>) -> Audience {
    match identifiers {
        None => Audience::One(settings.access_token_audience.clone()),
        Some(one) if !one.contains(' ') => Audience::One(one.to_owned()),
        Some(many) => Audience::Many(many.split(' ').map(str::to_owned).collect()),
    }
}

/// The stored token a presented one stands for: a JWT that verifies against our published
/// keys leads to the access token its `ref` opens to; anything else is looked up as it is.
/// `None` for unknown, forged and tampered tokens.
pub async fn find_presented(
    state: &AppState,
    token: &str,
) -> Result<Option<TokenRecord>, OAuthError> {
    let Some((value, jwt)) = stored_value(state, token).await? else {
        return Ok(None);
    };
    let record = state.store.find_token(&value).await?;
    Ok(record.filter(|r| !jwt || r.kind == TokenKind::Access))
}

/// [`find_presented`] for introspection: through the store's token cache.
pub async fn find_introspected(
    state: &AppState,
    token: &str,
) -> Result<Option<Arc<Introspected>>, OAuthError> {
    let Some((value, jwt)) = stored_value(state, token).await? else {
        return Ok(None);
    };
    let (found, hit) = state.store.introspect_token(&value).await?;
    crate::metrics::METRICS.token_cache(hit);
    Ok(found.filter(|f| !jwt || f.record.kind == TokenKind::Access))
}

/// The stored value a presented token stands for, and whether it was a JWT (which only an
/// access token is): the token itself, or the value inside a JWT of ours; None for a JWT that
/// does not verify.
async fn stored_value<'a>(
    state: &AppState,
    token: &'a str,
) -> Result<Option<(Cow<'a, str>, bool)>, OAuthError> {
    if access_token::looks_like_jwt(token) {
        let value = verified_value(state, token).await?;
        return Ok(value.map(|value| (Cow::Owned(value), true)));
    }
    Ok(Some((Cow::Borrowed(token), false)))
}

/// The stored value in a JWT signed by one of our published keys, with our issuer, not expired.
async fn verified_value(state: &AppState, token: &str) -> Result<Option<String>, OAuthError> {
    let check = |keys: &KeySet| {
        access_token::verify(
            keys,
            token,
            &state.settings.issuer,
            now(),
            state.settings.access_token_lifetime,
        )
    };
    let asked = Instant::now();
    let mut verdict = check(&*state.keys.keys(&state.store).await?);
    if verdict == Verified::UnknownKid {
        verdict = check(&*state.keys.keys_read_after(&state.store, asked).await?);
    }
    Ok(match verdict {
        Verified::StoredValue(value) => Some(value),
        Verified::UnknownKid | Verified::Invalid => None,
    })
}

/// The names of the groups of the token's user, as they are now, when the token has the
/// [`GROUPS_SCOPE`]; `None` otherwise (and for a client's own token).
async fn user_groups(
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
