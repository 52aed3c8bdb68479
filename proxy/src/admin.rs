//! The admin listener: `/healthz`, `/readyz`, Prometheus `/metrics` and the application's
//! probes (`/app-health/…`, see [`crate::app_probes`]), on its own address.

use async_trait::async_trait;
use http::{Method, Response, StatusCode, header};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use resource_server::metrics::Registry;

use crate::app_probes;
use crate::state::SharedState;

/// The admin endpoints (a Pingora `ServeHttp` app).
pub struct Admin {
    shared: SharedState,
    /// The process's one registry ([`crate::scrape::registry`]).
    registry: Registry,
}

impl Admin {
    pub fn new(shared: &SharedState) -> Admin {
        Admin {
            shared: shared.clone(),
            registry: crate::scrape::registry(shared),
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        if req.method != Method::GET && req.method != Method::HEAD {
            return reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                b"method not allowed\n".to_vec(),
            );
        }
        let path = req.uri.path();
        if path.starts_with(app_probes::PREFIX) {
            let probes = self.shared.app_probes();
            return match probes.get(path) {
                // The configured probe as it was written: this request's query and headers are
                // not forwarded.
                Some(probe) if req.uri.query().is_none() => {
                    let (status, text) = probes.run(probe).await;
                    reply(status, "text/plain", text.into_bytes())
                }
                _ => reply(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec()),
            };
        }
        match path {
            "/healthz" => reply(StatusCode::OK, "text/plain", b"ok\n".to_vec()),
            "/readyz" => match self.shared.readiness() {
                Ok(()) => match self.shared.degraded() {
                    None => reply(StatusCode::OK, "text/plain", b"ready\n".to_vec()),
                    Some(why) => reply(
                        StatusCode::OK,
                        "text/plain",
                        format!("ready (degraded: {why})\n").into_bytes(),
                    ),
                },
                Err(why) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("not ready: {why}\n").into_bytes(),
                ),
            },
            "/metrics" => reply(
                StatusCode::OK,
                resource_server::metrics::CONTENT_TYPE,
                resource_server::metrics::encode(&self.registry).into_bytes(),
            ),
            _ => reply(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec()),
        }
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let len = resp.body().len();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(len));
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    resp
}
