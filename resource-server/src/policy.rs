//! Which active introspection answers are accepted beyond `active: true`: never a refresh token,
//! and, when configured, only the expected issuer; plus the clock leeway for `exp`/`nbf`, which
//! [`crate::decide`] applies at decision time. The audience is the gate's, checked for every
//! token source ([`crate::audience`]).

use std::time::Duration;

use crate::claims::Claims;

/// What an active answer must also satisfy. The default checks no issuer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerPolicy {
    /// When set, `iss` must be exactly this.
    pub issuer: Option<String>,
    /// How far past `exp`, or before `nbf`, a token is still accepted (whole seconds count).
    pub leeway: Duration,
}

impl Default for AnswerPolicy {
    fn default() -> Self {
        AnswerPolicy {
            issuer: None,
            leeway: Self::DEFAULT_LEEWAY,
        }
    }
}

/// Why an active answer is refused; the checker then treats the token as inactive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `token_type` is `refresh_token` (any case): not a bearer credential.
    RefreshToken,
    /// `iss` is not the configured issuer.
    Issuer,
}

impl Refused {
    /// For logs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::RefreshToken => "refresh token",
            Refused::Issuer => "issuer mismatch",
        }
    }
}

impl AnswerPolicy {
    /// The leeway unless configured.
    pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(5);
    /// The largest leeway accepted: more would make `exp` meaningless.
    pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

    /// Why `c` is refused, if it is; `None` for an acceptable or an inactive answer.
    pub fn refusal(&self, c: &Claims) -> Option<Refused> {
        if !c.active {
            return None;
        }
        if c.token_type
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("refresh_token"))
        {
            return Some(Refused::RefreshToken);
        }
        if let Some(issuer) = &self.issuer
            && c.iss.as_ref() != Some(issuer)
        {
            return Some(Refused::Issuer);
        }
        None
    }

    /// The first setting that does not do, as `(key, problem)`: a leeway over
    /// [`AnswerPolicy::MAX_LEEWAY`], or an empty issuer.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.leeway > Self::MAX_LEEWAY {
            return Err(("leeway", format!("at most {}s", Self::MAX_LEEWAY.as_secs())));
        }
        if self.issuer.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(("issuer", "empty (leave the key out to accept any)".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn active() -> Claims {
        Claims {
            active: true,
            token_type: Some("Bearer".into()),
            iss: Some("https://auth.example".into()),
            aud: vec!["api".into(), "other".into()],
            ..Claims::default()
        }
    }

    fn expecting(issuer: Option<&str>) -> AnswerPolicy {
        AnswerPolicy {
            issuer: issuer.map(Into::into),
            ..AnswerPolicy::default()
        }
    }

    #[test]
    fn refresh_tokens_are_refused_in_any_case() {
        let p = AnswerPolicy::default();
        assert_eq!(p.refusal(&active()), None);
        for t in ["refresh_token", "Refresh_Token", "REFRESH_TOKEN"] {
            let c = Claims {
                token_type: Some(t.into()),
                ..active()
            };
            assert_eq!(p.refusal(&c), Some(Refused::RefreshToken), "{t}");
        }
        for t in ["Bearer", "access_token", "refresh", "N_A"] {
            let c = Claims {
                token_type: Some(t.into()),
                ..active()
            };
            assert_eq!(p.refusal(&c), None, "{t}");
        }
        let c = Claims {
            token_type: None,
            ..active()
        };
        assert_eq!(p.refusal(&c), None);
    }

    #[test]
    fn issuer() {
        let p = expecting(Some("https://auth.example"));
        assert_eq!(p.refusal(&active()), None);
        let wrong_iss = Claims {
            iss: Some("https://auth.example/".into()),
            ..active()
        };
        assert_eq!(p.refusal(&wrong_iss), Some(Refused::Issuer));
        let no_iss = Claims {
            iss: None,
            ..active()
        };
        assert_eq!(p.refusal(&no_iss), Some(Refused::Issuer));
        // The audience is the gate's (crate::audience), not the answer policy's.
        let no_aud = Claims {
            aud: vec![],
            ..active()
        };
        assert_eq!(p.refusal(&no_aud), None);
        // Not configured: not checked.
        assert_eq!(AnswerPolicy::default().refusal(&no_iss), None);
        // Inactive answers are left as they are.
        assert_eq!(p.refusal(&Claims::inactive()), None);
    }

    #[test]
    fn checks() {
        assert_eq!(AnswerPolicy::default().check(), Ok(()));
        assert_eq!(AnswerPolicy::default().leeway, Duration::from_secs(5));
        let p = AnswerPolicy {
            leeway: Duration::from_secs(301),
            ..AnswerPolicy::default()
        };
        assert_eq!(p.check().unwrap_err().0, "leeway");
        assert_eq!(expecting(Some(" ")).check().unwrap_err().0, "issuer");
    }
}
