//! The authorization server's domain, below storage and protocol alike: registered
//! applications (their client type, grant type and token format), what an authorization code is
//! bound to, and the scope rule every grant and every introspection answer applies.

use crate::secrets;

pub use crate::mtls::TlsClientAuth;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// The scope that lets a token call the introspection endpoint; granted only when asked for,
/// to applications allowed to introspect.
pub const INTROSPECTION_SCOPE: &str = "introspection";

/// The scope under which a user's token names the user's groups: `groups` in the introspection
/// answer and in a JWT access token (group names, in the order they were created).
pub const GROUPS_SCOPE: &str = "groups";

/// The scopes of the revocation stream (SSF 1.0 transmitter, issue 24): reading and polling a
/// stream, and creating, changing or deleting one. Built in (declared whatever the settings
/// say), and granted only when asked for, to applications allowed the revocation stream
/// ([`Permissions::ssf`]).
pub const SSF_READ_SCOPE: &str = "ssf.read";
pub const SSF_MANAGE_SCOPE: &str = "ssf.manage";

/// What an application may do beyond its allowed scopes: each flag lets it have the scopes
/// [`needs_permission`] reserves for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Permissions {
    /// `introspection`: may call the introspection endpoint.
    pub introspect: bool,
    /// `ssf.read`, `ssf.manage`: may use the revocation stream.
    pub ssf: bool,
}

/// Whether `scope` is one only applications with a permission may have (never granted by
/// default, only when asked for).
pub fn needs_permission(scope: &str) -> bool {
    [INTROSPECTION_SCOPE, SSF_READ_SCOPE, SSF_MANAGE_SCOPE].contains(&scope)
}

/// The allowed scope that stands for every declared scope, now and later: an explicit choice
/// (the form's "Every declared scope", `--scopes '*'`). No allowed scope at all means none.
pub const EVERY_SCOPE: &str = "*";

/// Whether `allowed_scopes` is the explicit choice of every declared scope.
pub fn every_scope(allowed_scopes: &[String]) -> bool {
    allowed_scopes.iter().any(|a| a == EVERY_SCOPE)
}

/// Whether an application known by its allowed scopes (none: no scope; [`EVERY_SCOPE`]: any
/// declared scope) and its permissions may have `scope`.
pub fn permits(allowed_scopes: &[String], permissions: Permissions, scope: &str) -> bool {
    let permitted = match scope {
        INTROSPECTION_SCOPE => permissions.introspect,
        SSF_READ_SCOPE | SSF_MANAGE_SCOPE => permissions.ssf,
        _ => true,
    };
    permitted
        && allowed_scopes
            .iter()
            .any(|a| a == scope || a == EVERY_SCOPE)
}

/// `allowed_scopes` (each once) with the scopes `permissions` bring: an application allowed to
/// introspect may ask for `introspection`, one allowed the revocation stream for `ssf.read` and
/// `ssf.manage`, whatever else it was limited to (nothing added to [`EVERY_SCOPE`]).
pub fn with_permission_scopes(allowed_scopes: &[String], permissions: Permissions) -> Vec<String> {
    let mut scopes: Vec<String> = Vec::new();
    let brought = permissions
        .introspect
        .then_some([INTROSPECTION_SCOPE].as_slice())
        .into_iter()
        .chain(
            permissions
                .ssf
                .then_some([SSF_READ_SCOPE, SSF_MANAGE_SCOPE].as_slice()),
        )
        .flatten()
        .copied()
        .filter(|_| !every_scope(allowed_scopes));
    for scope in allowed_scopes.iter().map(String::as_str).chain(brought) {
        if !scopes.iter().any(|s| s == scope) {
            scopes.push(scope.to_owned());
        }
    }
    scopes
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientType {
    Confidential,
    Public,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GrantType {
    Password,
    ClientCredentials,
    AuthorizationCode,
}

impl ClientType {
    pub const ALL: [ClientType; 2] = [ClientType::Confidential, ClientType::Public];
    pub fn as_str(self) -> &'static str {
        match self {
            ClientType::Confidential => "confidential",
            ClientType::Public => "public",
        }
    }
}

impl GrantType {
    pub const ALL: [GrantType; 3] = [
        GrantType::Password,
        GrantType::ClientCredentials,
        GrantType::AuthorizationCode,
    ];
    /// The stored and command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantType::Password => "password",
            GrantType::ClientCredentials => "client-credentials",
            GrantType::AuthorizationCode => "authorization-code",
        }
    }
    /// The name people read in the views.
    pub fn label(self) -> &'static str {
        match self {
            GrantType::Password => "Resource owner password-based",
            GrantType::ClientCredentials => "Client credentials",
            GrantType::AuthorizationCode => "Authorization code",
        }
    }
    /// The `grant_type` value of RFC 6749 that this registration allows at the token endpoint.
    pub fn oauth_value(self) -> &'static str {
        match self {
            GrantType::Password => "password",
            GrantType::ClientCredentials => "client_credentials",
            GrantType::AuthorizationCode => "authorization_code",
        }
    }
}

