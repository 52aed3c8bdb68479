//! DPoP end to end (issue 40, RFC 9449) through the front door: the Pingora proxy (plain HTTP
//! listener) in front of the real authorization server and the example API. Tokens are asked
//! for through the proxy with a proof whose `htu` is the front door's token endpoint (the
//! issuer), then presented to the API under the `DPoP` scheme with a proof per request. Each
//! refusal is checked for its status and `WWW-Authenticate: DPoP` challenge: replay, wrong
//! `htu`, wrong `htm`, another key, a stale `iat`, a missing `ath`, a bound token sent as
//! Bearer (§7.2), an unbound token on a `dpop: required` route, and a gRPC call's shape.
//! The proofs are hand-signed (`resource_server::dpop::signer`), and made by panva's
//! oauth4webapi (npm, `tests/browser/dpop.mjs`) as a client nobody here wrote: client
//! credentials, password and refresh grants, with and without required nonces.

use authserver::config::Settings;
use authserver::store::{GrantType, Store};
use authserver::testing;
use resource_server::dpop::signer::{ProofClaims, ProofSigner, new_jti};
use serde_json::Value;

/// The front door: the proxy on `port`, the authorization server behind it at `/o/`.
pub struct Front {
    pub port: u16,
    pub base: String,
    _proxy: proxy::ProxyHandle,
    _dir: TempDir,
}

