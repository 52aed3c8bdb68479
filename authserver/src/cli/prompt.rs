//! Reading passwords and secrets for the command line: from a variable, from piped stdin (one
//! line), or typed at a terminal with echo off (`stty -echo`, restored on every path, Ctrl-C
//! included).

use anyhow::{Context, bail};
use std::io::{BufRead, IsTerminal, Write};
use std::process::{Command, Stdio};

/// The value of `variable` if set and not empty, else [`read_secret`] (asked twice on a terminal).
pub async fn password(variable: &str, what: &str) -> anyhow::Result<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Ok(value),
        _ => read_secret(what, true).await,
    }
}

/// One line from stdin. At a terminal: prompted on stderr, typed without echo, and when
/// `confirm`, typed twice alike.
pub async fn read_secret(what: &str, confirm: bool) -> anyhow::Result<String> {
    if !std::io::stdin().is_terminal() {
        let value = tokio::task::spawn_blocking(read_line)
            .await
            .context("stdin reader stopped")?
            .with_context(|| format!("cannot read the {what} from stdin"))?;
        if value.is_empty() {
            bail!("no {what} given: pipe it on stdin");
        }
        return Ok(value);
    }
    let value = hidden(&format!("{}: ", capitalized(what))).await?;
    if value.is_empty() {
        bail!("no {what} given");
    }
    if confirm && hidden(&format!("{} (again): ", capitalized(what))).await? != value {
        bail!("The two passwords differ.");
    }
    Ok(value)
}

fn capitalized(what: &str) -> String {
    let mut chars = what.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A line from stdin without its line ending.
fn read_line() -> std::io::Result<String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Echo turned off on the terminal on stdin while this lives.
struct EchoOff;

impl EchoOff {
    fn new() -> anyhow::Result<EchoOff> {
        if stty("-echo") {
            Ok(EchoOff)
        } else {
            bail!("cannot turn off echo on this terminal (stty): pipe the secret on stdin instead")
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        stty("echo");
    }
}

fn stty(setting: &str) -> bool {
    Command::new("stty")
        .arg(setting)
        .stdin(Stdio::inherit())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Prompts on stderr and reads a line with echo off. The read runs on its own thread so that
/// Ctrl-C, caught here, restores echo before the command ends.
async fn hidden(prompt: &str) -> anyhow::Result<String> {
    // Echo goes off before the prompt shows, so nothing typed after it is echoed.
    let echo_off = EchoOff::new()?;
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = sender.send(read_line());
    });
    let line = tokio::select! {
        line = receiver => line.context("stdin reader stopped")?,
        _ = tokio::signal::ctrl_c() => {
            drop(echo_off);
            eprintln!();
            bail!("interrupted");
        }
    };
    drop(echo_off);
    eprintln!();
    line.context("cannot read from the terminal")
}
