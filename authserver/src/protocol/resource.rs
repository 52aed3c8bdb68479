//! Resource indicators (RFC 8707) as pure functions: the `resource` values of a request, checked
//! against the registered resources and the client, the scope they allow, and how a refresh or a
//! code exchange may only narrow the audience it was granted.

use super::OAuthError;
use super::scope::{dedup, may_have};
use crate::domain::{Application, Resource, needs_permission, resource_identifier_problem};

/// The most `resource` values one request may carry.
pub const MAX_RESOURCES: usize = 8;

/// The distinct `resource` values of a request, each an absolute URI without a fragment
/// (RFC 8707 §2); `invalid_target` otherwise.
pub fn indicators(values: &[&str]) -> Result<Vec<String>, OAuthError> {
    if values.len() > MAX_RESOURCES {
        return Err(OAuthError::InvalidTarget("Too many resource parameters."));
    }
    let mut out: Vec<String> = Vec::with_capacity(values.len());
    for value in values {
        if resource_identifier_problem(value).is_some() {
            return Err(OAuthError::InvalidTarget(
                "A resource parameter is not an absolute URI without a fragment.",
            ));
        }
        if !out.iter().any(|o| o == value) {
            out.push((*value).to_owned());
        }
    }
    Ok(out)
}

/// The resources `requested` names, in its order, when each is registered; `invalid_target`
/// when one is not.
pub fn registered<'a>(
    requested: &[String],
    known: &'a [Resource],
) -> Result<Vec<&'a Resource>, OAuthError> {
    requested
        .iter()
        .map(|identifier| {
            known
                .iter()
                .find(|r| &r.identifier == identifier)
                .ok_or(OAuthError::InvalidTarget(
                    "A requested resource is unknown.",
                ))
        })
        .collect()
}

/// The scope a token for `resources` gets: what was asked, each a scope of one of the
/// resources (or OpenID Connect's `openid`, `profile`, … when `oidc` says so) and allowed for
/// `app`; without a request, every scope of the resources `app` may have, never one that needs
/// a permission.
pub fn scope_for(
    resources: &[&Resource],
    app: &Application,
    requested: Option<&str>,
    oidc: impl Fn(&str) -> bool,
) -> Result<String, OAuthError> {
    let offered = |s: &str| resources.iter().any(|r| r.scopes.iter().any(|o| o == s));
    let scopes: Vec<String> = match requested {
        None => {
            let all: Vec<&str> = resources
                .iter()
                .flat_map(|r| r.scopes.iter().map(String::as_str))
                .collect();
            dedup(&all.join(" "))
                .into_iter()
                .filter(|s| !needs_permission(s) && may_have(app, s))
                .collect()
        }
        Some(requested) => {
            let requested = dedup(requested);
            if requested.iter().any(|s| !offered(s) && !oidc(s)) {
                return Err(OAuthError::InvalidScope(
                    "A requested scope is not a scope of the requested resource.".into(),
                ));
            }
            if requested.iter().any(|s| !may_have(app, s)) {
                return Err(OAuthError::InvalidScope(
                    "A requested scope is not allowed for this client.".into(),
                ));
            }
            requested
        }
    };
    if scopes.is_empty() {
        return Err(OAuthError::InvalidScope(
            "No scope could be granted.".into(),
        ));
    }
    Ok(scopes.join(" "))
}

/// The audience of a refresh or a code exchange that names `requested` resources, given the
/// audience `granted` (space-separated; None: the server's default audience): each requested
/// one must have been granted (RFC 8707 §2.2); none requested keeps what was granted.
pub fn narrow_audience(
    granted: Option<&str>,
    requested: &[String],
) -> Result<Option<String>, OAuthError> {
    if requested.is_empty() {
        return Ok(granted.map(str::to_owned));
    }
    let granted: Vec<&str> = granted.map_or(Vec::new(), |g| g.split(' ').collect());
    if requested.iter().any(|r| !granted.contains(&r.as_str())) {
        return Err(OAuthError::InvalidTarget(
            "A requested resource was not granted originally.",
        ));
    }
    Ok(Some(requested.join(" ")))
}

