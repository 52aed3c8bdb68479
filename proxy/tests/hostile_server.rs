//! The real proxy against a hostile RFC 7662 server (the stand-in of
//! `resource-server/tests/hostile_server.rs`): every hostile answer is `503` or `401
//! invalid_token` as designed, never forwarded (a counting relay in front of the echo upstream
//! sees no connection), and counted in `/metrics`; a valid answer is forwarded with
//! percent-encoded identity headers.

mod common;

use test_support::fake_server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    INTROSPECTOR_TOKEN, ROUTES, config_yaml, echo_upstream, echoed, start_proxy, unix_now,
};
use fake_server::{FakeServer, Reply, json};
use resource_server::decision::{EXPIRED_TOKEN, INACTIVE_TOKEN, NOT_YET_VALID_TOKEN};
use serde_json::{Value, json as j};
use tokio::net::{TcpListener, TcpStream};

const ISSUER: &str = "https://auth.example";
const AUDIENCE: &str = "api";
/// The proxy's `introspection.request_timeout` in these tests.
const TIMEOUT: Duration = Duration::from_millis(500);
const UNAVAILABLE: &str = "Authorization server unavailable.";

/// An answer the proxy accepts for `GET /read` (scope `read`, the expected issuer and audience).
fn good() -> Value {
    j!({
        "active": true,
        "scope": "read write",
        "client_id": "app",
        "username": "josé",
        "token_type": "Bearer",
        "exp": unix_now() + 3600,
        "iss": ISSUER,
        "aud": [AUDIENCE, "other"],
    })
}

/// [`good`] with `field` set to `value` (`None` removes it).
fn with(field: &str, value: Option<Value>) -> Reply {
    let mut v = good();
    let map = v.as_object_mut().unwrap();
    match value {
        Some(value) => map.insert(field.into(), value),
        None => map.remove(field),
    };
    json(&v.to_string())
}

fn status(status: u16, body: &str) -> Reply {
    Reply::Json {
        status,
        body: body.into(),
        delay: Duration::ZERO,
    }
}

/// Accepts connections for `target` and pipes them through, counting them: the proxy opens one
/// only to forward a request, so zero connections means nothing was forwarded.
async fn counting_relay(target: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, count)
}

/// The proxy in front of the relay and the echo upstream, introspecting with `server`.
struct Proxy {
    handle: proxy::ProxyHandle,
    forwarded: Arc<AtomicUsize>,
    http: reqwest::Client,
    config_path: std::path::PathBuf,
}

impl Proxy {
    async fn start(server: &FakeServer) -> Proxy {
        let (relay, forwarded) = counting_relay(echo_upstream().await).await;
        let policy = format!(
            "  request_timeout: {}ms\n  issuer: {ISSUER}\n  audience: {AUDIENCE}\n",
            TIMEOUT.as_millis()
        );
        let (listen, admin) = common::two_free_ports();
        let yaml = config_yaml(listen, admin, &server.url, relay, ROUTES)
            .replace("  request_timeout: 2s\n", &policy);
        assert!(yaml.contains("audience: api"), "{yaml}");
        let (handle, config_path) = start_proxy("hostile", &yaml).await;
        let p = Proxy {
            handle,
            forwarded,
            http: reqwest::Client::new(),
            config_path,
        };
        // The readiness probe asks the server at start; let it finish (and succeed) first, so it
        // does not ask again during the cases below and skew the counters.
        let started = Instant::now();
        while p.admin("/readyz").await.0 != 200 {
            assert!(started.elapsed() < Duration::from_secs(10), "never ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        p
    }

    async fn get(&self, token: &str) -> reqwest::Response {
        let url = format!("http://{}/read", self.handle.listen_addr());
        self.http.get(url).bearer_auth(token).send().await.unwrap()
    }

    async fn admin(&self, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.handle.admin_addr());
        let resp = self.http.get(url).send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    /// The values of the `/metrics` samples named exactly `names` (labels included); 0 if absent.
    async fn metrics<const N: usize>(&self, names: [&str; N]) -> [u64; N] {
        let (status, text) = self.admin("/metrics").await;
        assert_eq!(status, 200);
        names.map(|name| {
            text.lines()
                .filter_map(|l| l.rsplit_once(' '))
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, v)| v.parse().unwrap())
        })
    }

    async fn metric(&self, name: &str) -> u64 {
        self.metrics([name]).await[0]
    }

    async fn stop(self) {
        let _ = std::fs::remove_file(&self.config_path);
        tokio::task::spawn_blocking(move || self.handle.shutdown_now())
            .await
            .unwrap();
    }
}

const MALFORMED: &str = "tokengate_proxy_introspection_malformed_total";
const REFUSED: &str = "tokengate_proxy_introspection_refused_total";
const ERRORS: &str = "tokengate_proxy_introspection_errors_total";

/// How a hostile answer must end at the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// 503, counted as a malformed answer.
    Malformed,
    /// 503, an introspection error that is not about the content (status, transport, timeout).
    Failed,
    /// 401 `invalid_token` with this `error_description`; `true` when the policy refused it.
    Invalid(&'static str, bool),
}

