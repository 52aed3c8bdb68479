//! The README's shell blocks, run as written. "Try the whole stack": its block is extracted, the
//! placeholders the first-start banner fills in are filled in the same way, and bash runs it
//! against a fresh stack. "Put tokengate in front of your service": its `authserver` commands run
//! as the CLI runs them, its `proxy.yaml` starts a proxy in front of a small service, and its
//! curl lines run in bash against them; then a token revoked at the server is refused by that
//! proxy within a second (its `revocation:` lines at work).

mod common;

use common::stack_config;
use std::path::Path;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_runs_as_written() {
    let quick = section("## Put tokengate in front of your service");
    let sh = blocks(&quick, "sh").join("");
    let yaml = blocks(&quick, "yaml").remove(0);

    // Our authorization server on a fresh database.
    let url = authserver::testing::sqlite_url();
    let store = authserver::testing::connect(&url).await;
    let settings = authserver::config::Settings::load_with_env(
        Some(Path::new("config/authserver.yaml")),
        |_: &str| None,
    )
    .unwrap();
    let auth =
        authserver::testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap())
            .await;

    // Every `authserver` line, run as the binary runs it, on that database; the secrets they
    // printed once are given anew here, as this test cannot read the CLI's output.
    let commands: Vec<&str> = sh
        .lines()
        .filter(|l| l.starts_with("authserver "))
        .collect();
    assert_eq!(commands.len(), 2, "{sh}");
    for line in &commands {
        assert!(
            !line.contains(['\'', '"', '\\']),
            "split by spaces only: {line}"
        );
        let mut args: Vec<&str> = line.split_whitespace().collect();
        args.extend(["--database-url", &url]);
        let cli = authserver::cli::Cli::try_parse_args(args).unwrap();
        authserver::cli::run(cli).await.unwrap();
    }
    let secret_of = async |client_id: &str| {
        let app = store
            .find_application_by_client_id(client_id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("the quick start registers {client_id:?}"));
        store
            .regenerate_secret(app.id, std::time::Duration::ZERO)
            .await
            .unwrap()
            .unwrap()
    };
    // The client id the YAML names is the one the first command registered, allowed to introspect.
    let sidecar = secret_of("sidecar").await;
    let reader = secret_of("reader").await;

    // Your service: answers every request with a line of its own.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { "hello from your service" });
    tokio::spawn(async move { axum::serve(upstream, app).await });

    // The proxy from the README's proxy.yaml, on free ports, with PROXY_CLIENT_SECRET set and
    // the proxy secret the README makes with openssl.
    assert!(
        sh.contains("cargo build --release -p authserver -p proxy\n"),
        "{sh}"
    );
    assert!(
        sh.contains("openssl rand -hex 32 > proxy-secret.txt "),
        "{sh}"
    );
    assert!(yaml.contains("revocation:"), "{yaml}");
    let secret_file =
        std::env::temp_dir().join(format!("readme-proxy-secret-{}", std::process::id()));
    std::fs::write(&secret_file, "0123456789abcdef0123456789abcdef\n").unwrap();
    let yaml = yaml
        .replace("proxy-secret.txt", &secret_file.display().to_string())
        .replace("0.0.0.0:8000", "127.0.0.1:0")
        .replace("127.0.0.1:8003", "127.0.0.1:0")
        .replace("127.0.0.1:8080", &upstream_addr.to_string())
        .replace("http://127.0.0.1:8001", &auth.base_url);
    let config = proxy::config::parse_config(&yaml, "proxy.yaml", |key| {
        (key == "PROXY_CLIENT_SECRET").then(|| sidecar.clone())
    })
    .unwrap();
    // What `proxy --check-config proxy.yaml` prints, as the README shows it.
    let check = format!("proxy.yaml: OK ({})", proxy::config::summary(&config));
    assert!(sh.contains(&check), "the README should show {check:?}");
    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(config))
        .await
        .unwrap()
        .unwrap();

    // The curl lines, as written, against them.
    let script: String = sh
        .lines()
        .filter(|l| {
            !["authserver ", "proxy ", "export ", "cargo ", "openssl "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace(
            "http://127.0.0.1:8000",
            &format!("http://{}", proxy.listen_addr()),
        )
        .replace("http://127.0.0.1:8001", &auth.base_url)
        .replace("<its client_secret>", &reader);
    let stdout = run_filled_in(script).await;
    // Without a token: 401 with the challenge; with the reader's token: the service's answer.
    let (refused, allowed) = stdout
        .split_once("hello from your service")
        .map(|(before, _)| before.rsplit_once("HTTP/1.1 ").unwrap())
        .unwrap_or_else(|| panic!("the service never answered:\n{stdout}"));
    assert!(refused.starts_with("HTTP/1.1 401"), "{stdout}");
    assert!(refused.contains("Bearer realm=\"api\""), "{stdout}");
    assert!(allowed.starts_with("200"), "{stdout}");

    // The revocation: lines at work: a token revoked at the server is refused by the proxy
    // within a second, not at the end of its cached answer's life.
    let client = reqwest::Client::new();
    let token: serde_json::Value = client
        .post(format!("{}/o/token/", auth.base_url))
        .basic_auth("reader", Some(&reader))
        .form(&[("grant_type", "client_credentials"), ("scope", "read")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["access_token"].as_str().unwrap().to_owned();
    let items = format!("http://{}/api/items", proxy.listen_addr());
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
    let metrics = format!("http://{}/metrics", proxy.admin_addr());
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
        .post(format!("{}/o/revoke_token/", auth.base_url))
        .basic_auth("reader", Some(&reader))
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
    tokio::task::spawn_blocking(move || proxy.shutdown_now())
        .await
        .unwrap();
    let _ = std::fs::remove_file(secret_file);
    auth.stop().await;
}
