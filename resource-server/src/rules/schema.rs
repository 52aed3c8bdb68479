//! The rules as written in YAML: serde mirror structs ([`RouteSpec`], [`ScopesSpec`]) with
//! `deny_unknown_fields`, no validation (see [`super::validation`]).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use crate::cors::CorsSpec;

/// One route as written in YAML. Exactly one of `path` (exact), `prefix` or `pattern` is set.
///
/// ```yaml
/// - name: users-write
///   pattern: /users/{id}/      # {param} = one non-empty segment, * (last) = rest of the path
///   methods: [PUT, PATCH, DELETE]
///   upstream: api
///   scopes: { all_of: [write] }   # or { any_of: [...] }, or [write] (= all_of)
/// ```
///
/// `public: true` needs no token (and takes no scopes); otherwise the route is authenticated and
/// needs an active token with the scopes given (no `scopes` = any active token).
/// `authenticated: true` may be written for clarity; it is the default.
/// `groups_any: [admins]` also requires the caller to be in one of these groups (the token's
/// `groups` claim). `acr_values: [urn:tokengate:acr:mfa]` and `max_age: 600` require a sign-in
/// of that class, at most that many seconds ago (the token's `acr` and `auth_time`; RFC 9470
/// step-up). `cors:` answers browsers of other origins ([`CorsSpec`]). `dpop: required` lets
/// only DPoP-bound tokens through (a bound token is always held to its key).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<ScopesSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_any: Option<Vec<String>>,
    /// Step-up (RFC 9470): the token's `acr` must be one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acr_values: Option<Vec<String>>,
    /// Step-up (RFC 9470): the user signed in at most this many seconds ago (`auth_time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<CorsSpec>,
    /// `required` or `allowed` (the default): whether only DPoP-bound tokens pass (RFC 9449).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop: Option<String>,
}

/// `scopes:` as written: `{ all_of: [...], any_of: [...] }` (either or both), or a plain list
/// meaning `all_of`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ScopesSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_of: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_of: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for ScopesSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const FIELDS: &[&str] = &["all_of", "any_of"];
        impl<'de> Visitor<'de> for V {
            type Value = ScopesSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of scopes, or a map with all_of and/or any_of")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ScopesSpec, A::Error> {
                let mut all = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    all.push(s);
                }
                Ok(ScopesSpec {
                    all_of: Some(all),
                    any_of: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ScopesSpec, A::Error> {
                let mut spec = ScopesSpec::default();
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "all_of" => &mut spec.all_of,
                        "any_of" => &mut spec.any_of,
                        other => return Err(de::Error::unknown_field(other, FIELDS)),
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
                    }
                    *slot = Some(map.next_value()?);
                }
                Ok(spec)
            }
        }
        d.deserialize_any(V)
    }
}

/// The whole rules file: `routes:` and nothing else.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesFile {
    pub(super) routes: Vec<RouteSpec>,
}
