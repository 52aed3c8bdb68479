//! The JWT signing keys encrypted at rest (issue 21, item 3), on SQLite and, with
//! `DATABASE_URL`, PostgreSQL: what a reader of the database gets, the secrets a server needs to
//! start, the rotation of those secrets, and keys stored in the clear before.
//!
//! - `the_database_row_holds_no_private_key`: the row's `private_key` was the PKCS#8 whose seed
//!   minted tokens a JWT-mode proxy accepted (failed before the fix).
//! - `a_missing_or_wrong_secret_stops_the_server_naming_the_setting_never_the_secret`
//! - `keys_reencrypt_moves_every_key_under_the_first_secret`
//! - `keys_stored_in_the_clear_are_encrypted_at_start`

mod support;

use authserver::jwt::KeyRing;
use authserver::store::Store;
use authserver::testing;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sqlx::Row;
use std::process::Output;
use support::binary::{bare_command, command};

/// Every signing key row as stored: (kid, private_key).
async fn raw_rows(store: &Store) -> Vec<(String, String)> {
    sqlx::query("SELECT kid, private_key FROM signing_keys ORDER BY generation")
        .fetch_all(store.pool())
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get("kid"), row.get("private_key")))
        .collect()
}

/// Whether `haystack` holds `needle` anywhere.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn the_database_row_holds_no_private_key() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        KeyRing::new()
            .keys_with_signer(&store, authserver::jwt::Alg::EdDSA)
            .await
            .unwrap();
        let opened = store.signing_keys().await.unwrap();
        let rows = raw_rows(&store).await;
        assert_eq!(rows.len(), 1, "{backend:?}");
        let pkcs8 = STANDARD.decode(&opened[0].private_key).unwrap();
        // Ed25519 PKCS#8 (RFC 8410): the 32-byte seed after a 16-byte prefix.
        let seed = &pkcs8[16..48];
        let (kid, stored) = &rows[0];
        assert_eq!(kid, &opened[0].kid);
        assert_ne!(
            stored, &opened[0].private_key,
            "{backend:?}: PKCS#8 in the row"
        );
        let bytes = STANDARD
            .decode(stored)
            .unwrap_or_else(|_| stored.as_bytes().to_vec());
        assert!(!holds(&bytes, seed), "{backend:?}: the seed in the row");
        assert!(!holds(
            stored.as_bytes(),
            STANDARD.encode(seed).trim_end_matches('=').as_bytes()
        ));
        assert!(ring::signature::Ed25519KeyPair::from_pkcs8(&bytes).is_err());
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `authserver ARGS --database-url DB` with `AUTHSERVER_SECRETS_SYSTEM` set to `secrets`, or
/// unset when `None`.
fn authserver(args: &[&str], db: &str, secrets: Option<&str>) -> Output {
    let mut command = match secrets {
        Some(secrets) => {
            let mut command = bare_command(args);
            command.env("AUTHSERVER_SECRETS_SYSTEM", secrets);
            command
        }
        None => bare_command(args),
    };
    command
        .arg("--database-url")
        .arg(db)
        .env("AUTHSERVER_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap()
}

const OLD: &str = "the-old-key-encryption-secret-of-this-deployment";
const NEW: &str = "the-new-key-encryption-secret-put-first-in-the-list";

#[tokio::test]
async fn a_missing_or_wrong_secret_stops_the_server_naming_the_setting_never_the_secret() {
    for db in testing::all_database_urls().await {
        let created = authserver(&["keys", "rotate"], &db, Some(OLD));
        assert!(created.status.success(), "{}", text(&created));
        // No secret: `serve` stops before listening, naming both settings.
        let missing = authserver(&["serve"], &db, None);
        let shown = text(&missing);
        assert_eq!(missing.status.code(), Some(1), "{shown}");
        assert!(
            shown.contains("AUTHSERVER_SECRETS_SYSTEM or AUTHSERVER_SECRETS_SYSTEM_FILE"),
            "{shown}"
        );
        // A wrong secret, in the variable or a file: stopped at start, its setting named, and
        // neither secret shown.
        let wrong = authserver(&["serve"], &db, Some(NEW));
        let shown = text(&wrong);
        assert_eq!(wrong.status.code(), Some(1), "{shown}");
        assert!(
            shown.contains("environment variable AUTHSERVER_SECRETS_SYSTEM"),
            "{shown}"
        );
        assert!(shown.contains("which no secret of"), "{shown}");
        let file = std::env::temp_dir().join(format!(
            "tg-kek-{}",
            authserver::secrets::random_client_id()
        ));
        std::fs::write(&file, format!("{NEW}\n")).unwrap();
        // The owner's only: a file others may read is refused before its secret is tried.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let from_file = bare_command(&["serve"])
            .arg("--database-url")
            .arg(&db)
            .env("AUTHSERVER_SECRETS_SYSTEM_FILE", &file)
            .env("AUTHSERVER_LISTEN", "127.0.0.1:0")
            .output()
            .unwrap();
        let shown_file = text(&from_file);
        assert_eq!(from_file.status.code(), Some(1), "{shown_file}");
        assert!(
            shown_file.contains(&format!(
                "environment variable AUTHSERVER_SECRETS_SYSTEM_FILE: file {}",
                file.display()
            )),
            "{shown_file}"
        );
        let _ = std::fs::remove_file(&file);
        for output in [&shown, &shown_file, &text(&missing), &text(&created)] {
            assert!(!output.contains(OLD) && !output.contains(NEW), "{output}");
        }
        // A short secret is refused as a setting, by position.
        let short = authserver(&["keys", "list"], &db, Some(&format!("{OLD},tooshort")));
        let shown = text(&short);
        assert_eq!(short.status.code(), Some(1), "{shown}");
        assert!(
            shown.contains("environment variable AUTHSERVER_SECRETS_SYSTEM: secret 2 of 2 is shorter than 32 characters"),
            "{shown}"
        );
        assert!(!shown.contains("tooshort"), "{shown}");
    }
}

#[tokio::test]
async fn keys_reencrypt_moves_every_key_under_the_first_secret() {
    for db in testing::all_database_urls().await {
        for args in [["keys", "rotate"], ["keys", "rotate"]] {
            let out = authserver(&args, &db, Some(OLD));
            assert!(out.status.success(), "{}", text(&out));
        }
        let both = format!("{NEW},{OLD}");
        // The new secret first: the old keys still open (the old secret decrypts).
        let listed = authserver(&["keys", "list", "--json"], &db, Some(&both));
        assert!(listed.status.success(), "{}", text(&listed));
        let reencrypted = authserver(&["keys", "reencrypt"], &db, Some(&both));
        assert!(reencrypted.status.success(), "{}", text(&reencrypted));
        assert!(
            text(&reencrypted).contains("re-encrypted 2 signing keys"),
            "{}",
            text(&reencrypted)
        );
        // Now the new secret alone opens them; the old alone no longer does.
        let new_only = authserver(&["keys", "list", "--json"], &db, Some(NEW));
        assert!(new_only.status.success(), "{}", text(&new_only));
        assert_eq!(listed.stdout, new_only.stdout);
        let old_only = authserver(&["keys", "list"], &db, Some(OLD));
        assert_eq!(old_only.status.code(), Some(1), "{}", text(&old_only));
        // A second run has nothing left to do.
        let again = authserver(&["keys", "reencrypt"], &db, Some(NEW));
        assert!(
            text(&again).contains("re-encrypted 0 signing keys"),
            "{}",
            text(&again)
        );
    }
}

#[tokio::test]
async fn keys_stored_in_the_clear_are_encrypted_at_start() {
    for db in testing::all_database_urls().await {
        // A key as stored before encryption at rest: PKCS#8 in the row, no key-encryption id.
        let before = Store::connect(&db).await.unwrap();
        let key = authserver::jwt::keys::generate(1, 0, 0).unwrap();
        sqlx::query(
            "INSERT INTO signing_keys (kid, generation, algorithm, private_key, public_key, created_at, signs_from)
             VALUES ($1, 1, 'EdDSA', $2, $3, 0, 0)",
        )
        .bind(&key.kid)
        .bind(&key.private_key)
        .bind(&key.public_key)
        .execute(before.pool())
        .await
        .unwrap();
        // Without a secret, the key cannot be read.
        let err = before.signing_keys().await.unwrap_err().to_string();
        assert!(err.contains("AUTHSERVER_SECRETS_SYSTEM"), "{err}");
        // A server started with one encrypts it, and reads back the same key.
        let listed = command(&["keys", "list", "--json"])
            .arg("--database-url")
            .arg(&db)
            .output()
            .unwrap();
        assert!(listed.status.success(), "{}", text(&listed));
        assert!(String::from_utf8_lossy(&listed.stdout).contains(&key.kid));
        let after = testing::connect(&db).await;
        let rows = raw_rows(&after).await;
        assert_ne!(rows[0].1, key.private_key);
        assert_eq!(
            after.signing_keys().await.unwrap()[0].private_key,
            key.private_key
        );
    }
}
