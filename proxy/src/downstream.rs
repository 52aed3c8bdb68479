//! Limits on client connections that Pingora 0.9 lacks: a deadline for the whole request head, a
//! body idle timeout, a cap on the connections open at once on each listener, and TLS handshakes
//! inside that cap under the head deadline.
//!
//! Pingora reads a request head with a timeout per read (60 s) and none for the whole head, so a
//! client sending a header byte every few seconds holds its connection for ever. [`Guarded`]
//! wraps a Pingora HTTP app (the proxy, the admin endpoints): it reads each request head itself
//! under the deadline, then hands the bytes to Pingora as a pipelined prefix, which Pingora parses
//! before it reads the socket again. That holds for HTTP/1.x in cleartext and over TLS (the head
//! is read from the decrypted stream). Pingora's listeners would do the TLS handshake before the
//! app sees the connection, uncounted, for up to 60 s each and with an ERROR line per failure:
//! the listeners are plain TCP for Pingora, and [`Guarded`] does the handshake itself once the
//! connection holds its slot, within `head_timeout`, failures logged at debug and counted. An
//! HTTP/2 connection (ALPN `h2`, or the h2c preface on a listener with `h2c: true`) is handed
//! whole to Pingora's own HTTP/2 loop after the cap, wrapped by [`crate::h2_conn`] (the client
//! preface due within `head_timeout`, request bodies within `body_idle_timeout`), with the
//! [`h2_options`] limits and an idle timeout between streams.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use pingora::apps::{HttpPersistentSettings, HttpServerApp, HttpServerOptions, ServerApp};
use pingora::listeners::tls::Acceptor;
use pingora::listeners::{ALPN, L4BufferSettings, ListenerConfig};
use pingora::prelude::fast_timeout::fast_timeout;
use pingora::protocols::http::ServerSession;
use pingora::protocols::http::v2::server::{H2Options, default_h2_options};
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, Peek, Stream};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::h2_conn::H2Watch;
use crate::waiting::{self, Wait, Waiting};

/// Largest request head read (request line and headers): `431` beyond it. Browsers' cookie
/// limits stay well under it; nginx's default is 32 KiB too.
pub const MAX_HEAD: usize = 32 * 1024;
/// How often a refused connection may be logged.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// How long a refusal or timeout reply may take to send before the connection is just closed.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// How long, and how much, a closing reply reads of what the client still sends.
const LINGER: Duration = Duration::from_millis(200);
const LINGER_BYTES: usize = 64 * 1024;
/// The head buffer's first allocation and growth step: most request heads fit in one.
const HEAD_CHUNK: usize = 2048;
/// Pingora's socket buffers: no read buffer (64 KiB by default, allocated for every connection
/// at accept: most of what a connection cost); request heads are read into a buffer of their
/// own and bodies into Pingora's. The write buffer stays at Pingora's default (one MSS).
const SOCKET_BUFFERS: L4BufferSettings = L4BufferSettings {
    read: Some(0),
    write: None,
};

/// Streams open at once on one HTTP/2 connection (RFC 9113 §6.5.2 SETTINGS_MAX_CONCURRENT_STREAMS).
pub const H2_MAX_STREAMS: u32 = 100;
/// The most a stream's or connection's peer may send before the proxy reads it (flow-control
/// window): a request body is passed on as it comes, never held whole.
pub const H2_WINDOW: u32 = 64 * 1024;

/// Pingora's HTTP/2 settings for the proxy listener: at most [`H2_MAX_STREAMS`] streams, header
/// lists (decoded) up to [`MAX_HEAD`] as for HTTP/1, flow-control windows of [`H2_WINDOW`].
pub fn h2_options() -> H2Options {
    let mut options = default_h2_options();
    options
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(MAX_HEAD as u32)
        .initial_window_size(H2_WINDOW)
        .initial_connection_window_size(H2_WINDOW);
    options
}

/// Pingora's server options: h2c with prior knowledge when `h2c`, and HTTP/2 connections closed
/// after `keepalive_timeout` without a stream.
pub fn server_options(h2c: bool, limits: &ConnectionLimits) -> HttpServerOptions {
    let mut options = HttpServerOptions::default();
    options.h2c = h2c;
    options.h2_idle_timeout = Some(limits.keepalive_timeout);
    options
}

