//! The extractors that turn a request's session cookie into a signed-in user, an operator
//! (staff) or a superuser, sending anonymous visitors to the sign-in page with a `next` that
//! brings them back; signed-in users without the rank get 403.

use super::WebError;
use super::session::{Operator, SignedIn, Superuser, is_operator, login_url, session_and_cookie};
use crate::AppState;
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
            }),
            Ok(None) => {
                // Only a page can be come back to; after a refused POST the visitor lands home.
                let uri = parts
                    .extensions
                    .get::<OriginalUri>()
                    .map(|o| o.0.clone())
                    .unwrap_or_else(|| parts.uri.clone());
                let next = (parts.method == Method::GET || parts.method == Method::HEAD)
                    .then(|| uri.path_and_query().map(|pq| pq.as_str().to_owned()))
                    .flatten();
                Err(Redirect::to(&login_url(next.as_deref())).into_response())
            }
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
            ..
        } = SignedIn::from_request_parts(parts, state).await?;
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
