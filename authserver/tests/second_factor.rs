//! Second factors over real HTTP (issue 41): TOTP enrolment and the sign-in's second step driven
//! by `tests/totp_client.py` with pyotp as the authenticator app.

use authserver::config::Settings;
use authserver::testing;
use serde_json::Value;

/// Runs a python script of `tests/` with `args`; its last line parsed as JSON.
async fn python(script: &str, args: Vec<String>) -> Value {
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut command = std::process::Command::new("python3");
    command.arg(&script).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run python3"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// Whether python3 has `modules`; CI must.
fn have_python(modules: &str) -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(std::env::var("CI").is_err(), "CI must install {modules}");
        eprintln!("SKIPPED: pip install {modules}");
    }
    found
}

/// Enrolment from the user's page (otpauth:// URI and QR code, confirmed by a code one step
/// behind), then sign-ins: a wrong code 400, the right one signs in, the same code again 400, the
/// next step's code signs in, a recovery code once only, and 5 wrong codes before 429 with
/// `Retry-After: 900`, which refuses a right code too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyotp_enrols_and_signs_in_with_totp_and_recovery_codes() {
    if !have_python("pyotp, requests") {
        return;
    }
    let store = testing::store().await;
    let user = testing::user(&store, "otp-alice", "correct horse battery").await;
    let server = testing::spawn_server(
        store.clone(),
        Settings::for_tests("unused"),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    let summary = python(
        "totp_client.py",
        vec![
            server.base_url.clone(),
            "otp-alice".into(),
            "correct horse battery".into(),
        ],
    )
    .await;
    assert_eq!(summary["uri_name"], "otp-alice");
    assert_eq!(summary["uri_issuer"], "tokengate 127.0.0.1:8000");
    assert_eq!(summary["confirm_wrong"], 400);
    assert_eq!(summary["recovery_codes"], 10);
    assert_eq!(summary["wrong"], serde_json::json!([400, false]));
    assert_eq!(summary["right"], serde_json::json!([303, true]));
    assert_eq!(summary["right_location"], "/o/authorized-tokens/");
    assert_eq!(summary["replayed"], serde_json::json!([400, false]));
    assert_eq!(summary["next_step"], serde_json::json!([303, true]));
    assert_eq!(summary["recovery"], serde_json::json!([303, true]));
    assert_eq!(summary["recovery_again"], serde_json::json!([400, false]));
    // Failures so far in the window: the replayed code (cleared by the next success), then the
    // spent recovery code: 5 in all before the refusal.
    assert_eq!(summary["wrong_before_429"], 4);
    assert_eq!(summary["retry_after"], "900");
    assert_eq!(
        summary["right_while_throttled"],
        serde_json::json!([429, false])
    );
    assert_eq!(store.recovery_codes_left(user.id).await.unwrap(), 9);
    server.stop().await;
}
