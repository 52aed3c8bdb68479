//! The one set of rules for what an operator may enter — users, passwords, groups, client
//! secrets and applications — used by the views and the command line alike, with the same words.

use crate::config::{AccessTokenFormat, Settings};
use crate::mtls::TlsClientAuth;
use crate::store::{ApplicationInput, ClientType, GrantType};

/// Fewest characters in a password.
pub const MIN_PASSWORD: usize = 8;
/// Longer passwords only cost argon2 time.
pub const MAX_PASSWORD: usize = 1024;
/// Fewest characters in a client secret an operator supplies (generated ones have 43).
pub const MIN_CLIENT_SECRET: usize = 32;
/// Fewest different characters in a supplied client secret, so `aaaa…` is refused.
const MIN_DISTINCT_SECRET_CHARS: usize = 10;
/// Most redirect URIs per application.
const MAX_REDIRECT_URIS: usize = 20;

/// Messages keyed by field name (the form's field names), the first one per field kept, in the
/// order found: what the command line prints, and what a refused form is shown again with
/// (beside each field; [`Refusals::ALL`] above the form).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals(Vec<(&'static str, String)>);

impl Refusals {
    /// The key of the messages about the form as a whole.
    pub const ALL: &'static str = "__all__";

    pub fn add(&mut self, field: &'static str, message: impl Into<String>) {
        if self.get(field).is_none() {
            self.0.push((field, message.into()));
        }
    }

    /// Records the refusal of `check`, if any, under `field`.
    pub fn check(&mut self, field: &'static str, check: Result<(), String>) {
        if let Err(message) = check {
            self.add(field, message);
        }
    }

    pub fn get(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, m)| m.as_str())
    }

    /// Whether a field has a message (for `aria-invalid`).
    pub fn has(&self, field: &str) -> bool {
        self.get(field).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(f, m)| (*f, m.as_str()))
    }
}

/// The marks and overrides that change the order text is shown in (U+200E/F, U+202A–202E,
/// U+2066–2069): in a name they could make the consent page or `app list` read otherwise.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A length in characters and no control characters; `what` starts the message.
pub fn length(value: &str, what: &str, required: bool, max: usize) -> Result<(), String> {
    if required && value.is_empty() {
        Err("This field is required.".into())
    } else if value.chars().count() > max {
        Err(format!("{what} must be at most {max} characters."))
    } else if value.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        Err(format!("{what} may not contain control characters."))
    } else {
        Ok(())
    }
}

/// 1–150 letters, digits and `@ . + - _`.
pub fn username(value: &str) -> Result<(), String> {
    length(value, "The username", true, 150)?;
    if value
        .chars()
        .all(|c| c.is_alphanumeric() || "@.+-_".contains(c))
    {
        Ok(())
    } else {
        Err("Use only letters, digits and @ . + - _".into())
    }
}

/// Empty, or one `@` between a local part and a domain, no spaces.
pub fn email(value: &str) -> Result<(), String> {
    length(value, "The email address", false, 254)?;
    if value.is_empty() {
        return Ok(());
    }
    let shaped = match value.split_once('@') {
        Some((local, domain)) => !local.is_empty() && !domain.is_empty() && !domain.contains('@'),
        None => false,
    };
    if shaped && !value.chars().any(char::is_whitespace) {
        Ok(())
    } else {
        Err("Enter a valid email address.".into())
    }
}

pub fn first_name(value: &str) -> Result<(), String> {
    length(value, "The first name", false, 150)
}

pub fn last_name(value: &str) -> Result<(), String> {
    length(value, "The last name", false, 150)
}

/// A new password: present, at least [`MIN_PASSWORD`] and at most [`MAX_PASSWORD`] characters.
pub fn password(value: &str) -> Result<(), String> {
    if value.is_empty() {
        Err("This field is required.".into())
    } else if value.chars().count() < MIN_PASSWORD {
        Err(format!(
            "The password must have at least {MIN_PASSWORD} characters."
        ))
    } else if value.len() > MAX_PASSWORD {
        Err(format!(
            "The password must have at most {MAX_PASSWORD} characters."
        ))
    } else {
        Ok(())
    }
}

pub fn group_name(value: &str) -> Result<(), String> {
    length(value, "The name", true, 150)
}

