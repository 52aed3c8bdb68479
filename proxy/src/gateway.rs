//! The Pingora `ProxyHttp` glue: `request_filter` asks the gate in force
//! (`resource_server::Gate::authorize`) and writes its refusals; then the route's upstream, and
//! identity and `Authorization` headers rewritten on the way up; the access line and the
//! JSON answer for an upstream that fails. On a route with `cors:`, preflights are answered here
//! (no token, never forwarded) and every answer gets the route's CORS headers. With a
//! `resource`, the RFC 9728 metadata (`/.well-known/oauth-protected-resource...`) is answered
//! here too, before any route, with no token looked at.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::GetAll;
use http::{HeaderName, HeaderValue};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, Session};
use pingora::proxy::{FailToProxy, ProxyHttp};
use pingora::upstreams::peer::Peer as _;
use pingora::{Error, ErrorSource, ErrorType, OrErr as _, Result};
use resource_server::access_log::AccessLine;
use resource_server::cors::{self, CorsPolicy, Preflight};
use resource_server::dpop_gate::SeenAs;
use resource_server::{EncodedIdentity, MetadataAnswer, Refusal};

use crate::balance::{Lease, Pool, http_peer};
use crate::drain::InFlight;
use crate::h2_conn::{ANSWERED_IDLE, BodyClock, StreamSlot};
use crate::headers::{is_identity_header, names_to_strip};
use crate::metrics::{Outcome, UNMATCHED};
use crate::state::{Routing, SharedState};
use crate::tls::PeerCert;
use resource_server::request_id;

/// The proxy's `ProxyHttp` implementation.
pub struct Gateway {
    pub shared: SharedState,
}

