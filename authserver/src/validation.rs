//! The one set of rules for what an operator may enter — users, passwords, groups, client
//! secrets and applications — used by the views and the command line alike, with the same words.

use crate::config::Settings;
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
/// order found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals(Vec<(&'static str, String)>);

impl Refusals {
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

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(f, m)| (*f, m.as_str()))
    }
}

/// A length in characters and no control characters; `what` starts the message.
pub fn length(value: &str, what: &str, required: bool, max: usize) -> Result<(), String> {
    if required && value.is_empty() {
        Err("This field is required.".into())
    } else if value.chars().count() > max {
        Err(format!("{what} must be at most {max} characters."))
    } else if value.chars().any(char::is_control) {
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

/// An absolute http(s) URL with a host, no fragment, no control characters.
pub fn redirect_uri(uri: &str) -> bool {
    let rest = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"));
    let host = rest
        .and_then(|r| r.split(['/', '?']).next())
        .unwrap_or_default();
    !host.is_empty()
        && !uri.contains('#')
        && uri.len() <= 2000
        && !uri.chars().any(|c| c.is_control())
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
}

/// Checks an application into an [`ApplicationInput`]; on refusal, the messages per form field
/// (`name`, `client_type`, `grant_type`, `redirect_uris`, `scope`).
pub fn application(
    settings: &Settings,
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
    if let Some(bad) = uris.iter().find(|uri| !redirect_uri(uri)) {
        refusals.add(
            "redirect_uris",
            format!("\"{bad}\" is not an absolute http(s) URL without a fragment."),
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
    if let Some(unknown) = draft
        .scopes
        .iter()
        .find(|s| !settings.scopes.contains_key(*s))
    {
        refusals.add("scope", format!("\"{unknown}\" is not a declared scope."));
    }
    match (client_type, grant_type) {
        (Some(client_type), Some(grant_type)) if refusals.is_empty() => Ok(ApplicationInput {
            name: draft.name.clone(),
            client_type,
            grant_type,
            redirect_uris: uris.join(" "),
            allowed_scopes: draft.scopes.clone(),
            may_introspect: draft.may_introspect,
        }),
        _ => Err(refusals),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            may_introspect: false,
        };
        let refusals = application(&settings, &draft).unwrap_err();
        for field in ["grant_type", "redirect_uris", "scope"] {
            assert!(refusals.get(field).is_some(), "{field}");
        }
        assert!(!redirect_uri("https://"));
        assert!(!redirect_uri("https://a/#x"));
        assert!(redirect_uri("https://a.example/cb?x=1"));
    }
}
