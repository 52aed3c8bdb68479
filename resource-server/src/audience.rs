//! Which API a token is good at: the gate's `audience` (one or several identifiers; by default
//! its `resource`), held against the token's `aud` for every token source (introspection
//! answers, cached or not, and locally validated JWTs). A token whose `aud` names none of them,
//! or that has no `aud`, is refused 401 `invalid_token` ([`WRONG_AUDIENCE`]).
//!
//! The check is made per request on the claims the check returned (cached claims included):
//! a few string comparisons (`aud` entries × accepted audiences, each usually one), no
//! allocation.

use serde::Deserialize;

use crate::decision::Credential;

/// `error_description` for a token whose `aud` does not name this API.
pub const WRONG_AUDIENCE: &str = "The access token is not meant for this API.";

/// The audiences a token must name one of (never empty, no empty entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audience(Vec<String>);

impl Audience {
    /// The audience of these identifiers; an error when the list or one of them is empty.
    pub fn new(accepted: Vec<String>) -> Result<Audience, &'static str> {
        if accepted.is_empty() {
            return Err("empty list (leave the key out, or write {disabled: true})");
        }
        if accepted.iter().any(|a| a.trim().is_empty()) {
            return Err("an empty audience (write the API's identifier)");
        }
        Ok(Audience(accepted))
    }

    /// The accepted audiences, as configured.
    pub fn accepted(&self) -> &[String] {
        &self.0
    }

    /// Whether a token whose `aud` is `aud` is meant for this API: one of its entries is one
    /// of the accepted audiences (exact, case-sensitive). An empty `aud` is not.
    pub fn accepts(&self, aud: &[String]) -> bool {
        aud.iter().any(|a| self.0.iter().any(|b| a == b))
    }

    /// `credential`, or [`Credential::Invalid`] with [`WRONG_AUDIENCE`] for active claims that
    /// are not meant for this API. Other credentials (inactive claims included) are left as
    /// they are.
    pub fn screen(&self, credential: Credential) -> Credential {
        match &credential {
            Credential::Checked(c) if c.active && !self.accepts(&c.aud) => {
                Credential::Invalid(WRONG_AUDIENCE)
            }
            _ => credential,
        }
    }

    /// The same audiences whatever their order or repetitions (to compare two settings).
    fn normalized(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.0.iter().map(String::as_str).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// `audience:` as written: one identifier, a list (any of them), or `{disabled: true}` (any
/// `aud` accepted, on purpose).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawAudience {
    One(String),
    Any(Vec<String>),
    Disabled { disabled: bool },
}

/// An `audience` setting, read: checked against these, or explicitly not checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AudienceSetting {
    Check(Audience),
    Disabled,
}

impl AudienceSetting {
    /// Whether two settings mean the same (same audiences in any order, or both disabled).
    pub fn same_as(&self, other: &AudienceSetting) -> bool {
        match (self, other) {
            (AudienceSetting::Check(a), AudienceSetting::Check(b)) => {
                a.normalized() == b.normalized()
            }
            (AudienceSetting::Disabled, AudienceSetting::Disabled) => true,
            _ => false,
        }
    }

    /// The checked audience, `None` when disabled.
    pub fn into_audience(self) -> Option<Audience> {
        match self {
            AudienceSetting::Check(a) => Some(a),
            AudienceSetting::Disabled => None,
        }
    }
}

impl std::fmt::Display for AudienceSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AudienceSetting::Check(a) if a.0.len() == 1 => write!(f, "{}", a.0[0]),
            AudienceSetting::Check(a) => write!(f, "[{}]", a.0.join(", ")),
            AudienceSetting::Disabled => f.write_str("{disabled: true}"),
        }
    }
}

impl RawAudience {
    /// The setting, or what is wrong with it.
    pub fn setting(&self) -> Result<AudienceSetting, &'static str> {
        match self {
            RawAudience::One(a) => Audience::new(vec![a.clone()]).map(AudienceSetting::Check),
            RawAudience::Any(list) => Audience::new(list.clone()).map(AudienceSetting::Check),
            RawAudience::Disabled { disabled: true } => Ok(AudienceSetting::Disabled),
            RawAudience::Disabled { disabled: false } => {
                Err("give the audience itself (or {disabled: true} to accept any)")
            }
        }
    }

    /// What was written, for messages.
    pub fn written(&self) -> String {
        match self {
            RawAudience::One(a) => a.clone(),
            RawAudience::Any(list) => format!("[{}]", list.join(", ")),
            RawAudience::Disabled { disabled } => format!("{{disabled: {disabled}}}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Claims;
    use std::sync::Arc;

    fn audience(list: &[&str]) -> Audience {
        Audience::new(list.iter().map(|s| (*s).to_owned()).collect()).unwrap()
    }

    fn checked(aud: &[&str], active: bool) -> Credential {
        Credential::Checked(Arc::new(Claims {
            active,
            aud: aud.iter().map(|s| (*s).to_owned()).collect(),
            ..Claims::default()
        }))
    }

    #[test]
    fn one_of_the_tokens_audiences_must_be_accepted() {
        let a = audience(&["https://orders.example", "orders"]);
        for aud in [
            &["orders"][..],
            &["x", "https://orders.example"],
            &["orders", "billing"],
        ] {
            assert_eq!(a.screen(checked(aud, true)), checked(aud, true), "{aud:?}");
        }
        for aud in [
            &[][..],
            &["https://billing.example"],
            &["Orders"],
            &["https://orders.example/"],
        ] {
            assert_eq!(
                a.screen(checked(aud, true)),
                Credential::Invalid(WRONG_AUDIENCE),
                "{aud:?}"
            );
        }
        // Inactive answers and other credentials are left to the decision.
        assert_eq!(a.screen(checked(&[], false)), checked(&[], false));
        assert_eq!(a.screen(Credential::Missing), Credential::Missing);
        assert_eq!(a.screen(Credential::Unavailable), Credential::Unavailable);
    }

    #[test]
    fn raw_settings() {
        let read = |yaml: &str| serde_yaml_ng::from_str::<RawAudience>(yaml).unwrap();
        assert_eq!(
            read("api").setting(),
            Ok(AudienceSetting::Check(audience(&["api"])))
        );
        assert_eq!(
            read("[a, b]").setting(),
            Ok(AudienceSetting::Check(audience(&["a", "b"])))
        );
        assert_eq!(
            read("{disabled: true}").setting(),
            Ok(AudienceSetting::Disabled)
        );
        for bad in ["{disabled: false}", "''", "[]", "[a, ' ']"] {
            assert!(read(bad).setting().is_err(), "{bad}");
        }
        assert_eq!(read("[a, b]").written(), "[a, b]");
        let ab = read("[a, b]").setting().unwrap();
        assert!(ab.same_as(&read("[b, a, a]").setting().unwrap()));
        assert!(!ab.same_as(&read("a").setting().unwrap()));
        assert!(!ab.same_as(&AudienceSetting::Disabled));
        assert_eq!(ab.to_string(), "[a, b]");
    }
}
