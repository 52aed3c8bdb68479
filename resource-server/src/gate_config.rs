//! The gate's part of a binary's YAML, the same in the proxy and the example API:
//! `token_source`, `introspection`, `jwt`, `routes`, and this API's identity (`resource`,
//! `audience`, `authorization_servers`, `resource_name`) ([`GateConfig`]), resolved in one place,
//! with the binary's environment variables, into [`GateSettings`]: plain data, from which
//! [`crate::Gate::build`] makes the gate.
//!
//! The variables, for a binary whose prefix is `PROXY` or `EXAMPLE_API`:
//! `<PREFIX>_TOKEN_SOURCE`, `<PREFIX>_INTROSPECTION_URL`, `<PREFIX>_AUTH_TOKEN` (replaces the
//! client credentials of the file), `<PREFIX>_CLIENT_ID`, `<PREFIX>_CLIENT_SECRET`,
//! `<PREFIX>_CLIENT_SECRET_FILE`, `<PREFIX>_RESOURCE`, `<PREFIX>_AUTHORIZATION_SERVERS`
//! (comma-separated). Empty values are ignored. Each key is read by the one precedence
//! ([`GateEnv::pick`]: the stack's override, the variable, the file), a secret or its file by
//! [`secret_or_file`]. The `revocation:` section's variables are in [`crate::ssf::config`].
//!
//! One audience for every token source: `audience` (one identifier or a list; default: the
//! `resource`). `introspection.audience` and `jwt.audience` are its old spellings, still read
//! with a warning; a file whose spellings disagree is refused.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::audience::{Audience, AudienceSetting, RawAudience};
use crate::checker::CacheSettings;
use crate::config_error::ConfigError;
use crate::forwarded::ProxySecret;
use crate::introspection::{ClientAuth, IntrospectionSettings};
use crate::jwt::JwtSettings;
use crate::jwt::raw::RawJwt;
use crate::layers::{Layer, Layers, Picked, Secret, secret_or_file};
use crate::protected_resource::{ResourceSettings, check_issuer, check_resource};
use crate::rules::{RouteSpec, Rules};
use crate::settings::{RawIntrospection, SettingError};
use crate::ssf::{RawRevocation, RevocationSettings};
use crate::yaml::OneOrMany;

/// How a deployment establishes who is calling (`token_source`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenSource {
    /// RFC 7662 introspection (cached): revocation seen within the cache's `max_ttl`.
    #[default]
    Introspection,
    /// Local JWT validation only: no call per token; revocation not seen before `exp`.
    Jwt,
    /// JWT-shaped tokens validated locally, any other token introspected.
    JwtOrIntrospection,
    /// The sidecar proxy checked the token; its `X-Auth-*` headers are believed (the example API
    /// behind the proxy; never the proxy itself).
    BehindProxy,
    /// **Unsafe, benchmarks only**: nothing is checked (the example API only).
    Unchecked,
}

impl TokenSource {
    pub const NAMES: &'static str =
        "introspection, jwt, jwt_or_introspection, behind_proxy or none";

    /// The name written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::Introspection => "introspection",
            TokenSource::Jwt => "jwt",
            TokenSource::JwtOrIntrospection => "jwt_or_introspection",
            TokenSource::BehindProxy => "behind_proxy",
            TokenSource::Unchecked => "none",
        }
    }

    /// The old spelling of the example API's `mode` setting this name is, if any: accepted,
    /// with a deprecation warning.
    fn alias(name: &str) -> Option<TokenSource> {
        match name {
            "introspect" => Some(TokenSource::Introspection),
            "jwt-or-introspect" => Some(TokenSource::JwtOrIntrospection),
            "behind-proxy" => Some(TokenSource::BehindProxy),
            _ => None,
        }
    }

    /// Whether tokens are validated locally (a `jwt:` section is needed).
    pub fn uses_jwt(self) -> bool {
        matches!(self, TokenSource::Jwt | TokenSource::JwtOrIntrospection)
    }

    /// Whether some tokens are introspected (an `introspection:` section is needed).
    pub fn uses_introspection(self) -> bool {
        matches!(
            self,
            TokenSource::Introspection | TokenSource::JwtOrIntrospection
        )
    }

    /// Whether the bearer token itself is checked (so the process may listen on any address).
    pub fn checks_tokens(self) -> bool {
        self.uses_jwt() || self.uses_introspection()
    }
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TokenSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let all = [
            TokenSource::Introspection,
            TokenSource::Jwt,
            TokenSource::JwtOrIntrospection,
            TokenSource::BehindProxy,
            TokenSource::Unchecked,
        ];
        if let Some(source) = all.into_iter().find(|k| k.as_str() == s) {
            return Ok(source);
        }
        if let Some(source) = TokenSource::alias(s) {
            tracing::warn!(
                "token source {s:?} is the old spelling of {:?}: it still works, but write the \
                 new one",
                source.as_str()
            );
            return Ok(source);
        }
        Err(format!("expected {}", TokenSource::NAMES))
    }
}

