//! The README's walkthrough, run as written: its shell block is extracted, the placeholders the
//! first-start banner fills in are filled in the same way, and bash runs it against a fresh stack.

mod common;

use common::stack_config;

/// The first ```sh block after the heading `## The seed's walkthrough against the stack`.
fn walkthrough() -> String {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let section = readme
        .split("## The seed's walkthrough against the stack")
        .nth(1)
        .expect("README has the walkthrough section");
    let block = section.split("```sh\n").nth(1).expect("a sh block");
    block.split("```").next().unwrap().to_owned()
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
    // 1: a token; 2: the users list; 3: 403 insufficient_scope; 4: introspection, active.
    assert!(stdout.contains("\"refresh_token\""), "{stdout}");
    assert!(stdout.contains("\"username\":\"admin\""), "{stdout}");
    assert!(stdout.contains("HTTP/1.1 403"), "{stdout}");
    assert!(stdout.contains("error=\"insufficient_scope\""), "{stdout}");
    assert!(stdout.contains("\"active\":true"), "{stdout}");
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