/// A client secret an operator chose: printable ASCII without spaces, at least
/// [`MIN_CLIENT_SECRET`] characters and [`MIN_DISTINCT_SECRET_CHARS`] different ones.
pub fn client_secret(value: &str) -> Result<(), String> {
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("The client secret must be printable ASCII without spaces.".into());
    }
    let distinct = value
        .bytes()
        .collect::<std::collections::BTreeSet<u8>>()
        .len();
    if value.len() < MIN_CLIENT_SECRET || distinct < MIN_DISTINCT_SECRET_CHARS {
        return Err(format!(
            "The client secret must have at least {MIN_CLIENT_SECRET} characters, {MIN_DISTINCT_SECRET_CHARS} of them different (for example: openssl rand -base64 32)."
        ));
    }
    if value.len() > MAX_PASSWORD {
        return Err(format!(
            "The client secret must have at most {MAX_PASSWORD} characters."
        ));
    }
    Ok(())
}

/// Why `uri` cannot be a redirect URI, if it cannot: it must be an absolute `https` URL, or
/// `http` to a loopback host (127.0.0.1, [::1], localhost: native apps, RFC 8252 §7.3), with a
/// host, without a fragment, userinfo, spaces or control characters.
pub fn redirect_uri_problem(uri: &str) -> Option<&'static str> {
    if uri.len() > 2000 {
        return Some("is longer than 2000 characters");
    }
    if uri.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Some("contains spaces or control characters");
    }
    if uri.contains('#') {
        return Some("has a fragment (#…), which a redirect URI may not have");
    }
    let (https, rest) = match (uri.strip_prefix("https://"), uri.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => return Some("is not an absolute https URL"),
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some("has user information (…@), which a redirect URI may not have");
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        return Some("has no host");
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !https && !loopback {
        return Some("uses http to a host that is not loopback (use https)");
    }
    None
}

/// Whether `uri` may be registered as a redirect URI (see [`redirect_uri_problem`]).
pub fn redirect_uri(uri: &str) -> bool {
    redirect_uri_problem(uri).is_none()
}

/// An application as entered: text as typed (trimmed), scopes without repeats.
#[derive(Debug, Clone, Default)]
pub struct ApplicationDraft {
    pub name: String,
    pub client_type: String,
    pub grant_type: String,
    /// Whitespace- or newline-separated.
    pub redirect_uris: String,
    pub scopes: Vec<String>,
    pub may_introspect: bool,
    /// May use the revocation stream (`ssf.read`, `ssf.manage`).
    pub may_use_ssf: bool,
    /// Ticked: a confidential client may leave PKCE out.
    pub pkce_optional: bool,
    /// `opaque`, `jwt`, or empty for the server's default.
    pub token_format: String,
    /// Authentication by client certificate (RFC 8705) in [`TlsClientAuth::parse`]'s form
    /// (`subject_dn:…`, `san_dns:…`, `self_signed:…`), or empty: by secret.
    pub tls_client_auth: String,
    /// Ticked: every token request must come with a DPoP proof (RFC 9449).
    pub dpop_required: bool,
}

impl ApplicationDraft {
    /// The certificate registration, once [`application`] accepted the draft.
    pub fn tls_client_auth(&self) -> Option<TlsClientAuth> {
        TlsClientAuth::parse(self.tls_client_auth.trim()).ok()
    }
}

