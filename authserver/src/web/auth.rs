//! `/accounts/login/` and `/accounts/logout/`: sign-in of any active user with a database
//! session (operators and people authorizing applications alike), behind the password-guessing
//! throttle of [`crate::throttle`].

use super::forms::FormData;
use super::session::{
    HOME, SESSION_COOKIE, SignedIn, append_cookie, cookie, current_session, home_of, may_sign_in,
    safe_next, set_cookie,
};
use super::templates::{LoginPage, Nav};
use super::{WebResult, csrf, see_other};
use crate::AppState;
use crate::client_ip::ClientAddress;
use crate::throttle::{FAILURE_WINDOW, Throttle};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

const BAD_CREDENTIALS: &str =
    "Please enter the correct username and password. Both fields may be case-sensitive.";
const THROTTLED: &str = "Too many failed sign-in attempts. Wait 15 minutes and try again.";

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts/login/", get(login_page).post(login))
        .route("/accounts/logout/", post(logout))
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
    /// `login`: show the form to a signed-in user too (OpenID Connect `prompt=login`, `max_age`).
    prompt: Option<String>,
    /// Prefills the username (OpenID Connect `login_hint`).
    login_hint: Option<String>,
}

async fn login_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<NextQuery>,
) -> WebResult {
    let next = query
        .next
        .as_deref()
        .and_then(safe_next)
        .unwrap_or(HOME)
        .to_owned();
    let forced = query.prompt.as_deref() == Some("login");
    // Already signed in: straight on (unless a new sign-in is asked for).
    if !forced && let Some(session) = current_session(&state, &headers).await? {
        let next = if next == HOME {
            home_of(&session.user)
        } else {
            &next
        };
        return Ok(see_other(next));
    }
    let username = query
        .login_hint
        .filter(|hint| hint.len() <= 150 && !hint.chars().any(char::is_control))
        .unwrap_or_default();
    Ok(login_form(&state, &headers, StatusCode::OK, username, next, None).await)
}

async fn login_form(
    state: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    username: String,
    next: String,
    error: Option<&str>,
) -> Response {
    super::sign_in_page(
        state,
        headers,
        status,
        &next.clone(),
        |csrf_token, application| LoginPage {
            nav: Nav::anonymous(),
            csrf_token,
            username,
            next,
            error: error.map(str::to_owned),
            application,
        },
    )
    .await
}

/// The sign-in page again, 400, with `message` (a refused passkey sign-in).
pub(super) async fn login_page_with_error(
    state: &AppState,
    headers: &HeaderMap,
    next: String,
    message: &str,
) -> Response {
    login_form(
        state,
        headers,
        StatusCode::BAD_REQUEST,
        String::new(),
        next,
        Some(message),
    )
    .await
}

async fn login(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    form: FormData,
) -> WebResult {
    csrf::verify_login(&state, &headers, &form).await?;
    let username = form.text("username");
    let password = form.get("password").unwrap_or_default();
    let next = form
        .get("next")
        .and_then(safe_next)
        .unwrap_or(HOME)
        .to_owned();
    // The form again, with the username kept.
    let refuse = async |status, error| {
        login_form(
            &state,
            &headers,
            status,
            username.clone(),
            next.clone(),
            Some(error),
        )
        .await
    };
    if username.is_empty() || password.is_empty() || username.len() > 150 {
        return Ok(refuse(StatusCode::BAD_REQUEST, BAD_CREDENTIALS).await);
    }

    let throttle = Throttle::check(&state.store, &username, address).await?;
    if throttle.refused() {
        tracing::warn!(address = %throttle.client, "sign-in refused: too many failures");
        crate::metrics::METRICS.throttled(crate::metrics::Throttled::SignIn);
        let mut response = refuse(StatusCode::TOO_MANY_REQUESTS, THROTTLED).await;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(FAILURE_WINDOW));
        return Ok(response);
    }

    let user = state
        .store
        .authenticate_user(&username, password)
        .await?
        .filter(may_sign_in);
    let Some(user) = user else {
        // The username is not logged: people type their password into it.
        tracing::info!(address = %throttle.client, "sign-in failed");
        throttle.failed(&state.store).await?;
        return Ok(refuse(StatusCode::BAD_REQUEST, BAD_CREDENTIALS).await);
    };

    throttle.succeeded(&state.store).await?;
    if state.store.has_second_factor(user.id).await? {
        return super::second_factor::ask_for_code(&state, &user, &next).await;
    }
    super::session::start_session(&state, &headers, &user, "pwd", &next).await
}

async fn logout(
    State(state): State<AppState>,
    operator: SignedIn,
    headers: HeaderMap,
    form: FormData,
) -> WebResult {
    csrf::verify_token(&operator.form_token, &form)?;
    let mut families_revoked = 0;
    if let Some(session_id) = cookie(&headers, SESSION_COOKIE) {
        families_revoked = state.store.sign_out(session_id).await?;
    }
    tracing::info!(
        user_id = operator.user.id,
        families_revoked,
        "user signed out"
    );
    let mut response = see_other("/accounts/login/");
    append_cookie(
        &mut response,
        &set_cookie(&state, SESSION_COOKIE, "", "/", Some(0)),
    );
    Ok(response)
}
