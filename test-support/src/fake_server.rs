//! A tiny HTTP/1.1 introspection server on 127.0.0.1:0 that answers whatever a test tells it,
//! well-formed or hostile (raw bytes over tokio, so that nothing parses or fixes up the answer).

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the fake server answers.
#[derive(Clone)]
pub enum Reply {
    /// `status` with a JSON content type and an exact `Content-Length`, after `delay`.
    Json {
        status: u16,
        body: String,
        delay: Duration,
    },
    /// These bytes as they are (status line, headers and body), then the connection is closed.
    Raw(Vec<u8>),
    /// A 200 whose body comes one byte every `every`, never finishing before `bytes` are sent.
    Drip { bytes: usize, every: Duration },
    /// Read the request, then close the connection without answering.
    Close,
}

/// A 200 JSON answer, at once.
pub fn json(body: &str) -> Reply {
    Reply::Json {
        status: 200,
        body: body.into(),
        delay: Duration::ZERO,
    }
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Header lines, names lower-cased: "name: value".
    pub headers: Vec<String>,
    pub body: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}: ");
        self.headers.iter().find_map(|h| h.strip_prefix(&prefix))
    }
}

pub struct FakeServer {
    pub url: String,
    calls: Arc<AtomicUsize>,
    pub connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    reply: Arc<Mutex<Reply>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FakeServer {
    pub async fn start(reply: Reply) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = FakeServer {
            url: format!("http://{addr}/o/introspect/"),
            calls: Arc::default(),
            connections: Arc::default(),
            requests: Arc::default(),
            reply: Arc::new(Mutex::new(reply)),
            tasks: Arc::default(),
        };
        server.accept(listener);
        server
    }

    /// Serves every connection `listener` accepts, until [`FakeServer::stop`].
    fn accept(&self, listener: TcpListener) {
        let (calls, connections, requests, reply, tasks) = (
            self.calls.clone(),
            self.connections.clone(),
            self.requests.clone(),
            self.reply.clone(),
            self.tasks.clone(),
        );
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let conn = tokio::spawn(serve(
                    stream,
                    calls.clone(),
                    requests.clone(),
                    reply.clone(),
                ));
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn set(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }

    pub fn last(&self) -> Recorded {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }

    /// Stops listening and drops every connection: the port refuses from now on.
    pub fn stop(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// After [`FakeServer::stop`]: listens again on the same port (retrying for up to 2 s while
    /// the old socket is released), answering as set.
    pub async fn restart(&self) {
        let addr = self
            .url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let listener = loop {
            match TcpListener::bind(&addr).await {
                Ok(l) => break l,
                Err(_) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("cannot listen on {addr} again: {e}"),
            }
        };
        self.accept(listener);
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve(
    mut stream: TcpStream,
    calls: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    reply: Arc<Mutex<Reply>>,
) {
    let mut buf = Vec::new();
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let headers: Vec<String> = head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| format!("{}: {}", n.to_ascii_lowercase(), v.trim()))
            .collect();
        let len: usize = headers
            .iter()
            .find_map(|h| h.strip_prefix("content-length: "))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let body_start = head_end + 4;
        while buf.len() < body_start + len {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buf[body_start..body_start + len]).into_owned();
        buf.drain(..body_start + len);
        calls.fetch_add(1, Ordering::SeqCst);
        requests.lock().unwrap().push(Recorded { headers, body });
        let current = reply.lock().unwrap().clone();
        match current {
            Reply::Close => return,
            Reply::Raw(bytes) => {
                let _ = stream.write_all(&bytes).await;
                let _ = stream.shutdown().await;
                return;
            }
            Reply::Drip { bytes, every } => {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"active\":true,\"x\":\"";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..bytes {
                    tokio::time::sleep(every).await;
                    if stream.write_all(b"a").await.is_err() {
                        return;
                    }
                }
                let _ = stream.write_all(b"\"}").await;
                return;
            }
            Reply::Json {
                status,
                body,
                delay,
            } => {
                tokio::time::sleep(delay).await;
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if stream.write_all(resp.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    }
}
