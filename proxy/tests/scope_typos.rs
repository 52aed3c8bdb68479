//! Scope typos (issue 27): `--check-config` reads the authorization server's metadata and warns
//! about every rule's scope it does not list in `scopes_supported`; a server that cannot be read
//! is a note, and the check still passes. A reload logs the same warnings.

mod common;

use std::process::Command;

use common::{config_yaml, serve, temp_path};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_proxy");

const ROUTES: &str = r#"
routes:
  - { name: typo, path: /r, upstream: api, scopes: [raed] }
  - { name: fine, path: /w, upstream: api, scopes: { all_of: [read], any_of: [write, admni] } }
"#;

fn check(introspection_url: &str) -> (bool, String, String) {
    let path = temp_path("scopes");
    let yaml = config_yaml(
        8000,
        8003,
        introspection_url,
        "127.0.0.1:9".parse().unwrap(),
        ROUTES,
    );
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .arg("--check-config")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn check_config_warns_about_scopes_the_authorization_server_does_not_list() {
    let metadata = serve(|req| async move {
        if req.target == "/.well-known/oauth-authorization-server" {
            (
                200,
                json!({"issuer": "x", "scopes_supported": ["read", "write", "groups"]}),
            )
        } else {
            (404, json!({}))
        }
    })
    .await;
    let url = format!("http://{metadata}/o/introspect/");
    let (ok, stdout, stderr) = tokio::task::spawn_blocking(move || check(&url))
        .await
        .unwrap();
    assert!(ok, "{stderr}");
    assert!(stdout.contains("OK (2 routes"), "{stdout}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings[0].contains("route \"typo\" needs scope \"raed\""),
        "{stderr}"
    );
    assert!(
        warnings[1].contains("route \"fine\" needs scope \"admni\""),
        "{stderr}"
    );
    assert!(
        !stderr.contains("\"read\","),
        "listed scopes are not warned about: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_that_cannot_be_read_is_a_note_and_the_check_passes() {
    let broken = serve(|_| async { (200, json!({"issuer": "no scopes here"})) }).await;
    for url in [
        "http://127.0.0.1:1/o/introspect/".to_owned(),
        format!("http://{broken}/o/introspect/"),
    ] {
        let (ok, _, stderr) = tokio::task::spawn_blocking(move || check(&url))
            .await
            .unwrap();
        assert!(ok, "{stderr}");
        assert!(stderr.contains("note: scopes not checked"), "{stderr}");
        assert!(!stderr.contains("warning:"), "{stderr}");
    }
}
