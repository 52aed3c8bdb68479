//! Passkeys in the browser (issue 41 item 2): a signed-in user registers passkeys from
//! `/accounts/two-factor/` (named, several, removable); a sign-in uses one as its second factor
//! (after the password, beside a TOTP code) or alone, without password (a discoverable
//! credential with user verification). Each ceremony starts with a challenge from an `options`
//! endpoint (JSON for `static/passkeys.js`, bound to the session, the pending sign-in or the
//! sign-in page's pre-session cookie) and ends with a form post the server checks
//! ([`crate::protocol::webauthn`]). The relying party is the issuer's host, its origin the
//! issuer's origin.

use super::forms::FormData;
use super::second_factor::{self, TWO_FACTOR_PAGE};
use super::session::{SIGN_IN_AGAIN, SignedIn, login_url, may_sign_in};
use super::{WebError, WebResult, csrf, see_other};
use crate::AppState;
use crate::client_ip::ClientAddress;
use crate::protocol::webauthn::{self, Ceremony, RelyingParty, WebauthnError};
use crate::store::{ChallengePurpose, NewPasskey, StoreError, User};
use crate::throttle::{FAILURE_WINDOW, PerAddress, Throttle, Turn};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Where the two-factor page asks for a registration's options, and posts its result.
const REGISTER_OPTIONS: &str = "/accounts/two-factor/passkeys/options/";
const PASSKEYS: &str = "/accounts/two-factor/passkeys/";
/// Where the sign-in pages ask for an assertion's options, and post its result.
const SIGN_IN_OPTIONS: &str = "/accounts/login/passkey/options/";
const SIGN_IN: &str = "/accounts/login/passkey/";
/// Seconds a challenge waits for its answer; the browser is given a little less.
const CHALLENGE_LIFETIME: i64 = 300;
const TIMEOUT_MS: i64 = 240_000;
/// The longest name a passkey may have.
const MAX_NAME: usize = 64;
/// The methods (RFC 8176) of a sign-in with a password and a passkey. `swk`, not `hwk`: with
/// attestation `none` nothing proves the key lives in hardware (a synced passkey does not), so
/// the claim is proof of possession of a key, and no more.
pub(crate) const AMR_PASSWORD_AND_PASSKEY: &str = "pwd swk mfa";
/// The methods of a sign-in with a passkey alone: the key (`swk`), the user verified by the
/// authenticator (`user`: RFC 8176 has no value for "a PIN or a biometric, which one unknown"),
/// two factors in one device (`mfa`, as NIST SP 800-63B counts a multi-factor cryptographic
/// authenticator).
pub(crate) const AMR_PASSKEY: &str = "swk user mfa";

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route(REGISTER_OPTIONS, post(registration_options))
        .route(PASSKEYS, post(passkeys_submitted))
        .route(SIGN_IN_OPTIONS, post(sign_in_options))
        .route(SIGN_IN, post(sign_in))
}

/// This server as a relying party; passkeys are off (404) when the issuer names no host.
fn relying_party(state: &AppState) -> Result<&RelyingParty, WebError> {
    state.relying_party.as_ref().ok_or(WebError::NotFound)
}

/// The user handle of `user_id`'s credentials: the id's 8 bytes, big-endian (no name or email).
fn user_handle(user_id: i64) -> Vec<u8> {
    user_id.to_be_bytes().to_vec()
}

fn descriptors(ids: &[Vec<u8>]) -> Vec<Value> {
    ids.iter()
        .map(|id| json!({"type": "public-key", "id": webauthn::encode(id)}))
        .collect()
}

/// A refusal the options endpoints answer in JSON.
fn json_refusal(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": message}))).into_response()
}

/// `POST /accounts/two-factor/passkeys/options/`: the `PublicKeyCredentialCreationOptions` of a
/// new passkey for the signed-in user: a discoverable credential (usable without password),
/// attestation `none`, none of their passkeys again.
async fn registration_options(
    State(state): State<AppState>,
    signed_in: SignedIn,
    form: FormData,
) -> WebResult {
    csrf::verify_token(&signed_in.form_token, &form)?;
    if !signed_in.signed_in_recently() {
        return Ok(json_refusal(StatusCode::FORBIDDEN, SIGN_IN_AGAIN));
    }
    let rp = relying_party(&state)?;
    let user = &signed_in.user;
    let challenge = state
        .store
        .start_passkey_challenge(
            ChallengePurpose::Register,
            &signed_in.csrf_token,
            Some(user.id),
            CHALLENGE_LIFETIME,
        )
        .await?;
    let registered = state.store.passkey_ids(user.id).await?;
    let algorithms: Vec<Value> = webauthn::ALGORITHMS
        .iter()
        .map(|alg| json!({"type": "public-key", "alg": alg}))
        .collect();
    Ok(Json(json!({
        "rp": {"id": rp.id, "name": format!("tokengate {}", rp.id)},
        "user": {
            "id": webauthn::encode(&user_handle(user.id)),
            "name": user.username,
            "displayName": user.username,
        },
        "challenge": challenge,
        "pubKeyCredParams": algorithms,
        "timeout": TIMEOUT_MS,
        "attestation": "none",
        "authenticatorSelection": {
            "residentKey": "required",
            "requireResidentKey": true,
            "userVerification": "preferred",
        },
        "excludeCredentials": descriptors(&registered),
    }))
    .into_response())
}