/// Per-request state: what `request_filter` decided, for the later phases.
pub struct RequestCtx {
    upstream: Option<Arc<Pool>>,
    /// Addresses whose connection failed for this request (not tried again).
    tried: Vec<SocketAddr>,
    /// The address in use, counted in flight.
    _lease: Option<Lease>,
    /// The address in use, for passive ejection on its answer's status.
    address: Option<SocketAddr>,
    identity: Option<Arc<EncodedIdentity>>,
    /// When the request head was read.
    start: Instant,
    /// The rules the request was decided by (moved here, no extra reference), for the access
    /// line's route name.
    routing: Option<Arc<Routing>>,
    /// The matched route's position in its file.
    route: Option<usize>,
    decision: Option<Outcome>,
    /// The request id ([`resource_server::request_id`]): logged, and sent upstream.
    request_id: Option<HeaderValue>,
    /// The upstream's status, once its response head arrived.
    upstream_status: Option<u16>,
    /// The route's CORS policy, once a route is decided on.
    cors: Option<Arc<CorsPolicy>>,
    /// The client certificate the connection was verified with (escaped PEM), for upstreams.
    client_cert: Option<HeaderValue>,
    /// An HTTP/2 stream's request body, still to come: its progress, for the connection's
    /// deadline ([`crate::h2_conn`]).
    body_clock: Option<Arc<BodyClock>>,
    /// An HTTP/2 stream's place in the listener's stream budget ([`crate::h2_conn::H2Watch`]).
    h2_stream: Option<StreamSlot>,
    /// Counts the request as in flight for the drain until the context is dropped (Pingora
    /// makes the context once the request head is read, and drops it once the answer is sent).
    _in_flight: InFlight,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            upstream: None,
            tried: Vec::new(),
            _lease: None,
            address: None,
            identity: None,
            start: Instant::now(),
            routing: None,
            route: None,
            decision: None,
            request_id: None,
            upstream_status: None,
            cors: None,
            client_cert: None,
            body_clock: None,
            h2_stream: None,
            _in_flight: self.shared.drain.enter(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        if session.is_http2() {
            // Every stream holds memory until it ends (a stalled body for `body_idle_timeout`):
            // past the listener's budget, the stream is answered at once.
            ctx.h2_stream = self.shared.proxy_h2().stream();
            if ctx.h2_stream.is_none() {
                let refusal = Refusal {
                    status: 503,
                    www_authenticate: None,
                    body: r#"{"detail":"too many requests in progress, retry"}"#.to_owned(),
                };
                let retry = [(http::header::RETRY_AFTER, HeaderValue::from_static("1"))];
                let grpc = is_grpc(session.req_header());
                write_refusal(session, refusal, grpc, &retry).await?;
                return Ok(true);
            }
        }
        let routing = self.shared.routing();
        let client_cert = PeerCert::of(session.digest());
        ctx.client_cert = client_cert.map(|c| c.escaped_pem.clone());
        let thumbprint = client_cert.map(|c| c.thumbprint);
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let trusted = crate::ingress::Cidr::any_contains(self.shared.trusted_peers(), peer);
        let req = session.req_header();
        ctx.request_id = Some(request_id::of(&req.headers, trusted));
        // This API's protected resource metadata: public, before the routes.
        if let Some(answer) = routing.gate.metadata(&req.method, req.uri.path()) {
            ctx.routing = Some(routing);
            self.close_if_draining(session);
            write_metadata(session, answer).await?;
            return Ok(true);
        }
        // A real preflight for a route with `cors:` is the proxy's to answer: no token.
        if let Some(asked) = cors::preflight_method(&req.method, &req.headers)
            && let Some(route) = routing.gate.rules().find(&asked, req.uri.path())
            && let Some(policy) = route.cors.as_ref()
        {
            let answer = policy.preflight(&asked, &req.headers);
            let vary = policy.varies();
            routing
                .series(Some(route.index()))
                .request(Outcome::Preflight);
            ctx.route = Some(route.index());
            ctx.decision = Some(Outcome::Preflight);
            ctx.routing = Some(routing);
            self.close_if_draining(session);
            write_preflight(session, answer, vary).await?;
            return Ok(true);
        }
        // The origin the client sent the request to, which a DPoP proof's `htu` names: the
        // listener's scheme (https behind TLS) and the request's `Host` (`:authority`), or, from
        // a trusted peer in front (`trusted_peers:`), its `X-Forwarded-Proto`/`-Host`, as
        // forward-auth takes them.
        let tls = session
            .digest()
            .is_some_and(|digest| digest.ssl_digest.is_some());
        let scheme = if tls { "https" } else { "http" };
        let seen = match trusted {
            true => SeenAs::Forwarded(scheme),
            false => SeenAs::Listener(scheme),
        };
        let verdict = routing
            .gate
            .authorize_from(
                &req.method,
                &req.uri,
                &req.headers,
                thumbprint.as_ref(),
                seen,
            )
            .await;
        match verdict {
            Ok(allow) => {
                // Decided first: a request whose body then never starts is still counted and
                // logged with its route.
                let index = allow.route.index();
                let target = routing.routes.get(index);
                routing.series(Some(index)).request(Outcome::Allow);
                ctx.route = Some(index);
                ctx.decision = Some(Outcome::Allow);
                ctx.identity = allow.identity;
                ctx.cors = allow.route.cors.clone();
                ctx.upstream = target
                    .and_then(|t| t.upstream.as_ref())
                    .map(|u| u.0.clone());
                ctx.routing = Some(routing);
                if session.is_upgrade_req() {
                    // A WebSocket may sit silent for long: once upgraded, the body idle timeout
                    // would cut it (and Pingora would write an HTTP error into the WebSocket
                    // stream). Its own ping/pong keeps it honest; the connection cap still holds.
                    session.set_read_timeout(None);
                }
                if session.is_http2() {
                    // Pingora bounds HTTP/2 writes (zero windows included) only if asked, and
                    // reads not at all: the connection watches the body instead.
                    let h2 = self.shared.proxy_h2();
                    session.set_write_timeout(Some(h2.idle));
                    if !session.is_body_done() {
                        ctx.body_clock = h2.body(session.digest());
                        if waits_for_body(session.req_header()) {
                            read_first_body_piece(session).await?;
                        }
                    }
                }
                Ok(false)
            }
            Err(denial) => {
                // A denial on a matched route names it; only a 404 has no route.
                let route = denial
                    .route
                    .and_then(|i| routing.gate.rules().routes().get(i));
                let label = route.map_or(UNMATCHED, |r| r.name.as_str());
                routing.series(denial.route).request(denial.outcome);
                ctx.route = route.map(|r| r.index());
                ctx.decision = Some(denial.outcome);
                ctx.cors = route.and_then(|r| r.cors.clone());
                let cors = cors_headers(session, ctx.cors.as_deref());
                let answered = self.refuse(session, label, denial.refusal, &cors).await;
                ctx.routing = Some(routing);
                answered
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
        let Some(backend) = up.select(&ctx.tried) else {
            return Err(Error::explain(
                ErrorType::ConnectNoRoute,
                format!(
                    "upstream {}: no address (a name that does not resolve?)",
                    up.name
                ),
            )
            .into_up());
        };
        let Some(addr) = backend.addr.as_inet().copied() else {
            return Error::e_explain(ErrorType::InternalError, "not an IP address");
        };
        // A retry's lease replaces the failed attempt's.
        ctx._lease = up.lease(&backend);
        ctx.address = Some(addr);
        Ok(Box::new(http_peer(up, addr)))
    }

    /// Passive ejection, and a retry on another address: the request was not sent, so any
    /// method may be retried, each address at most once.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let (Some(up), Some(addr)) = (ctx.upstream.as_ref(), peer.address().as_inet()) {
            up.connect_failed(*addr);
            ctx.tried.push(*addr);
            if up.has_untried(&ctx.tried) {
                e.set_retry(true);
            }
        }
        e
    }

    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        reused: bool,
        peer: &HttpPeer,
        #[cfg(unix)] _fd: std::os::unix::io::RawFd,
        #[cfg(windows)] _sock: std::os::windows::io::RawSocket,
        _digest: Option<&pingora::protocols::Digest>,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let (false, Some(up), Some(addr)) =
            (reused, ctx.upstream.as_ref(), peer.address().as_inet())
        {
            up.connected(*addr);
        }
        // The body is read from now on: the time spent connecting is not the client's.
        if let Some(clock) = &ctx.body_clock {
            clock.progress(false);
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(clock) = &ctx.body_clock {
            clock.progress(end_of_stream || body.is_none());
        }
        Ok(())
    }

