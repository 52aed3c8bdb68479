//! The path, header and framing corpus, sent as raw bytes through the real front door. Every
//! smuggled or tricked request carries forged `X-Auth-*` identity headers, so a request that
//! reached the example API without passing the proxy's check would be answered `200` there:
//! the invariant is that no answer in the corpus is a success, and none is a server error.

use crate::Harness;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Forged identity headers, as a smuggled request would carry them.
const FORGED: &str = "X-Auth-Username: admin\r\nX-Auth-Client-Id: x\r\nX-Auth-Scope: read write groups\r\nX-Auth-Expires: 99999999999\r\n";

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

/// Framing and smuggling: a first request the proxy sees, with a second one hidden in its body.
fn framing_tricks() -> Vec<String> {
    let hidden = format!("GET /groups/ HTTP/1.1\r\nHost: x\r\n{FORGED}\r\n");
    let n = hidden.len();
    vec![
        // CL.TE and TE.CL.
        format!(
            "POST /o/token/ HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{hidden}",
            n + 5
        ),
        format!(
            "POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{:x}\r\n{hidden}\r\n0\r\n\r\n",
            n
        ),
        // Obfuscated Transfer-Encoding.
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\nContent-Length: {n}\r\n\r\n{hidden}"),
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n{hidden}"),
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{hidden}"),
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n{hidden}"),
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{hidden}"),
        // Conflicting and malformed lengths.
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: {n}\r\n\r\n{hidden}"),
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nContent-Length: +{n}\r\n\r\n{hidden}"),
        format!("POST /o/token/ HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{hidden}"),
        "POST /o/token/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nx\r\n0\r\n\r\n".into(),
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
    ]
}

/// Sends `request` on a new connection and returns every status code in what comes back
/// (read until the server closes, or two seconds pass).
async fn statuses(front_door: std::net::SocketAddr, request: &str) -> Vec<u16> {
    let mut stream = TcpStream::connect(front_door).await.unwrap();
    // A server may stop reading early (a refusal, then close): a failed write is an answer too.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    text.match_indices("HTTP/1.")
        .filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok())
        .collect()
}

async fn run_corpus(name: &str, corpus: Vec<String>) -> usize {
    let h = Harness::start().await;
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
    // The proxy is still healthy after the corpus.
    let http = reqwest::Client::new();
    let health = http.get(format!("{}/users/", h.base)).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::UNAUTHORIZED);
    h.shutdown().await;
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_tricks_never_reach_a_protected_resource() {
    let corpus = path_tricks();
    let total = corpus.len();
    let answered = run_corpus("path", corpus).await;
    assert_eq!(answered, total, "every path trick gets an answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_tricks_never_reach_a_protected_resource() {
    let corpus = header_tricks();
    let total = corpus.len();
    let answered = run_corpus("header", corpus).await;
    assert_eq!(answered, total, "every header trick gets an answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_tricks_smuggle_nothing() {
    run_corpus("framing", framing_tricks()).await;
}
