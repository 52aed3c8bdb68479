//! Request bodies: JSON or form-encoded (by `Content-Type`), read into one JSON object so the
//! serializers validate both the same way.

use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Largest body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// The fields of a request body.
#[derive(Debug, Default)]
pub struct Payload(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for Payload {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Payload, ApiError> {
        let content_type = match request.headers().get(header::CONTENT_TYPE) {
            None => None,
            Some(v) => Some(
                v.to_str()
                    .map_err(|_| ApiError::UnsupportedMediaType(String::new()))?
                    .to_owned(),
            ),
        };
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|n| n > MAX_BODY) {
            return Err(ApiError::TooLarge);
        }
        let body = axum::body::to_bytes(request.into_body(), MAX_BODY)
            .await
            .map_err(|_| ApiError::TooLarge)?;
        parse(content_type.as_deref(), &body).map(Payload)
    }
}

/// Parses `body` as its content type says. An empty body is an empty object.
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let essence = content_type
        .map(|ct| {
            ct.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    if body.is_empty() && (essence.is_empty() || is_json(&essence) || essence == FORM) {
        return Ok(Map::new());
    }
    if is_json(&essence) {
        return match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(Value::Null) => Err(non_field("No data provided")),
            Ok(other) => Err(non_field(&format!(
                "Invalid data. Expected a dictionary, but got {}.",
                python_type(&other)
            ))),
            Err(error) => Err(ApiError::BadRequest(format!("JSON parse error - {error}"))),
        };
    }
    if essence == FORM {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|error| ApiError::BadRequest(format!("Form parse error - {error}")))?;
        // Like Django's QueryDict, a repeated field reads as its last value.
        return Ok(pairs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect());
    }
    Err(ApiError::UnsupportedMediaType(
        content_type.unwrap_or_default().to_owned(),
    ))
}

const FORM: &str = "application/x-www-form-urlencoded";

fn is_json(essence: &str) -> bool {
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn non_field(message: &str) -> ApiError {
    ApiError::Invalid([("non_field_errors".to_owned(), vec![message.to_owned()])].into())
}

/// The name Django REST framework's messages give a JSON value's type.
fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "list",
        Value::String(_) => "str",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::Null => "NoneType",
        Value::Object(_) => "dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(ct: Option<&str>, body: &str) -> Value {
        Value::Object(parse(ct, body.as_bytes()).unwrap())
    }

    fn err(ct: Option<&str>, body: &str) -> String {
        match parse(ct, body.as_bytes()).unwrap_err() {
            ApiError::Invalid(f) => format!("{f:?}"),
            ApiError::BadRequest(d) => d,
            ApiError::UnsupportedMediaType(m) => format!("415 {m}"),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn json_and_forms() {
        assert_eq!(
            ok(Some("application/json"), r#"{"a": 1, "b": "x"}"#),
            json!({"a": 1, "b": "x"})
        );
        assert_eq!(
            ok(Some("application/json; charset=utf-8"), r#"{"a": null}"#),
            json!({"a": null})
        );
        assert_eq!(ok(Some("application/merge-patch+json"), r#"{}"#), json!({}));
        assert_eq!(
            ok(
                Some("application/x-www-form-urlencoded"),
                "username=a%20b&password=p%26w&x=1&x=2"
            ),
            json!({"username": "a b", "password": "p&w", "x": "2"})
        );
        assert_eq!(ok(None, ""), json!({}));
        assert_eq!(ok(Some("application/json"), ""), json!({}));
    }

    #[test]
    fn bad_bodies() {
        assert!(err(Some("application/json"), "{nope").starts_with("JSON parse error - "));
        assert!(
            err(Some("application/json"), "[1]").contains("Expected a dictionary, but got list.")
        );
        assert!(err(Some("application/json"), "\"x\"").contains("but got str."));
        assert!(err(Some("application/json"), "null").contains("No data provided"));
        assert_eq!(err(Some("text/plain"), "hello"), "415 text/plain");
        assert_eq!(err(None, "hello"), "415 ");
    }
}