    /// A response complete while its request body is still to come: the body may pause only
    /// [`ANSWERED_IDLE`] from now on. Pingora holds the upstream connection until the request
    /// body ends (to finish sending it), though the upstream has answered; this releases it
    /// within a second of a client that stops, instead of `body_idle_timeout`. On HTTP/2 the
    /// stream's clock ends the connection ([`crate::h2_conn`]); on HTTP/1 the read timeout does.
    fn response_body_filter(
        &self,
        session: &mut Session,
        _body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<std::time::Duration>> {
        if end_of_stream {
            self.answered(session, ctx);
        }
        Ok(None)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let preserve_case = ctx
            .upstream
            .as_ref()
            .is_some_and(|u| u.preserve_header_case);
        if preserve_case || !target_in_uri(upstream_request) {
            // Pingora's head: every name's spelling kept, each insert parsing its name into two
            // maps (the names' and the values').
            return rewrite(upstream_request, ctx, client);
        }
        // One plain map instead (names not parsed, room made once), at the cost of one copy of
        // the head; Pingora then writes standard names titled (`Host`) and others in lower case.
        let mut parts = plain_parts(upstream_request);
        rewrite(&mut parts.headers, ctx, client)?;
        *upstream_request = RequestHeader::from(parts);
        Ok(())
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        ctx.upstream_status = Some(upstream_response.status.as_u16());
        // A response with no body is complete with its head (no body filter follows).
        if has_no_body(session.req_header(), upstream_response) {
            self.answered(session, ctx);
        }
        // Only an authenticated request's answer counts for passive ejection (see
        // `Pool::responded`); a failed connection counts whoever asked (`fail_to_connect`).
        if let (Some(up), Some(addr), Some(_)) =
            (ctx.upstream.as_ref(), ctx.address, ctx.identity.as_ref())
        {
            up.responded(addr, upstream_response.status.as_u16());
        }
        // What runs behind the proxy is not announced.
        upstream_response.remove_header(&http::header::SERVER);
        if let Some(policy) = ctx.cors.as_deref() {
            // The route's policy decides alone: the upstream's own CORS headers are dropped.
            let theirs: Vec<_> = upstream_response
                .headers
                .keys()
                .filter(|n| cors::is_cors_response_header(n.as_str()))
                .cloned()
                .collect();
            for name in theirs {
                upstream_response.remove_header(&name);
            }
            for (name, value) in policy.response_headers(&session.req_header().headers) {
                upstream_response.insert_header(name, value)?;
            }
            if policy.varies() {
                upstream_response.append_header(http::header::VARY, "Origin")?;
            }
        }
        self.close_if_draining(session);
        Ok(())
    }

    /// A client that goes away mid-request (or sends garbage) is not the proxy's error: no
    /// error-level line for it, so a client cannot flood the log.
    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, error: &Error) -> bool {
        error.esource() == &ErrorSource::Downstream
    }

