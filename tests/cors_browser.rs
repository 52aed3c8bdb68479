//! CORS in a real browser, two origins (issue 27): a single-page application on one loopback
//! origin (a public client with PKCE) runs the code flow against the real authorization server,
//! exchanges the code from the page, and calls an API through the real proxy with its token; a
//! page on another origin is refused by Chromium on both. The route also requires a group, and
//! the upstream sees it in `X-Auth-Groups`. Driven by `tests/browser/cors.mjs`.
//!
//! Needs Debian's `chromium` (or `$CHROMIUM`), `node`, and `npm ci` in `tests/browser/`; without
//! them the test prints a skip notice, or fails when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::Command;
use test_support::free_port;

use authserver::config::Settings;
use authserver::domain::ClientType;
use authserver::store::{ApplicationInput, GrantType};
use authserver::testing;
use axum::http::HeaderMap;
use serde_json::{Value, json};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// True when Chromium, node and playwright-core are here; otherwise a skip notice (a failure
/// under CI).
fn browser_available() -> bool {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let playwright = browser_dir()
        .join("node_modules/playwright-core/package.json")
        .exists();
    if chromium().exists() && node && playwright {
        return true;
    }
    let message = "the browser test needs chromium, node and `npm ci` in tests/browser";
    if std::env::var("CI").is_ok_and(|v| !v.is_empty()) {
        panic!("{message}");
    }
    eprintln!("SKIPPED cors_browser: {message}");
    false
}

/// An upstream that answers with the identity headers the proxy sent it.
async fn identity_echo() -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(|headers: HeaderMap| async move {
        let get = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        axum::Json(json!({
            "username": get("x-auth-username"),
            "groups": get("x-auth-groups"),
        }))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_a_listed_origin_signs_in_and_calls_the_api_and_another_origin_is_refused() {
    if !browser_available() {
        return;
    }
    let (app_port, other_port) = (free_port(), free_port());
    let app_origin = format!("http://127.0.0.1:{app_port}");

    let store = testing::sqlite_store().await;
    let alice = testing::user(&store, "alice", "wonderland").await;
    let admins = store.create_group("admins").await.unwrap();
    store.add_member(admins.id, alice.id).await.unwrap();
    let (spa, _) = store
        .create_application(
            &ApplicationInput {
                name: "Browser SPA".into(),
                client_type: ClientType::Public,
                grant_type: GrantType::AuthorizationCode,
                redirect_uris: format!("{app_origin}/callback"),
                allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
                may_introspect: false,
                may_use_ssf: false,
                pkce_required: true,
                token_format: None,
            },
            None,
            None,
            None,
        )
        .await
        .unwrap();
    let (rs_id, rs_secret) = testing::application(&store, GrantType::ClientCredentials, true).await;

    let mut settings = Settings::for_tests("unused");
    // http, so the session cookie has no Secure flag and works on 127.0.0.1.
    settings.issuer = "http://127.0.0.1".into();
    settings.cors_origins = vec![app_origin.clone()];
    let auth = testing::spawn_server(store, settings, "127.0.0.1:0".parse().unwrap()).await;

    let upstream = identity_echo().await;
    let (listen, admin) = (free_port(), free_port());
    let yaml = format!(
        r#"
listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
threads: 1
grace_period: 0s
upstreams:
  api: {{ address: "{upstream}" }}
introspection:
  url: {auth_url}/o/introspect/
  client_id: {rs_id}
  client_secret: {rs_secret}
routes:
  - name: reports
    prefix: /api/
    upstream: api
    scopes: [read]
    groups_any: [admins]
    cors:
      allowed_origins: [{app_origin}]
"#,
        auth_url = auth.base_url
    );
    let path = std::env::temp_dir().join(format!("tokengate-cors-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).unwrap();
    let config = proxy::load_config(&path).expect("valid proxy configuration");
    let _ = std::fs::remove_file(&path);
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .expect("proxy starts");

    let vars = [
        ("AUTH_URL", auth.base_url.clone()),
        ("PROXY_URL", format!("http://{}", proxy.listen_addr())),
        ("API_PATH", "/api/reports".to_owned()),
        ("CLIENT_ID", spa.client_id.clone()),
        ("APP_PORT", app_port.to_string()),
        ("OTHER_PORT", other_port.to_string()),
        ("RESOURCE_OWNER", "alice".to_owned()),
        ("RESOURCE_OWNER_PASSWORD", "wonderland".to_owned()),
        (
            "SCREENSHOT_DIR",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target/screenshots")
                .display()
                .to_string(),
        ),
        ("CHROMIUM", chromium().display().to_string()),
    ];
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .current_dir(browser_dir())
            .arg("cors.mjs")
            .envs(vars)
            .output()
    })
    .await
    .unwrap()
    .expect("start node");
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "cors.mjs failed:\n{stdout}\n{stderr}"
    );
    let summary: Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    assert_eq!(summary["token_status"], 200);
    assert_eq!(summary["scope"], "read groups");
    assert_eq!(summary["api_status"], 200);
    assert_eq!(
        summary["api"],
        json!({"username": "alice", "groups": "admins"}),
        "the upstream saw the user and the group"
    );
    assert_eq!(summary["other_api"]["blocked"], "TypeError");
    assert_eq!(summary["other_token"]["blocked"], "TypeError");
    assert_eq!(summary["other_metadata_status"], 200);
}
