//! The authorization request (RFC 6749 §4.1.1 with RFC 7636 PKCE), checked in the order of
//! §4.1.2.1: first the client and its redirect URI, whose failures are shown to the user and
//! never redirected; then everything else, whose failures go back to the client.

pub use super::AuthorizeError;
use super::oidc::{self, OidcRequest};
use super::scope::{self, Declared};
use super::{OAuthError, Parameters, pkce, resource};
use crate::domain::{Application, ClientType, GrantType, Resource};

/// Why no redirect may be made: shown as an error page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unredirectable {
    UnknownClient,
    MissingRedirectUri,
    UnregisteredRedirectUri,
    /// A parameter sent twice (RFC 6749 §3.1): which copy to trust is unknown.
    RepeatedParameter,
}

impl Unredirectable {
    pub fn message(self) -> &'static str {
        match self {
            Unredirectable::UnknownClient => {
                "The application asking for access is unknown (missing or wrong client_id)."
            }
            Unredirectable::MissingRedirectUri => {
                "The request names no redirect_uri: there is nowhere to send you back to."
            }
            Unredirectable::UnregisteredRedirectUri => {
                "The redirect_uri is not one registered for this application."
            }
            Unredirectable::RepeatedParameter => "The request repeats a parameter.",
        }
    }
}

/// The redirect URI of a request whose client is known: where errors may now be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Return {
    pub redirect_uri: String,
    pub state: Option<String>,
}

/// An authorization request that passed every check: what the consent page shows, the
/// hidden fields it posts back, and what a code is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub client_id: String,
    pub redirect_uri: String,
    /// The granted scope, space-separated.
    pub scope: String,
    /// The resources the tokens will be for (RFC 8707); empty: the default audience.
    pub resources: Vec<String>,
    pub state: Option<String>,
    pub code_challenge: Option<String>,
    /// OpenID Connect's `nonce` (kept only when the scope holds `openid`).
    pub nonce: Option<String>,
    /// The thumbprint of the DPoP key the code is for (RFC 9449 §10 `dpop_jkt`).
    pub dpop_jkt: Option<String>,
    /// OpenID Connect's other parameters: how to sign in, and hints.
    pub oidc: OidcRequest,
}

impl Authorization {
    /// The parameters that recreate this request (the consent form's hidden fields).
    pub fn parameters(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("response_type", "code".to_owned()),
            ("client_id", self.client_id.clone()),
            ("redirect_uri", self.redirect_uri.clone()),
            ("scope", self.scope.clone()),
        ];
        out.extend(self.resources.iter().map(|r| ("resource", r.clone())));
        if let Some(state) = &self.state {
            out.push(("state", state.clone()));
        }
        if let Some(challenge) = &self.code_challenge {
            out.push(("code_challenge", challenge.clone()));
            out.push(("code_challenge_method", pkce::S256.to_owned()));
        }
        if let Some(nonce) = &self.nonce {
            out.push(("nonce", nonce.clone()));
        }
        if let Some(acr_values) = &self.oidc.acr_values {
            out.push(("acr_values", acr_values.clone()));
        }
        if let Some(jkt) = &self.dpop_jkt {
            out.push(("dpop_jkt", jkt.clone()));
        }
        out
    }
}

/// Whether `uri` is one of `app`'s registered redirect URIs: the same string, or, for a loopback
/// IP address over http, the same string but for the port (RFC 8252 §7.3: a native app listens
/// on a port the system gives it at the time of the request; RFC 9700 §2.1 makes that the one
/// exception to exact matching). `localhost` is matched exactly (RFC 8252 §8.3).
pub fn is_registered(app: &Application, uri: &str) -> bool {
    let loopback = loopback_without_port(uri);
    app.redirect_uris
        .split_whitespace()
        .any(|r| r == uri || (loopback.is_some() && loopback_without_port(r) == loopback))
}

/// `http://127.0.0.1[:port]/rest` or `http://[::1][:port]/rest` as its address and its rest
/// (path and query, which must then match exactly); None for any other URI, and for a port
/// that is not a plain number from 1 to 65535 (no sign, no leading zero).
fn loopback_without_port(uri: &str) -> Option<(&'static str, &str)> {
    let (address, after) = ["http://127.0.0.1", "http://[::1]"]
        .into_iter()
        .find_map(|address| Some((address, uri.strip_prefix(address)?)))?;
    let rest = match after.strip_prefix(':') {
        Some(port_and_rest) => {
            let digits = port_and_rest.bytes().take_while(u8::is_ascii_digit).count();
            let port = &port_and_rest[..digits];
            if port.starts_with('0') || port.parse::<u16>().is_err() {
                return None;
            }
            &port_and_rest[digits..]
        }
        None => after,
    };
    (rest.is_empty() || rest.starts_with('/')).then_some((address, rest))
}

