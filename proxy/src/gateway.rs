//! The Pingora `ProxyHttp` glue: decide in `request_filter` (writing refusals there), pick the
//! route's upstream, and rewrite identity and `Authorization` headers on the way up.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, Session};
use pingora::proxy::ProxyHttp;
use pingora::{Error, ErrorSource, ErrorType, Result};
use resource_server::{
    Access, Bearer, Decision, Identity, Refusal, TokenState, bearer_token, decide,
};

use crate::config::{Upstream, UpstreamAddr};
use crate::drain::InFlight;
use crate::headers::{is_identity_header, names_to_strip};
use crate::metrics::{Outcome, UNMATCHED};
use crate::state::SharedState;

/// The proxy's `ProxyHttp` implementation.
pub struct Gateway {
    pub shared: SharedState,
}

/// Per-request state: what `request_filter` decided, for the later phases.
#[derive(Default)]
pub struct RequestCtx {
    upstream: Option<Arc<Upstream>>,
    identity: Option<Identity>,
    /// Counts the request as in flight for the drain until the context is dropped.
    _in_flight: Option<InFlight>,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx._in_flight = Some(self.shared.drain.enter());
        if self.shared.drain.is_draining() {
            // This connection's next response is its last: `Connection: close`.
            session.set_keepalive(None);
        }
        let routing = self.shared.routing();
        let req = session.req_header();
        let route = routing.rules.find(&req.method, req.uri.path());
        let claims;
        let token = match route.map(|r| &r.access) {
            Some(Access::Authenticated { .. }) => match bearer_token(&req.headers, req.uri.query())
            {
                Bearer::Missing => TokenState::Missing,
                Bearer::Malformed(why) => TokenState::Malformed(why),
                Bearer::Token(t) => match self.shared.checker.check(&t).await {
                    Ok(c) => {
                        claims = c;
                        TokenState::Checked(&claims)
                    }
                    Err(_) => TokenState::Unavailable,
                },
            },
            // Public or unmatched: the token is not looked at.
            _ => TokenState::Missing,
        };
        let decision = decide(route, token, self.shared.checker.leeway());
        let label = route.map_or(UNMATCHED, |r| r.name.as_str());
        self.shared.metrics.request(label, Outcome::of(&decision));
        match (decision, route) {
            (Decision::Allow(identity), Some(route)) => {
                ctx.identity = identity;
                ctx.upstream = route
                    .upstream
                    .as_ref()
                    .and_then(|u| routing.upstreams.get(u))
                    .cloned();
                Ok(false)
            }
            (decision, _) => {
                let refusal = decision.refusal().unwrap_or_else(not_found);
                tracing::debug!(route = label, status = refusal.status, "request refused");
                write_refusal(session, refusal).await?;
                Ok(true)
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        let Some(up) = ctx.upstream.as_ref() else {
            return Error::e_explain(ErrorType::HTTPStatus(502), "route names no known upstream");
        };
        let addr = match &up.address {
            UpstreamAddr::Socket(a) => *a,
            UpstreamAddr::Name { host, port } => tokio::net::lookup_host((host.as_str(), *port))
                .await
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| {
                    Error::explain(ErrorType::ConnectNoRoute, format!("cannot resolve {host}"))
                        .into_up()
                })?,
        };
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(up.connect_timeout);
        peer.options.read_timeout = up.read_timeout;
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        for name in names_to_strip(&upstream_request.headers, is_identity_header) {
            upstream_request.remove_header(&name);
        }
        if let Some(identity) = &ctx.identity {
            for (name, value) in identity.headers() {
                upstream_request.insert_header(name, value)?;
            }
        }
        let up = ctx.upstream.as_ref();
        if !up.is_some_and(|u| u.pass_authorization) {
            upstream_request.remove_header(&http::header::AUTHORIZATION);
        }
        match up.and_then(|u| u.host.clone()) {
            Some(host) => upstream_request.insert_header(http::header::HOST, host)?,
            None if !upstream_request.headers.contains_key(http::header::HOST) => {
                if let Some(up) = up {
                    upstream_request.insert_header(http::header::HOST, up.address.to_string())?;
                }
            }
            None => {}
        }
        // The standard way: the lines a client or an earlier proxy sent, joined, and our peer
        // appended as the right-most entry, all in one header line.
        if let Some(client) = session.client_addr().and_then(|a| a.as_inet()) {
            let mut forwarded = Vec::new();
            for line in upstream_request.headers.get_all("x-forwarded-for") {
                forwarded.extend_from_slice(line.as_bytes());
                forwarded.extend_from_slice(b", ");
            }
            forwarded.extend_from_slice(client.ip().to_string().as_bytes());
            upstream_request.insert_header("X-Forwarded-For", forwarded)?;
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        _upstream_response: &mut ResponseHeader,
        _ctx: &mut RequestCtx,
    ) -> Result<()> {
        // A request that began before the drain still tells its client to go elsewhere.
        if self.shared.drain.is_draining() {
            session.set_keepalive(None);
        }
        Ok(())
    }

    /// A client that goes away mid-request (or sends garbage) is not the proxy's error: no
    /// error-level line for it, so a client cannot flood the log.
    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, error: &Error) -> bool {
        error.esource() == &ErrorSource::Downstream
    }

    async fn logging(&self, _session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        if let (Some(e), Some(up)) = (e, ctx.upstream.as_ref())
            && e.esource() == &ErrorSource::Upstream
        {
            self.shared.metrics.upstream_error(&up.name);
        }
    }
}

/// The refusal for an allowed request that has no route (cannot happen: `decide` says `NoRoute`).
fn not_found() -> Refusal {
    Refusal {
        status: 404,
        www_authenticate: None,
        body: r#"{"detail":"Not found."}"#.to_owned(),
    }
}

/// Writes the refusal's status, `WWW-Authenticate`, `Content-Type` and JSON body.
async fn write_refusal(session: &mut Session, refusal: Refusal) -> Result<()> {
    let body = Bytes::from(refusal.body);
    let mut resp = ResponseHeader::build(refusal.status, Some(5))?;
    resp.insert_header("Content-Type", Refusal::CONTENT_TYPE)?;
    resp.insert_header("Content-Length", body.len().to_string())?;
    resp.insert_header("Cache-Control", "no-store")?;
    if let Some(w) = refusal.www_authenticate {
        resp.insert_header("WWW-Authenticate", w)?;
    }
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await
}
