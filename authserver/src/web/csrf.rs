//! CSRF protection: every form carries a token signed (HMAC-SHA256) under the server's CSRF key
//! and bound to what the form belongs to: a signed-in form to its session's secret, the sign-in
//! form (no session yet) to a random pre-session cookie set with it (`__Host-` prefixed on an
//! https issuer, so no other host can plant one). The key is kept in the database
//! ([`crate::store::Store::server_key`]): one for every replica, the same after a restart. A
//! matching cookie and field chosen by an attacker, and a token of another session or another
//! pre-session cookie, are refused. Compared in constant time.

use super::WebError;
use super::forms::FormData;
use super::session::{Operator, cookie, set_cookie};
use crate::AppState;
use crate::secrets::{constant_time_eq, random_token};
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use tokio::sync::OnceCell;

/// The hidden field every form carries.
pub(crate) const FIELD: &str = "csrf_token";
/// The cookie that holds the pre-session value the sign-in form's token is bound to (on plain
/// http; see [`login_cookie`]).
pub(crate) const LOGIN_COOKIE: &str = "tokengate_csrf";
/// Its name on an https issuer: a browser accepts a `__Host-` cookie only from the host itself
/// (`Secure`, path `/`, no `Domain`), so a sibling subdomain cannot plant a pre-session value
/// (and the token it fetched for it) in a visitor's browser.
pub(crate) const HOST_LOGIN_COOKIE: &str = "__Host-tokengate_csrf";

/// The pre-session cookie's name and path for this server.
fn login_cookie(state: &AppState) -> (&'static str, &'static str) {
    if state.settings.issuer.starts_with("https://") {
        (HOST_LOGIN_COOKIE, "/")
    } else {
        (LOGIN_COOKIE, "/accounts/")
    }
}

/// The name the consent form gives its token (django-oauth-toolkit's, which clients and
/// tests written against it look for); accepted wherever [`FIELD`] is.
pub(crate) const DJANGO_FIELD: &str = "csrfmiddlewaretoken";

/// The name of the CSRF key among the server's keys.
const KEY_NAME: &str = "csrf";

/// What a token is bound to, so a token made for one use never passes for another.
#[derive(Clone, Copy)]
enum Purpose {
    /// The sign-in form, bound to the pre-session cookie.
    SignIn,
    /// A signed-in form, bound to its session's secret.
    Session,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::SignIn => b"tokengate csrf sign-in\0",
            Purpose::Session => b"tokengate csrf session\0",
        }
    }
}

/// This process's copy of the CSRF key, read from the store on first use.
#[derive(Default)]
pub struct CsrfKey(OnceCell<hmac::Key>);

async fn key(state: &AppState) -> Result<&hmac::Key, WebError> {
    state
        .csrf_key
        .0
        .get_or_try_init(|| async {
            let secret = state.store.server_key(KEY_NAME).await?;
            Ok::<_, WebError>(hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()))
        })
        .await
}

/// The token for `binding` (43 characters, base64url).
fn sign(key: &hmac::Key, purpose: Purpose, binding: &str) -> String {
    let mut context = hmac::Context::with_key(key);
    context.update(purpose.label());
    context.update(binding.as_bytes());
    URL_SAFE_NO_PAD.encode(context.sign().as_ref())
}

/// The token the forms of a signed-in session carry, bound to that session's secret (the
/// random value its row holds).
pub(crate) async fn session_token(
    state: &AppState,
    session_secret: &str,
) -> Result<String, WebError> {
    Ok(sign(key(state).await?, Purpose::Session, session_secret))
}

/// Accepts a signed-in form only with its session's token.
pub(crate) fn verify(operator: &Operator, form: &FormData) -> Result<(), WebError> {
    verify_token(&operator.form_token, form)
}

