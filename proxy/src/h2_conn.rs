//! HTTP/2 client connections Pingora 0.9 would hold for ever: the client preface is due within
//! `head_timeout`, and a request body that stops coming for `body_idle_timeout` ends the
//! connection.
//!
//! Pingora reads an HTTP/2 stream's body with no timeout (`HttpSession::read_body_bytes` in its
//! `v2/server.rs` says "TODO: timeout", and `Session::set_read_timeout` does nothing on HTTP/2),
//! and each stream runs in a task of Pingora's that the proxy cannot reach. The connection's
//! socket is the proxy's, though: [`H2Watch::wrap`] puts [`H2Conn`] around it before Pingora's
//! HTTP/2 loop gets it, the gateway registers every stream whose request body is still to come
//! ([`H2Watch::body`]) and marks each piece read ([`BodyClock::progress`]), and a read of the
//! connection that would wait past the stalest stream's deadline fails instead. The h2 connection
//! then ends with an error, every stream's task with it (an upstream connection held for the
//! stream included), and its file descriptor is closed. Writes, zero windows included, are
//! bounded by Pingora's HTTP/2 write timeout, which the gateway sets to the same
//! `body_idle_timeout`. Once a stream's response is complete ([`BodyClock::answered`]), its body
//! may pause only [`ANSWERED_IDLE`]: Pingora keeps the upstream connection of a stream until its
//! request body ends, though the upstream has answered.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use pingora::listeners::ALPN;
use pingora::protocols::{self, Digest, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The HTTP/2 client connection preface (RFC 9113 §3.4): what must arrive within the deadline.
const H2_PREFACE_LEN: usize = 24;

/// One listener's HTTP/2 connections, found by the streams Pingora hands the gateway.
#[derive(Debug)]
pub struct H2Watch {
    /// How long a request body may stop coming (`connections.body_idle_timeout`).
    pub idle: Duration,
    /// Open connections by the address of their socket digest, which Pingora shares between the
    /// connection and every stream's session digest.
    conns: Mutex<HashMap<usize, Weak<Conn>>>,
    preface_timeouts: AtomicU64,
    body_timeouts: AtomicU64,
    /// HTTP/2 streams being served now, across the listener's connections, and the most at once
    /// (`connections.max`): each costs about 27 KiB (Pingora's task and session) for as long as
    /// it lasts, a stalled body up to `body_idle_timeout`, and 100 per connection times
    /// `connections.max` connections would be gigabytes.
    streams: AtomicUsize,
    max_streams: usize,
    streams_refused: AtomicU64,
}

/// A stream counted in [`H2Watch`]'s budget until dropped.
#[derive(Debug)]
pub struct StreamSlot(Arc<H2Watch>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The streams of one connection whose bodies are awaited, and the connection's reader to wake
/// when one is added (its read then sets a timer for it).
#[derive(Debug, Default)]
struct Conn {
    bodies: Mutex<Vec<Weak<BodyClock>>>,
    reader: Mutex<Option<Waker>>,
}

/// How long a request body may stop coming once the response is complete (at most
/// `body_idle_timeout`): Pingora holds the stream's upstream connection until the body ends,
/// though the upstream has answered.
pub const ANSWERED_IDLE: Duration = Duration::from_secs(1);

/// When a stream's request body last made progress (`None` once it is complete), and whether
/// its response is complete.
#[derive(Debug)]
pub struct BodyClock {
    last: Mutex<Option<Instant>>,
    answered: AtomicBool,
    conn: Weak<Conn>,
}

impl BodyClock {
    /// A stream's clock, started now, on the connection `conn`.
    fn started(conn: Weak<Conn>) -> BodyClock {
        BodyClock {
            last: Mutex::new(Some(Instant::now())),
            answered: AtomicBool::new(false),
            conn,
        }
    }

    /// A piece of the body was read (`end`: the last).
    pub fn progress(&self, end: bool) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = (!end).then(Instant::now);
    }

    /// The response is complete while the body is still to come: from now on a pause of
    /// [`ANSWERED_IDLE`] ends the connection (the body may still come at its pace).
    pub fn answered(&self) {
        if !self.answered.swap(true, Ordering::Relaxed)
            && let Some(conn) = self.conn.upgrade()
        {
            conn.wake_reader();
        }
    }

    /// When the connection must end if the body makes no progress; `None` once it is complete.
    fn deadline(&self, idle: Duration) -> Option<Instant> {
        let last = (*self.last.lock().unwrap_or_else(|e| e.into_inner()))?;
        let allowed = if self.answered.load(Ordering::Relaxed) {
            idle.min(ANSWERED_IDLE)
        } else {
            idle
        };
        Some(last + allowed)
    }
}

impl Conn {
    /// The earliest deadline among streams still waiting for their body (dropped and complete
    /// ones are forgotten).
    fn deadline(&self, idle: Duration) -> Option<Instant> {
        let mut bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        let mut earliest: Option<Instant> = None;
        bodies.retain(|w| {
            let Some(clock) = w.upgrade() else {
                return false;
            };
            let deadline = clock.deadline(idle);
            if let Some(at) = deadline {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
            deadline.is_some()
        });
        earliest
    }

    /// Wakes the connection's reader, which then sets its timer for the earliest deadline.
    fn wake_reader(&self) {
        if let Some(reader) = self
            .reader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            reader.wake_by_ref();
        }
    }
}

fn key(digest: &Arc<protocols::SocketDigest>) -> usize {
    Arc::as_ptr(digest) as usize
}

impl H2Watch {
    /// `max_streams`: HTTP/2 streams served at once across the listener.
    pub fn new(idle: Duration, max_streams: usize) -> Arc<H2Watch> {
        Arc::new(H2Watch {
            idle,
            conns: Mutex::default(),
            preface_timeouts: AtomicU64::new(0),
            body_timeouts: AtomicU64::new(0),
            streams: AtomicUsize::new(0),
            max_streams,
            streams_refused: AtomicU64::new(0),
        })
    }

    /// A place for one more stream, or `None` when `max_streams` are being served (counted in
    /// [`H2Watch::streams_refused`]).
    pub fn stream(self: &Arc<Self>) -> Option<StreamSlot> {
        if self.streams.fetch_add(1, Ordering::AcqRel) >= self.max_streams {
            self.streams.fetch_sub(1, Ordering::AcqRel);
            self.streams_refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(StreamSlot(self.clone()))
    }

    /// Streams refused because `max_streams` were being served.
    pub fn streams_refused(&self) -> u64 {
        self.streams_refused.load(Ordering::Relaxed)
    }

    /// Connections closed because their client preface did not arrive within `head_timeout`.
    pub fn preface_timeouts(&self) -> u64 {
        self.preface_timeouts.load(Ordering::Relaxed)
    }

    /// Connections closed because a stream's request body stopped for `body_idle_timeout`.
    pub fn body_timeouts(&self) -> u64 {
        self.body_timeouts.load(Ordering::Relaxed)
    }

    /// Starts the body clock of a stream of a connection this watch wrapped (its session's
    /// `digest`); `None` for any other (HTTP/1, or no socket digest). The stream counts until
    /// the clock is dropped or its body is complete.
    pub fn body(&self, digest: Option<&Digest>) -> Option<Arc<BodyClock>> {
        let socket = digest?.socket_digest.as_ref()?;
        let conn = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key(socket))?
            .upgrade()?;
        let clock = Arc::new(BodyClock::started(Arc::downgrade(&conn)));
        conn.bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&clock));
        conn.wake_reader();
        Some(clock)
    }

    /// `inner`, an HTTP/2 connection, watched: its first [`H2_PREFACE_LEN`] bytes due `within`,
    /// its streams' bodies due every `idle`.
    pub fn wrap(self: &Arc<Self>, inner: Stream, within: Duration) -> Stream {
        let conn = inner.get_socket_digest().map(|socket| {
            let conn = Arc::new(Conn::default());
            let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
            conns.insert(key(&socket), Arc::downgrade(&conn));
            (key(&socket), conn)
        });
        Box::new(H2Conn {
            inner,
            preface: Some(Box::pin(tokio::time::sleep(within))),
            left: H2_PREFACE_LEN,
            conn,
            timer: None,
            watch: self.clone(),
        })
    }
}

