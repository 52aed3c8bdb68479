//! Scopes as pure functions: what an application may have, what a request resolves to, how a
//! refresh narrows the original grant, and whether a remembered consent covers a request.

use super::OAuthError;
use crate::domain::Application;
use std::collections::BTreeMap;

pub use crate::domain::{INTROSPECTION_SCOPE, permits};
use crate::domain::{SSF_MANAGE_SCOPE, SSF_READ_SCOPE, needs_permission};

/// What the server declares: every scope by name, and those granted when none is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Declared<'a> {
    pub scopes: &'a BTreeMap<String, String>,
    pub defaults: &'a [String],
}

impl Declared<'_> {
    /// Whether `scope` is declared: in the settings, or one of OpenID Connect's.
    pub fn has(&self, scope: &str) -> bool {
        self.scopes.contains_key(scope) || super::oidc::scope_description(scope).is_some()
    }
}

/// The space-separated scopes of `scope`, each once, in order.
pub fn dedup(scope: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope.split_whitespace() {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    out
}

/// Whether `app` may be granted `scope`: within its allowed scopes, `introspection` only when
/// it is allowed to introspect, `ssf.*` only when it may use the revocation stream.
pub fn may_have(app: &Application, scope: &str) -> bool {
    permits(&app.allowed_scopes, app.permissions(), scope)
}

// The descriptions never repeat a requested value: they reach the client's pages through the
// authorization redirect (RFC 6749 §4.1.2.1 allows only a narrow character set, and an
// anonymous link must not put its own words there).
fn not_allowed() -> OAuthError {
    OAuthError::InvalidScope("A requested scope is not allowed for this client.".into())
}

/// The scopes as a token's `scope`; none at all is `invalid_scope`.
fn granted(scopes: Vec<String>) -> Result<String, OAuthError> {
    if scopes.is_empty() {
        return Err(OAuthError::InvalidScope(
            "No scope could be granted.".into(),
        ));
    }
    Ok(scopes.join(" "))
}

/// The scope to grant: the declared defaults (within what the client may have, never
/// `introspection`) when none is asked for; otherwise exactly what was asked, each declared
/// and allowed for this client.
pub fn resolve(
    declared: Declared<'_>,
    app: &Application,
    requested: Option<&str>,
) -> Result<String, OAuthError> {
    let scopes: Vec<String> = match requested {
        None => declared
            .defaults
            .iter()
            .filter(|s| !needs_permission(s) && may_have(app, s))
            .cloned()
            .collect(),
        Some(requested) => {
            let requested = dedup(requested);
            let stream_scope = |s: &str| [SSF_READ_SCOPE, SSF_MANAGE_SCOPE].contains(&s);
            if requested
                .iter()
                .any(|s| !declared.has(s) && !stream_scope(s))
            {
                return Err(OAuthError::InvalidScope(
                    "A requested scope is not declared.".into(),
                ));
            }
            if requested.iter().any(|s| !may_have(app, s)) {
                return Err(not_allowed());
            }
            requested
        }
    };
    granted(scopes)
}

/// The scope of a refresh: the original less what the application may no longer have when none
/// is asked for; otherwise what was asked, each granted originally and still allowed.
pub fn narrow(
    original: &str,
    app: &Application,
    requested: Option<&str>,
) -> Result<String, OAuthError> {
    let scopes: Vec<String> = match requested {
        None => original
            .split_whitespace()
            .filter(|s| may_have(app, s))
            .map(str::to_owned)
            .collect(),
        Some(requested) => {
            let granted: Vec<&str> = original.split_whitespace().collect();
            let requested = dedup(requested);
            if requested.iter().any(|s| !granted.contains(&s.as_str())) {
                return Err(OAuthError::InvalidScope(
                    "A requested scope was not granted originally.".into(),
                ));
            }
            if requested.iter().any(|s| !may_have(app, s)) {
                return Err(not_allowed());
            }
            requested
        }
    };
    granted(scopes)
}

/// Whether a consent given for `consented` covers a request for `requested` (each a
/// space-separated scope): every requested scope was consented to.
pub fn covers(consented: &str, requested: &str) -> bool {
    let consented: Vec<&str> = consented.split_whitespace().collect();
    requested.split_whitespace().all(|s| consented.contains(&s))
}

/// The union of two scopes, `first`'s order first (a consent remembered after a wider one).
pub fn union(first: &str, second: &str) -> String {
    dedup(&format!("{first} {second}")).join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ClientType, GrantType};

    fn app(allowed: &[&str], may_introspect: bool) -> Application {
        Application {
            id: 1,
            name: "a".into(),
            client_id: "c".into(),
            client_secret_digest: None,
            previous_secret: None,
            client_type: ClientType::Public,
            grant_type: GrantType::AuthorizationCode,
            redirect_uris: String::new(),
            allowed_scopes: allowed.iter().map(|s| s.to_string()).collect(),
            may_introspect,
            may_use_ssf: may_introspect,
            pkce_required: true,
            dpop_required: false,
            token_format: None,
            tls_client_auth: None,
            owner_id: None,
            created_at: 0,
        }
    }

    fn declared() -> (BTreeMap<String, String>, Vec<String>) {
        (
            crate::config::example_scopes(),
            vec!["read".into(), "write".into(), "groups".into()],
        )
    }

    #[test]
    fn resolve_takes_defaults_within_the_app_and_refuses_the_rest() {
        let (scopes, defaults) = declared();
        let d = Declared {
            scopes: &scopes,
            defaults: &defaults,
        };
        assert_eq!(
            resolve(d, &app(&["*"], false), None).unwrap(),
            "read write groups"
        );
        assert_eq!(resolve(d, &app(&["read"], false), None).unwrap(), "read");
        assert_eq!(
            resolve(d, &app(&["*"], false), Some("write read write")).unwrap(),
            "write read"
        );
        assert!(matches!(
            resolve(d, &app(&["*"], false), Some("read nope")),
            Err(OAuthError::InvalidScope(m)) if m.contains("not declared")
        ));
        assert!(matches!(
            resolve(d, &app(&["read"], false), Some("write")),
            Err(OAuthError::InvalidScope(m)) if m.contains("not allowed")
        ));
        assert!(resolve(d, &app(&["*"], false), Some("introspection")).is_err());
        assert_eq!(
            resolve(d, &app(&["*"], true), Some("introspection")).unwrap(),
            "introspection"
        );
        // No allowed scope: nothing to grant, asked for or not.
        assert!(resolve(d, &app(&[], false), None).is_err());
        assert!(resolve(d, &app(&[], false), Some("read")).is_err());
        // No default the app may have: nothing to grant.
        assert!(resolve(d, &app(&["introspection"], true), None).is_err());
    }

    #[test]
    fn narrow_never_widens() {
        let a = app(&["*"], false);
        assert_eq!(narrow("read write", &a, None).unwrap(), "read write");
        assert_eq!(narrow("read write", &a, Some("write")).unwrap(), "write");
        assert!(matches!(
            narrow("read", &a, Some("read write")),
            Err(OAuthError::InvalidScope(m)) if m.contains("not granted originally")
        ));
        // A scope withdrawn from the application since is dropped, or refused when asked for.
        let b = app(&["read"], false);
        assert_eq!(narrow("read write", &b, None).unwrap(), "read");
        assert!(narrow("read write", &b, Some("write")).is_err());
        assert!(narrow("write", &b, None).is_err());
    }

    #[test]
    fn consent_covers_the_same_or_fewer_scopes() {
        assert!(covers("read write", "read"));
        assert!(covers("read write", "write read"));
        assert!(!covers("read", "read write"));
        assert!(!covers("", "read"));
        assert_eq!(union("read", "write read"), "read write");
    }
}