/// The gate's keys of a binary's YAML file as written. Each binary's file declares these four
/// keys beside its own (serde cannot flatten them and still refuse unknown keys) and hands them
/// over in this struct.
#[derive(Debug, Default)]
pub struct GateConfig {
    pub token_source: Option<String>,
    pub introspection: Option<RawIntrospection>,
    pub jwt: Option<RawJwt>,
    pub routes: Vec<RouteSpec>,
    /// The revocation stream (see [`crate::ssf`]).
    pub revocation: Option<RawRevocation>,
    /// This API's resource identifier (RFC 8707, RFC 9728): an absolute `https` URI (`http` on
    /// loopback). Default audience; with it, the metadata is served and named in challenges.
    pub resource: Option<String>,
    /// The audiences a token must name one of (default: `[resource]`; none: not checked).
    pub audience: Option<RawAudience>,
    /// The metadata's `authorization_servers` (default: `jwt.issuer`, `introspection.issuer`).
    pub authorization_servers: Option<OneOrMany>,
    /// The metadata's `resource_name`.
    pub resource_name: Option<String>,
}

/// The gate's layers above the file: the binary's prefix and the environment lookup (the
/// process environment, or a map in tests), and the overrides of the embedding process.
pub struct GateEnv<'a> {
    pub prefix: &'a str,
    pub layers: &'a Layers<'a>,
}

/// Each of the gate's keys that has an environment variable, and the variable after the prefix.
/// Keys not listed (`audience`, `revocation.token_url`...) come from the file or the stack.
const GATE_VARS: [(&str, &str); 14] = [
    ("token_source", "TOKEN_SOURCE"),
    ("resource", "RESOURCE"),
    ("authorization_servers", "AUTHORIZATION_SERVERS"),
    ("introspection.url", "INTROSPECTION_URL"),
    ("introspection.auth_token", "AUTH_TOKEN"),
    ("introspection.client_id", "CLIENT_ID"),
    ("introspection.client_secret", "CLIENT_SECRET"),
    ("introspection.client_secret_file", "CLIENT_SECRET_FILE"),
    ("revocation.enabled", "REVOCATION"),
    ("revocation.configuration_url", "REVOCATION_URL"),
    ("revocation.replica_urls", "REVOCATION_REPLICA_URLS"),
    ("revocation.client_id", "REVOCATION_CLIENT_ID"),
    ("revocation.client_secret", "REVOCATION_CLIENT_SECRET"),
    (
        "revocation.client_secret_file",
        "REVOCATION_CLIENT_SECRET_FILE",
    ),
];

impl GateEnv<'_> {
    /// The file's `key` by the one precedence ([`Layers::pick`]): the stack's override, else
    /// the variable `<PREFIX>_<VAR>` when the key has one (set and not empty), else
    /// `from_file`; with its origin and layer.
    pub fn pick(&self, key: &str, from_file: Option<String>) -> Picked {
        let var = GATE_VARS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, name)| format!("{}_{name}", self.prefix));
        self.layers.pick(key, var.as_deref(), from_file)
    }
}

/// A value of the file that is there and not empty.
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

/// A bad value, named by where it came from.
fn bad(picked: &Picked, value: impl fmt::Display, problem: impl Into<String>) -> ConfigError {
    ConfigError::at(picked.origin.clone(), value, problem)
}

/// A bad gate value: named by its origin when it came from the environment or an override, else
/// by the file's key.
fn invalid(
    file: &str,
    field: &str,
    env: Option<String>,
    value: impl Into<String>,
    problem: impl Into<String>,
) -> ConfigError {
    let error = SettingError {
        field: field.to_owned(),
        value: value.into(),
        problem: problem.into(),
    };
    ConfigError::setting(file, error, env.as_deref())
}

/// The introspection client's settings and its cache's, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntrospectionConfig {
    pub settings: IntrospectionSettings,
    pub cache: CacheSettings,
}

/// The gate, validated and resolved, before anything is built (no I/O).
#[derive(Clone, Debug)]
pub struct GateSettings {
    pub token_source: TokenSource,
    /// `Some` exactly when the token source introspects.
    pub introspection: Option<IntrospectionConfig>,
    /// `Some` whenever the file has a `jwt:` section (checked even when unused, so that a switch
    /// of token source finds no surprise).
    pub jwt: Option<JwtSettings>,
    /// `introspection.leeway` (default 5 s): the checker's, and in behind-proxy mode the one
    /// applied to `X-Auth-Expires`.
    pub leeway: Duration,
    /// In behind-proxy mode, the secret by which the proxy proves itself (required to build the
    /// gate). Each binary reads it its own way.
    pub proxy_secret: Option<ProxySecret>,
    pub rules: Rules,
    /// The revocation stream receiver's settings, when tokens are checked and it is configured.
    pub revocation: Option<RevocationSettings>,
    /// The audiences every checked token must name one of; `None`: not checked.
    pub audience: Option<Audience>,
    /// The protected resource metadata's settings, when a `resource` is configured.
    pub resource: Option<ResourceSettings>,
}

