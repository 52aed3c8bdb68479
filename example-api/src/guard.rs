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
    /// The proxy's `X-Auth-*` headers; `X-Auth-Expires` with this leeway, which should be the
    /// proxy's (both default to [`resource_server::AnswerPolicy::DEFAULT_LEEWAY`]).
    BehindProxy { leeway: Duration },
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
            Mode::BehindProxy => Checks::BehindProxy {
                leeway: config.leeway,
            },
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

    /// The decision for one request, with the configured clock leeway: the checker's for
    /// introspected tokens, the proxy's (as configured here) for its `X-Auth-Expires`.
    pub async fn decide(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Decision {
        if matches!(self.checks, Checks::None) {
            return Decision::Allow(None);
        }
        let route = self.rules.find(method, uri.path());
        // Public or unmatched: the token is not looked at.
        if route.is_none_or(|r| r.access == Access::Public) {
            return decide(route, TokenState::Missing, Duration::ZERO);
        }
        let (introspected, forwarded);
        let (token, leeway) = match &self.checks {
            Checks::Introspect(checker) => {
                let token = match bearer_token(headers, uri.query()) {
                    Bearer::Missing => TokenState::Missing,
                    Bearer::Malformed(why) => TokenState::Malformed(why),
                    Bearer::Token(token) => match checker.check(&token).await {
                        Ok(claims) => {
                            introspected = claims;
                            TokenState::Checked(&introspected)
                        }
                        Err(_) => TokenState::Unavailable,
                    },
                };
                (token, checker.leeway())
            }
            Checks::BehindProxy { leeway } => {
                let token = match forwarded::identity(headers) {
                    Forwarded::Missing => TokenState::Missing,
                    Forwarded::Malformed(why) => TokenState::Malformed(why),
                    Forwarded::Identity(claims) => {
                        forwarded = claims;
                        TokenState::Checked(&forwarded)
                    }
                };
                (token, *leeway)
            }
            Checks::None => return Decision::Allow(None),
        };
        decide(route, token, leeway)
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
