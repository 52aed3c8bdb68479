//! The RFC 7662 introspection answer ([`Claims`]), read leniently from whatever a server sends.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// An RFC 7662 introspection answer. Unknown fields are ignored; a missing `active` reads as
/// `false`; `exp`/`iat` may be integers, floats or numeric strings; `scope` is space-separated
/// (a JSON array of strings is accepted too); identity fields that are numbers become strings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Claims {
    #[serde(default, deserialize_with = "de_bool")]
    pub active: bool,
    #[serde(
        default,
        deserialize_with = "de_scope",
        skip_serializing_if = "Option::is_none"
    )]
    pub scope: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub username: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub exp: Option<i64>,
    #[serde(
        default,
        deserialize_with = "de_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub iat: Option<i64>,
    #[serde(
        default,
        deserialize_with = "de_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub sub: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub token_type: Option<String>,
}

impl Claims {
    /// The answer for an unknown, expired or revoked token: `{"active": false}`.
    pub fn inactive() -> Self {
        Self::default()
    }

    /// The granted scopes, in order, split on whitespace.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.scope.as_deref().unwrap_or("").split_whitespace()
    }

    /// Whether `s` is one of the granted scopes (exact, case-sensitive match).
    pub fn has_scope(&self, s: &str) -> bool {
        self.scopes().any(|g| g == s)
    }

    /// Whether `exp` is present and not after `now` (unix seconds).
    pub fn is_expired_at(&self, now: i64) -> bool {
        self.exp.is_some_and(|exp| exp <= now)
    }
}

fn invalid<E: serde::de::Error>(field: &str, v: &Value) -> E {
    E::custom(format_args!("{field}: unexpected value {v}"))
}

fn de_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(invalid("active", &v)),
    }
}

fn de_scope<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Array(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for item in &items {
                match item {
                    Value::String(s) => parts.push(s.as_str()),
                    other => return Err(invalid("scope", other)),
                }
            }
            Ok(Some(parts.join(" ")))
        }
        Some(v) => Err(invalid("scope", &v)),
    }
}

fn de_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        // Objects, arrays, booleans: not an identity we can forward; ignore.
        _ => None,
    })
}

fn de_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let parsed = match &v {
        Value::Number(n) => number_to_secs(n),
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .ok()
            .or_else(|| s.trim().parse::<f64>().ok().and_then(float_to_secs)),
        _ => None,
    };
    parsed.map(Some).ok_or_else(|| invalid("time", &v))
}

fn number_to_secs(n: &serde_json::Number) -> Option<i64> {
    n.as_i64()
        .or_else(|| n.as_u64().map(|_| i64::MAX))
        .or_else(|| n.as_f64().and_then(float_to_secs))
}

fn float_to_secs(f: f64) -> Option<i64> {
    // `as` saturates at the i64 bounds.
    f.is_finite().then(|| f.floor() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Claims {
        serde_json::from_str(s).expect("parses")
    }

    #[test]
    fn full_answer() {
        let c = parse(
            r#"{"active":true,"scope":"read write","client_id":"app","username":"alice",
                "exp":1700000000,"iat":1699990000,"sub":"42","token_type":"Bearer","aud":["x"],"extra":{"a":1}}"#,
        );
        assert!(c.active);
        assert_eq!(c.scopes().collect::<Vec<_>>(), ["read", "write"]);
        assert!(c.has_scope("write"));
        assert!(!c.has_scope("wri"));
        assert_eq!(c.username.as_deref(), Some("alice"));
        assert_eq!(c.client_id.as_deref(), Some("app"));
        assert_eq!(c.exp, Some(1_700_000_000));
        assert_eq!(c.iat, Some(1_699_990_000));
        assert_eq!(c.sub.as_deref(), Some("42"));
        assert_eq!(c.token_type.as_deref(), Some("Bearer"));
    }

    #[test]
    fn inactive_and_missing_active() {
        assert_eq!(parse(r#"{"active":false}"#), Claims::inactive());
        assert_eq!(parse(r#"{}"#), Claims::inactive());
        assert_eq!(parse(r#"{"active":null}"#), Claims::inactive());
        assert!(parse(r#"{"active":"true"}"#).active);
        assert!(serde_json::from_str::<Claims>(r#"{"active":1}"#).is_err());
    }

    #[test]
    fn lenient_times() {
        assert_eq!(parse(r#"{"exp":1700000000.9}"#).exp, Some(1_700_000_000));
        assert_eq!(parse(r#"{"exp":"1700000000"}"#).exp, Some(1_700_000_000));
        assert_eq!(parse(r#"{"exp":"1.7e9"}"#).exp, Some(1_700_000_000));
        assert_eq!(parse(r#"{"exp":1.7e9}"#).exp, Some(1_700_000_000));
        assert_eq!(parse(r#"{"exp":null}"#).exp, None);
        assert_eq!(parse(r#"{"exp":18446744073709551615}"#).exp, Some(i64::MAX));
        assert!(serde_json::from_str::<Claims>(r#"{"exp":"tomorrow"}"#).is_err());
        assert!(serde_json::from_str::<Claims>(r#"{"iat":true}"#).is_err());
    }

    #[test]
    fn lenient_scope_and_strings() {
        let c = parse(r#"{"scope":["read","groups"],"sub":42,"username":{"x":1}}"#);
        assert_eq!(c.scope.as_deref(), Some("read groups"));
        assert_eq!(c.sub.as_deref(), Some("42"));
        assert_eq!(c.username, None);
        let c = parse(r#"{"scope":"  read\twrite  "}"#);
        assert_eq!(c.scopes().collect::<Vec<_>>(), ["read", "write"]);
        assert_eq!(parse(r#"{}"#).scopes().count(), 0);
        assert!(serde_json::from_str::<Claims>(r#"{"scope":[1]}"#).is_err());
    }

    #[test]
    fn serializes_without_absent_fields() {
        assert_eq!(
            serde_json::to_string(&Claims::inactive()).unwrap(),
            r#"{"active":false}"#
        );
    }

    #[test]
    fn expiry() {
        let c = Claims {
            exp: Some(100),
            ..Claims::default()
        };
        assert!(c.is_expired_at(100));
        assert!(!c.is_expired_at(99));
        assert!(!Claims::default().is_expired_at(i64::MAX));
    }
}
