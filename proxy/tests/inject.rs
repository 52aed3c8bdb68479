//! `proxy inject` against golden files: every `tests/inject/NAME.in.yaml` injected, with the
//! flags of its `# inject:` line, gives `NAME.out.yaml` and the notes in `NAME.notes.txt`
//! (UPDATE_GOLDEN=1 rewrites them); injecting the output again changes nothing; `--remove` gives
//! the input back. The binary reads a file or stdin, fails with a clear message on bad input, and
//! refuses hostile YAML at once (the timings are printed).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use proxy::inject::{InjectArgs, InjectOptions, inject, remove};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    inject: InjectArgs,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject")
}

/// The options of an input's `# inject: FLAGS` first line (default options without one).
fn options_of(input: &str) -> InjectOptions {
    let flags = input
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# inject:"))
        .unwrap_or_default();
    let args = std::iter::once("inject").chain(flags.split_whitespace());
    Cli::try_parse_from(args).unwrap().inject.options()
}

/// The documents of `input` as inject writes them when it changes nothing.
fn reserialised(input: &str) -> String {
    let docs = resource_server::yaml::documents(input, &Default::default()).unwrap();
    let texts: Vec<String> = docs
        .iter()
        .filter(|d| !d.is_null())
        .map(|d| serde_yaml_ng::to_string(d).unwrap())
        .collect();
    texts.join("---\n")
}

fn golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        if actual.is_empty() && path.extension().is_some_and(|e| e == "txt") {
            let _ = std::fs::remove_file(path);
        } else {
            std::fs::write(path, actual).unwrap();
        }
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        actual,
        expected,
        "{} (UPDATE_GOLDEN=1 to rewrite)",
        path.display()
    );
}

#[test]
fn golden_files() {
    let mut seen = 0;
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.to_str().and_then(|p| p.strip_suffix(".in.yaml")) else {
            continue;
        };
        seen += 1;
        let input = std::fs::read_to_string(&path).unwrap();
        let options = options_of(&input);
        let output = inject(&input, &options).unwrap();
        golden(Path::new(&format!("{name}.out.yaml")), &output.yaml);
        let notes: String = output.notes.iter().map(|n| format!("{n}\n")).collect();
        golden(Path::new(&format!("{name}.notes.txt")), &notes);
        assert_eq!(
            inject(&output.yaml, &options).unwrap().yaml,
            output.yaml,
            "injecting {name} again must change nothing"
        );
        assert_eq!(
            remove(&output.yaml).unwrap().yaml,
            reserialised(&input),
            "--remove must give {name} back"
        );
    }
    assert!(seen >= 4, "golden inputs in {}", dir().display());
}

fn doc<'a>(docs: &'a [serde_yaml_ng::Value], kind: &str, name: &str) -> &'a serde_yaml_ng::Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn injected(file: &str) -> (String, Vec<serde_yaml_ng::Value>) {
    let input = std::fs::read_to_string(dir().join(file)).unwrap();
    let out = inject(&input, &options_of(&input)).unwrap();
    let docs = resource_server::yaml::documents(&out.yaml, &Default::default()).unwrap();
    (input, docs)
}

