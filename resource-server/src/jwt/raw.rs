//! The `jwt:` section of a YAML configuration as written (serde mirror structs,
//! `deny_unknown_fields`), and the `token_source` setting that chooses between introspection and
//! local JWT validation.
//!
//! ```yaml
//! token_source: jwt            # introspection (default) | jwt | jwt_or_introspection
//! jwt:
//!   jwks_url: https://idp.example.com/.well-known/jwks.json   # or jwks_file: /etc/keys.json
//!   issuer: https://idp.example.com/                          # required, exact `iss`
//!   audience: my-api            # deprecated: the gate's `audience` (see crate::gate_config)
//!   algorithms: [RS256, ES256, EdDSA]   # default; never none or HS*
//!   typ: [at+jwt]               # default; Keycloak and Entra ID send JWT
//!   leeway: 5s
//!   scope_claim: scope          # scope (space-separated) or scp (array), or any claim name
//!   username_claim: username    # becomes X-Auth-Username (preferred_username: Keycloak, Entra)
//!   client_id_claim: client_id  # becomes X-Auth-Client-Id (azp for Keycloak and Entra ID)
//!   require_jti: true           # Entra ID sends none
//!   jwks_refresh_min: 30s       # floor of max-age; at most one unknown-kid refetch per this
//!   jwks_refresh_max: 1h        # ceiling of max-age; period when the answer has none
//!   jwks_timeout: 3s
//!   cache_capacity: 100000      # verified tokens, each kept until its exp
//! ```

use std::path::PathBuf;
use std::str::FromStr;

use jsonwebtoken::Algorithm;
use serde::Deserialize;

use super::{ClaimRules, JwksSettings, JwksSource, JwtSettings};
use crate::settings::{RawDuration, SettingError, duration};

pub use crate::audience::RawAudience;
use crate::yaml::OneOrMany;

/// The `jwt:` section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    #[serde(default)]
    pub jwks_url: Option<String>,
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    #[serde(default)]
    pub issuer: Option<String>,
    /// The old spelling of the gate's `audience` (read by [`crate::GateConfig::resolve`], with
    /// a deprecation warning; [`RawJwt::settings`] ignores it).
    #[serde(default)]
    pub audience: Option<RawAudience>,
    #[serde(default)]
    pub algorithms: Option<Vec<String>>,
    #[serde(default)]
    pub typ: Option<OneOrMany>,
    #[serde(default)]
    pub leeway: Option<RawDuration>,
    #[serde(default)]
    pub scope_claim: Option<String>,
    #[serde(default)]
    pub username_claim: Option<String>,
    #[serde(default)]
    pub client_id_claim: Option<String>,
    #[serde(default)]
    pub require_jti: Option<bool>,
    #[serde(default)]
    pub jwks_refresh_min: Option<RawDuration>,
    #[serde(default)]
    pub jwks_refresh_max: Option<RawDuration>,
    #[serde(default)]
    pub jwks_timeout: Option<RawDuration>,
    #[serde(default)]
    pub cache_capacity: Option<u64>,
}

fn error(field: &str, value: impl Into<String>, problem: impl Into<String>) -> SettingError {
    SettingError {
        field: format!("jwt.{field}"),
        value: value.into(),
        problem: problem.into(),
    }
}

