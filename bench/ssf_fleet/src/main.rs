//! Many lightweight receivers of the revocation stream in one process (issue 42 item 4).
//!
//! Each receiver behaves as the proxy's (`resource-server/src/ssf/`) does on the wire: on a
//! keep-alive connection of its own to one replica it fetches an access token by
//! `client_credentials` (`ssf.read ssf.manage`), creates a poll stream, then long-polls it
//! (RFC 8936, `returnImmediately: false`), acknowledging each SET in the next poll, and asks
//! the stream's status after every poll that ended without a SET. It does not verify the SETs
//! (that is the receiver's CPU, not the transmitter's): it notes when each arrived.
//!
//! Usage: `ssf-fleet CONFIG.json`, CONFIG = `{"replicas": ["127.0.0.1:PORT", …], "clients":
//! [[id, secret], …], "first": 0, "count": N, "setup_concurrency": 64, "status_after_empty":
//! true, "source_ips": ["127.0.0.1", …]}`. Receiver `i` (from `first`) uses client `i %
//! clients`, replica `i % replicas` and source address `i / replicas % source_ips`.
//!
//! Prints on stdout `setup DONE ERRORS` as streams are made, `ready COUNT SECONDS` once every
//! receiver has sent its first long poll, and `complete EVENT NS` once every receiver got the
//! SETs of event EVENT (NS: the last arrival, in ns since the Unix epoch). Reads commands on
//! stdin: `stats` prints one `stats …` line; `dump` prints every arrival (`recv EVENT RECEIVER
//! NS`), the failures by status (`err STATUS COUNT`), the polls sent per second of the run
//! (`polls SECOND COUNT`), then `end`; `quit` (or the end of stdin) exits.

use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

/// Seconds of the run the per-second poll counts cover.
const RUN_SECONDS: usize = 4 * 3600;

struct Fleet {
    replicas: Vec<SocketAddr>,
    clients: Vec<(String, String)>,
    source_ips: Vec<IpAddr>,
    first: usize,
    count: usize,
    status_after_empty: bool,
    setup: tokio::sync::Semaphore,
    started: Instant,
    streams_made: AtomicUsize,
    setup_errors: AtomicUsize,
    polling: AtomicUsize,
    in_flight: AtomicUsize,
    polls: AtomicU64,
    empty_polls: AtomicU64,
    statuses: AtomicU64,
    reconnects: AtomicU64,
    polls_per_second: Vec<AtomicU32>,
    failures: Mutex<HashMap<String, u64>>,
    /// Event id → (receiver, arrival in ns since the epoch), first arrival per receiver.
    arrivals: Mutex<HashMap<i64, Vec<(u32, u64)>>>,
}

fn epoch_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

impl Fleet {
    fn fail(&self, what: String) {
        *self.failures.lock().unwrap().entry(what).or_default() += 1;
    }

    fn arrived(&self, receiver: u32, event: i64, at: u64) {
        let complete = {
            let mut arrivals = self.arrivals.lock().unwrap();
            let list = arrivals.entry(event).or_default();
            list.push((receiver, at));
            list.len() == self.count
        };
        if complete {
            say(&format!("complete {event} {at}"));
        }
    }

    fn count_poll(&self) {
        self.polls.fetch_add(1, Relaxed);
        let second = self.started.elapsed().as_secs() as usize;
        if let Some(slot) = self.polls_per_second.get(second) {
            slot.fetch_add(1, Relaxed);
        }
    }
}

/// One keep-alive HTTP/1.1 connection, opened again when the server closed it.
struct Conn {
    to: SocketAddr,
    from: IpAddr,
    stream: Option<BufReader<TcpStream>>,
}

