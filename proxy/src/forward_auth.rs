//! Forward-auth mode: a decision endpoint on a listener of its own, for an ingress that proxies
//! itself (nginx `auth_request`, Traefik `forwardAuth`, Envoy `ext_authz` as an HTTP service).
//! The same gate and rules as the proxy, no upstream: 200 with the `X-Auth-*` identity headers,
//! or the 401/403 and `WWW-Authenticate` the proxy would send. With a `resource`, a request for
//! the RFC 9728 metadata (the ingress routing `/.well-known/oauth-protected-resource` here) is
//! answered with the document, as the proxy answers it.
//!
//! Each decision gets an access line (`server="forward_auth"`) and counts in the request
//! metrics with `listener="forward_auth"`, as a proxied request does with `listener="proxy"`.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::{HeaderValue, Response, StatusCode, header};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use resource_server::access_log::AccessLine;
use resource_server::client_cert::cert_header;
use resource_server::dpop_gate::SeenAs;
use resource_server::{CertThumbprint, EncodedIdentity, Outcome, Refusal};

use crate::ingress::{Cidr, ForwardAuthConfig, original};
use crate::metrics::{FORWARD_AUTH, UNMATCHED};
use crate::state::{Routing, SharedState};
use resource_server::request_id;

/// The decision endpoint (a Pingora `ServeHttp` app).
pub struct ForwardAuth {
    pub shared: SharedState,
    pub config: ForwardAuthConfig,
}

/// What a check decided, for its access line and metrics.
#[derive(Default)]
struct Decided {
    /// The original request's method and path, once known (else the check's own).
    original: Option<(http::Method, String)>,
    route: Option<usize>,
    outcome: Option<Outcome>,
    identity: Option<std::sync::Arc<EncodedIdentity>>,
    /// The request id (from a trusted ingress, or made here), answered in `X-Request-Id`.
    request_id: Option<HeaderValue>,
}

#[async_trait]
impl ServeHttp for ForwardAuth {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let start = Instant::now();
        let routing = self.shared.routing();
        let mut decided = Decided::default();
        let mut resp = self.decide(session, &routing, &mut decided).await;
        if let Some(id) = &decided.request_id {
            resp.headers_mut()
                .insert(request_id::X_REQUEST_ID, id.clone());
        }
        self.observe(session, &routing, decided, resp.status(), start.elapsed());
        resp
    }
}

impl ForwardAuth {
    /// Counts the decision and writes its access line.
    fn observe(
        &self,
        session: &ServerSession,
        routing: &Routing,
        decided: Decided,
        status: StatusCode,
        took: Duration,
    ) {
        let route = decided
            .route
            .and_then(|i| routing.gate.rules().routes().get(i));
        if let Some(outcome) = decided.outcome {
            let name = route.map_or(UNMATCHED, |r| r.name.as_str());
            self.shared.metrics.forward_auth(name, outcome, took);
        }
        let status = status.as_u16();
        if !self.shared.access_log.wants(status) {
            return;
        }
        let req = session.req_header();
        let (method, path) = match &decided.original {
            Some((method, path)) => (method.as_str(), path.as_str()),
            None => (req.method.as_str(), req.uri.path()),
        };
        let identity = decided.identity.as_deref();
        AccessLine {
            server: FORWARD_AUTH,
            method,
            path,
            route: route.map(|r| r.name.as_str()),
            decision: decided.outcome.map(Outcome::as_str),
            client_id: identity.and_then(|i| i.client_id.as_deref()),
            user: identity.and_then(|i| i.username.as_deref()),
            status,
            upstream_status: None,
            request_id: decided.request_id.as_ref().and_then(|v| v.to_str().ok()),
            latency: took,
            ..AccessLine::default()
        }
        .emit();
    }