    /// Pingora's own answer is an empty 502 with `Server: Pingora`: this one is JSON, like
    /// every refusal, and names no software.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let (code, detail) = failure_answer(e);
        if code > 0 {
            // The connection is not reused after this answer: say so (`Connection: close`), or a
            // client may send its next request on it and see a reset.
            session.set_keepalive(None);
            let refusal = Refusal {
                status: code,
                www_authenticate: None,
                body: format!("{{\"detail\":\"{detail}\"}}"),
            };
            // A gRPC call gets its status in gRPC's terms (502/504: UNAVAILABLE).
            let grpc = is_grpc(session.req_header());
            let cors = cors_headers(session, ctx.cors.as_deref());
            if let Err(e) = write_refusal(session, refusal, grpc, &cors).await {
                tracing::debug!(error = %e, "cannot send the error answer");
            }
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        let routing = ctx.routing.as_deref();
        // The route's upstream series (`ctx.upstream` is that route's upstream).
        let upstream = ctx
            .route
            .zip(routing)
            .and_then(|(i, r)| r.routes.get(i)?.upstream.as_ref())
            .filter(|_| ctx.upstream.is_some())
            .map(|u| &u.1);
        if let (Some(e), Some(up)) = (e, upstream)
            && e.esource() == &ErrorSource::Upstream
        {
            up.error();
        }
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let took = ctx.start.elapsed();
        // Routes are kept in file order: the position is the index.
        let route = ctx
            .route
            .zip(routing)
            .and_then(|(i, r)| r.gate.rules().routes().get(i));
        if let (Some(decision), Some(routing)) = (ctx.decision, routing) {
            routing.series(ctx.route).observe(decision, took);
        }
        if let (Some(up), Some(status)) = (upstream, ctx.upstream_status) {
            up.status(status);
        }
        if self.shared.access_log.wants(status) {
            let req = session.req_header();
            let identity = ctx.identity.as_ref();
            // A gRPC call answered here (a refusal, or an upstream's failure) has its status in
            // the head (trailers-only); an upstream's answer has it in trailers.
            let grpc_status = session
                .response_written()
                .and_then(|r| r.headers.get("grpc-status"))
                .and_then(|v| v.to_str().ok());
            AccessLine {
                server: "proxy",
                method: req.method.as_str(),
                path: req.uri.path(),
                route: route.map(|r| r.name.as_str()),
                decision: ctx.decision.map(Outcome::as_str),
                client_id: identity.and_then(|i| i.client_id.as_deref()),
                user: identity.and_then(|i| i.username.as_deref()),
                status,
                upstream_status: ctx.upstream_status,
                grpc_status,
                request_id: ctx.request_id.as_ref().and_then(|v| v.to_str().ok()),
                latency: took,
            }
            .emit();
        }
    }
}

impl Gateway {
    /// Writes `refusal` as the whole response; `Ok(true)`: the request is answered.
    async fn refuse(
        &self,
        session: &mut Session,
        label: &str,
        refusal: Refusal,
        cors: &[(HeaderName, HeaderValue)],
    ) -> Result<bool> {
        tracing::debug!(route = label, status = refusal.status, "request refused");
        self.close_if_draining(session);
        let grpc = is_grpc(session.req_header());
        write_refusal(session, refusal, grpc, cors).await?;
        Ok(true)
    }

    /// The response is complete: if the request body is still to come, it may pause only
    /// [`ANSWERED_IDLE`] from now on (see `response_body_filter`).
    fn answered(&self, session: &mut Session, ctx: &RequestCtx) {
        if ctx.upstream.is_none() || session.is_body_done() {
            return;
        }
        match &ctx.body_clock {
            Some(clock) => clock.answered(),
            None if !session.is_http2() && !session.was_upgraded() => {
                let idle = self.shared.proxy_h2().idle;
                session.set_read_timeout(Some(idle.min(ANSWERED_IDLE)));
            }
            None => {}
        }
    }

    /// While draining, the response about to be written is the connection's last
    /// (`Connection: close`), whenever its request began.
    fn close_if_draining(&self, session: &mut Session) {
        if self.shared.drain.is_draining() {
            session.set_keepalive(None);
        }
    }
}

