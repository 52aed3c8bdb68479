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

    /// Property tests (proptest): arbitrary content types and bytes never panic and end in an
    /// object or one of the body errors; JSON objects and forms read back as sent.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                ..ProptestConfig::default()
            }
        }

        /// Content types near the accepted ones (case, parameters, spaces, look-alikes), and
        /// arbitrary text.
        fn content_type() -> impl Strategy<Value = Option<String>> {
            let known = prop::sample::select(vec![
                "application/json",
                "APPLICATION/JSON; charset=utf-8",
                " application/json ;",
                "application/merge-patch+json",
                "application/vnd.api+JSON",
                "application/x-www-form-urlencoded",
                "Application/X-WWW-Form-Urlencoded ; charset=latin1",
                "application/jsonx",
                "application/json-seq",
                "text/json",
                "text/plain",
                "multipart/form-data; boundary=x",
                "+json",
                ";application/json",
                "",
                ";",
            ]);
            prop_oneof![
                1 => Just(None),
                4 => known.prop_map(|s| Some(s.to_owned())),
                2 => any::<String>().prop_map(Some),
            ]
        }

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                // Floats that print and read back exactly.
                (any::<i32>(), 0u32..4)
                    .prop_map(|(m, e)| Value::from(f64::from(m) / 2f64.powi(e as i32))),
                any::<String>().prop_map(Value::String),
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(3, 32, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::btree_map(any::<String>(), inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn object() -> impl Strategy<Value = Map<String, Value>> {
            prop::collection::btree_map(any::<String>(), value(), 0..8)
                .prop_map(|m| m.into_iter().collect())
        }

        /// Bodies: arbitrary bytes, JSON of any shape (also deeply nested or cut short), and
        /// form-like text.
        fn body() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..128),
                value().prop_map(|v| v.to_string().into_bytes()),
                (value(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
                    let text = v.to_string().into_bytes();
                    text[..cut.index(text.len() + 1)].to_vec()
                }),
                (1usize..4000, any::<bool>()).prop_map(|(n, object)| {
                    let open = if object { "{\"a\":" } else { "[" };
                    open.repeat(n).into_bytes()
                }),
                "[a-z%=&+;0-9A-F\u{e9} ]{0,40}".prop_map(String::into_bytes),
            ]
        }

        /// The media type as the parser must read it: before `;`, trimmed, any case.
        fn essence(ct: Option<&str>) -> String {
            ct.map_or("", |c| c.split(';').next().unwrap_or_default())
                .trim()
                .to_ascii_lowercase()
        }

        proptest! {
            #![proptest_config(config())]

            /// Never a panic; an object, or a 400/415 that says what was wrong with the body.
            #[test]
            fn any_body_is_an_object_or_a_body_error(ct in content_type(), body in body()) {
                let essence = essence(ct.as_deref());
                let json = essence == "application/json"
                    || (essence.starts_with("application/") && essence.ends_with("+json"));
                let form = essence == "application/x-www-form-urlencoded";
                match parse(ct.as_deref(), &body) {
                    Ok(map) => {
                        prop_assert!(json || form || (essence.is_empty() && body.is_empty()));
                        if body.is_empty() {
                            prop_assert!(map.is_empty());
                        } else if json {
                            let read: Value = serde_json::from_slice(&body).unwrap();
                            prop_assert_eq!(Value::Object(map), read);
                        } else {
                            prop_assert!(map.values().all(Value::is_string));
                        }
                    }
                    Err(ApiError::BadRequest(detail)) => {
                        prop_assert!(!body.is_empty());
                        if json {
                            prop_assert!(detail.starts_with("JSON parse error - "), "{}", detail);
                            prop_assert!(serde_json::from_slice::<Value>(&body).is_err());
                        } else {
                            prop_assert!(form, "{}", detail);
                            prop_assert!(detail.starts_with("Form parse error - "), "{}", detail);
                        }
                    }
                    Err(ApiError::Invalid(fields)) => {
                        // Valid JSON, but not an object.
                        prop_assert!(json && !body.is_empty());
                        let read: Value = serde_json::from_slice(&body).unwrap();
                        prop_assert!(!read.is_object());
                        let keys: Vec<&String> = fields.keys().collect();
                        prop_assert_eq!(keys, ["non_field_errors"]);
                    }
                    Err(ApiError::UnsupportedMediaType(named)) => {
                        prop_assert!(!json && !form);
                        prop_assert!(!(essence.is_empty() && body.is_empty()));
                        prop_assert_eq!(named, ct.unwrap_or_default());
                    }
                    Err(other) => prop_assert!(false, "{:?}", other),
                }
            }

            /// A JSON object reads back as itself, whatever JSON content type announces it.
            #[test]
            fn json_objects_round_trip(
                map in object(),
                ct in prop::sample::select(vec![
                    "application/json",
                    "Application/JSON; charset=utf-8",
                    "application/merge-patch+json",
                ]),
                pretty in any::<bool>(),
            ) {
                let value = Value::Object(map.clone());
                let text = if pretty {
                    serde_json::to_vec_pretty(&value)
                } else {
                    serde_json::to_vec(&value)
                }
                .unwrap();
                prop_assert_eq!(parse(Some(ct), &text).unwrap(), map);
            }

            /// Form fields read back as strings, a repeated field as its last value.
            #[test]
            fn form_fields_read_back(pairs in prop::collection::vec(
                // Few names, so that many forms repeat one.
                (prop_oneof!["[ab]?", any::<String>()], any::<String>()), 0..8)
            ) {
                let body = serde_urlencoded::to_string(&pairs).unwrap();
                let mut want = Map::new();
                for (k, v) in &pairs {
                    want.insert(k.clone(), Value::String(v.clone()));
                }
                let got = parse(Some("application/x-www-form-urlencoded"), body.as_bytes());
                prop_assert_eq!(got.unwrap(), want);
            }
        }
    }
}
