//! The HTTP/1.1 server loop of the authorization server and the example API: connect info on
//! every request, a deadline for request headers and for request bodies, announced bodies over
//! the limit refused at once, and a graceful shutdown that drains requests in flight.

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
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
    let router = router.layer(axum::middleware::from_fn_with_state(limits, read_body));
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
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                tower::ServiceExt::oneshot(router.clone(), request)
            },
        );
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

/// Reads the whole body before the handler runs, within the size and time limits, so no
/// handler can be kept waiting by a client.
async fn read_body(State(limits): State<Limits>, request: Request, next: Next) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if announced.is_some_and(|length| length > limits.max_body as u64) {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "Request body is too large.");
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(limits.body_timeout, collect(body, limits.max_body)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(BodyError::TooLarge)) => {
            refuse(StatusCode::PAYLOAD_TOO_LARGE, "Request body is too large.")
        }
        Ok(Err(BodyError::Broken)) => refuse(
            StatusCode::BAD_REQUEST,
            "The request body could not be read.",
        ),
        Err(_) => refuse(
            StatusCode::REQUEST_TIMEOUT,
            "The request body was not received in time.",
        ),
    }
}

enum BodyError {
    TooLarge,
    Broken,
}

async fn collect(mut body: Body, max: usize) -> Result<Bytes, BodyError> {
    let mut buffer = Vec::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|_| BodyError::Broken)?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buffer))
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