/// The status and `detail` of the answer to a request that could not be proxied (status 0: the
/// client is gone, nothing to write): Pingora's choice of status, 504 for an upstream that timed
/// out.
fn failure_answer(e: &Error) -> (u16, &'static str) {
    match (e.esource(), e.etype()) {
        (_, ErrorType::HTTPStatus(code)) => (*code, "The request could not be proxied."),
        (ErrorSource::Upstream, ErrorType::ConnectTimedout | ErrorType::ReadTimedout) => {
            (504, "The upstream service did not answer in time.")
        }
        (ErrorSource::Upstream, _) => (502, "The upstream service is unavailable."),
        (
            ErrorSource::Downstream,
            ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed,
        ) => (0, ""),
        (ErrorSource::Downstream, _) => (400, "Bad request."),
        _ => (500, "Internal error."),
    }
}

/// The headers the proxy sets upstream, each as spelled in Pingora's case-keeping head and made
/// into a [`HeaderName`] once (for a plain map: no parse).
const X_FORWARDED_FOR: (&str, HeaderName) = (
    "X-Forwarded-For",
    HeaderName::from_static("x-forwarded-for"),
);
const X_REQUEST_ID: (&str, HeaderName) = (
    request_id::X_REQUEST_ID,
    HeaderName::from_static(request_id::X_REQUEST_ID),
);
const PROXY_SECRET: (&str, HeaderName) = (
    resource_server::PROXY_SECRET_HEADER,
    HeaderName::from_static(resource_server::PROXY_SECRET_HEADER),
);
const CLIENT_CERT: (&str, HeaderName) = (
    resource_server::CLIENT_CERT_HEADER,
    HeaderName::from_static(resource_server::CLIENT_CERT_HEADER),
);
const HOST: (&str, HeaderName) = ("Host", http::header::HOST);
/// The most headers [`rewrite`] sets: the identity headers, the request id, the proxy secret, the
/// client certificate, `Host` and `X-Forwarded-For`.
const SET_AT_MOST: usize = resource_server::IDENTITY_HEADERS.len() + 5;

