//! The path, header and framing corpus, sent as raw bytes through the real front door. Every
//! smuggled or tricked request carries forged `X-Auth-*` identity headers, so a request that
//! reached the example API without passing the proxy's check would be answered `200` there (each
//! run checks that it is, straight at the API): the invariant is that no answer in the corpus is
//! a success, and none is a server error. A smuggled request also creates a user, so one that
//! got through is seen in the database whichever client its answer went to.

use crate::Harness;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Forged identity headers, as a smuggled request would carry them.
/// The secret by which the stack's proxy proves itself to the example API: the harness gives it,
/// and every forged request carries it, as if the attacker knew it (the worst case), so that the
/// corpus tests the proxy's framing, not the secret.
pub const PROXY_SECRET: &str = "adversarial-proxy-secret-0123456789";
const FORGED: &str = "X-Auth-Username: admin\r\nX-Auth-Client-Id: x\r\nX-Auth-Scope: read write groups\r\nX-Auth-Expires: 99999999999\r\nX-Tokengate-Proxy-Secret: adversarial-proxy-secret-0123456789\r\n";

/// Requests for protected resources that must never be answered with a success without a token.
fn path_tricks() -> Vec<String> {
    let paths = [
        "/users/",
        "/groups/",
        "/users/1/",
        "/users",
        "/USERS/",
        "//users/",
        "/./users/",
        "/x/../users/",
        "/%2e/users/",
        "/%2E%2E/users/",
        "/users/%2e%2e/groups/",
        "/users/..%2f..%2fgroups/",
        "/%75sers/",
        "/users/;jsessionid=x",
        "/users;/",
        "/users/%00",
        "/users%2f",
        "/users/%2fadmin",
        "/o/../users/",
        "/o/%2e%2e/users/",
        "/o/..%2fusers/",
        "/admin/../groups/",
        "/static/..%2f..%2fusers/",
        "/accounts/%2e%2e/groups/",
        "/users/?access=1",
        "/users/#fragment",
        "/users/\\..\\groups/",
        "/%2fusers/",
        "/users/%252e%252e/",
        "*",
        "http://127.0.0.1/users/",
    ];
    paths
        .iter()
        .map(|p| format!("GET {p} HTTP/1.1\r\nHost: x\r\n{FORGED}Connection: close\r\n\r\n"))
        .collect()
}

/// Header tricks on a protected route (no valid token anywhere).
fn header_tricks() -> Vec<String> {
    let long = "a".repeat(20_000);
    let headers = [
        String::new(),
        "Authorization: Basic YWRtaW46YWRtaW4=\r\n".into(),
        "Authorization: Bearer\r\n".into(),
        "Authorization: Bearer \r\n".into(),
        "Authorization: Bearer a b\r\n".into(),
        "Authorization: Bearer x\r\nAuthorization: Bearer y\r\n".into(),
        "Authorization: Bearer x, Bearer y\r\n".into(),
        format!("Authorization: Bearer {long}\r\n"),
        "Authorization : Bearer x\r\n".into(),
        "Authorization: Bearer x\r\n y\r\n".into(),
        "Authorization: Bearer \u{0}x\r\n".into(),
        "X-Auth-Scope: read\r\n groups\r\n".into(),
        "x-auth-scope: groups\r\nX-AUTH-SCOPE: groups\r\n".into(),
        "X-Forwarded-For: 127.0.0.1\r\nX-Real-IP: 127.0.0.1\r\n".into(),
        "X-Original-URL: /o/token/\r\nX-Rewrite-URL: /o/token/\r\n".into(),
        "X-HTTP-Method-Override: OPTIONS\r\n".into(),
        "Host: 127.0.0.1:8001\r\n".into(),
        "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nConnection: Upgrade, HTTP2-Settings\r\n".into(),
    ];
    let mut out: Vec<String> = headers
        .iter()
        .map(|h| {
            format!("GET /groups/ HTTP/1.1\r\nHost: x\r\n{h}{FORGED}Connection: close\r\n\r\n")
        })
        .collect();
    out.push(format!(
        "GET /users/?access_token=abc HTTP/1.1\r\nHost: x\r\n{FORGED}Connection: close\r\n\r\n"
    ));
    out
}