/// A client connection handed to Pingora's HTTP/2 loop: a read still waiting at the preface
/// deadline, or past a stream's body deadline, fails with `TimedOut`. Everything else is the
/// wrapped stream's.
#[derive(Debug)]
pub struct H2Conn {
    inner: Stream,
    /// `None` once the preface came.
    preface: Option<Pin<Box<Sleep>>>,
    left: usize,
    /// The registry key and the streams awaited, when the socket has a digest.
    conn: Option<(usize, Arc<Conn>)>,
    /// Set for the earliest body deadline while a body is awaited.
    timer: Option<Pin<Box<Sleep>>>,
    watch: Arc<H2Watch>,
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        if let Some((key, _)) = &self.conn {
            let mut conns = self.watch.conns.lock().unwrap_or_else(|e| e.into_inner());
            conns.remove(key);
        }
    }
}

fn timed_out(why: &'static str) -> Poll<std::io::Result<()>> {
    Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))
}

impl H2Conn {
    /// Whether a stream's body deadline has passed; otherwise the timer is set for the next one
    /// (and wakes this reader).
    fn body_overdue(&mut self, cx: &mut Context<'_>) -> bool {
        let Some((_, conn)) = &self.conn else {
            return false;
        };
        {
            let mut reader = conn.reader.lock().unwrap_or_else(|e| e.into_inner());
            if !reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *reader = Some(cx.waker().clone());
            }
        }
        let Some(at) = conn.deadline(self.watch.idle) else {
            self.timer = None;
            return false;
        };
        if at <= Instant::now() {
            return true;
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if timer.deadline() != at {
            timer.as_mut().reset(at);
        }
        timer.as_mut().poll(cx).is_ready()
    }
}