/// The `connections:` section, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time to send a whole request head, from the connection's start (or a later request's
    /// first byte); the connection is closed after it (`408` if part of a head came).
    pub head_timeout: Duration,
    /// Longest silence while a request body is read or the response written.
    pub body_idle_timeout: Duration,
    /// Longest wait for the next request on a kept-alive connection.
    pub keepalive_timeout: Duration,
    /// Connections open at once on the proxy listener; more are answered `503` and closed.
    pub max: usize,
    /// The same for the admin listener.
    pub admin_max: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            head_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            max: 1024,
            admin_max: 64,
        }
    }
}

/// A listener endpoint with [`SOCKET_BUFFERS`].
pub fn endpoint(addr: &str) -> ListenerConfig {
    ListenerConfig::tcp(addr).l4_buffer(SOCKET_BUFFERS)
}

/// One listener's connection count and cap, and what it refused or timed out (for `/metrics`).
#[derive(Debug)]
pub struct ListenerGate {
    /// The `listener` label: `proxy` or `admin`.
    pub name: &'static str,
    pub max: usize,
    open: AtomicUsize,
    refused: AtomicU64,
    head_timeouts: AtomicU64,
    tls_failures: AtomicU64,
    /// The HTTP/2 connections of this listener, their preface and body deadlines.
    pub h2: Arc<H2Watch>,
    /// On a listener that makes room at its cap: the connections waiting for their client.
    waiting: Option<Waiting>,
    /// Refusals counted in the last log line, and when the next may be written (ms since epoch).
    refused_logged: AtomicU64,
    next_log_ms: AtomicU64,
    epoch: Instant,
}

