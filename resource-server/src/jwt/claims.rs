//! A verified JWT's payload read into [`Claims`] with RFC 9068's checks, as strictly as
//! [`crate::claims`] reads introspection answers: every claim read must have its type, times are
//! numbers of seconds in range, and what is required must be there. The refusal texts are safe to
//! show (they become `error_description`) and never echo the token.

use serde_json::{Map, Value};

use crate::claims::{Claims, Confirmation, MAX_TIME};
use crate::decision::{EXPIRED_TOKEN, NOT_YET_VALID_TOKEN};

/// A claim missing, of the wrong type, or out of range.
pub const MALFORMED_CLAIMS: &str = "The access token's claims are malformed or incomplete.";
/// `iss` is not the configured issuer.
pub const WRONG_ISSUER: &str = "The access token's issuer is not trusted.";
/// `aud` does not name this API (checked by the gate, [`crate::audience`], for every token
/// source).
pub use crate::audience::WRONG_AUDIENCE;
/// `iat` is in the future.
pub const ISSUED_IN_FUTURE: &str = "The access token was issued in the future.";

/// What a payload must satisfy, and which claims carry what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRules {
    /// `iss` must be exactly this.
    pub issuer: String,
    /// The claim holding the scopes: a space-separated string or an array of strings.
    pub scope_claim: String,
    /// The claim that becomes `X-Auth-Username` (optional in the token; `username` by default:
    /// the RFC 7662 name, which our authorization server's JWTs carry for a user, where `sub` is
    /// the user's numeric id).
    pub username_claim: String,
    /// The claim that becomes `X-Auth-Client-Id` (required, RFC 9068 §2.2).
    pub client_id_claim: String,
    /// Whether `jti` is required (RFC 9068 §2.2; Entra ID sends none).
    pub require_jti: bool,
    /// Clock leeway for `exp`, `nbf` and `iat`, whole seconds.
    pub leeway_secs: i64,
}

impl ClaimRules {
    /// The default `username_claim`: RFC 7662's name for it, carried by our authorization
    /// server's JWTs (its `sub` is a numeric id); Keycloak and Entra ID: `preferred_username`.
    pub const DEFAULT_USERNAME_CLAIM: &'static str = "username";

    /// The claims of a payload whose signature verified, checked at `now` (unix seconds).
    pub fn read(&self, payload: Value, now: i64) -> Result<Claims, &'static str> {
        let Value::Object(map) = payload else {
            return Err(MALFORMED_CLAIMS);
        };
        let iss = string(&map, "iss")?.ok_or(MALFORMED_CLAIMS)?;
        let exp = time(&map, "exp")?.ok_or(MALFORMED_CLAIMS)?;
        let iat = time(&map, "iat")?.ok_or(MALFORMED_CLAIMS)?;
        let nbf = time(&map, "nbf")?;
        let aud = strings(&map, "aud")?.unwrap_or_default();
        // Required by RFC 9068 §2.2: a token about nobody is not an access token.
        let sub = string(&map, "sub")?.ok_or(MALFORMED_CLAIMS)?;
        let jti = string(&map, "jti")?;
        // Claims are read, not taken: a configured claim may be one of the above, or the same
        // for two roles (`username_claim: sub`, `client_id_claim: azp` twice...).
        let username = string(&map, &self.username_claim)?;
        let client_id = string(&map, &self.client_id_claim)?;
        let scope = strings(&map, &self.scope_claim)?.map(|s| s.join(" "));
        let groups = group_names(&map)?;
        let cnf = Confirmation::read(map.get("cnf")).map_err(|_| MALFORMED_CLAIMS)?;
        // RFC 9068 §2.2.1: how the user signed in, for routes that require it (RFC 9470).
        let acr = string(&map, "acr")?;
        let amr = strings(&map, "amr")?.unwrap_or_default();
        let auth_time = time(&map, "auth_time")?;
        if client_id.is_none() || (self.require_jti && jti.is_none()) {
            return Err(MALFORMED_CLAIMS);
        }
        if iss != self.issuer {
            return Err(WRONG_ISSUER);
        }
        if exp <= now.saturating_sub(self.leeway_secs) {
            return Err(EXPIRED_TOKEN);
        }
        if nbf.is_some_and(|nbf| nbf > now.saturating_add(self.leeway_secs)) {
            return Err(NOT_YET_VALID_TOKEN);
        }
        if iat > now.saturating_add(self.leeway_secs) {
            return Err(ISSUED_IN_FUTURE);
        }
        Ok(Claims {
            active: true,
            scope,
            client_id,
            username,
            exp: Some(exp),
            iat: Some(iat),
            nbf,
            sub: Some(sub),
            token_type: Some("Bearer".into()),
            iss: Some(iss),
            aud,
            cnf,
            jti,
            groups,
            acr,
            amr,
            auth_time,
            identity: Default::default(),
        })
    }
}