/// The user a smuggled request creates.
const SMUGGLED: &str = "smuggled";

/// A request that creates `username` at the example API with a forged identity.
fn hidden(username: &str) -> String {
    let body = format!(r#"{{"username":"{username}","password":"Smuggled pw 1"}}"#);
    format!(
        "POST /users/ HTTP/1.1\r\nHost: x\r\n{FORGED}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Framing and smuggling: a first request the proxy sees, with a second one hidden in its body.
/// The first goes to the authorization server (no token needed), and again to the example API
/// with a valid `write` token, so that its body really is forwarded there (answered 400 or
/// 415: it is no user).
fn framing_tricks(write_token: &str) -> Vec<String> {
    let hidden = hidden(SMUGGLED);
    let n = hidden.len();
    let mut tricks = Vec::new();
    for first in [
        "POST /o/token/ HTTP/1.1\r\nHost: x\r\n".to_owned(),
        format!("POST /users/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {write_token}\r\n"),
    ] {
        tricks.extend([
            // CL.TE and TE.CL.
            format!(
                "{first}Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{hidden}",
                n + 5
            ),
            format!(
                "{first}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{n:x}\r\n{hidden}\r\n0\r\n\r\n"
            ),
            // Obfuscated Transfer-Encoding.
            format!("{first}Transfer-Encoding: xchunked\r\nContent-Length: {n}\r\n\r\n{hidden}"),
            format!("{first}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n{hidden}"),
            format!("{first}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{hidden}"),
            format!("{first}Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n{hidden}"),
            format!("{first}Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{hidden}"),
            // Conflicting and malformed lengths.
            format!("{first}Content-Length: 0\r\nContent-Length: {n}\r\n\r\n{hidden}"),
            format!("{first}Content-Length: +{n}\r\n\r\n{hidden}"),
            format!("{first}Content-Length: -1\r\n\r\n{hidden}"),
            format!("{first}Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nx\r\n0\r\n\r\n"),
        ]);
    }
    tricks.extend([
        // Pipelining and bare line feeds.
        format!("GET /users/ HTTP/1.1\r\nHost: x\r\n{FORGED}\r\n{hidden}"),
        format!("GET /o/token/ HTTP/1.1\nHost: x\n\n{hidden}"),
        format!("GET /users/ HTTP/1.0\r\nConnection: keep-alive\r\n{FORGED}\r\n{hidden}"),
        // Odd request lines.
        format!("GET /users/ HTTP/2.0\r\nHost: x\r\n{FORGED}\r\n"),
        format!("get /users/ HTTP/1.1\r\nHost: x\r\n{FORGED}\r\n"),
        format!("GET  /users/ HTTP/1.1\r\nHost: x\r\n{FORGED}\r\n"),
        format!("GET /users/\r\n{FORGED}\r\n"),
        format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "u".repeat(100_000)),
    ]);
    tricks
}

/// Sends `request` on a new connection and returns the status of each response that comes back
/// (read until the server closes, or two seconds pass).
async fn statuses(to: std::net::SocketAddr, request: &str) -> Vec<u16> {
    let mut stream = TcpStream::connect(to).await.unwrap();
    // A server may stop reading early (a refusal, then close): a failed write is an answer too.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
    responses(&answer).unwrap_or_else(|why| {
        let shown = request.chars().take(200).collect::<String>();
        panic!(
            "{why}, in the answer to {shown:?}: {:?}",
            String::from_utf8_lossy(&answer)
        )
    })
}

/// The statuses of the responses in `bytes`, read one after the other, each body framed by
/// `Content-Length`, chunked, or the end of the stream: anything else in there is an error (so
/// no answer hides in another's body, and no text in a body passes for an answer).
fn responses(mut bytes: &[u8]) -> Result<Vec<u16>, String> {
    let mut statuses = Vec::new();
    while !bytes.is_empty() {
        let end = find(bytes, b"\r\n\r\n").ok_or("a response head cut short")?;
        let head = std::str::from_utf8(&bytes[..end]).map_err(|_| "a head not in UTF-8")?;
        let status = head
            .strip_prefix("HTTP/1.")
            .and_then(|rest| rest.get(2..5)?.parse().ok())
            .ok_or_else(|| format!("not a status line: {head:?}"))?;
        statuses.push(status);
        let header = |name: &str| {
            head.lines().skip(1).find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim())
            })
        };
        let body = &bytes[end + 4..];
        bytes = if let Some(length) = header("content-length") {
            let length: usize = length.parse().map_err(|_| "a bad Content-Length")?;
            body.get(length..).ok_or("a body cut short")?
        } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            after_chunks(body)?
        } else {
            &[]
        };
    }
    Ok(statuses)
}

