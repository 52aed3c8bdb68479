//! The OAuth 2.0 error type (RFC 6749 §5.2, RFC 7662, RFC 7009), turned into a response in one place.

use crate::store::StoreError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Every way an OAuth endpoint refuses. Client-authentication failures of any kind collapse into
/// `InvalidClient`, so a caller cannot probe which part was wrong.
#[derive(Debug)]
pub enum OAuthError {
    InvalidRequest(String),
    InvalidClient,
    InvalidGrant(&'static str),
    UnauthorizedClient(&'static str),
    UnsupportedGrantType,
    InvalidScope(String),
    /// A protected endpoint called with no credentials or bad ones (401).
    Unauthenticated,
    /// A caller that authenticated but may not use this endpoint (403).
    Forbidden,
    /// Too many failed password attempts from this address (429, `Retry-After`, `invalid_grant`).
    Throttled,
    Server(anyhow::Error),
}

impl OAuthError {
    pub fn as_str(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) => "invalid_request",
            OAuthError::InvalidClient => "invalid_client",
            OAuthError::InvalidGrant(_) | OAuthError::Throttled => "invalid_grant",
            OAuthError::UnauthorizedClient(_) => "unauthorized_client",
            OAuthError::UnsupportedGrantType => "unsupported_grant_type",
            OAuthError::InvalidScope(_) => "invalid_scope",
            OAuthError::Unauthenticated => "invalid_token",
            OAuthError::Forbidden => "insufficient_scope",
            OAuthError::Server(_) => "server_error",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            OAuthError::InvalidClient | OAuthError::Unauthenticated => StatusCode::UNAUTHORIZED,
            OAuthError::Forbidden => StatusCode::FORBIDDEN,
            OAuthError::Throttled => StatusCode::TOO_MANY_REQUESTS,
            OAuthError::Server(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    fn description(&self) -> Option<String> {
        match self {
            OAuthError::InvalidRequest(d) | OAuthError::InvalidScope(d) => Some(d.clone()),
            OAuthError::InvalidGrant(d) | OAuthError::UnauthorizedClient(d) => {
                Some((*d).to_owned())
            }
            OAuthError::InvalidClient => Some("Client authentication failed.".into()),
            OAuthError::UnsupportedGrantType => {
                Some("Use password, refresh_token or client_credentials.".into())
            }
            OAuthError::Unauthenticated => {
                Some("Authenticate with client credentials or a bearer token.".into())
            }
            OAuthError::Forbidden => Some("This caller may not use this endpoint.".into()),
            OAuthError::Throttled => Some("Too many failed attempts; try again later.".into()),
            OAuthError::Server(_) => None,
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
            other => OAuthError::Server(other.into()),
        }
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        if let OAuthError::Server(error) = &self {
            tracing::error!(%error, "oauth endpoint failed");
        }
        let mut body = json!({ "error": self.as_str() });
        if let Some(description) = self.description() {
            body["error_description"] = description.into();
        }
        let mut response = (self.status(), axum::Json(body)).into_response();
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
            _ => {}
        }
        response
    }
}