/// Checks an application into an [`ApplicationInput`]; on refusal, the messages per form field
/// (`name`, `client_type`, `grant_type`, `redirect_uris`, `scope`, `pkce_optional`,
/// `token_format`, `tls_client_auth`).
/// A scope is known when the settings declare it, OpenID Connect defines it, or it is a scope of
/// a registered API (`resource_scopes`, RFC 8707: an application limited to an API's scopes gets
/// tokens for that API only).
pub fn application(
    settings: &Settings,
    resource_scopes: &[String],
    draft: &ApplicationDraft,
) -> Result<ApplicationInput, Refusals> {
    let mut refusals = Refusals::default();
    refusals.check("name", length(&draft.name, "The name", true, 255));
    let client_type = ClientType::ALL
        .into_iter()
        .find(|t| t.as_str() == draft.client_type);
    if client_type.is_none() {
        refusals.add("client_type", "Choose confidential or public.");
    }
    let grant_type = GrantType::ALL
        .into_iter()
        .find(|g| g.as_str() == draft.grant_type);
    match grant_type {
        None => refusals.add("grant_type", "Choose one of the grant types."),
        Some(GrantType::ClientCredentials) if client_type == Some(ClientType::Public) => refusals
            .add(
                "grant_type",
                "Public clients cannot use the client credentials grant: it needs a secret.",
            ),
        _ => {}
    }
    let uris: Vec<&str> = draft.redirect_uris.split_whitespace().collect();
    if let Some((bad, problem)) = uris
        .iter()
        .find_map(|uri| redirect_uri_problem(uri).map(|p| (uri, p)))
    {
        refusals.add(
            "redirect_uris",
            format!("\"{bad}\" {problem}. Redirect URIs are absolute https URLs (http only to 127.0.0.1, [::1] or localhost), without a fragment."),
        );
    } else if uris.is_empty() && grant_type == Some(GrantType::AuthorizationCode) {
        refusals.add(
            "redirect_uris",
            "The authorization code grant needs at least one redirect URI.",
        );
    } else if uris.len() > MAX_REDIRECT_URIS {
        refusals.add(
            "redirect_uris",
            format!("At most {MAX_REDIRECT_URIS} redirect URIs."),
        );
    }
    if let Some(unknown) = draft.scopes.iter().find(|s| {
        *s != crate::domain::EVERY_SCOPE
            && !crate::domain::needs_permission(s)
            && !settings.scopes.contains_key(*s)
            && crate::protocol::oidc::scope_description(s).is_none()
            && !resource_scopes.contains(s)
    }) {
        let hint = if unknown.contains(',') {
            " Scopes are separated by spaces, not commas."
        } else {
            ""
        };
        refusals.add(
            "scope",
            format!("\"{unknown}\" is not a declared scope.{hint}"),
        );
    }
    if draft.may_introspect && client_type == Some(ClientType::Public) {
        refusals.add(
            "may_introspect",
            "Public clients cannot introspect: they have no secret to prove who is asking.",
        );
    }
    if draft.may_use_ssf && client_type == Some(ClientType::Public) {
        refusals.add(
            "may_use_ssf",
            "Public clients cannot use the revocation stream: they have no secret to prove who is asking.",
        );
    }
    if draft.pkce_optional && client_type == Some(ClientType::Public) {
        refusals.add(
            "pkce_optional",
            "Public clients must always use PKCE: only confidential clients may opt out.",
        );
    }
    let token_format = match draft.token_format.as_str() {
        "" => None,
        name => {
            let format = AccessTokenFormat::parse(name);
            if format.is_none() {
                refusals.add(
                    "token_format",
                    "Choose opaque or jwt (or the server default).",
                );
            }
            format
        }
    };
    let tls = draft.tls_client_auth.trim();
    if !tls.is_empty() {
        if let Err(problem) = TlsClientAuth::parse(tls) {
            refusals.add("tls_client_auth", format!("{problem}."));
        } else if client_type == Some(ClientType::Public) {
            refusals.add(
                "tls_client_auth",
                "Public clients have no credentials: certificate authentication is for confidential clients.",
            );
        }
    }
    match (client_type, grant_type) {
        (Some(client_type), Some(grant_type)) if refusals.is_empty() => Ok(ApplicationInput {
            name: draft.name.clone(),
            client_type,
            grant_type,
            redirect_uris: uris.join(" "),
            allowed_scopes: draft.scopes.clone(),
            may_introspect: draft.may_introspect,
            may_use_ssf: draft.may_use_ssf,
            pkce_required: !draft.pkce_optional,
            token_format,
        }),
        _ => Err(refusals),
    }
}

/// An application's OpenID Connect registration as entered: post-logout redirect URIs
/// (whitespace- or newline-separated) and the ID-token algorithm (empty: RS256).
#[derive(Debug, Clone, Default)]
pub struct OidcDraft {
    pub post_logout_redirect_uris: String,
    pub id_token_alg: String,
    /// Ticked: its users must sign in with a second factor.
    pub require_mfa: bool,
}

