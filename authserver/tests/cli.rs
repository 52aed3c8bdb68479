//! The `authserver` operator commands against the binary: they refuse what the views' forms
//! refuse, with the forms' words; list, delete, set-password and rotate-secret; a password typed
//! at a terminal is not echoed; settings from the environment are read as every binary reads them.

mod support;

use authserver::store::{GrantType, NewTokens, NewUser, Store};
use authserver::{testing, validation};
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::binary::{BIN, command, run};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// Refused with exit code 1 and `message` on stderr.
fn refused(out: &Output, message: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert!(stderr(out).contains(message), "{}", stderr(out));
}

fn json(out: &Output) -> serde_json::Value {
    ok(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn usernames(db: &str) -> Vec<String> {
    json(&run(&["user", "list", "--json"], db, ""))
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap().to_owned())
        .collect()
}

const STRONG: &str = "Zq3-vN8_pL2xR7kT4mW9yB6cD1fG5hJ0sA";

#[tokio::test]
async fn the_cli_refuses_what_the_forms_refuse_with_their_words() {
    for db in authserver::testing::all_database_urls().await {
        refusals(&db);
    }
}

fn refusals(db: &str) {
    let db = db.to_owned();
    // The form's messages, from the one shared rule.
    let short = validation::password("hunte").unwrap_err();
    assert_eq!(short, "The password must have at least 8 characters.");
    let bad_name = validation::username("bad name").unwrap_err();
    assert_eq!(bad_name, "Use only letters, digits and @ . + - _");

    let out = run(&["createsuperuser", "--username", "root"], &db, "hunte\n");
    refused(&out, &short);
    let out = run(
        &["user", "create", "--username", "bad name"],
        &db,
        "long-enough\n",
    );
    refused(&out, &format!("--username \"bad name\": {bad_name}"));
    let out = run(
        &["user", "create", "--username", "ann", "--email", "nope"],
        &db,
        "long-enough\n",
    );
    refused(&out, "--email \"nope\": Enter a valid email address.");
    assert!(usernames(&db).is_empty(), "nothing was created");

    ok(&run(
        &["createsuperuser", "--username", "root"],
        &db,
        "long-enough\n",
    ));
    let out = run(
        &["user", "create", "--username", "root"],
        &db,
        "long-enough\n",
    );
    refused(&out, "A user with that username already exists.");

    // Client secrets chosen by the operator must be strong.
    for weak in ["abc", "known-secret", &"a".repeat(40)] {
        let out = run(
            &["app", "create", "--name", "svc", "--client-secret-stdin"],
            &db,
            &format!("{weak}\n"),
        );
        refused(&out, "The client secret must have at least 32 characters");
    }
    // Application fields, as the register form words them.
    let out = run(
        &[
            "app",
            "create",
            "--name",
            "svc",
            "--client-type",
            "public",
            "--grant-type",
            "client-credentials",
        ],
        &db,
        "",
    );
    refused(
        &out,
        "--grant-type \"client-credentials\": Public clients cannot use the client credentials grant: it needs a secret.",
    );
    let out = run(
        &[
            "app",
            "create",
            "--name",
            "web",
            "--redirect-uris",
            "ftp://x",
            "--scopes",
            "read nope",
        ],
        &db,
        "",
    );
    refused(
        &out,
        "--redirect-uris \"ftp://x\": \"ftp://x\" is not an absolute https URL.",
    );
    assert!(stderr(&out).contains("--scopes \"read nope\": \"nope\" is not a declared scope."));
    let out = run(&["group", "create", ""], &db, "");
    refused(&out, "This field is required.");
    // Certificate registrations: a JWKS from a file, checked; a DN that is not RFC 4514.
    let dir = std::env::temp_dir().join(format!("cli-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"keys":[{"kty":"EC","x5c":["bm90IGEgY2VydA=="]}]}"#,
    )
    .unwrap();
    let app = |auth: &str| {
        run(
            &[
                "app",
                "create",
                "--name",
                "batch",
                "--grant-type",
                "client-credentials",
                "--tls-client-auth",
                auth,
            ],
            &db,
            "",
        )
    };
    let out = app(&format!("self_signed_jwks:@{}", bad.display()));
    refused(&out, "keys[0].x5c[0] is not a DER X.509 certificate");
    let out = app(&format!(
        "self_signed_jwks:@{}",
        dir.join("missing").display()
    ));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    let out = app("subject_dn:CN=a;O=b");
    refused(&out, "must be escaped");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        json(&run(&["app", "list", "--json"], &db, "")),
        serde_json::json!([])
    );
}

#[tokio::test]
async fn users_groups_and_applications_are_listed_changed_and_deleted() {
    for db in authserver::testing::all_database_urls().await {
        operations(&db).await;
    }
}

async fn operations(db: &str) {
    let db = db.to_owned();
    ok(&run(
        &["user", "create", "--username", "ann", "--staff"],
        &db,
        "ann-password\n",
    ));
    ok(&run(
        &["user", "create", "--username", "bob"],
        &db,
        "bob-password\n",
    ));
    let users = json(&run(&["user", "list", "--json"], &db, ""));
    assert_eq!(users[0]["username"], "ann");
    assert_eq!(users[0]["is_staff"], true);
    assert_eq!(users[1]["is_staff"], false);
    assert!(!stdout(&run(&["user", "list", "--json"], &db, "")).contains("password"));
    assert!(stdout(&run(&["user", "list"], &db, "")).contains("ann  staff"));

    // set-password: the same rule, then the new password works.
    refused(
        &run(&["user", "set-password", "bob"], &db, "short\n"),
        "The password must have at least 8 characters.",
    );
    ok(&run(
        &["user", "set-password", "bob"],
        &db,
        "new-bob-password\n",
    ));
    let store = authserver::testing::connect(&db).await;
    assert!(
        store
            .authenticate_user("bob", "new-bob-password")
            .await
            .unwrap()
            .is_some()
    );
    refused(
        &run(&["user", "set-password", "nobody"], &db, "long-enough\n"),
        "no user named \"nobody\"",
    );

    // Groups.
    ok(&run(&["group", "create", "readers"], &db, ""));
    let bob = store.find_user_by_username("bob").await.unwrap().unwrap();
    let group = store.list_groups().await.unwrap().pop().unwrap();
    store.add_member(group.id, bob.id).await.unwrap();
    let groups = json(&run(&["group", "list", "--json"], &db, ""));
    assert_eq!(
        groups,
        serde_json::json!([{ "id": group.id, "name": "readers", "members": ["bob"] }])
    );
    ok(&run(&["group", "delete", "readers"], &db, ""));
    refused(
        &run(&["group", "delete", "readers"], &db, ""),
        "no group named \"readers\"",
    );
    assert_eq!(
        json(&run(&["group", "list", "--json"], &db, "")),
        serde_json::json!([])
    );

    // Applications: list without secrets, rotate, delete.
    let created = json(&run(
        &[
            "app",
            "create",
            "--name",
            "svc",
            "--client-id",
            "svc",
            "--client-secret-stdin",
            "--json",
        ],
        &db,
        &format!("{STRONG}\n"),
    ));
    assert_eq!(created["client_secret"], STRONG);
    let listed = stdout(&run(&["app", "list", "--json"], &db, ""));
    assert!(!listed.contains(STRONG));
    let apps: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(apps[0]["client_id"], "svc");
    // Without --scopes: no scope (least privilege), as --scopes ""; every declared scope is
    // the explicit "*"; --introspect and --ssf bring their own scopes, and nothing else.
    assert_eq!(apps[0]["allowed_scopes"], serde_json::json!([]));
    for (client_id, flags, expected) in [
        ("nothing", &["--scopes", ""][..], serde_json::json!([])),
        ("every", &["--scopes", "*"][..], serde_json::json!(["*"])),
        (
            "every-sidecar",
            &["--scopes", "*", "--introspect", "--ssf"][..],
            serde_json::json!(["*"]),
        ),
        (
            "sidecar",
            &["--introspect", "--ssf"][..],
            serde_json::json!(["introspection", "ssf.read", "ssf.manage"]),
        ),
        (
            "reader",
            &["--scopes", "read", "--introspect"][..],
            serde_json::json!(["read", "introspection"]),
        ),
    ] {
        let mut args = vec![
            "app",
            "create",
            "--name",
            client_id,
            "--client-id",
            client_id,
        ];
        args.extend(flags);
        ok(&run(&args, &db, ""));
        let listed = json(&run(&["app", "list", "--json"], &db, ""));
        let app = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["client_id"] == client_id)
            .unwrap();
        assert_eq!(app["allowed_scopes"], expected, "{client_id}");
        ok(&run(&["app", "delete", client_id], &db, ""));
    }
    assert!(apps[0]["secret_fingerprint"].is_string());
    // `--name` says what it is for.
    let help = stdout(&run(&["app", "create", "--help"], &db, ""));
    let name = help
        .lines()
        .find(|l| l.trim_start().starts_with("--name"))
        .unwrap();
    assert!(name.contains("A name people recognise"), "{help}");
    // As lines: a header row, then the application's row under it, column for column.
    let lines = stdout(&run(&["app", "list"], &db, ""));
    let mut lines = lines.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("ID"), "{header}");
    for column in ["CLIENT ID", "TYPE", "GRANT", "NAME"] {
        assert!(header.contains(column), "{header}");
    }
    let row = lines.next().unwrap();
    assert_eq!(row.find("svc"), header.find("CLIENT ID"), "{header}\n{row}");
    assert!(row.ends_with("svc"), "{row}");
    let rotated = json(&run(&["app", "rotate-secret", "svc", "--json"], &db, ""));
    let new_secret = rotated["client_secret"].as_str().unwrap();
    let app = store
        .find_application_by_client_id("svc")
        .await
        .unwrap()
        .unwrap();
    assert!(app.secret_matches(new_secret) && !app.secret_matches(STRONG));
    let out = run(&["app", "rotate-secret", "svc"], &db, "");
    ok(&out);
    assert!(stdout(&out).contains("the previous secret no longer works"));
    refused(
        &run(&["app", "rotate-secret", "ghost"], &db, ""),
        "no application with client id \"ghost\"",
    );
    ok(&run(&["app", "delete", "svc"], &db, ""));
    refused(
        &run(&["app", "delete", "svc"], &db, ""),
        "no application with client id \"svc\"",
    );

    // Users last.
    ok(&run(&["user", "delete", "bob"], &db, ""));
    refused(
        &run(&["user", "delete", "bob"], &db, ""),
        "no user named \"bob\"",
    );
    assert_eq!(usernames(&db), ["ann"]);
}

