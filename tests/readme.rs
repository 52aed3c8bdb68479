//! The README's shell blocks, run as written. "Try the whole stack": its block is extracted, the
//! placeholders the first-start banner fills in are filled in the same way, and bash runs it
//! against a fresh stack. "Put tokengate in front of your service": its commands run in bash as
//! written, with the real `authserver` and `proxy` binaries on `PATH`, from a directory outside
//! the repository, in front of a small service; then a token revoked at the server is refused by
//! that proxy within a second (its `revocation:` lines at work).

mod common;

use common::stack_config;
use test_support::free_port;

/// The text of README.md under `heading`, up to the next `## ` heading.
fn section(heading: &str) -> String {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has the section {heading:?}"));
    let rest = &readme[start + heading.len() + 2..];
    rest.split("\n## ").next().unwrap().to_owned()
}

/// The fenced blocks of `lang` in `text`, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    text.split(&format!("```{lang}\n"))
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_owned())
        .collect()
}

/// The first ```sh block of `## Try the whole stack`.
fn walkthrough() -> String {
    blocks(&section("## Try the whole stack"), "sh").remove(0)
}

/// Runs a README shell block whose placeholders are all filled in, with `bash -euo pipefail`;
/// it must succeed. Its standard output.
async fn run_filled_in(script: String) -> String {
    assert!(
        !script.contains('<'),
        "a placeholder left unfilled:\n{script}"
    );
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_runs_as_written() {
    let dir = std::env::temp_dir().join(format!(
        "tg-readme-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(stack_config(&database_url, &[]))
        .await
        .unwrap();
    let first = stack.first_run.clone().unwrap();
    let script = walkthrough()
        .replace(
            "http://127.0.0.1:8000",
            &format!("http://{}", stack.front_door),
        )
        .replace("<client_id>", &first.client_id)
        .replace("<client_secret>", &first.client_secret)
        .replace("<rs_client_id>", &first.resource_server_id)
        .replace("<rs_client_secret>", &first.resource_server_secret)
        .replace("<password>", &first.admin_password);
    let stdout = run_filled_in(script).await;
    // 1: a token; 2: the users list; 3: 403 insufficient_scope; 4: introspection, active.
    assert!(stdout.contains("\"refresh_token\""), "{stdout}");
    assert!(stdout.contains("\"username\":\"admin\""), "{stdout}");
    assert!(stdout.contains("HTTP/1.1 403"), "{stdout}");
    assert!(stdout.contains("error=\"insufficient_scope\""), "{stdout}");
    assert!(stdout.contains("\"active\":true"), "{stdout}");
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The directory of the workspace's `authserver` and `proxy` binaries (beside this test's build
/// directory), built with the README's build line (in the test profile) when they are missing.
fn binaries() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    if !dir.join("authserver").exists() || !dir.join("proxy").exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = std::process::Command::new(cargo)
            .args(["build", "-p", "authserver", "-p", "proxy"])
            .status()
            .unwrap();
        assert!(built.success(), "cargo build -p authserver -p proxy");
    }
    dir
}

/// "Put tokengate in front of your service", run as written with the real binaries on `PATH`,
/// from a fresh directory outside the repository (the README's `~/sidecar`): its build line
/// already done (`binaries`), its `export PATH` pointing at them, `proxy.yaml` written as shown.
/// What changes: the four ports, to free ones (the authorization server's by
/// `AUTHSERVER_LISTEN`, the rest in the text), and a wait for each server sent to the
/// background before the next line. Then a token revoked at the server is refused by that proxy
/// within a second: the standalone server made its key-encryption secret, so its revocation
/// stream is up, and the `revocation:` lines follow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_runs_as_written_outside_the_repository() {
    let quick = section("## Put tokengate in front of your service");
    let sh = blocks(&quick, "sh");
    let yaml = blocks(&quick, "yaml").remove(0);
    let bin = binaries();
    let home = std::env::temp_dir().join(format!(
        "tg-quickstart-{}",
        authserver::secrets::random_client_id()
    ));
    let here = std::env::current_dir().unwrap();
    assert!(!home.starts_with(&here), "outside the repository");
    let work = home.join("sidecar");
    let (auth_port, front, admin) = (free_port(), free_port(), free_port());
    let auth_base = format!("http://127.0.0.1:{auth_port}");

    // Your service: answers every request with a line of its own.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { "hello from your service" });
    tokio::spawn(async move { axum::serve(upstream, app).await });

    let ports = |text: &str| {
        text.replace("0.0.0.0:8000", &format!("127.0.0.1:{front}"))
            .replace("127.0.0.1:8000", &format!("127.0.0.1:{front}"))
            .replace("127.0.0.1:8001", &format!("127.0.0.1:{auth_port}"))
            .replace("127.0.0.1:8003", &format!("127.0.0.1:{admin}"))
            .replace("127.0.0.1:8080", &upstream_addr.to_string())
    };
    let build = "cargo build --release -p authserver -p proxy\n";
    let path = "export PATH=\"$PWD/target/release:$PATH\"\n";
    assert!(sh[0].starts_with(&format!("{build}{path}")), "{}", sh[0]);
    assert!(
        sh[0].contains("\nmkdir -p ~/sidecar && cd ~/sidecar\n"),
        "{}",
        sh[0]
    );
    // Up to 10 s for a server sent to the background to answer its /healthz.
    let waits = |line: &str| {
        let health = match line.split_whitespace().next() {
            Some("authserver") => format!("{auth_base}/healthz"),
            _ => format!("http://127.0.0.1:{admin}/healthz"),
        };
        format!("for _ in $(seq 100); do curl -sf {health} >/dev/null && break; sleep 0.1; done\n")
    };
    let mut script = format!("trap 'jobs -p > {}/pids' EXIT\n", home.display());
    let written = format!(
        "{}cat > proxy.yaml <<'YAML'\n{}YAML\n{}",
        &sh[0][build.len()..],
        ports(&yaml),
        sh[1]
    );
    for line in written.lines() {
        let line = line
            .replace("$PWD/target/release", &bin.display().to_string())
            .replace("~/sidecar", &work.display().to_string());
        script.push_str(&ports(&line));
        script.push('\n');
        if line.split('#').next().unwrap().trim_end().ends_with('&') {
            script.push_str(&waits(&line));
        }
    }
    std::fs::create_dir_all(&home).unwrap();
    // Output to files, not pipes: the servers left in the background keep them open.
    let (out_file, err_file) = (home.join("stdout"), home.join("stderr"));
    let status = {
        let (script, home) = (script.clone(), home.clone());
        let out = std::fs::File::create(&out_file).unwrap();
        let err = std::fs::File::create(&err_file).unwrap();
        tokio::task::spawn_blocking(move || {
            let mut command = std::process::Command::new("bash");
            command
                .args(["-euo", "pipefail", "-c", &script])
                .current_dir(&home)
                .stdout(out)
                .stderr(err)
                .env("AUTHSERVER_LISTEN", format!("127.0.0.1:{auth_port}"));
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy().into_owned();
                if name.starts_with("AUTHSERVER_") && name != "AUTHSERVER_LISTEN"
                    || name.starts_with("PROXY_")
                {
                    command.env_remove(name);
                }
            }
            command.status()
        })
        .await
        .unwrap()
        .unwrap()
    };
    let stdout = std::fs::read_to_string(&out_file).unwrap();
    let stderr = std::fs::read_to_string(&err_file).unwrap();
    let pids = std::fs::read_to_string(home.join("pids")).unwrap_or_default();
    let stop = || {
        for pid in pids.split_whitespace() {
            let _ = std::process::Command::new("kill").arg(pid).status();
        }
    };
    if !status.success() {
        stop();
        panic!("the quick start failed:\n{script}\n{stdout}\n{stderr}");
    }
    // The check line's output, as the README shows it.
    assert!(
        stdout.contains("proxy.yaml: OK (3 routes, 1 upstream)"),
        "{stdout}"
    );
    // Without a token: 401 with the challenge; with the reader's token: the service's answer.
    let (refused, allowed) = stdout
        .split_once("hello from your service")
        .map(|(before, _)| before.rsplit_once("HTTP/1.1 ").unwrap())
        .unwrap_or_else(|| panic!("the service never answered:\n{stdout}\n{stderr}"));
    assert!(refused.contains("HTTP/1.1 401"), "{stdout}");
    assert!(refused.contains("Bearer realm=\"api\""), "{stdout}");
    assert!(allowed.starts_with("200"), "{stdout}");
    // The standalone server kept its key-encryption secret beside its database, 0600.
    let kek = work.join("data/secrets-system");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&kek).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", kek.display());

    let reader = std::fs::read_to_string(work.join("reader.secret")).unwrap();
    revoked_within_a_second(
        &auth_base,
        &format!("127.0.0.1:{front}"),
        &format!("127.0.0.1:{admin}"),
        reader.trim(),
    )
    .await;
    stop();
    let _ = std::fs::remove_dir_all(home);
}

