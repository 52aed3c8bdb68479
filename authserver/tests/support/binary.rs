//! The `authserver` binary run as an operator runs it, with no `AUTHSERVER_*` variable inherited
//! from the test's environment.

use std::io::Write;
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_authserver");

/// The command with no `AUTHSERVER_*` variable inherited but the secret the signing keys are
/// encrypted with, as a deployment sets it (the tests' own, as `authserver::testing::connect`).
pub fn command(args: &[&str]) -> Command {
    let mut command = bare_command(args);
    command.env(
        "AUTHSERVER_SECRETS_SYSTEM",
        authserver::testing::TEST_SECRET,
    );
    command
}

/// The command with no `AUTHSERVER_*` variable at all.
pub fn bare_command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AUTHSERVER_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs `args` against the database `db` with `stdin` piped in.
pub fn run(args: &[&str], db: &str, stdin: &str) -> Output {
    let mut child = command(args)
        .arg("--database-url")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start authserver");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs `args` against `db` off the async runtime, as an operator in another process would;
/// asserts that it succeeded and returns what it printed.
pub async fn run_ok(args: &[&str], db: &str) -> Vec<u8> {
    let (args, db): (Vec<String>, String) =
        (args.iter().map(|a| a.to_string()).collect(), db.into());
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, &db, "")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
