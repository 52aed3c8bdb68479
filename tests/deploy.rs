//! The deployment files, checked with real validators from PyPI (`.ci/run` installs them):
//! `kubernetes-validate --strict` on `deploy/kubernetes/` and on what `proxy inject` writes, and
//! the compose file against the Compose Specification schema (`check-jsonschema`). Without the
//! tools the tests print a skip notice, and fail when `CI` is set.

use std::process::Command;

/// Runs `tool args`; `None` (after a notice, or a failure under CI) when the tool is missing.
fn validate(tool: &str, args: &[&str]) -> Option<std::process::Output> {
    match Command::new(tool).args(args).output() {
        Ok(output) => Some(output),
        Err(error) if std::env::var_os("CI").is_some() => {
            panic!("{tool} is needed under CI (pip install {tool}): {error}")
        }
        Err(error) => {
            eprintln!("skipped: {tool} not runnable ({error}); pip install {tool}");
            None
        }
    }
}

fn assert_valid(output: std::process::Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} does not validate:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn kubernetes_manifests_and_injected_workloads_validate_strictly() {
    let mut files: Vec<String> = std::fs::read_dir("deploy/kubernetes")
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    files.extend(
        std::fs::read_dir("proxy/tests/inject")
            .unwrap()
            .map(|e| e.unwrap().path().display().to_string())
            .filter(|p| p.ends_with(".out.yaml")),
    );
    files.sort();
    let mut args = vec!["--strict"];
    args.extend(files.iter().map(String::as_str));
    if let Some(output) = validate("kubernetes-validate", &args) {
        assert_valid(output, &files.join(", "));
    }
}

#[test]
fn the_compose_file_follows_the_compose_specification() {
    let args = [
        "--builtin-schema",
        "vendor.compose-spec",
        "docker-compose.yml",
    ];
    if let Some(output) = validate("check-jsonschema", &args) {
        assert_valid(output, "docker-compose.yml");
    }
}