#[test]
fn check_config_takes_a_file_as_the_proxy_does() {
    let dir = std::env::temp_dir().join(format!(
        "tg-check-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    std::fs::write(&good, "access_token_lifetime: 10h\n").unwrap();
    let out = command(&["--check-config", good.to_str().unwrap()])
        .output()
        .unwrap();
    ok(&out);
    assert!(stdout(&out).starts_with(&format!("{}: OK", good.display())));
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "access_token_lifetime: 10 days\n").unwrap();
    let out = command(&["--check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    refused(&out, "access_token_lifetime");
    // The bare flag still checks the file of --config.
    let out = command(&["--config", bad.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    refused(&out, &bad.display().to_string());
    // A subcommand after the bare flag is the subcommand, not the FILE: the file of --config
    // (global, so also after it) is checked, and nothing is served.
    for subcommand in ["serve", "cleartokens"] {
        let check = |file: &std::path::Path| {
            let args = [
                "--check-config",
                subcommand,
                "--config",
                file.to_str().unwrap(),
            ];
            command(&args).output().unwrap()
        };
        refused(&check(&bad), &bad.display().to_string());
        let out = check(&good);
        ok(&out);
        assert!(stdout(&out).starts_with(&format!("{}: OK", good.display())));
    }
}

#[test]
fn settings_from_the_environment_are_checked_by_name() {
    let check = |name: &str, value: &str| {
        command(&["--check-config", "--config", "/dev/null"])
            .env(name, value)
            .output()
            .unwrap()
    };
    let out = check("AUTHSERVER_ACCESS_TOKEN_LIFETIME", "10h");
    ok(&out);
    let out = check("AUTHSERVER_FOO", "1");
    refused(&out, "environment variable AUTHSERVER_FOO: not a setting");
    let out = check("AUTHSERVER_SCOPES", "x");
    refused(
        &out,
        "environment variable AUTHSERVER_SCOPES: scopes are a map",
    );
    ok(&check("AUTHSERVER_REFRESH_TOKEN_LIFETIME", "10d"));
    let out = check("AUTHSERVER_REFRESH_TOKEN_LIFETIME", "10w");
    refused(
        &out,
        "environment variable AUTHSERVER_REFRESH_TOKEN_LIFETIME: \"10w\" is not a positive duration",
    );
}

/// Everything a child writes to its terminal, collected by a thread.
struct Transcript(Arc<Mutex<Vec<u8>>>);

impl Transcript {
    fn of(mut from: impl Read + Send + 'static) -> Transcript {
        let text = Arc::new(Mutex::new(Vec::new()));
        let sink = text.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1024];
            while let Ok(n) = from.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        Transcript(text)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until `marker` has appeared `count` times.
    fn wait_for(&self, marker: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.text().matches(marker).count() < count {
            assert!(
                Instant::now() < deadline,
                "no {marker:?} in {}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_password_typed_at_a_terminal_is_not_echoed_and_echo_comes_back() {
    if Command::new("script").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "util-linux `script` is needed under CI (the no-echo test must run)"
        );
        eprintln!("skipped: util-linux `script` (a pseudo-terminal) is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!(
        "tg-tty-{}",
        authserver::secrets::random_client_id()
    ));
    let db = format!("sqlite://{}/db.sqlite", dir.display());
    let typed = "Typed-At-The-Terminal-1";
    // `script` gives the command a terminal; `stty -a` afterwards shows echo is back on.
    let inner =
        format!("{BIN} createsuperuser --username tty --database-url {db}; echo EXIT=$?; stty -a");
    let mut child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env_remove("AUTHSERVER_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let transcript = Transcript::of(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    transcript.wait_for("Password: ", 1);
    stdin.write_all(format!("{typed}\n").as_bytes()).unwrap();
    transcript.wait_for("Password (again): ", 1);
    stdin.write_all(format!("{typed}\n").as_bytes()).unwrap();
    transcript.wait_for("EXIT=", 1);
    transcript.wait_for("speed", 1);
    drop(stdin);
    let _ = child.wait();
    let text = transcript.text();
    assert!(
        text.contains("EXIT=0") && text.contains("created superuser tty"),
        "{text}"
    );
    assert!(!text.contains(typed), "the password was echoed: {text}");
    let stty = &text[text.find("EXIT=").unwrap()..];
    assert!(
        stty.split_whitespace().any(|w| w == "echo"),
        "echo is on again: {stty}"
    );
}

/// `app create` for the authorization code grant: `--redirect-uri` repeatable (and the older
/// `--redirect-uris`), `--pkce-optional`, `--token-format`, each refused with the forms' words
/// when wrong; a JWT application has its signing key at once.
#[tokio::test]
async fn authorization_code_applications_from_the_command_line() {
    for db in authserver::testing::all_database_urls().await {
        let created = json(&run(
            &[
                "app",
                "create",
                "--name",
                "spa",
                "--grant-type",
                "authorization-code",
                "--client-type",
                "public",
                "--redirect-uri",
                "https://spa.example/cb",
                "--redirect-uri",
                "http://127.0.0.1:5173/cb",
                "--redirect-uris",
                "http://localhost/cb",
                "--token-format",
                "jwt",
                "--scopes",
                "read",
                "--json",
            ],
            &db,
            "",
        ));
        assert!(created["client_secret"].is_null(), "{created}");
        let confidential = json(&run(
            &[
                "app",
                "create",
                "--name",
                "web",
                "--grant-type",
                "authorization-code",
                "--redirect-uri",
                "https://web.example/cb",
                "--pkce-optional",
                "--json",
            ],
            &db,
            "",
        ));
        assert!(confidential["client_secret"].is_string());
        let listed = json(&run(&["app", "list", "--json"], &db, ""));
        let spa = &listed[0];
        assert_eq!(
            spa["redirect_uris"],
            serde_json::json!([
                "https://spa.example/cb",
                "http://127.0.0.1:5173/cb",
                "http://localhost/cb"
            ])
        );
        assert_eq!(spa["token_format"], "jwt");
        assert_eq!(spa["pkce_required"], true);
        let web = &listed[1];
        assert_eq!(web["pkce_required"], false);
        assert_eq!(web["token_format"], "opaque");
        assert!(web["token_format_own"].is_null());
        // The JWT application's key exists before any server started.
        let keys = stdout(&run(&["keys", "list"], &db, ""));
        assert!(keys.contains("signing"), "{keys}");

        for (args, message) in [
            (
                vec!["--redirect-uri", "http://spa.example/cb"],
                "--redirect-uri \"http://spa.example/cb\": \"http://spa.example/cb\" uses http to a host that is not loopback (use https).",
            ),
            (
                vec!["--redirect-uri", "https://spa.example/cb#top"],
                "has a fragment",
            ),
            (
                vec![
                    "--redirect-uri",
                    "https://a.example/cb",
                    "--token-format",
                    "JWT",
                ],
                "--token-format \"JWT\": Choose opaque or jwt",
            ),
            (
                vec![
                    "--redirect-uri",
                    "https://a.example/cb",
                    "--client-type",
                    "public",
                    "--pkce-optional",
                ],
                "--pkce-optional \"true\": Public clients must always use PKCE",
            ),
            (
                vec![],
                "--redirect-uris \"\": The authorization code grant needs at least one redirect URI.",
            ),
        ] {
            let mut full = vec![
                "app",
                "create",
                "--name",
                "bad",
                "--grant-type",
                "authorization-code",
            ];
            full.extend(args);
            refused(&run(&full, &db, ""), message);
        }
        assert_eq!(
            json(&run(&["app", "list", "--json"], &db, ""))
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
}

/// Whether `server`'s introspection calls each of an access and a refresh token active (the
/// refresh token asked with its hint).
async fn introspected_active(
    server: &support::Replica,
    introspector: &(String, String),
    pair: &[String; 2],
) -> [bool; 2] {
    let mut active = [false; 2];
    for (i, hint) in ["access_token", "refresh_token"].into_iter().enumerate() {
        let form = [("token", pair[i].as_str()), ("token_type_hint", hint)];
        let (status, body) = server.post("/o/introspect/", introspector, &form).await;
        assert_eq!(status, 200, "{body}");
        active[i] = body["active"] == true;
    }
    active
}

/// An access and a refresh token of `user` at `app`.
async fn token_pair(store: &Store, app: i64, user: i64) -> [String; 2] {
    let issued = store
        .issue_tokens(&NewTokens {
            cnf_x5t_s256: None,
            cnf_jkt: None,
            audience: None,
            application_id: app,
            user_id: Some(user),
            scope: "read".into(),
            access_lifetime: 600,
            refresh_lifetime: Some(3600),
            family: None,
        })
        .await
        .unwrap();
    [issued.access_token, issued.refresh_token.unwrap()]
}

#[tokio::test]
async fn rotate_secret_and_user_delete_touch_only_what_they_name() {
    const OTHER_SECRET: &str = "Kd8-wQ2_mX7zN4pR9tV3yC6bF1gH5jL0aS";
    for db in testing::all_database_urls().await {
        let store = authserver::testing::connect(&db).await;
        let mut users = Vec::new();
        for username in ["bob", "carol"] {
            let new = NewUser {
                username: username.into(),
                is_active: true,
                ..Default::default()
            };
            users.push(store.create_user(&new).await.unwrap().id);
        }
        let mut apps = Vec::new();
        for (client_id, secret) in [("svc", STRONG), ("other", OTHER_SECRET)] {
            ok(&run(
                &[
                    "app",
                    "create",
                    "--name",
                    client_id,
                    "--client-id",
                    client_id,
                    "--scopes",
                    "*",
                    "--client-secret-stdin",
                ],
                &db,
                &format!("{secret}\n"),
            ));
            let app = store
                .find_application_by_client_id(client_id)
                .await
                .unwrap()
                .unwrap();
            apps.push(app.id);
        }
        // tokens[app][user]: svc and other, each for bob and carol.
        let mut tokens = Vec::new();
        for app in &apps {
            let mut per_user = Vec::new();
            for user in &users {
                per_user.push(token_pair(&store, *app, *user).await);
            }
            tokens.push(per_user);
        }
        let introspector = testing::application(&store, GrantType::ClientCredentials, true).await;
        let server = support::Replica::start(store.clone()).await;
        for pair in tokens.iter().flatten() {
            assert_eq!(
                introspected_active(&server, &introspector, pair).await,
                [true; 2]
            );
        }

        // rotate-secret svc: svc's secret changes, other's does not; a new secret replaces
        // the credential and leaves the tokens already issued as they are.
        let rotated = json(&run(&["app", "rotate-secret", "svc", "--json"], &db, ""));
        let new_secret = rotated["client_secret"].as_str().unwrap();
        // By id: the store's client cache still holds what it read before the rotation.
        let svc = store.get_application(apps[0]).await.unwrap().unwrap();
        assert!(svc.secret_matches(new_secret) && !svc.secret_matches(STRONG));
        let other = store.get_application(apps[1]).await.unwrap().unwrap();
        assert!(other.secret_matches(OTHER_SECRET) && !other.secret_matches(new_secret));
        // --grace keeps the replaced secret working (and says so); a bad duration is refused.
        let graced = json(&run(
            &["app", "rotate-secret", "svc", "--grace", "1h", "--json"],
            &db,
            "",
        ));
        assert_eq!(graced["previous_secret_valid_for"], 3600);
        let newest = graced["client_secret"].as_str().unwrap();
        let svc = store.get_application(apps[0]).await.unwrap().unwrap();
        assert!(svc.secret_matches(newest) && svc.secret_matches(new_secret));
        assert!(!svc.secret_matches(STRONG) && !svc.secret_matches(OTHER_SECRET));
        refused(
            &run(&["app", "rotate-secret", "svc", "--grace", "1x"], &db, ""),
            "--grace \"1x\"",
        );
        for pair in tokens.iter().flatten() {
            assert_eq!(
                introspected_active(&server, &introspector, pair).await,
                [true; 2]
            );
        }

        // user delete bob: bob's tokens at both applications stop introspecting; carol's stay.
        ok(&run(&["user", "delete", "bob"], &db, ""));
        // Another process's change reaches the server's token cache within its propagation
        // bound (docs/scaling.md#introspection-from-memory): waited for, with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for per_user in &tokens {
            loop {
                let bob = introspected_active(&server, &introspector, &per_user[0]).await;
                if bob == [false; 2] {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "bob's tokens: {bob:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let carol = introspected_active(&server, &introspector, &per_user[1]).await;
            assert_eq!(carol, [true; 2]);
        }
        assert_eq!(usernames(&db), ["carol"]);
        assert!(store.get_user(users[1]).await.unwrap().is_some());
    }
}

/// `app create --ssf` sets the revocation stream's permission apart from `--introspect`; a
/// public client is refused it with the form's words.
#[tokio::test]
async fn the_revocation_stream_permission_is_set_with_its_own_flag() {
    for db in authserver::testing::all_database_urls().await {
        let created = json(&run(
            &[
                "app",
                "create",
                "--name",
                "follower",
                "--grant-type",
                "client-credentials",
                "--ssf",
                "--json",
            ],
            &db,
            "",
        ));
        let client_id = created["client_id"].as_str().unwrap();
        let listed = json(&run(&["app", "list", "--json"], &db, ""));
        let row = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["client_id"] == client_id)
            .unwrap()
            .clone();
        assert_eq!(
            (
                row["may_use_ssf"].as_bool(),
                row["may_introspect"].as_bool()
            ),
            (Some(true), Some(false))
        );
        let out = run(
            &[
                "app",
                "create",
                "--name",
                "spa",
                "--client-type",
                "public",
                "--grant-type",
                "password",
                "--ssf",
            ],
            &db,
            "",
        );
        refused(
            &out,
            "--ssf \"true\": Public clients cannot use the revocation stream",
        );
    }
}

/// The JWKS a server started now on `db` publishes.
async fn published_jwks(db: &str) -> serde_json::Value {
    let store = testing::connect(db).await;
    let server = support::Replica::start(store).await;
    let jwks = server.get_json("/.well-known/jwks.json").await;
    server.stop().await;
    jwks
}

/// Issue 37: an OpenID client of the code flow registered with `openid` among its scopes has its ID-token key in the JWKS as soon as `app create`
/// returns, not only once the first ID token is signed (a relying party that fetched the JWKS
/// first then failed with "key not found"); and one asking for EdDSA ID tokens has that key.
#[tokio::test]
async fn an_openid_client_from_the_command_line_has_its_key_in_the_jwks_at_once() {
    for db in testing::all_database_urls().await {
        let create = |name: &str, extra: &[&str]| {
            let mut args = vec![
                "app",
                "create",
                "--name",
                name,
                "--grant-type",
                "authorization-code",
                "--scopes",
                "openid profile",
                "--redirect-uri",
                "https://rp.example/cb",
                "--json",
            ];
            args.extend(extra);
            json(&run(&args, &db, ""))
        };
        create("rp", &[]);
        let jwks = published_jwks(&db).await;
        let algs: Vec<&str> = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["alg"].as_str().unwrap())
            .collect();
        assert_eq!(algs, ["RS256"], "{jwks}");
        create("rp-eddsa", &["--id-token-alg", "EdDSA"]);
        let jwks = published_jwks(&db).await;
        let mut algs: Vec<&str> = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["alg"].as_str().unwrap())
            .collect();
        algs.sort();
        assert_eq!(algs, ["EdDSA", "RS256"], "{jwks}");
    }
}

/// Issue 37: `app create --token-format jwt` without the key-encryption secret fails before
/// storing anything (PostgreSQL): the retry with the secret registers it (no "already exists")
/// and shows the secret. Issue 43: on SQLite the server keeps a secret beside the database.
#[tokio::test]
async fn app_create_that_cannot_make_its_key_stores_nothing() {
    for db in testing::all_database_urls().await {
        let args = [
            "app",
            "create",
            "--name",
            "jwt-app",
            "--client-id",
            "jwt-app",
            "--grant-type",
            "client-credentials",
            "--token-format",
            "jwt",
            "--json",
        ];
        let out = support::binary::bare_command(&args)
            .arg("--database-url")
            .arg(&db)
            .output()
            .unwrap();
        if let Some(file) = authserver::store::sqlite_file(&db) {
            // SQLite: the server given no secret keeps one beside the database (as the stack
            // does in its data directory), so the registration works at once, and the next
            // command without a setting opens the key it sealed.
            let created: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", stderr(&out)));
            assert_eq!(created["client_id"], "jwt-app");
            let kept = file.parent().unwrap().join("secrets-system");
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", kept.display());
            let keys = support::binary::bare_command(&["keys", "list"])
                .arg("--database-url")
                .arg(&db)
                .output()
                .unwrap();
            assert!(
                String::from_utf8_lossy(&keys.stdout).contains("[EdDSA]"),
                "{}",
                stderr(&keys)
            );
            continue;
        }
        refused(&out, "AUTHSERVER_SECRETS_SYSTEM");
        assert!(
            stderr(&out).contains("nothing was stored"),
            "{}",
            stderr(&out)
        );
        let listed = json(&run(&["app", "list", "--json"], &db, ""));
        assert_eq!(listed, serde_json::json!([]), "nothing stored");
        let created = json(&run(&args, &db, ""));
        assert_eq!(created["client_id"], "jwt-app");
        assert!(created["client_secret"].is_string(), "{created}");
        let keys = stdout(&run(&["keys", "list"], &db, ""));
        assert!(keys.contains("[EdDSA]"), "{keys}");
    }
}