/// A request head as the proxy rewrites it for its upstream: Pingora's [`RequestHeader`] (each
/// name's spelling kept in a second map) or a plain [`http::HeaderMap`].
trait UpstreamHead {
    fn map(&self) -> &http::HeaderMap;
    fn remove(&mut self, name: &HeaderName);
    /// Room for `n` more headers, where the head can make it.
    fn reserve(&mut self, n: usize);
    /// Sets `name` (as spelled, and parsed) to `value` alone.
    fn set(&mut self, name: &(&'static str, HeaderName), value: HeaderValue) -> Result<()>;
}

impl UpstreamHead for RequestHeader {
    fn map(&self) -> &http::HeaderMap {
        &self.headers
    }
    fn remove(&mut self, name: &HeaderName) {
        self.remove_header(name);
    }
    /// Pingora 0.9 gives no way to make room in its maps.
    fn reserve(&mut self, _: usize) {}
    fn set(&mut self, name: &(&'static str, HeaderName), value: HeaderValue) -> Result<()> {
        self.insert_header(name.0, value)
    }
}

impl UpstreamHead for http::HeaderMap {
    fn map(&self) -> &http::HeaderMap {
        self
    }
    fn remove(&mut self, name: &HeaderName) {
        http::HeaderMap::remove(self, name);
    }
    fn reserve(&mut self, n: usize) {
        // Past `http`'s limit (32,768 headers) the inserts below fail instead.
        let _ = self.try_reserve(n);
    }
    fn set(&mut self, name: &(&'static str, HeaderName), value: HeaderValue) -> Result<()> {
        self.try_insert(name.1.clone(), value)
            .or_err(ErrorType::InvalidHTTPHeader, "too many request headers")
            .map(drop)
    }
}

/// Rewrites `head` for the upstream: removes the identity headers a client sent (in every
/// spelling, [`is_identity_header`]) and, unless the upstream takes it, `Authorization`; sets the
/// caller's identity, the request id, the proxy secret and the client certificate (for an
/// upstream with a secret), `Host` (the upstream's `host:`, or its first address when the client
/// sent none) and `X-Forwarded-For` (`client` appended).
fn rewrite(head: &mut impl UpstreamHead, ctx: &RequestCtx, client: Option<IpAddr>) -> Result<()> {
    for name in names_to_strip(head.map(), is_identity_header) {
        head.remove(&name);
    }
    // Removed before the inserts below: one header fewer for the map to grow for.
    let up = ctx.upstream.as_ref();
    if !up.is_some_and(|u| u.pass_authorization) {
        head.remove(&http::header::AUTHORIZATION);
    }
    head.reserve(SET_AT_MOST);
    if let Some(identity) = &ctx.identity {
        // Encoded once per token: a clone of each value is a reference count.
        for (spelled, name, value) in &identity.headers {
            head.set(&(*spelled, name.clone()), value.clone())?;
        }
    }
    if let Some(id) = ctx.request_id.clone() {
        head.set(&X_REQUEST_ID, id)?;
    }
    if let Some(secret) = up.and_then(|u| u.proxy_secret.clone()) {
        head.set(&PROXY_SECRET, secret)?;
        // The verified client certificate, for an upstream that believes the proxy: the
        // authorization server (mTLS client authentication) or a gate behind the proxy.
        if let Some(cert) = ctx.client_cert.clone() {
            head.set(&CLIENT_CERT, cert)?;
        }
    }
    match up.and_then(|u| u.host.clone()) {
        Some(host) => head.set(&HOST, host)?,
        None if !head.map().contains_key(http::header::HOST) => {
            if let Some(up) = up {
                let first = up.addresses[0].to_string();
                let first = HeaderValue::try_from(first)
                    .or_err(ErrorType::InvalidHTTPHeader, "upstream address as Host")?;
                head.set(&HOST, first)?;
            }
        }
        None => {}
    }
    if let Some(client) = client {
        let forwarded = forwarded_for(head.map().get_all(&X_FORWARDED_FOR.1), client);
        // Visible ASCII: the client's lines were valid header values, and an address.
        let forwarded = HeaderValue::from_maybe_shared(Bytes::from(forwarded))
            .or_err(ErrorType::InvalidHTTPHeader, "X-Forwarded-For")?;
        head.set(&X_FORWARDED_FOR, forwarded)?;
    }
    Ok(())
}

/// `req` as [`RequestHeader::as_owned_parts`] gives it, but its headers copied into a map made
/// with room for the [`SET_AT_MOST`] that [`rewrite`] sets (a clone has none: it would grow).
fn plain_parts(req: &RequestHeader) -> http::request::Parts {
    let Ok(mut headers) = http::HeaderMap::try_with_capacity(req.headers.len() + SET_AT_MOST)
    else {
        return req.as_owned_parts();
    };
    for (name, value) in &req.headers {
        // Fewer than the map was made for: cannot fail.
        let _ = headers.try_append(name.clone(), value.clone());
    }
    let mut parts = http::Request::new(()).into_parts().0;
    parts.method = req.method.clone();
    parts.uri = req.uri.clone();
    parts.version = req.version;
    parts.headers = headers;
    parts.extensions = req.extensions.clone();
    parts
}

/// Whether `req`'s head is kept whole through [`RequestHeader::as_owned_parts`] and back (all but
/// its names' spelling): an HTTP/1.x request whose target its URI holds (origin form), not a target
/// Pingora keeps apart (absolute form, `CONNECT`, not UTF-8).
fn target_in_uri(req: &RequestHeader) -> bool {
    req.version != http::Version::HTTP_2
        && req.uri.scheme().is_none()
        && req
            .uri
            .path_and_query()
            .is_some_and(|pq| std::ptr::eq(pq.as_str().as_ptr(), req.raw_path().as_ptr()))
}

/// Whether a response is complete with its head: `HEAD`, `204`, `304`, or `Content-Length: 0`
/// (an informational or upgrade answer is not the end).
fn has_no_body(req: &RequestHeader, response: &ResponseHeader) -> bool {
    let status = response.status.as_u16();
    status >= 200
        && (req.method == http::Method::HEAD
            || matches!(status, 204 | 304)
            || response
                .headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() == b"0"))
}

/// The standard `X-Forwarded-For`: the lines a client or an earlier proxy sent, joined, and our
/// peer appended as the right-most entry, all in one line (built in one allocation).
fn forwarded_for(lines: GetAll<'_, HeaderValue>, peer: IpAddr) -> Vec<u8> {
    // Room for the lines, their separators, and an IPv6 address.
    let len = lines.iter().map(|l| l.len() + 2).sum::<usize>() + 39;
    let mut forwarded = Vec::with_capacity(len);
    for line in lines {
        forwarded.extend_from_slice(line.as_bytes());
        forwarded.extend_from_slice(b", ");
    }
    match peer {
        // Without the formatting machinery (every request, most often IPv4).
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    forwarded.push(b'.');
                }
                if octet >= 100 {
                    forwarded.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    forwarded.push(b'0' + octet / 10 % 10);
                }
                forwarded.push(b'0' + octet % 10);
            }
        }
        // Writing to a Vec cannot fail.
        IpAddr::V6(_) => drop(write!(forwarded, "{peer}")),
    }
    forwarded
}