impl AsyncRead for H2Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                this.left = this.left.saturating_sub(n);
                if this.left == 0 || n == 0 {
                    this.preface = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let preface_expired = this
                    .preface
                    .as_mut()
                    .is_some_and(|d| d.as_mut().poll(cx).is_ready());
                if preface_expired {
                    this.preface = None;
                    this.watch.preface_timeouts.fetch_add(1, Ordering::Relaxed);
                    return timed_out("no HTTP/2 preface within head_timeout");
                }
                if this.body_overdue(cx) {
                    this.watch.body_timeouts.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("HTTP/2 connection closed: a request body stopped coming");
                    return timed_out("an HTTP/2 request body stopped for body_idle_timeout");
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl AsyncWrite for H2Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[async_trait]
impl protocols::Shutdown for H2Conn {
    async fn shutdown(&mut self) {
        protocols::Shutdown::shutdown(&mut *self.inner).await
    }
}

impl protocols::UniqueID for H2Conn {
    fn id(&self) -> protocols::UniqueIDType {
        self.inner.id()
    }
}

impl protocols::Ssl for H2Conn {
    fn get_ssl(&self) -> Option<&protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl protocols::GetTimingDigest for H2Conn {
    fn get_timing_digest(&self) -> Vec<Option<protocols::TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl protocols::GetProxyDigest for H2Conn {
    fn get_proxy_digest(&self) -> Option<Arc<protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: protocols::raw_connect::ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl protocols::GetSocketDigest for H2Conn {
    fn get_socket_digest(&self) -> Option<Arc<protocols::SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: protocols::SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl protocols::Peek for H2Conn {
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_stalest_awaited_body_sets_the_deadline() {
        let idle = Duration::from_secs(10);
        let conn = Conn::default();
        assert_eq!(conn.deadline(idle), None);
        let first = Arc::new(BodyClock::started(Weak::new()));
        conn.bodies.lock().unwrap().push(Arc::downgrade(&first));
        tokio::time::advance(Duration::from_secs(3)).await;
        let second = Arc::new(BodyClock::started(Weak::new()));
        conn.bodies.lock().unwrap().push(Arc::downgrade(&second));
        let start = Instant::now() - Duration::from_secs(3);
        assert_eq!(conn.deadline(idle), Some(start + idle));
        first.progress(false);
        assert_eq!(
            conn.deadline(idle),
            Some(Instant::now() + idle),
            "progress moves it"
        );
        first.progress(true);
        drop(second);
        assert_eq!(
            conn.deadline(idle),
            None,
            "complete and dropped bodies are not awaited"
        );
        assert!(conn.bodies.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_stream_may_pause_only_a_second() {
        let idle = Duration::from_secs(10);
        let conn = Arc::new(Conn::default());
        let clock = Arc::new(BodyClock::started(Arc::downgrade(&conn)));
        conn.bodies.lock().unwrap().push(Arc::downgrade(&clock));
        let start = Instant::now();
        assert_eq!(conn.deadline(idle), Some(start + idle));
        clock.answered();
        assert_eq!(conn.deadline(idle), Some(start + ANSWERED_IDLE));
        // The body may still come at its pace: each piece moves the deadline.
        tokio::time::advance(Duration::from_millis(800)).await;
        clock.progress(false);
        assert_eq!(conn.deadline(idle), Some(Instant::now() + ANSWERED_IDLE));
        // Never longer than body_idle_timeout.
        assert_eq!(
            conn.deadline(Duration::from_millis(300)),
            Some(Instant::now() + Duration::from_millis(300))
        );
    }
}