fn cases() -> Vec<(&'static str, Reply, Want)> {
    use Want::*;
    let t = unix_now();
    let raw = |s: &str| Reply::Raw(s.as_bytes().to_vec());
    let close = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    let huge = good()
        .to_string()
        .replace('}', &format!(",\"pad\":\"{}\"}}", "x".repeat(70_000)));
    vec![
        // Strings and numbers for the boolean.
        (
            "active \"true\"",
            with("active", Some(j!("true"))),
            Malformed,
        ),
        ("active 1", with("active", Some(j!(1))), Malformed),
        ("active [true]", with("active", Some(j!([true]))), Malformed),
        // Wrong types.
        (
            "username object",
            with("username", Some(j!({"n": "alice"}))),
            Malformed,
        ),
        (
            "client_id number",
            with("client_id", Some(j!(7))),
            Malformed,
        ),
        (
            "scope object",
            with("scope", Some(j!({"read": true}))),
            Malformed,
        ),
        (
            "scope [\"read\", 1]",
            with("scope", Some(j!(["read", 1]))),
            Malformed,
        ),
        (
            "exp string",
            with("exp", Some(j!((t + 3600).to_string()))),
            Malformed,
        ),
        ("aud number", with("aud", Some(j!(1))), Malformed),
        // Huge and negative numbers.
        ("exp 1e300", with("exp", Some(j!(1e300))), Malformed),
        ("exp u64::MAX", with("exp", Some(j!(u64::MAX))), Malformed),
        (
            "exp year 10000",
            with("exp", Some(j!(253_402_300_800_i64))),
            Malformed,
        ),
        ("exp -1", with("exp", Some(j!(-1))), Malformed),
        ("iat -1e300", with("iat", Some(j!(-1e300))), Malformed),
        // Not an object, not JSON, cut short.
        ("array", json("[{\"active\":true}]"), Malformed),
        ("html", json("<html>OK</html>"), Malformed),
        ("empty body", json(""), Malformed),
        (
            "truncated, close-delimited",
            raw(&format!("{close}{{\"active\":tr")),
            Malformed,
        ),
        // Failures that are not about the content.
        (
            "truncated, Content-Length",
            raw("HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{\"active\":true}"),
            Failed,
        ),
        ("oversized, announced", json(&huge), Failed),
        (
            "oversized, close-delimited",
            raw(&format!("{close}{huge}")),
            Failed,
        ),
        (
            "500 with an active body",
            status(500, &good().to_string()),
            Failed,
        ),
        ("502", status(502, "{}"), Failed),
        ("closed without answer", Reply::Close, Failed),
        ("not HTTP", raw("garbage\r\n\r\n"), Failed),
        (
            "slower than the timeout",
            Reply::Json {
                status: 200,
                body: good().to_string(),
                delay: TIMEOUT * 3,
            },
            Failed,
        ),
        (
            "body dripping past the timeout",
            Reply::Drip {
                bytes: 100,
                every: Duration::from_millis(20),
            },
            Failed,
        ),
        // Well-formed answers that must not let the token in.
        (
            "active missing",
            with("active", None),
            Invalid(INACTIVE_TOKEN, false),
        ),
        (
            "active null",
            with("active", Some(Value::Null)),
            Invalid(INACTIVE_TOKEN, false),
        ),
        (
            "refresh token",
            with("token_type", Some(j!("refresh_token"))),
            Invalid(INACTIVE_TOKEN, true),
        ),
        (
            "other issuer",
            with("iss", Some(j!("https://evil.example"))),
            Invalid(INACTIVE_TOKEN, true),
        ),
        // The gate's audience, not the answer policy: not counted as refused.
        (
            "other audience",
            with("aud", Some(j!(["web"]))),
            Invalid(resource_server::WRONG_AUDIENCE, false),
        ),
        (
            "exp past",
            with("exp", Some(j!(t - 60))),
            Invalid(EXPIRED_TOKEN, false),
        ),
        (
            "nbf in the future",
            with("nbf", Some(j!(t + 3600))),
            Invalid(NOT_YET_VALID_TOKEN, false),
        ),
    ]
}