    /// The answer to one check; what was decided goes in `decided`.
    async fn decide(
        &self,
        session: &ServerSession,
        routing: &Routing,
        decided: &mut Decided,
    ) -> Response<Vec<u8>> {
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let trusted = Cidr::any_contains(&self.config.trusted_peers, peer);
        let req = session.req_header();
        decided.request_id = Some(request_id::of(&req.headers, trusted));
        // The metadata asked for directly (the ingress proxies its path here, with no
        // original-request headers), or through a check of that path.
        let metadata = |method: &http::Method, path: &str| {
            routing.gate.metadata(method, path).map(|answer| {
                let mut resp = Response::new(answer.body.into_bytes());
                *resp.status_mut() =
                    StatusCode::from_u16(answer.status).unwrap_or(StatusCode::NOT_FOUND);
                let len = resp.body().len();
                let headers = resp.headers_mut();
                headers.extend(answer.headers);
                headers.insert(header::CONTENT_LENGTH, len.into());
                resp
            })
        };
        if let Some(resp) = metadata(&req.method, req.uri.path()) {
            return resp;
        }
        let (method, uri) = match original(
            &req.method,
            req.raw_path(),
            &req.headers,
            trusted,
            &self.config,
        ) {
            Ok(o) => o,
            Err(why) => {
                decided.outcome = Some(Outcome::BadRequest);
                let body = serde_json::json!({ "detail": why }).to_string();
                return reply(StatusCode::BAD_REQUEST, None, body, &[]);
            }
        };
        // The client certificate the ingress verified (its `$ssl_client_escaped_cert` in
        // `X-Tokengate-Client-Cert`): believed only when the configuration says the ingress
        // sets (or clears) that header on every check, and from trusted peers only.
        let client_cert = match trusted && self.config.client_cert_header {
            true => cert_header(&req.headers).map(|der| CertThumbprint::of_der(&der)),
            false => None,
        };
        decided.original = Some((method.clone(), uri.path().to_owned()));
        if let Some(resp) = metadata(&method, uri.path()) {
            return resp;
        }
        // The origin the client sent the original request to (a DPoP proof's `htu`): from a
        // trusted ingress, its `X-Forwarded-Proto` and `X-Forwarded-Host` (else `Host`);
        // otherwise this listener's scheme and `Host`.
        let scheme = if self.config.tls { "https" } else { "http" };
        let seen = match trusted {
            true => SeenAs::Forwarded(scheme),
            false => SeenAs::Listener(scheme),
        };
        match routing
            .gate
            .authorize_from(&method, &uri, &req.headers, client_cert.as_ref(), seen)
            .await
        {
            Ok(allow) => {
                decided.route = Some(allow.route.index());
                decided.outcome = Some(Outcome::Allow);
                // The values encoded once per token, as the proxy path sends them upstream.
                let identity = allow.identity.as_deref().map_or(&[][..], |i| &i.headers);
                let resp = reply(StatusCode::OK, None, String::new(), identity);
                decided.identity = allow.identity;
                resp
            }
            Err(denial) => {
                decided.route = denial.route;
                decided.outcome = Some(denial.outcome);
                let Refusal {
                    status,
                    www_authenticate,
                    body,
                } = denial.refusal;
                // No route: 403, as nginx's auth_request passes on only 401 and 403.
                let status = if status == 404 { 403 } else { status };
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
                reply(status, www_authenticate, body, &[])
            }
        }
    }
}

fn reply(
    status: StatusCode,
    challenge: Option<String>,
    body: String,
    identity: &[(&'static str, header::HeaderName, header::HeaderValue)],
) -> Response<Vec<u8>> {
    let mut resp = Response::new(body.into_bytes());
    *resp.status_mut() = status;
    let len = resp.body().len();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_LENGTH, len.into());
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    if len > 0 {
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(Refusal::CONTENT_TYPE),
        );
    }
    if let Some(v) = challenge.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
        headers.insert(header::WWW_AUTHENTICATE, v);
    }
    for (_, name, value) in identity {
        headers.insert(name.clone(), value.clone());
    }
    resp
}