#[test]
fn what_the_sidecar_gets_and_what_is_left_alone() {
    let (input, docs) = injected("workloads.in.yaml");
    let by = |kind: &str, ns: Option<&str>, name: &str| {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some(kind)
                    && d["metadata"]["name"].as_str() == Some(name)
                    && d["metadata"]["namespace"].as_str() == ns
            })
            .unwrap_or_else(|| panic!("no {kind} {ns:?} {name}"))
            .clone()
    };
    let deployment = by("Deployment", Some("shop"), "api");
    let pod = &deployment["spec"]["template"]["spec"];
    let sidecar = &pod["initContainers"][0];
    assert_eq!(sidecar["name"], "tokengate-proxy");
    assert_eq!(sidecar["restartPolicy"], "Always", "a native sidecar");
    assert_eq!(sidecar["startupProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(sidecar["securityContext"]["runAsNonRoot"], true);
    assert_eq!(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "api-tokengate");
    let app = &pod["containers"][0];
    assert_eq!(
        app["readinessProbe"]["httpGet"]["path"],
        "/app-health/api/readyz"
    );
    assert_eq!(app["readinessProbe"]["httpGet"]["port"], 8003);
    assert_eq!(app["livenessProbe"]["failureThreshold"], 3, "timings kept");
    let probes: serde_json::Value = serde_json::from_str(
        sidecar["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "PROXY_APP_PROBES")
            .unwrap()["value"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        probes["/app-health/api/livez"],
        serde_json::json!({"httpGet": {"path": "/health", "port": 8080}})
    );
    let original: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(input.split("\n---\n").nth(1).unwrap()).unwrap();
    let original = &original["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(app["image"], original["image"]);
    assert_eq!(app["resources"], original["resources"]);
    let service = by("Service", Some("shop"), "api");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8000);
    assert_eq!(
        service["spec"]["ports"][1]["targetPort"], "metrics",
        "not the app's port"
    );
    let elsewhere = by("Service", Some("other"), "api");
    assert_eq!(
        elsewhere["spec"]["ports"][0]["targetPort"], 8080,
        "another namespace"
    );
    assert!(
        docs.iter()
            .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "api-tokengate")
            .count()
            == 1,
        "the existing ConfigMap is used, no starter one"
    );
    let ledger = by("Service", Some("shop"), "ledger");
    assert_eq!(ledger["spec"]["ports"][0]["targetPort"], 8000);
    let stateful = by("StatefulSet", Some("shop"), "ledger");
    let volumes = stateful["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap();
    assert_eq!(volumes.len(), 2, "the existing volume is kept");
    let policy = by("NetworkPolicy", Some("shop"), "ledger-tokengate");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app"],
        "ledger"
    );
    // The proxy's port from anywhere; the admin port (metrics, probes) only from the pods of the
    // metrics namespace: the kubelet's probes come from the node, which no policy blocks.
    let ingress = policy["spec"]["ingress"].as_sequence().unwrap();
    assert_eq!(ingress.len(), 2);
    assert_eq!(ingress[0]["ports"].as_sequence().unwrap().len(), 1);
    assert_eq!(ingress[0]["ports"][0]["port"], 8000);
    assert!(
        ingress[0].get("from").is_none(),
        "the proxy's port: from anywhere"
    );
    assert_eq!(ingress[1]["ports"].as_sequence().unwrap().len(), 1);
    assert_eq!(ingress[1]["ports"][0]["port"], 8003);
    let from = ingress[1]["from"].as_sequence().unwrap();
    assert_eq!(from.len(), 1);
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert!(from[0].get("podSelector").is_none() && from[0].get("ipBlock").is_none());
    let debug = by("Pod", None, "debug");
    assert_eq!(
        debug["spec"]["initContainers"][0]["name"],
        "tokengate-proxy"
    );
    assert_eq!(
        by("Secret", None, "tokengate")["stringData"]["proxy-client-secret"],
        "change-me"
    );
}

#[test]
fn lists_ports_by_name_and_the_starter_config() {
    let (_, docs) = injected("list.in.yaml");
    assert_eq!(docs.len(), 1, "still one List");
    let items = docs[0]["items"].as_sequence().unwrap();
    let service = doc(items, "Service", "shop");
    // A named target port stays named: the proxy's own port name.
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"], "tokengate",
        "named web"
    );
    assert_eq!(service["spec"]["ports"][1]["targetPort"], "metrics");
    let rules = doc(items, "ConfigMap", "shop-tokengate")["data"]["proxy.yaml"]
        .as_str()
        .unwrap();
    let config = proxy::parse_config(rules, "starter", |_| None).unwrap();
    assert_eq!(
        config.upstreams["app"].addresses[0].to_string(),
        "127.0.0.1:3000"
    );
    assert_eq!(config.gate.token_source.as_str(), "jwt");
    // JWTs: no introspection client to follow the stream with, so no revocation section.
    assert!(config.gate.revocation.is_none() && !rules.contains("revocation:"));
    let sidecar =
        &doc(items, "Deployment", "shop")["spec"]["template"]["spec"]["initContainers"][0];
    assert!(
        !serde_yaml_ng::to_string(sidecar)
            .unwrap()
            .contains("PROXY_CLIENT_SECRET"),
        "no Secret needed for JWTs"
    );

    let (_, docs) = injected("kinds.in.yaml");
    let rules = doc(&docs, "ConfigMap", "agent-tokengate")["data"]["proxy.yaml"]
        .as_str()
        .unwrap();
    let env = |k: &str| (k == "PROXY_CLIENT_SECRET").then(|| "from-the-secret".to_owned());
    let config = proxy::parse_config(rules, "starter", env).unwrap();
    let route = &config.gate.rules.routes()[0];
    assert_eq!(
        route.access,
        resource_server::Access::Authenticated {
            all_of: vec!["orders:read".into()],
            any_of: vec![]
        }
    );
    assert!(!rules.contains("from-the-secret") && !rules.contains("client_secret"));
    // It follows the revocation stream, at the introspection URL's origin, with the
    // introspection client (and its secret from the environment).
    let revocation = config
        .gate
        .revocation
        .as_ref()
        .expect("a revocation section");
    assert_eq!(
        revocation.configuration_url,
        "http://authserver:8001/.well-known/ssf-configuration"
    );
    assert_eq!(revocation.client_id, "tokengate-proxy");
    let cron = doc(&docs, "CronJob", "nightly");
    assert_eq!(
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]["restartPolicy"],
        "Always"
    );
}

