//! The API's one error type and its responses, with Django REST framework's wording.

use std::collections::BTreeMap;

use authserver::store::StoreError;
use axum::Json;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_serving::with_error;
use serde_json::json;

/// Per-field messages of a `400`: `{"username": ["This field is required."]}`.
pub type FieldErrors = BTreeMap<String, Vec<String>>;

/// Django REST framework's permission message, also the body of a scope refusal.
pub const PERMISSION_DENIED: &str = "You do not have permission to perform this action.";

#[derive(Debug)]
pub enum ApiError {
    /// 404 `{"detail": "Not found."}`.
    NotFound,
    /// 400 with per-field messages.
    Invalid(FieldErrors),
    /// 403 `{"detail": "You do not have permission to perform this action."}`.
    Forbidden,
    /// 400 `{"detail": ...}` (an unparseable body).
    BadRequest(String),
    /// 405 `{"detail": "Method \"X\" not allowed."}`, with `Allow`.
    MethodNotAllowed { method: Method, allow: &'static str },
    /// 413.
    TooLarge,
    /// 415 `{"detail": "Unsupported media type \"x\" in request."}`.
    UnsupportedMediaType(String),
    /// The database pool stayed full: 503 with `Retry-After`.
    Busy,
    /// 500; the cause is logged (by `http_serving::request_log`), never sent.
    Internal(String),
}

impl ApiError {
    /// A 400 for one field.
    pub fn field(name: &str, message: impl Into<String>) -> ApiError {
        ApiError::Invalid(FieldErrors::from([(name.to_owned(), vec![message.into()])]))
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::Busy => ApiError::Busy,
            other => ApiError::Internal(format!("storage failed: {other}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let detail = |status: StatusCode, text: String| {
            (status, Json(json!({ "detail": text }))).into_response()
        };
        match self {
            ApiError::NotFound => detail(StatusCode::NOT_FOUND, "Not found.".into()),
            ApiError::Forbidden => detail(StatusCode::FORBIDDEN, PERMISSION_DENIED.into()),
            ApiError::Invalid(fields) => (StatusCode::BAD_REQUEST, Json(fields)).into_response(),
            ApiError::BadRequest(text) => detail(StatusCode::BAD_REQUEST, text),
            ApiError::MethodNotAllowed { method, allow } => {
                let mut response = detail(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("Method \"{method}\" not allowed."),
                );
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
                response
            }
            ApiError::TooLarge => detail(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Request body is too large.".into(),
            ),
            ApiError::UnsupportedMediaType(media) => detail(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Unsupported media type \"{media}\" in request."),
            ),
            ApiError::Busy => {
                let mut response = detail(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The server is busy; try again shortly.".into(),
                );
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(StoreError::RETRY_AFTER),
                );
                response
            }
            ApiError::Internal(cause) => with_error(
                detail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "A server error occurred.".into(),
                ),
                cause,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full database pool answers 503 with `Retry-After`, not a 500.
    #[test]
    fn a_full_pool_is_503_with_retry_after() {
        let response = ApiError::from(StoreError::Busy).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
