//! CSRF protection: signed-in forms carry their session's token; the sign-in form, which has no
//! session yet, carries a token that must match a cookie set with the form (double submit).
//! Both are compared in constant time.

use super::WebError;
use super::forms::FormData;
use super::session::{Operator, cookie, set_cookie};
use crate::AppState;
use crate::secrets::{constant_time_eq, random_token};
use axum::http::HeaderMap;

/// The hidden field every form carries.
pub(crate) const FIELD: &str = "csrf_token";
/// The cookie that pairs with the sign-in form's hidden field.
pub(crate) const LOGIN_COOKIE: &str = "tokengate_csrf";

/// The name the consent form gives its token (django-oauth-toolkit's, which clients and
/// tests written against it look for); accepted wherever [`FIELD`] is.
pub(crate) const DJANGO_FIELD: &str = "csrfmiddlewaretoken";

/// Accepts a signed-in form only with its session's token.
pub(crate) fn verify(operator: &Operator, form: &FormData) -> Result<(), WebError> {
    verify_token(&operator.csrf_token, form)
}

/// Accepts a form only with `expected` (its session's token) under [`FIELD`] or
/// [`DJANGO_FIELD`].
pub(crate) fn verify_token(expected: &str, form: &FormData) -> Result<(), WebError> {
    match form.get(FIELD).or_else(|| form.get(DJANGO_FIELD)) {
        Some(presented) if !expected.is_empty() && constant_time_eq(presented, expected) => Ok(()),
        _ => Err(WebError::Csrf),
    }
}

/// The token for a sign-in form: the one in the visitor's cookie if it looks like ours, else a
/// new one with the `Set-Cookie` value that stores it.
pub(crate) fn login_token(state: &AppState, headers: &HeaderMap) -> (String, Option<String>) {
    match cookie(headers, LOGIN_COOKIE).filter(|t| looks_like_token(t)) {
        Some(token) => (token.to_owned(), None),
        None => {
            let token = random_token();
            let set = set_cookie(state, LOGIN_COOKIE, &token, "/accounts/", None);
            (token, Some(set))
        }
    }
}

/// Accepts a sign-in form only when its hidden token equals the cookie.
pub(crate) fn verify_login(headers: &HeaderMap, form: &FormData) -> Result<(), WebError> {
    match (cookie(headers, LOGIN_COOKIE), form.get(FIELD)) {
        (Some(expected), Some(presented))
            if looks_like_token(expected) && constant_time_eq(presented, expected) =>
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
    use axum::http::{HeaderValue, header};

    #[test]
    fn login_token_must_match_the_cookie() {
        let token = random_token();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("{LOGIN_COOKIE}={token}")).unwrap(),
        );
        let good = FormData::from_pairs(&[(FIELD, &token)]);
        assert!(verify_login(&headers, &good).is_ok());
        let bad = FormData::from_pairs(&[(FIELD, &random_token())]);
        assert!(verify_login(&headers, &bad).is_err());
        assert!(verify_login(&HeaderMap::new(), &good).is_err());
        assert!(verify_login(&headers, &FormData::default()).is_err());
    }
}