impl GateConfig {
    /// Validates the section and resolves it with the environment; `file` names it in messages,
    /// `default_source` is the binary's token source when neither file nor environment give one.
    pub fn resolve(
        mut self,
        file: &str,
        default_source: TokenSource,
        env: &GateEnv<'_>,
    ) -> Result<GateSettings, ConfigError> {
        // An `audience` the stack decides (no variable gives one).
        if let Some((_, audience)) = env.layers.given("audience", None) {
            self.audience = Some(RawAudience::One(audience));
        }
        let setting = |e: SettingError| ConfigError::setting(file, e, None);
        let source = env.pick("token_source", self.token_source.clone());
        let token_source = match &source.value {
            Some(value) => value.parse().map_err(|m: String| bad(&source, value, m))?,
            None => default_source,
        };
        let jwt = self
            .jwt
            .as_ref()
            .map(|raw| raw.settings())
            .transpose()
            .map_err(setting)?;
        if token_source.uses_jwt() && jwt.is_none() {
            return Err(invalid(
                file,
                "jwt",
                None,
                "(missing)",
                format!(
                    "token_source {token_source} needs the jwt section (jwks_url, issuer, audience)"
                ),
            ));
        }
        let resource = resource(&self, file, env)?;
        let audience = audience(&self, file, token_source, resource.as_ref())?;
        let leeway = match &self.introspection {
            Some(raw) => raw.policy().map_err(setting)?.leeway,
            None => crate::AnswerPolicy::DEFAULT_LEEWAY,
        };
        let introspection = match (token_source.uses_introspection(), &self.introspection) {
            (false, _) => None,
            (true, Some(raw)) => Some(introspection(raw, file, env)?),
            (true, None) => {
                return Err(invalid(
                    file,
                    "introspection",
                    None,
                    "(missing)",
                    format!(
                        "required with token_source {token_source} (only token_source jwt does \
                         without)"
                    ),
                ));
            }
        };
        // The revocation stream's credentials default to the introspection client's (its id and
        // its secret, text or file), even when an auth_token replaces them for introspection.
        let shared = || -> Result<Option<(String, Secret)>, ConfigError> {
            let Some(raw) = &self.introspection else {
                return Ok(None);
            };
            let Some(id) = env
                .pick("introspection.client_id", given(&raw.client_id))
                .value
            else {
                return Ok(None);
            };
            Ok(client_secret(raw, env)?.map(|secret| (id, secret)))
        };
        let revocation = if token_source.checks_tokens() {
            crate::ssf::config::resolve(
                self.revocation.take(),
                file,
                &|key, from_file| env.pick(key, from_file),
                &shared,
            )?
        } else {
            None
        };
        let rules = Rules::from_routes(self.routes, file)?;
        Ok(GateSettings {
            token_source,
            introspection,
            jwt,
            leeway,
            proxy_secret: None,
            rules,
            revocation,
            audience,
            resource,
        })
    }
}

/// `resource`, `authorization_servers` and `resource_name` with their environment variables:
/// `None` without a resource (then the other two must be left out).
fn resource(
    config: &GateConfig,
    file: &str,
    env: &GateEnv<'_>,
) -> Result<Option<ResourceSettings>, ConfigError> {
    let picked = env.pick("resource", config.resource.clone());
    // The file gives a list, a variable or an override a comma-separated one.
    let servers_from = env.pick("authorization_servers", None);
    let servers: Option<Vec<String>> = match &servers_from.value {
        Some(value) => Some(value.split(',').map(|s| s.trim().to_owned()).collect()),
        None => config.authorization_servers.as_ref().map(OneOrMany::to_vec),
    };
    let Some(resource) = picked.value.clone() else {
        let described = [
            ("authorization_servers", servers.is_some()),
            ("resource_name", config.resource_name.is_some()),
        ];
        if let Some((key, _)) = described.into_iter().find(|(_, given)| *given) {
            return Err(invalid(
                file,
                key,
                None,
                "(set)",
                "describes this API's resource: give resource too",
            ));
        }
        return Ok(None);
    };
    check_resource(&resource).map_err(|problem| bad(&picked, &resource, problem))?;
    let authorization_servers = match servers {
        Some(list) => {
            if list.is_empty() {
                return Err(bad(
                    &servers_from,
                    "[]",
                    "empty: leave the key out for the issuer of jwt or introspection",
                ));
            }
            if let Some(bad_server) = list.iter().find(|s| check_issuer(s).is_err()) {
                let problem = check_issuer(bad_server).unwrap_err();
                return Err(bad(&servers_from, bad_server, problem));
            }
            list
        }
        // The issuers the gate already checks tokens against, as written.
        None => {
            let mut issuers: Vec<String> = [
                config.jwt.as_ref().and_then(|j| j.issuer.clone()),
                config.introspection.as_ref().and_then(|i| i.issuer.clone()),
            ]
            .into_iter()
            .flatten()
            .filter(|i| !i.trim().is_empty())
            .collect();
            issuers.dedup();
            issuers
        }
    };
    let resource_name = match &config.resource_name {
        Some(name) if name.trim().is_empty() => {
            return Err(invalid(
                file,
                "resource_name",
                None,
                name,
                "empty (leave the key out)",
            ));
        }
        other => other.clone(),
    };
    Ok(Some(ResourceSettings {
        resource,
        authorization_servers,
        resource_name,
    }))
}