/// A passkey's name as typed: trimmed, no control characters, at most [`MAX_NAME`] characters.
fn passkey_name(typed: &str) -> Option<String> {
    let name = typed.trim();
    let name = if name.is_empty() { "Passkey" } else { name };
    (name.chars().count() <= MAX_NAME && !name.chars().any(char::is_control))
        .then(|| name.to_owned())
}

/// `POST /accounts/two-factor/passkeys/`: `action=add` with a registration's result (and the
/// name typed), or `action=remove` with a passkey's credential id.
async fn passkeys_submitted(
    State(state): State<AppState>,
    signed_in: SignedIn,
    form: FormData,
) -> WebResult {
    csrf::verify_token(&signed_in.form_token, &form)?;
    let user_id = signed_in.user.id;
    if !signed_in.signed_in_recently() {
        let status = StatusCode::FORBIDDEN;
        return second_factor::two_factor_view(&state, &signed_in, status, Some(SIGN_IN_AGAIN))
            .await;
    }
    match form.get("action") {
        Some("add") => match register(&state, &signed_in, &form).await? {
            Ok(()) => Ok(see_other(TWO_FACTOR_PAGE)),
            Err(message) => {
                second_factor::two_factor_view(
                    &state,
                    &signed_in,
                    StatusCode::BAD_REQUEST,
                    Some(message),
                )
                .await
            }
        },
        Some("remove") => {
            let id = webauthn::decode(&form.text("credential_id"), webauthn::MAX_CREDENTIAL_ID);
            let removed = match id {
                Ok(id) => state.store.remove_passkey(user_id, &id).await?,
                Err(_) => false,
            };
            if !removed {
                return second_factor::two_factor_view(
                    &state,
                    &signed_in,
                    StatusCode::BAD_REQUEST,
                    Some(WebauthnError::UnknownCredential.message()),
                )
                .await;
            }
            tracing::info!(user_id, "passkey removed by its user");
            Ok(see_other(TWO_FACTOR_PAGE))
        }
        _ => Ok(see_other(TWO_FACTOR_PAGE)),
    }
}

/// Checks and stores a registration (§7.1): `Err` is the message for the page.
async fn register(
    state: &AppState,
    signed_in: &SignedIn,
    form: &FormData,
) -> Result<Result<(), &'static str>, WebError> {
    let rp = relying_party(state)?;
    let user_id = signed_in.user.id;
    let Some(name) = passkey_name(&form.text("name")) else {
        return Ok(Err(
            "A passkey's name is at most 64 characters, on one line.",
        ));
    };
    let checked = async {
        let json = webauthn::decode(&form.text("client_data"), webauthn::MAX_CLIENT_DATA)?;
        let client = webauthn::client_data(rp, Ceremony::Create, &json)?;
        let owner = state
            .store
            .take_passkey_challenge(
                &client.challenge,
                ChallengePurpose::Register,
                &signed_in.csrf_token,
            )
            .await?;
        if owner != Some(Some(user_id)) {
            return Err(Failure::Refused(WebauthnError::UnknownChallenge));
        }
        let id = webauthn::decode(&form.text("credential_id"), webauthn::MAX_CREDENTIAL_ID)?;
        let object = webauthn::decode(
            &form.text("attestation_object"),
            webauthn::MAX_ATTESTATION_OBJECT,
        )?;
        Ok(webauthn::registration(rp, &id, &object, false)?)
    };
    let credential = match checked.await {
        Ok(credential) => credential,
        Err(Failure::Refused(refused)) => {
            tracing::info!(user_id, reason = ?refused, "passkey registration refused");
            return Ok(Err(refused.message()));
        }
        Err(Failure::Store(error)) => return Err(error.into()),
    };
    let first = !state.store.has_second_factor(user_id).await?;
    let passkey = NewPasskey {
        credential: &credential,
        name: &name,
    };
    if !state.store.add_passkey(user_id, &passkey).await? {
        return Ok(Err("That passkey is registered already."));
    }
    if first {
        // As for a first TOTP factor: a session signed in before (stolen, perhaps) ends; from
        // now on the password alone is not a sign-in. The one that registered stays.
        state
            .store
            .delete_user_sessions_but(user_id, &signed_in.csrf_token)
            .await?;
    }
    tracing::info!(
        user_id,
        algorithm = credential.algorithm,
        "passkey registered"
    );
    Ok(Ok(()))
}

