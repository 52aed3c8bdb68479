//! The session cookie and the extractors that turn it into a signed-in user, an operator (staff)
//! or a superuser, sending anonymous visitors to the sign-in page with a `next` that brings
//! them back; signed-in users without the rank get 403.

use super::WebError;
use crate::AppState;
use crate::store::{Session, User};
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Redirect, Response};

/// The cookie that carries the session id; the database keeps only its SHA-256 digest.
pub const SESSION_COOKIE: &str = "tokengate_session";
/// How long a sign-in lasts, in seconds.
pub(crate) const SESSION_LIFETIME: i64 = 12 * 3600;
/// Where a sign-in lands when no `next` was given.
pub(crate) const HOME: &str = "/o/applications/";

/// The value of cookie `name` in the request, if sent once or more (the first one wins).
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"'))
        .filter(|value| !value.is_empty())
}

/// A `Set-Cookie` value: `HttpOnly; SameSite=Lax`, `Secure` when the issuer is https.
/// `max_age` 0 deletes the cookie.
pub(crate) fn set_cookie(
    state: &AppState,
    name: &str,
    value: &str,
    path: &str,
    max_age: Option<i64>,
) -> String {
    let mut cookie = format!("{name}={value}; Path={path}; HttpOnly; SameSite=Lax");
    if let Some(seconds) = max_age {
        cookie.push_str(&format!("; Max-Age={seconds}"));
    }
    if state.settings.issuer.starts_with("https://") {
        cookie.push_str("; Secure");
    }
    cookie
}

/// Adds a `Set-Cookie` header made by [`set_cookie`] to a response.
pub(crate) fn append_cookie(response: &mut Response, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// Whether a `next` target is a path on this site: `/…`, not `//host` nor `/\host`, no
/// control characters or spaces, so a sign-in can never bounce the browser elsewhere.
pub fn safe_next(next: &str) -> Option<&str> {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && next.len() <= 2000
        && !next.chars().any(|c| c.is_control() || c.is_whitespace());
    ok.then_some(next)
}

/// `/accounts/login/?next=<path>` for the page the visitor asked for.
pub(crate) fn login_url(next: Option<&str>) -> String {
    match next.and_then(safe_next) {
        Some(next) if next != HOME => {
            format!(
                "/accounts/login/?next={}",
                form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
            )
        }
        _ => "/accounts/login/".to_owned(),
    }
}

/// Who may sign in: any active user (to authorize applications, and to see which they have
/// authorized). What they may do once signed in is [`is_operator`]'s question.
pub(crate) fn may_sign_in(user: &User) -> bool {
    user.is_active
}

/// Who may use the operator views (`/o/applications/`, and `/admin/` for superusers): active
/// staff (superusers count as staff here).
pub(crate) fn is_operator(user: &User) -> bool {
    user.is_active && (user.is_staff || user.is_superuser)
}

/// Where a sign-in without a `next` lands: the applications for operators, the authorized
/// applications for everyone else.
pub(crate) fn home_of(user: &User) -> &'static str {
    if is_operator(user) {
        HOME
    } else {
        AUTHORIZED_HOME
    }
}

/// The page listing the applications a user has authorized.
pub(crate) const AUTHORIZED_HOME: &str = "/o/authorized-tokens/";

/// A signed-in user, staff or not, their session's secret and the CSRF token their forms carry
/// (no `Debug`).
pub(crate) struct SignedIn {
    pub user: User,
    /// The random value the session's row holds: names this session among the user's.
    pub csrf_token: String,
    /// The token this session's forms carry ([`super::csrf::session_token`]).
    pub form_token: String,
    /// The session cookie's value (the store keeps only its digest): what one-time messages
    /// for this session are sealed with ([`super::flash`]).
    pub session_cookie: String,
    /// How the session signed in (RFC 8176 values, space-separated).
    pub amr: String,
}

/// A signed-in operator (see [`is_operator`]), their session's secret and the CSRF token their
/// forms carry (no `Debug`: keep them out of logs).
pub(crate) struct Operator {
    pub user: User,
    /// The random value the session's row holds: names this session among the user's.
    pub csrf_token: String,
    /// The token this session's forms carry ([`super::csrf::session_token`]).
    pub form_token: String,
    /// The session cookie's value ([`SignedIn::session_cookie`]).
    pub session_cookie: String,
}

impl Operator {
    /// Whether this operator may see and change an application owned by `owner_id`.
    pub fn owns(&self, owner_id: Option<i64>) -> bool {
        self.user.is_superuser || owner_id == Some(self.user.id)
    }
}

/// Loads the session behind the request's cookie, if any, and still allowed to sign in.
pub(crate) async fn current_session(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Session>, WebError> {
    Ok(session_and_cookie(state, headers).await?.map(|(s, _)| s))
}

/// [`current_session`], with the cookie's value.
async fn session_and_cookie(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(Session, String)>, WebError> {
    let Some(session_id) = cookie(headers, SESSION_COOKIE) else {
        return Ok(None);
    };
    let session = state.store.find_session(session_id).await?;
    Ok(session
        .filter(|s| may_sign_in(&s.user))
        .map(|s| (s, session_id.to_owned())))
}

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
            amr,
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
            let next = (parts.method == Method::GET)
                .then(|| parts.uri.path_and_query().map(|pq| pq.as_str().to_owned()))
                .flatten();
            let url = login_url(next.as_deref());
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
pub(crate) struct Superuser(pub Operator);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_must_stay_on_this_site() {
        for good in ["/", "/o/applications/", "/admin/users/?q=a%20b"] {
            assert_eq!(safe_next(good), Some(good));
        }
        for bad in [
            "",
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example",
            "/a b",
            "/a\nb",
            "javascript:alert(1)",
        ] {
            assert_eq!(safe_next(bad), None, "{bad:?}");
        }
        assert_eq!(
            login_url(Some("/admin/?q=1&x=2")),
            "/accounts/login/?next=%2Fadmin%2F%3Fq%3D1%26x%3D2"
        );
        assert_eq!(login_url(Some("//evil")), "/accounts/login/");
        assert_eq!(login_url(None), "/accounts/login/");
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; tokengate_session=abc"),
        );
        headers.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "c"), None);
    }
}