/// The one audience: `audience`, else its old spellings (`introspection.audience`,
/// `jwt.audience`, with a warning), else `[resource]`, else none. A spelling that disagrees
/// with another is refused, naming it; a token source that validates JWTs needs an audience
/// (or `audience: {disabled: true}`), as RFC 9068 §4 requires the check.
fn audience(
    config: &GateConfig,
    file: &str,
    token_source: TokenSource,
    resource: Option<&ResourceSettings>,
) -> Result<Option<Audience>, ConfigError> {
    let read = |key: &str, raw: &RawAudience| {
        raw.setting()
            .map_err(|problem| invalid(file, key, None, raw.written(), problem))
    };
    let given = config
        .audience
        .as_ref()
        .map(|raw| read("audience", raw))
        .transpose()?;
    let old_spellings = [
        (
            "introspection.audience",
            config
                .introspection
                .as_ref()
                .and_then(|i| i.audience.clone())
                .map(RawAudience::One),
        ),
        (
            "jwt.audience",
            config.jwt.as_ref().and_then(|j| j.audience.clone()),
        ),
    ];
    let mut chosen: Option<(&str, AudienceSetting)> = given.map(|g| ("audience", g));
    for (key, raw) in old_spellings {
        let Some(raw) = raw else { continue };
        let setting = read(key, &raw)?;
        match &chosen {
            Some((by, first)) if !first.same_as(&setting) => {
                return Err(invalid(
                    file,
                    key,
                    None,
                    raw.written(),
                    format!(
                        "the old spelling of audience, and {by} says {first}: the gate has one \
                         audience for every token source; keep only audience"
                    ),
                ));
            }
            Some(_) => {}
            None => chosen = Some((key, setting)),
        }
        tracing::warn!(
            "{file}: {key} is the old spelling of audience (one for every token source): it \
             still works, but write audience"
        );
    }
    match chosen {
        Some((_, setting)) => Ok(setting.into_audience()),
        None => match resource {
            Some(r) => Ok(Some(
                Audience::new(vec![r.resource.clone()]).expect("a checked resource"),
            )),
            None if token_source.uses_jwt() => Err(invalid(
                file,
                "audience",
                None,
                "(missing)",
                format!(
                    "token_source {token_source} needs this API's audience (or resource, which \
                     is then the audience; audience: {{disabled: true}} accepts any aud)"
                ),
            )),
            None => Ok(None),
        },
    }
}

/// The `introspection:` section with its environment variables: endpoint, credentials, then the
/// timeouts, cache and policy with the one set of defaults ([`RawIntrospection::resolve`]).
fn introspection(
    raw: &RawIntrospection,
    file: &str,
    env: &GateEnv<'_>,
) -> Result<IntrospectionConfig, ConfigError> {
    let picked = env.pick("introspection.url", raw.url.clone());
    let Some(url) = picked.value.clone() else {
        return Err(bad(
            &picked,
            "(missing)",
            "the introspection endpoint's URL is required",
        ));
    };
    let url_ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.contains(char::is_whitespace);
    if !url_ok {
        return Err(bad(&picked, url, "expected an http:// or https:// URL"));
    }
    let auth = credentials(raw, file, env)?;
    let (settings, cache) = raw
        .resolve(url, auth)
        .map_err(|e| ConfigError::setting(file, e, None))?;
    Ok(IntrospectionConfig { settings, cache })
}

/// The introspection client's secret, `client_secret` or `client_secret_file` (env
/// `<PREFIX>_CLIENT_SECRET`, `<PREFIX>_CLIENT_SECRET_FILE`), by the one rule of
/// [`secret_or_file`]: the higher layer wins, both in one layer are refused.
fn client_secret(raw: &RawIntrospection, env: &GateEnv<'_>) -> Result<Option<Secret>, ConfigError> {
    let (text, file) = client_secret_picks(raw, env);
    secret_or_file("the introspection client's secret", text, file)
}

fn client_secret_picks(raw: &RawIntrospection, env: &GateEnv<'_>) -> (Picked, Picked) {
    (
        env.pick("introspection.client_secret", given(&raw.client_secret)),
        env.pick(
            "introspection.client_secret_file",
            given(&raw.client_secret_file),
        ),
    )
}

