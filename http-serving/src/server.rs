//! The HTTP/1.1 server loop of the authorization server and the example API: connect info on
//! every request, a deadline for request headers and for request bodies, announced bodies over
//! the limit refused at once, and a graceful shutdown that drains requests in flight.

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What a client may send and how slowly.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body, announced or sent: `413` beyond it.
    pub max_body: usize,
    /// Time to send a request's headers (and the longest idle wait between requests on a
    /// kept-alive connection): the connection is closed after it.
    pub header_timeout: Duration,
    /// Time to send a request's whole body: `408` after it.
    pub body_timeout: Duration,
}

impl Limits {
    /// Small forms and JSON objects are all these servers read.
    pub const DEFAULT: Limits = Limits {
        max_body: 64 * 1024,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
    };
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, lets the
/// requests in flight finish and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                accept_failed(error).await;
                continue;
            }
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |request| {
            let router = router.clone();
            async move {
                let response = match read_body(request, limits).await {
                    Ok(mut request) => {
                        request.extensions_mut().insert(ConnectInfo(peer));
                        match tower::ServiceExt::oneshot(router, request).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        }
                    }
                    Err(refused) => refused,
                };
                Ok::<_, Infallible>(response)
            }
        });
        let mut stopping = stopping.clone();
        connections.spawn(async move {
            let mut conn = pin!(
                hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .serve_connection(TokioIo::new(stream), service)
            );
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = async { drop(stopping.wait_for(|stop| *stop).await) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(error) = result {
                // Timeouts, resets and malformed requests: the client's doing, not ours.
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// A failed `accept`: the peer gave up (go on at once), or the process is out of file
/// descriptors or similar (say so and wait a little, instead of spinning).
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Reads the whole body before the request is routed, within the size and time limits, so no
/// handler can be kept waiting by a client; the refusal to send instead when it is not.
async fn read_body(request: hyper::Request<Incoming>, limits: Limits) -> Result<Request, Response> {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if announced.is_some_and(|length| length > limits.max_body as u64) {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request body is too large.",
        ));
    }
    let (parts, body) = request.into_parts();
    // A small body has usually arrived with the headers: the deadline's timer is armed only
    // for one that has not.
    let mut collecting = pin!(collect(body, limits.max_body));
    let collected = match poll_fn(|cx| Poll::Ready(collecting.as_mut().poll(cx))).await {
        Poll::Ready(collected) => Ok(collected),
        Poll::Pending => tokio::time::timeout(limits.body_timeout, collecting).await,
    };
    match collected {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Ok(Err(BodyError::TooLarge)) => Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request body is too large.",
        )),
        Ok(Err(BodyError::Broken)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "The request body could not be read.",
        )),
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            "The request body was not received in time.",
        )),
    }
}

enum BodyError {
    TooLarge,
    Broken,
}

/// The body's bytes: the one frame a small body usually comes in as it is (no copy), else the
/// frames joined.
async fn collect(mut body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let mut single = Bytes::new();
    let mut joined: Option<Vec<u8>> = None;
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|_| BodyError::Broken)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let so_far = joined.as_ref().map_or(single.len(), Vec::len);
        if so_far + data.len() > max {
            return Err(BodyError::TooLarge);
        }
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if single.is_empty() => single = data,
            None => joined = Some([&single[..], &data[..]].concat()),
        }
    }
    Ok(joined.map_or(single, Bytes::from))
}

/// `{"detail": …}` and the connection closed: the rest of the body is not worth reading.
fn refuse(status: StatusCode, detail: &str) -> Response {
    let mut response =
        (status, axum::Json(serde_json::json!({ "detail": detail }))).into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
