//! Test fixtures over real sockets: a stand-in RFC 7662 server, an upstream that echoes what it
//! received, a configuration file on free ports, and a running proxy.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The bearer token the proxy must present to the stand-in introspection endpoint.
pub const INTROSPECTOR_TOKEN: &str = "introspector-secret-token";

/// A free port on loopback, below the ephemeral range (the workspace's one).
pub use test_support::free_port;

/// Two free ports (the proxy's listener and its admin one): distinct, as every call of
/// [`free_port`] in a process hands out another.
pub fn two_free_ports() -> (u16, u16) {
    (free_port(), free_port())
}

/// One HTTP/1.1 request as read by the stand-in servers.
pub struct Request {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body_len: u64,
    pub body_sum: u64,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `token` of an introspection request's form (empty when there is none).
    pub fn form_token(&self) -> String {
        let form = String::from_utf8_lossy(&self.body).into_owned();
        form.split('&')
            .find_map(|kv| kv.strip_prefix("token="))
            .unwrap_or_default()
            .to_owned()
    }
}

/// Reads one request (Content-Length or chunked body); `None` at end of stream.
async fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).await.ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.push((n.trim().to_owned(), v.trim().to_owned()));
    }
    let mut req = Request {
        method,
        target,
        headers,
        body_len: 0,
        body_sum: 0,
        body: Vec::new(),
    };
    let take = |req: &mut Request, buf: &[u8]| {
        req.body_len += buf.len() as u64;
        req.body_sum = buf
            .iter()
            .fold(req.body_sum, |s, b| s.wrapping_add(u64::from(*b)));
        if req.body.len() < 64 * 1024 {
            req.body.extend_from_slice(buf);
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).await.ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut left = size;
            while left > 0 {
                let want = left.min(buf.len());
                let n = r.read(&mut buf[..want]).await.ok()?;
                if n == 0 {
                    return None;
                }
                take(&mut req, &buf[..n]);
                left -= n;
            }
            let mut crlf = String::new();
            r.read_line(&mut crlf).await.ok()?;
            if size == 0 {
                break;
            }
        }
    } else if let Some(len) = req
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        let mut left = len;
        while left > 0 {
            let want = left.min(buf.len());
            let n = r.read(&mut buf[..want]).await.ok()?;
            if n == 0 {
                return None;
            }
            take(&mut req, &buf[..n]);
            left -= n;
        }
    }
    Some(req)
}

async fn write_json(
    w: &mut BufReader<TcpStream>,
    status: u16,
    body: &Value,
) -> std::io::Result<()> {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {status} X\r\nServer: stand-in/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let s = w.get_mut();
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    s.flush().await
}