/// How the gate authenticates to the introspection endpoint: `auth_token`, or `client_id` and
/// the client secret. The two kinds are layered as one value: the kind given by the higher
/// layer wins (`<PREFIX>_AUTH_TOKEN` replaces the file's client credentials, the stack's client
/// replaces a token of the file or the environment); both in the file are refused, and in the
/// environment the token wins (as documented since the variable exists).
fn credentials(
    raw: &RawIntrospection,
    file: &str,
    env: &GateEnv<'_>,
) -> Result<ClientAuth, ConfigError> {
    let token = env.pick("introspection.auth_token", given(&raw.auth_token));
    let id = env.pick("introspection.client_id", given(&raw.client_id));
    let (text, secret_file) = client_secret_picks(raw, env);
    let client_layer = id.layer.max(text.layer).max(secret_file.layer);
    if let Some(t) = &token.value {
        // `<PREFIX>_AUTH_TOKEN` is the environment's final word: it replaces client credentials
        // of the environment too.
        if token.layer > client_layer || (token.layer == Layer::Env && client_layer == Layer::Env) {
            return Ok(ClientAuth::Bearer(t.clone()));
        }
        if token.layer == client_layer {
            return Err(bad(
                &token,
                "(hidden)",
                "set either auth_token or client_id + client_secret, not both",
            ));
        }
    }
    let secret = secret_or_file("the introspection client's secret", text, secret_file)?;
    let prefix = env.prefix;
    match (id.value.clone(), secret) {
        (Some(client_id), Some(secret)) => Ok(ClientAuth::ClientSecret {
            client_id,
            client_secret: secret.text,
            secret_file: secret.path,
        }),
        (Some(client_id), None) => Err(invalid(
            file,
            "introspection.client_secret",
            None,
            "(missing)",
            format!(
                "client_id {client_id:?}{} needs client_secret (or env {prefix}_CLIENT_SECRET)",
                match id.layer {
                    Layer::File | Layer::Absent => String::new(),
                    _ => format!(" (from {})", id.origin),
                }
            ),
        )),
        (None, Some(_)) => Err(bad(
            &id,
            "(missing)",
            format!("client_secret needs client_id (or env {prefix}_CLIENT_ID)"),
        )),
        (None, None) => Err(invalid(
            file,
            "introspection",
            None,
            "(no credentials)",
            format!(
                "set auth_token (env {prefix}_AUTH_TOKEN) or client_id + client_secret (env \
                 {prefix}_CLIENT_SECRET)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::Overrides;
    use std::collections::HashMap;

    fn config(yaml: &str) -> GateConfig {
        #[derive(serde::Deserialize)]
        struct File {
            token_source: Option<String>,
            introspection: Option<RawIntrospection>,
            jwt: Option<RawJwt>,
            #[serde(default)]
            routes: Vec<RouteSpec>,
            revocation: Option<RawRevocation>,
            resource: Option<String>,
            audience: Option<RawAudience>,
            authorization_servers: Option<OneOrMany>,
            resource_name: Option<String>,
        }
        let f: File = serde_yaml_ng::from_str(yaml).unwrap();
        GateConfig {
            token_source: f.token_source,
            introspection: f.introspection,
            jwt: f.jwt,
            routes: f.routes,
            revocation: f.revocation,
            resource: f.resource,
            audience: f.audience,
            authorization_servers: f.authorization_servers,
            resource_name: f.resource_name,
        }
    }

    fn resolve(yaml: &str, vars: &[(&str, &str)]) -> Result<GateSettings, ConfigError> {
        resolve_layers(yaml, vars, &Overrides::default())
    }

    fn resolve_layers(
        yaml: &str,
        vars: &[(&str, &str)],
        overrides: &Overrides,
    ) -> Result<GateSettings, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = move |k: &str| vars.get(k).cloned();
        config(yaml).resolve(
            "g.yaml",
            TokenSource::Introspection,
            &GateEnv {
                prefix: "PROXY",
                layers: &crate::layers::Layers::new("g.yaml", &get, overrides),
            },
        )
    }

    #[test]
    fn the_stacks_overrides_win_over_the_environment_and_are_named_in_errors() {
        let yaml = [
            "introspection: {url: 'http://file/i', client_id: f, client_secret: s}",
            "routes: [{name: r, prefix: /}]",
            "revocation: {configuration_url: 'http://file/ssf'}",
        ]
        .join("\n");
        let yaml = yaml.as_str();
        let env = [
            ("PROXY_INTROSPECTION_URL", "http://env/i"),
            ("PROXY_CLIENT_ID", "from-env"),
        ];
        let overrides = Overrides::from([
            ("introspection.url", "http://stack/i"),
            ("introspection.client_id", "from-stack"),
            ("revocation.configuration_url", "http://stack/ssf"),
        ]);
        let gate = resolve_layers(yaml, &env, &overrides).unwrap();
        let settings = &gate.introspection.unwrap().settings;
        assert_eq!(settings.url, "http://stack/i");
        assert!(matches!(
            &settings.auth,
            ClientAuth::ClientSecret { client_id, .. } if client_id == "from-stack"
        ));
        let revocation = gate.revocation.unwrap();
        assert_eq!(revocation.configuration_url, "http://stack/ssf");
        assert_eq!(revocation.client_id, "from-stack");
        // Without the override the variable wins over the file.
        let gate = resolve_layers(yaml, &env, &Overrides::default()).unwrap();
        assert_eq!(gate.introspection.unwrap().settings.url, "http://env/i");
        let bad = Overrides::from([("introspection.url", "ftp://stack")]);
        let e = resolve_layers(yaml, &env, &bad).unwrap_err().to_string();
        assert_eq!(
            e,
            "key \"introspection.url\" set by the stack: \"ftp://stack\": expected an http:// or \
             https:// URL"
        );
    }

    /// The stack's introspection client (overrides) wins over an `auth_token` of the environment
    /// or the file: `PROXY_AUTH_TOKEN` used to replace it, and every request was denied.
    #[test]
    fn the_stacks_client_wins_over_an_auth_token_from_below() {
        let stack = Overrides::from([
            ("introspection.client_id", "stack-id"),
            ("introspection.client_secret", "stack-secret"),
        ]);
        let stack_client = ClientAuth::ClientSecret {
            client_id: "stack-id".into(),
            client_secret: "stack-secret".into(),
            secret_file: None,
        };
        let auth = |yaml: &str, vars: &[(&str, &str)], overrides: &Overrides| {
            resolve_layers(yaml, vars, overrides)
                .unwrap()
                .introspection
                .unwrap()
                .settings
                .auth
        };
        let from_env = [
            ("PROXY_AUTH_TOKEN", "env-token"),
            ("PROXY_CLIENT_SECRET", "env-secret"),
        ];
        assert_eq!(auth(URL, &from_env, &stack), stack_client);
        let token_file = "introspection: {url: 'http://a/i/', auth_token: file-token}";
        assert_eq!(auth(token_file, &[], &stack), stack_client);
        // Without the stack: the environment's token replaces the file's client, as documented.
        assert_eq!(
            auth(URL, &[("PROXY_AUTH_TOKEN", "t")], &Overrides::default()),
            ClientAuth::Bearer("t".into())
        );
        // A token and a client in one layer are refused.
        let e = resolve(
            "introspection: {url: 'http://a/i/', auth_token: t, client_id: c, client_secret: s}",
            &[],
        )
        .unwrap_err();
        assert_eq!(origin(e), "g.yaml: key \"introspection.auth_token\"");
    }

    /// Every key with a variable is read through the one precedence, by its key: the override,
    /// then `<PREFIX>_<VAR>`, then the file.
    #[test]
    fn each_gate_key_is_picked_by_the_one_precedence() {
        for (key, var) in GATE_VARS {
            let var = format!("PROXY_{var}");
            let env = |name: &str| (name == var).then(|| "from-env".to_owned());
            let none = Overrides::default();
            let layers = Layers::new("g.yaml", &env, &none);
            let gate = GateEnv {
                prefix: "PROXY",
                layers: &layers,
            };
            let p = gate.pick(key, Some("from-file".into()));
            assert_eq!(
                (p.origin, p.value.as_deref()),
                (format!("environment variable {var}"), Some("from-env"))
            );
            let stack = Overrides::from([(key, "from-stack")]);
            let layers = Layers::new("g.yaml", &env, &stack);
            let gate = GateEnv {
                prefix: "PROXY",
                layers: &layers,
            };
            assert_eq!(
                gate.pick(key, Some("from-file".into())).value.as_deref(),
                Some("from-stack")
            );
            let nothing = |_: &str| None;
            let layers = Layers::new("g.yaml", &nothing, &none);
            let gate = GateEnv {
                prefix: "PROXY",
                layers: &layers,
            };
            let p = gate.pick(key, Some("from-file".into()));
            assert_eq!(
                (p.origin, p.layer),
                (format!("g.yaml: key \"{key}\""), Layer::File)
            );
        }
    }

    /// Where the message says the bad value came from.
    fn origin(e: ConfigError) -> String {
        match e {
            ConfigError::Invalid { origin, .. } => origin,
            other => panic!("{other}"),
        }
    }

    const URL: &str = "introspection: {url: 'http://a/i/', client_id: c, client_secret: s}\n";

    #[test]
    fn one_enum_with_the_old_spellings_as_aliases() {
        for (name, source) in [
            ("introspection", TokenSource::Introspection),
            ("introspect", TokenSource::Introspection),
            ("jwt", TokenSource::Jwt),
            ("jwt_or_introspection", TokenSource::JwtOrIntrospection),
            ("jwt-or-introspect", TokenSource::JwtOrIntrospection),
            ("behind_proxy", TokenSource::BehindProxy),
            ("behind-proxy", TokenSource::BehindProxy),
            ("none", TokenSource::Unchecked),
        ] {
            assert_eq!(name.parse(), Ok(source), "{name}");
            assert_eq!(source.as_str().parse(), Ok(source));
        }
        assert!("JWT".parse::<TokenSource>().is_err());
    }

    #[test]
    fn credentials_and_endpoint_come_from_the_environment_first() {
        let s = resolve(
            URL,
            &[
                ("PROXY_INTROSPECTION_URL", "http://b/i/"),
                ("PROXY_CLIENT_SECRET", "env-secret"),
            ],
        )
        .unwrap();
        let i = s.introspection.unwrap().settings;
        assert_eq!(i.url, "http://b/i/");
        assert_eq!(
            i.auth,
            ClientAuth::ClientSecret {
                client_id: "c".into(),
                client_secret: "env-secret".into(),
                secret_file: None,
            }
        );
        let s = resolve(URL, &[("PROXY_AUTH_TOKEN", "t")]).unwrap();
        assert_eq!(
            s.introspection.unwrap().settings.auth,
            ClientAuth::Bearer("t".into())
        );
        let e = resolve(URL, &[("PROXY_INTROSPECTION_URL", "ftp://x")]).unwrap_err();
        assert_eq!(origin(e), "environment variable PROXY_INTROSPECTION_URL");
    }

    /// `client_secret_file`: read at start, trimmed, kept to read again; a missing, empty or
    /// oversized file, or a secret given twice, is refused naming the file.
    #[test]
    fn the_client_secret_may_come_from_a_file() {
        let dir = std::env::temp_dir().join(format!("gate-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        std::fs::write(&path, "  from-file\n").unwrap();
        let yaml = format!(
            "introspection: {{url: 'http://a/i/', client_id: c, client_secret_file: '{}'}}",
            path.display()
        );
        let auth = resolve(&yaml, &[])
            .unwrap()
            .introspection
            .unwrap()
            .settings
            .auth;
        assert_eq!(
            auth,
            ClientAuth::ClientSecret {
                client_id: "c".into(),
                client_secret: "from-file".into(),
                secret_file: Some(path.clone()),
            }
        );
        // PROXY_CLIENT_SECRET replaces the file, which is then not read again.
        let auth = resolve(&yaml, &[("PROXY_CLIENT_SECRET", "env")])
            .unwrap()
            .introspection
            .unwrap()
            .settings
            .auth;
        assert!(matches!(
            auth,
            ClientAuth::ClientSecret {
                secret_file: None,
                ..
            }
        ));
        let both = format!("{}, client_secret: s}}", yaml.trim_end_matches('}'));
        let e = resolve(&both, &[]).unwrap_err().to_string();
        assert_eq!(
            e,
            "g.yaml: key \"introspection.client_secret_file\": g.yaml: key \
             \"introspection.client_secret\" is set too: give the introspection client's secret \
             once, as text or as a file"
        );
        // A file named by the environment wins over the file's text (it was refused as both).
        let text = "introspection: {url: 'http://a/i/', client_id: c, client_secret: s}";
        let path_text = path.display().to_string();
        let auth = resolve(text, &[("PROXY_CLIENT_SECRET_FILE", &path_text)])
            .unwrap()
            .introspection
            .unwrap()
            .settings
            .auth;
        assert_eq!(
            auth,
            ClientAuth::ClientSecret {
                client_id: "c".into(),
                client_secret: "from-file".into(),
                secret_file: Some(path.clone()),
            }
        );
        for (content, problem) in [
            ("\n \n".to_owned(), "empty"),
            ("x".repeat(5000), "larger than"),
        ] {
            std::fs::write(&path, content).unwrap();
            let e = resolve(&yaml, &[]).unwrap_err().to_string();
            assert!(
                e.contains(problem) && e.contains(&*path.to_string_lossy()),
                "{e}"
            );
        }
        // The revocation stream sharing those credentials reads the same file again.
        std::fs::write(&path, "from-file").unwrap();
        let with_stream = format!("{yaml}\nrevocation: {{configuration_url: 'http://a/c'}}");
        let stream = resolve(&with_stream, &[]).unwrap().revocation.unwrap();
        assert_eq!(
            (stream.client_secret.as_str(), stream.client_secret_file),
            ("from-file", Some(path.clone()))
        );
        std::fs::remove_file(&path).unwrap();
        let e = resolve(&yaml, &[]).unwrap_err().to_string();
        assert!(
            e.contains("cannot read") && e.contains(&*path.to_string_lossy()),
            "{e}"
        );
        assert!(!e.contains("from-file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn each_source_requires_its_sections() {
        let key = |e| origin(e).trim_start_matches("g.yaml: key ").to_owned();
        assert_eq!(key(resolve("{}", &[]).unwrap_err()), "\"introspection\"");
        assert_eq!(
            key(resolve("token_source: jwt", &[]).unwrap_err()),
            "\"jwt\""
        );
        let s = resolve("token_source: behind_proxy", &[]).unwrap();
        assert_eq!(
            (s.token_source, s.introspection, s.leeway),
            (TokenSource::BehindProxy, None, Duration::from_secs(5))
        );
        let e = resolve(URL, &[("PROXY_TOKEN_SOURCE", "jwt-only")]).unwrap_err();
        assert_eq!(origin(e), "environment variable PROXY_TOKEN_SOURCE");
        let e = resolve("introspection: {client_id: c, client_secret: s}", &[]).unwrap_err();
        assert_eq!(key(e), "\"introspection.url\"");
        let e = resolve("introspection: {url: 'http://a/i/', client_id: c}", &[]).unwrap_err();
        assert_eq!(key(e), "\"introspection.client_secret\"");
    }

    /// The whole message of a refused configuration.
    fn message(yaml: &str, vars: &[(&str, &str)]) -> String {
        resolve(yaml, vars).unwrap_err().to_string()
    }

    fn accepted(s: &GateSettings) -> Option<Vec<&str>> {
        s.audience
            .as_ref()
            .map(|a| a.accepted().iter().map(String::as_str).collect())
    }

    const JWT: &str = "jwt: {jwks_url: 'https://idp/jwks', issuer: 'https://idp'";

    #[test]
    fn one_audience_written_once_or_in_its_old_spellings() {
        // The gate's key, one or a list.
        let s = resolve(&format!("{URL}audience: api"), &[]).unwrap();
        assert_eq!(accepted(&s), Some(vec!["api"]));
        let s = resolve(&format!("{URL}audience: [a, b]"), &[]).unwrap();
        assert_eq!(accepted(&s), Some(vec!["a", "b"]));
        // The old spellings still work.
        let old =
            "introspection: {url: 'http://a/i/', client_id: c, client_secret: s, audience: api}";
        assert_eq!(accepted(&resolve(old, &[]).unwrap()), Some(vec!["api"]));
        let s = resolve(
            &format!("token_source: jwt\n{JWT}, audience: [x, y]}}"),
            &[],
        )
        .unwrap();
        assert_eq!(accepted(&s), Some(vec!["x", "y"]));
        // Saying the same twice is fine (order and repetitions aside).
        let s = resolve(
            &format!("{URL}audience: [y, x]\n{JWT}, audience: [x, y, x]}}"),
            &[],
        )
        .unwrap();
        assert_eq!(accepted(&s), Some(vec!["y", "x"]));
        // Disabled, on purpose: nothing checked, also for JWTs.
        let s = resolve(
            &format!("token_source: jwt\n{JWT}, audience: {{disabled: true}}}}"),
            &[],
        )
        .unwrap();
        assert_eq!(accepted(&s), None);
        // Nothing said: introspection checks none; JWT validation needs one.
        assert_eq!(accepted(&resolve(URL, &[]).unwrap()), None);
        let e = message(&format!("token_source: jwt\n{JWT}}}"), &[]);
        assert!(
            e.starts_with("g.yaml: key \"audience\": (missing): token_source jwt needs"),
            "{e}"
        );
    }

    #[test]
    fn spellings_that_disagree_are_refused_naming_file_key_and_value() {
        let e = message(
            &format!("{URL}audience: orders\n{JWT}, audience: billing}}"),
            &[],
        );
        assert_eq!(
            e,
            "g.yaml: key \"jwt.audience\": \"billing\": the old spelling of audience, and \
             audience says orders: the gate has one audience for every token source; keep only \
             audience"
        );
        let two_old =
            "introspection: {url: 'http://a/i/', client_id: c, client_secret: s, audience: a}\n";
        let e = message(
            &format!("{two_old}{JWT}, audience: {{disabled: true}}}}"),
            &[],
        );
        assert!(
            e.starts_with(
                "g.yaml: key \"jwt.audience\": \"{disabled: true}\": the old spelling of \
                 audience, and introspection.audience says a"
            ),
            "{e}"
        );
        for (yaml, key, value) in [
            (format!("{URL}audience: ''"), "audience", "\"\""),
            (format!("{URL}audience: []"), "audience", "\"[]\""),
            (format!("{URL}audience: {{disabled: false}}"), "audience", "\"{disabled: false}\""),
            (
                "introspection: {url: 'http://a/i/', client_id: c, client_secret: s, audience: ' '}"
                    .to_owned(),
                "introspection.audience",
                "\" \"",
            ),
            (format!("{URL}{JWT}, audience: ['']}}"), "jwt.audience", "\"[]\""),
        ] {
            let e = message(&yaml, &[]);
            assert!(
                e.starts_with(&format!("g.yaml: key \"{key}\": {value}")),
                "{yaml}: {e}"
            );
        }
    }

    #[test]
    fn the_resource_is_the_default_audience_and_the_metadatas_subject() {
        let s = resolve(&format!("{URL}resource: 'https://api.example/orders'"), &[]).unwrap();
        assert_eq!(accepted(&s), Some(vec!["https://api.example/orders"]));
        let r = s.resource.unwrap();
        assert_eq!(r.resource, "https://api.example/orders");
        assert!(r.authorization_servers.is_empty(), "no issuer known");
        // An explicit audience wins; the issuers the gate knows are the servers by default.
        let s = resolve(
            "introspection: {url: 'http://a/i/', client_id: c, client_secret: s, issuer: 'https://as.example'}\n\
             resource: 'https://api.example'\naudience: [legacy]\nresource_name: Orders",
            &[],
        )
        .unwrap();
        assert_eq!(accepted(&s), Some(vec!["legacy"]));
        let r = s.resource.unwrap();
        assert_eq!(r.authorization_servers, ["https://as.example"]);
        assert_eq!(r.resource_name.as_deref(), Some("Orders"));
        // The environment gives both (the stack's way, and a sidecar's).
        let s = resolve(
            &format!(
                "{URL}resource: 'https://file.example'\nauthorization_servers: 'https://a.example'"
            ),
            &[
                ("PROXY_RESOURCE", "http://127.0.0.1:9000"),
                (
                    "PROXY_AUTHORIZATION_SERVERS",
                    "http://127.0.0.1:9000, https://b.example",
                ),
            ],
        )
        .unwrap();
        let r = s.resource.clone().unwrap();
        assert_eq!(r.resource, "http://127.0.0.1:9000");
        assert_eq!(
            r.authorization_servers,
            ["http://127.0.0.1:9000", "https://b.example"]
        );
        assert_eq!(accepted(&s), Some(vec!["http://127.0.0.1:9000"]));
    }

    #[test]
    fn bad_resource_settings_are_named() {
        for (yaml, vars, origin, value) in [
            (
                "resource: 'http://api.example'",
                &[][..],
                "g.yaml: key \"resource\"",
                "\"http://api.example\"",
            ),
            (
                "resource: 'https://api.example/?q=1'",
                &[],
                "g.yaml: key \"resource\"",
                "\"https://api.example/?q=1\"",
            ),
            (
                "token_source: introspection",
                &[("PROXY_RESOURCE", "api")],
                "environment variable PROXY_RESOURCE",
                "\"api\"",
            ),
            (
                "resource: 'https://api.example'\nauthorization_servers: [auth]",
                &[],
                "g.yaml: key \"authorization_servers\"",
                "\"auth\"",
            ),
            (
                "resource: 'https://api.example'\nauthorization_servers: []",
                &[],
                "g.yaml: key \"authorization_servers\"",
                "\"[]\"",
            ),
            (
                "resource: 'https://api.example'\nresource_name: ''",
                &[],
                "g.yaml: key \"resource_name\"",
                "\"\"",
            ),
            (
                "resource_name: Orders",
                &[],
                "g.yaml: key \"resource_name\"",
                "(set)",
            ),
        ] {
            let e = message(&format!("{URL}{yaml}"), vars);
            assert!(
                e.starts_with(&format!("{origin}: {value}: ")),
                "{yaml}: {e}"
            );
        }
    }
}
