//! The OAuth 2.0 errors as the protocol names them: those of the token, introspection and
//! revocation endpoints (RFC 6749 §5.2, RFC 7662, RFC 7009), which `crate::oauth` turns into
//! responses, and those an authorization request sends back to the client (§4.1.2.1).

/// Every way an OAuth endpoint refuses. Client-authentication failures of any kind collapse into
/// `InvalidClient`, so a caller cannot probe which part was wrong.
#[derive(Debug)]
pub enum OAuthError {
    InvalidRequest(String),
    InvalidClient,
    InvalidGrant(&'static str),
    UnauthorizedClient(&'static str),
    UnsupportedGrantType,
    InvalidScope(String),
    /// A `resource` that is malformed, unknown, or not allowed (RFC 8707 §2).
    InvalidTarget(&'static str),
    /// A protected endpoint called with no credentials or bad ones (401).
    Unauthenticated,
    /// A caller that authenticated but may not use this endpoint (403).
    Forbidden,
    /// Too many failed password attempts from this address (429, `Retry-After`, `invalid_grant`).
    Throttled,
    /// A method other than POST at an endpoint that takes only POST (405, `Allow: POST`,
    /// `invalid_request`): RFC 7662 §2.1 and RFC 7009 §2.1 say POST, and a token in a query
    /// string ends up in access logs.
    PostOnly,
    /// A DPoP proof that is malformed, invalid, replayed, or missing where one is required
    /// (RFC 9449 §5, `invalid_dpop_proof`).
    InvalidDpopProof(&'static str),
    /// A DPoP proof without the server nonce it requires (RFC 9449 §8, `use_dpop_nonce`): the
    /// nonce to retry with rides in the `DPoP-Nonce` header.
    UseDpopNonce(String),
    /// The server is overloaded (its database pool stayed full): 503 with `Retry-After`,
    /// `temporarily_unavailable` (RFC 6749 §4.1.2.1's code).
    Unavailable,
    Server(anyhow::Error),
}

impl OAuthError {
    pub fn as_str(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) | OAuthError::PostOnly => "invalid_request",
            OAuthError::InvalidClient => "invalid_client",
            OAuthError::InvalidGrant(_) | OAuthError::Throttled => "invalid_grant",
            OAuthError::UnauthorizedClient(_) => "unauthorized_client",
            OAuthError::UnsupportedGrantType => "unsupported_grant_type",
            OAuthError::InvalidScope(_) => "invalid_scope",
            OAuthError::InvalidTarget(_) => "invalid_target",
            OAuthError::Unauthenticated => "invalid_token",
            OAuthError::Forbidden => "insufficient_scope",
            OAuthError::InvalidDpopProof(_) => "invalid_dpop_proof",
            OAuthError::UseDpopNonce(_) => "use_dpop_nonce",
            OAuthError::Unavailable => "temporarily_unavailable",
            OAuthError::Server(_) => "server_error",
        }
    }

    /// The `error_description`, if the error has one.
    pub fn description(&self) -> Option<String> {
        match self {
            OAuthError::InvalidRequest(d) | OAuthError::InvalidScope(d) => Some(d.clone()),
            OAuthError::InvalidGrant(d)
            | OAuthError::UnauthorizedClient(d)
            | OAuthError::InvalidTarget(d)
            | OAuthError::InvalidDpopProof(d) => Some((*d).to_owned()),
            OAuthError::UseDpopNonce(_) => {
                Some("Resend the request with a DPoP proof carrying the nonce given.".into())
            }
            OAuthError::InvalidClient => Some("Client authentication failed.".into()),
            OAuthError::UnsupportedGrantType => Some(
                "Use authorization_code, password, refresh_token or client_credentials.".into(),
            ),
            OAuthError::Unauthenticated => {
                Some("Authenticate with client credentials or a bearer token.".into())
            }
            OAuthError::Forbidden => Some("This caller may not use this endpoint.".into()),
            OAuthError::Throttled => Some("Too many failed attempts; try again later.".into()),
            OAuthError::PostOnly => {
                Some("Use POST with an application/x-www-form-urlencoded body.".into())
            }
            OAuthError::Unavailable => Some("The server is busy; try again shortly.".into()),
            OAuthError::Server(_) => None,
        }
    }
}

/// An error sent back to the client's redirect URI (`error`, `error_description`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizeError {
    pub error: &'static str,
    pub description: String,
}

impl AuthorizeError {
    pub(super) fn invalid_request(description: impl Into<String>) -> AuthorizeError {
        AuthorizeError {
            error: "invalid_request",
            description: description.into(),
        }
    }

    /// The user said no.
    pub fn access_denied() -> AuthorizeError {
        AuthorizeError {
            error: "access_denied",
            description: "The user denied the request.".into(),
        }
    }
}
