//! The RFC 7662 introspection answer ([`Claims`]), read strictly: any server may answer, so a
//! field of the wrong type or a time out of range makes the whole answer [`Malformed`].

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use std::sync::{Arc, OnceLock};

use crate::identity::{EncodedIdentity, Identity, join_scopes};

pub use crate::identity::MAX_TIME;

/// An RFC 7662 introspection answer.
///
/// Read by [`Claims::from_value`]: unknown fields are ignored; `active` is a JSON boolean (missing
/// or `null`: inactive); `exp`/`iat`/`nbf` are JSON numbers of seconds from 0 to [`MAX_TIME`]
/// (fractions are floored), and so is `auth_time`; `scope` is a space-separated string (a JSON
/// array of strings is joined with spaces); `aud`, `groups` and `amr` are a string or an array of
/// strings; every other field is a string. `null`
/// is the same as absent. Anything else is [`Malformed`].
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Claims {
    pub active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// The token's (family's) identifier: what a revocation event names (`jwt_id` subject).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// The audiences (`aud` as a single string becomes one entry); empty when absent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aud: Vec<String>,
    /// The user's groups (`groups`: an array of names, or one name as a string); empty when
    /// absent. Our authorization server sends them for tokens granted the `groups` scope.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The confirmation of a sender-constrained token (RFC 7800 `cnf`; RFC 8705 §3.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cnf: Option<Confirmation>,
    /// The authentication context class of the user's sign-in (OpenID Connect `acr`; RFC 9068
    /// §2.2.1), which a route's `acr_values` may require (RFC 9470).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acr: Option<String>,
    /// The methods of that sign-in (RFC 8176 `amr`: a string or an array of strings); empty when
    /// absent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub amr: Vec<String>,
    /// When the user signed in (unix seconds), which a route's `max_age` bounds (RFC 9470).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_time: Option<i64>,
    /// The identity these claims forward, encoded once ([`Claims::identity`]): a memo, so a
    /// field changed after that call is not seen by it (a clone starts without one).
    #[serde(skip)]
    pub identity: IdentityMemo,
}

/// The [`EncodedIdentity`] of a [`Claims`], built on first use: never serialized, always equal
/// (it follows from the other fields), and not kept by a clone (whose fields may then change).
#[derive(Default)]
pub struct IdentityMemo(OnceLock<Arc<EncodedIdentity>>);

impl IdentityMemo {
    /// The identity of `claims` (the claims this memo is in), encoded on the first call.
    pub(crate) fn get(&self, claims: &Claims) -> Arc<EncodedIdentity> {
        Arc::clone(
            self.0
                .get_or_init(|| Identity::from_claims(claims).encoded()),
        )
    }
}

impl Clone for IdentityMemo {
    fn clone(&self) -> Self {
        IdentityMemo::default()
    }
}

impl PartialEq for IdentityMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for IdentityMemo {}

impl std::fmt::Debug for IdentityMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdentityMemo")
    }
}

/// A token's `cnf` (confirmation) claim: to whom the token is bound. The certificate thumbprint
/// ([`crate::client_cert::bind`]) and the DPoP key thumbprint ([`crate::dpop::gate`]) are
/// understood; a `cnf` with neither binds the token by a means the gate cannot check, and the
/// token is refused.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Confirmation {
    /// `x5t#S256`: the base64url SHA-256 of the client certificate (DER) the token is bound to.
    #[serde(rename = "x5t#S256", skip_serializing_if = "Option::is_none")]
    pub x5t_s256: Option<String>,
    /// `jkt`: the RFC 7638 thumbprint of the DPoP key the token is bound to (RFC 9449 §6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jkt: Option<String>,
}

impl Confirmation {
    /// Reads `cnf`: absent or `null` is `None`; an object whose `x5t#S256` and `jkt`, when
    /// there, are strings. Anything else is an error naming what was expected.
    pub fn read(value: Option<&Value>) -> Result<Option<Confirmation>, &'static str> {
        let member = |map: &serde_json::Map<String, Value>, name: &str| match map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(CNF),
        };
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Confirmation {
                x5t_s256: member(map, "x5t#S256")?,
                jkt: member(map, "jkt")?,
            })),
            Some(_) => Err(CNF),
        }
    }
}

