//! The access check in front of every handler: the configured `resource_server::Gate`
//! (introspection, local JWT validation, both, or the proxy's identity headers) answers each
//! request, and a refusal is written as it is. With a `resource`, the gate's RFC 9728 metadata
//! is answered before any handler, with no token looked at.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use resource_server::dpop_gate::SeenAs;
use resource_server::{Check, Gate, MetadataAnswer, Refusal};

use crate::AppState;
use crate::config::{Config, ConfigError};

/// The gate, and whether the API may listen beyond loopback.
#[derive(Clone, Debug)]
pub struct Guard {
    gate: Gate,
    allow_non_loopback: bool,
}

impl Guard {
    /// Writes the introspection client's and the revocation stream's metrics.
    pub fn collect(&self, s: &mut resource_server::metrics::Scrape) -> std::fmt::Result {
        if let Some(checker) = self.gate.check().introspection() {
            checker.collect(s)?;
        }
        match self.gate.revocation() {
            Some(r) => r.revoked().collect(s),
            None => Ok(()),
        }
    }

    pub fn new(gate: Gate) -> Guard {
        Guard {
            gate,
            allow_non_loopback: false,
        }
    }

    /// Builds the gate a configuration describes (the introspection client and the JWT
    /// validator its token source needs). Inside a tokio runtime, the JWKS is fetched in the
    /// background at once; otherwise on the first token.
    pub fn from_config(config: &Config) -> Result<Guard, ConfigError> {
        let gate = Gate::build(config.gate.clone(), None).map_err(|message| {
            let (key, message) = message
                .split_once(": ")
                .unwrap_or(("token_source", &message));
            ConfigError::key(&config.file, key, config.gate.token_source, message)
        })?;
        Ok(Guard {
            gate,
            allow_non_loopback: config.allow_non_loopback,
        })
    }

    /// The gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Whether the API must listen on loopback only (it believes, or skips, credentials).
    pub fn requires_loopback(&self) -> bool {
        matches!(self.gate.check(), Check::Forwarded(_) | Check::Unchecked)
            && !self.allow_non_loopback
    }
}

/// `/readyz`: 200 `ready`, with `(degraded: ...)` while the revocation stream is unhealthy
/// (cached answers then live at most its fallback TTL: safe, so still ready); 503 while no JWT
/// signing key is known.
pub async fn readyz(State(state): State<AppState>) -> Response {
    let gate = &state.guard.gate;
    if gate.check().jwt().is_some_and(|jwt| jwt.key_count() == 0) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no JWT signing key known (JWKS not fetched)\n",
        )
            .into_response();
    }
    match gate.revocation().map(|r| r.revoked().health()) {
        Some(Err(why)) => (StatusCode::OK, format!("ready (degraded: {why})\n")).into_response(),
        _ => (StatusCode::OK, "ready\n").into_response(),
    }
}

/// `/metrics`: the introspection client's and the revocation stream's counters.
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, resource_server::metrics::CONTENT_TYPE)],
        resource_server::metrics::encode(&state.metrics),
    )
        .into_response()
}

/// The middleware: refuses with the shared refusal, or runs the handler.
pub async fn check(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let gate = &state.guard.gate;
    if let Some(answer) = gate.metadata(request.method(), request.uri().path()) {
        return metadata_response(answer);
    }
    // Behind the proxy, the client certificate it verified (believed with its secret only).
    let client_cert = gate.forwarded_client_cert(request.headers());
    // A DPoP proof names the URL the client sent the request to: this plain-HTTP listener and
    // its `Host`, or the configured `resource`'s origin (behind a TLS terminator).
    let verdict = gate
        .authorize_from(
            request.method(),
            request.uri(),
            request.headers(),
            client_cert.as_ref(),
            SeenAs::Listener("http"),
        )
        .await;
    match verdict {
        Ok(_) => next.run(request).await,
        Err(denial) => {
            tracing::debug!(status = denial.refusal.status, outcome = denial.outcome.as_str(), method = %request.method(), path = request.uri().path(), "refused");
            refusal_response(&denial.refusal)
        }
    }
}

/// The gate's answer to a protected resource metadata request, as it is.
fn metadata_response(answer: MetadataAnswer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::NOT_FOUND);
    let mut response = (status, Body::from(answer.body)).into_response();
    response.headers_mut().extend(answer.headers);
    response
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
