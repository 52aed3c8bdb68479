//! Replicas behind a load balancer without sticky sessions: `authserver serve` processes on one
//! database, each writing its JSON access log to a file, and a round-robin front that sends
//! every request to the other replica than the request before it, whatever the connection, and
//! records where each went.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_support::free_port;

/// One `authserver serve` process; killed when dropped.
pub struct ReplicaProcess {
    pub base_url: String,
    child: Child,
    log: PathBuf,
}

impl ReplicaProcess {
    /// Starts a replica on `database_url` whose issuer (the address browsers use) is `issuer`;
    /// returns once its health endpoint answers.
    pub async fn start(database_url: &str, issuer: &str) -> ReplicaProcess {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "tokengate-replica-{}-{port}.log",
            std::process::id()
        ));
        let child = super::binary::command(&["serve", "--database-url", database_url])
            .env("AUTHSERVER_LISTEN", format!("127.0.0.1:{port}"))
            .env("AUTHSERVER_ISSUER", issuer)
            .env("AUTHSERVER_PURGE_INTERVAL", "0")
            .env("LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create the replica's log file"))
            .spawn()
            .expect("start authserver serve");
        let mut replica = ReplicaProcess {
            base_url: format!("http://127.0.0.1:{port}"),
            child,
            log,
        };
        let http = reqwest::Client::new();
        for _ in 0..600 {
            if http
                .get(format!("{}/healthz", replica.base_url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return replica;
            }
            if let Ok(Some(status)) = replica.child.try_wait() {
                panic!("the replica exited ({status}):\n{}", replica.log_text());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the replica did not come up:\n{}", replica.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The requests this replica's access log records, as `METHOD path status`, in order,
    /// health checks left out.
    pub fn served(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["message"] == "request" && line["server"] == "authserver")
            .filter(|line| line["path"] != "/healthz")
            .map(|line| {
                format!(
                    "{} {} {}",
                    line["method"].as_str().unwrap_or_default(),
                    line["path"].as_str().unwrap_or_default(),
                    line["status"]
                )
            })
            .collect()
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// One request as the front passed it on.
#[derive(Clone, Debug)]
pub struct Forwarded {
    /// Which replica (0 or 1) answered it.
    pub replica: usize,
    pub method: String,
    pub path_and_query: String,
    pub status: u16,
    pub location: Option<String>,
}

impl Forwarded {
    /// As a replica's access log says it: `METHOD path status` (no query).
    pub fn as_logged(&self) -> String {
        let path = self.path_and_query.split('?').next().unwrap_or_default();
        format!("{} {path} {}", self.method, self.status)
    }
}

struct Front {
    replicas: Vec<String>,
    http: reqwest::Client,
    log: Mutex<Vec<Forwarded>>,
}

/// The round-robin front: request n goes to replica n mod 2, counted as it arrives.
pub struct Balancer {
    pub base_url: String,
    front: Arc<Front>,
    listener: Option<tokio::net::TcpListener>,
}

/// Headers that belong to one hop, not passed on.
const HOP_BY_HOP: [HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::HOST,
    header::CONTENT_LENGTH,
];

fn passed_on(headers: &HeaderMap) -> HeaderMap {
    let mut headers = headers.clone();
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers
}

impl Balancer {
    /// The front's address, bound before the replicas start (it is their issuer).
    pub async fn bind() -> Balancer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Balancer {
            base_url: format!("http://{}", listener.local_addr().unwrap()),
            front: Arc::new(Front {
                replicas: Vec::new(),
                http: reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .unwrap(),
                log: Mutex::new(Vec::new()),
            }),
            listener: Some(listener),
        }
    }

    /// Starts passing requests on, alternately to each of `replicas` (base URLs).
    pub fn start(&mut self, replicas: &[&ReplicaProcess]) {
        let front = Arc::get_mut(&mut self.front).expect("started once");
        front.replicas = replicas.iter().map(|r| r.base_url.clone()).collect();
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(self.front.clone());
        let listener = self.listener.take().expect("started once");
        tokio::spawn(async move { axum::serve(listener, app).await });
    }

    /// Every request passed on so far, in the order they arrived.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.front.log.lock().unwrap().clone()
    }
}

async fn forward(State(front): State<Arc<Front>>, request: Request) -> Response {
    let method = request.method().clone();
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_default();
    let (at, replica) = {
        let mut log = front.log.lock().unwrap();
        let at = log.len();
        let replica = at % front.replicas.len();
        log.push(Forwarded {
            replica,
            method: method.to_string(),
            path_and_query: path_and_query.clone(),
            status: 0,
            location: None,
        });
        (at, replica)
    };
    let headers = passed_on(request.headers());
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let reply = front
        .http
        .request(
            Method::from_bytes(method.as_str().as_bytes()).unwrap(),
            format!("{}{path_and_query}", front.replicas[replica]),
        )
        .headers(headers)
        .body(body)
        .send()
        .await;
    let (status, headers, body) = match reply {
        Ok(reply) => {
            let status = reply.status();
            let headers = passed_on(reply.headers());
            let body = reply.bytes().await.unwrap_or_default();
            (status, headers, body)
        }
        Err(_) => (StatusCode::BAD_GATEWAY, HeaderMap::new(), Bytes::new()),
    };
    {
        let mut log = front.log.lock().unwrap();
        log[at].status = status.as_u16();
        log[at].location = headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
    }
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Checks what the front recorded: strict alternation, each replica's access log holding
/// exactly the requests the front sent it, and every page reached by a redirect carrying a
/// one-time message (`?flash=`) answered by the other replica than the POST that left it (a
/// reload of it aside). The number of such pages.
pub fn assert_alternation(forwarded: &[Forwarded], replicas: &[&ReplicaProcess]) -> usize {
    assert!(forwarded.len() > 10, "too few requests: {forwarded:?}");
    for pair in forwarded.windows(2) {
        assert_ne!(pair[0].replica, pair[1].replica, "{pair:?}");
    }
    for (index, replica) in replicas.iter().enumerate() {
        let mut sent: Vec<String> = forwarded
            .iter()
            .filter(|f| f.replica == index)
            .map(Forwarded::as_logged)
            .collect();
        let mut served = replica.served();
        // Requests under way at once (a page's assets) may be logged in another order.
        sent.sort();
        served.sort();
        assert_eq!(
            sent, served,
            "replica {index} served what the front sent it"
        );
    }
    let mut flashes = 0;
    for (at, request) in forwarded.iter().enumerate() {
        let before = &forwarded[..at];
        let reload = before
            .iter()
            .any(|f| f.path_and_query == request.path_and_query);
        if !request.path_and_query.contains("?flash=") || reload {
            continue;
        }
        let post = before
            .iter()
            .rev()
            .find(|f| f.location.as_deref() == Some(request.path_and_query.as_str()))
            .unwrap_or_else(|| panic!("no redirect to {request:?}"));
        assert_eq!(post.method, "POST");
        assert_ne!(
            post.replica, request.replica,
            "the message was left on one replica and taken on the other: {post:?} {request:?}"
        );
        flashes += 1;
    }
    flashes
}
