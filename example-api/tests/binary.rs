//! The `example-api` binary: `--check-config`, configuration errors, the loopback rule, and a
//! real start in `behind-proxy` mode answering over a socket.

use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_example-api");
const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/example-api.yaml");
const PROXY_SECRET: &str = "binary-test-proxy-secret-0123456789";

fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("EXAMPLE_API_CONFIG")
        .env_remove("EXAMPLE_API_LISTEN");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("run example-api");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("example-api-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn check_config_accepts_the_shipped_file() {
    let (ok, _, stderr) = run(&["--check-config", "--config", SHIPPED], &[]);
    assert!(
        !ok && stderr.contains("proxy_secret"),
        "behind_proxy without the proxy's secret: {stderr}"
    );
    let (ok, stdout, stderr) = run(
        &["--check-config", "--config", SHIPPED],
        &[("EXAMPLE_API_PROXY_SECRET", PROXY_SECRET)],
    );
    assert!(ok, "{stderr}");
    // The file may follow --check-config itself, as with `proxy --check-config FILE`; a file
    // that does not exist fails.
    let secret = [("EXAMPLE_API_PROXY_SECRET", PROXY_SECRET)];
    let (ok, named, stderr) = run(&["--check-config", SHIPPED], &secret);
    assert!(ok && named == stdout, "{named} {stderr}");
    let (ok, _, stderr) = run(&["--check-config", "/nonexistent/x.yaml"], &secret);
    assert!(
        !ok && stderr.contains("/nonexistent/x.yaml: cannot read"),
        "{stderr}"
    );
    assert!(
        stdout.contains("OK (token_source behind_proxy, listen 127.0.0.1:8002, 6 routes)"),
        "{stdout}"
    );
}

#[test]
fn config_errors_name_file_key_and_value_and_exit_non_zero() {
    let (ok, _, stderr) = run(
        &["--check-config", "--config", SHIPPED],
        &[
            ("EXAMPLE_API_LISTEN", "0.0.0.0:8002"),
            ("EXAMPLE_API_PROXY_SECRET", PROXY_SECRET),
        ],
    );
    assert!(!ok);
    assert!(
        stderr.contains(
            "environment variable EXAMPLE_API_LISTEN: \"0.0.0.0:8002\": not a loopback address"
        ),
        "{stderr}"
    );
    let bad = temp_file(
        "bad.yaml",
        "mode: introspect\nintrospection: { url: 'http://x/' }\nroutes: []\n",
    );
    let (ok, _, stderr) = run(
        &["--check-config"],
        &[("EXAMPLE_API_CONFIG", bad.to_str().unwrap())],
    );
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{}: key \"introspection\": (no credentials)",
            bad.display()
        )),
        "{stderr}"
    );
    let (ok, _, stderr) = run(&["--config", "/nonexistent/x.yaml"], &[]);
    assert!(
        !ok && stderr.contains("/nonexistent/x.yaml: cannot read"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
}

#[test]
fn starts_and_serves_behind_the_proxy() {
    // A free port for the binary.
    let port = test_support::free_port();
    let dir =
        std::env::temp_dir().join(format!("example-api-bin-db-{}-{port}", std::process::id()));
    let db = format!("sqlite://{}/db.sqlite", dir.display());
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args(["--config", SHIPPED])
        .env("EXAMPLE_API_LISTEN", &listen)
        .env("EXAMPLE_API_DATABASE_URL", &db)
        .env("EXAMPLE_API_PROXY_SECRET", PROXY_SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(async {
        let http = reqwest::Client::new();
        let url = format!("http://{listen}/groups/");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let sent = http
                .get(&url)
                .header("x-auth-scope", "groups")
                .header("x-tokengate-proxy-secret", PROXY_SECRET)
                .send()
                .await;
            if let Ok(response) = sent {
                let status = response.status().as_u16();
                let anonymous = http.get(&url).send().await.unwrap().status().as_u16();
                return (status, response.text().await.unwrap(), anonymous);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "example-api did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(result, (200, "[]".to_owned(), 401));
}
