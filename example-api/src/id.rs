//! The `{id}` of `/users/{id}/` and `/groups/{id}/`: an integer, or the resource is not found.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use crate::error::ApiError;

/// A resource id taken from the path; anything that is not a plain non-negative integer is a `404`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Id(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Id, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound)?;
        parse(&raw).map(Id).ok_or(ApiError::NotFound)
    }
}

/// `"42"` → 42; signs, spaces, other characters and overflow → `None`.
pub fn parse(raw: &str) -> Option<i64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids() {
        assert_eq!(super::parse("42"), Some(42));
        assert_eq!(super::parse("007"), Some(7));
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1.0",
            "abc",
            "99999999999999999999",
            "1e3",
        ] {
            assert_eq!(super::parse(bad), None, "{bad}");
        }
    }
}