/// Ends with a `401` for an inactive answer, so the server is known to be up and recently
/// reached: no readiness probe during the next case, and no outage left by the previous one (a
/// failing server is only probed every so often; other checks get `503` without a call).
async fn settle(p: &Proxy, server: &FakeServer, case: usize) {
    server.set(json(r#"{"active":false}"#));
    let started = Instant::now();
    for n in 0.. {
        match p.get(&format!("settle-{case}-{n}")).await.status().as_u16() {
            401 => return,
            503 if started.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("settling after case {case}: {other}"),
        }
    }
}

fn decided(decision: &str) -> String {
    format!(
        "tokengate_proxy_requests_total{{route=\"read\",decision=\"{decision}\",listener=\"proxy\"}}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_answers_are_refused_counted_and_never_forwarded() {
    let server = FakeServer::start(json(r#"{"active":false}"#)).await;
    let p = Proxy::start(&server).await;
    let (unavailable, invalid, allow) = (
        decided("unavailable"),
        decided("invalid_token"),
        decided("allow"),
    );
    let counters: [&str; 6] = [MALFORMED, REFUSED, ERRORS, &unavailable, &invalid, &allow];
    let cases = cases();
    for (i, (name, reply, want)) in cases.iter().enumerate() {
        settle(&p, &server, i).await;
        server.set(reply.clone());
        let before = p.metrics(counters).await;
        let calls = server.calls();
        let started = Instant::now();
        let resp = p.get(&format!("hostile-{i}")).await;
        let took = started.elapsed();
        let code = resp.status().as_u16();
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let body: Value = resp.json().await.unwrap();
        match want {
            Want::Malformed | Want::Failed => {
                assert_eq!(code, 503, "{name}: {body}");
                assert_eq!(body, j!({"detail": UNAVAILABLE}), "{name}");
                assert_eq!(challenge, None, "{name}");
            }
            Want::Invalid(description, _) => {
                assert_eq!(code, 401, "{name}: {body}");
                assert_eq!(body, j!({"detail": "Invalid token."}), "{name}");
                assert_eq!(
                    challenge.as_deref(),
                    Some(&*format!(
                        r#"Bearer realm="api", error="invalid_token", error_description="{description}""#
                    )),
                    "{name}"
                );
            }
        }
        assert!(server.calls() > calls, "{name}: the server was not asked");
        assert!(
            took < TIMEOUT + Duration::from_secs(1),
            "{name} took {took:?}"
        );
        assert_eq!(p.forwarded.load(Ordering::SeqCst), 0, "{name}: forwarded");
        let after = p.metrics(counters).await;
        let expected = match want {
            Want::Malformed => [1, 0, 1, 1, 0, 0],
            Want::Failed => [0, 0, 1, 1, 0, 0],
            Want::Invalid(_, refused) => [0, u64::from(*refused), 0, 0, 1, 0],
        };
        assert_eq!(
            [0, 1, 2, 3, 4, 5].map(|k| after[k] - before[k]),
            expected,
            "{name}: counted as {counters:?}"
        );
    }
    let count = |f: fn(&Want) -> bool| cases.iter().filter(|c| f(&c.2)).count() as u64;
    let malformed = count(|w| *w == Want::Malformed);
    assert!(malformed > 10);
    assert_eq!(p.metric(MALFORMED).await, malformed);
    assert_eq!(
        p.metric(REFUSED).await,
        count(|w| matches!(w, Want::Invalid(_, true)))
    );
    assert_eq!(p.metric(&allow).await, 0);

    // The control: the relay is on the path, and a valid answer goes through it.
    server.set(json(&good().to_string()));
    let resp = p.get("control").await;
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echoed(&echo, "x-auth-username"), ["jos%C3%A9"]);
    assert_eq!(p.forwarded.load(Ordering::SeqCst), 1);
    assert_eq!(p.metric(&allow).await, 1);
    let asked = server.last();
    assert_eq!(
        asked.header("authorization"),
        Some(&*format!("Bearer {INTROSPECTOR_TOKEN}"))
    );
    assert_eq!(asked.body, "token=control&token_type_hint=access_token");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn valid_answers_forward_percent_encoded_identity() {
    let server = FakeServer::start(json(r#"{"active":false}"#)).await;
    let p = Proxy::start(&server).await;
    let exp = unix_now() + 3600;
    for (i, (username, client_id, scope, want_user, want_client, want_scope)) in [
        ("josé", "app", "read", "jos%C3%A9", "app", "read"),
        (
            "ann marie",
            "app 1",
            "read é",
            "ann%20marie",
            "app%201",
            "read %C3%A9",
        ),
        (
            "100%",
            "日本",
            "write read",
            "100%25",
            "%E6%97%A5%E6%9C%AC",
            "write read",
        ),
        (
            "a\r\nX-Evil: 1",
            "c",
            "read",
            "a%0D%0AX-Evil:%201",
            "c",
            "read",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut answer = good();
        answer["username"] = j!(username);
        answer["client_id"] = j!(client_id);
        answer["scope"] = j!(scope);
        answer["exp"] = j!(exp);
        server.set(json(&answer.to_string()));
        let resp = p.get(&format!("valid-{i}")).await;
        assert_eq!(resp.status(), 200, "{username:?}");
        let echo: Value = resp.json().await.unwrap();
        assert_eq!(
            echoed(&echo, "x-auth-username"),
            [want_user],
            "{username:?}"
        );
        assert_eq!(
            echoed(&echo, "x-auth-client-id"),
            [want_client],
            "{client_id:?}"
        );
        assert_eq!(echoed(&echo, "x-auth-scope"), [want_scope], "{scope:?}");
        assert_eq!(echoed(&echo, "x-auth-expires"), [exp.to_string()]);
        assert!(echoed(&echo, "x-evil").is_empty());
        assert!(echoed(&echo, "authorization").is_empty());
    }
    assert_eq!(p.metric(MALFORMED).await, 0);
    p.stop().await;
}
