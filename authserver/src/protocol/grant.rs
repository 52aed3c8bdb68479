//! The token endpoint's requests as one typed enum: the `grant_type` is read once into a
//! [`GrantKind`] (anything else is `unsupported_grant_type`, never a default), the client's
//! registration is checked against it, then the request's own fields are read.

use super::{OAuthError, Parameters};
use crate::domain::{Application, ClientType, GrantType};

/// The grants of `POST /o/token/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    AuthorizationCode,
    Password,
    RefreshToken,
    ClientCredentials,
}

impl GrantKind {
    pub const ALL: [GrantKind; 4] = [
        GrantKind::AuthorizationCode,
        GrantKind::Password,
        GrantKind::RefreshToken,
        GrantKind::ClientCredentials,
    ];

    /// The `grant_type` value of RFC 6749.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::AuthorizationCode => "authorization_code",
            GrantKind::Password => "password",
            GrantKind::RefreshToken => "refresh_token",
            GrantKind::ClientCredentials => "client_credentials",
        }
    }

    /// The grant a `grant_type` names; a missing or unknown one is `unsupported_grant_type`.
    pub fn parse(grant_type: Option<&str>) -> Result<GrantKind, OAuthError> {
        GrantKind::ALL
            .into_iter()
            .find(|kind| Some(kind.as_str()) == grant_type)
            .ok_or(OAuthError::UnsupportedGrantType)
    }

    /// Whether `app`'s registration lets it use this grant: its own grant type, refresh tokens
    /// for the grants that issue them, client credentials for confidential clients only.
    pub fn check_registered(self, app: &Application) -> Result<(), OAuthError> {
        let registered = |grant: GrantType| {
            if app.grant_type == grant {
                Ok(())
            } else {
                Err(OAuthError::UnauthorizedClient(
                    "This client is not registered for this grant type.",
                ))
            }
        };
        match self {
            GrantKind::AuthorizationCode => registered(GrantType::AuthorizationCode),
            GrantKind::Password => registered(GrantType::Password),
            GrantKind::ClientCredentials => {
                registered(GrantType::ClientCredentials)?;
                if app.client_type != ClientType::Confidential {
                    return Err(OAuthError::UnauthorizedClient(
                        "Public clients cannot use client_credentials.",
                    ));
                }
                Ok(())
            }
            GrantKind::RefreshToken => match app.grant_type {
                GrantType::Password | GrantType::AuthorizationCode => Ok(()),
                GrantType::ClientCredentials => Err(OAuthError::UnauthorizedClient(
                    "This client is not registered for a grant with refresh tokens.",
                )),
            },
        }
    }
}

/// A token request, its fields read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantRequest {
    AuthorizationCode {
        code: String,
        redirect_uri: String,
        code_verifier: Option<String>,
    },
    Password {
        username: String,
        password: String,
        scope: Option<String>,
    },
    RefreshToken {
        refresh_token: String,
        scope: Option<String>,
    },
    ClientCredentials {
        scope: Option<String>,
    },
}

impl GrantRequest {
    /// The fields of a `kind` request; a missing required one is `invalid_request`.
    pub fn parse(kind: GrantKind, params: &impl Parameters) -> Result<GrantRequest, OAuthError> {
        let require = |name: &str| -> Result<String, OAuthError> {
            params.get(name).map(str::to_owned).ok_or_else(|| {
                OAuthError::InvalidRequest(format!("The parameter \"{name}\" is missing."))
            })
        };
        let optional = |name: &str| params.get(name).map(str::to_owned);
        Ok(match kind {
            GrantKind::AuthorizationCode => GrantRequest::AuthorizationCode {
                code: require("code")?,
                redirect_uri: require("redirect_uri")?,
                code_verifier: optional("code_verifier"),
            },
            GrantKind::Password => GrantRequest::Password {
                username: require("username")?,
                password: require("password")?,
                scope: optional("scope"),
            },
            GrantKind::RefreshToken => GrantRequest::RefreshToken {
                refresh_token: require("refresh_token")?,
                scope: optional("scope"),
            },
            GrantKind::ClientCredentials => GrantRequest::ClientCredentials {
                scope: optional("scope"),
            },
        })
    }
}