/// Step one: the client (looked up by the caller from `client_id`) and the redirect URI.
pub fn check_client(
    app: Option<&Application>,
    params: &impl Parameters,
) -> Result<Return, Unredirectable> {
    let app = app.ok_or(Unredirectable::UnknownClient)?;
    let redirect_uri = params
        .get("redirect_uri")
        .ok_or(Unredirectable::MissingRedirectUri)?;
    if !is_registered(app, redirect_uri) {
        return Err(Unredirectable::UnregisteredRedirectUri);
    }
    Ok(Return {
        redirect_uri: redirect_uri.to_owned(),
        state: params.get("state").map(str::to_owned),
    })
}

/// Whether `app` must send a PKCE challenge: public clients always, confidential ones unless
/// they opted out.
/// Whether a remembered consent may answer without showing the page again: not for a public
/// client coming back to a plain-http (loopback) URI, which any local program that takes the
/// port can claim, and then exchange the code as the client (RFC 8252 §8.6, RFC 6749 §10.2).
pub fn remembered_consent_applies(app: &Application, redirect_uri: &str) -> bool {
    app.client_type == ClientType::Confidential || redirect_uri.starts_with("https://")
}

pub fn pkce_required(app: &Application) -> bool {
    app.client_type == ClientType::Public || app.pkce_required
}

/// Step two, once [`check_client`] passed: response type, grant registration, PKCE, resources
/// (`known`: the registered resources among those the request names) and scope.
pub fn validate(
    declared: Declared<'_>,
    known: &[Resource],
    app: &Application,
    back: &Return,
    params: &impl Parameters,
) -> Result<Authorization, AuthorizeError> {
    match params.get("response_type") {
        Some("code") => {}
        None => return Err(AuthorizeError::invalid_request("response_type is missing.")),
        Some(_) => {
            return Err(AuthorizeError {
                error: "unsupported_response_type",
                description: "Only response_type=code is supported.".into(),
            });
        }
    }
    if app.grant_type != GrantType::AuthorizationCode {
        return Err(AuthorizeError {
            error: "unauthorized_client",
            description: "This client is not registered for the authorization code grant.".into(),
        });
    }
    let challenge = params.get("code_challenge");
    let method = params.get("code_challenge_method");
    let code_challenge = match (challenge, method) {
        (None, Some(_)) => {
            return Err(AuthorizeError::invalid_request(
                "code_challenge_method without code_challenge.",
            ));
        }
        (None, None) if pkce_required(app) => {
            return Err(AuthorizeError::invalid_request(
                "PKCE is required: send code_challenge with code_challenge_method=S256.",
            ));
        }
        (None, None) => None,
        // RFC 7636 §4.3: no method means `plain`, refused like `plain` itself.
        (Some(_), method) if method != Some(pkce::S256) => {
            return Err(AuthorizeError::invalid_request(
                "Only code_challenge_method=S256 is supported.",
            ));
        }
        (Some(challenge), _) if !pkce::is_s256_challenge(challenge) => {
            return Err(AuthorizeError::invalid_request(
                "code_challenge is not an S256 challenge (43 characters of base64url).",
            ));
        }
        (Some(challenge), _) => Some(challenge.to_owned()),
    };
    let resources = resource::indicators(&params.get_all("resource"))?;
    let targets = resource::registered(&resources, known)?;
    let scope = if targets.is_empty() {
        scope::resolve(declared, app, params.get("scope"))
    } else {
        resource::scope_for(&targets, app, params.get("scope"), |s| {
            oidc::scope_description(s).is_some()
        })
    }?;
    let oidc = oidc::parse(params)?;
    let nonce = params
        .get("nonce")
        .filter(|_| oidc::is_openid(&scope))
        .map(str::to_owned);
    // RFC 9449 §10: a JWK thumbprint, base64url of a SHA-256 (43 characters).
    let dpop_jkt = match params.get("dpop_jkt") {
        None => None,
        Some(jkt) if pkce::is_s256_challenge(jkt) => Some(jkt.to_owned()),
        Some(_) => {
            return Err(AuthorizeError::invalid_request(
                "dpop_jkt is not a JWK SHA-256 thumbprint (43 characters of base64url).",
            ));
        }
    };
    Ok(Authorization {
        client_id: app.client_id.clone(),
        redirect_uri: back.redirect_uri.clone(),
        scope,
        resources,
        state: back.state.clone(),
        code_challenge,
        nonce,
        dpop_jkt,
        oidc,
    })
}

