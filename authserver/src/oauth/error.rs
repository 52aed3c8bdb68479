//! The OAuth 2.0 errors of [`crate::protocol`] (RFC 6749 §5.2, RFC 7662, RFC 7009), turned into
//! a response in one place; a server error's cause rides in the response for
//! [`crate::request_log`] to log.

pub use crate::protocol::OAuthError;
use crate::request_log::Outcome;
use crate::store::StoreError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_serving::with_error;
use serde_json::json;

/// How the HTTP layer answers each error.
trait Status {
    fn status(&self) -> StatusCode;
}

impl Status for OAuthError {
    fn status(&self) -> StatusCode {
        match self {
            OAuthError::InvalidClient | OAuthError::Unauthenticated => StatusCode::UNAUTHORIZED,
            OAuthError::Forbidden => StatusCode::FORBIDDEN,
            OAuthError::Throttled => StatusCode::TOO_MANY_REQUESTS,
            OAuthError::PostOnly => StatusCode::METHOD_NOT_ALLOWED,
            OAuthError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            OAuthError::Server(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

impl From<StoreError> for OAuthError {
    fn from(error: StoreError) -> Self {
        match error {
            // A refresh that lost a race with a reuse (or a revocation) of its family.
            StoreError::FamilyRevoked => OAuthError::InvalidGrant("Invalid refresh token."),
            // Deleted on another replica while this one still had the client cached.
            StoreError::UnknownApplication => OAuthError::InvalidClient,
            // Deleted (on this or another replica) between authentication and issuing.
            StoreError::UnknownUser => OAuthError::InvalidGrant("The user no longer exists."),
            StoreError::UnstorableText => OAuthError::InvalidRequest(
                "A parameter holds a character that is not allowed.".into(),
            ),
            StoreError::Busy => OAuthError::Unavailable,
            other => OAuthError::Server(other.into()),
        }
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.as_str() });
        if let Some(description) = self.description() {
            body["error_description"] = description.into();
        }
        let mut response = (self.status(), axum::Json(body)).into_response();
        response.extensions_mut().insert(Outcome(self.as_str()));
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        match self {
            OAuthError::InvalidClient => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"oauth\""),
                );
            }
            OAuthError::Unauthenticated => {
                headers.append(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"oauth\""),
                );
                headers.append(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"oauth\""),
                );
            }
            OAuthError::Throttled => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(crate::throttle::FAILURE_WINDOW),
                );
            }
            OAuthError::PostOnly => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            OAuthError::Unavailable => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(StoreError::RETRY_AFTER),
                );
            }
            // RFC 9449 §8: the nonce in `DPoP-Nonce`, and no `WWW-Authenticate` (§5).
            OAuthError::UseDpopNonce(nonce) => {
                if let Ok(value) = HeaderValue::from_str(&nonce) {
                    headers.insert(resource_server::dpop::NONCE_HEADER, value);
                }
            }
            OAuthError::Server(error) => return with_error(response, error),
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full database pool is the server's overload, not a fault and not the client's: 503
    /// `temporarily_unavailable` with `Retry-After`, nothing logged as a server error.
    #[tokio::test]
    async fn a_full_pool_is_503_with_retry_after() {
        let error = OAuthError::from(StoreError::from(sqlx::Error::PoolTimedOut));
        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert!(
            response
                .extensions()
                .get::<http_serving::request_log::ResponseError>()
                .is_none()
        );
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "temporarily_unavailable");

        let other = OAuthError::from(StoreError::from(sqlx::Error::PoolClosed));
        assert_eq!(
            other.into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