/// What follows a chunked body (without trailers).
fn after_chunks(mut body: &[u8]) -> Result<&[u8], String> {
    loop {
        let line = find(body, b"\r\n").ok_or("a chunk size cut short")?;
        let size = std::str::from_utf8(&body[..line])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())
            .ok_or("a bad chunk size")?;
        body = body.get(line + 2 + size..).ok_or("a chunk cut short")?;
        body = body
            .strip_prefix(b"\r\n")
            .ok_or("a chunk without its CRLF")?;
        if size == 0 {
            return Ok(body);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The premise of the corpus: the example API, reached without the proxy, honours forged
/// identity headers that carry the proxy's secret, so a smuggled request would be a `200` (and a
/// created user) there. Without the secret it honours nothing.
async fn forged_identity_is_honoured_behind_the_proxy(h: &Harness) {
    let api = h.stack.api;
    let groups = format!("GET /groups/ HTTP/1.1\r\nHost: x\r\n{FORGED}Connection: close\r\n\r\n");
    assert_eq!(statuses(api, &groups).await, [200]);
    let unproven = groups.replace(&format!("X-Tokengate-Proxy-Secret: {PROXY_SECRET}\r\n"), "");
    assert_eq!(statuses(api, &unproven).await, [401]);
    let create = hidden("control").replacen("Host: x\r\n", "Host: x\r\nConnection: close\r\n", 1);
    assert_eq!(statuses(api, &create).await, [201]);
    let control = h
        .stack
        .store
        .find_user_by_username("control")
        .await
        .unwrap();
    assert!(control.is_some());
}

/// Sends the corpus, each request on its own connection; returns how many got an answer.
async fn run_corpus(h: &Harness, name: &str, corpus: Vec<String>) -> usize {
    forged_identity_is_honoured_behind_the_proxy(h).await;
    let front_door = h.front_door();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, request) in corpus.into_iter().enumerate() {
        tasks.spawn(async move { (i, statuses(front_door, &request).await, request) });
    }
    let mut answered = 0;
    while let Some(result) = tasks.join_next().await {
        let (i, statuses, request) = result.unwrap();
        let shown = request.chars().take(200).collect::<String>();
        for status in &statuses {
            assert!(
                !(200..300).contains(status) && *status < 500,
                "{name} #{i}: answered {status} to {shown:?} (all: {statuses:?})"
            );
        }
        answered += usize::from(!statuses.is_empty());
    }
    // Nothing got through to the example API another way either.
    let smuggled = h.stack.store.find_user_by_username(SMUGGLED).await.unwrap();
    assert!(
        smuggled.is_none(),
        "{name}: a smuggled request created a user"
    );
    // The proxy is still healthy after the corpus.
    let http = reqwest::Client::new();
    let health = http.get(format!("{}/users/", h.base)).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::UNAUTHORIZED);
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_tricks_never_reach_a_protected_resource() {
    let h = Harness::start().await;
    let corpus = path_tricks();
    let total = corpus.len();
    let answered = run_corpus(&h, "path", corpus).await;
    assert_eq!(answered, total, "every path trick gets an answer");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_tricks_never_reach_a_protected_resource() {
    let h = Harness::start().await;
    let corpus = header_tricks();
    let total = corpus.len();
    let answered = run_corpus(&h, "header", corpus).await;
    assert_eq!(answered, total, "every header trick gets an answer");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_tricks_smuggle_nothing() {
    let h = Harness::start().await;
    h.ordinary_user("framer", "framer pw").await;
    let write = h.token(("framer", "framer pw"), Some("write")).await;
    let corpus = framing_tricks(&write);
    let total = corpus.len();
    let answered = run_corpus(&h, "framing", corpus).await;
    assert_eq!(answered, total, "every framing trick gets an answer");
    h.shutdown().await;
}
