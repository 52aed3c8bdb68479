//! The `authserver` binary run as an operator runs it, with no `AUTHSERVER_*` variable inherited
//! from the test's environment.

use std::io::Write;
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_authserver");

/// The command with no `AUTHSERVER_*` variable inherited.
pub fn command(args: &[&str]) -> Command {
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
