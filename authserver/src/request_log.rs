//! The authorization server's part of the request log: the access line. The middleware that
//! logs a response's error ([`http_serving::request_log`]) hands each request to [`AccessLines`],
//! which gives it its id and writes its access line (`resource_server::access_log`) with what
//! the handler noted: the caller ([`with_caller`], [`note_user`]) and the outcome ([`Outcome`]).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request};
use axum::http::{Extensions, HeaderValue};
use axum::response::Response;
use http_serving::request_log::{Access, Seen};
use resource_server::access_log::{AccessLine, AccessLog};
use resource_server::request_id;

use crate::client_ip::{IpRange, ProxySecret, is_trusted, trusted_for};

/// The middleware of the authorization server: errors and access lines.
pub type RequestLog = http_serving::RequestLog<AccessLines>;

/// The outcome of a refused request, as the access line's `decision` (an OAuth error code such
/// as `invalid_grant`).
#[derive(Clone, Copy, Debug)]
pub struct Outcome(pub &'static str);

/// Who made the request, as far as the handler learned: for the access line (never a secret).
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub client_id: Option<String>,
    /// The user's id (never a username: one typed into the wrong field may be a password).
    pub user: Option<String>,
}

/// `response`, naming its caller for the access line: the client id and the user's id.
pub fn with_caller(mut response: Response, client_id: &str, user: Option<&str>) -> Response {
    response.extensions_mut().insert(Caller {
        client_id: Some(client_id.to_owned()),
        user: user.map(str::to_owned),
    });
    response
}

/// Where an extractor that signs the visitor in notes who it is ([`note_user`]), for a response
/// that names no [`Caller`] itself (the views).
#[derive(Clone, Default)]
pub struct CallerSlot(Arc<OnceLock<String>>);

/// Notes the signed-in user (by id) of the request whose extensions these are.
pub fn note_user(request: &Extensions, user_id: i64) {
    if let Some(slot) = request.get::<CallerSlot>() {
        let _ = slot.0.set(user_id.to_string());
    }
}

/// Errors and the access lines `access` wants, each with the request's id: its `X-Request-Id`
/// when it came from a `trusted` proxy (or one proving the proxy `secret`, which then is the
/// only proof), else a new one.
pub fn with_access(
    access: AccessLog,
    trusted: Vec<IpRange>,
    secret: Option<ProxySecret>,
) -> RequestLog {
    http_serving::RequestLog::with(AccessLines {
        access: Arc::new(access),
        trust: Arc::new((trusted, secret)),
    })
}

/// The access lines of the authorization server, each with the request's id. What only the
/// access line needs (the start time, the slot for the user) is taken only while the access log
/// is active.
#[derive(Clone)]
pub struct AccessLines {
    access: Arc<AccessLog>,
    /// Whose `X-Request-Id` an access line keeps ([`request_id`]).
    trust: Arc<(Vec<IpRange>, Option<ProxySecret>)>,
}

impl AccessLines {
    /// The request's id for its access line.
    fn id_of(&self, request: &Request) -> HeaderValue {
        let (ranges, secret) = &*self.trust;
        let (ranges, proven) = trusted_for(ranges, secret.as_ref(), request.headers());
        let peer = request
            .extensions()
            .get::<ConnectInfo<std::net::SocketAddr>>()
            .map(|ConnectInfo(peer)| peer.ip());
        let trusted = proven || peer.is_some_and(|ip| is_trusted(ip, ranges));
        request_id::of(request.headers(), trusted)
    }
}

impl Access for AccessLines {
    /// The access log, the slot for the user, the start and the request id.
    type Begun = (Arc<AccessLog>, CallerSlot, Instant, HeaderValue);

    fn begin(&self, request: &mut Request) -> Option<Self::Begun> {
        if !self.access.active() {
            return None;
        }
        let slot = CallerSlot::default();
        request.extensions_mut().insert(slot.clone());
        let id = self.id_of(request);
        Some((self.access.clone(), slot, Instant::now(), id))
    }

