//! Second factors in the browser: `/accounts/login/code/`, the sign-in's second step for users
//! with a second factor (a code of their app or a recovery code, throttled as passwords are; a
//! passkey, [`super::passkeys`]), and `/accounts/two-factor/`, where a signed-in user enrols an
//! app (an `otpauth://` URI and its QR code, confirmed with a first code), receives recovery
//! codes, or removes the factor, and lists, adds and removes their passkeys.

use super::forms::FormData;
use super::session::{
    SIGN_IN_AGAIN, SignedIn, append_cookie, cookie, login_url, safe_next, set_cookie,
};
use super::templates::{LoginCodePage, Nav, PasskeyRow, TwoFactorPage};
use super::{WebError, WebResult, csrf, render, see_other};
use crate::AppState;
use crate::client_ip::ClientAddress;
use crate::protocol::totp;
use crate::store::{User, now};
use crate::throttle::{FAILURE_WINDOW, Throttle};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use base64::Engine;
use serde::Deserialize;
use std::net::IpAddr;

/// The cookie naming a sign-in whose password was right, waiting for its second factor.
pub(super) const PENDING_COOKIE: &str = "tokengate_pending";
/// Where that cookie is sent: the sign-in pages only.
const PENDING_PATH: &str = "/accounts/login/";
/// Seconds a pending sign-in waits for its code.
const PENDING_LIFETIME: i64 = 300;
/// The second step's page.
const CODE_PAGE: &str = "/accounts/login/code/";
/// The enrolment page.
pub(crate) const TWO_FACTOR_PAGE: &str = "/accounts/two-factor/";
/// The methods (RFC 8176) of a sign-in with a password and a one-time code.
pub(crate) const AMR_PASSWORD_AND_OTP: &str = "pwd otp mfa";

const WRONG_CODE: &str = "That code is not right, or was used already. Try the next one.";
const THROTTLED: &str = "Too many wrong codes. Wait 15 minutes and try again.";

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route(CODE_PAGE, get(code_page).post(code_submitted))
        .route(
            TWO_FACTOR_PAGE,
            get(two_factor_page).post(two_factor_submitted),
        )
}

