//! End-to-end through the real front door: the Pingora proxy (the shipped config/proxy.yaml
//! routes) in front of the real authorization server and the example API, over loopback sockets.

use authserver::config::Settings;
use authserver::store::{GrantType, Store};
use authserver::testing;
use axum::extract::Request;
use axum::middleware::{self, Next};
use reqwest::StatusCode;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The authorization server, counting the introspection requests it answers, stoppable and
/// restartable on the same port.
struct Auth {
    addr: SocketAddr,
    store: Store,
    introspections: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Auth {
    async fn start(store: Store, addr: SocketAddr, introspections: Arc<AtomicUsize>) -> Auth {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counter = introspections.clone();
        let app = authserver::app(authserver::AppState::new(
            Settings::for_tests("unused"),
            store.clone(),
        ))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            let counter = counter.clone();
            async move {
                if request.uri().path() == "/o/introspect/" {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                next.run(request).await
            }
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Auth {
            addr,
            store,
            introspections,
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    async fn restart(&mut self) {
        self.stop().await;
        *self = Auth::start(self.store.clone(), self.addr, self.introspections.clone()).await;
    }
}

struct FrontDoor {
    base: String,
    admin: String,
    auth: Auth,
    client_id: String,
    secret: String,
    config_file: std::path::PathBuf,
    proxy: Option<proxy::ProxyHandle>,
    http: reqwest::Client,
}

/// The shipped config/proxy.yaml with the loopback ports of this test, plus two demo routes
/// (any-of and all-of) and a 1 s cache so revocations show quickly.
async fn front_door() -> FrontDoor {
    let store = testing::store().await;
    testing::user(&store, "alice", "wonderland").await;
    // Allowed to introspect: the seed's way gets an introspection-scoped password-grant token.
    let (client_id, secret) = testing::application(&store, GrantType::Password, true).await;
    let (proxy_id, proxy_secret) =
        testing::application(&store, GrantType::ClientCredentials, true).await;
    let auth = Auth::start(
        store.clone(),
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(AtomicUsize::new(0)),
    )
    .await;

    let api_text = std::fs::read_to_string("config/example-api.yaml").unwrap();
    // What the proxy proves itself to the API with.
    let api_secret = authserver::secrets::random_token();
    let proof = api_secret.clone();
    let api_config = example_api::config::Config::from_yaml_with_env(
        &api_text,
        "config/example-api.yaml",
        move |key| (key == "EXAMPLE_API_PROXY_SECRET").then(|| proof.clone()),
    )
    .unwrap();
    let api_state = example_api::AppState::new(
        store.clone(),
        example_api::guard::Guard::from_config(&api_config).unwrap(),
    );
    let api_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = api_listener.local_addr().unwrap();
    tokio::spawn(example_api::serve(
        api_listener,
        api_state,
        std::future::pending(),
    ));

    let shipped = std::fs::read_to_string("config/proxy.yaml").unwrap();
    let text = shipped
        .replace("127.0.0.1:8000", "127.0.0.1:0")
        .replace("127.0.0.1:8003", "127.0.0.1:0")
        .replace("127.0.0.1:8001", &auth.addr.to_string())
        .replace("127.0.0.1:8002", &api_addr.to_string())
        .replace("max_ttl: 60s", "max_ttl: 1s")
        .replace("grace_period: 5s", "grace_period: 0s")
        .replace("shutdown_timeout: 5s", "shutdown_timeout: 1s")
        + "  - name: any-of-demo\n    prefix: /anyof/\n    upstream: api\n    scopes: { any_of: [write, groups] }\n"
        + "  - name: all-of-demo\n    prefix: /allof/\n    upstream: api\n    scopes: { all_of: [read, groups] }\n"
        + "  - name: step-up-demo\n    prefix: /stepup/\n    upstream: api\n    acr_values: [urn:tokengate:acr:mfa]\n    max_age: 600\n"
        + "  - name: fresh-demo\n    prefix: /fresh/\n    upstream: api\n    acr_values: [urn:tokengate:acr:mfa]\n    max_age: 3\n";
    assert_ne!(text, shipped);
    let dir = std::env::temp_dir().join(format!(
        "tg-front-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config_file = dir.join("proxy.yaml");
    std::fs::write(&config_file, text).unwrap();
    let env = move |key: &str| match key {
        "PROXY_CLIENT_ID" => Some(proxy_id.clone()),
        "PROXY_CLIENT_SECRET" => Some(proxy_secret.clone()),
        _ => None,
    };
    // Decided as the stack decides it: an override, which reloads keep.
    let config = proxy::load_config_with_env(&config_file, env)
        .unwrap()
        .with_overrides(&proxy::config::Overrides::from([(
            "upstreams.api.proxy_secret",
            api_secret,
        )]))
        .unwrap();
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .unwrap();
    FrontDoor {
        base: format!("http://{}", proxy.listen_addr()),
        admin: format!("http://{}", proxy.admin_addr()),
        auth,
        client_id,
        secret,
        config_file,
        proxy: Some(proxy),
        http: reqwest::Client::new(),
    }
}

impl FrontDoor {
    async fn token_for(&self, username: &str, password: &str, scope: Option<&str>) -> String {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", username),
            ("password", password),
        ];
        if let Some(scope) = scope {
            form.push(("scope", scope));
        }
        let response = self
            .http
            .post(format!("{}/o/token/", self.base))
            .basic_auth(&self.client_id, Some(&self.secret))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let json: Value = response.json().await.unwrap();
        json["access_token"].as_str().unwrap().to_owned()
    }

    async fn token(&self, scope: Option<&str>) -> String {
        self.token_for("alice", "wonderland", scope).await
    }

    async fn get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.unwrap()
    }

    async fn shutdown(mut self) {
        if let Some(proxy) = self.proxy.take() {
            tokio::task::spawn_blocking(move || proxy.shutdown())
                .await
                .unwrap();
        }
        self.auth.stop().await;
    }
}

async fn refusal(response: reqwest::Response) -> (StatusCode, String, Value) {
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        status,
        challenge,
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_spec_3_through_the_front_door() {
    let door = front_door().await;
    let all = door.token(None).await;
    let read = door.token(Some("read")).await;

    let users: Value = door.get("/users/", Some(&all)).await.json().await.unwrap();
    assert_eq!(users[0]["username"], "alice");
    assert!(users[0].get("password").is_none());

    let (status, challenge, body) = refusal(door.get("/users/", None).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(challenge, "Bearer realm=\"api\", scope=\"read\"");
    assert_eq!(
        body["detail"],
        "Authentication credentials were not provided."
    );

    let (status, challenge, _) = refusal(door.get("/users/", Some("not-a-token")).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        challenge
            .starts_with("Bearer realm=\"api\", error=\"invalid_token\", error_description=\""),
        "{challenge}"
    );

    let (status, challenge, body) = refusal(door.get("/groups/", Some(&read)).await).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        challenge,
        "Bearer realm=\"api\", error=\"insufficient_scope\", scope=\"groups\""
    );
    assert_eq!(
        body["detail"],
        "You do not have permission to perform this action."
    );

    // A spoofed scope header changes nothing: the proxy strips it and decides from the token.
    let response = door
        .http
        .post(format!("{}/users/", door.base))
        .bearer_auth(&read)
        .header("X-Auth-Scope", "read write groups")
        .form(&[("username", "mallory")])
        .send()
        .await
        .unwrap();
    let (status, challenge, _) = refusal(response).await;
    assert_eq!(
        (status, challenge.as_str()),
        (
            StatusCode::FORBIDDEN,
            "Bearer realm=\"api\", error=\"insufficient_scope\", scope=\"write\""
        )
    );

    // Create with write scope; the new user signs in with the password grant through the front door.
    let response = door
        .http
        .post(format!("{}/users/", door.base))
        .bearer_auth(&all)
        .form(&[
            ("username", "bob"),
            ("password", "builder"),
            ("email", "bob@example.org"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let bob: Value = response.json().await.unwrap();
    assert_eq!(bob["username"], "bob");
    let bob_token = door.token_for("bob", "builder", Some("read")).await;
    assert_eq!(
        door.get(&format!("/users/{}/", bob["id"]), Some(&bob_token))
            .await
            .status(),
        StatusCode::OK
    );

    let (status, _, body) = refusal(door.get("/users/987654/", Some(&all)).await).await;
    assert_eq!(
        (status, body["detail"].as_str()),
        (StatusCode::NOT_FOUND, Some("Not found."))
    );
    let response = door
        .http
        .post(format!("{}/groups/", door.base))
        .bearer_auth(&all)
        .json(&serde_json::json!({"name": "staff"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = door
        .http
        .post(format!("{}/groups/", door.base))
        .bearer_auth(&all)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    // Unmatched paths are denied.
    assert_eq!(
        door.get("/secret/", Some(&all)).await.status(),
        StatusCode::NOT_FOUND
    );

    // any-of and all-of: allowed requests reach the API (which has no such path: its 404),
    // refused ones are the proxy's 403.
    let read_groups = door.token(Some("read groups")).await;
    let write = door.token(Some("write")).await;
    for (path, token, expected) in [
        ("/anyof/x", &read, StatusCode::FORBIDDEN),
        ("/anyof/x", &write, StatusCode::NOT_FOUND),
        ("/anyof/x", &read_groups, StatusCode::NOT_FOUND),
        ("/allof/x", &read, StatusCode::FORBIDDEN),
        ("/allof/x", &write, StatusCode::FORBIDDEN),
        ("/allof/x", &read_groups, StatusCode::NOT_FOUND),
    ] {
        assert_eq!(
            door.get(path, Some(token)).await.status(),
            expected,
            "{path}"
        );
    }

    // Introspection through the front door with an introspection-scoped bearer (the seed's way).
    let rs = door.token(Some("introspection")).await;
    let claims: Value = door
        .http
        .post(format!("{}/o/introspect/", door.base))
        .bearer_auth(&rs)
        .form(&[("token", &all)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (claims["active"].as_bool(), claims["username"].as_str()),
        (Some(true), Some("alice"))
    );
    door.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_introspection_for_concurrent_requests_and_revocation_after_the_cache() {
    let door = front_door().await;
    let token = door.token(None).await;
    let before = door.auth.introspections.load(Ordering::SeqCst);
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let (http, url, token) = (
                door.http.clone(),
                format!("{}/users/", door.base),
                token.clone(),
            );
            tokio::spawn(async move {
                http.get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .map(|r| r.status())
            })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap().unwrap(), StatusCode::OK);
    }
    assert_eq!(
        door.auth.introspections.load(Ordering::SeqCst) - before,
        1,
        "20 concurrent requests, one introspection"
    );

    let revoked = door
        .http
        .post(format!("{}/o/revoke_token/", door.base))
        .basic_auth(&door.client_id, Some(&door.secret))
        .form(&[("token", &token)])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    let started = Instant::now();
    loop {
        let status = door.get("/users/", Some(&token)).await.status();
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert_eq!(status, StatusCode::OK);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "revocation not seen within the 1 s max TTL"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    door.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_server_down_is_503_and_back_up_is_served() {
    let mut door = front_door().await;
    let token = door.token(None).await;
    door.auth.stop().await;
    let (status, _, body) = refusal(door.get("/users/", Some(&token)).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body["detail"].is_string());
    let ready = door
        .http
        .get(format!("{}/readyz", door.admin))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(ready, StatusCode::SERVICE_UNAVAILABLE);
    door.auth.restart().await;
    // While failing, the proxy probes the server at most every 400 ms (one probe at a time), so
    // it is served again within half a second of the server's return.
    let back = Instant::now();
    loop {
        let status = door.get("/users/", Some(&token)).await.status();
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            back.elapsed() < Duration::from_secs(1),
            "not served again within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    door.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_reload_without_dropping_a_request() {
    let door = front_door().await;
    let token = door.token(None).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let load = {
        let (http, url, token, stop, sent) = (
            door.http.clone(),
            format!("{}/users/", door.base),
            token.clone(),
            stop.clone(),
            sent.clone(),
        );
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                statuses.push(
                    http.get(&url)
                        .bearer_auth(&token)
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0),
                );
                sent.fetch_add(1, Ordering::SeqCst);
            }
            statuses
        })
    };
    // Wait until the load is under way, then reload in the middle of it.
    while sent.load(Ordering::SeqCst) < 20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        door.get("/groups/", Some(&token)).await.status(),
        StatusCode::OK
    );
    // The new file moves the groups route away, so /groups/ becomes unmatched.
    let text = std::fs::read_to_string(&door.config_file).unwrap().replace(
        "  - name: groups\n    path: /groups/\n",
        "  - name: groups\n    path: /groups-moved/\n",
    );
    std::fs::write(&door.config_file, text).unwrap();
    let proxy = door.proxy.as_ref().unwrap();
    assert!(proxy.reload().is_ok());
    assert_eq!(
        door.get("/groups/", Some(&token)).await.status(),
        StatusCode::NOT_FOUND
    );
    // A broken file is refused and the rules in force stay.
    std::fs::write(&door.config_file, "routes: [oops").unwrap();
    assert!(proxy.reload().is_err());
    assert_eq!(
        door.get("/users/", Some(&token)).await.status(),
        StatusCode::OK
    );
    let after_reloads = sent.load(Ordering::SeqCst);
    while sent.load(Ordering::SeqCst) < after_reloads + 20 {
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::SeqCst);
    let statuses = load.await.unwrap();
    assert!(statuses.len() >= 40, "the load ran across the reloads");
    assert!(
        statuses.iter().all(|s| *s == 200),
        "a request failed during the reload: {statuses:?}"
    );
    door.shutdown().await;
}

/// RFC 9470 step-up through the front door: a route requiring `acr_values:
/// [urn:tokengate:acr:mfa]` and `max_age: 600` refuses a password-grant token with 401 and the
/// exact challenge; the person signs in with a second factor (pyotp, through the front door's
/// authorization endpoint, `tests/acr_client.py`) and that token passes; a route whose `max_age`
/// (3 s) the sign-in has outlived refuses it with the "more recent" challenge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_up_routes_ask_for_a_second_factor_and_a_recent_sign_in() {
    let found = std::process::Command::new("python3")
        .args(["-c", "import pyotp, requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(std::env::var("CI").is_err(), "CI must install pyotp");
        eprintln!("SKIPPED: pip install pyotp requests");
        return;
    }
    let door = front_door().await;
    let password_token = door.token(None).await;
    let (status, challenge, body) =
        refusal(door.get("/stepup/anything", Some(&password_token)).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge,
        "Bearer realm=\"api\", error=\"insufficient_user_authentication\", \
         error_description=\"A different authentication level is required.\", \
         acr_values=\"urn:tokengate:acr:mfa\", max_age=\"600\""
    );
    assert_eq!(
        body["detail"],
        "A stronger or more recent sign-in is required."
    );

    // A person with an authenticator app signs in again through the front door.
    let store = &door.auth.store;
    testing::user(store, "carol", "step up please").await;
    let redirect = "http://127.0.0.1:9/callback";
    let input = authserver::store::ApplicationInput {
        name: "step-up client".into(),
        client_type: authserver::store::ClientType::Confidential,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: redirect.into(),
        allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: Some(authserver::config::AccessTokenFormat::Jwt),
    };
    let (app, secret) = store
        .create_application(&input, None, None, None)
        .await
        .unwrap();
    let (introspector, introspector_secret) =
        testing::application(store, GrantType::ClientCredentials, true).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/authserver/tests/acr_client.py"
    );
    let mut command = std::process::Command::new("python3");
    command.args([
        script,
        &door.base,
        &app.client_id,
        &secret.unwrap(),
        redirect,
        "carol",
        "step up please",
        &introspector,
        &introspector_secret,
    ]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "acr_client.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let weak = summary["password_session"]["access_token"]
        .as_str()
        .unwrap();
    let strong = summary["no_max_age"]["access_token"].as_str().unwrap();
    let auth_time = summary["no_max_age"]["tokens"]["access_token"]["auth_time"]
        .as_i64()
        .unwrap();
    // The code flow's password-only sign-in is refused as the password grant's was.
    let (status, _, _) = refusal(door.get("/stepup/anything", Some(weak)).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // The two-factor sign-in passes the gate (the example API has no such page: its 404).
    let passed = door.get("/stepup/anything", Some(strong)).await;
    assert_eq!(passed.status(), StatusCode::NOT_FOUND);
    assert!(passed.headers().get("www-authenticate").is_none());
    // Once the sign-in is more than 3 s old, /fresh/ asks for a more recent one.
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    while now() - auth_time <= 4 {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, challenge, _) = refusal(door.get("/fresh/anything", Some(strong)).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge,
        "Bearer realm=\"api\", error=\"insufficient_user_authentication\", \
         error_description=\"More recent authentication is required.\", \
         acr_values=\"urn:tokengate:acr:mfa\", max_age=\"3\""
    );
    door.shutdown().await;
}
