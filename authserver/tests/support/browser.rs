//! Chromium driven by playwright-core from the workspace's `tests/browser/` scripts: whether
//! it can run here, and one script run against a server, its JSON summary read back.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser")
}

pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots")
}

pub fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// Whether the browser, node and playwright-core are here; otherwise what to install.
fn prerequisites() -> Result<(), String> {
    let mut missing = Vec::new();
    if !chromium().exists() {
        missing.push(format!(
            "{} (apt-get install -y chromium chromium-driver)",
            chromium().display()
        ));
    }
    if Command::new("node")
        .arg("--version")
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        missing.push("node (Node.js 20 or later)".to_owned());
    }
    if !browser_dir()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        missing.push(format!(
            "playwright-core (run `npm ci` in {})",
            browser_dir().display()
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("the browser tests need {}", missing.join(", ")))
    }
}

/// True when the test should go on; prints a skip notice, or panics under CI, when it cannot.
pub fn browser_available(test: &str) -> bool {
    match prerequisites() {
        Ok(()) => true,
        Err(message) if std::env::var("CI").is_ok_and(|v| !v.is_empty()) => {
            panic!("{test}: {message}")
        }
        Err(message) => {
            eprintln!("SKIPPED {test}: {message}");
            false
        }
    }
}

/// Runs one scenario of `views.mjs` against `base_url`; returns the JSON summary it prints last.
pub async fn run_scenario(
    scenario: &'static str,
    base_url: String,
    vars: Vec<(&'static str, String)>,
) -> Value {
    run_script(vec!["views.mjs", scenario], base_url, vars).await
}

/// Runs `node script [args]` from `tests/browser/` against `base_url`; returns the JSON summary
/// it prints last.
pub async fn run_script(
    script_and_args: Vec<&'static str>,
    base_url: String,
    vars: Vec<(&'static str, String)>,
) -> Value {
    let scenario = script_and_args.join(" ");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .current_dir(browser_dir())
            .args(script_and_args)
            .env("BASE_URL", base_url)
            .env("SCREENSHOT_DIR", screenshot_dir())
            .env("CHROMIUM", chromium())
            .envs(vars)
            .output()
    })
    .await
    .expect("join the node runner")
    .expect("start node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser scenario {scenario} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no summary from {scenario}:\n{stdout}"));
    serde_json::from_str(last).expect("a JSON summary")
}
