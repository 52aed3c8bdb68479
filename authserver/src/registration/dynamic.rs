//! Dynamic client registration (RFC 7591 §2): client metadata as a client sends it, checked
//! against the operator's policy into a [`Registration`], and the metadata as registered. Pure:
//! no HTTP, no storage. Every refusal is an RFC 7591 §3.2.2 error (`invalid_redirect_uri`,
//! `invalid_client_metadata`), never a server error.

use super::Registration;
use crate::config::{DynamicRegistration, Settings};
use crate::jwt::Alg;
use crate::store::{ApplicationInput, ClientType, GrantType, OidcClient};
use crate::validation;
use serde_json::{Map, Value, json};

/// Most bytes of a registration request's body.
pub const MAX_BODY: usize = 16 * 1024;
/// Most redirect URIs (and post-logout redirect URIs) of a dynamically registered client.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Most characters of a name, a software id or version, a contact.
const MAX_TEXT: usize = 255;
/// Most characters of a URL (redirect URIs, `client_uri`, …).
const MAX_URL: usize = 2000;
/// Most entries of `contacts`, `grant_types`, `response_types`.
const MAX_LIST: usize = 10;
/// The name of a client that gave none.
const UNNAMED: &str = "Dynamically registered client";

/// An RFC 7591 §3.2.2 error: its code and a description that never repeats a submitted value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataError {
    /// `invalid_redirect_uri` or `invalid_client_metadata`.
    pub code: &'static str,
    pub description: String,
}

fn metadata_error(description: impl Into<String>) -> MetadataError {
    MetadataError {
        code: "invalid_client_metadata",
        description: description.into(),
    }
}

fn redirect_error(description: impl Into<String>) -> MetadataError {
    MetadataError {
        code: "invalid_redirect_uri",
        description: description.into(),
    }
}

/// A checked registration request: what to store, and the metadata as registered (the
/// response's fields beside the credentials, and what RFC 7592 reads back).
#[derive(Debug, Clone)]
pub struct Checked {
    pub registration: Registration,
    pub metadata: Map<String, Value>,
}

/// The JSON text of a request's body as a metadata object, or the error of a body that is not
/// one (too large, not JSON, not an object).
pub fn parse_body(body: &[u8]) -> Result<Map<String, Value>, MetadataError> {
    if body.len() > MAX_BODY {
        return Err(metadata_error(format!(
            "The client metadata is larger than {MAX_BODY} bytes."
        )));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(metadata_error("The client metadata must be a JSON object.")),
        Err(_) => Err(metadata_error("The body is not valid JSON.")),
    }
}

/// A string field, if present: an error when it is not a string or is too long.
fn text<'a>(
    map: &'a Map<String, Value>,
    name: &str,
    max: usize,
) -> Result<Option<&'a str>, MetadataError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => {
            validation::length(value, name, false, max).map_err(|_| {
                metadata_error(format!(
                    "{name} must be text of at most {max} characters, without control characters."
                ))
            })?;
            Ok(Some(value))
        }
        Some(_) => Err(metadata_error(format!("{name} must be a string."))),
    }
}

/// A list-of-strings field, if present: an error when it is not one or has too many entries.
fn list(
    map: &Map<String, Value>,
    name: &str,
    max_entries: usize,
    max_chars: usize,
) -> Result<Option<Vec<String>>, MetadataError> {
    let items = match map.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(metadata_error(format!(
                "{name} must be an array of strings."
            )));
        }
    };
    if items.len() > max_entries {
        return Err(metadata_error(format!(
            "{name} may have at most {max_entries} entries."
        )));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::String(item) = item else {
            return Err(metadata_error(format!(
                "{name} must be an array of strings."
            )));
        };
        if item.chars().count() > max_chars {
            return Err(metadata_error(format!(
                "An entry of {name} is longer than {max_chars} characters."
            )));
        }
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    Ok(Some(out))
}

/// Redirect URIs by the views' rules (absolute https, or http to a loopback host; no fragment,
/// no user information), at most [`MAX_REDIRECT_URIS`].
fn redirect_uris(
    map: &Map<String, Value>,
    name: &str,
) -> Result<Option<Vec<String>>, MetadataError> {
    let uris = match map.get(name) {
        Some(Value::Array(items)) if items.len() > MAX_REDIRECT_URIS => {
            return Err(redirect_error(format!(
                "At most {MAX_REDIRECT_URIS} {name}."
            )));
        }
        Some(Value::Array(items)) if items.iter().any(|i| !i.is_string()) => {
            return Err(redirect_error(format!(
                "{name} must be an array of strings."
            )));
        }
        Some(Value::Null) | None => return Ok(None),
        Some(Value::Array(_)) => list(map, name, MAX_REDIRECT_URIS, MAX_URL)
            .map_err(|e| redirect_error(e.description))?
            .unwrap_or_default(),
        Some(_) => {
            return Err(redirect_error(format!(
                "{name} must be an array of strings."
            )));
        }
    };
    for uri in &uris {
        if let Some(problem) = validation::redirect_uri_problem(uri) {
            return Err(redirect_error(format!(
                "A redirect URI {problem}: redirect URIs are absolute https URLs (http only to 127.0.0.1, [::1] or localhost), without a fragment."
            )));
        }
    }
    Ok(Some(uris))
}