/// The `groups` claim: an array of names (or one name as a string), each non-empty; absent or
/// `null` is none. A name may hold spaces, so a string is one group, never split.
fn group_names(map: &Map<String, Value>) -> Result<Vec<String>, &'static str> {
    match map.get("groups") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                _ => Err(MALFORMED_CLAIMS),
            })
            .collect(),
        Some(_) => Err(MALFORMED_CLAIMS),
    }
}

/// A string claim; absent or `null` is `None`.
fn string(map: &Map<String, Value>, name: &str) -> Result<Option<String>, &'static str> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(MALFORMED_CLAIMS),
    }
}

/// A string (split on whitespace) or an array of strings (each without whitespace).
fn strings(map: &Map<String, Value>, name: &str) -> Result<Option<Vec<String>>, &'static str> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if name == "aud" => Ok(Some(vec![s.clone()])),
        Some(Value::String(s)) => Ok(Some(s.split_whitespace().map(str::to_owned).collect())),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) if !s.is_empty() && !s.contains(char::is_whitespace) => {
                    Ok(s.clone())
                }
                _ => Err(MALFORMED_CLAIMS),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(MALFORMED_CLAIMS),
    }
}

/// A NumericDate: a JSON number of seconds from 0 to [`MAX_TIME`] (fractions floored).
fn time(map: &Map<String, Value>, name: &str) -> Result<Option<i64>, &'static str> {
    let n = match map.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n,
        Some(_) => return Err(MALFORMED_CLAIMS),
    };
    let secs = match n.as_i64() {
        Some(i) => Some(i),
        None => n
            .as_f64()
            .map(f64::floor)
            .filter(|f| (0.0..=MAX_TIME as f64).contains(f))
            .map(|f| f as i64),
    };
    match secs {
        Some(s) if (0..=MAX_TIME).contains(&s) => Ok(Some(s)),
        _ => Err(MALFORMED_CLAIMS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000;

    fn rules() -> ClaimRules {
        ClaimRules {
            issuer: "https://idp".into(),
            scope_claim: "scope".into(),
            username_claim: "sub".into(),
            client_id_claim: "client_id".into(),
            require_jti: true,
            leeway_secs: 5,
        }
    }

    fn good() -> Value {
        json!({"iss":"https://idp","aud":"api","exp":NOW+60,"iat":NOW,"sub":"alice",
               "client_id":"app","jti":"j1","scope":"read write"})
    }

    fn with(field: &str, value: Value) -> Value {
        let mut v = good();
        v[field] = value;
        v
    }

    fn without(field: &str) -> Value {
        let mut v = good();
        v.as_object_mut().unwrap().remove(field);
        v
    }

    #[test]
    fn a_good_payload() {
        let c = rules().read(good(), NOW).unwrap();
        assert!(c.active);
        assert_eq!(c.scope.as_deref(), Some("read write"));
        assert_eq!(c.username.as_deref(), Some("alice"));
        assert_eq!(c.client_id.as_deref(), Some("app"));
        assert_eq!((c.exp, c.iat), (Some(NOW + 60), Some(NOW)));
        assert_eq!(c.aud, ["api"]);
    }

    #[test]
    fn required_claims_and_types() {
        for field in ["iss", "exp", "iat", "sub", "client_id", "jti"] {
            assert_eq!(
                rules().read(without(field), NOW),
                Err(MALFORMED_CLAIMS),
                "{field}"
            );
        }
        let bad: &[(&str, Value)] = &[
            ("iss", json!(1)),
            ("exp", json!("1700000060")),
            ("exp", json!(-1)),
            ("exp", json!(1e300)),
            ("iat", json!(true)),
            ("nbf", json!([1])),
            ("aud", json!([1])),
            ("aud", json!({"a":1})),
            ("sub", json!(42)),
            ("client_id", json!(["app"])),
            ("jti", json!(7)),
            ("scope", json!(7)),
            ("scope", json!(["read", 1])),
            ("scope", json!(["read write"])),
        ];
        for (field, value) in bad {
            assert_eq!(
                rules().read(with(field, value.clone()), NOW),
                Err(MALFORMED_CLAIMS),
                "{field}: {value}"
            );
        }
        assert_eq!(rules().read(json!([1]), NOW), Err(MALFORMED_CLAIMS));
        let no_jti = ClaimRules {
            require_jti: false,
            ..rules()
        };
        assert!(no_jti.read(without("jti"), NOW).is_ok());
    }

    #[test]
    fn issuer_and_times() {
        let r = rules();
        assert_eq!(
            r.read(with("iss", json!("https://idp/")), NOW),
            Err(WRONG_ISSUER)
        );
        // The audience is the gate's to check (crate::audience): read, not judged, here.
        assert_eq!(
            r.read(with("aud", json!(["x", "api"])), NOW).unwrap().aud,
            ["x", "api"]
        );
        assert!(r.read(without("aud"), NOW).unwrap().aud.is_empty());
        assert_eq!(r.read(with("exp", json!(NOW - 5)), NOW), Err(EXPIRED_TOKEN));
        assert!(r.read(with("exp", json!(NOW - 4)), NOW).is_ok());
        assert_eq!(
            r.read(with("nbf", json!(NOW + 6)), NOW),
            Err(NOT_YET_VALID_TOKEN)
        );
        assert!(r.read(with("nbf", json!(NOW + 5)), NOW).is_ok());
        assert_eq!(
            r.read(with("iat", json!(NOW + 6)), NOW),
            Err(ISSUED_IN_FUTURE)
        );
    }

    #[test]
    fn configured_claims() {
        let entra = ClaimRules {
            scope_claim: "scp".into(),
            username_claim: "preferred_username".into(),
            client_id_claim: "azp".into(),
            require_jti: false,
            ..rules()
        };
        let payload = json!({"iss":"https://idp","aud":"api","exp":NOW+60,"iat":NOW,
            "sub":"f81d4fae","azp":"app-guid","preferred_username":"alice@example.com","scp":["read","groups"]});
        let c = entra.read(payload, NOW).unwrap();
        assert_eq!(c.scope.as_deref(), Some("read groups"));
        assert_eq!(c.client_id.as_deref(), Some("app-guid"));
        assert_eq!(c.username.as_deref(), Some("alice@example.com"));
        // No scope claim: no scopes, still a valid token.
        assert_eq!(rules().read(without("scope"), NOW).unwrap().scope, None);
    }

    #[test]
    fn one_claim_may_serve_two_roles() {
        // Client-credentials tokens of some providers carry only the client: the same claim
        // names the caller and the client, or the username is `jti`/`iss`-like.
        let same = ClaimRules {
            username_claim: "client_id".into(),
            ..rules()
        };
        let c = same.read(good(), NOW).unwrap();
        assert_eq!(c.username.as_deref(), Some("app"));
        assert_eq!(c.client_id.as_deref(), Some("app"));
        let by_iss = ClaimRules {
            client_id_claim: "iss".into(),
            username_claim: "jti".into(),
            ..rules()
        };
        let c = by_iss.read(good(), NOW).unwrap();
        assert_eq!(c.client_id.as_deref(), Some("https://idp"));
        assert_eq!(c.username.as_deref(), Some("j1"));
        assert_eq!(c.sub.as_deref(), Some("alice"));
    }
}