/// Why an answer is not a usable RFC 7662 answer. Names the field, never echoes the answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Not JSON at all (serde_json's syntax message: what and where, without the text).
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object")]
    NotAnObject,
    #[error("field `{field}`: expected {expected}")]
    Field {
        field: &'static str,
        expected: &'static str,
    },
}

const BOOLEAN: &str = "a JSON boolean";
const STRING: &str = "a string";
const SCOPE: &str = "a string or an array of strings";
const TIME: &str = "a JSON number of seconds from 0 to 253402300799";
const CNF: &str = "an object whose x5t#S256 and jkt are strings";

impl Claims {
    /// The answer for an unknown, expired or revoked token: `{"active": false}`.
    pub fn inactive() -> Self {
        Self::default()
    }

    /// Reads an answer body (see [`Claims`] for the rules).
    pub fn from_json(body: &[u8]) -> Result<Claims, Malformed> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| Malformed::NotJson(e.to_string()))?;
        Self::from_value(value)
    }

    /// Reads an answer already parsed as JSON (see [`Claims`] for the rules).
    pub fn from_value(value: Value) -> Result<Claims, Malformed> {
        let Value::Object(mut map) = value else {
            return Err(Malformed::NotAnObject);
        };
        let mut take = |field: &'static str| Field {
            name: field,
            value: map.remove(field).unwrap_or(Value::Null),
        };
        Ok(Claims {
            active: take("active").boolean()?,
            scope: take("scope").scope()?,
            client_id: take("client_id").string()?,
            username: take("username").string()?,
            exp: take("exp").time()?,
            iat: take("iat").time()?,
            nbf: take("nbf").time()?,
            sub: take("sub").string()?,
            token_type: take("token_type").string()?,
            iss: take("iss").string()?,
            jti: take("jti").string()?,
            aud: take("aud").strings()?,
            groups: take("groups").strings()?,
            cnf: {
                let field = take("cnf");
                Confirmation::read(Some(&field.value)).map_err(|expected| field.wrong(expected))?
            },
            acr: take("acr").string()?,
            amr: take("amr").strings()?,
            auth_time: take("auth_time").time()?,
            identity: IdentityMemo::default(),
        })
    }

    /// The caller's identity and its headers, built and encoded on the first call only.
    pub fn identity(&self) -> Arc<EncodedIdentity> {
        self.identity.get(self)
    }

    /// The granted scopes, in order, split on whitespace.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.scope.as_deref().unwrap_or("").split_whitespace()
    }

    /// Whether `s` is one of the granted scopes (exact, case-sensitive match).
    pub fn has_scope(&self, s: &str) -> bool {
        self.scopes().any(|g| g == s)
    }

    /// Whether the caller is in one of `groups` (exact, case-sensitive match).
    pub fn in_any_group(&self, groups: &[String]) -> bool {
        self.groups.iter().any(|g| groups.contains(g))
    }

    /// Whether `exp` is present and not after `now` (unix seconds).
    pub fn is_expired_at(&self, now: i64) -> bool {
        self.exp.is_some_and(|exp| exp <= now)
    }

    /// Whether `nbf` is present and after `now` (unix seconds).
    pub fn is_not_yet_valid_at(&self, now: i64) -> bool {
        self.nbf.is_some_and(|nbf| nbf > now)
    }
}

impl Identity {
    /// Builds the identity from an introspection answer.
    pub fn from_claims(c: &Claims) -> Self {
        Identity {
            username: c.username.clone(),
            client_id: c.client_id.clone(),
            scope: join_scopes(c.scopes(), String::push_str),
            exp: c.exp,
            groups: c.groups.clone(),
        }
    }
}