/// A token of the application `reader` (secret `reader`) passes the proxy at `front`, and once
/// revoked at the authorization server at `auth_base` is refused within a second (after the
/// proxy, whose admin port is `admin`, says its revocation stream is healthy).
async fn revoked_within_a_second(auth_base: &str, front: &str, admin: &str, reader: &str) {
    let client = reqwest::Client::new();
    let token: serde_json::Value = client
        .post(format!("{auth_base}/o/token/"))
        .basic_auth("reader", Some(reader))
        .form(&[("grant_type", "client_credentials"), ("scope", "read")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["access_token"].as_str().unwrap().to_owned();
    let items = format!("http://{front}/api/items");
    let status = |token: String| {
        let client = client.clone();
        let items = items.clone();
        async move {
            client
                .get(&items)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(status(token.clone()).await, 200, "cached as active now");
    // The stream is followed once the proxy has polled it: wait until it says healthy.
    let metrics = format!("http://{admin}/metrics");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = client
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("tokengate_proxy_revocation_stream_healthy 1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stream never got healthy:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let revoked = client
        .post(format!("{auth_base}/o/revoke_token/"))
        .basic_auth("reader", Some(reader))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    let revoked_at = std::time::Instant::now();
    while status(token.clone()).await != 401 {
        assert!(
            revoked_at.elapsed() < std::time::Duration::from_secs(1),
            "a revoked token still passes after 1 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    println!("revoked token refused after {:?}", revoked_at.elapsed());
}
