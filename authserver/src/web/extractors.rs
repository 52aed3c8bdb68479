//! The extractors that turn a request's session cookie into a signed-in user, an operator
//! (staff) or a superuser, sending anonymous visitors to the sign-in page with a `next` that
//! brings them back; signed-in users without the rank get 403.

use super::WebError;
use super::session::{Operator, SignedIn, Superuser, is_operator, login_url, session_and_cookie};
use crate::AppState;
use crate::store::User;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::Method;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        match session_and_cookie(state, &parts.headers).await {
            Ok(Some((session, session_cookie))) => Ok(SignedIn {
                user: {
                    crate::request_log::note_user(&parts.extensions, session.user.id);
                    session.user
                },
                form_token: super::csrf::session_token(state, &session.csrf_token)
                    .await
                    .map_err(IntoResponse::into_response)?,
                csrf_token: session.csrf_token,
                session_cookie,
                amr: session.amr,
                signed_in_at: session.signed_in_at,
            }),
            Ok(None) => Err(Redirect::to(&login_url(come_back(parts).as_deref())).into_response()),
            Err(error) => Err(error.into_response()),
        }
    }
}

/// Signed in but not staff: 403 (anonymous visitors still go to the sign-in page).
impl FromRequestParts<AppState> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let SignedIn {
            user,
            csrf_token,
            form_token,
            session_cookie,
            amr,
            ..
        } = SignedIn::from_request_parts(parts, state).await?;
        if is_operator(&user)
            && state.settings.require_mfa_for_staff
            && !crate::protocol::acr::is_multi_factor(&amr)
        {
            return Err(staff_second_factor(state, &user, parts).await);
        }
        if is_operator(&user) {
            Ok(Operator {
                user,
                csrf_token,
                form_token,
                session_cookie,
            })
        } else {
            tracing::info!(
                user_id = user.id,
                "operator view refused to a user who is not staff"
            );
            let nav = super::templates::Nav::signed_in(&user, &form_token);
            Err(WebError::Forbidden(Box::new(nav)).into_response())
        }
    }
}

/// Where a staff member whose session lacks a second factor goes (`require_mfa_for_staff`):
/// to sign in again with it, back to the page asked for; or, without one, to set it up.
async fn staff_second_factor(state: &AppState, user: &User, parts: &Parts) -> Response {
    match state.store.has_second_factor(user.id).await {
        Ok(true) => {
            let url = login_url(come_back(parts).as_deref());
            let separator = if url.contains('?') { '&' } else { '?' };
            tracing::info!(
                user_id = user.id,
                "operator view: a sign-in with the second factor asked"
            );
            Redirect::to(&format!("{url}{separator}prompt=login")).into_response()
        }
        Ok(false) => {
            tracing::info!(
                user_id = user.id,
                "operator view: a second factor must be set up first"
            );
            Redirect::to(super::second_factor::TWO_FACTOR_PAGE).into_response()
        }
        Err(error) => WebError::from(error).into_response(),
    }
}

/// A signed-in superuser: everyone else who is signed in gets 403.
impl FromRequestParts<AppState> for Superuser {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let operator = Operator::from_request_parts(parts, state).await?;
        if operator.user.is_superuser {
            Ok(Superuser(operator))
        } else {
            let nav = super::templates::Nav::of(&operator);
            Err(WebError::Forbidden(Box::new(nav)).into_response())
        }
    }
}

/// The page to come back to after signing in: the one asked for, when it is a page (a GET or
/// HEAD; after a refused POST the visitor lands home), as the client addressed it.
fn come_back(parts: &Parts) -> Option<String> {
    if parts.method != Method::GET && parts.method != Method::HEAD {
        return None;
    }
    let uri = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |o| &o.0);
    uri.path_and_query().map(|pq| pq.as_str().to_owned())
}