/// The scope of a narrowed audience: the granted scope less what none of `resources` offers
/// (OpenID Connect's scopes kept); `invalid_scope` when nothing is left.
pub fn scope_within(
    scope: &str,
    resources: &[&Resource],
    oidc: impl Fn(&str) -> bool,
) -> Result<String, OAuthError> {
    let kept: Vec<&str> = scope
        .split_whitespace()
        .filter(|s| oidc(s) || resources.iter().any(|r| r.scopes.iter().any(|o| o == s)))
        .collect();
    if kept.is_empty() {
        return Err(OAuthError::InvalidScope(
            "No scope could be granted.".into(),
        ));
    }
    Ok(kept.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ClientType, GrantType};

    fn resource(identifier: &str, scopes: &str) -> Resource {
        Resource {
            id: 1,
            identifier: identifier.into(),
            name: identifier.into(),
            scopes: scopes.split_whitespace().map(str::to_owned).collect(),
            token_format: None,
            access_token_lifetime: None,
            created_at: 0,
        }
    }

    fn app(allowed: &str) -> Application {
        Application {
            id: 1,
            name: "a".into(),
            client_id: "a".into(),
            client_secret_digest: None,
            previous_secret: None,
            client_type: ClientType::Confidential,
            grant_type: GrantType::ClientCredentials,
            redirect_uris: String::new(),
            allowed_scopes: allowed.split_whitespace().map(str::to_owned).collect(),
            may_introspect: false,
            may_use_ssf: false,
            pkce_required: true,
            dpop_required: false,
            token_format: None,
            tls_client_auth: None,
            owner_id: None,
            created_at: 0,
        }
    }

    fn no_oidc(_: &str) -> bool {
        false
    }

    #[test]
    fn indicators_are_absolute_uris_without_fragments() {
        assert_eq!(
            indicators(&[
                "https://a.example/",
                "https://a.example/",
                "http://127.0.0.1:9/x"
            ])
            .unwrap(),
            vec!["https://a.example/", "http://127.0.0.1:9/x"]
        );
        for bad in [
            "orders",
            "/relative",
            "https://a.example/#f",
            "javascript:alert(1)",
            "http://orders.example/",
            "https:///nohost",
            "https://user@a.example/",
            "https://a.example/ x",
        ] {
            let e = indicators(&[bad]).unwrap_err();
            assert_eq!(e.as_str(), "invalid_target", "{bad}");
        }
        let many: Vec<String> = (0..9).map(|i| format!("https://a{i}.example/")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(indicators(&many).unwrap_err().as_str(), "invalid_target");
    }

    #[test]
    fn unknown_resources_are_invalid_target() {
        let known = [resource("https://orders.example/", "orders:read")];
        assert_eq!(
            registered(&["https://orders.example/".into()], &known).unwrap()[0].identifier,
            "https://orders.example/"
        );
        let e = registered(&["https://billing.example/".into()], &known).unwrap_err();
        assert_eq!(e.as_str(), "invalid_target");
    }

    #[test]
    fn scopes_come_from_the_resource() {
        let orders = resource("https://orders.example/", "orders:read orders:write");
        let both = [&orders];
        assert_eq!(
            scope_for(&both, &app("*"), None, no_oidc).unwrap(),
            "orders:read orders:write"
        );
        assert_eq!(
            scope_for(&both, &app("orders:read"), None, no_oidc).unwrap(),
            "orders:read"
        );
        assert_eq!(
            scope_for(&both, &app("*"), Some("orders:write"), no_oidc).unwrap(),
            "orders:write"
        );
        // A scope of another API, or a global one the resource does not offer.
        let e = scope_for(&both, &app("*"), Some("billing:read"), no_oidc).unwrap_err();
        assert_eq!(e.as_str(), "invalid_scope");
        let e = scope_for(&both, &app("orders:read"), Some("orders:write"), no_oidc).unwrap_err();
        assert_eq!(e.as_str(), "invalid_scope");
        // `introspection` is never granted by a resource's defaults.
        let odd = resource("https://odd.example/", "introspection");
        assert_eq!(
            scope_for(&[&odd], &app("*"), None, no_oidc)
                .unwrap_err()
                .as_str(),
            "invalid_scope"
        );
        // OpenID Connect's scopes ride along when the caller says so.
        assert_eq!(
            scope_for(&both, &app("*"), Some("openid orders:read"), |s| s
                == "openid")
            .unwrap(),
            "openid orders:read"
        );
    }

    #[test]
    fn a_refresh_may_only_narrow_the_audience() {
        let granted = Some("https://a.example/ https://b.example/");
        assert_eq!(
            narrow_audience(granted, &[]).unwrap(),
            granted.map(Into::into)
        );
        assert_eq!(
            narrow_audience(granted, &["https://b.example/".into()]).unwrap(),
            Some("https://b.example/".into())
        );
        let e = narrow_audience(granted, &["https://c.example/".into()]).unwrap_err();
        assert_eq!(e.as_str(), "invalid_target");
        // A token of the default audience cannot be turned into one for a resource.
        let e = narrow_audience(None, &["https://a.example/".into()]).unwrap_err();
        assert_eq!(e.as_str(), "invalid_target");
        let b = resource("https://b.example/", "b");
        assert_eq!(
            scope_within("a b openid", &[&b], |s| s == "openid").unwrap(),
            "b openid"
        );
        assert_eq!(
            scope_within("a", &[&b], no_oidc).unwrap_err().as_str(),
            "invalid_scope"
        );
    }
}