/// An informational URL (`client_uri`, `logo_uri`, `tos_uri`, `policy_uri`): https only.
fn info_url<'a>(map: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, MetadataError> {
    let Some(url) = text(map, name, MAX_URL)? else {
        return Ok(None);
    };
    let host = url.strip_prefix("https://").unwrap_or_default();
    if host.is_empty() || host.starts_with('/') || url.chars().any(char::is_whitespace) {
        return Err(metadata_error(format!("{name} must be an https URL.")));
    }
    Ok(Some(url))
}

/// The grant type of the application: `authorization_code` (with or without `refresh_token`) or
/// `client_credentials`; the password grant is never registered dynamically.
fn grant_type(grant_types: &[String]) -> Result<GrantType, MetadataError> {
    let mut code = false;
    let mut client_credentials = false;
    for grant in grant_types {
        match grant.as_str() {
            "authorization_code" => code = true,
            "refresh_token" => {}
            "client_credentials" => client_credentials = true,
            _ => {
                return Err(metadata_error(
                    "grant_types may hold authorization_code, refresh_token and client_credentials only.",
                ));
            }
        }
    }
    match (code, client_credentials) {
        (true, false) => Ok(GrantType::AuthorizationCode),
        (false, true) => Ok(GrantType::ClientCredentials),
        (true, true) => Err(metadata_error(
            "A client registers for authorization_code or client_credentials, not both.",
        )),
        (false, false) => Err(metadata_error(
            "grant_types must hold authorization_code or client_credentials.",
        )),
    }
}

