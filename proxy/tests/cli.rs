//! The `proxy` binary: `--check-config`, a bad configuration at start, SIGTERM draining an
//! in-flight request, and the allocator settings it runs with.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Introspector, config_yaml, temp_path};

const BIN: &str = env!("CARGO_BIN_EXE_proxy");

#[test]
fn check_config_accepts_the_shipped_example() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/proxy.yaml");
    let out = Command::new(BIN)
        .args(["--check-config", example])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK (15 routes, 2 upstreams)"));
}

#[test]
fn check_config_refuses_a_bad_file_with_a_clear_message() {
    let path = temp_path("bad");
    let yaml = config_yaml(
        8000,
        8003,
        "http://127.0.0.1:1/",
        "127.0.0.1:9".parse().unwrap(),
        common::ROUTES,
    );
    std::fs::write(
        &path,
        yaml.replace(
            "upstream: api, scopes: [read] }",
            "upstream: apx, scopes: [read] }",
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--check-config")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(
        stderr.contains("routes[1] (read): key \"upstream\": \"apx\""),
        "{stderr}"
    );
}

#[test]
fn a_bad_configuration_at_start_exits_non_zero_without_panicking() {
    let path = temp_path("bad-start");
    std::fs::write(&path, "listen: 127.0.0.1:1\nbogus: true\n").unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: ") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let out = Command::new(BIN)
        .args(["--config", "/nonexistent/proxy.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_an_in_flight_request_and_exits_zero() {
    let introspector = Introspector::start().await;
    // An upstream that says when the request reached it, so SIGTERM comes while it is in flight
    // (a fixed pause lost the race on a loaded machine: the request had not connected yet).
    let arrived = std::sync::Arc::new(tokio::sync::Notify::new());
    let upstream = {
        let arrived = arrived.clone();
        common::serve(move |_| {
            let arrived = arrived.clone();
            async move {
                arrived.notify_one();
                tokio::time::sleep(Duration::from_millis(800)).await;
                (200, serde_json::json!({}))
            }
        })
        .await
    };
    let (listen, admin) = common::two_free_ports();
    let path = temp_path("sigterm");
    std::fs::write(
        &path,
        config_yaml(listen, admin, &introspector.url(), upstream, common::ROUTES),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client
        .get(format!("http://127.0.0.1:{admin}/healthz"))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the proxy never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let slow = tokio::spawn(
        client
            .get(format!("http://127.0.0.1:{listen}/public/slow"))
            .send(),
    );
    tokio::time::timeout(Duration::from_secs(10), arrived.notified())
        .await
        .expect("the request reaches the upstream");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let resp = slow.await.unwrap().expect("in-flight request completes");
    assert_eq!(resp.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = std::fs::remove_file(&path);
    assert!(status.success(), "{status:?}");
}

#[test]
fn outside_the_repository_the_shipped_configuration_is_compiled_in() {
    let empty = std::env::temp_dir().join(format!("tokengate-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    // A file named explicitly must exist: one line naming the setting, exit 1.
    for (flag, env) in [
        (Some("/nonexistent/proxy.yaml"), None),
        (None, Some("/nonexistent/p.yaml")),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(&empty).env_remove("PROXY_CONFIG");
        if let Some(file) = flag {
            cmd.args(["--config", file]);
        }
        if let Some(file) = env {
            cmd.env("PROXY_CONFIG", file);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let file = flag.or(env).unwrap();
        assert_eq!(
            stderr.trim(),
            format!(
                "error: --config/PROXY_CONFIG={file}: cannot read: No such file or directory (os error 2)"
            )
        );
    }
    let missing = Command::new(BIN)
        .current_dir(&empty)
        .args(["--check-config", "proxy.yaml"])
        .output()
        .unwrap();
    assert_eq!(
        missing.status.code(),
        Some(1),
        "--check-config on a missing file"
    );
    // Nothing named, no config/proxy.yaml here: the shipped one, on free ports.
    let mut child = Command::new(BIN)
        .current_dir(&empty)
        .env_remove("PROXY_CONFIG")
        .env("PROXY_LISTEN", "127.0.0.1:0")
        .env("PROXY_ADMIN_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("proxy listening") {
                break;
            }
        }
        seen
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lines.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let seen = lines.join().unwrap();
    let _ = std::fs::remove_dir_all(&empty);
    assert!(seen.contains("the shipped configuration"), "{seen}");
    assert!(seen.contains("proxy listening"), "{seen}");
}

/// The `proxy` binary re-executes itself with mimalloc's settings
/// ([`resource_server::allocator::SETTINGS`]: a 250 ms purge delay, no transparent huge pages)
/// where the operator has not set them, and keeps the operator's value where they have.
#[test]
fn the_binary_runs_with_its_allocator_settings_unless_the_operator_set_them() {
    for operator in [None, Some("1")] {
        let mut command = Command::new(BIN);
        command
            .env_remove("PROXY_CONFIG")
            .env_remove("MIMALLOC_PURGE_DELAY")
            .env_remove("MIMALLOC_ALLOW_THP")
            .env("PROXY_LISTEN", "127.0.0.1:0")
            .env("PROXY_ADMIN_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(value) = operator {
            command.env("MIMALLOC_ALLOW_THP", value);
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        // Listening: the re-execution (same process id) is done.
        let listening = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .any(|line| line.contains("proxy listening"))
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !listening.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let environment = test_support::environment_of(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(listening.join().unwrap(), "the proxy never listened");
        for (var, value) in resource_server::allocator::SETTINGS {
            let value = match operator {
                Some(theirs) if var == "MIMALLOC_ALLOW_THP" => theirs,
                _ => value,
            };
            let want = format!("{var}={value}");
            assert!(
                environment.contains(&want),
                "operator's value {operator:?}: {want} not in {environment:?}"
            );
        }
    }
}

#[test]
fn check_config_refuses_an_oversized_file_unread() {
    let path = temp_path("huge");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(100 << 20).unwrap();
    let started = Instant::now();
    let out = Command::new(BIN)
        .arg("--check-config")
        .arg(&path)
        .output()
        .unwrap();
    let took = started.elapsed();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        format!(
            "error: {}: 104857600 bytes or more, above the limit of 16777216 bytes",
            path.display()
        )
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
}
