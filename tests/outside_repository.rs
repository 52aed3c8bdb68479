//! The `tokengate` binary run from a directory that is not the repository: the shipped
//! configuration is compiled in, a file named explicitly must exist (one line naming the
//! variable, exit 1), and `--help` lists the files and variables it reads.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tokengate");

#[test]
fn a_named_missing_file_is_one_line_naming_the_variable() {
    let empty = std::env::temp_dir().join(format!("tg-outside-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(BIN)
        .current_dir(&empty)
        .env("PROXY_CONFIG", "/nonexistent/proxy.yaml")
        .env(
            "AUTHSERVER_DATABASE_URL",
            format!("sqlite://{}/a.db", empty.display()),
        )
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&empty);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "tokengate: PROXY_CONFIG=/nonexistent/proxy.yaml: cannot read: No such file or directory (os error 2)",
        "one line, the cause once"
    );
}

#[test]
fn help_lists_the_files_and_variables() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for read in [
        "config/authserver.yaml",
        "config/example-api.yaml",
        "config/proxy.yaml",
        "AUTHSERVER_CONFIG",
        "EXAMPLE_API_CONFIG",
        "PROXY_CONFIG",
        "PROXY_CLIENT_SECRET",
        "TOKENGATE_DATA_DIR",
        "RUST_LOG",
    ] {
        assert!(help.contains(read), "--help does not name {read}:\n{help}");
    }
}