pub use crate::domain::CodeBinding;

/// Whether an exchange of a code bound as `code` may go ahead, at `now`, for `application_id`,
/// with this `redirect_uri` (exact match) and `code_verifier`. Every refusal is `invalid_grant`.
pub fn check_exchange(
    code: &CodeBinding,
    application_id: i64,
    redirect_uri: &str,
    code_verifier: Option<&str>,
    now: i64,
) -> Result<(), OAuthError> {
    if code.application_id != application_id || code.expires_at <= now {
        return Err(OAuthError::InvalidGrant("Invalid authorization code."));
    }
    if code.redirect_uri != redirect_uri {
        return Err(OAuthError::InvalidGrant(
            "The redirect_uri does not match the authorization request.",
        ));
    }
    match (&code.code_challenge, code_verifier) {
        (Some(challenge), Some(verifier)) if super::pkce::verify(verifier, challenge) => Ok(()),
        (Some(_), _) => Err(OAuthError::InvalidGrant(
            "The code_verifier does not match the code_challenge.",
        )),
        (None, None) => Ok(()),
        // RFC 9700 §2.1.1: a verifier for a code issued without a challenge is refused.
        (None, Some(_)) => Err(OAuthError::InvalidGrant(
            "The authorization request had no code_challenge.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    impl Parameters for HashMap<&str, &str> {
        fn get(&self, name: &str) -> Option<&str> {
            HashMap::get(self, name).copied().filter(|v| !v.is_empty())
        }
    }

    #[test]
    fn grant_types_are_named_exactly() {
        assert_eq!(
            GrantKind::parse(Some("authorization_code")).unwrap(),
            GrantKind::AuthorizationCode
        );
        for bad in [
            None,
            Some(""),
            Some("Password"),
            Some("implicit"),
            Some("password "),
        ] {
            assert!(matches!(
                GrantKind::parse(bad),
                Err(OAuthError::UnsupportedGrantType)
            ));
        }
    }

    #[test]
    fn requests_carry_their_fields() {
        let params = HashMap::from([("code", "c"), ("redirect_uri", "https://a/cb")]);
        assert_eq!(
            GrantRequest::parse(GrantKind::AuthorizationCode, &params).unwrap(),
            GrantRequest::AuthorizationCode {
                code: "c".into(),
                redirect_uri: "https://a/cb".into(),
                code_verifier: None
            }
        );
        let params = HashMap::from([("username", "u")]);
        assert!(matches!(
            GrantRequest::parse(GrantKind::Password, &params),
            Err(OAuthError::InvalidRequest(m)) if m.contains("\"password\"")
        ));
        assert_eq!(
            GrantRequest::parse(GrantKind::ClientCredentials, &HashMap::new()).unwrap(),
            GrantRequest::ClientCredentials { scope: None }
        );
    }

    #[test]
    fn exchanges_check_client_expiry_redirect_and_verifier() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let code = CodeBinding {
            application_id: 7,
            redirect_uri: "https://a.example/cb".into(),
            code_challenge: Some(super::super::pkce::s256(verifier)),
            expires_at: 100,
        };
        let ok = |app, uri, v, now| check_exchange(&code, app, uri, v, now).is_ok();
        assert!(ok(7, "https://a.example/cb", Some(verifier), 99));
        assert!(!ok(8, "https://a.example/cb", Some(verifier), 99));
        assert!(!ok(7, "https://a.example/cb", Some(verifier), 100));
        assert!(!ok(7, "https://a.example/cb/", Some(verifier), 99));
        assert!(!ok(7, "https://a.example/cb", None, 99));
        assert!(!ok(7, "https://a.example/cb", Some(&"x".repeat(43)), 99));
        let without = CodeBinding {
            code_challenge: None,
            ..code.clone()
        };
        assert!(check_exchange(&without, 7, "https://a.example/cb", None, 1).is_ok());
        assert!(check_exchange(&without, 7, "https://a.example/cb", Some(verifier), 1).is_err());
    }
}