#[test]
fn app_ports_that_match_nothing_are_refused_naming_what_exists() {
    let input = std::fs::read_to_string(dir().join("workloads.in.yaml")).unwrap();
    for (port, expected) in [
        ("1234", "--app-port 1234 matches no port"),
        ("nope", "--app-port nope matches no port"),
    ] {
        let options = InjectOptions {
            app_port: Some(port.parse().unwrap()),
            ..InjectOptions::default()
        };
        let error = inject(&input, &options).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
        assert!(
            error.contains("http=8080, metrics=9090, Service api targetPort 8080, Service api targetPort metrics"),
            "{error}"
        );
    }
    let options = InjectOptions {
        app_port: Some("metrics".parse().unwrap()),
        ..InjectOptions::default()
    };
    let out = inject(&input, &options);
    assert!(out.is_err(), "ledger has no port named metrics");
    let alone = input.split("\n---\n").nth(1).unwrap().to_owned()
        + "\n---\n"
        + input.split("\n---\n").nth(2).unwrap();
    let out = inject(&alone, &options).unwrap().yaml;
    assert!(
        out.contains("address: 127.0.0.1:9090"),
        "metrics by name is 9090"
    );
    assert!(out.contains("targetPort: 8080"), "http stays: {out}");
}

fn run(args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

#[test]
fn the_command_reads_stdin_or_a_file_and_names_bad_input() {
    let file = dir().join("workloads.in.yaml");
    let expected = std::fs::read_to_string(dir().join("workloads.out.yaml")).unwrap();
    let from_file = run(&["inject", file.to_str().unwrap()], b"");
    assert!(from_file.status.success(), "{from_file:?}");
    assert_eq!(String::from_utf8_lossy(&from_file.stdout), expected);
    assert!(String::from_utf8_lossy(&from_file.stderr).contains("note: "));
    let input = std::fs::read_to_string(&file).unwrap();
    let from_stdin = run(&["inject", "-"], input.as_bytes());
    assert_eq!(String::from_utf8_lossy(&from_stdin.stdout), expected);
    let removed = run(&["inject", "--remove", "-"], &from_stdin.stdout);
    assert_eq!(
        String::from_utf8_lossy(&removed.stdout),
        reserialised(&input)
    );
    let custom = run(
        &["inject", "--image", "ghcr.io/x/tokengate:9", "-"],
        input.as_bytes(),
    );
    assert!(String::from_utf8_lossy(&custom.stdout).contains("image: ghcr.io/x/tokengate:9"));

    let bad = run(
        &["inject", "-"],
        b"kind: Deployment\nmetadata: { name: w }\nspec: {}\n",
    );
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim(),
        "error: <stdin>: document 1 (Deployment w): no pod template"
    );
    let unmatched = run(&["inject", "--app-port", "1234", "-"], input.as_bytes());
    assert_eq!(unmatched.status.code(), Some(1));
    assert!(unmatched.stdout.is_empty());
    let missing = run(&["inject", "/nonexistent.yaml"], b"");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent.yaml"));
}

