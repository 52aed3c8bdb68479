//! Errors logged in one place: a response carries the error behind it in its extensions
//! ([`with_error`], where the response is made; nothing is logged there), and the one middleware
//! [`LogRequests`] of the authorization server and the example API logs it. A server that also
//! writes an access line per request plugs it in as an [`Access`] (the authorization server's
//! `request_log`); the example API's requests are logged by the proxy in front.

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, Uri};
use axum::response::Response;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// The cause of a failed response, for the log only (never sent).
#[derive(Clone, Debug)]
pub struct ResponseError(pub Arc<str>);

/// `response`, carrying `error` for [`LogRequests`] to log.
pub fn with_error(mut response: Response, error: impl Display) -> Response {
    response
        .extensions_mut()
        .insert(ResponseError(error.to_string().into()));
    response
}

/// What a server writes of each request besides its error (an access line): [`Access::begin`]
/// when the request comes in, [`Access::end`] with its response. `()` writes nothing.
pub trait Access: Clone {
    /// What is kept of the request until its response.
    type Begun: Send + 'static;

    /// Whether this request is to be written, and what of it to keep (it may leave something in
    /// the request's extensions for the handler).
    fn begin(&self, request: &mut Request) -> Option<Self::Begun>;

    /// Writes the request, `seen`, answered with `response`.
    fn end(begun: Self::Begun, seen: &Seen<'_>, response: &Response);
}

impl Access for () {
    type Begun = ();

    fn begin(&self, _: &mut Request) -> Option<()> {
        None
    }

    fn end((): (), _: &Seen<'_>, _: &Response) {}
}

/// A request as [`LogRequests`] saw it: the path without its query (which may hold a secret).
pub struct Seen<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    /// The route it matched, as written in the router (`/o/token/{x}`).
    pub route: Option<&'a str>,
    pub status: u16,
}

/// What [`LogRequests`] writes: errors, and what `A` writes. As a layer (`Router::layer`), it
/// wraps every route in [`LogRequests`].
#[derive(Clone)]
pub struct RequestLog<A = ()> {
    access: A,
}

impl RequestLog {
    /// Errors only.
    pub fn errors_only() -> RequestLog {
        RequestLog { access: () }
    }
}

impl<A: Access> RequestLog<A> {
    /// Errors, and what `access` writes.
    pub fn with(access: A) -> RequestLog<A> {
        RequestLog { access }
    }
}

impl<S, A: Access> Layer<S> for RequestLog<A> {
    type Service = LogRequests<S, A>;

    fn layer(&self, inner: S) -> LogRequests<S, A> {
        LogRequests {
            inner,
            access: self.access.clone(),
        }
    }
}

/// The middleware: logs the error a response carries at error level, and hands the request to
/// `A` if it wants it. A service of its own rather than `axum::middleware::from_fn`, which boxes
/// the route and the future of every request.
#[derive(Clone)]
pub struct LogRequests<S, A = ()> {
    inner: S,
    access: A,
}

impl<S, A> Service<Request> for LogRequests<S, A>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    A: Access,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Logged<S::Future, A>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let begun = self.access.begin(&mut request);
        // A clone of the URI and of the matched route shares their bytes: nothing is copied.
        let asked = Asked {
            method: request.method().clone(),
            uri: request.uri().clone(),
            route: request.extensions().get::<MatchedPath>().cloned(),
            begun,
        };
        Logged {
            answer: self.inner.call(request),
            asked: Some(asked),
        }
    }
}

/// What [`Logged`] keeps of the request until its response.
struct Asked<A: Access> {
    method: Method,
    uri: Uri,
    route: Option<MatchedPath>,
    begun: Option<A::Begun>,
}

pin_project! {
    /// The response of a route, logged once it is ready.
    pub struct Logged<F, A: Access> {
        #[pin]
        answer: F,
        asked: Option<Asked<A>>,
    }
}

impl<F, A> Future for Logged<F, A>
where
    F: Future<Output = Result<Response, Infallible>>,
    A: Access,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Ok(response) = ready!(this.answer.poll(cx));
        if let Some(asked) = this.asked.take() {
            asked.log(&response);
        }
        Poll::Ready(Ok(response))
    }
}

impl<A: Access> Asked<A> {
    fn log(self, response: &Response) {
        let seen = Seen {
            method: &self.method,
            path: self.uri.path(),
            route: self.route.as_ref().map(MatchedPath::as_str),
            status: response.status().as_u16(),
        };
        if let Some(ResponseError(error)) = response.extensions().get() {
            let (method, path, route, status) = (seen.method, seen.path, seen.route, seen.status);
            tracing::error!(%error, %method, path, route, status, "request failed");
        }
        if let Some(begun) = self.begun {
            A::end(begun, &seen, response);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::routing::get;
    use tower::ServiceExt;

    #[tokio::test]
    async fn errors_only_logs_a_carried_error_once_and_nothing_else() {
        let out = test_support::LogBuffer::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let app = Router::new()
            .route(
                "/users/{id}",
                get(|| async {
                    with_error(
                        StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                        "disk on fire",
                    )
                }),
            )
            .route("/ok", get(|| async { "fine" }))
            .layer(RequestLog::errors_only());
        let request = |uri: &str| Request::builder().uri(uri).body(Body::empty()).unwrap();
        let failed = app
            .clone()
            .oneshot(request("/users/7?token=s3cret"))
            .await
            .unwrap();
        assert_eq!(failed.status(), 500);
        assert_eq!(app.oneshot(request("/ok")).await.unwrap().status(), 200);

        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        for field in [
            "request failed",
            "disk on fire",
            "method=GET",
            "path=\"/users/7\"",
            "route=\"/users/{id}\"",
            "status=500",
        ] {
            assert!(lines[0].contains(field), "{field} in {}", lines[0]);
        }
        assert!(!text.contains("s3cret"), "the query was logged: {text}");
    }
}
