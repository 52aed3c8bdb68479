//! OpenID Connect Core 1.0 on top of the authorization request, as pure functions: the scopes it
//! declares, the request parameters it adds (`nonce`, `prompt`, `max_age`, `login_hint`,
//! `id_token_hint`; `claims`, `request` and `request_uri` refused), whether a sign-in or the
//! consent page is needed, which claims a scope releases, and the post-logout redirect check.

use super::{AuthorizeError, Parameters};

/// The scope that makes an authorization request an OpenID Connect one.
pub const OPENID: &str = "openid";

/// The scopes OpenID Connect defines that this server serves, declared whatever the settings
/// say, with the words the consent page shows when the settings do not declare them.
pub const SCOPES: [(&str, &str); 3] = [
    (OPENID, "Sign you in with your account here"),
    ("profile", "Your profile details and when they last changed"),
    ("email", "Your email address and whether it is verified"),
];

/// The claims of the UserInfo endpoint, by the scope that releases them (Core 1.0 §5.4).
pub const CLAIMS: [(&str, &[&str]); 2] = [
    (
        "profile",
        &[
            "name",
            "given_name",
            "family_name",
            "preferred_username",
            "updated_at",
        ],
    ),
    ("email", &["email", "email_verified"]),
];

/// The longest `nonce`, `login_hint` or `id_token_hint` taken (a longer one is `invalid_request`).
pub const MAX_PARAMETER: usize = 4096;

/// Whether a space-separated scope holds `openid`.
pub fn is_openid(scope: &str) -> bool {
    scope.split_whitespace().any(|s| s == OPENID)
}

/// The description of an OpenID Connect scope.
pub fn scope_description(name: &str) -> Option<&'static str> {
    SCOPES.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
}

/// The claim names a granted scope releases.
pub fn released_claims(scope: &str) -> Vec<&'static str> {
    let granted: Vec<&str> = scope.split_whitespace().collect();
    CLAIMS
        .iter()
        .filter(|(s, _)| granted.contains(s))
        .flat_map(|(_, claims)| claims.iter().copied())
        .collect()
}

/// The `prompt` values (Core 1.0 §3.1.2.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prompt {
    pub none: bool,
    pub login: bool,
    pub consent: bool,
}

/// The OpenID Connect parameters of an authorization request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OidcRequest {
    pub prompt: Prompt,
    /// Seconds since the last sign-in beyond which the user signs in again.
    pub max_age: Option<i64>,
    pub login_hint: Option<String>,
    pub id_token_hint: Option<String>,
    /// The requested authentication context classes, space-separated, preferred first
    /// (`crate::protocol::acr`).
    pub acr_values: Option<String>,
}

fn invalid(description: &str) -> AuthorizeError {
    AuthorizeError {
        error: "invalid_request",
        description: description.to_owned(),
    }
}

/// Reads the OpenID Connect parameters; what this server does not do is refused with the code
/// Core 1.0 §3.1.2.6 names (`request_not_supported`, `request_uri_not_supported`). `claims`
/// (§5.5) is ignored, as parameters not understood are (§3.1.2.1; `claims_parameter_supported`
/// is false): claims are released by scope, and the request succeeds (the OpenID Foundation's
/// `oidcc-claims-essential` wants a successful answer).
pub fn parse(params: &impl Parameters) -> Result<OidcRequest, AuthorizeError> {
    if params.get("request").is_some() {
        return Err(AuthorizeError {
            error: "request_not_supported",
            description: "Request objects are not supported.".into(),
        });
    }
    if params.get("request_uri").is_some() {
        return Err(AuthorizeError {
            error: "request_uri_not_supported",
            description: "request_uri is not supported.".into(),
        });
    }
    for name in ["nonce", "login_hint", "id_token_hint", "acr_values"] {
        if params.get(name).is_some_and(|v| v.len() > MAX_PARAMETER) {
            return Err(invalid("A parameter is too long."));
        }
    }
    let mut prompt = Prompt::default();
    for value in params.get("prompt").unwrap_or_default().split_whitespace() {
        match value {
            "none" => prompt.none = true,
            "login" => prompt.login = true,
            "consent" => prompt.consent = true,
            // One account per browser here: there is nothing to select.
            "select_account" => {}
            _ => return Err(invalid("Unknown prompt value.")),
        }
    }
    if prompt.none && (prompt.login || prompt.consent) {
        return Err(invalid(
            "prompt=none cannot be combined with another value.",
        ));
    }
    let max_age = match params.get("max_age") {
        None => None,
        Some(text) => match text.parse::<i64>() {
            Ok(seconds) if seconds >= 0 && text.bytes().all(|b| b.is_ascii_digit()) => {
                Some(seconds)
            }
            _ => return Err(invalid("max_age is not a number of seconds.")),
        },
    };
    Ok(OidcRequest {
        prompt,
        max_age,
        login_hint: params.get("login_hint").map(str::to_owned),
        id_token_hint: params.get("id_token_hint").map(str::to_owned),
        acr_values: params.get("acr_values").map(str::to_owned),
    })
}

/// What the authorization endpoint does about signing in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignIn {
    /// The current sign-in will do.
    Current,
    /// Show the sign-in form (again).
    Required,
    /// `prompt=none` and a sign-in is needed: `login_required` to the client.
    LoginRequired,
}