/// Checks `map` (a registration request, or an RFC 7592 update) under `settings`' policy.
/// `policy` is the policy the request came in under: `open` registers public clients only.
/// A client may register for `dynamic_registration_scopes` and for `resource_scopes`, the
/// scopes of the registered APIs (RFC 8707: an MCP client registers for the scope a sidecar's
/// challenge named).
pub fn check(
    settings: &Settings,
    resource_scopes: &[String],
    policy: DynamicRegistration,
    map: &Map<String, Value>,
) -> Result<Checked, MetadataError> {
    let grant_types = list(map, "grant_types", MAX_LIST, MAX_TEXT)?
        .unwrap_or_else(|| vec!["authorization_code".to_owned()]);
    let grant = grant_type(&grant_types)?;
    let response_types = list(map, "response_types", MAX_LIST, MAX_TEXT)?;
    let response_types = match (grant, response_types) {
        (GrantType::AuthorizationCode, None) => vec!["code".to_owned()],
        (GrantType::AuthorizationCode, Some(types)) if types == ["code"] => types,
        (GrantType::ClientCredentials, None) => Vec::new(),
        (GrantType::ClientCredentials, Some(types)) if types.is_empty() => types,
        _ => {
            return Err(metadata_error(
                "response_types may hold only code, and only with authorization_code.",
            ));
        }
    };
    let default_method = match policy {
        DynamicRegistration::Open => "none",
        _ => "client_secret_basic",
    };
    let method = text(map, "token_endpoint_auth_method", MAX_TEXT)?.unwrap_or(default_method);
    let client_type = match method {
        "none" => ClientType::Public,
        "client_secret_basic" | "client_secret_post" => ClientType::Confidential,
        _ => {
            return Err(metadata_error(
                "token_endpoint_auth_method must be client_secret_basic, client_secret_post or none.",
            ));
        }
    };
    if policy == DynamicRegistration::Open && client_type != ClientType::Public {
        return Err(metadata_error(
            "Without an initial access token only public clients register: token_endpoint_auth_method must be none.",
        ));
    }
    if client_type == ClientType::Public && grant == GrantType::ClientCredentials {
        return Err(metadata_error(
            "client_credentials needs a client secret: token_endpoint_auth_method none cannot use it.",
        ));
    }
    let uris = redirect_uris(map, "redirect_uris")?.unwrap_or_default();
    match grant {
        GrantType::AuthorizationCode if uris.is_empty() => {
            return Err(redirect_error(
                "authorization_code needs at least one redirect URI.",
            ));
        }
        GrantType::ClientCredentials if !uris.is_empty() => {
            return Err(redirect_error("client_credentials has no redirect URIs."));
        }
        _ => {}
    }
    let allowed = &settings.dynamic_registration_scopes;
    let scopes: Vec<String> = match text(map, "scope", MAX_URL)? {
        Some(scope) => crate::protocol::scope::dedup(scope),
        None => allowed.clone(),
    };
    if scopes.is_empty() {
        return Err(metadata_error("scope holds no scope."));
    }
    if scopes
        .iter()
        .any(|s| !allowed.contains(s) && !resource_scopes.contains(s))
    {
        return Err(metadata_error(
            "scope holds a scope this server does not let a client register for.",
        ));
    }
    let name = text(map, "client_name", MAX_TEXT)?
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(UNNAMED);
    let id_token_alg = match text(map, "id_token_signed_response_alg", MAX_TEXT)? {
        None => crate::store::DEFAULT_ID_TOKEN_ALG,
        Some(alg) => Alg::parse(alg).map(Alg::as_str).ok_or_else(|| {
            metadata_error("id_token_signed_response_alg must be RS256 or EdDSA.")
        })?,
    };
    let post_logout = redirect_uris(map, "post_logout_redirect_uris")?.unwrap_or_default();
    let mut metadata = Map::new();
    metadata.insert("client_name".into(), name.into());
    metadata.insert("redirect_uris".into(), json!(uris));
    metadata.insert("grant_types".into(), json!(grant_types));
    metadata.insert("response_types".into(), json!(response_types));
    metadata.insert("token_endpoint_auth_method".into(), method.into());
    metadata.insert("scope".into(), scopes.join(" ").into());
    metadata.insert("id_token_signed_response_alg".into(), id_token_alg.into());
    if !post_logout.is_empty() {
        metadata.insert("post_logout_redirect_uris".into(), json!(post_logout));
    }
    for name in ["client_uri", "logo_uri", "tos_uri", "policy_uri"] {
        if let Some(url) = info_url(map, name)? {
            metadata.insert(name.into(), url.into());
        }
    }
    for name in ["software_id", "software_version"] {
        if let Some(value) = text(map, name, MAX_TEXT)? {
            metadata.insert(name.into(), value.into());
        }
    }
    if let Some(contacts) = list(map, "contacts", MAX_LIST, MAX_TEXT)? {
        metadata.insert("contacts".into(), json!(contacts));
    }
    // RFC 9449 §5.2: a client that always uses DPoP may ask for every token request without
    // a proof to be refused.
    let dpop_required = match map.get("dpop_bound_access_tokens") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => {
            return Err(metadata_error(
                "dpop_bound_access_tokens must be true or false.",
            ));
        }
    };
    if dpop_required {
        metadata.insert("dpop_bound_access_tokens".into(), true.into());
    }
    let input = ApplicationInput {
        name: name.to_owned(),
        client_type,
        grant_type: grant,
        redirect_uris: uris.join(" "),
        allowed_scopes: scopes,
        may_introspect: false,
        may_use_ssf: false,
        // PKCE always: a client that registered itself never opts out.
        pkce_required: true,
        token_format: None,
    };
    Ok(Checked {
        registration: Registration {
            input,
            tls_client_auth: None,
            dpop_required,
            oidc: OidcClient {
                id_token_alg: id_token_alg.to_owned(),
                post_logout_redirect_uris: post_logout.join(" "),
                // An operator's setting (the views), never a client's own metadata.
                require_mfa: false,
            },
        },
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::for_tests("sqlite::memory:")
    }

    fn checked(policy: DynamicRegistration, body: Value) -> Result<Checked, MetadataError> {
        let Value::Object(map) = body else { panic!() };
        check(&settings(), &["orders:read".to_owned()], policy, &map)
    }

    #[test]
    fn a_client_may_register_for_a_registered_apis_scope() {
        let ok = checked(
            DynamicRegistration::Open,
            json!({"redirect_uris": ["http://127.0.0.1:9/cb"], "scope": "orders:read"}),
        )
        .unwrap();
        assert_eq!(ok.registration.input.allowed_scopes, ["orders:read"]);
        let refused = checked(
            DynamicRegistration::Open,
            json!({"redirect_uris": ["http://127.0.0.1:9/cb"], "scope": "billing:read"}),
        );
        assert_eq!(refused.err().unwrap().code, "invalid_client_metadata");
    }

    #[test]
    fn a_public_code_client_by_default_under_the_open_policy() {
        let ok = checked(
            DynamicRegistration::Open,
            json!({"redirect_uris": ["http://127.0.0.1:9/cb"], "client_name": "cli"}),
        )
        .unwrap();
        assert_eq!(ok.registration.input.client_type, ClientType::Public);
        assert_eq!(
            ok.registration.input.grant_type,
            GrantType::AuthorizationCode
        );
        assert!(ok.registration.input.pkce_required);
        assert_eq!(ok.metadata["token_endpoint_auth_method"], "none");
        assert_eq!(ok.metadata["response_types"], json!(["code"]));
        assert!(!ok.registration.input.allowed_scopes.is_empty());
    }

    #[test]
    fn hostile_metadata_gets_its_rfc_7591_code() {
        let policy = DynamicRegistration::InitialAccessToken;
        for (body, code) in [
            (
                json!({"redirect_uris": ["javascript:alert(1)"]}),
                "invalid_redirect_uri",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb#x"]}),
                "invalid_redirect_uri",
            ),
            (
                json!({"redirect_uris": "https://a.example/cb"}),
                "invalid_redirect_uri",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "grant_types": ["implicit"]}),
                "invalid_client_metadata",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "scope": "introspection"}),
                "invalid_client_metadata",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "scope": 7}),
                "invalid_client_metadata",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt"}),
                "invalid_client_metadata",
            ),
        ] {
            let error = checked(policy, body.clone()).unwrap_err();
            assert_eq!(error.code, code, "{body}");
        }
    }
}
