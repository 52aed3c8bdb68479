//! The application's probes through the admin listener (`PROXY_APP_PROBES`, what `proxy inject`
//! writes): a real proxy in front of an application on loopback whose health can be switched.
//! The probe paths answer the application's health and nothing else: no other path, no query,
//! no header of the prober's reaches the application, and a protected route stays protected.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use common::{
    Introspector, ROUTES, Request, config_yaml, free_port, serve, temp_path, two_free_ports,
};
use serde_json::json;

/// What the application received: (target, headers).
type Seen = Arc<Mutex<Vec<(String, Vec<(String, String)>)>>>;

/// An application answering `/health` with the status in `health`, anything else 200 with a
/// secret body; it records every request.
async fn application(health: Arc<AtomicU16>, seen: Seen) -> SocketAddr {
    serve(move |req: Request| {
        let (health, seen) = (health.clone(), seen.clone());
        async move {
            seen.lock()
                .unwrap()
                .push((req.target.clone(), req.headers.clone()));
            if req.target == "/health" {
                (health.load(Ordering::SeqCst), json!({"health": "checked"}))
            } else {
                (200, json!({"secret": "the application's data"}))
            }
        }
    })
    .await
}

/// `GET path` as written (a client library would resolve dot segments first): status and body.
async fn raw_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, answer)
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_paths_answer_the_applications_health_and_open_nothing_else() {
    let health = Arc::new(AtomicU16::new(200));
    let seen: Seen = Arc::default();
    let app = application(health.clone(), seen.clone()).await;
    let closed = free_port();
    let probes = json!({
        "/app-health/api/readyz": {"httpGet": {"path": "/health", "port": app.port(),
            "httpHeaders": [{"name": "X-Probe", "value": "ready"}]}},
        "/app-health/api/livez": {"tcpSocket": {"port": app.port()}},
        "/app-health/api/startupz": {"tcpSocket": {"port": closed}},
        "/app-health/gone/readyz": {"httpGet": {"path": "/health", "port": closed}},
    })
    .to_string();
    let introspector = Introspector::start().await;
    let (listen, admin) = two_free_ports();
    let path = temp_path("app-probes");
    std::fs::write(
        &path,
        config_yaml(listen, admin, &introspector.url(), app, ROUTES),
    )
    .unwrap();
    let config =
        proxy::load_config_with_env(&path, |k| (k == "PROXY_APP_PROBES").then(|| probes.clone()))
            .unwrap();
    let handle = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .unwrap();
    let client = reqwest::Client::new();
    let admin_addr = SocketAddr::from(([127, 0, 0, 1], admin));
    let admin = |p: &str| format!("http://127.0.0.1:{admin}{p}");
    let status = |p: String| {
        let client = client.clone();
        async move {
            let resp = client
                .get(&p)
                .header("Authorization", "Bearer stolen")
                .header("Cookie", "session=x")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap())
        }
    };

    let (code, body) = status(admin("/app-health/api/readyz")).await;
    assert_eq!((code, body.as_str()), (200, "application answered 200\n"));
    health.store(503, Ordering::SeqCst);
    assert_eq!(
        status(admin("/app-health/api/readyz")).await.0,
        503,
        "unhealthy"
    );
    health.store(500, Ordering::SeqCst);
    assert_eq!(status(admin("/app-health/api/readyz")).await.0, 500);
    health.store(200, Ordering::SeqCst);
    assert_eq!(status(admin("/app-health/api/readyz")).await.0, 200);
    let head = client
        .head(admin("/app-health/api/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        status(admin("/app-health/api/livez")).await.0,
        200,
        "tcpSocket"
    );
    let (code, body) = status(admin("/app-health/api/startupz")).await;
    assert_eq!(code, 503, "nothing listens: {body}");
    assert!(body.to_lowercase().contains("connection refused"), "{body}");
    assert_eq!(status(admin("/app-health/gone/readyz")).await.0, 503);

    let before = seen.lock().unwrap().len();
    for path in [
        "/app-health/api/readyz/",
        "/app-health/api/readyz?x=1",
        "/app-health/api/readyz/../../../read",
        "/app-health/api/readyz%2F..%2F..%2Fread",
        "/app-health/api/../api/readyz",
        "/app-health/api",
        "/app-health/",
        "/app-health/api/READYZ",
        "/read",
        "/health",
    ] {
        let (code, body) = raw_get(admin_addr, path).await;
        assert_eq!(code, 404, "{path}: {body}");
        assert!(!body.contains("secret"), "{path}: {body}");
    }
    let post = client
        .post(admin("/app-health/api/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(
        seen.lock().unwrap().len(),
        before,
        "none of those reached the application"
    );

    // Everything the application ever received: its health path, with the probe's header and
    // none of the prober's.
    for (target, headers) in seen.lock().unwrap().iter() {
        assert_eq!(target, "/health");
        let named = |n: &str| headers.iter().find(|(h, _)| h.eq_ignore_ascii_case(n));
        assert_eq!(named("x-probe").map(|(_, v)| v.as_str()), Some("ready"));
        assert!(named("authorization").is_none() && named("cookie").is_none());
    }
    // The protected route still needs a token on the proxy's port.
    let read = client
        .get(format!("http://127.0.0.1:{listen}/read"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 401);
    tokio::task::spawn_blocking(move || handle.shutdown())
        .await
        .unwrap();
    let _ = std::fs::remove_file(path);
}