/// Whether the user must sign in: no session; `prompt=login`; a sign-in `max_age` old or older;
/// or an `id_token_hint` naming someone else than the signed-in user (`hint_is_user` false).
pub fn sign_in(
    request: &OidcRequest,
    auth_time: Option<i64>,
    hint_is_user: Option<bool>,
    now: i64,
) -> SignIn {
    let needed = match auth_time {
        None => true,
        Some(at) => {
            request.prompt.login
                // Whole seconds: an elapsed time shown as `max` may be up to a second more, so
                // `max` itself is already too old (and `max_age=0` always signs in again).
                || request.max_age.is_some_and(|max| now - at >= max)
                || hint_is_user == Some(false)
        }
    };
    match (needed, request.prompt.none) {
        (false, _) => SignIn::Current,
        (true, true) => SignIn::LoginRequired,
        (true, false) => SignIn::Required,
    }
}

/// The query of an authorization request to come back to after a forced sign-in: `prompt` less
/// `login`, and no `max_age` nor `id_token_hint` (else the sign-in would be asked for again, for
/// ever: `max_age=0` is never met a second later); the fresh sign-in met them.
pub fn after_sign_in(pairs: &[(String, String)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        if name == "max_age" || name == "id_token_hint" {
            continue;
        }
        if name == "prompt" {
            let kept: Vec<&str> = value.split_whitespace().filter(|v| *v != "login").collect();
            if !kept.is_empty() {
                query.append_pair(name, &kept.join(" "));
            }
        } else {
            query.append_pair(name, value);
        }
    }
    query.finish()
}

/// Whether `uri` is one of the registered post-logout redirect URIs (space-separated): the
/// same string, nothing less (no prefix, no loopback port exception).
pub fn is_post_logout_uri(registered: &str, uri: &str) -> bool {
    registered.split_whitespace().any(|r| r == uri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parsed(pairs: &[(&str, &str)]) -> Result<OidcRequest, AuthorizeError> {
        let params: HashMap<&str, &str> = pairs.iter().copied().collect();
        parse(&params)
    }

    #[test]
    fn request_objects_and_claims_are_refused_with_their_codes() {
        assert_eq!(
            parsed(&[("request", "eyJ.x.y")]).unwrap_err().error,
            "request_not_supported"
        );
        assert_eq!(
            parsed(&[("request_uri", "https://rp/r")])
                .unwrap_err()
                .error,
            "request_uri_not_supported"
        );
        assert!(parsed(&[("claims", r#"{"userinfo":{"name":{"essential":true}}}"#)]).is_ok());
        let long = "n".repeat(MAX_PARAMETER + 1);
        assert!(parsed(&[("nonce", &long)]).is_err());
    }

    #[test]
    fn prompt_and_max_age_are_read_strictly() {
        let ok = parsed(&[("prompt", "login consent"), ("max_age", "0")]).unwrap();
        assert!(ok.prompt.login && ok.prompt.consent && !ok.prompt.none);
        assert_eq!(ok.max_age, Some(0));
        for bad in ["none login", "none consent", "bogus"] {
            assert!(parsed(&[("prompt", bad)]).is_err(), "{bad}");
        }
        for bad in ["-1", "+5", "1.5", "x", "99999999999999999999"] {
            assert!(parsed(&[("max_age", bad)]).is_err(), "{bad}");
        }
        assert!(parsed(&[("prompt", "select_account")]).is_ok());
    }

    #[test]
    fn sign_in_is_asked_for_when_missing_forced_too_old_or_for_someone_else() {
        let plain = OidcRequest::default();
        let none = OidcRequest {
            prompt: Prompt {
                none: true,
                ..Prompt::default()
            },
            ..OidcRequest::default()
        };
        let login = OidcRequest {
            prompt: Prompt {
                login: true,
                ..Prompt::default()
            },
            ..OidcRequest::default()
        };
        let max_age = OidcRequest {
            max_age: Some(60),
            ..OidcRequest::default()
        };
        assert_eq!(sign_in(&plain, None, None, 100), SignIn::Required);
        assert_eq!(sign_in(&none, None, None, 100), SignIn::LoginRequired);
        assert_eq!(sign_in(&plain, Some(0), None, 100), SignIn::Current);
        assert_eq!(sign_in(&none, Some(0), Some(true), 100), SignIn::Current);
        assert_eq!(
            sign_in(&none, Some(0), Some(false), 100),
            SignIn::LoginRequired
        );
        assert_eq!(sign_in(&login, Some(99), None, 100), SignIn::Required);
        assert_eq!(sign_in(&max_age, Some(41), None, 100), SignIn::Current);
        assert_eq!(sign_in(&max_age, Some(40), None, 100), SignIn::Required);
    }

    #[test]
    fn the_way_back_after_a_forced_sign_in_drops_login_only() {
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            after_sign_in(&pairs(&[("client_id", "c"), ("prompt", "login consent")])),
            "client_id=c&prompt=consent"
        );
        assert_eq!(
            after_sign_in(&pairs(&[("prompt", "login"), ("max_age", "0"), ("x", "1")])),
            "x=1"
        );
    }

    #[test]
    fn scopes_release_their_claims_and_logout_uris_match_exactly() {
        assert_eq!(released_claims("openid"), Vec::<&str>::new());
        assert!(released_claims("openid email").contains(&"email_verified"));
        assert!(released_claims("profile").contains(&"preferred_username"));
        let registered = "https://rp.example/bye https://rp.example/x?y=1";
        assert!(is_post_logout_uri(registered, "https://rp.example/bye"));
        for bad in [
            "https://rp.example/bye/",
            "https://rp.example/bye?x",
            "https://rp.example/by",
            "https://rp.example/bye#f",
            "https://rp.example.evil/bye",
            "",
        ] {
            assert!(!is_post_logout_uri(registered, bad), "{bad}");
        }
    }
}
