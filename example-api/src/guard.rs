//! The access check in front of every handler: route rules → token state (introspection, or the
//! proxy's identity headers) → `resource_server::decide` → the shared refusal, or on to the handler.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use resource_server::{
    Access, Bearer, CheckerError, Decision, Refusal, Rules, TokenChecker, TokenState, bearer_token,
    decide,
};

use crate::AppState;
use crate::config::{Config, ConfigError, Mode};
use crate::forwarded::{self, Forwarded};

/// How a request's token is established.
#[derive(Clone, Debug)]
pub enum Checks {
    /// Introspection at the authorization server through the cache.
    Introspect(TokenChecker),
    /// The proxy's `X-Auth-*` headers.
    BehindProxy,
    /// Nothing (benchmarks only).
    None,
}

/// The rules and the way tokens are checked.
#[derive(Clone, Debug)]
pub struct Guard {
    rules: Rules,
    checks: Checks,
    allow_non_loopback: bool,
}

impl Guard {
    pub fn new(rules: Rules, checks: Checks) -> Guard {
        Guard {
            rules,
            checks,
            allow_non_loopback: false,
        }
    }

    /// Builds the guard a configuration describes (the introspection client, in introspect mode).
    pub fn from_config(config: &Config) -> Result<Guard, ConfigError> {
        let checks = match config.mode {
            Mode::Introspect => {
                let Some(i) = &config.introspect else {
                    return Err(checker_error(
                        config,
                        "introspect mode needs the introspection settings".into(),
                    ));
                };
                let checker = TokenChecker::new(i.settings.clone(), i.cache);
                Checks::Introspect(
                    checker.map_err(|e: CheckerError| checker_error(config, e.to_string()))?,
                )
            }
            Mode::BehindProxy => Checks::BehindProxy,
            Mode::None => Checks::None,
        };
        Ok(Guard {
            rules: config.rules.clone(),
            checks,
            allow_non_loopback: config.allow_non_loopback,
        })
    }

    /// Whether the API must listen on loopback only (it trusts, or skips, credentials).
    pub fn requires_loopback(&self) -> bool {
        !matches!(self.checks, Checks::Introspect(_)) && !self.allow_non_loopback
    }

    /// The decision for one request. Introspected tokens get the configured clock leeway; the
    /// proxy's `X-Auth-Expires` none (the proxy already applied its own).
    pub async fn decide(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Decision {
        if matches!(self.checks, Checks::None) {
            return Decision::Allow(None);
        }
        let route = self.rules.find(method, uri.path());
        let Some(r) = route else {
            return Decision::NoRoute;
        };
        if r.access == Access::Public {
            return decide(route, TokenState::Missing, Duration::ZERO);
        }
        match &self.checks {
            Checks::Introspect(checker) => {
                let leeway = checker.leeway();
                match bearer_token(headers, uri.query()) {
                    Bearer::Missing => decide(route, TokenState::Missing, leeway),
                    Bearer::Malformed(why) => decide(route, TokenState::Malformed(why), leeway),
                    Bearer::Token(token) => match checker.check(&token).await {
                        Ok(claims) => decide(route, TokenState::Checked(&claims), leeway),
                        Err(_) => decide(route, TokenState::Unavailable, leeway),
                    },
                }
            }
            Checks::BehindProxy => {
                let leeway = Duration::ZERO;
                match forwarded::identity(headers) {
                    Forwarded::Missing => decide(route, TokenState::Missing, leeway),
                    Forwarded::Malformed(why) => decide(route, TokenState::Malformed(why), leeway),
                    Forwarded::Identity(claims) => {
                        decide(route, TokenState::Checked(&claims), leeway)
                    }
                }
            }
            Checks::None => Decision::Allow(None),
        }
    }
}

fn checker_error(config: &Config, message: String) -> ConfigError {
    ConfigError::Invalid {
        origin: format!("{}: key \"introspection\"", config.file),
        value: config
            .introspect
            .as_ref()
            .map_or_else(|| "(missing)".into(), |i| format!("\"{}\"", i.settings.url)),
        message,
    }
}

/// The middleware: refuses with the shared refusal, or runs the handler.
pub async fn check(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let decision = state
        .guard
        .decide(request.method(), request.uri(), request.headers())
        .await;
    match decision.refusal() {
        None => next.run(request).await,
        Some(refusal) => {
            tracing::debug!(status = refusal.status, method = %request.method(), path = request.uri().path(), "refused");
            refusal_response(&refusal)
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