impl FromStr for ClientType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ClientType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown client type \"{s}\" (confidential or public)"))
    }
}

impl FromStr for GrantType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        GrantType::ALL
            .into_iter()
            .find(|t| t.as_str() == s || t.oauth_value() == s)
            .ok_or_else(|| format!("unknown grant type \"{s}\" (password, client-credentials or authorization-code)"))
    }
}

impl fmt::Display for GrantType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A registered client.
#[derive(Debug, Clone, Serialize)]
pub struct Application {
    pub id: i64,
    pub name: String,
    pub client_id: String,
    #[serde(skip)]
    pub client_secret_digest: Option<String>,
    /// The secret the last rotation replaced, while its grace period lasts.
    #[serde(skip)]
    pub previous_secret: Option<PreviousSecret>,
    pub client_type: ClientType,
    pub grant_type: GrantType,
    pub redirect_uris: String,
    /// Scopes this client may ask for; empty means every declared scope.
    pub allowed_scopes: Vec<String>,
    pub may_introspect: bool,
    /// May use the revocation stream (`ssf.read`, `ssf.manage`; a confidential client only).
    pub may_use_ssf: bool,
    /// Whether a confidential client must send PKCE (public clients always must).
    pub pkce_required: bool,
    /// Whether every token request must come with a DPoP proof (RFC 9449), so that all its
    /// tokens are DPoP-bound.
    pub dpop_required: bool,
    /// Its access-token format; None follows the server's `access_token_format`.
    pub token_format: Option<AccessTokenFormat>,
    /// Authentication by client certificate (RFC 8705) instead of a secret; None: by secret
    /// (confidential) or by client id alone (public).
    #[serde(skip)]
    pub tls_client_auth: Option<TlsClientAuth>,
    pub owner_id: Option<i64>,
    pub created_at: i64,
}

impl Application {
    /// Its permissions as stored.
    pub fn permissions(&self) -> Permissions {
        Permissions {
            introspect: self.may_introspect,
            ssf: self.may_use_ssf,
        }
    }

    /// The access-token format it is issued: its own, else the server's default.
    pub fn access_token_format(&self, default: AccessTokenFormat) -> AccessTokenFormat {
        self.token_format.unwrap_or(default)
    }

    /// Constant-time check of a presented secret against the current secret's digest and, until
    /// its grace period ends, the previous one's: the one rule of every client authentication
    /// by secret. Both digests are always compared, so the time taken does not say which matched.
    pub fn secret_matches(&self, presented: &str) -> bool {
        self.secret_matches_at(presented, now())
    }

    /// [`Self::secret_matches`] at `now` (seconds since the epoch).
    pub fn secret_matches_at(&self, presented: &str, now: i64) -> bool {
        let current = self
            .client_secret_digest
            .as_deref()
            .is_some_and(|stored| secrets::digest_matches(stored, presented));
        let previous = self.previous_secret.as_ref().is_some_and(|previous| {
            // Compared before the expiry is looked at, so the timing is the same either way.
            let matches = secrets::digest_matches(&previous.digest, presented);
            matches & (now < previous.expires_at)
        });
        current | previous
    }
    /// What the views show of the secret after creation.
    pub fn secret_fingerprint(&self) -> Option<&str> {
        self.client_secret_digest
            .as_deref()
            .map(secrets::fingerprint)
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// The secret a rotation with a grace period replaced: still accepted until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousSecret {
    /// Its digest, as `client_secret_digest` holds the current one's.
    pub digest: String,
    /// Seconds since the epoch; refused from then on.
    pub expires_at: i64,
}

impl PreviousSecret {
    /// The previous secret its two stored columns describe, if both are set.
    pub fn from_columns(digest: Option<String>, expires_at: Option<i64>) -> Option<Self> {
        Some(PreviousSecret {
            digest: digest?,
            expires_at: expires_at?,
        })
    }
}

/// What an access token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessTokenFormat {
    /// A random string, meaningful only to the introspection endpoint.
    Opaque,
    /// An RFC 9068 JWT, signed with the current key of the JWKS.
    Jwt,
}