/// Runs the binary under a 256 MiB address-space limit (`ulimit -v`), through `/usr/bin/time`
/// when there is one for the peak resident memory: (output, wall time, peak KiB if measured).
fn run_bounded(args: &[&str], stdin: &[u8]) -> (std::process::Output, Duration, Option<u64>) {
    let timer = Path::new("/usr/bin/time").exists();
    let script = if timer {
        "ulimit -v 262144; exec /usr/bin/time -f 'peak-rss-kib %M' \"$0\" \"$@\""
    } else {
        "ulimit -v 262144; exec \"$0\" \"$@\""
    };
    let mut child = Command::new("sh")
        .args(["-c", script, env!("CARGO_BIN_EXE_proxy")])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    writer.join().unwrap();
    let peak = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("peak-rss-kib ")?.trim().parse().ok());
    (out, took, peak)
}

#[test]
fn hostile_yaml_is_refused_within_a_second_in_bounded_memory() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
    for (prev, name) in ('a'..='h').zip('b'..='i') {
        bomb.push_str(&format!(
            "{name}: &{name} [{}]\n",
            vec![format!("*{prev}"); 9].join(", ")
        ));
    }
    let deep_flow = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let deep_block = format!("a:\n  {}x\n", "- ".repeat(100_000));
    let huge = "# padding\n".repeat(10 << 20); // 100 MiB
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "alias bomb (9^9 nodes)",
            bomb.as_bytes(),
            "aliases expand to more than 100000 nodes",
        ),
        (
            "100,000-deep flow nesting",
            deep_flow.as_bytes(),
            "nested deeper than 128 levels",
        ),
        (
            "100,000-deep block nesting",
            deep_block.as_bytes(),
            "nested deeper than 128 levels",
        ),
        (
            "100 MiB",
            huge.as_bytes(),
            "above the limit of 16777216 bytes",
        ),
    ];
    // 256 MiB of address space: the binary with its allocator and a 16 MiB input fit; a parse of
    // what these inputs expand to would not.
    for (what, input, expected) in cases {
        let (out, took, peak) = run_bounded(&["inject", "-"], input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "{what}: {} bytes refused in {took:?}, peak RSS {}: {}",
            input.len(),
            peak.map_or("not measured".into(), |kib| format!("{} MiB", kib / 1024)),
            stderr.lines().next().unwrap_or_default()
        );
        if let Some(kib) = peak {
            assert!(kib < 64 << 10, "{what}: peak RSS {kib} KiB");
        }
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.contains(expected), "{what}: {stderr}");
        assert!(took < Duration::from_secs(1), "{what} took {took:?}");
    }
}

#[test]
fn the_metrics_namespace_and_the_revocation_stream_are_flags() {
    let options = |flags: &[&str]| {
        let args = std::iter::once("inject").chain(flags.iter().copied());
        Cli::try_parse_from(args).unwrap().inject.options()
    };
    let defaults = options(&[]);
    assert_eq!(defaults.metrics_namespace.as_deref(), Some("monitoring"));
    assert_eq!(
        defaults.revocation_url.as_deref(),
        Some("http://authserver:8001/.well-known/ssf-configuration")
    );
    let elsewhere = options(&[
        "--introspection-url",
        "https://auth.example.com/o/introspect/",
    ]);
    assert_eq!(
        elsewhere.revocation_url.as_deref(),
        Some("https://auth.example.com/.well-known/ssf-configuration"),
        "at the introspection URL's origin"
    );
    let jwt = [
        "--jwks-url",
        "https://a.example/jwks",
        "--issuer",
        "https://a.example",
        "--audience",
        "api",
    ];
    assert_eq!(
        options(&jwt).revocation_url,
        None,
        "no client to follow it with"
    );
    let both = ["inject", "--revocation-url", "https://a.example/x"].into_iter();
    assert!(
        Cli::try_parse_from(both.chain(jwt)).is_err(),
        "--revocation-url with --jwks-url is refused"
    );
    let off = options(&["--metrics-namespace", "none", "--revocation-url", "none"]);
    assert_eq!((off.metrics_namespace, off.revocation_url), (None, None));
    // No metrics namespace: the admin port is admitted from nowhere (the node's probes pass).
    let input = std::fs::read_to_string(dir().join("workloads.in.yaml")).unwrap();
    let out = inject(&input, &options(&["--metrics-namespace", "none"])).unwrap();
    let docs = resource_server::yaml::documents(&out.yaml, &Default::default()).unwrap();
    let policy = doc(&docs, "NetworkPolicy", "ledger-tokengate");
    let ingress = policy["spec"]["ingress"].as_sequence().unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0]["ports"].as_sequence().unwrap().len(), 1);
    assert_eq!(ingress[0]["ports"][0]["port"], 8000);
}