/// After a right password: a pending sign-in for `user` and the way to the second step.
pub(super) async fn ask_for_code(
    state: &AppState,
    user: &User,
    next: &str,
) -> Result<Response, WebError> {
    let token = state
        .store
        .start_pending_sign_in(user.id, PENDING_LIFETIME)
        .await?;
    tracing::info!(user_id = user.id, "password right: second factor asked");
    let mut response = see_other(&format!(
        "{CODE_PAGE}?next={}",
        form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    ));
    append_cookie(
        &mut response,
        &set_cookie(
            state,
            PENDING_COOKIE,
            &token,
            PENDING_PATH,
            Some(PENDING_LIFETIME),
        ),
    );
    Ok(response)
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

pub(super) fn next_of(next: Option<&str>) -> String {
    next.and_then(safe_next)
        .unwrap_or(super::session::HOME)
        .to_owned()
}

/// The pending sign-in this request's cookie names (the cookie and its user), if its user may
/// still sign in: the code page, the code and a passkey at the factor step all start here.
pub(super) async fn pending_user(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(String, User)>, WebError> {
    let Some(token) = cookie(headers, PENDING_COOKIE) else {
        return Ok(None);
    };
    Ok(state
        .store
        .pending_sign_in(token)
        .await?
        .filter(super::session::may_sign_in)
        .map(|user| (token.to_owned(), user)))
}

async fn code_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<NextQuery>,
) -> WebResult {
    let next = next_of(query.next.as_deref());
    let Some((_, user)) = pending_user(&state, &headers).await? else {
        return Ok(see_other(&login_url(Some(&next))));
    };
    code_form(&state, &headers, &user, StatusCode::OK, next, None).await
}

/// The second step's page for `user`: the code form when they have a TOTP factor or recovery
/// codes, the passkey button when they have a passkey.
async fn code_form(
    state: &AppState,
    headers: &HeaderMap,
    user: &User,
    status: StatusCode,
    next: String,
    error: Option<&str>,
) -> WebResult {
    let totp = state.store.has_totp(user.id).await?;
    let codes = totp || state.store.recovery_codes_left(user.id).await? > 0;
    let passkey = state.store.has_passkey(user.id).await?;
    Ok(super::sign_in_page(
        state,
        headers,
        status,
        &next.clone(),
        |csrf_token, application| LoginCodePage {
            nav: Nav::anonymous(),
            csrf_token,
            next,
            error: error.map(str::to_owned),
            application,
            totp,
            codes,
            passkey,
        },
    )
    .await)
}

/// The second step's page again, 400, with `message` (a refused passkey).
pub(super) async fn code_page_with_error(
    state: &AppState,
    headers: &HeaderMap,
    user: &User,
    next: String,
    message: &str,
) -> WebResult {
    code_form(
        state,
        headers,
        user,
        StatusCode::BAD_REQUEST,
        next,
        Some(message),
    )
    .await
}

/// The second step's page, 429 with `Retry-After`: too many wrong factors.
pub(super) async fn throttled_code_page(
    state: &AppState,
    headers: &HeaderMap,
    user: &User,
    next: String,
) -> WebResult {
    let page = code_form(
        state,
        headers,
        user,
        StatusCode::TOO_MANY_REQUESTS,
        next,
        Some(THROTTLED),
    )
    .await?;
    Ok(throttled(page))
}

/// Ends the pending sign-in named by `token` (one request does) and signs `user` in with the
/// methods `amr`; back to the sign-in page for a request that came second.
pub(super) async fn finish_sign_in(
    state: &AppState,
    headers: &HeaderMap,
    token: &str,
    user: &User,
    amr: &str,
    next: &str,
) -> WebResult {
    if !state.store.end_pending_sign_in(token).await? {
        return Ok(see_other(&login_url(Some(next))));
    }
    let mut response = super::session::start_session(state, headers, user, amr, next).await?;
    append_cookie(
        &mut response,
        &set_cookie(state, PENDING_COOKIE, "", PENDING_PATH, Some(0)),
    );
    Ok(response)
}

/// What checking a code gave.
enum CodeCheck {
    Right,
    Wrong,
    Throttled,
}

/// Checks `code` (a code of the user's app, or one of their recovery codes) behind the
/// second-factor throttle, spending it when right.
async fn check_code(
    state: &AppState,
    user_id: i64,
    code: &str,
    address: Option<IpAddr>,
) -> Result<CodeCheck, WebError> {
    let throttle = Throttle::second_factor(&state.store, user_id, address).await?;
    if throttle.refused() {
        tracing::warn!(user_id, address = %throttle.client, "second factor refused: too many wrong codes");
        crate::metrics::METRICS.throttled(crate::metrics::Throttled::SignIn);
        return Ok(CodeCheck::Throttled);
    }
    let step = match state.store.totp_factor(user_id).await? {
        Some(factor) if factor.confirmed => {
            totp::verify(&factor.secret, code, now(), factor.last_step)
        }
        _ => None,
    };
    // Recovery codes stand in for any factor (they outlive a TOTP factor removed while
    // passkeys stay).
    let right = match step {
        Some(step) => state.store.use_totp_step(user_id, step).await?,
        None => match totp::normalize_recovery_code(code) {
            Some(recovery) => state.store.use_recovery_code(user_id, &recovery).await?,
            None => false,
        },
    };
    if right {
        throttle.succeeded(&state.store).await?;
        Ok(CodeCheck::Right)
    } else {
        tracing::info!(user_id, address = %throttle.client, "second factor failed");
        throttle.failed(&state.store).await?;
        Ok(CodeCheck::Wrong)
    }
}

fn throttled(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(FAILURE_WINDOW));
    response
}

async fn code_submitted(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    form: FormData,
) -> WebResult {
    csrf::verify_login(&state, &headers, &form).await?;
    let next = next_of(form.get("next"));
    let Some((token, user)) = pending_user(&state, &headers).await? else {
        return Ok(see_other(&login_url(Some(&next))));
    };
    let code = form.text("code");
    match check_code(&state, user.id, &code, address).await? {
        CodeCheck::Throttled => throttled_code_page(&state, &headers, &user, next).await,
        CodeCheck::Wrong => code_page_with_error(&state, &headers, &user, next, WRONG_CODE).await,
        CodeCheck::Right => {
            finish_sign_in(&state, &headers, &token, &user, AMR_PASSWORD_AND_OTP, &next).await
        }
    }
}