impl Conn {
    async fn open(&mut self, fleet: &Fleet) -> std::io::Result<()> {
        if self.stream.is_some() {
            return Ok(());
        }
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(self.from, 0))?;
        let stream = socket.connect(self.to).await?;
        stream.set_nodelay(true)?;
        self.stream = Some(BufReader::with_capacity(16 * 1024, stream));
        fleet.reconnects.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Sends one request; a kept-alive connection found closed is opened again once.
    async fn call(
        &mut self,
        fleet: &Fleet,
        method: &str,
        path: &str,
        authorization: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {authorization}\r\n",
            self.to
        );
        if method != "GET" {
            head.push_str(&format!(
                "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let mut last = None;
        for _ in 0..2 {
            self.open(fleet).await?;
            match self.exchange(&request).await {
                Ok(answer) => return Ok(answer),
                Err(error) => {
                    self.stream = None;
                    last = Some(error);
                }
            }
        }
        Err(last.expect("tried"))
    }

    async fn exchange(&mut self, request: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        let stream = self.stream.as_mut().expect("opened");
        stream.get_mut().write_all(request).await?;
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or(std::io::ErrorKind::InvalidData)?;
        let (mut length, mut chunked, mut close) = (0usize, false, false);
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => length = value.parse().unwrap_or(0),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                stream.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim(), 16)
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                stream.read_exact(&mut body[start..]).await?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else {
            body.resize(length, 0);
            stream.read_exact(&mut body).await?;
        }
        if close {
            self.stream = None;
        }
        Ok((status, body))
    }
}

/// The receiver's access token, fetched by client_credentials.
async fn token(fleet: &Fleet, conn: &mut Conn, client: usize) -> Result<String, String> {
    let (id, secret) = &fleet.clients[client];
    let basic = base64(format!("{id}:{secret}").as_bytes());
    let (status, body) = conn
        .call(
            fleet,
            "POST",
            "/o/token/",
            &format!("Basic {basic}"),
            "application/x-www-form-urlencoded",
            b"grant_type=client_credentials&scope=ssf.read%20ssf.manage",
        )
        .await
        .map_err(|e| format!("token transport {}", e.kind()))?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match answer["access_token"].as_str() {
        Some(token) if status == 200 => Ok(format!("Bearer {token}")),
        _ => Err(format!("token {status}")),
    }
}

/// A new poll stream: its id.
async fn new_stream(fleet: &Fleet, conn: &mut Conn, bearer: &str) -> Result<String, String> {
    let (status, body) = conn
        .call(
            fleet,
            "POST",
            "/ssf/stream",
            bearer,
            "application/json",
            br#"{"delivery":{"method":"urn:ietf:rfc:8936"}}"#,
        )
        .await
        .map_err(|e| format!("stream transport {}", e.kind()))?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match answer["stream_id"].as_str() {
        Some(id) if status == 201 => Ok(id.to_owned()),
        _ => Err(format!("stream {status}")),
    }
}

async fn receiver(fleet: Arc<Fleet>, local: usize) {
    let index = fleet.first + local;
    let replicas = fleet.replicas.len();
    let mut conn = Conn {
        to: fleet.replicas[index % replicas],
        from: fleet.source_ips[(index / replicas) % fleet.source_ips.len()],
        stream: None,
    };
    let client = index % fleet.clients.len();
    let mut backoff = Duration::from_millis(100);
    // Setup, a few receivers at a time; retried until it works.
    let (mut bearer, mut stream_id) = loop {
        let permit = fleet.setup.acquire().await.expect("never closed");
        let made = async {
            let bearer = token(&fleet, &mut conn, client).await?;
            let stream = new_stream(&fleet, &mut conn, &bearer).await?;
            Ok::<_, String>((bearer, stream))
        }
        .await;
        drop(permit);
        match made {
            Ok(made) => break made,
            Err(error) => {
                fleet.setup_errors.fetch_add(1, Relaxed);
                fleet.fail(format!("setup {error}"));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    };
    let made = fleet.streams_made.fetch_add(1, Relaxed) + 1;
    if made.is_multiple_of(1000) {
        say(&format!(
            "setup {made} {}",
            fleet.setup_errors.load(Relaxed)
        ));
    }
    let me = index as u32;
    let mut ack: Vec<String> = Vec::new();
    let mut seen: HashSet<i64> = HashSet::new();
    let mut announced = false;
    backoff = Duration::from_millis(100);
    loop {
        let body = json!({"maxEvents": 100, "returnImmediately": false, "ack": ack}).to_string();
        let path = format!("/ssf/poll/{stream_id}");
        fleet.count_poll();
        fleet.in_flight.fetch_add(1, Relaxed);
        if !announced {
            announced = true;
            let polling = fleet.polling.fetch_add(1, Relaxed) + 1;
            if polling == fleet.count {
                say(&format!(
                    "ready {polling} {:.1}",
                    fleet.started.elapsed().as_secs_f64()
                ));
            }
        }
        let answer = conn
            .call(
                &fleet,
                "POST",
                &path,
                &bearer,
                "application/json",
                body.as_bytes(),
            )
            .await;
        let at = epoch_ns();
        fleet.in_flight.fetch_sub(1, Relaxed);
        let failure = match answer {
            Ok((200, body)) => {
                ack.clear();
                let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let sets = answer["sets"].as_object().cloned().unwrap_or_default();
                for jti in sets.keys() {
                    ack.push(jti.clone());
                    let event = jti.split('.').next().and_then(|id| id.parse::<i64>().ok());
                    if let Some(event) = event
                        && seen.insert(event)
                    {
                        fleet.arrived(me, event, at);
                    }
                }
                backoff = Duration::from_millis(100);
                if sets.is_empty() {
                    fleet.empty_polls.fetch_add(1, Relaxed);
                    if fleet.status_after_empty {
                        let path = format!("/ssf/status?stream_id={stream_id}");
                        match conn.call(&fleet, "GET", &path, &bearer, "", b"").await {
                            Ok((200, _)) => {
                                fleet.statuses.fetch_add(1, Relaxed);
                            }
                            Ok((status, _)) => fleet.fail(format!("status {status}")),
                            Err(error) => fleet.fail(format!("status transport {}", error.kind())),
                        }
                    }
                }
                None
            }
            Ok((401, _)) => {
                match token(&fleet, &mut conn, client).await {
                    Ok(fresh) => bearer = fresh,
                    Err(error) => fleet.fail(error),
                }
                Some("poll 401".to_owned())
            }
            Ok((404, _)) => {
                // The stream is gone: a new one, as the proxy does.
                match new_stream(&fleet, &mut conn, &bearer).await {
                    Ok(fresh) => stream_id = fresh,
                    Err(error) => fleet.fail(error),
                }
                ack.clear();
                Some("poll 404".to_owned())
            }
            Ok((status, _)) => Some(format!("poll {status}")),
            Err(error) => Some(format!("poll transport {}", error.kind())),
        };
        if let Some(failure) = failure {
            fleet.fail(failure);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn dump(fleet: &Fleet) {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (event, list) in fleet.arrivals.lock().unwrap().iter() {
        for (receiver, at) in list {
            let _ = writeln!(out, "recv {event} {receiver} {at}");
        }
    }
    for (what, count) in fleet.failures.lock().unwrap().iter() {
        let _ = writeln!(out, "err {} {count}", what.replace(' ', "_"));
    }
    for (second, count) in fleet.polls_per_second.iter().enumerate() {
        let count = count.load(Relaxed);
        if count > 0 {
            let _ = writeln!(out, "polls {second} {count}");
        }
    }
    let _ = writeln!(out, "end");
    let _ = out.flush();
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: ssf-fleet CONFIG.json");
    let config: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("config JSON");
    let strings = |key: &str| -> Vec<String> {
        config[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let number = |key: &str, default: u64| config[key].as_u64().unwrap_or(default) as usize;
    let mut source_ips: Vec<IpAddr> = strings("source_ips")
        .iter()
        .map(|ip| ip.parse().expect("source ip"))
        .collect();
    if source_ips.is_empty() {
        source_ips.push("127.0.0.1".parse().unwrap());
    }
    let fleet = Arc::new(Fleet {
        replicas: strings("replicas")
            .iter()
            .map(|a| a.parse().expect("replica host:port"))
            .collect(),
        clients: config["clients"]
            .as_array()
            .expect("clients")
            .iter()
            .map(|c| {
                (
                    c[0].as_str().unwrap().to_owned(),
                    c[1].as_str().unwrap().to_owned(),
                )
            })
            .collect(),
        source_ips,
        first: number("first", 0),
        count: number("count", 1000),
        status_after_empty: config["status_after_empty"].as_bool().unwrap_or(true),
        setup: tokio::sync::Semaphore::new(number("setup_concurrency", 64)),
        started: Instant::now(),
        streams_made: AtomicUsize::new(0),
        setup_errors: AtomicUsize::new(0),
        polling: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        polls: AtomicU64::new(0),
        empty_polls: AtomicU64::new(0),
        statuses: AtomicU64::new(0),
        reconnects: AtomicU64::new(0),
        polls_per_second: (0..RUN_SECONDS).map(|_| AtomicU32::new(0)).collect(),
        failures: Mutex::new(HashMap::new()),
        arrivals: Mutex::new(HashMap::new()),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        for index in 0..fleet.count {
            tokio::spawn(receiver(fleet.clone(), index));
        }
        let mut commands = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(command)) = commands.next_line().await {
            match command.trim() {
                "stats" => say(&format!(
                    "stats made={} polling={} in_flight={} polls={} empty={} statuses={} reconnects={} failures={}",
                    fleet.streams_made.load(Relaxed),
                    fleet.polling.load(Relaxed),
                    fleet.in_flight.load(Relaxed),
                    fleet.polls.load(Relaxed),
                    fleet.empty_polls.load(Relaxed),
                    fleet.statuses.load(Relaxed),
                    fleet.reconnects.load(Relaxed),
                    fleet.failures.lock().unwrap().values().sum::<u64>(),
                )),
                "dump" => dump(&fleet),
                "quit" => break,
                _ => {}
            }
        }
    });
}