impl RawJwt {
    /// The validated settings; a relative `jwks_file` is taken as written (relative to the
    /// working directory).
    pub fn settings(&self) -> Result<JwtSettings, SettingError> {
        let source = match (&self.jwks_url, &self.jwks_file) {
            (Some(url), None) => {
                let ok = (url.starts_with("http://") || url.starts_with("https://"))
                    && !url.contains(char::is_whitespace);
                if !ok {
                    return Err(error(
                        "jwks_url",
                        url,
                        "expected an http:// or https:// URL",
                    ));
                }
                JwksSource::Url(url.clone())
            }
            (None, Some(file)) => JwksSource::File(file.clone()),
            (Some(_), Some(_)) => {
                return Err(error(
                    "jwks_url",
                    "(both)",
                    "set jwks_url or jwks_file, not both",
                ));
            }
            (None, None) => {
                return Err(error(
                    "jwks_url",
                    "(missing)",
                    "set jwks_url (the issuer's jwks_uri) or jwks_file",
                ));
            }
        };
        let Some(issuer) = self.issuer.clone().filter(|i| !i.trim().is_empty()) else {
            return Err(error(
                "issuer",
                self.issuer.clone().unwrap_or_else(|| "(missing)".into()),
                "required: the exact `iss` of the tokens",
            ));
        };
        let algorithms = match &self.algorithms {
            None => JwtSettings::DEFAULT_ALGORITHMS.to_vec(),
            Some(names) => names
                .iter()
                .map(|n| {
                    Algorithm::from_str(n)
                        .ok()
                        .filter(|a| super::ASYMMETRIC.contains(a))
                        .ok_or_else(|| {
                            error(
                                "algorithms",
                                n,
                                "not accepted: use RS256/384/512, PS256/384/512, ES256, ES384 or EdDSA (never none or HS*)",
                            )
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let typ = match &self.typ {
            None => vec![JwtSettings::DEFAULT_TYP.to_owned()],
            Some(list) => list.to_vec(),
        };
        let d = |key: &str, v: &Option<RawDuration>, default| {
            duration(&format!("jwt.{key}"), v.as_ref(), default)
        };
        let leeway = d("leeway", &self.leeway, crate::AnswerPolicy::DEFAULT_LEEWAY)?;
        let jwks = JwksSettings {
            source,
            refresh_min: d(
                "jwks_refresh_min",
                &self.jwks_refresh_min,
                JwksSettings::DEFAULT_REFRESH_MIN,
            )?,
            refresh_max: d(
                "jwks_refresh_max",
                &self.jwks_refresh_max,
                JwksSettings::DEFAULT_REFRESH_MAX,
            )?,
            timeout: d(
                "jwks_timeout",
                &self.jwks_timeout,
                JwksSettings::DEFAULT_TIMEOUT,
            )?,
        };
        let name = |v: &Option<String>, default: &str| v.clone().unwrap_or_else(|| default.into());
        let settings = JwtSettings {
            jwks,
            claims: ClaimRules {
                issuer,
                scope_claim: name(&self.scope_claim, "scope"),
                username_claim: name(&self.username_claim, ClaimRules::DEFAULT_USERNAME_CLAIM),
                client_id_claim: name(&self.client_id_claim, "client_id"),
                require_jti: self.require_jti.unwrap_or(true),
                leeway_secs: i64::try_from(leeway.as_secs()).unwrap_or(i64::MAX),
            },
            algorithms,
            typ,
            cache_capacity: self
                .cache_capacity
                .unwrap_or(JwtSettings::DEFAULT_CACHE_CAPACITY),
        };
        settings.check().map_err(|problem| {
            let (key, problem) = problem.split_once(": ").unwrap_or(("", &problem));
            error(key, "", problem)
        })?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(yaml: &str) -> RawJwt {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn err(yaml: &str) -> SettingError {
        raw(yaml).settings().unwrap_err()
    }

    const BASE: &str = "{jwks_url: 'https://idp/jwks', issuer: 'https://idp', audience: api";

    #[test]
    fn defaults() {
        let s = raw(&format!("{BASE}}}")).settings().unwrap();
        assert_eq!(s.algorithms, JwtSettings::DEFAULT_ALGORITHMS);
        assert_eq!(s.typ, ["at+jwt"]);
        assert_eq!(s.claims.scope_claim, "scope");
        assert_eq!(s.claims.client_id_claim, "client_id");
        assert!(s.claims.require_jti);
        assert_eq!(s.claims.leeway_secs, 5);
        assert_eq!(s.jwks.source, JwksSource::Url("https://idp/jwks".into()));
        assert_eq!(s.jwks.refresh_min, JwksSettings::DEFAULT_REFRESH_MIN);
    }

    #[test]
    fn issuer_and_jwks_are_required() {
        assert_eq!(
            err("{jwks_url: 'https://idp/jwks', audience: a}").field,
            "jwt.issuer"
        );
        assert_eq!(err("{issuer: i, audience: a}").field, "jwt.jwks_url");
        assert_eq!(
            err("{jwks_url: 'ftp://x', issuer: i, audience: a}").field,
            "jwt.jwks_url"
        );
        assert_eq!(
            err("{jwks_url: 'https://x', jwks_file: k.json, issuer: i, audience: a}").field,
            "jwt.jwks_url"
        );
    }

    #[test]
    fn hmac_and_none_are_never_accepted() {
        for alg in [
            "HS256", "HS384", "HS512", "none", "None", "rs256", "RSA-OAEP",
        ] {
            let e = err(&format!("{BASE}, algorithms: [RS256, '{alg}']}}"));
            assert_eq!(
                (e.field.as_str(), e.value.as_str()),
                ("jwt.algorithms", alg)
            );
        }
        assert_eq!(
            err(&format!("{BASE}, algorithms: []}}")).field,
            "jwt.algorithms"
        );
        let s = raw(&format!("{BASE}, algorithms: [PS256, ES384]}}"))
            .settings()
            .unwrap();
        assert_eq!(s.algorithms, [Algorithm::PS256, Algorithm::ES384]);
    }

    #[test]
    fn other_checks() {
        assert_eq!(err(&format!("{BASE}, leeway: 1h}}")).field, "jwt.leeway");
        assert_eq!(
            err(&format!("{BASE}, jwks_refresh_min: 2h}}")).field,
            "jwt.jwks_refresh_min"
        );
        assert_eq!(err(&format!("{BASE}, typ: []}}")).field, "jwt.typ");
        assert_eq!(
            err(&format!("{BASE}, scope_claim: ''}}")).field,
            "jwt.scope_claim"
        );
        assert!(serde_yaml_ng::from_str::<RawJwt>("{audiences: [a]}").is_err());
        let s = raw(&format!(
            "{BASE}, typ: JWT, scope_claim: scp, require_jti: false}}"
        ))
        .settings()
        .unwrap();
        assert_eq!(s.typ, ["JWT"]);
        assert_eq!(s.claims.scope_claim, "scp");
        assert!(!s.claims.require_jti);
    }
}
