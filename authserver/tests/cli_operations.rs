//! Operator commands of issue 27 against the binary: only serve, migrate and createsuperuser
//! make a database (every other command on a missing SQLite file fails, naming it, and leaves
//! nothing behind), and `user groups add|remove|list`.

mod support;

use std::path::Path;
use std::process::{Output, Stdio};

use support::binary::{bare_command, command, run};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

fn fresh_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tokengate-cli-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every entry under `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

#[test]
fn only_serve_migrate_and_createsuperuser_make_a_database() {
    let dir = fresh_dir();
    let nowhere = dir.join("nowhere/x.db");
    let url = format!("sqlite://{}", nowhere.display());
    for args in [
        &["user", "list"][..],
        &["user", "create", "--username", "ann"],
        &["user", "groups", "list", "ann"],
        &["group", "list"],
        &["app", "list"],
        &["keys", "list"],
        &["keys", "rotate"],
        &["cleartokens"],
    ] {
        let out = run(args, &url, "ann-password\n");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains(&nowhere.display().to_string()),
            "{args:?}: {said}"
        );
        assert!(said.contains("does not exist"), "{said}");
        assert!(said.contains("authserver migrate"), "{said}");
        assert!(
            entries(&dir).is_empty(),
            "{args:?} created {:?}",
            entries(&dir)
        );
    }
    // The default path, in an empty working directory: no data/ appears.
    let out = bare_command(&["user", "list"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("data/authserver.db"),
        "{}",
        stderr(&out)
    );
    assert!(entries(&dir).is_empty(), "created {:?}", entries(&dir));

    // migrate makes it; then the others work on it.
    let out = run(&["migrate"], &url, "");
    ok(&out);
    assert!(
        stdout(&out).contains("schema up to date"),
        "{}",
        stdout(&out)
    );
    assert!(nowhere.exists());
    ok(&run(&["user", "list"], &url, ""));
    // createsuperuser makes one too (as the container's first step does).
    let other = format!("sqlite://{}", dir.join("admin/a.db").display());
    ok(&run(
        &["createsuperuser", "--username", "root"],
        &other,
        "root-password\n",
    ));
    ok(&run(&["user", "list"], &other, ""));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn user_groups_are_added_listed_and_removed_by_name() {
    for db in authserver::testing::all_database_urls().await {
        ok(&run(
            &["user", "create", "--username", "ann"],
            &db,
            "ann-password\n",
        ));
        for group in ["admins", "ops team"] {
            ok(&run(&["group", "create", group], &db, ""));
        }
        ok(&run(&["user", "groups", "add", "ann", "admins"], &db, ""));
        let out = run(&["user", "groups", "add", "ann", "ops team"], &db, "");
        ok(&out);
        assert_eq!(stdout(&out).trim(), "ann is in group ops team");
        // Twice: no change, no error.
        ok(&run(&["user", "groups", "add", "ann", "admins"], &db, ""));
        let listed = run(&["user", "groups", "list", "ann", "--json"], &db, "");
        ok(&listed);
        let names: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
        assert_eq!(names, serde_json::json!(["admins", "ops team"]));
        assert_eq!(
            stdout(&run(&["user", "groups", "list", "ann"], &db, "")),
            "admins\nops team\n"
        );
        ok(&run(
            &["user", "groups", "remove", "ann", "admins"],
            &db,
            "",
        ));
        assert_eq!(
            stdout(&run(&["user", "groups", "list", "ann"], &db, "")),
            "ops team\n"
        );
        for (args, message) in [
            (
                &["user", "groups", "add", "nobody", "admins"][..],
                "no user named \"nobody\"",
            ),
            (
                &["user", "groups", "add", "ann", "nothing"],
                "no group named \"nothing\"",
            ),
            (
                &["user", "groups", "remove", "ann", "nothing"],
                "no group named \"nothing\"",
            ),
            (&["user", "groups", "list", "nobody"], "no user named"),
        ] {
            let out = command(args)
                .arg("--database-url")
                .arg(&db)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
        }
    }
}

/// `resource create|list|delete`: a resource is registered once, listed, deleted; a malformed
/// identifier, a scope of the server's own or a lifetime over the server's is refused with a
/// message naming the flag, and stores nothing.
#[test]
fn resources_are_registered_listed_and_deleted() {
    let dir = fresh_dir();
    let url = format!("sqlite://{}", dir.join("r.db").display());
    ok(&run(&["migrate"], &url, ""));
    let create = |extra: &[&str]| {
        let mut args = vec!["resource", "create"];
        args.extend_from_slice(extra);
        run(&args, &url, "")
    };
    let out = create(&[
        "--identifier",
        "https://orders.example/",
        "--name",
        "Orders",
        "--scopes",
        "orders:read orders:write",
        "--lifetime",
        "300",
    ]);
    ok(&out);
    assert!(stdout(&out).contains("created resource https://orders.example/"));
    let again = create(&["--identifier", "https://orders.example/", "--scopes", "x"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    for (args, flag) in [
        (
            &["--identifier", "orders", "--scopes", "a"][..],
            "--identifier",
        ),
        (
            &["--identifier", "https://a.example/#f", "--scopes", "a"],
            "--identifier",
        ),
        (
            &["--identifier", "http://a.example/", "--scopes", "a"],
            "--identifier",
        ),
        (
            &[
                "--identifier",
                "https://b.example/",
                "--scopes",
                "introspection",
            ],
            "--scopes",
        ),
        (
            &["--identifier", "https://b.example/", "--scopes", "openid"],
            "--scopes",
        ),
        (
            &["--identifier", "https://b.example/", "--scopes", "a\"b"],
            "--scopes",
        ),
        (
            &[
                "--identifier",
                "https://b.example/",
                "--scopes",
                "a",
                "--lifetime",
                "99999999",
            ],
            "--lifetime",
        ),
        (
            &[
                "--identifier",
                "https://b.example/",
                "--scopes",
                "a",
                "--token-format",
                "saml",
            ],
            "--token-format",
        ),
    ] {
        let out = create(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains(flag), "{args:?}: {}", stderr(&out));
    }
    let listed = run(&["resource", "list", "--json"], &url, "");
    ok(&listed);
    let list: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["identifier"], "https://orders.example/");
    assert_eq!(
        list[0]["scopes"],
        serde_json::json!(["orders:read", "orders:write"])
    );
    assert_eq!(list[0]["access_token_lifetime"], 300);
    // An application may be limited to an API's scopes (and so to that API's tokens).
    let app = |scopes: &str| {
        run(
            &[
                "app",
                "create",
                "--name",
                "orders client",
                "--grant-type",
                "client-credentials",
                "--scopes",
                scopes,
            ],
            &url,
            "",
        )
    };
    ok(&app("orders:read"));
    let unknown = app("billing:read");
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("not a declared scope"),
        "{}",
        stderr(&unknown)
    );
    let commas = app("orders:read,orders:write");
    assert!(
        stderr(&commas).contains("separated by spaces"),
        "{}",
        stderr(&commas)
    );
    ok(&run(
        &["resource", "delete", "https://orders.example/"],
        &url,
        "",
    ));
    let gone = run(&["resource", "delete", "https://orders.example/"], &url, "");
    assert_eq!(gone.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(dir);
}