/// `serde_json::from_str::<Claims>` reads by [`Claims::from_value`].
impl<'de> Deserialize<'de> for Claims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Claims::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// One field of the answer (`Null` when absent), read as the type it must have.
struct Field {
    name: &'static str,
    value: Value,
}

impl Field {
    fn wrong(&self, expected: &'static str) -> Malformed {
        Malformed::Field {
            field: self.name,
            expected,
        }
    }

    fn boolean(self) -> Result<bool, Malformed> {
        match self.value {
            Value::Null => Ok(false),
            Value::Bool(b) => Ok(b),
            _ => Err(self.wrong(BOOLEAN)),
        }
    }

    fn string(self) -> Result<Option<String>, Malformed> {
        match self.value {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            _ => Err(self.wrong(STRING)),
        }
    }

    /// A string, or an array of strings (`None` for `null`).
    fn string_or_list(self) -> Result<Option<Vec<String>>, Malformed> {
        match self.value {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(vec![s])),
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s),
                    _ => Err(Malformed::Field {
                        field: self.name,
                        expected: SCOPE,
                    }),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            _ => Err(self.wrong(SCOPE)),
        }
    }

    fn scope(self) -> Result<Option<String>, Malformed> {
        Ok(self.string_or_list()?.map(|parts| parts.join(" ")))
    }

    fn strings(self) -> Result<Vec<String>, Malformed> {
        Ok(self.string_or_list()?.unwrap_or_default())
    }

    fn time(self) -> Result<Option<i64>, Malformed> {
        let secs = match &self.value {
            Value::Null => return Ok(None),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Some(i),
                // Floats (and integers beyond i64, which serde_json reads as floats or u64).
                None => n.as_f64().map(f64::floor).and_then(|f| {
                    // In range, the float is an exact integer and the cast is lossless.
                    (0.0..=MAX_TIME as f64).contains(&f).then_some(f as i64)
                }),
            },
            _ => None,
        };
        match secs {
            Some(s) if (0..=MAX_TIME).contains(&s) => Ok(Some(s)),
            _ => Err(self.wrong(TIME)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Claims {
        Claims::from_json(s.as_bytes()).expect("parses")
    }

    #[test]
    fn sign_in_claims_are_read() {
        let c = parse(
            r#"{"active":true,"acr":"urn:tokengate:acr:mfa","amr":["pwd","otp","mfa"],"auth_time":1700000000}"#,
        );
        assert_eq!(c.acr.as_deref(), Some("urn:tokengate:acr:mfa"));
        assert_eq!(c.amr, ["pwd", "otp", "mfa"]);
        assert_eq!(c.auth_time, Some(1_700_000_000));
        assert!(Claims::from_json(br#"{"active":true,"auth_time":"soon"}"#).is_err());
        assert!(Claims::from_json(br#"{"active":true,"acr":2}"#).is_err());
    }

    #[test]
    fn the_identity_is_encoded_once_and_not_kept_by_a_clone() {
        use crate::identity::Identity;
        let c = parse(r#"{"active":true,"username":"josé","scope":"read b","exp":1}"#);
        let id = c.identity();
        assert!(std::sync::Arc::ptr_eq(&id, &c.identity()), "built once");
        assert_eq!(id.identity, Identity::from_claims(&c));
        let values: Vec<_> = id
            .headers
            .iter()
            .map(|(n, parsed, v)| {
                assert_eq!(parsed.as_str(), *n);
                (*n, v.to_str().unwrap())
            })
            .collect();
        let expected = id.identity.headers();
        let expected: Vec<_> = expected.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(values, expected);
        // A clone, changed, forwards what it now says; the memo never makes claims unequal.
        let mut other = c.clone();
        assert_eq!(other, c);
        other.username = Some("bob".into());
        assert_eq!(other.identity().username.as_deref(), Some("bob"));
        assert_eq!(c.identity().username.as_deref(), Some("josé"));
    }

    fn field_error(s: &str) -> &'static str {
        match Claims::from_json(s.as_bytes()) {
            Err(Malformed::Field { field, .. }) => field,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn full_answer() {
        let c = parse(
            r#"{"active":true,"scope":"read write","client_id":"app","username":"alice",
                "exp":1700000000,"iat":1699990000,"nbf":1699990001,"sub":"42","token_type":"Bearer",
                "iss":"https://auth.example","aud":["x","y"],"extra":{"a":1}}"#,
        );
        assert!(c.active);
        assert_eq!(c.scopes().collect::<Vec<_>>(), ["read", "write"]);
        assert!(c.has_scope("write"));
        assert!(!c.has_scope("wri"));
        assert_eq!(c.username.as_deref(), Some("alice"));
        assert_eq!(c.client_id.as_deref(), Some("app"));
        assert_eq!(c.exp, Some(1_700_000_000));
        assert_eq!(c.iat, Some(1_699_990_000));
        assert_eq!(c.nbf, Some(1_699_990_001));
        assert_eq!(c.sub.as_deref(), Some("42"));
        assert_eq!(c.token_type.as_deref(), Some("Bearer"));
        assert_eq!(c.iss.as_deref(), Some("https://auth.example"));
        assert_eq!(c.aud, ["x", "y"]);
        assert_eq!(parse(r#"{"aud":"x"}"#).aud, ["x"]);
        assert!(parse(r#"{"aud":null}"#).aud.is_empty());
    }

    #[test]
    fn only_a_json_true_is_active() {
        assert_eq!(parse(r#"{"active":false}"#), Claims::inactive());
        assert_eq!(parse(r#"{}"#), Claims::inactive());
        assert_eq!(parse(r#"{"active":null}"#), Claims::inactive());
        assert!(parse(r#"{"active":true}"#).active);
        for bad in [
            r#"{"active":"true"}"#,
            r#"{"active":"TRUE"}"#,
            r#"{"active":"false"}"#,
            r#"{"active":1}"#,
            r#"{"active":0}"#,
            r#"{"active":[true]}"#,
            r#"{"active":{"v":true}}"#,
        ] {
            assert_eq!(field_error(bad), "active", "{bad}");
        }
    }

    #[test]
    fn times_are_numbers_in_range() {
        assert_eq!(parse(r#"{"exp":1700000000.9}"#).exp, Some(1_700_000_000));
        assert_eq!(parse(r#"{"exp":1.7e9}"#).exp, Some(1_700_000_000));
        assert_eq!(parse(r#"{"exp":0}"#).exp, Some(0));
        assert_eq!(parse(r#"{"exp":0.5}"#).exp, Some(0));
        assert_eq!(parse(r#"{"exp":253402300799}"#).exp, Some(MAX_TIME));
        assert_eq!(parse(r#"{"exp":253402300799.5}"#).exp, Some(MAX_TIME));
        assert_eq!(parse(r#"{"exp":null}"#).exp, None);
        for field in ["exp", "iat", "nbf"] {
            for bad in [
                "\"1700000000\"",
                "\"1.7e9\"",
                "\"tomorrow\"",
                "-1",
                "-0.5",
                "253402300800",
                "1e300",
                "-1e300",
                "18446744073709551615",
                "9223372036854775807",
                "true",
                "[1]",
                "{}",
            ] {
                let text = format!("{{\"active\":true,\"{field}\":{bad}}}");
                assert_eq!(field_error(&text), field, "{text}");
            }
        }
    }

    #[test]
    fn identity_fields_are_strings() {
        for field in ["client_id", "username", "sub", "token_type", "iss"] {
            assert_eq!(
                parse(&format!("{{\"{field}\":null}}")),
                Claims::inactive(),
                "{field}"
            );
            for bad in ["42", "true", "{\"x\":1}", "[\"a\"]"] {
                let text = format!("{{\"active\":true,\"{field}\":{bad}}}");
                assert_eq!(field_error(&text), field, "{text}");
            }
        }
    }

    #[test]
    fn scope_and_audience_shapes() {
        assert_eq!(
            parse(r#"{"scope":["read","groups"]}"#).scope.as_deref(),
            Some("read groups")
        );
        let c = parse(r#"{"scope":"  read\twrite  "}"#);
        assert_eq!(c.scopes().collect::<Vec<_>>(), ["read", "write"]);
        assert_eq!(parse(r#"{}"#).scopes().count(), 0);
        for bad in [r#"{"scope":[1]}"#, r#"{"scope":7}"#, r#"{"scope":{"a":1}}"#] {
            assert_eq!(field_error(bad), "scope", "{bad}");
        }
        for bad in [r#"{"aud":[1]}"#, r#"{"aud":7}"#, r#"{"aud":["a",null]}"#] {
            assert_eq!(field_error(bad), "aud", "{bad}");
        }
    }

    #[test]
    fn not_an_object_or_not_json() {
        for text in ["[true]", "true", "\"active\"", "null", "1"] {
            assert_eq!(
                Claims::from_json(text.as_bytes()),
                Err(Malformed::NotAnObject),
                "{text}"
            );
        }
        for text in ["", "{", "not json", "{\"active\":tr", "{} {}"] {
            assert!(
                matches!(
                    Claims::from_json(text.as_bytes()),
                    Err(Malformed::NotJson(_))
                ),
                "{text}"
            );
        }
        // serde goes through the same rules.
        assert!(serde_json::from_str::<Claims>(r#"{"active":"true"}"#).is_err());
        assert!(serde_json::from_str::<Claims>("[true]").is_err());
    }

    #[test]
    fn errors_never_echo_the_answer() {
        let e = Claims::from_json(br#"{"active":"s3cret-looking value"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "field `active`: expected a JSON boolean".to_owned()
        );
        let e = Claims::from_json(br#"{"username":"s3cret", "exp": "s3cret"}"#).unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn serializes_without_absent_fields_and_reads_back() {
        assert_eq!(
            serde_json::to_string(&Claims::inactive()).unwrap(),
            r#"{"active":false}"#
        );
        let c = parse(r#"{"active":true,"aud":"a","nbf":5,"iss":"i","scope":"x y"}"#);
        assert_eq!(
            Claims::from_value(serde_json::to_value(&c).unwrap()).unwrap(),
            c
        );
    }

    #[test]
    fn expiry_and_not_before() {
        let c = Claims {
            exp: Some(100),
            nbf: Some(50),
            ..Claims::default()
        };
        assert!(c.is_expired_at(100));
        assert!(!c.is_expired_at(99));
        assert!(!Claims::default().is_expired_at(i64::MAX));
        assert!(c.is_not_yet_valid_at(49));
        assert!(!c.is_not_yet_valid_at(50));
        assert!(!Claims::default().is_not_yet_valid_at(i64::MIN));
    }

    #[test]
    fn the_certificate_binding() {
        let c = parse(r#"{"active":true,"cnf":{"x5t#S256":"abc","jkt":"x"}}"#);
        assert_eq!(c.cnf.unwrap().x5t_s256.as_deref(), Some("abc"));
        assert_eq!(parse(r#"{"active":true,"cnf":null}"#).cnf, None);
        let dpop = parse(r#"{"active":true,"cnf":{"jkt":"x"}}"#);
        assert_eq!(dpop.cnf.unwrap().jkt.as_deref(), Some("x"));
        let other = parse(r#"{"active":true,"cnf":{"x5t":"x"}}"#);
        assert_eq!(other.cnf, Some(Confirmation::default()));
        for bad in [
            r#"{"cnf":"abc"}"#,
            r#"{"cnf":{"x5t#S256":1}}"#,
            r#"{"cnf":[]}"#,
        ] {
            assert_eq!(field_error(bad), "cnf", "{bad}");
        }
        let bound = parse(r#"{"active":true,"cnf":{"x5t#S256":"abc"}}"#);
        assert_eq!(
            Claims::from_value(serde_json::to_value(&bound).unwrap()).unwrap(),
            bound
        );
    }
}