/// `redirect_uri` with `pairs` added to its query (RFC 6749 §4.1.2: the registered URI's own
/// query is kept).
pub fn redirect_with(redirect_uri: &str, pairs: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        query.append_pair(name, value);
    }
    let separator = if redirect_uri.contains('?') { '&' } else { '?' };
    format!("{redirect_uri}{separator}{}", query.finish())
}

/// The redirect that carries `error` back to the client, with `state` and `iss` (RFC 9207).
pub fn error_redirect(back: &Return, error: &AuthorizeError, issuer: &str) -> String {
    let mut pairs = vec![
        ("error", error.error),
        ("error_description", error.description.as_str()),
    ];
    if let Some(state) = &back.state {
        pairs.push(("state", state));
    }
    pairs.push(("iss", issuer));
    redirect_with(&back.redirect_uri, &pairs)
}

/// The redirect that carries a new `code` back to the client, with `state` and `iss`.
pub fn code_redirect(authorization: &Authorization, code: &str, issuer: &str) -> String {
    let mut pairs = vec![("code", code)];
    if let Some(state) = &authorization.state {
        pairs.push(("state", state));
    }
    pairs.push(("iss", issuer));
    redirect_with(&authorization.redirect_uri, &pairs)
}

impl From<OAuthError> for AuthorizeError {
    fn from(error: OAuthError) -> Self {
        AuthorizeError {
            error: error.as_str(),
            description: error.description().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn app(client_type: ClientType, pkce_required: bool) -> Application {
        Application {
            id: 1,
            name: "a".into(),
            client_id: "cid".into(),
            client_secret_digest: None,
            previous_secret: None,
            client_type,
            grant_type: GrantType::AuthorizationCode,
            redirect_uris: "https://a.example/cb http://127.0.0.1:9/cb?x=1".into(),
            allowed_scopes: vec!["read".into(), "write".into()],
            may_introspect: false,
            may_use_ssf: false,
            pkce_required,
            dpop_required: false,
            token_format: None,
            tls_client_auth: None,
            owner_id: None,
            created_at: 0,
        }
    }

    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    fn run(
        app: &Application,
        pairs: &[(&'static str, &'static str)],
    ) -> Result<Authorization, AuthorizeError> {
        let params: HashMap<&str, &str> = pairs.iter().copied().collect();
        let back = check_client(Some(app), &params).expect("registered");
        let scopes = crate::config::example_scopes();
        let defaults = vec!["read".to_owned()];
        let declared = Declared {
            scopes: &scopes,
            defaults: &defaults,
        };
        validate(declared, &[], app, &back, &params)
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            ("response_type", "code"),
            ("redirect_uri", "https://a.example/cb"),
            ("code_challenge", CHALLENGE),
            ("code_challenge_method", "S256"),
            ("state", "s1"),
        ]
    }

    fn with(changes: &[(&'static str, Option<&'static str>)]) -> Vec<(&'static str, &'static str)> {
        let mut pairs = base();
        for (name, value) in changes {
            pairs.retain(|(n, _)| n != name);
            if let Some(value) = value {
                pairs.push((name, value));
            }
        }
        pairs
    }

    #[test]
    fn the_client_and_redirect_uri_are_never_redirected_to_when_wrong() {
        let a = app(ClientType::Public, true);
        let params: HashMap<&str, &str> = HashMap::from([("redirect_uri", "https://a.example/cb")]);
        assert_eq!(
            check_client(None, &params),
            Err(Unredirectable::UnknownClient)
        );
        for bad in [
            "https://a.example/cb/",
            "https://a.example/cb?x",
            "https://evil/cb",
        ] {
            let params = HashMap::from([("redirect_uri", bad)]);
            assert_eq!(
                check_client(Some(&a), &params),
                Err(Unredirectable::UnregisteredRedirectUri),
                "{bad}"
            );
        }
        assert_eq!(
            check_client(Some(&a), &HashMap::<&str, &str>::new()),
            Err(Unredirectable::MissingRedirectUri)
        );
        let params = HashMap::from([("redirect_uri", "http://127.0.0.1:9/cb?x=1")]);
        assert!(check_client(Some(&a), &params).is_ok());
    }

    #[test]
    fn loopback_ip_redirect_uris_match_on_any_port() {
        let mut a = app(ClientType::Public, true);
        a.redirect_uris =
            "http://127.0.0.1/cb http://[::1]:8080/cb?x=1 http://localhost/cb http://127.0.0.1:7"
                .into();
        for good in [
            "http://127.0.0.1/cb",
            "http://127.0.0.1:53124/cb",
            "http://127.0.0.1:65535/cb",
            "http://[::1]:8080/cb?x=1",
            "http://[::1]/cb?x=1",
            "http://[::1]:1/cb?x=1",
            "http://127.0.0.1:9",
            "http://127.0.0.1",
        ] {
            assert!(is_registered(&a, good), "{good}");
        }
        for bad in [
            "http://127.0.0.1:53124/cb2",
            "http://127.0.0.1:53124/cb?x",
            "http://127.0.0.1:53124/",
            "http://127.0.0.1:0/cb",
            "http://127.0.0.1:08080/cb",
            "http://127.0.0.1:65536/cb",
            "http://127.0.0.1:+80/cb",
            "http://127.0.0.1:/cb",
            "http://127.0.0.1:80@evil.example/cb",
            "http://127.0.0.1.evil.example/cb",
            "http://127.0.0.2:80/cb",
            "https://127.0.0.1:443/cb",
            "http://[::1]:8080/cb?x=2",
            "http://localhost:53124/cb",
            "http://127.0.0.1:9/x",
        ] {
            assert!(!is_registered(&a, bad), "{bad}");
        }
    }

    #[test]
    fn a_remembered_consent_never_answers_a_public_client_at_a_plain_http_uri() {
        let public = app(ClientType::Public, true);
        let confidential = app(ClientType::Confidential, true);
        assert!(remembered_consent_applies(
            &public,
            "https://app.example/cb"
        ));
        assert!(!remembered_consent_applies(
            &public,
            "http://127.0.0.1:9/cb"
        ));
        assert!(remembered_consent_applies(
            &confidential,
            "http://127.0.0.1:9/cb"
        ));
    }

    #[test]
    fn pkce_is_s256_and_required_unless_opted_out() {
        let public = app(ClientType::Public, false);
        let confidential = app(ClientType::Confidential, true);
        let opted_out = app(ClientType::Confidential, false);
        let ok = run(&public, &base()).unwrap();
        assert_eq!(ok.code_challenge.as_deref(), Some(CHALLENGE));
        assert_eq!(ok.scope, "read");
        assert_eq!(ok.state.as_deref(), Some("s1"));
        let no_pkce = with(&[("code_challenge", None), ("code_challenge_method", None)]);
        for a in [&public, &confidential] {
            assert_eq!(run(a, &no_pkce).unwrap_err().error, "invalid_request");
        }
        assert_eq!(run(&opted_out, &no_pkce).unwrap().code_challenge, None);
        for method in [Some("plain"), None, Some("s256")] {
            let e = run(&opted_out, &with(&[("code_challenge_method", method)])).unwrap_err();
            assert_eq!(e.error, "invalid_request", "{method:?}");
        }
        let e = run(&public, &with(&[("code_challenge", Some("short"))])).unwrap_err();
        assert!(e.description.contains("S256 challenge"));
    }

    #[test]
    fn other_errors_name_their_rfc_code() {
        let a = app(ClientType::Public, true);
        assert_eq!(
            run(&a, &with(&[("response_type", Some("token"))]))
                .unwrap_err()
                .error,
            "unsupported_response_type"
        );
        assert_eq!(
            run(&a, &with(&[("scope", Some("read groups"))]))
                .unwrap_err()
                .error,
            "invalid_scope"
        );
        assert_eq!(
            run(&a, &with(&[("scope", Some("nope"))]))
                .unwrap_err()
                .error,
            "invalid_scope"
        );
        let mut password = a.clone();
        password.grant_type = GrantType::Password;
        assert_eq!(
            run(&password, &base()).unwrap_err().error,
            "unauthorized_client"
        );
    }

    #[test]
    fn redirects_keep_the_registered_query_and_carry_state_and_iss() {
        let back = Return {
            redirect_uri: "http://127.0.0.1:9/cb?x=1".into(),
            state: Some("a b&c".into()),
        };
        assert_eq!(
            error_redirect(&back, &AuthorizeError::access_denied(), "https://as"),
            "http://127.0.0.1:9/cb?x=1&error=access_denied&error_description=The+user+denied+the+request.&state=a+b%26c&iss=https%3A%2F%2Fas"
        );
        let auth = Authorization {
            client_id: "c".into(),
            redirect_uri: "https://a/cb".into(),
            scope: "read".into(),
            resources: vec![],
            state: None,
            code_challenge: None,
            nonce: None,
            dpop_jkt: None,
            oidc: OidcRequest::default(),
        };
        assert_eq!(
            code_redirect(&auth, "xyz", "https://as"),
            "https://a/cb?code=xyz&iss=https%3A%2F%2Fas"
        );
    }
}
