//! The one-process stack's first-run bootstrap under attack (a review of 2026-11-22),
//! against the real components. The test failed until its fix (the secret's temporary file is
//! now created exclusively under a random name). The review's open findings are in the session
//! note of 2026-11-22 (stack API trusting identity headers on loopback, the API's database role
//! in the Kubernetes manifests, a second stack with its own data directory).

/// `write_secret` (bootstrap.rs) wrote the proxy's introspection secret to a predictable
/// `proxy-client.tmp<pid>` beside the secret file, opened without O_EXCL: whoever may write to
/// the data directory (TOKENGATE_DATA_DIR in a shared folder) could plant a symlink there and
/// receive the secret of a client allowed to introspect every token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_secret_is_never_written_through_a_planted_symlink() {
    let store = authserver::testing::sqlite_store().await;
    let dir = std::env::temp_dir().join(format!(
        "tg-review-link-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let loot = dir.join("attackers-file");
    std::fs::write(&loot, "").unwrap();
    std::os::unix::fs::symlink(
        &loot,
        dir.join(format!("proxy-client.tmp{}", std::process::id())),
    )
    .unwrap();
    let result = tokengate::bootstrap::proxy_secret(
        &store,
        &authserver::config::Settings::for_tests("unused"),
        tokengate::PROXY_CLIENT_ID,
        &dir.join(tokengate::PROXY_SECRET_FILE),
    )
    .await;
    let stolen = std::fs::read_to_string(&loot).unwrap();
    assert!(
        stolen.is_empty(),
        "the secret went through the symlink into the attacker's file (start {}): {stolen}",
        if result.is_ok() {
            "succeeded"
        } else {
            "failed"
        }
    );
}