/// Why a ceremony did not finish: refused by a check (a page says why), or the store failed.
enum Failure {
    Refused(WebauthnError),
    Store(StoreError),
}

impl From<WebauthnError> for Failure {
    fn from(refusal: WebauthnError) -> Self {
        Failure::Refused(refusal)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

/// Which sign-in a passkey is used for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The second step after a right password: the pending sign-in's user, their passkeys.
    SecondFactor,
    /// No password: whoever's discoverable passkey answers, verified.
    Passwordless,
}

fn mode_of(form: &FormData) -> Mode {
    match form.get("mode") {
        Some("second-factor") => Mode::SecondFactor,
        _ => Mode::Passwordless,
    }
}

/// What a sign-in ceremony is bound to: the pending sign-in's cookie and its user, or the
/// pre-session cookie; `None` when the request has not got it.
async fn binding(
    state: &AppState,
    headers: &HeaderMap,
    mode: Mode,
) -> Result<Option<(String, Option<User>)>, WebError> {
    Ok(match mode {
        Mode::SecondFactor => second_factor::pending_user(state, headers)
            .await?
            .map(|(token, user)| (token, Some(user))),
        Mode::Passwordless => {
            csrf::login_binding(state, headers).map(|binding| (binding.to_owned(), None))
        }
    })
}

/// `POST /accounts/login/passkey/options/`: the `PublicKeyCredentialRequestOptions` of a
/// sign-in: the pending user's passkeys (`mode=second-factor`), or any discoverable one with
/// user verification (`mode=passwordless`). Anyone with a sign-in page's cookie may ask for the
/// password-less ones, so those challenges (each a stored row) are limited per client address
/// ([`PerAddress::PasskeyChallenge`]): past it, 429 with `Retry-After`. The second factor's are
/// not: they need a pending sign-in (a right password, throttled on its own) and are bound to it,
/// and a limit per address would let anyone behind the same NAT lock its user out of the step.
async fn sign_in_options(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    form: FormData,
) -> WebResult {
    csrf::verify_login(&state, &headers, &form).await?;
    let rp = relying_party(&state)?;
    let mode = mode_of(&form);
    let Some((binding, user)) = binding(&state, &headers, mode).await? else {
        return Ok(json_refusal(
            StatusCode::BAD_REQUEST,
            "This sign-in has expired: start again.",
        ));
    };
    let (purpose, allowed, verification) = match &user {
        Some(user) => (
            ChallengePurpose::SecondFactor,
            state.store.passkey_ids(user.id).await?,
            "preferred",
        ),
        None => (ChallengePurpose::Passwordless, Vec::new(), "required"),
    };
    if user.is_some() && allowed.is_empty() {
        return Ok(json_refusal(
            StatusCode::BAD_REQUEST,
            "You have no passkey.",
        ));
    }
    let turn = match &user {
        Some(_) => None,
        None => match Turn::check(&state.store, PerAddress::PasskeyChallenge, address).await? {
            Some(turn) => Some(turn),
            None => {
                tracing::warn!(address = ?address, "passkey options refused: too many from this address");
                crate::metrics::METRICS.throttled(crate::metrics::Throttled::PasskeyOptions);
                let mut response = json_refusal(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many passkey sign-ins from this address; try again later.",
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(FAILURE_WINDOW));
                return Ok(response);
            }
        },
    };
    let challenge = state
        .store
        .start_passkey_challenge(
            purpose,
            &binding,
            user.as_ref().map(|u| u.id),
            CHALLENGE_LIFETIME,
        )
        .await?;
    if let Some(turn) = turn {
        turn.counted(&state.store).await?;
    }
    Ok(Json(json!({
        "challenge": challenge,
        "rpId": rp.id,
        "timeout": TIMEOUT_MS,
        "userVerification": verification,
        "allowCredentials": descriptors(&allowed),
    }))
    .into_response())
}

/// `POST /accounts/login/passkey/`: an assertion (§7.2) that signs in: as the second factor of
/// the pending sign-in (`amr` [`AMR_PASSWORD_AND_PASSKEY`]), or without password (`amr`
/// [`AMR_PASSKEY`]). A refusal shows the page it came from again, with why.
async fn sign_in(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    form: FormData,
) -> WebResult {
    csrf::verify_login(&state, &headers, &form).await?;
    let next = second_factor::next_of(form.get("next"));
    let mode = mode_of(&form);
    let Some((binding, pending_user)) = binding(&state, &headers, mode).await? else {
        return Ok(see_other(&login_url(Some(&next))));
    };
    let throttle = match &pending_user {
        Some(user) => {
            let throttle = Throttle::second_factor(&state.store, user.id, address).await?;
            if throttle.refused() {
                crate::metrics::METRICS.throttled(crate::metrics::Throttled::SignIn);
                return second_factor::throttled_code_page(&state, &headers, user, next).await;
            }
            Some(throttle)
        }
        None => None,
    };
    let rp = relying_party(&state)?;
    let checked = async {
        let json = webauthn::decode(&form.text("client_data"), webauthn::MAX_CLIENT_DATA)?;
        let client = webauthn::client_data(rp, Ceremony::Get, &json)?;
        let purpose = match mode {
            Mode::SecondFactor => ChallengePurpose::SecondFactor,
            Mode::Passwordless => ChallengePurpose::Passwordless,
        };
        let Some(issued_for) = state
            .store
            .take_passkey_challenge(&client.challenge, purpose, &binding)
            .await?
        else {
            return Err(Failure::Refused(WebauthnError::UnknownChallenge));
        };
        let id = webauthn::decode(&form.text("credential_id"), webauthn::MAX_CREDENTIAL_ID)?;
        let Some(stored) = state.store.passkey(&id).await? else {
            return Err(Failure::Refused(WebauthnError::UnknownCredential));
        };
        let user = match &pending_user {
            // The passkey must be the pending user's, and the challenge issued for them.
            Some(user) if stored.user_id == user.id && issued_for == Some(user.id) => user.clone(),
            Some(_) => return Err(Failure::Refused(WebauthnError::UnknownCredential)),
            // Without password: the user handle the authenticator returns names its owner.
            None => {
                let handle = webauthn::decode(&form.text("user_handle"), 64)?;
                if handle != user_handle(stored.user_id) {
                    return Err(Failure::Refused(WebauthnError::UnknownCredential));
                }
                match state.store.get_user(stored.user_id).await? {
                    Some(user) if may_sign_in(&user) => user,
                    _ => return Err(Failure::Refused(WebauthnError::UnknownCredential)),
                }
            }
        };
        let data = webauthn::decode(
            &form.text("authenticator_data"),
            webauthn::MAX_ATTESTATION_OBJECT,
        )?;
        let signature = webauthn::decode(&form.text("signature"), webauthn::MAX_SIGNATURE)?;
        let assertion = webauthn::assertion(
            rp,
            &client,
            &data,
            &signature,
            &stored.public_key,
            stored.sign_count,
            mode == Mode::Passwordless,
        )?;
        Ok((user, id, assertion.sign_count))
    };
    let (user, id, count) = match checked.await {
        Ok(found) => found,
        Err(Failure::Refused(refusal)) => {
            tracing::info!(reason = ?refusal, "passkey sign-in refused");
            if let Some(throttle) = throttle {
                throttle.failed(&state.store).await?;
            }
            return refuse(&state, &headers, pending_user.as_ref(), next, refusal).await;
        }
        Err(Failure::Store(error)) => return Err(error.into()),
    };
    // Recorded once: a replayed assertion (or a copied authenticator) does not move it again.
    if !state.store.use_passkey(user.id, &id, count).await? {
        tracing::warn!(user_id = user.id, "passkey counter did not move on");
        if let Some(throttle) = throttle {
            throttle.failed(&state.store).await?;
        }
        return refuse(
            &state,
            &headers,
            pending_user.as_ref(),
            next,
            WebauthnError::CounterWentBack,
        )
        .await;
    }
    if let Some(throttle) = throttle {
        throttle.succeeded(&state.store).await?;
    }
    match mode {
        Mode::SecondFactor => {
            second_factor::finish_sign_in(
                &state,
                &headers,
                &binding,
                &user,
                AMR_PASSWORD_AND_PASSKEY,
                &next,
            )
            .await
        }
        Mode::Passwordless => {
            super::session::start_session(&state, &headers, &user, AMR_PASSKEY, &next).await
        }
    }
}

/// The page a refused passkey sign-in came from again, with why: the code step of the pending
/// sign-in, or the sign-in page.
async fn refuse(
    state: &AppState,
    headers: &HeaderMap,
    pending_user: Option<&User>,
    next: String,
    refusal: WebauthnError,
) -> WebResult {
    match pending_user {
        Some(user) => {
            second_factor::code_page_with_error(state, headers, user, next, refusal.message()).await
        }
        None => {
            Ok(super::auth::login_page_with_error(state, headers, next, refusal.message()).await)
        }
    }
}