/// Checks an OpenID Connect registration; on refusal, the messages per form field
/// (`post_logout_redirect_uris`, `id_token_alg`). Post-logout URIs follow the redirect-URI rules.
pub fn oidc_registration(draft: &OidcDraft) -> Result<crate::store::OidcClient, Refusals> {
    let mut refusals = Refusals::default();
    let uris: Vec<&str> = draft.post_logout_redirect_uris.split_whitespace().collect();
    if let Some((bad, problem)) = uris
        .iter()
        .find_map(|uri| redirect_uri_problem(uri).map(|p| (uri, p)))
    {
        refusals.add(
            "post_logout_redirect_uris",
            format!(
                "\"{bad}\" {problem}. Post-logout redirect URIs follow the redirect URI rules."
            ),
        );
    } else if uris.len() > MAX_REDIRECT_URIS {
        refusals.add(
            "post_logout_redirect_uris",
            format!("At most {MAX_REDIRECT_URIS} post-logout redirect URIs."),
        );
    }
    let alg = match draft.id_token_alg.as_str() {
        "" => crate::store::DEFAULT_ID_TOKEN_ALG,
        name => match crate::jwt::Alg::parse(name) {
            Some(alg) => alg.as_str(),
            None => {
                refusals.add("id_token_alg", "Choose RS256 or EdDSA.");
                ""
            }
        },
    };
    if refusals.is_empty() {
        Ok(crate::store::OidcClient {
            id_token_alg: alg.to_owned(),
            post_logout_redirect_uris: uris.join(" "),
            require_mfa: draft.require_mfa,
        })
    } else {
        Err(refusals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oidc_registrations() {
        let ok = oidc_registration(&OidcDraft {
            post_logout_redirect_uris: "https://rp.example/bye\nhttp://127.0.0.1:9/bye".into(),
            id_token_alg: String::new(),
            require_mfa: false,
        })
        .unwrap();
        assert_eq!(ok.id_token_alg, "RS256");
        assert_eq!(
            ok.post_logout_redirect_uris,
            "https://rp.example/bye http://127.0.0.1:9/bye"
        );
        let bad = oidc_registration(&OidcDraft {
            post_logout_redirect_uris: "https://rp.example/bye#x javascript:alert(1)".into(),
            id_token_alg: "HS256".into(),
            require_mfa: false,
        })
        .unwrap_err();
        assert!(bad.has("post_logout_redirect_uris") && bad.has("id_token_alg"));
    }

    #[test]
    fn users_and_passwords() {
        assert_eq!(
            username("bad name").unwrap_err(),
            "Use only letters, digits and @ . + - _"
        );
        assert!(username("alice.b+1@x").is_ok());
        assert_eq!(username("").unwrap_err(), "This field is required.");
        assert!(email("nope").is_err() && email("a@b.example").is_ok() && email("").is_ok());
        assert_eq!(
            password("short").unwrap_err(),
            "The password must have at least 8 characters."
        );
        assert!(password("long enough").is_ok());
    }

    #[test]
    fn client_secrets_must_be_strong() {
        for weak in [
            "abc",
            "known-secret",
            &"a".repeat(40),
            "has a space in it, and is long enough!!",
        ] {
            assert!(client_secret(weak).is_err(), "{weak}");
        }
        assert!(client_secret(&crate::secrets::random_token()).is_ok());
    }

    #[test]
    fn applications() {
        let settings = Settings::for_tests("sqlite::memory:");
        let draft = ApplicationDraft {
            name: "x".into(),
            client_type: "public".into(),
            grant_type: "client-credentials".into(),
            redirect_uris: "ftp://x".into(),
            scopes: vec!["nope".into()],
            may_introspect: true,
            may_use_ssf: true,
            pkce_optional: true,
            token_format: "JWT".into(),
            tls_client_auth: "san_dns:app.example".into(),
            dpop_required: false,
        };
        let refusals = application(&settings, &[], &draft).unwrap_err();
        for field in [
            "grant_type",
            "redirect_uris",
            "scope",
            "may_introspect",
            "may_use_ssf",
            "pkce_optional",
            "token_format",
            "tls_client_auth",
        ] {
            assert!(refusals.get(field).is_some(), "{field}");
        }
        let ok = ApplicationDraft {
            client_type: "confidential".into(),
            grant_type: "authorization-code".into(),
            redirect_uris: "https://a.example/cb http://127.0.0.1:8080/cb".into(),
            scopes: vec![],
            token_format: "jwt".into(),
            ..draft
        };
        let input = application(&settings, &[], &ok).unwrap();
        assert_eq!(
            ok.tls_client_auth(),
            Some(TlsClientAuth::SanDns("app.example".into()))
        );
        let bad = ApplicationDraft {
            tls_client_auth: "cn:app".into(),
            ..ok.clone()
        };
        assert!(
            application(&settings, &[], &bad)
                .unwrap_err()
                .get("tls_client_auth")
                .is_some()
        );
        assert!(input.may_introspect);
        assert!(input.may_use_ssf);
        assert!(!input.pkce_required);
        assert_eq!(input.token_format, Some(AccessTokenFormat::Jwt));
        let default = application(
            &settings,
            &[],
            &ApplicationDraft {
                token_format: String::new(),
                pkce_optional: false,
                ..ok
            },
        )
        .unwrap();
        assert!(default.pkce_required);
        assert_eq!(default.token_format, None);
    }

    #[test]
    fn redirect_uris_are_https_or_loopback_http_without_fragments() {
        for good in [
            "https://a.example/cb?x=1",
            "https://a.example:8443/cb",
            "http://127.0.0.1:8080/cb",
            "http://[::1]:9/cb",
            "http://localhost/cb",
            "http://127.0.0.2/cb",
        ] {
            assert!(redirect_uri(good), "{good}");
        }
        for bad in [
            "https://",
            "https://a/#x",
            "http://a.example/cb",
            "http://192.168.1.2/cb",
            "ftp://a.example/cb",
            "/cb",
            "https://user@a.example/cb",
            "https://a.example/c b",
            "http://localhost.evil.example/cb",
        ] {
            assert!(!redirect_uri(bad), "{bad}");
        }
    }
}

/// Most scopes one resource offers.
const MAX_RESOURCE_SCOPES: usize = 32;

/// An API resource as entered.
#[derive(Debug, Clone, Default)]
pub struct ResourceDraft {
    pub identifier: String,
    pub name: String,
    /// Space-separated.
    pub scopes: String,
    /// `opaque`, `jwt`, or empty: the application's, then the server's.
    pub token_format: String,
    /// Seconds, or empty: the server's `access_token_lifetime`.
    pub access_token_lifetime: String,
}

/// Checks a resource into a [`crate::store::ResourceInput`]; on refusal, the messages per field
/// (`identifier`, `name`, `scopes`, `token_format`, `access_token_lifetime`).
pub fn resource(
    settings: &Settings,
    draft: &ResourceDraft,
) -> Result<crate::store::ResourceInput, Refusals> {
    let mut refusals = Refusals::default();
    if let Some(problem) = crate::domain::resource_identifier_problem(&draft.identifier) {
        refusals.add("identifier", format!("The identifier {problem}."));
    }
    refusals.check("name", length(&draft.name, "The name", true, 255));
    let scopes = crate::protocol::scope::dedup(&draft.scopes);
    let scope_token = |s: &str| {
        s.len() <= 64
            && s.bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
    };
    if scopes.is_empty() {
        refusals.add("scopes", "Give at least one scope (space-separated).");
    } else if scopes.len() > MAX_RESOURCE_SCOPES {
        refusals.add(
            "scopes",
            format!("At most {MAX_RESOURCE_SCOPES} scopes per resource."),
        );
    } else if let Some(bad) = scopes.iter().find(|s| !scope_token(s)) {
        refusals.add(
            "scopes",
            format!("{bad:?} is not a scope name (printable ASCII without \" or \\, at most 64)."),
        );
    } else if let Some(reserved) = scopes.iter().find(|s| {
        crate::domain::needs_permission(s) || crate::protocol::oidc::scope_description(s).is_some()
    }) {
        refusals.add(
            "scopes",
            format!("{reserved:?} is the server's own scope, not an API's."),
        );
    }
    let token_format = match draft.token_format.as_str() {
        "" => None,
        name => {
            let format = AccessTokenFormat::parse(name);
            if format.is_none() {
                refusals.add("token_format", "Choose opaque or jwt (or leave it empty).");
            }
            format
        }
    };
    let lifetime = match draft.access_token_lifetime.as_str() {
        "" => None,
        text => match text.parse::<i64>() {
            Ok(s) if (1..=settings.access_token_lifetime).contains(&s) => Some(s),
            _ => {
                refusals.add(
                    "access_token_lifetime",
                    format!(
                        "Give seconds from 1 to the server's access_token_lifetime ({}).",
                        settings.access_token_lifetime
                    ),
                );
                None
            }
        },
    };
    if !refusals.is_empty() {
        return Err(refusals);
    }
    Ok(crate::store::ResourceInput {
        identifier: draft.identifier.clone(),
        name: draft.name.clone(),
        scopes,
        token_format,
        access_token_lifetime: lifetime,
    })
}