impl AccessTokenFormat {
    pub const ALL: [AccessTokenFormat; 2] = [AccessTokenFormat::Opaque, AccessTokenFormat::Jwt];

    /// The name in settings, on the command line and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessTokenFormat::Opaque => "opaque",
            AccessTokenFormat::Jwt => "jwt",
        }
    }

    /// The format this name stands for (exactly `opaque` or `jwt`).
    pub fn parse(name: &str) -> Option<AccessTokenFormat> {
        AccessTokenFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
    }

    /// What people read in the views.
    pub fn label(self) -> &'static str {
        match self {
            AccessTokenFormat::Opaque => "Opaque (introspected)",
            AccessTokenFormat::Jwt => "JWT (RFC 9068, validated locally)",
        }
    }
}

/// What an authorization code was bound to when it was issued.
#[derive(Debug, Clone)]
pub struct CodeBinding {
    pub application_id: i64,
    pub redirect_uri: String,
    /// The S256 challenge; None when the application opted out of PKCE and sent none.
    pub code_challenge: Option<String>,
    pub expires_at: i64,
}

/// A registered API (RFC 8707 "resource"): tokens requested for it carry its identifier as
/// their audience and only its scopes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resource {
    pub id: i64,
    /// An absolute URI without a fragment (RFC 8707 §2), e.g. `https://orders.example/`.
    pub identifier: String,
    pub name: String,
    /// The scopes a token for this resource may carry.
    pub scopes: Vec<String>,
    /// Its access-token format; None follows the application's, then the server's.
    pub token_format: Option<AccessTokenFormat>,
    /// Seconds, at most the server's `access_token_lifetime`; None: the server's.
    pub access_token_lifetime: Option<i64>,
    pub created_at: i64,
}

/// The most characters of a resource identifier.
pub const MAX_RESOURCE_IDENTIFIER: usize = 512;

/// Why `uri` cannot be a resource identifier (RFC 8707 §2: an absolute URI, no fragment); None
/// when it can. Only `https`, and `http` on a loopback host, are taken: the identifier is also
/// where a client finds the resource's metadata (RFC 9728 §3).
pub fn resource_identifier_problem(uri: &str) -> Option<&'static str> {
    if uri.is_empty() || uri.len() > MAX_RESOURCE_IDENTIFIER {
        return Some("must be an absolute URI of at most 512 characters");
    }
    if uri.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Some("must be an absolute URI without spaces or control characters");
    }
    if uri.contains('#') {
        return Some("must not have a fragment");
    }
    let rest = if let Some(rest) = uri.strip_prefix("https://") {
        rest
    } else if let Some(rest) = uri.strip_prefix("http://") {
        let host = rest.split(['/', '?']).next().unwrap_or_default();
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        let loopback = name == "localhost"
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return Some("must use https (http only on a loopback host)");
        }
        rest
    } else {
        return Some("must be an absolute https URI (http only on a loopback host)");
    };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Some("must name a host, without user information");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_bring_their_scopes_and_nothing_else() {
        let both = Permissions {
            introspect: true,
            ssf: true,
        };
        let none = Permissions {
            introspect: false,
            ssf: false,
        };
        let read = ["read".to_owned()];
        assert_eq!(with_permission_scopes(&read, none), ["read"]);
        assert_eq!(
            with_permission_scopes(&read, both),
            ["read", "introspection", "ssf.read", "ssf.manage"]
        );
        assert_eq!(with_permission_scopes(&[], none), Vec::<String>::new());
        let every = [EVERY_SCOPE.to_owned()];
        assert_eq!(with_permission_scopes(&every, both), ["*"]);
        let again = ["introspection".to_owned()];
        assert_eq!(
            with_permission_scopes(&again, both),
            ["introspection", "ssf.read", "ssf.manage"]
        );
    }

    #[test]
    fn no_allowed_scope_permits_none_and_every_scope_is_explicit() {
        let all = Permissions {
            introspect: true,
            ssf: true,
        };
        let none = Permissions {
            introspect: false,
            ssf: false,
        };
        assert!(!permits(&[], all, "read"));
        assert!(!permits(&[], all, INTROSPECTION_SCOPE));
        let every = [EVERY_SCOPE.to_owned()];
        assert!(permits(&every, none, "read"));
        assert!(permits(&every, all, INTROSPECTION_SCOPE));
        assert!(
            !permits(&every, none, INTROSPECTION_SCOPE),
            "permissions still apply"
        );
        let listed = ["read".to_owned()];
        assert!(permits(&listed, none, "read") && !permits(&listed, none, "write"));
    }
}
