//! The authorization server's `/metrics` (issue 27): only on `metrics_listen`, never on the
//! front door; tokens issued by grant, introspection answers by result, build info and process
//! metrics, store latency by operation, read by the Prometheus project's own Python parser of
//! OpenMetrics text (`prometheus_client.openmetrics`; skipped with a notice without it, except
//! under CI).

use authserver::config::Settings;
use authserver::store::GrantType;
use authserver::testing;
use serde_json::Value;
use std::io::Write as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_an_address_of_their_own_parse_with_the_prometheus_parser() {
    let metrics_addr: std::net::SocketAddr = ([127, 0, 0, 1], test_support::free_port()).into();
    let store = testing::store().await;
    testing::user(&store, "alice", "wonderland").await;
    let (client, secret) = testing::application(&store, GrantType::Password, true).await;
    let mut settings = Settings::for_tests("unused");
    settings.metrics_listen = Some(metrics_addr);
    let server = testing::spawn_server(store, settings, "127.0.0.1:0".parse().unwrap()).await;
    let http = reqwest::Client::new();
    let metrics = format!("http://{metrics_addr}/metrics");
    // Ready when both answer.
    let mut before = String::new();
    for _ in 0..200 {
        if let Ok(r) = http.get(&metrics).send().await {
            before = r.text().await.unwrap();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let count = |text: &str, series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let token: Value = http
        .post(format!("{}/o/token/", server.base_url))
        .basic_auth(&client, Some(&secret))
        .form(&[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "wonderland"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let access = token["access_token"].as_str().unwrap();
    for t in [access, "not-a-token"] {
        let status = http
            .post(format!("{}/o/introspect/", server.base_url))
            .basic_auth(&client, Some(&secret))
            .form(&[("token", t)])
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    // Never on the front door.
    let front = http
        .get(format!("{}/metrics", server.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(front.status(), 404);

    let text = http
        .get(&metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Counters are per process (other tests of this binary may add): compared with before.
    let grew = |series: &str| count(&text, series) - count(&before, series);
    assert!(
        grew("tokengate_authserver_tokens_issued_total{grant=\"password\"}") >= 1.0,
        "{text}"
    );
    assert!(grew("tokengate_authserver_introspections_total{result=\"active\"}") >= 1.0);
    assert!(grew("tokengate_authserver_introspections_total{result=\"inactive\"}") >= 1.0);
    // Store latency: the token issue, and the introspections' lookups.
    let store = "tokengate_authserver_store_duration_seconds_count";
    assert!(grew(&format!("{store}{{operation=\"issue_tokens\"}}")) >= 1.0);
    assert!(grew(&format!("{store}{{operation=\"find_token\"}}")) >= 2.0);
    assert!(
        grew(&format!(
            "{store}{{operation=\"find_application_by_client_id\"}}"
        )) >= 3.0
    );
    assert!(!text.contains(access), "no token in the metrics");

    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let found = std::process::Command::new(&python)
        .args(["-c", "import prometheus_client"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").map_or(true, |v| v.is_empty()),
            "CI must install prometheus-client"
        );
        eprintln!("SKIPPED the parser: pip install prometheus-client");
        return;
    }
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
print(json.dumps({f.name: f.type for f in text_string_to_metric_families(sys.stdin.read())}))
"#;
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, kind) in [
        ("tokengate_authserver_tokens_issued", "counter"),
        ("tokengate_authserver_introspections", "counter"),
        ("tokengate_authserver_throttled", "counter"),
        ("tokengate_authserver_build_info", "gauge"),
        ("tokengate_authserver_store_duration_seconds", "histogram"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(families[name], kind, "{name} in {families}");
    }
}
