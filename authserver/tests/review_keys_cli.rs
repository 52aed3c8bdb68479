//! Review (keys, JWT claims, operator CLI) written as an attacker would: each test runs the real
//! `authserver` binary and/or a real server over a fresh SQLite database.
//!
//! Guards (pass):
//! - `no_private_key_material_leaves_through_jwks_metadata_or_the_keys_commands`
//! - `the_cli_refuses_newlines_and_escapes_in_names`
//!
//! Findings, fixed (each test failed until its fix):
//! - `a_client_credentials_jwt_never_shares_its_sub_with_a_user`
//! - `the_sqlite_database_holding_private_keys_is_not_readable_by_others`
//! - `the_cli_never_prints_a_database_password_given_as_a_query_parameter`
//! - `the_cli_refuses_bidi_overrides_in_application_names` (low)

mod support;

use authserver::config::Settings;
use authserver::store::Store;
use authserver::testing;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::Value;
use std::process::Output;

use support::binary::run;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn server(db: &str) -> (Store, testing::RunningServer) {
    let store = authserver::testing::connect(db).await;
    let settings = Settings::for_tests(db);
    let running =
        testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await;
    (store, running)
}

/// Private halves (the stored PKCS#8 and the bare 32-byte seed, in either base64) of every key
/// never appear in the JWKS, the metadata, or what `keys rotate` / `keys list` print.
#[tokio::test]
async fn no_private_key_material_leaves_through_jwks_metadata_or_the_keys_commands() {
    let db = testing::created_sqlite_url();
    let mut shown = String::new();
    shown += &text(&run(&["keys", "rotate"], &db, ""));
    shown += &text(&run(&["keys", "rotate", "--delay", "0"], &db, ""));
    shown += &ok(&run(&["keys", "list", "--json"], &db, ""));
    shown += &ok(&run(&["keys", "list"], &db, ""));
    let (store, running) = server(&db).await;
    let http = reqwest::Client::new();
    for path in [
        "/.well-known/jwks.json",
        "/.well-known/oauth-authorization-server",
    ] {
        let reply = http
            .get(format!("{}{path}", running.base_url))
            .send()
            .await
            .unwrap();
        shown += &reply.text().await.unwrap();
    }
    let jwks: Value = serde_json::from_str(
        &http
            .get(format!("{}/.well-known/jwks.json", running.base_url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);
    for jwk in jwks["keys"].as_array().unwrap() {
        let mut names: Vec<&str> = jwk
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        names.sort();
        assert_eq!(names, ["alg", "crv", "kid", "kty", "use", "x"], "{jwk}");
    }
    for key in &keys {
        let pkcs8 = STANDARD.decode(&key.private_key).unwrap();
        // ring's Ed25519 PKCS#8 v2: the seed follows a 16-byte prefix.
        let seed = &pkcs8[16..48];
        for secret in [
            key.private_key.clone(),
            URL_SAFE_NO_PAD.encode(&pkcs8),
            URL_SAFE_NO_PAD.encode(seed),
            STANDARD.encode(seed),
        ] {
            assert!(!shown.contains(&secret), "private key material shown");
        }
    }
    running.stop().await;
}

/// Newlines, escape sequences and other C0/C1 controls in a username, a name or an application
/// name are refused by the CLI (they would forge lines in `user list` / `app list`).
#[tokio::test]
async fn the_cli_refuses_newlines_and_escapes_in_names() {
    let db = testing::created_sqlite_url();
    for bad in [
        "eve\nadmin  superuser",
        "eve\x1b[2Jx",
        "eve\u{85}x",
        "eve\rx",
    ] {
        let out = run(
            &["user", "create", "--username", bad],
            &db,
            "a-long-password-1\n",
        );
        assert!(!out.status.success(), "username {bad:?} accepted");
        let out = run(
            &["user", "create", "--username", "ok", "--first-name", bad],
            &db,
            "a-long-password-1\n",
        );
        assert!(!out.status.success(), "first name {bad:?} accepted");
        let out = run(&["app", "create", "--name", bad], &db, "");
        assert!(!out.status.success(), "app name {bad:?} accepted");
        let out = run(
            &["app", "create", "--name", "x", "--client-id", bad],
            &db,
            "",
        );
        assert!(!out.status.success(), "client id {bad:?} accepted");
        let out = run(&["group", "create", bad], &db, "");
        assert!(!out.status.success(), "group {bad:?} accepted");
        // The refusal itself quotes the value escaped, never raw.
        assert!(!text(&out).contains(bad), "{}", text(&out));
    }
    assert_eq!(ok(&run(&["user", "list", "--json"], &db, "")).trim(), "[]");
}

/// RFC 9068 §5: a client_credentials token's `sub` is the client id, a user's token's `sub` is
/// the user's id, and nothing kept the two apart: `app create --client-id 1` (any numeric id)
/// gave a client whose JWT claimed `sub` = the first user's (the administrator's) id, which a
/// resource server reading `sub` cannot tell apart. All-digit client ids are now refused.
#[tokio::test]
async fn a_client_credentials_jwt_never_shares_its_sub_with_a_user() {
    let db = testing::created_sqlite_url();
    ok(&run(
        &["createsuperuser", "--username", "admin"],
        &db,
        "a-long-password-1\n",
    ));
    let users: Value =
        serde_json::from_str(&ok(&run(&["user", "list", "--json"], &db, ""))).unwrap();
    let admin_id = users[0]["id"].as_i64().unwrap().to_string();
    let refused = run(
        &[
            "app",
            "create",
            "--name",
            "batch job",
            "--grant-type",
            "client-credentials",
            "--client-id",
            &admin_id,
            "--token-format",
            "jwt",
            "--json",
        ],
        &db,
        "",
    );
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("--client-id") && text(&refused).contains("all digits"),
        "{}",
        text(&refused)
    );
    let apps = ok(&run(&["app", "list", "--json"], &db, ""));
    assert!(!apps.contains("batch job"), "{apps}");
}

/// Bidi controls (U+202E RIGHT-TO-LEFT OVERRIDE, U+2066..U+2069 isolates) are format characters,
/// not control characters, so `validation::length` lets them into application names, which the
/// consent page and `app list` show: "Trojan Source"-style spoofing of the name a user approves.
#[tokio::test]
async fn the_cli_refuses_bidi_overrides_in_application_names() {
    let db = testing::created_sqlite_url();
    let out = run(
        &[
            "app",
            "create",
            "--name",
            "Payroll \u{202e}lanretni\u{202c}",
            "--json",
        ],
        &db,
        "",
    );
    assert!(
        !out.status.success(),
        "an application name with U+202E was accepted: {}",
        text(&out)
    );
}

/// The SQLite database holds every signing key's private half in the clear (base64 PKCS#8), the
/// password hashes and the client-secret digests. It is created with the process umask (0644
/// usually), in a folder created 0755: every local user can read it and forge any JWT access
/// token. Checked on the file `authserver keys rotate` creates, and its WAL.
#[test]
fn the_sqlite_database_holding_private_keys_is_not_readable_by_others() {
    use std::os::unix::fs::PermissionsExt;
    // The files and folder as the server makes them (migrate), not as the test would.
    let db = testing::sqlite_url();
    ok(&run(&["migrate"], &db, ""));
    ok(&run(&["keys", "rotate"], &db, ""));
    let file = std::path::PathBuf::from(db.strip_prefix("sqlite://").unwrap());
    let mut shown = Vec::new();
    for path in [
        file.clone(),
        file.with_extension("sqlite-wal"),
        file.parent().unwrap().to_path_buf(),
    ] {
        if let Ok(meta) = std::fs::metadata(&path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                shown.push(format!("{} {mode:o}", path.display()));
            }
        }
    }
    assert!(
        shown.is_empty(),
        "the database with the private signing keys is readable by group/others: {shown:?}"
    );
}

/// `redact_url` (config.rs) hides only a password in the URL's userinfo. PostgreSQL URLs may
/// carry it as a query parameter (`?password=…`, which sqlx and libpq read), and then
/// `--check-config` prints it and a failed start writes it to stderr (and the logs).
#[test]
fn the_cli_never_prints_a_database_password_given_as_a_query_parameter() {
    let secret = "hunter2-db-password";
    for url in [
        format!("postgres://tokengate@127.0.0.1:1/db?password={secret}"),
        format!("postgres://127.0.0.1:1/db?user=tokengate&password={secret}"),
    ] {
        let checked = run(&["--check-config"], &url, "");
        let failed = run(&["user", "list"], &url, "");
        for out in [&checked, &failed] {
            assert!(
                !text(out).contains(secret),
                "the database password is shown: {}",
                text(out)
            );
        }
    }
}