/// A connection counted against its listener's cap until dropped.
struct Slot(Arc<ListenerGate>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ListenerGate {
    /// A listener's gate; `body_idle`: how long an HTTP/2 request body may stop coming.
    pub fn new(name: &'static str, max: usize, body_idle: Duration) -> Arc<ListenerGate> {
        Arc::new(ListenerGate {
            name,
            max,
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            head_timeouts: AtomicU64::new(0),
            tls_failures: AtomicU64::new(0),
            h2: H2Watch::new(body_idle, max),
            waiting: None,
            refused_logged: AtomicU64::new(0),
            next_log_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// The same for a listener that, at its cap, closes the connection that has waited longest
    /// for its client (a handshake, a request head) to let a new one in, rather than refuse it:
    /// the admin listener, whose probes idle connections would otherwise keep out.
    pub fn making_room(name: &'static str, max: usize, body_idle: Duration) -> Arc<ListenerGate> {
        let mut gate = Arc::into_inner(Self::new(name, max, body_idle)).expect("just made");
        gate.waiting = Some(Waiting::default());
        Arc::new(gate)
    }

    /// Connections closed to make room for a new one at the cap.
    pub fn evicted(&self) -> u64 {
        self.waiting.as_ref().map_or(0, Waiting::evicted)
    }

    /// The connection starts waiting for its client (on a listener that makes room).
    fn wait(&self) -> Option<Wait> {
        self.waiting.as_ref().map(Waiting::wait)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Connections refused at the cap so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections closed because their request head (or HTTP/2 preface) did not arrive in time.
    pub fn head_timeouts(&self) -> u64 {
        self.head_timeouts.load(Ordering::Relaxed) + self.h2.preface_timeouts()
    }

    /// Connections closed because their TLS handshake failed or did not finish in time.
    pub fn tls_failures(&self) -> u64 {
        self.tls_failures.load(Ordering::Relaxed)
    }

    fn enter(self: &Arc<Self>) -> Option<Slot> {
        let mut open = self.open.load(Ordering::Acquire);
        loop {
            if open >= self.max {
                // The evicted connection gives its slot back in a moment (at most
                // `waiting::EVICTION_GRACE`): until then the count is over the cap by the
                // evictions under way, and never over twice the cap.
                if open < self.max.saturating_mul(2)
                    && self.waiting.as_ref().is_some_and(Waiting::evict_oldest)
                {
                    self.open.fetch_add(1, Ordering::AcqRel);
                    return Some(Slot(self.clone()));
                }
                self.refuse();
                return None;
            }
            match self.open.compare_exchange_weak(
                open,
                open + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(Slot(self.clone())),
                Err(now) => open = now,
            }
        }
    }

    /// Counts a refusal; logs the refusals since the last line, at most once per
    /// [`REFUSAL_LOG_INTERVAL`].
    fn refuse(&self) {
        let total = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_log_ms.load(Ordering::Acquire);
        let interval = REFUSAL_LOG_INTERVAL.as_millis() as u64;
        if now >= next
            && self
                .next_log_ms
                .compare_exchange(next, now + interval, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let since = total - self.refused_logged.swap(total, Ordering::AcqRel);
            tracing::warn!(
                listener = self.name,
                max = self.max,
                refused = since,
                "connection limit reached: new connections answered 503 and closed (connections.max / connections.admin_max)"
            );
        }
    }
}

/// A Pingora HTTP app behind the [`ConnectionLimits`] of one listener.
pub struct Guarded<A> {
    app: Arc<A>,
    limits: ConnectionLimits,
    gate: Arc<ListenerGate>,
    /// The listener's TLS, when it serves TLS (its listener is plain TCP for Pingora).
    tls: Option<Acceptor>,
}

impl<A> Guarded<A> {
    pub fn new(app: A, limits: ConnectionLimits, gate: Arc<ListenerGate>) -> Self {
        Guarded {
            app: Arc::new(app),
            limits,
            gate,
            tls: None,
        }
    }

    /// The same, doing `tls`'s handshake on each connection once it holds its slot.
    pub fn with_tls(mut self, tls: Option<Acceptor>) -> Self {
        self.tls = tls;
        self
    }

    /// The TLS handshake on `stream` (the accepted TCP connection) within `head_timeout`;
    /// `None` (counted, logged at debug: a scanner's failures are no operator's concern) when it
    /// fails or does not finish.
    async fn handshake(&self, tls: &Acceptor, stream: Stream) -> Option<Stream> {
        let tcp = match stream.into_any().downcast::<L4Stream>() {
            Ok(tcp) => *tcp,
            Err(_) => {
                tracing::warn!(listener = self.gate.name, "not a TCP connection: closed");
                return None;
            }
        };
        let socket = tcp.get_socket_digest();
        let handshake = async move {
            // rustls's state and buffers are made once the ClientHello starts: a connection
            // that sends nothing costs its task and socket only.
            let mut tcp = tcp;
            tcp.try_peek(&mut [0u8; 1])
                .await
                .map_err(|e| format!("before the ClientHello: {e}"))?;
            tls.tls_handshake(tcp).await.map_err(|e| e.to_string())
        };
        let wait = self.gate.wait();
        let failure = tokio::select! {
            done = tokio::time::timeout(self.limits.head_timeout, handshake) => match done {
                Ok(Ok(tls)) => return Some(Box::new(tls)),
                Ok(Err(e)) => e,
                Err(_) => "not finished within connections.head_timeout".to_owned(),
            },
            _ = waiting::evicted(wait.as_ref()) => return None,
        };
        self.gate.tls_failures.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            listener = self.gate.name,
            peer = socket
                .as_ref()
                .and_then(|d| d.peer_addr())
                .map(ToString::to_string),
            failure,
            "TLS handshake failed"
        );
        None
    }
}

/// How reading one request head ended.
enum Head {
    /// A complete head (perhaps malformed: Pingora judges), with any bytes after it.
    Complete(BytesMut),
    /// The client closed, went idle between requests, or the server is stopping.
    Gone,
    /// The deadline passed; `partial`: part of a head had come.
    TimedOut {
        partial: bool,
    },
    TooLarge,
}

#[async_trait]
impl<A> ServerApp for Guarded<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let Some(_slot) = self.gate.enter() else {
            // Over TLS, before any handshake: just closed.
            if self.tls.is_none() {
                reply(&mut stream, "503 Service Unavailable", "Retry-After: 1\r\n").await;
            }
            return None;
        };
        if let Some(tls) = &self.tls {
            // Boxed: the handshake's future is some kilobytes, which every connection's task
            // would otherwise carry, TLS or not, for as long as it lives.
            stream = Box::pin(self.handshake(tls, stream)).await?;
        }
        if self.is_h2(&mut stream).await? {
            // Pingora's HTTP/2 loop, with the app's h2_options and h2_idle_timeout; the client's
            // preface must come within head_timeout (Pingora waits for it for ever), and request
            // bodies within body_idle_timeout (Pingora has no timeout there).
            let stream = self.gate.h2.wrap(stream, self.limits.head_timeout);
            return ServerApp::process_new(&self.app, stream, shutdown).await;
        }
        let mut persistent: Option<HttpPersistentSettings> = None;
        let mut first = true;
        loop {
            let head = match self.read_head(&mut stream, first, shutdown).await {
                Head::Complete(head) => head,
                Head::Gone => return None,
                Head::TimedOut { partial } => {
                    self.gate.head_timeouts.fetch_add(1, Ordering::Relaxed);
                    if partial {
                        reply(&mut stream, "408 Request Timeout", "").await;
                    }
                    return None;
                }
                Head::TooLarge => {
                    reply(&mut stream, "431 Request Header Fields Too Large", "").await;
                    return None;
                }
            };
            let mut session = ServerSession::new_http1(stream);
            match persistent.take() {
                Some(settings) => settings.apply_to_session(&mut session),
                None => {
                    // What Pingora sets on a new connection, with our keep-alive timeout.
                    let keepalive = (!*shutdown.borrow())
                        .then(|| self.limits.keepalive_timeout.as_secs().max(1));
                    session.set_keepalive(keepalive);
                    session.set_keepalive_reuses_remaining(
                        self.app
                            .server_options()
                            .and_then(|o| o.keepalive_request_limit),
                    );
                }
            }
            session.set_pipelined_prefix(head);
            session.set_read_timeout(Some(self.limits.body_idle_timeout));
            session.set_write_timeout(Some(self.limits.body_idle_timeout));
            let reused = self.app.process_new_http(session, shutdown).await?;
            (stream, persistent) = reused.consume();
            first = false;
        }
    }

    async fn cleanup(&self) {
        self.app.http_cleanup().await;
    }
}

impl<A: HttpServerApp> Guarded<A> {
    /// Whether the connection speaks HTTP/2: ALPN `h2` over TLS, or, on a cleartext listener
    /// with h2c on, a first request starting `PRI` (the preface; no HTTP/1 method begins so).
    /// `None`: the client sent nothing within `head_timeout`, or closed.
    async fn is_h2(&self, stream: &mut Stream) -> Option<bool> {
        if stream.get_ssl_digest().is_some() {
            return Some(matches!(stream.selected_alpn_proto(), Some(ALPN::H2)));
        }
        if !self.app.server_options().is_some_and(|o| o.h2c) {
            return Some(false);
        }
        // Peeked bytes stay in the stream for whoever reads it next.
        let mut start = [0u8; 3];
        match tokio::time::timeout(self.limits.head_timeout, stream.try_peek(&mut start)).await {
            Ok(Ok(true)) => Some(&start == b"PRI"),
            Ok(Ok(false)) => Some(false),
            _ => None,
        }
    }
}

impl<A> Guarded<A> {
    /// Reads one request head within `head_timeout`: counted from now on a new connection, from
    /// the first byte on a kept-alive one (which may first sit idle for `keepalive_timeout`).
    /// Both are Pingora's timers (10 ms steps, one clock thread), as its own reads use: a tokio
    /// timer per request woke the runtime's I/O driver (an eventfd write, 0.3 a request) each
    /// time it became the earliest.
    async fn read_head(&self, stream: &mut Stream, first: bool, shutdown: &ShutdownWatch) -> Head {
        let mut stopping = shutdown.clone();
        let stopping = stopping.wait_for(|stop| *stop);
        tokio::pin!(stopping);
        let wait = self.gate.wait();
        let evicted = waiting::evicted(wait.as_ref());
        tokio::pin!(evicted);
        let mut head = BytesMut::new();
        if !first {
            head.reserve(HEAD_CHUNK);
            tokio::select! {
                biased;
                read = fast_timeout(self.limits.keepalive_timeout, stream.read_buf(&mut head)) => {
                    match read {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => return Head::Gone,
                    }
                }
                _ = &mut stopping => return Head::Gone,
                _ = &mut evicted => return Head::Gone,
            }
        }
        let mut scanned = 0;
        // A kept-alive connection's head most often comes in its first read: no clock read.
        if !first && head_end(&head, &mut scanned) {
            return Head::Complete(head);
        }
        let deadline = tokio::time::Instant::now() + self.limits.head_timeout;
        loop {
            if head_end(&head, &mut scanned) {
                return Head::Complete(head);
            }
            if head.len() > MAX_HEAD {
                return Head::TooLarge;
            }
            // Never more than one byte past the limit: what follows a head stays in the socket
            // for Pingora (a body), and a head over the limit is found whatever the reads' sizes.
            let room = MAX_HEAD + 1 - head.len();
            if head.capacity() == head.len() {
                head.reserve(HEAD_CHUNK.min(room));
            }
            let mut window = (&mut head).limit(room);
            tokio::select! {
                biased;
                read = fast_timeout(deadline.saturating_duration_since(tokio::time::Instant::now()), stream.read_buf(&mut window)) => {
                    match read {
                        Ok(Ok(n)) if n > 0 => {}
                        Ok(_) => return Head::Gone,
                        Err(_) => return Head::TimedOut { partial: !head.is_empty() },
                    }
                }
                _ = &mut stopping => return Head::Gone,
                _ = &mut evicted => return Head::Gone,
            }
        }
    }
}

/// Whether `buf` holds a whole request head: an empty line after the first non-empty one (a
/// request may be preceded by empty lines, RFC 9112 §2.2; lines may end in a bare LF, as
/// Pingora's parser accepts). `scanned`: how far earlier calls looked.
fn head_end(buf: &[u8], scanned: &mut usize) -> bool {
    let Some(start) = buf.iter().position(|b| *b != b'\r' && *b != b'\n') else {
        return false;
    };
    let from = (*scanned).saturating_sub(2).max(start);
    *scanned = buf.len();
    let rest = &buf[from..];
    // Each line feed (found by memchr, not byte by byte: this runs on every request) followed by
    // LF or CR LF.
    memchr::memchr_iter(b'\n', rest)
        .any(|i| matches!(rest[i + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// Best effort: a short response that closes the connection. What the client sent meanwhile is
/// read and dropped for a moment (a lingering close, as nginx does): closing a socket with unread
/// data resets the connection, and the client may then lose the response.
async fn reply(stream: &mut Stream, status: &str, extra_headers: &str) {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Length: 0\r\n{extra_headers}Connection: close\r\n\r\n"
    );
    let _ = tokio::time::timeout(REPLY_TIMEOUT, async {
        stream.write_all(text.as_bytes()).await?;
        stream.flush().await?;
        stream.shutdown().await
    })
    .await;
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 1024];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(chunks: &[&[u8]]) -> Vec<bool> {
        let mut buf = Vec::new();
        let mut scanned = 0;
        chunks
            .iter()
            .map(|c| {
                buf.extend_from_slice(c);
                head_end(&buf, &mut scanned)
            })
            .collect()
    }

    #[test]
    fn the_end_of_a_head_is_found_across_reads() {
        assert_eq!(
            ends(&[b"GET / HTTP/1.1\r\nHost: a\r", b"\n\r", b"\n"]),
            [false, false, true]
        );
        assert_eq!(ends(&[b"GET / HTTP/1.1\nHost: a\n", b"\n"]), [false, true]);
        assert_eq!(
            ends(&[b"\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n"]),
            [false, true]
        );
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nX: y\r\n"]), [false]);
    }

    #[test]
    fn the_gate_counts_refuses_and_frees() {
        let gate = ListenerGate::new("proxy", 2, Duration::from_secs(1));
        let a = gate.enter().unwrap();
        let _b = gate.enter().unwrap();
        assert!(gate.enter().is_none());
        assert_eq!((gate.open(), gate.refused()), (2, 1));
        drop(a);
        assert!(gate.enter().is_some());
        assert_eq!(gate.open(), 1, "the new slot was dropped at once");
    }
}
