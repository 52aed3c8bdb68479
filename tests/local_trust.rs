//! Nothing is believed because it comes from loopback (issue 21): a process of another user on
//! the same host, talking to the stack's example API and authorization server directly (around
//! the proxy), is refused whatever identity it claims, and its forged `X-Forwarded-For` is not
//! believed by the sign-in throttle. Runs the client as `nobody` with `setpriv`, so it needs root
//! (CI runs as root); elsewhere it prints a skip notice, and fails when `CI` is set.

mod common;

use std::process::Command;

/// `curl` run as uid/gid 65534: the HTTP status it got.
fn curl_as_nobody(args: &[&str]) -> String {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "curl"])
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(args)
        .output()
        .expect("setpriv and curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_is_believed_nowhere() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root: this test must run there"
        );
        eprintln!("skipped: switching to another uid needs root");
        return;
    }
    let dir = std::env::temp_dir().join(format!(
        "tg-local-trust-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(common::stack_config(&database_url, &[]))
        .await
        .unwrap();
    let first = stack.first_run.clone().unwrap();

    // The example API, directly: any identity, any scope, refused; nothing created.
    let api = format!("http://{}", stack.api);
    let claims = [
        "-H",
        "X-Auth-Username: admin",
        "-H",
        "X-Auth-Scope: read write groups",
        "-H",
        "X-Tokengate-Proxy-Secret: a-guess-of-the-proxys-secret-0000",
    ];
    let status = tokio::task::spawn_blocking({
        let api = api.clone();
        move || {
            let users = format!("{api}/users/");
            let mut create = claims.to_vec();
            create.extend([
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "-d",
                r#"{"username":"intruder","password":"long-enough-1"}"#,
                users.as_str(),
            ]);
            let mut list = claims.to_vec();
            list.push(users.as_str());
            (curl_as_nobody(&list), curl_as_nobody(&create))
        }
    })
    .await
    .unwrap();
    assert_eq!(status, ("401".to_owned(), "401".to_owned()));
    assert!(
        stack
            .store
            .find_user_by_username("intruder")
            .await
            .unwrap()
            .is_none()
    );

    // The authorization server, directly: 30 bad passwords, each with another forged address,
    // are all counted against the one real address, so the throttle soon answers 429 to every
    // further guess (were the forged addresses believed, each would be a first guess: 400).
    let token_url = format!("http://{}/o/token/", stack.authserver);
    let client = format!("{}:{}", first.client_id, first.client_secret);
    let statuses = tokio::task::spawn_blocking(move || {
        (0..30)
            .map(|i| {
                let forged = format!("X-Forwarded-For: 198.51.100.{i}");
                let password = format!("password=wrong-{i}");
                curl_as_nobody(&[
                    "-u",
                    &client,
                    "-H",
                    &forged,
                    "-d",
                    "grant_type=password",
                    "-d",
                    "username=admin",
                    "-d",
                    &password,
                    &token_url,
                ])
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let throttled = statuses.iter().position(|s| s == "429");
    assert!(
        throttled.is_some_and(|at| at <= 20 && statuses[at..].iter().all(|s| s == "429")),
        "the real address is throttled, whatever X-Forwarded-For says: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| s == "400" || s == "429"),
        "{statuses:?}"
    );
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
