//! The access check in front of every handler: the route rules find the route, and
//! `resource_server::Gate::authorize` asks the configured token check (introspection, local JWT
//! validation, both, or the proxy's identity headers) → the shared refusal, or on to the handler.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use resource_server::{
    Credential, Denial, ForwardedIdentity, Gate, Identity, JwtOrIntrospection, JwtValidator,
    Refusal, Rules, TokenCheck, TokenChecker,
};

use crate::AppState;
use crate::config::{Config, ConfigError, Mode};

/// How a request's token is established.
#[derive(Clone, Debug)]
pub enum Checks {
    /// Introspection at the authorization server through the cache.
    Introspect(TokenChecker),
    /// Local validation of JWT access tokens.
    Jwt(JwtValidator),
    /// JWTs validated locally, other tokens introspected.
    JwtOrIntrospect(JwtValidator, TokenChecker),
    /// The proxy's `X-Auth-*` headers; `X-Auth-Expires` with the leeway, which should be the
    /// proxy's (both default to [`resource_server::AnswerPolicy::DEFAULT_LEEWAY`]).
    BehindProxy(ForwardedIdentity),
    /// Nothing (benchmarks only).
    None,
}

impl TokenCheck for Checks {
    async fn credential(&self, headers: &HeaderMap, query: Option<&str>) -> Credential {
        match self {
            Checks::Introspect(c) => c.credential(headers, query).await,
            Checks::Jwt(v) => v.credential(headers, query).await,
            Checks::JwtOrIntrospect(jwt, introspection) => {
                JwtOrIntrospection { jwt, introspection }
                    .credential(headers, query)
                    .await
            }
            Checks::BehindProxy(f) => f.credential(headers, query).await,
            // `Guard::authorize` never asks: everything is let through.
            Checks::None => Credential::Unavailable,
        }
    }

    fn leeway(&self) -> std::time::Duration {
        match self {
            Checks::Introspect(c) => c.leeway(),
            Checks::Jwt(v) => v.leeway(),
            Checks::JwtOrIntrospect(jwt, introspection) => {
                JwtOrIntrospection { jwt, introspection }.leeway()
            }
            Checks::BehindProxy(f) => f.leeway,
            Checks::None => std::time::Duration::ZERO,
        }
    }
}

/// The rules and the way tokens are checked.
#[derive(Clone, Debug)]
pub struct Guard {
    rules: Rules,
    gate: Gate<Checks>,
    allow_non_loopback: bool,
}

impl Guard {
    pub fn new(rules: Rules, checks: Checks) -> Guard {
        Guard {
            rules,
            gate: Gate::new(checks),
            allow_non_loopback: false,
        }
    }

    /// Builds the guard a configuration describes (the introspection client and the JWT
    /// validator its mode needs). Inside a tokio runtime, the JWKS is fetched in the background
    /// at once; otherwise on the first token.
    pub fn from_config(config: &Config) -> Result<Guard, ConfigError> {
        let introspection = || {
            let Some(i) = &config.introspect else {
                return Err(setting_error(
                    config,
                    "introspection",
                    "this mode needs the introspection settings".into(),
                ));
            };
            TokenChecker::new(i.settings.clone(), i.cache)
                .map_err(|e| setting_error(config, "introspection", e.to_string()))
        };
        let jwt = || {
            let Some(settings) = &config.jwt else {
                return Err(setting_error(
                    config,
                    "jwt",
                    "this mode needs the jwt settings".into(),
                ));
            };
            let v =
                JwtValidator::new(settings.clone()).map_err(|e| setting_error(config, "jwt", e))?;
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let started = v.clone();
                runtime.spawn(async move { started.start().await });
            }
            Ok(v)
        };
        let checks = match config.mode {
            Mode::Introspect => Checks::Introspect(introspection()?),
            Mode::Jwt => Checks::Jwt(jwt()?),
            Mode::JwtOrIntrospect => Checks::JwtOrIntrospect(jwt()?, introspection()?),
            Mode::BehindProxy => Checks::BehindProxy(ForwardedIdentity {
                leeway: config.leeway,
            }),
            Mode::None => Checks::None,
        };
        Ok(Guard {
            rules: config.rules.clone(),
            gate: Gate::new(checks),
            allow_non_loopback: config.allow_non_loopback,
        })
    }

    /// How tokens are checked.
    pub fn checks(&self) -> &Checks {
        self.gate.token_check()
    }

    /// Whether the API must listen on loopback only (it trusts, or skips, credentials).
    pub fn requires_loopback(&self) -> bool {
        matches!(self.checks(), Checks::BehindProxy(_) | Checks::None) && !self.allow_non_loopback
    }

    /// The decision for one request: its route, then [`Gate::authorize`]; `Ok` with the
    /// caller's identity (`None` on a public route, and for everything in mode `none`).
    pub async fn authorize(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Option<Identity>, Denial> {
        if matches!(self.checks(), Checks::None) {
            return Ok(None);
        }
        let route = self.rules.find(method, uri.path());
        let allow = self.gate.authorize(route, headers, uri.query()).await?;
        Ok(allow.identity)
    }
}

fn setting_error(config: &Config, key: &str, message: String) -> ConfigError {
    let value = match key {
        "introspection" => config
            .introspect
            .as_ref()
            .map(|i| format!("\"{}\"", i.settings.url)),
        _ => None,
    };
    ConfigError::Invalid {
        origin: format!("{}: key \"{key}\"", config.file),
        value: value.unwrap_or_else(|| "(missing)".into()),
        message,
    }
}

/// The middleware: refuses with the shared refusal, or runs the handler.
pub async fn check(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let verdict = state
        .guard
        .authorize(request.method(), request.uri(), request.headers())
        .await;
    match verdict {
        Ok(_) => next.run(request).await,
        Err(denial) => {
            tracing::debug!(status = denial.refusal.status, outcome = denial.outcome.as_str(), method = %request.method(), path = request.uri().path(), "refused");
            refusal_response(&denial.refusal)
        }
    }
}

/// A [`Refusal`] as an HTTP response (status, `WWW-Authenticate`, JSON body), untouched.
pub fn refusal_response(refusal: &Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::FORBIDDEN);
    let mut response = (status, Body::from(refusal.body.clone())).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(Refusal::CONTENT_TYPE),
    );
    if let Some(challenge) = refusal
        .www_authenticate
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        headers.insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}