/// Serves `handler` on a fresh loopback port (keep-alive connections).
pub async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = (u16, Value)> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let mut r = BufReader::new(stream);
                while let Some(req) = read_request(&mut r).await {
                    let (status, body) = handler(req).await;
                    if write_json(&mut r, status, &body).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Stand-in authorization server: answers fixed claims per token and counts the calls.
#[derive(Clone)]
pub struct Introspector {
    pub addr: SocketAddr,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl Introspector {
    pub async fn start() -> Introspector {
        let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let counted = calls.clone();
        let addr = serve(move |req| {
            let counted = counted.clone();
            async move {
                if req.header("authorization") != Some(&format!("Bearer {INTROSPECTOR_TOKEN}")) {
                    return (401, json!({"error": "invalid_client"}));
                }
                let token = req.form_token();
                *counted.lock().unwrap().entry(token.clone()).or_default() += 1;
                if token.starts_with("slow-") {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                (200, claims(&token))
            }
        })
        .await;
        Introspector { addr, calls }
    }

    pub fn url(&self) -> String {
        format!("http://{}/o/introspect/", self.addr)
    }

    /// Introspection calls made for `token`.
    pub fn calls(&self, token: &str) -> usize {
        self.calls.lock().unwrap().get(token).copied().unwrap_or(0)
    }

    /// Introspection calls made for any token.
    #[allow(dead_code)]
    pub fn total_calls(&self) -> usize {
        self.calls.lock().unwrap().values().sum()
    }
}

/// The `aud` of the stand-in's active answers (a proxy configured with no audience ignores it).
pub const AUDIENCE: &str = "tokengate-api";

/// Fixed answers: `read`, `rw`, `groups`, `none` (no scope), `slow-*` (read, answered after
/// 300 ms) are active, `admin` (read, in the groups `admins` and `ops team`) too, `mfa` (read,
/// a two-factor sign-in 100 s ago: `acr`, `amr`, `auth_time`), and
/// `bound-X5T` (read, bound to the certificate thumbprint X5T); anything else is inactive. All
/// for [`AUDIENCE`].
fn claims(token: &str) -> Value {
    if let Some(jkt) = token.strip_prefix("dpop-") {
        return json!({"active": true, "scope": "read", "client_id": "app-1", "username": "alice",
                      "exp": unix_now() + 3600, "cnf": { "jkt": jkt }, "aud": AUDIENCE,
                      "token_type": "DPoP"});
    }
    if let Some(x5t) = token.strip_prefix("bound-") {
        return json!({"active": true, "scope": "read", "client_id": "app-1", "username": "alice",
                      "exp": unix_now() + 3600, "cnf": { "x5t#S256": x5t }, "aud": AUDIENCE});
    }
    // A user who signed in with a second factor 100 s ago (issue 41: step-up routes).
    if token == "mfa" {
        let now = unix_now();
        return json!({"active": true, "scope": "read", "client_id": "app-1", "username": "alice",
                      "exp": now + 3600, "aud": AUDIENCE, "acr": "urn:tokengate:acr:mfa",
                      "amr": ["pwd", "otp", "mfa"], "auth_time": now - 100});
    }
    if token == "admin" {
        let exp = unix_now() + 3600;
        return json!({"active": true, "scope": "read", "client_id": "app-1", "username": "root",
                      "exp": exp, "groups": ["admins", "ops team"], "aud": AUDIENCE});
    }
    let scope = match token {
        "read" => "read",
        "rw" => "read write",
        "groups" => "groups",
        "none" => "",
        t if t.starts_with("slow-") => "read",
        _ => return json!({"active": false}),
    };
    let exp = unix_now() + 3600;
    json!({"active": true, "scope": scope, "client_id": "app-1", "username": "alice", "exp": exp,
           "token_type": "Bearer", "aud": AUDIENCE})
}

/// Seconds since the Unix epoch, as introspection answers give times.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Upstream that answers 200 with what it received: method, target, headers (in order, every
/// occurrence), body length and byte sum.
pub async fn echo_upstream() -> SocketAddr {
    serve(|req| async move {
        if let Some(ms) = req.header("x-test-delay-ms").and_then(|v| v.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let headers: Vec<Value> = req.headers.iter().map(|(n, v)| json!([n, v])).collect();
        (
            200,
            json!({"method": req.method, "target": req.target, "headers": headers,
                   "body_len": req.body_len, "body_sum": req.body_sum}),
        )
    })
    .await
}

/// The echoed headers named `name` (any case, every occurrence).
pub fn echoed(echo: &Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|h| h[1].as_str().unwrap().to_owned())
        .collect()
}

pub const ROUTES: &str = r#"
routes:
  - { name: public, prefix: /public/, upstream: open, public: true }
  - { name: read, path: /read, upstream: api, scopes: [read] }
  - { name: all, path: /all, upstream: api, scopes: { all_of: [read, write] } }
  - { name: any, path: /any, upstream: api, scopes: { any_of: [write, groups] } }
  - { name: authn, path: /authn, upstream: api }
  - { name: upload, path: /upload, methods: [POST, PUT], upstream: api, scopes: [write] }
  - { name: pass, prefix: /pass/, upstream: open, scopes: [read] }
"#;

/// The `/metrics` text of the admin listener on 127.0.0.1:`admin`.
pub async fn admin_metrics(admin: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .expect("metrics response")
        .text()
        .await
        .expect("metrics body")
}

/// A configuration file for the proxy on free ports.
pub fn config_yaml(
    listen: u16,
    admin: u16,
    introspection_url: &str,
    upstream: SocketAddr,
    routes: &str,
) -> String {
    format!(
        r#"
listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
threads: 1
grace_period: 1s
shutdown_timeout: 1s
upstreams:
  api: {{ address: "{upstream}", pass_authorization: false }}
  open: {{ address: "{upstream}", pass_authorization: true }}
introspection:
  url: {introspection_url}
  auth_token: {INTROSPECTOR_TOKEN}
  connect_timeout: 500ms
  request_timeout: 2s
  cache: {{ max_ttl: 60s, negative_ttl: 5s, capacity: 1000 }}
{routes}"#
    )
}

static FILES: AtomicUsize = AtomicUsize::new(0);

/// A fresh path in the temporary directory.
pub fn temp_path(stem: &str) -> PathBuf {
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "tokengate-proxy-{stem}-{}-{n}.yaml",
        std::process::id()
    ))
}

/// Writes `yaml` to a fresh file (returned, for reloads and removal) and starts the proxy from
/// it, off the async runtime.
pub async fn start_proxy(stem: &str, yaml: &str) -> (proxy::ProxyHandle, PathBuf) {
    let path = temp_path(stem);
    std::fs::write(&path, yaml).unwrap();
    let config = proxy::load_config(&path).expect("valid test configuration");
    let handle = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .expect("proxy starts");
    (handle, path)
}

/// A running proxy in front of an echo upstream and a stand-in introspection endpoint.
pub struct Fixture {
    pub proxy: proxy::ProxyHandle,
    pub introspector: Introspector,
    pub upstream: SocketAddr,
    pub config_path: PathBuf,
    pub client: reqwest::Client,
}

impl Fixture {
    pub async fn start() -> Fixture {
        let introspector = Introspector::start().await;
        let url = introspector.url();
        Self::start_with(introspector, &url, ROUTES).await
    }

    pub async fn start_with(introspector: Introspector, url: &str, routes: &str) -> Fixture {
        let upstream = echo_upstream().await;
        let (listen, admin) = two_free_ports();
        let yaml = config_yaml(listen, admin, url, upstream, routes);
        let (proxy, config_path) = start_proxy("config", &yaml).await;
        Fixture {
            proxy,
            introspector,
            upstream,
            config_path,
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy.listen_addr())
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy.admin_addr())
    }

    /// The admin listener's `/metrics` text.
    pub async fn metrics(&self) -> String {
        admin_metrics(self.proxy.admin_addr().port()).await
    }

    /// GET `path` with an optional bearer token.
    pub async fn get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        let mut req = self.client.get(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.expect("response")
    }

    /// Stops the proxy without blocking the async test runtime.
    pub async fn stop(self) {
        let Fixture {
            proxy, config_path, ..
        } = self;
        let _ = std::fs::remove_file(config_path);
        tokio::task::spawn_blocking(move || proxy.shutdown_now())
            .await
            .unwrap();
    }
}

/// A child process (the `proxy` binary) whose stderr is collected as it comes; killed on drop.
pub struct Collected {
    pub child: std::process::Child,
    pub stderr: Arc<Mutex<String>>,
}

impl Collected {
    /// Spawns `command` with stdout discarded and stderr collected.
    pub fn spawn(command: &mut std::process::Command) -> Collected {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the process starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let lines = std::io::BufReader::new(child.stderr.take().unwrap());
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Collected { child, stderr }
    }

    /// Its resident set size in bytes (0 once it is gone).
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    }
}

impl Drop for Collected {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether python3 with `h2` runs here; under CI its absence fails the test.
pub fn have_h2() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import h2"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v.is_empty()),
            "CI must install python3 h2 (pip install 'httpx[http2]')"
        );
        eprintln!("skipped: python3 h2 is missing (pip install 'httpx[http2]')");
    }
    ok
}
