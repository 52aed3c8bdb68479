//! `proxy inject` against golden files: every `tests/inject/NAME.in.yaml` injected gives
//! `NAME.out.yaml` (UPDATE_GOLDEN=1 rewrites them), injecting the output again changes nothing,
//! and the binary reads a file or stdin and fails with a clear message on bad input.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use proxy::inject::{InjectOptions, inject};

#[test]
fn golden_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.to_str().and_then(|p| p.strip_suffix(".in.yaml")) else {
            continue;
        };
        seen += 1;
        let input = std::fs::read_to_string(&path).unwrap();
        let output = inject(&input, &InjectOptions::default()).unwrap();
        let golden = format!("{name}.out.yaml");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &output).unwrap();
        }
        let expected = std::fs::read_to_string(&golden).unwrap();
        assert_eq!(output, expected, "{golden} (UPDATE_GOLDEN=1 to rewrite)");
        assert_eq!(
            inject(&output, &InjectOptions::default()).unwrap(),
            output,
            "injecting {golden} again must change nothing"
        );
    }
    assert!(seen > 0, "no golden inputs in {}", dir.display());
}

#[test]
fn what_the_sidecar_gets_and_what_is_left_alone() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject");
    let input = std::fs::read_to_string(dir.join("workloads.in.yaml")).unwrap();
    let out = inject(&input, &InjectOptions::default()).unwrap();
    let docs: Vec<serde_yaml_ng::Value> = out
        .split("\n---\n")
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    let by = |kind: &str, ns: Option<&str>, name: &str| {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some(kind)
                    && d["metadata"]["name"].as_str() == Some(name)
                    && d["metadata"]["namespace"].as_str() == ns
            })
            .unwrap()
            .clone()
    };
    let deployment = by("Deployment", Some("shop"), "api");
    let pod = &deployment["spec"]["template"]["spec"];
    let sidecar = &pod["containers"][1];
    assert_eq!(sidecar["name"], "tokengate-proxy");
    assert_eq!(sidecar["securityContext"]["runAsNonRoot"], true);
    assert_eq!(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(sidecar["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "api-tokengate");
    assert_eq!(pod["containers"][0], {
        let original: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(input.split("\n---\n").nth(1).unwrap()).unwrap();
        original["spec"]["template"]["spec"]["containers"][0].clone()
    });
    let service = by("Service", Some("shop"), "api");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "tokengate");
    assert_eq!(
        service["spec"]["ports"][1]["targetPort"], "metrics",
        "not the app's port"
    );
    let elsewhere = by("Service", Some("other"), "api");
    assert_eq!(
        elsewhere["spec"]["ports"][0]["targetPort"], 8080,
        "another namespace"
    );
    let ledger = by("Service", Some("shop"), "ledger");
    assert_eq!(ledger["spec"]["ports"][0]["targetPort"], "tokengate");
    let stateful = by("StatefulSet", Some("shop"), "ledger");
    let volumes = stateful["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap();
    assert_eq!(volumes.len(), 2, "the existing volume is kept");
    let debug = by("Pod", None, "debug");
    assert_eq!(debug["spec"]["containers"][1]["name"], "tokengate-proxy");
    assert_eq!(
        by("Secret", None, "tokengate")["stringData"]["proxy-client-secret"],
        "change-me"
    );
}

fn run(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_command_reads_stdin_or_a_file_and_names_bad_input() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject");
    let file = dir.join("workloads.in.yaml");
    let expected = std::fs::read_to_string(dir.join("workloads.out.yaml")).unwrap();
    let from_file = run(&["inject", file.to_str().unwrap()], "");
    assert!(from_file.status.success(), "{from_file:?}");
    assert_eq!(String::from_utf8_lossy(&from_file.stdout), expected);
    let input = std::fs::read_to_string(&file).unwrap();
    let from_stdin = run(&["inject", "-"], &input);
    assert_eq!(String::from_utf8_lossy(&from_stdin.stdout), expected);
    let custom = run(&["inject", "--image", "ghcr.io/x/tokengate:9", "-"], &input);
    assert!(String::from_utf8_lossy(&custom.stdout).contains("image: ghcr.io/x/tokengate:9"));

    let bad = run(
        &["inject", "-"],
        "kind: Deployment\nmetadata: { name: w }\nspec: {}\n",
    );
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim(),
        "error: <stdin>: document 1 (Deployment w): no pod template"
    );
    let missing = run(&["inject", "/nonexistent.yaml"], "");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent.yaml"));
}