/// A directory removed at drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The stack: the authorization server (its issuer the front door), the example API behind the
/// proxy, and the proxy introspecting tokens.
pub async fn front(store: &Store, configure: impl FnOnce(&mut Settings)) -> Front {
    let port = test_support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut settings = Settings::for_tests("unused");
    settings.issuer = base.clone();
    settings.access_token_audience = base.clone();
    configure(&mut settings);
    let auth_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let auth_addr = auth_listener.local_addr().unwrap();
    let app = authserver::app(authserver::AppState::new(settings, store.clone()));
    tokio::spawn(async move { axum::serve(auth_listener, app).await });
    let (introspector_id, introspector_secret) =
        testing::application(store, GrantType::ClientCredentials, true).await;

    let api_secret = authserver::secrets::random_token();
    let proof = api_secret.clone();
    let api_config = example_api::config::Config::from_yaml_with_env(
        &std::fs::read_to_string("config/example-api.yaml").unwrap(),
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

    let dir = std::env::temp_dir().join(format!("tokengate-dpop-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let api_secret_file = dir.join("api.secret");
    std::fs::write(&api_secret_file, &api_secret).unwrap();
    let yaml = format!(
        r#"listen: 127.0.0.1:{port}
admin_listen: 127.0.0.1:0
threads: 1
work_stealing: true
grace_period: 0s
shutdown_timeout: 1s
upstreams:
  authserver: {{ address: "{auth_addr}", pass_authorization: true }}
  api: {{ address: "{api_addr}", proxy_secret_file: "{api_secret}" }}
introspection:
  url: http://{auth_addr}/o/introspect/
  client_id: {introspector_id}
  client_secret: {introspector_secret}
  cache: {{ max_ttl: 5s, negative_ttl: 1s, capacity: 100 }}
routes:
  - {{ name: oauth, prefix: /o/, upstream: authserver, public: true }}
  - {{ name: metadata, path: /.well-known/oauth-authorization-server, upstream: authserver, public: true }}
  - {{ name: users-read, path: /users/, methods: [GET, HEAD], upstream: api, scopes: [read] }}
  - {{ name: groups-dpop, path: /groups/, methods: [GET], upstream: api, scopes: [read], dpop: required }}
"#,
        api_secret = api_secret_file.display(),
    );
    let file = dir.join("proxy.yaml");
    std::fs::write(&file, yaml).unwrap();
    let config = proxy::load_config(&file).unwrap();
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .unwrap();
    wait_for(&base).await;
    Front {
        port,
        base,
        _proxy: proxy,
        _dir: TempDir(dir),
    }
}

/// Until the proxy answers (it starts on its own threads).
async fn wait_for(base: &str) {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{base}/o/token/")).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the proxy at {base} never answered");
}

fn now() -> i64 {
    authserver::store::now()
}

/// What an API call answered: status, `WWW-Authenticate`, `grpc-status`, body.
#[derive(Debug)]
struct Answer {
    status: u16,
    challenge: String,
    grpc_status: Option<String>,
    body: String,
}

async fn call(url: &str, method: &str, headers: &[(&str, &str)]) -> Answer {
    let http = reqwest::Client::new();
    let mut request = http.request(method.parse().unwrap(), url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let reply = request.send().await.unwrap();
    let header = |name: &str| {
        reply
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Answer {
        status: reply.status().as_u16(),
        challenge: header("www-authenticate").unwrap_or_default(),
        grpc_status: header("grpc-status"),
        body: reply.text().await.unwrap(),
    }
}

fn claims(htm: &str, htu: &str, iat: i64, token: Option<&str>) -> ProofClaims {
    ProofClaims {
        htm: htm.into(),
        htu: htu.into(),
        iat,
        jti: new_jti(),
        ath: token.map(resource_server::dpop::access_token_hash),
        nonce: None,
    }
}

fn assert_dpop_refusal(answer: &Answer, error: &str, what: &str) {
    assert_eq!(answer.status, 401, "{what}: {answer:?}");
    assert!(
        answer
            .challenge
            .starts_with(&format!("DPoP error=\"{error}\"")),
        "{what}: {answer:?}"
    );
    assert!(
        answer.challenge.contains("algs=\"ES256 EdDSA"),
        "{what}: {answer:?}"
    );
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert!(body["detail"].is_string(), "{what}: {answer:?}");
}

/// A client_credentials token through the front door, proven by `signer` when given.
async fn grant(front: &Front, client: &(String, String), signer: Option<&ProofSigner>) -> Value {
    let url = format!("{}/o/token/", front.base);
    let mut request = reqwest::Client::new()
        .post(&url)
        .basic_auth(&client.0, Some(&client.1))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "read groups"),
        ]);
    if let Some(signer) = signer {
        request = request.header("DPoP", signer.proof("POST", &url, now(), None));
    }
    let reply = request.send().await.unwrap();
    assert_eq!(reply.status(), 200);
    reply.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dpop_bound_tokens_through_the_front_door() {
    let store = testing::store().await;
    let client = testing::application(&store, GrantType::ClientCredentials, false).await;
    let front = front(&store, |_| {}).await;
    let signer = ProofSigner::es256();
    let granted = grant(&front, &client, Some(&signer)).await;
    assert_eq!(granted["token_type"], "DPoP", "{granted}");
    let token = granted["access_token"].as_str().unwrap();
    let users = format!("{}/users/", front.base);
    let dpop_auth = format!("DPoP {token}");

    // A proof for this request: accepted; its replay is not.
    let proof = signer.sign(&claims("GET", &users, now(), Some(token)));
    let ok = call(
        &users,
        "GET",
        &[("authorization", &dpop_auth), ("dpop", &proof)],
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let replay = call(
        &users,
        "GET",
        &[("authorization", &dpop_auth), ("dpop", &proof)],
    )
    .await;
    assert_dpop_refusal(&replay, "invalid_dpop_proof", "replay");
    assert!(replay.challenge.contains("used already"), "{replay:?}");
    // The URL as the client wrote it may carry a query, an explicit default port: same htu.
    let with_query = signer.sign(&claims(
        "GET",
        &format!("{users}?page=2"),
        now(),
        Some(token),
    ));
    let ok = call(
        &format!("{users}?page=2"),
        "GET",
        &[("authorization", &dpop_auth), ("dpop", &with_query)],
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");

    let other_key = ProofSigner::es256();
    let other_header = serde_json::json!({
        "typ": "dpop+jwt", "alg": "ES256", "jwk": ProofSigner::eddsa().jwk()
    });
    let cases: Vec<(&str, String)> = vec![
        (
            "wrong htu (path)",
            signer.sign(&claims(
                "GET",
                &format!("{}/groups/", front.base),
                now(),
                Some(token),
            )),
        ),
        (
            "wrong htu (host)",
            signer.sign(&claims(
                "GET",
                "https://api.example/users/",
                now(),
                Some(token),
            )),
        ),
        (
            "wrong htm",
            signer.sign(&claims("POST", &users, now(), Some(token))),
        ),
        (
            "another key",
            other_key.sign(&claims("GET", &users, now(), Some(token))),
        ),
        (
            "stale iat",
            signer.sign(&claims("GET", &users, now() - 600, Some(token))),
        ),
        (
            "missing ath",
            signer.sign(&claims("GET", &users, now(), None)),
        ),
        (
            "ath of another token",
            signer.sign(&claims("GET", &users, now(), Some("another-token"))),
        ),
        (
            "a jwk of another algorithm",
            signer.sign_with_header(other_header, &claims("GET", &users, now(), Some(token))),
        ),
    ];
    for (what, proof) in &cases {
        let answer = call(
            &users,
            "GET",
            &[("authorization", &dpop_auth), ("dpop", proof)],
        )
        .await;
        assert_dpop_refusal(&answer, "invalid_dpop_proof", what);
    }
    // No proof at all under the DPoP scheme.
    let none = call(&users, "GET", &[("authorization", &dpop_auth)]).await;
    assert_dpop_refusal(&none, "invalid_dpop_proof", "no proof");
    // The bound token as a bearer token (§7.2), with or without a proof.
    let bearer = format!("Bearer {token}");
    let fresh = signer.sign(&claims("GET", &users, now(), Some(token)));
    for headers in [
        vec![("authorization", bearer.as_str())],
        vec![("authorization", bearer.as_str()), ("dpop", fresh.as_str())],
    ] {
        let answer = call(&users, "GET", &headers).await;
        assert_dpop_refusal(&answer, "invalid_token", "Bearer downgrade");
    }
    // A gRPC call keeps the gRPC shape: 200, grpc-status 16 (UNAUTHENTICATED), the challenge.
    let grpc = call(
        &users,
        "GET",
        &[
            ("authorization", &bearer),
            ("content-type", "application/grpc"),
        ],
    )
    .await;
    assert_eq!(grpc.status, 200, "{grpc:?}");
    assert_eq!(grpc.grpc_status.as_deref(), Some("16"), "{grpc:?}");
    assert!(
        grpc.challenge.starts_with("DPoP error=\"invalid_token\""),
        "{grpc:?}"
    );

    // `dpop: required`: the bound token with its proof passes (200: the API answers; the tokens
    // carry `groups`, which the API itself asks of /groups/); an unbound one does not, as Bearer
    // nor under the DPoP scheme.
    let groups = format!("{}/groups/", front.base);
    let proof = signer.sign(&claims("GET", &groups, now(), Some(token)));
    let ok = call(
        &groups,
        "GET",
        &[("authorization", &dpop_auth), ("dpop", &proof)],
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let plain = token_of(&grant(&front, &client, None).await);
    assert_eq!(
        call(
            &users,
            "GET",
            &[("authorization", &format!("Bearer {plain}"))]
        )
        .await
        .status,
        200
    );
    let answer = call(
        &groups,
        "GET",
        &[("authorization", &format!("Bearer {plain}"))],
    )
    .await;
    assert_dpop_refusal(
        &answer,
        "invalid_token",
        "unbound on a dpop: required route",
    );
    let proof = signer.sign(&claims("GET", &groups, now(), Some(&plain)));
    let answer = call(
        &groups,
        "GET",
        &[
            ("authorization", &format!("DPoP {plain}")),
            ("dpop", &proof),
        ],
    )
    .await;
    assert_dpop_refusal(
        &answer,
        "invalid_token",
        "unbound under the DPoP scheme, dpop: required",
    );
    assert!(front.port > 0);
}

fn token_of(granted: &Value) -> String {
    granted["access_token"].as_str().unwrap().to_owned()
}

/// Whether node and oauth4webapi are here (`npm ci` in `tests/browser/`); otherwise a skip
/// notice, or a failure under CI.
fn oauth4webapi_available() -> bool {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node && dir.join("node_modules/oauth4webapi/package.json").exists() {
        return true;
    }
    let message = "the oauth4webapi test needs node and `npm ci` in tests/browser/";
    assert!(std::env::var("CI").is_err(), "{message}");
    eprintln!("SKIPPED: {message}");
    false
}

/// `tests/browser/dpop.mjs` against a front door: its JSON summary.
async fn oauth4webapi(nonce: bool) -> Value {
    let store = testing::store().await;
    testing::user(&store, "alice", "wonderland").await;
    let service = testing::application(&store, GrantType::ClientCredentials, false).await;
    let password = testing::application(&store, GrantType::Password, false).await;
    let front = front(&store, |s| s.dpop_nonce_required = nonce).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .current_dir(dir)
            .arg("dpop.mjs")
            .env("BASE_URL", &front.base)
            .env("SERVICE_ID", &service.0)
            .env("SERVICE_SECRET", &service.1)
            .env("PASSWORD_ID", &password.0)
            .env("PASSWORD_SECRET", &password.1)
            .env("USERNAME", "alice")
            .env("PASSWORD", "wonderland")
            .output()
            .map(|output| (output, front))
    })
    .await
    .unwrap()
    .expect("run node");
    let (output, _front) = output;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "dpop.mjs failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap();
    serde_json::from_str(last).unwrap()
}

fn assert_oauth4webapi_summary(summary: &Value) {
    let algs = summary["dpop_signing_alg_values_supported"].to_string();
    assert!(
        algs.contains("ES256") && algs.contains("EdDSA"),
        "{summary}"
    );
    for alg in ["ES256", "EdDSA"] {
        let r = &summary["algorithms"][alg];
        assert_eq!(
            r["client_credentials_token_type"], "dpop",
            "{alg}: {summary}"
        );
        assert_eq!(r["api_first"], 200, "{alg}: {summary}");
        assert_eq!(r["api_second"], 200, "{alg}: {summary}");
        assert_eq!(r["api_as_bearer"], 401, "{alg}: {summary}");
        assert!(
            r["api_as_bearer_challenge"]
                .as_str()
                .unwrap()
                .starts_with("DPoP error=\"invalid_token\""),
            "{alg}: {summary}"
        );
        assert_eq!(r["password_token_type"], "dpop", "{alg}: {summary}");
        assert_eq!(r["api_password"], 200, "{alg}: {summary}");
        assert_eq!(
            r["refresh_other_key"], "invalid_dpop_proof",
            "{alg}: {summary}"
        );
        assert_eq!(r["refresh_token_type"], "dpop", "{alg}: {summary}");
        assert_eq!(r["api_refreshed"], 200, "{alg}: {summary}");
        assert_eq!(r["api_other_key"], 401, "{alg}: {summary}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth4webapi_client_credentials_password_and_refresh() {
    if !oauth4webapi_available() {
        return;
    }
    let summary = oauth4webapi(false).await;
    assert_oauth4webapi_summary(&summary);
    assert_eq!(summary["nonce_retries"], 0, "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth4webapi_retries_with_the_required_nonce() {
    if !oauth4webapi_available() {
        return;
    }
    let summary = oauth4webapi(true).await;
    assert_oauth4webapi_summary(&summary);
    // The first token request learns the nonce; oauth4webapi keeps it for the origin after.
    assert!(summary["nonce_retries"].as_u64().unwrap() >= 1, "{summary}");
}
