//! Forward-auth mode with Debian's nginx in front: `auth_request` to the decision endpoint, the
//! identity headers passed on to the app with `auth_request_set`, refusals (401 with its
//! challenge, 403) passed back to the client; and the same decisions asked directly, with the
//! `X-Original-*` headers ignored from a peer that is not trusted.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Introspector, ROUTES, config_yaml, echo_upstream, echoed, free_port, start_proxy,
    two_free_ports,
};
use serde_json::Value;

struct Nginx(Child, std::path::PathBuf);

impl Drop for Nginx {
    /// SIGTERM, so that the master stops its worker too (SIGKILL would orphan it).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn nginx(port: u16, auth: std::net::SocketAddr, app: std::net::SocketAddr) -> Nginx {
    let dir = std::env::temp_dir().join(format!("tokengate-nginx-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = format!(
        r#"
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {dir};
  proxy_temp_path {dir};
  fastcgi_temp_path {dir};
  uwsgi_temp_path {dir};
  scgi_temp_path {dir};
  server {{
    listen 127.0.0.1:{port};
    location / {{
      auth_request /_auth;
      auth_request_set $auth_user $upstream_http_x_auth_username;
      auth_request_set $auth_scope $upstream_http_x_auth_scope;
      auth_request_set $auth_challenge $upstream_http_www_authenticate;
      add_header WWW-Authenticate $auth_challenge always;
      proxy_set_header X-Auth-Username $auth_user;
      proxy_set_header X-Auth-Scope $auth_scope;
      proxy_pass http://{app};
    }}
    location = /_auth {{
      internal;
      proxy_pass http://{auth};
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-URI $request_uri;
      proxy_set_header X-Original-Method $request_method;
    }}
  }}
}}
"#,
        dir = dir.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .args(["-e", "stderr", "-c"])
        .arg(dir.join("nginx.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx runs");
    Nginx(child, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_against_the_forward_auth_endpoint() {
    let introspector = Introspector::start().await;
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth_port = free_port();
    let yaml = format!(
        "forward_auth: {{ listen: \"127.0.0.1:{auth_port}\", trusted_peers: [127.0.0.1] }}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, ROUTES)
    );
    let (proxy, config) = start_proxy("forward-auth", &yaml).await;
    let auth = proxy.forward_auth_addr().unwrap();
    let port = free_port();
    let _nginx = nginx(port, auth, app);
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(url("/public/x")).send().await.is_err() {
        assert!(Instant::now() < deadline, "nginx did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Allowed: the app gets the identity nginx took from the decision.
    let resp = client
        .get(url("/read"))
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echo: Value = resp.json().await.unwrap();
    assert_eq!(echoed(&echo, "x-auth-username"), ["alice"]);
    assert_eq!(echoed(&echo, "x-auth-scope"), ["read"]);
    assert_eq!(echo["target"], "/read");

    // Refused: 401 with the challenge, 403 for a missing scope; the app never asked.
    let resp = client.get(url("/read")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer realm="), "{challenge}");
    let resp = client
        .get(url("/read"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client
        .get(url("/all"))
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    // The method counts: /upload takes POST and PUT only, so a GET matches no route (403).
    let resp = client
        .get(url("/upload"))
        .bearer_auth("rw")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);

    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_request_headers_only_from_trusted_peers() {
    let introspector = Introspector::start().await;
    let app = echo_upstream().await;
    let (listen, admin) = two_free_ports();
    let auth_port = free_port();
    // 127.0.0.1 is not trusted here: X-Original-URI is ignored, the request's own path counts.
    let yaml = format!(
        "forward_auth: {{ listen: \"127.0.0.1:{auth_port}\", trusted_peers: [10.0.0.0/8] }}\n{}",
        config_yaml(listen, admin, &introspector.url(), app, ROUTES)
    );
    let (proxy, config) = start_proxy("forward-auth-untrusted", &yaml).await;
    let auth = proxy.forward_auth_addr().unwrap();
    let client = reqwest::Client::new();
    let resp = client
        .get(format!("http://{auth}/read"))
        .header("X-Original-URI", "/public/x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        401,
        "judged on /read, not on the claimed /public/x"
    );
    let resp = client
        .get(format!("http://{auth}/read"))
        .bearer_auth("read")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-auth-username"], "alice");
    let _ = std::fs::remove_file(config);
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
}
