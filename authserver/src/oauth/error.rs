//! The OAuth 2.0 error type (RFC 6749 §5.2, RFC 7662, RFC 7009), turned into a response in one place.

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
    Server(anyhow::Error),
}

impl OAuthError {
    pub fn as_str(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) => "invalid_request",
            OAuthError::InvalidClient => "invalid_client",
            OAuthError::InvalidGrant(_) => "invalid_grant",
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
            OAuthError::Server(_) => None,
        }
    }
}

impl From<crate::store::StoreError> for OAuthError {
    fn from(error: crate::store::StoreError) -> Self {
        OAuthError::Server(error.into())
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
            _ => {}
        }
        response
    }
}