    fn end((access, slot, start, id): Self::Begun, seen: &Seen<'_>, response: &Response) {
        if !access.wants(seen.status) {
            return;
        }
        let caller = response.extensions().get::<Caller>();
        AccessLine {
            server: "authserver",
            method: seen.method.as_str(),
            path: seen.path,
            route: seen.route,
            decision: response.extensions().get::<Outcome>().map(|o| o.0),
            client_id: caller.and_then(|c| c.client_id.as_deref()),
            user: caller
                .and_then(|c| c.user.as_deref())
                .or_else(|| slot.0.get().map(String::as_str)),
            status: seen.status,
            upstream_status: None,
            request_id: id.to_str().ok(),
            latency: start.elapsed(),
            ..AccessLine::default()
        }
        .emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::OAuthError;
    use crate::web::WebError;
    use axum::Router;
    use axum::body::Body;
    use axum::response::IntoResponse;
    use axum::routing::get;
    use test_support::LogBuffer;
    use tower::ServiceExt;

    fn captured() -> (LogBuffer, tracing::subscriber::DefaultGuard) {
        let out = LogBuffer::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        (out, tracing::subscriber::set_default(subscriber))
    }

    #[test]
    fn conversions_log_nothing() {
        let (out, _guard) = captured();
        let response = OAuthError::Server(anyhow::anyhow!("disk on fire")).into_response();
        assert_eq!(response.status(), 500);
        let response = WebError::Internal("disk on fire".into()).into_response();
        assert_eq!(response.status(), 500);
        assert_eq!(out.text(), "", "a conversion logged");
    }

    #[tokio::test]
    async fn the_middleware_logs_a_carried_error_once_with_the_access_line() {
        let (out, _guard) = captured();
        let app = Router::new()
            .route(
                "/o/token/{x}",
                get(|| async { OAuthError::Server(anyhow::anyhow!("disk on fire")) }),
            )
            .route(
                "/ok",
                get(|| async { with_caller("fine".into_response(), "app-1", Some("7")) }),
            )
            .layer(with_access(
                AccessLog::new(Default::default()),
                Vec::new(),
                None,
            ));
        let request = |uri: &str| {
            axum::http::Request::builder()
                .uri(uri)
                .header("x-request-id", "from-an-untrusted-client")
                .body(Body::empty())
                .unwrap()
        };
        let failed = app
            .clone()
            .oneshot(request("/o/token/7?code=s3cret"))
            .await
            .unwrap();
        assert_eq!(failed.status(), 500);
        let body = axum::body::to_bytes(failed.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(
            &body[..],
            br#"{"error":"server_error"}"#,
            "the body is unchanged"
        );
        let ok = app.oneshot(request("/ok")).await.unwrap();
        assert_eq!(ok.status(), 200);

        let text = out.text();
        let failures: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("request failed"))
            .collect();
        assert_eq!(failures.len(), 1, "{text}");
        for field in ["disk on fire", "route=\"/o/token/{x}\"", "status=500"] {
            assert!(failures[0].contains(field), "{field} in {}", failures[0]);
        }
        let access: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("access: request"))
            .collect();
        assert_eq!(access.len(), 2, "{text}");
        for field in [
            "method=\"GET\"",
            "path=\"/o/token/7\"",
            "decision=\"server_error\"",
            "status=500",
            "latency_ms=",
        ] {
            assert!(access[0].contains(field), "{field} in {}", access[0]);
        }
        for field in ["client_id=\"app-1\"", "user=\"7\"", "status=200"] {
            assert!(access[1].contains(field), "{field} in {}", access[1]);
        }
        // Every access line has a request id; an untrusted client's is not kept.
        assert!(access.iter().all(|l| l.contains("request_id=")), "{text}");
        assert!(!text.contains("from-an-untrusted-client"), "{text}");
        assert!(
            !text.contains("s3cret"),
            "the query string was logged: {text}"
        );
    }

    #[tokio::test]
    async fn a_request_id_is_kept_only_from_the_proxy_that_proves_itself() {
        let (out, _guard) = captured();
        let secret = "a-proxy-secret-0123456789";
        let app = Router::new()
            .route("/ok", get(|| async { "fine" }))
            .layer(with_access(
                AccessLog::new(Default::default()),
                Vec::new(),
                Some(ProxySecret::new(secret).unwrap()),
            ));
        let request = |proof: &str| {
            axum::http::Request::builder()
                .uri("/ok")
                .header("x-request-id", "req-from-the-proxy")
                .header(crate::client_ip::PROXY_SECRET_HEADER, proof)
                .body(Body::empty())
                .unwrap()
        };
        app.clone().oneshot(request(secret)).await.unwrap();
        app.oneshot(request("not-the-proxy-secret-0123"))
            .await
            .unwrap();
        let text = out.text();
        let access: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("access: request"))
            .collect();
        assert_eq!(access.len(), 2, "{text}");
        assert!(
            access[0].contains("request_id=\"req-from-the-proxy\""),
            "{}",
            access[0]
        );
        assert!(
            !access[1].contains("req-from-the-proxy") && access[1].contains("request_id="),
            "{}",
            access[1]
        );
    }

    /// Without a proxy secret, a request id is kept from a peer in the trusted ranges (an
    /// IPv4-mapped address as its IPv4 one) and replaced from any other.
    #[tokio::test]
    async fn a_request_id_is_kept_only_from_a_trusted_peer() {
        let (out, _guard) = captured();
        let app = Router::new()
            .route("/ok", get(|| async { "fine" }))
            .layer(with_access(
                AccessLog::new(Default::default()),
                vec!["127.0.0.0/8".parse().unwrap()],
                None,
            ));
        for (peer, id) in [
            ("127.0.0.1:1", "from-loopback"),
            ("[::ffff:127.0.0.1]:1", "from-mapped-loopback"),
            ("10.0.0.1:1", "from-elsewhere"),
        ] {
            let mut request = axum::http::Request::builder()
                .uri("/ok")
                .header("x-request-id", id)
                .body(Body::empty())
                .unwrap();
            let peer: std::net::SocketAddr = peer.parse().unwrap();
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request).await.unwrap();
        }
        let text = out.text();
        let access: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("access: request"))
            .collect();
        assert_eq!(access.len(), 3, "{text}");
        assert!(
            access[0].contains("request_id=\"from-loopback\""),
            "{}",
            access[0]
        );
        assert!(
            access[1].contains("request_id=\"from-mapped-loopback\""),
            "{}",
            access[1]
        );
        assert!(
            !access[2].contains("from-elsewhere") && access[2].contains("request_id="),
            "{}",
            access[2]
        );
    }
}
