//! The session cookie and who it signs in: a user, an operator (staff) or a superuser (the
//! extractors that read them from a request: [`super::extractors`]); where a visitor goes to
//! sign in and comes back to.

use super::{WebError, WebResult, see_other};
use crate::AppState;
use crate::store::{Session, User};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;

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
    /// When the session signed in (Unix seconds).
    pub signed_in_at: i64,
}

/// How recent a sign-in must be to add a second factor (a passkey, an authenticator app) or
/// replace the recovery codes, as GitHub's "sudo mode" asks again: a stolen session cookie alone
/// cannot make itself a lasting way in (a passkey signs in without the password) or lock the
/// user out.
pub(crate) const RECENT_SIGN_IN: i64 = 600;

/// What the page says when the sign-in is older than [`RECENT_SIGN_IN`].
pub(crate) const SIGN_IN_AGAIN: &str = "To change your second factors, sign in again first: your sign-in must be less than 10 minutes old.";

impl SignedIn {
    /// Whether the session signed in within [`RECENT_SIGN_IN`].
    pub fn signed_in_recently(&self) -> bool {
        crate::domain::now() - self.signed_in_at <= RECENT_SIGN_IN
    }
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
pub(super) async fn session_and_cookie(
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

/// A signed-in superuser: everyone else who is signed in gets 403.
pub(crate) struct Superuser(pub Operator);

/// Signs `user` in with the methods `amr` (RFC 8176 values, space-separated): a new session and
/// its cookie, then on to `next`.
pub(crate) async fn start_session(
    state: &AppState,
    headers: &HeaderMap,
    user: &crate::store::User,
    amr: &str,
    next: &str,
) -> WebResult {
    let session = state
        .store
        .create_session_signed_in_with(user.id, SESSION_LIFETIME, amr)
        .await?;
    // A fresh session id at every sign-in; an older session of this browser ends, handing what
    // it led to over to the new one when it was the same user's.
    if let Some(old) = cookie(headers, SESSION_COOKIE) {
        state
            .store
            .replace_session(old, &session.session_id, user.id)
            .await?;
    }
    tracing::info!(user_id = user.id, username = %user.username, amr, "user signed in");
    let next = if next == HOME { home_of(user) } else { next };
    let mut response = see_other(next);
    append_cookie(
        &mut response,
        &set_cookie(
            state,
            SESSION_COOKIE,
            &session.session_id,
            "/",
            Some(SESSION_LIFETIME),
        ),
    );
    Ok(response)
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