/// Whether an HTTP/2 request's upstream connection should wait for the first piece of its body:
/// every request with a body to come, except a gRPC call (a streaming call may wait for the server
/// before it sends) and a request that asks for `100-continue` (its client waits for the answer
/// before the body). A stream whose body never comes then costs no upstream connection: under the
/// stall attack of `tests/h2_stalls.rs` each such stream held one (64 KiB of Pingora's read buffer,
/// allocated per upstream connection, and a file descriptor) until `body_idle_timeout`.
fn waits_for_body(req: &RequestHeader) -> bool {
    !is_grpc(req)
        && !req
            .headers
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads an HTTP/2 request body until its first non-empty piece (or its end) before the upstream
/// is chosen. Pingora keeps what was read in its retry buffer and sends it upstream first, through
/// `request_body_filter`. The wait is bounded as every body read is: the connection's
/// [`crate::h2_conn`] deadline ends it after `body_idle_timeout` without progress.
async fn read_first_body_piece(session: &mut Session) -> Result<()> {
    session.enable_retry_buffering();
    // A body that stops or a stream reset is the client's doing (no error-level line).
    while let Some(piece) = session
        .read_request_body()
        .await
        .map_err(|e| e.into_down())?
    {
        if !piece.is_empty() {
            break;
        }
    }
    Ok(())
}

/// Whether the request is a gRPC call (`content-type: application/grpc`, `+proto`, ...).
fn is_grpc(req: &RequestHeader) -> bool {
    req.headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The CORS headers (with `Vary`) the proxy's own answer to this request carries under `policy`,
/// so that a page of an allowed origin can read a refusal.
fn cors_headers(session: &Session, policy: Option<&CorsPolicy>) -> Vec<(HeaderName, HeaderValue)> {
    let Some(policy) = policy else {
        return Vec::new();
    };
    let mut out = policy.response_headers(&session.req_header().headers);
    if policy.varies() {
        out.push((http::header::VARY, HeaderValue::from_static("Origin")));
    }
    out
}

/// The answer to a preflight: `204` with the policy's headers, or `403` without any (the browser
/// then refuses the request it asked about).
async fn write_preflight(session: &mut Session, answer: Preflight, vary: bool) -> Result<()> {
    let (mut resp, body) = match answer {
        Preflight::Allowed(headers) => {
            let mut resp = ResponseHeader::build(204, Some(headers.len() + 2))?;
            for (name, value) in headers {
                resp.insert_header(name, value)?;
            }
            (resp, None)
        }
        Preflight::Refused => {
            let body = Bytes::from_static(
                br#"{"detail":"CORS preflight refused: origin, method or headers not allowed."}"#,
            );
            let mut resp = ResponseHeader::build(403, Some(4))?;
            resp.insert_header("Content-Type", Refusal::CONTENT_TYPE)?;
            resp.insert_header("Content-Length", body.len().to_string())?;
            (resp, Some(body))
        }
    };
    if vary {
        resp.insert_header(
            http::header::VARY,
            "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        )?;
    }
    let end = body.is_none();
    session.write_response_header(Box::new(resp), end).await?;
    if let Some(body) = body {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

/// Writes the gate's answer to a protected resource metadata request as it is.
async fn write_metadata(session: &mut Session, answer: MetadataAnswer) -> Result<()> {
    let mut resp = ResponseHeader::build(answer.status, Some(answer.headers.len() + 1))?;
    for (name, value) in answer.headers {
        resp.insert_header(name, value)?;
    }
    resp.insert_header("Content-Length", answer.body.len().to_string())?;
    let end = answer.body.is_empty();
    session.write_response_header(Box::new(resp), end).await?;
    if !end {
        session
            .write_response_body(Some(Bytes::from(answer.body)), true)
            .await?;
    }
    Ok(())
}

/// Writes the refusal's status, `WWW-Authenticate`, `Content-Type` and JSON body; to a gRPC call,
/// HTTP 200 with `grpc-status` and `grpc-message` (see [`Refusal::grpc`]) in trailers over HTTP/2
/// (in the headers over HTTP/1.1) and no message, which gRPC libraries report as that code.
async fn write_refusal(
    session: &mut Session,
    refusal: Refusal,
    grpc: bool,
    extra: &[(HeaderName, HeaderValue)],
) -> Result<()> {
    if grpc {
        let (code, message) = refusal.grpc();
        let mut status = http::HeaderMap::new();
        status.insert("grpc-status", HeaderValue::from(u16::from(code)));
        status.insert(
            "grpc-message",
            HeaderValue::from_str(&message).map_err(|_| Error::new(ErrorType::InternalError))?,
        );
        let mut resp = ResponseHeader::build(200, Some(5))?;
        resp.insert_header("Content-Type", "application/grpc")?;
        if let Some(w) = refusal.www_authenticate {
            resp.insert_header("WWW-Authenticate", w)?;
        }
        if !session.is_http2() {
            for (name, value) in &status {
                resp.insert_header(name.clone(), value.clone())?;
            }
            resp.insert_header("Content-Length", "0")?;
            session.write_response_header(Box::new(resp), false).await?;
            return session.write_response_body(None, true).await;
        }
        session.write_response_header(Box::new(resp), false).await?;
        return session.write_response_trailers(status).await;
    }
    let body = Bytes::from(refusal.body);
    let mut resp = ResponseHeader::build(refusal.status, Some(5))?;
    resp.insert_header("Content-Type", Refusal::CONTENT_TYPE)?;
    resp.insert_header("Content-Length", body.len().to_string())?;
    resp.insert_header("Cache-Control", "no-store")?;
    if let Some(w) = refusal.www_authenticate {
        resp.insert_header("WWW-Authenticate", w)?;
    }
    for (name, value) in extra {
        resp.append_header(name.clone(), value.clone())?;
    }
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn responses_complete_with_their_head() {
        let get = RequestHeader::build("GET", b"/", None).unwrap();
        let head = RequestHeader::build("HEAD", b"/", None).unwrap();
        let answer = |status: u16, length: Option<&str>| {
            let mut r = ResponseHeader::build(status, None).unwrap();
            if let Some(length) = length {
                r.insert_header("content-length", length).unwrap();
            }
            r
        };
        assert!(has_no_body(&get, &answer(204, None)));
        assert!(has_no_body(&get, &answer(304, None)));
        assert!(has_no_body(&get, &answer(401, Some("0"))));
        assert!(has_no_body(&head, &answer(200, Some("12"))));
        assert!(!has_no_body(&get, &answer(200, Some("12"))));
        assert!(
            !has_no_body(&get, &answer(200, None)),
            "chunked or to the close"
        );
        assert!(!has_no_body(&get, &answer(100, Some("0"))), "informational");
        assert!(!has_no_body(&head, &answer(103, None)), "informational");
    }

    #[test]
    fn only_a_target_the_uri_holds_takes_the_plain_map() {
        let origin = RequestHeader::build("GET", b"/a?b=1", None).unwrap();
        assert!(target_in_uri(&origin));
        let back = RequestHeader::from(origin.as_owned_parts());
        assert_eq!(back.raw_path(), b"/a?b=1", "the same target written");
        for kept_apart in [&b"http://example.com/a"[..], b"/\xff"] {
            let req = RequestHeader::build("GET", kept_apart, None).unwrap();
            assert!(!target_in_uri(&req), "{kept_apart:?}");
        }
        let mut h2 = origin.clone();
        h2.set_version(http::Version::HTTP_2);
        assert!(!target_in_uri(&h2));
    }

    #[test]
    fn forwarded_for_joins_every_line_and_appends_the_peer() {
        let mut headers = HeaderMap::new();
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let joined = |h: &HeaderMap, peer| forwarded_for(h.get_all(&X_FORWARDED_FOR.1), peer);
        assert_eq!(joined(&headers, peer), b"127.0.0.1");
        for ip in ["0.0.0.0", "10.200.9.255", "192.168.100.1", "1.20.3.40"] {
            assert_eq!(joined(&headers, ip.parse().unwrap()), ip.as_bytes());
        }
        for line in ["198.51.100.1", "10.0.0.2, 10.0.0.3"] {
            headers.append("x-forwarded-for", HeaderValue::from_static(line));
        }
        let v6: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        let line = joined(&headers, v6);
        assert_eq!(
            line,
            b"198.51.100.1, 10.0.0.2, 10.0.0.3, ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
        assert_eq!(line.capacity(), line.len(), "one allocation, no growth");
    }
}
