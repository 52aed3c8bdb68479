//! End-to-end helpers: the real authorization server (counting its introspection calls) and the
//! example API in `introspect` mode, each on a loopback port, plus a small OAuth client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use authserver::store::Store;
use axum::extract::Request;
use axum::middleware::Next;
use example_api::config::Config;
use example_api::guard::Guard;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A name no other test (or earlier run on a shared PostgreSQL) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", authserver::secrets::random_client_id())
}

/// Database URLs to run on: a fresh SQLite file, and `DATABASE_URL` when it names PostgreSQL.
pub fn database_urls() -> Vec<String> {
    let dir = std::env::temp_dir().join(unique("example-api-e2e-"));
    let mut urls = vec![format!("sqlite://{}/db.sqlite", dir.display())];
    urls.extend(
        std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| u.starts_with("postgres")),
    );
    urls
}

pub fn sqlite_url() -> String {
    database_urls().remove(0)
}

/// A server task and the means to stop it.
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, waits for the task.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `addr`, retrying briefly if the port is still being released (restart on the same port).
async fn bind(addr: SocketAddr) -> tokio::net::TcpListener {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot bind {addr}: {e}"),
        }
    }
}

/// The real authorization server with a layer counting calls to `/o/introspect/`.
pub struct AuthServer {
    pub store: Store,
    pub database_url: String,
    pub introspections: Arc<AtomicUsize>,
    pub running: Running,
}

impl AuthServer {
    /// Starts on `addr` (port 0 = any free port) over the database at `database_url`.
    pub async fn start(database_url: &str, addr: SocketAddr) -> AuthServer {
        Self::start_counting(database_url, addr, Arc::new(AtomicUsize::new(0))).await
    }

    async fn start_counting(
        database_url: &str,
        addr: SocketAddr,
        introspections: Arc<AtomicUsize>,
    ) -> AuthServer {
        let store = Store::connect(database_url)
            .await
            .expect("authserver store");
        let state = authserver::AppState::new(
            authserver::config::Settings::for_tests(database_url),
            store.clone(),
        );
        let counter = introspections.clone();
        let app = authserver::app(state).layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let counter = counter.clone();
                async move {
                    if request.uri().path() == "/o/introspect/" {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    next.run(request).await
                }
            },
        ));
        let listener = bind(addr).await;
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        AuthServer {
            store,
            database_url: database_url.to_owned(),
            introspections,
            running: Running {
                addr,
                stop: Some(stop),
                task,
            },
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.running.url(path)
    }

    pub fn introspections(&self) -> usize {
        self.introspections.load(Ordering::SeqCst)
    }

    /// Stops the server; [`AuthServer::restart`] brings it back on the same port.
    pub async fn stop(self) -> (String, SocketAddr, Arc<AtomicUsize>) {
        let addr = self.running.addr;
        self.running.stop().await;
        (self.database_url, addr, self.introspections)
    }

    pub async fn restart(stopped: (String, SocketAddr, Arc<AtomicUsize>)) -> AuthServer {
        Self::start_counting(&stopped.0, stopped.1, stopped.2).await
    }
}

/// A client of the authorization server and the API.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub client_id: String,
    pub client_secret: String,
    pub token_url: String,
    pub revoke_url: String,
}

impl Client {
    pub fn new(auth: &AuthServer, (client_id, client_secret): (String, String)) -> Client {
        Client {
            http: reqwest::Client::new(),
            client_id,
            client_secret,
            token_url: auth.url("/o/token/"),
            revoke_url: auth.url("/o/revoke_token/"),
        }
    }

    /// The password grant (HTTP Basic client authentication, as in the seed).
    pub async fn password_token(
        &self,
        username: &str,
        password: &str,
        scope: Option<&str>,
    ) -> String {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", username),
            ("password", password),
        ];
        form.extend(scope.map(|s| ("scope", s)));
        let response = self
            .http
            .post(&self.token_url)
            .basic_auth(&self.client_id, Some(&self.client_secret))
            .form(&form)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(status, 200, "token request: {body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    pub async fn revoke(&self, token: &str) {
        let response = self
            .http
            .post(&self.revoke_url)
            .basic_auth(&self.client_id, Some(&self.client_secret))
            .form(&[("token", token)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

/// The example API in `introspect` mode, configured through its YAML like the binary.
pub async fn start_api(database_url: &str, introspection_yaml: &str) -> Running {
    start_with(&format!(
        "token_source: introspection\nlisten: 127.0.0.1:0\ndatabase_url: '{database_url}'\nintrospection:\n{introspection_yaml}\n{}",
        routes_of_shipped_config()
    ))
    .await
}

/// The secret the tests' proxy proves itself with (`X-Tokengate-Proxy-Secret`).
pub const PROXY_SECRET: &str = "test-proxy-secret-0123456789abcdef";

/// The example API in `behind_proxy` mode (believing the `X-Auth-*` headers of requests that
/// carry [`PROXY_SECRET`]), on loopback.
pub async fn start_api_behind_proxy(database_url: &str) -> Running {
    start_with(&format!(
        "token_source: behind_proxy\nlisten: 127.0.0.1:0\ndatabase_url: '{database_url}'\n{}",
        routes_of_shipped_config()
    ))
    .await
}

/// The example API as this YAML configures it (with [`PROXY_SECRET`] as the proxy's secret).
async fn start_with(yaml: &str) -> Running {
    let env = |key: &str| (key == "EXAMPLE_API_PROXY_SECRET").then(|| PROXY_SECRET.to_owned());
    let config = Config::from_yaml_with_env(yaml, "test.yaml", env)
        .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let store = Store::connect(&config.database_url)
        .await
        .expect("api store");
    let state = example_api::AppState::new(store, Guard::from_config(&config).expect("guard"));
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(example_api::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

/// The `routes:` part of `config/example-api.yaml`.
fn routes_of_shipped_config() -> &'static str {
    let text = example_api::config::EXAMPLE_CONFIG;
    &text[text
        .find("\nroutes:")
        .expect("routes in the shipped config")..]
}

/// An answer from the API.
pub struct Answer {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub json: serde_json::Value,
}

/// `GET` (or any method) with an optional bearer token and JSON body.
pub async fn request(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    form: Option<&[(&str, &str)]>,
) -> Answer {
    let mut request = http.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(form) = form {
        request = request.form(form);
    }
    let response = request.send().await.expect("API reachable");
    let status = response.status().as_u16();
    let www_authenticate = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.bytes().await.unwrap();
    let json = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    Answer {
        status,
        www_authenticate,
        json,
    }
}

pub async fn get(http: &reqwest::Client, url: &str, token: Option<&str>) -> Answer {
    request(http, reqwest::Method::GET, url, token, None).await
}

/// Polls `check` every 25 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// YAML for client-credentials introspection with this cache life.
pub fn client_yaml(auth: &AuthServer, (id, secret): &(String, String), max_ttl: &str) -> String {
    format!(
        "  url: '{}'\n  client_id: '{id}'\n  client_secret: '{secret}'\n  connect_timeout: 500ms\n  request_timeout: 2s\n  cache: {{ max_ttl: {max_ttl}, negative_ttl: 0s }}",
        auth.url("/o/introspect/")
    )
}