/// The label authenticator apps show for this server: its issuer's host.
fn issuer_label(state: &AppState) -> String {
    let issuer = &state.settings.issuer;
    let host = issuer
        .split_once("://")
        .map_or(issuer.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    format!("tokengate {host}")
}

/// The enrolment page for an unconfirmed `secret`.
fn setup_page(
    state: &AppState,
    signed_in: &SignedIn,
    secret: &[u8],
    error: Option<&str>,
) -> TwoFactorPage {
    let uri = totp::otpauth_uri(secret, &issuer_label(state), &signed_in.user.username);
    let qr = qrcode::QrCode::new(uri.as_bytes())
        .map(|code| {
            code.render::<qrcode::render::svg::Color>()
                .min_dimensions(200, 200)
                .build()
        })
        .map(|svg| {
            format!(
                "data:image/svg+xml;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(svg)
            )
        })
        .unwrap_or_default();
    TwoFactorPage {
        nav: Nav::signed_in(&signed_in.user, &signed_in.form_token),
        stage: "setup",
        otpauth_uri: uri,
        qr_data_uri: qr,
        secret: totp::base32(secret),
        recovery_codes: Vec::new(),
        recovery_left: 0,
        error: error.map(str::to_owned),
        passkeys: Vec::new(),
        has_factor: false,
    }
}

fn enabled_page(signed_in: &SignedIn, recovery_left: i64, error: Option<&str>) -> TwoFactorPage {
    TwoFactorPage {
        nav: Nav::signed_in(&signed_in.user, &signed_in.form_token),
        stage: "enabled",
        otpauth_uri: String::new(),
        qr_data_uri: String::new(),
        secret: String::new(),
        recovery_codes: Vec::new(),
        recovery_left,
        error: error.map(str::to_owned),
        passkeys: Vec::new(),
        has_factor: true,
    }
}

/// Renders `page` with the user's passkeys (and, beside a TOTP factor being enrolled, whether
/// they have another factor: the recovery codes can then be made anew).
async fn show(
    state: &AppState,
    signed_in: &SignedIn,
    status: StatusCode,
    mut page: TwoFactorPage,
) -> WebResult {
    let user_id = signed_in.user.id;
    page.passkeys = state
        .store
        .passkeys_of(user_id)
        .await?
        .into_iter()
        .map(|passkey| PasskeyRow {
            credential_id: passkey.credential_id,
            name: passkey.name,
            created: super::templates::utc(passkey.created_at),
            last_used: passkey
                .last_used_at
                .map_or_else(|| "never".to_owned(), super::templates::utc),
        })
        .collect();
    page.has_factor = page.has_factor || !page.passkeys.is_empty();
    if page.stage == "setup" && page.has_factor {
        page.recovery_left = state.store.recovery_codes_left(user_id).await?;
    }
    Ok(render(status, &page))
}

/// The two-factor page as [`two_factor_page`] shows it, with `status` and `error`.
pub(super) async fn two_factor_view(
    state: &AppState,
    signed_in: &SignedIn,
    status: StatusCode,
    error: Option<&str>,
) -> WebResult {
    let user_id = signed_in.user.id;
    let factor = state.store.totp_factor(user_id).await?;
    let page = match factor {
        Some(factor) if factor.confirmed => {
            let left = state.store.recovery_codes_left(user_id).await?;
            enabled_page(signed_in, left, error)
        }
        Some(factor) => setup_page(state, signed_in, &factor.secret, error),
        None => {
            // Two first visits at once (two tabs, a prefetch) keep the first secret: the page
            // shows the one stored, which its first code will confirm.
            state
                .store
                .start_totp_enrolment(user_id, &totp::new_secret())
                .await?;
            match state.store.totp_factor(user_id).await? {
                Some(factor) => setup_page(state, signed_in, &factor.secret, error),
                None => return Ok(see_other(TWO_FACTOR_PAGE)),
            }
        }
    };
    show(state, signed_in, status, page).await
}

/// `GET /accounts/two-factor/`: the factor's state, or its enrolment (a new secret, kept
/// unconfirmed until a first code); the user's passkeys.
async fn two_factor_page(State(state): State<AppState>, signed_in: SignedIn) -> WebResult {
    two_factor_view(&state, &signed_in, StatusCode::OK, None).await
}

/// `POST /accounts/two-factor/`: `action=confirm` with a first code (then the recovery codes,
/// shown once), `action=remove` with a code (of the app or a recovery code), or
/// `action=recovery-codes`: new recovery codes for a user with a factor (the old ones stop
/// working), shown once.
async fn two_factor_submitted(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    signed_in: SignedIn,
    form: FormData,
) -> WebResult {
    csrf::verify_token(&signed_in.form_token, &form)?;
    let user_id = signed_in.user.id;
    let code = form.text("code");
    // Removing the app's factor asks for a code of it; adding one, or new recovery codes, a
    // recent sign-in.
    if form.get("action") != Some("remove") && !signed_in.signed_in_recently() {
        let status = StatusCode::FORBIDDEN;
        return two_factor_view(&state, &signed_in, status, Some(SIGN_IN_AGAIN)).await;
    }
    if form.get("action") == Some("recovery-codes") {
        return new_recovery_codes(&state, &signed_in).await;
    }
    let Some(factor) = state.store.totp_factor(user_id).await? else {
        return Ok(see_other(TWO_FACTOR_PAGE));
    };
    match (form.get("action"), factor.confirmed) {
        (Some("confirm"), false) => {
            let throttle = Throttle::second_factor(&state.store, user_id, address).await?;
            if throttle.refused() {
                let page = setup_page(&state, &signed_in, &factor.secret, Some(THROTTLED));
                let status = StatusCode::TOO_MANY_REQUESTS;
                return Ok(throttled(show(&state, &signed_in, status, page).await?));
            }
            let Some(step) = totp::verify(&factor.secret, &code, now(), 0) else {
                throttle.failed(&state.store).await?;
                let page = setup_page(&state, &signed_in, &factor.secret, Some(WRONG_CODE));
                return show(&state, &signed_in, StatusCode::BAD_REQUEST, page).await;
            };
            throttle.succeeded(&state.store).await?;
            let codes = totp::new_recovery_codes();
            let stored: Vec<String> = codes
                .iter()
                .filter_map(|c| totp::normalize_recovery_code(c))
                .collect();
            if !state.store.confirm_totp(user_id, step, &stored).await? {
                return Ok(see_other(TWO_FACTOR_PAGE));
            }
            // A session signed in before (stolen, perhaps) ends: from now on the password alone
            // is not a sign-in. The one that enrolled stays.
            state
                .store
                .delete_user_sessions_but(user_id, &signed_in.csrf_token)
                .await?;
            tracing::info!(user_id, "TOTP factor enrolled");
            let mut page = enabled_page(&signed_in, codes.len() as i64, None);
            page.stage = "recovery";
            page.recovery_codes = codes;
            show(&state, &signed_in, StatusCode::OK, page).await
        }
        (Some("remove"), true) => match check_code(&state, user_id, &code, address).await? {
            CodeCheck::Right => {
                state.store.remove_totp(user_id).await?;
                tracing::info!(user_id, "TOTP factor removed by its user");
                Ok(see_other(TWO_FACTOR_PAGE))
            }
            CodeCheck::Wrong => {
                let left = state.store.recovery_codes_left(user_id).await?;
                let page = enabled_page(&signed_in, left, Some(WRONG_CODE));
                show(&state, &signed_in, StatusCode::BAD_REQUEST, page).await
            }
            CodeCheck::Throttled => {
                let left = state.store.recovery_codes_left(user_id).await?;
                let page = enabled_page(&signed_in, left, Some(THROTTLED));
                let status = StatusCode::TOO_MANY_REQUESTS;
                Ok(throttled(show(&state, &signed_in, status, page).await?))
            }
        },
        _ => Ok(see_other(TWO_FACTOR_PAGE)),
    }
}

/// New recovery codes for a user with a second factor, replacing theirs (the old ones stop
/// working), shown once on the page.
async fn new_recovery_codes(state: &AppState, signed_in: &SignedIn) -> WebResult {
    let user_id = signed_in.user.id;
    if !state.store.has_second_factor(user_id).await? {
        return Ok(see_other(TWO_FACTOR_PAGE));
    }
    let codes = totp::new_recovery_codes();
    let stored: Vec<String> = codes
        .iter()
        .filter_map(|c| totp::normalize_recovery_code(c))
        .collect();
    state.store.replace_recovery_codes(user_id, &stored).await?;
    tracing::info!(user_id, "recovery codes made anew");
    let mut page = match state.store.totp_factor(user_id).await? {
        Some(factor) if !factor.confirmed => setup_page(state, signed_in, &factor.secret, None),
        _ => enabled_page(signed_in, codes.len() as i64, None),
    };
    page.recovery_codes = codes;
    page.has_factor = true;
    show(state, signed_in, StatusCode::OK, page).await
}