/// Accepts a form only with `expected` (its session's token, [`session_token`]) under
/// [`FIELD`] or [`DJANGO_FIELD`].
pub(crate) fn verify_token(
    expected: &str,
    form: &impl crate::protocol::Parameters,
) -> Result<(), WebError> {
    match form.get(FIELD).or_else(|| form.get(DJANGO_FIELD)) {
        Some(presented) if !expected.is_empty() && constant_time_eq(presented, expected) => Ok(()),
        _ => Err(WebError::Csrf),
    }
}

/// The token for a sign-in form, bound to the visitor's pre-session cookie if it looks like
/// ours, else to a new one, with the `Set-Cookie` value that stores it.
pub(crate) async fn login_token(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(String, Option<String>), WebError> {
    let key = key(state).await?;
    let (name, path) = login_cookie(state);
    let (binding, set) = match cookie(headers, name).filter(|t| looks_like_token(t)) {
        Some(binding) => (binding.to_owned(), None),
        None => {
            let binding = random_token();
            let set = set_cookie(state, name, &binding, path, None);
            (binding, Some(set))
        }
    };
    Ok((sign(key, Purpose::SignIn, &binding), set))
}

/// The visitor's pre-session cookie value (what their sign-in forms are bound to), if it looks
/// like ours: a sign-in without password binds its challenge to it.
pub(crate) fn login_binding<'a>(state: &AppState, headers: &'a HeaderMap) -> Option<&'a str> {
    cookie(headers, login_cookie(state).0).filter(|t| looks_like_token(t))
}

/// Accepts a sign-in form only when its hidden token is the one signed for its cookie.
pub(crate) async fn verify_login(
    state: &AppState,
    headers: &HeaderMap,
    form: &FormData,
) -> Result<(), WebError> {
    let key = key(state).await?;
    match (cookie(headers, login_cookie(state).0), form.get(FIELD)) {
        (Some(binding), Some(presented))
            if looks_like_token(binding)
                && constant_time_eq(presented, &sign(key, Purpose::SignIn, binding)) =>
        {
            Ok(())
        }
        _ => Err(WebError::Csrf),
    }
}

fn looks_like_token(token: &str) -> bool {
    token.len() == 43
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use axum::http::{HeaderValue, header};

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("{LOGIN_COOKIE}={value}")).unwrap(),
        );
        headers
    }

    #[tokio::test]
    async fn a_sign_in_token_is_signed_for_its_cookie() {
        let store = crate::testing::sqlite_store().await;
        let state = AppState::new(Settings::for_tests("unused"), store.clone());
        let (token, set) = login_token(&state, &HeaderMap::new()).await.unwrap();
        let set = set.expect("a new visitor gets the cookie");
        let binding = set
            .strip_prefix(&format!("{LOGIN_COOKIE}="))
            .and_then(|rest| rest.split(';').next())
            .unwrap();
        let headers = with_cookie(binding);
        let good = FormData::from_pairs(&[(FIELD, &token)]);
        assert!(verify_login(&state, &headers, &good).await.is_ok());
        // The cookie alone, repeated in the field (the old double submit): refused.
        let echoed = FormData::from_pairs(&[(FIELD, binding)]);
        assert!(verify_login(&state, &headers, &echoed).await.is_err());
        // Another cookie, or none, or no field: refused.
        let other = with_cookie(&random_token());
        assert!(verify_login(&state, &other, &good).await.is_err());
        assert!(
            verify_login(&state, &HeaderMap::new(), &good)
                .await
                .is_err()
        );
        assert!(
            verify_login(&state, &headers, &FormData::default())
                .await
                .is_err()
        );
        // A session token for the same value does not pass for a sign-in token.
        let session = session_token(&state, binding).await.unwrap();
        let crossed = FormData::from_pairs(&[(FIELD, &session)]);
        assert!(verify_login(&state, &headers, &crossed).await.is_err());
        // Another replica (its own state, the same database) accepts the token.
        let replica = AppState::new(Settings::for_tests("unused"), store);
        assert!(verify_login(&replica, &headers, &good).await.is_ok());
    }
}
