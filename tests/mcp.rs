//! Issue 39's round trip with clients nobody here wrote: the MCP Python SDK's own server
//! (`tests/clients/mcp_server.py`, streamable HTTP, no authentication of its own) behind the
//! Pingora proxy, and the SDK's own client (`tests/clients/mcp_client.py`) calling its tool. The
//! client starts with nothing but the server's URL: the proxy's 401 names the protected resource
//! metadata (RFC 9728), which names the authorization server (RFC 8414); the client registers
//! itself (RFC 7591, the `open` policy), signs the user in and consents, runs the code flow
//! with PKCE and `resource` (RFC 8707), and calls the tool with a token whose audience is that
//! MCP server alone. The real authorization server, the real proxy, real HTTP between them.
//!
//! Needs `python3` (or `$PYTHON`) with `mcp` (PyPI); without it the test prints a skip notice, or
//! fails when `CI` is set. On PostgreSQL when `DATABASE_URL` names one, else on SQLite.

mod common;

use authserver::config::{DynamicRegistration, Settings};
use authserver::store::{GrantType, ResourceInput};
use authserver::testing;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use test_support::free_port;

const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// True when the MCP SDK can run; prints a skip notice, or panics under CI, when it cannot.
fn mcp_sdk_available(test: &str) -> bool {
    let found = Command::new(python())
        .args(["-c", "import mcp, httpx, httpx2"])
        .status()
        .is_ok_and(|s| s.success());
    if found {
        true
    } else if std::env::var("CI").is_ok_and(|v| !v.is_empty()) {
        panic!("{test}: CI must install the MCP Python SDK (pip install mcp)");
    } else {
        eprintln!("SKIPPED {test}: pip install mcp");
        false
    }
}

/// A child process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_sdk_discovers_registers_signs_in_and_calls_a_tool_through_the_proxy() {
    if !mcp_sdk_available("the_mcp_sdk_discovers_registers_signs_in_and_calls_a_tool") {
        return;
    }
    let (auth_port, proxy_port, admin_port, mcp_port) =
        (free_port(), free_port(), free_port(), free_port());
    let issuer = format!("http://127.0.0.1:{auth_port}");
    let resource = format!("http://127.0.0.1:{proxy_port}/mcp");

    // The authorization server: open registration; the MCP server registered as an API.
    let store = testing::store().await;
    testing::user(&store, "alice", "alice-password").await;
    store
        .create_resource(&ResourceInput {
            identifier: resource.clone(),
            name: "The MCP server".into(),
            scopes: vec!["mcp:tools".into()],
            token_format: None,
            access_token_lifetime: None,
        })
        .await
        .unwrap();
    let (sidecar_id, sidecar_secret) =
        testing::application(&store, GrantType::ClientCredentials, true).await;
    let mut settings = Settings::for_tests("unused");
    settings.issuer = issuer.clone();
    settings.access_token_audience = issuer.clone();
    settings.dynamic_registration = DynamicRegistration::Open;
    let auth = testing::spawn_server(
        store.clone(),
        settings,
        format!("127.0.0.1:{auth_port}").parse().unwrap(),
    )
    .await;

    // The SDK's MCP server, and the proxy in front of it.
    let server = Killed(
        Command::new(python())
            .args([&format!("{CLIENTS}/mcp_server.py"), &mcp_port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the MCP server"),
    );
    common::listening(mcp_port, "the MCP server").await;
    let yaml = format!(
        r#"
listen: 127.0.0.1:{proxy_port}
admin_listen: 127.0.0.1:{admin_port}
threads: 1
grace_period: 0s
shutdown_timeout: 1s
resource: {resource}
authorization_servers: [{issuer}]
resource_name: The MCP server
upstreams:
  mcp: {{ address: "127.0.0.1:{mcp_port}" }}
introspection:
  url: {issuer}/o/introspect/
  client_id: {sidecar_id}
  client_secret: {sidecar_secret}
routes:
  - {{ name: mcp, prefix: /mcp, upstream: mcp, scopes: ["mcp:tools"] }}
"#
    );
    let path = std::env::temp_dir().join(format!("mcp-proxy-{proxy_port}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    let config = proxy::load_config_with_env(&path, |_| None).expect("the proxy's config");
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .expect("start the proxy");
    common::listening(proxy_port, "the proxy").await;

    // The SDK's client, knowing nothing but the MCP server's URL and the user's password.
    let run = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .args([
                &format!("{CLIENTS}/mcp_client.py"),
                &format!("http://127.0.0.1:{proxy_port}/mcp"),
                "alice",
                "alice-password",
            ])
            .output()
            .expect("run the MCP client")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the MCP client failed: {stderr}");
    let summary: Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stdout)));
    let exchanges: Vec<&str> = summary["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    eprintln!("the MCP SDK's exchanges:\n  {}", exchanges.join("\n  "));

    // The tool answered, to alice (the identity header the proxy set).
    assert_eq!(summary["text"], "5 for alice", "{summary}");
    assert_eq!(summary["is_error"], false);
    // The path it took: a 401 from the proxy, the resource's metadata (path-suffixed form),
    // the authorization server's, a registration, the token, the call again.
    let position = |needle: &str| {
        exchanges
            .iter()
            .position(|e| e.contains(needle))
            .unwrap_or_else(|| panic!("no exchange {needle:?} in {exchanges:#?}"))
    };
    let first_401 = position("/mcp -> 401");
    let metadata = position("/.well-known/oauth-protected-resource/mcp -> 200");
    let server_metadata = position("/.well-known/oauth-authorization-server -> 200");
    let registered = position("/o/register -> 201");
    let token = position("/o/token/ -> 200");
    assert!(first_401 < metadata && metadata < server_metadata);
    assert!(server_metadata < registered && registered < token);
    assert!(
        exchanges[token + 1..]
            .iter()
            .any(|e| e.contains("/mcp -> 200"))
    );

    // The token is for this MCP server alone, with its scope, for alice, through the client the
    // SDK registered; the registration is in the store.
    assert_eq!(summary["scope"], "mcp:tools");
    let client_id = summary["client_id"].as_str().unwrap();
    let app = store
        .find_application_by_client_id(client_id)
        .await
        .unwrap()
        .expect("the registered client");
    assert_eq!(app.allowed_scopes, ["mcp:tools"]);
    let answer: Value = reqwest::Client::new()
        .post(format!("{issuer}/o/introspect/"))
        .basic_auth(&sidecar_id, Some(&sidecar_secret))
        .form(&[("token", summary["access_token"].as_str().unwrap())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["active"], true);
    assert_eq!(answer["aud"], resource.as_str(), "{answer}");
    assert_eq!(answer["username"], "alice");
    assert_eq!(answer["client_id"], client_id);

    drop(server);
    proxy.shutdown_now();
    auth.stop().await;
    let _ = std::fs::remove_file(path);
}
