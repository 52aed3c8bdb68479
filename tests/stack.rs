//! The one-command stack (`tokengate::start`, what `cargo run --release` runs): first start on an
//! empty database prints working credentials, the README's walkthrough works through the front
//! door, a second start on the same database keeps working, and a second stack started beside a
//! running one leaves the first serving (the proxy's secret is kept, not rotated).

mod common;

use authserver::store::CLIENT_CACHE_TTL;
use common::{client_credentials_token, password_grant, stack_config as config};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

async fn token(
    http: &reqwest::Client,
    base: &str,
    client: (&str, &str),
    user: (&str, &str),
    scope: Option<&str>,
) -> String {
    let (status, json) = password_grant(http, base, client, user, scope).await;
    assert_eq!(status, StatusCode::OK);
    json["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_prints_credentials_that_work_through_the_front_door() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(config(&database_url, &[])).await.unwrap();
    let first = stack
        .first_run
        .clone()
        .expect("an empty database is a first start");
    let banner = tokengate::bootstrap::banner(
        stack.front_door,
        stack.authserver,
        stack.api,
        stack.proxy_admin,
        Some(&first),
    );
    assert!(banner.contains(&first.client_secret) && banner.contains(&first.admin_password));
    assert!(banner.contains(&format!("http://{}/users/", stack.front_door)));

    let http = reqwest::Client::new();
    let base = format!("http://{}", stack.front_door);
    let client = (first.client_id.as_str(), first.client_secret.as_str());
    let admin = (first.admin_username.as_str(), first.admin_password.as_str());
    let all = token(&http, &base, client, admin, None).await;
    let response = http
        .get(format!("{base}/users/"))
        .bearer_auth(&all)
        .send()
        .await
        .unwrap();
    let (status, text) = (response.status(), response.text().await.unwrap());
    assert_eq!(status, StatusCode::OK, "{text}");
    let users: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(users[0]["username"], "admin");
    let read = token(&http, &base, client, admin, Some("read")).await;
    let refused = http
        .get(format!("{base}/groups/"))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    // The demo application may not introspect; the resource-server one may.
    let (refused, _) = password_grant(&http, &base, client, admin, Some("introspection")).await;
    assert_eq!(refused, StatusCode::BAD_REQUEST);
    assert!(banner.contains(&first.resource_server_secret));
    let resource_server = (
        first.resource_server_id.as_str(),
        first.resource_server_secret.as_str(),
    );
    let rs = client_credentials_token(&http, &base, resource_server, Some("introspection")).await;
    let claims: Value = http
        .post(format!("{base}/o/introspect/"))
        .bearer_auth(&rs)
        .form(&[("token", &all)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(claims["active"], true);
    let metadata: Value = http
        .get(format!("{base}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The issuer is the front door, even on a port chosen at start.
    assert_eq!(metadata["issuer"], base.as_str());
    let login = http
        .get(format!("{base}/accounts/login/"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    stack.shutdown().await;

    // A second start on the same database: no new credentials, the old ones still work, and
    // the proxy introspects with the secret kept in the data directory.
    let stack = tokengate::start(config(&database_url, &[])).await.unwrap();
    assert!(stack.first_run.is_none());
    let base = format!("http://{}", stack.front_door);
    let again = token(&http, &base, client, admin, None).await;
    assert_eq!(
        http.get(format!("{base}/users/"))
            .bearer_auth(&again)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Every endpoint the three metadata documents advertise (OAuth, OpenID Connect discovery, the
/// SSF transmitter's) is routed at the front door, which is the issuer: a relying party or an SSF
/// receiver that starts from the issuer finds each one. The endpoints answer as themselves (401,
/// 405, 400...), never the proxy's 404 for an unrouted path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_the_metadata_advertises_is_routed_at_the_front_door() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(config(&database_url, &[])).await.unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = format!("http://{}", stack.front_door);
    let mut checked = 0;
    for document in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/.well-known/ssf-configuration",
    ] {
        let response = http.get(format!("{base}{document}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{document}");
        let metadata: Value = response.json().await.unwrap();
        let issuer = metadata["issuer"].as_str().unwrap().to_owned();
        for (key, value) in metadata.as_object().unwrap() {
            let Some(path) = value.as_str().and_then(|v| v.strip_prefix(issuer.as_str())) else {
                continue;
            };
            if key == "issuer" || !path.starts_with('/') {
                continue;
            }
            let answer = http.get(format!("{base}{path}")).send().await.unwrap();
            let status = answer.status();
            let body = answer.text().await.unwrap();
            assert!(
                status != StatusCode::NOT_FOUND && status != StatusCode::BAD_GATEWAY,
                "{document} {key} {path}: {status} {body}"
            );
            checked += 1;
        }
    }
    // token, authorize, introspection, revocation, jwks, userinfo, end_session, ssf stream...
    assert!(checked >= 12, "only {checked} endpoints advertised");
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The front door is a protected resource (RFC 9728) of its own authorization server: its
/// metadata answers beside the authorization server's, names the issuer exactly as the
/// authorization server's metadata does, and every 401 points to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_door_publishes_its_protected_resource_metadata() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(config(&database_url, &[])).await.unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", stack.front_door);
    let get = |path: &str| http.get(format!("{base}{path}")).send();
    let server: Value = get("/.well-known/oauth-authorization-server")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let issuer = server["issuer"].as_str().unwrap();
    let response = get("/.well-known/oauth-protected-resource").await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "*",
        "public metadata, readable from any page"
    );
    let metadata: Value = response.json().await.unwrap();
    // The shipped authserver.yaml leaves access_token_audience to default: the issuer.
    assert_eq!(metadata["resource"], issuer);
    assert_eq!(
        metadata["authorization_servers"],
        serde_json::json!([issuer])
    );
    assert_eq!(
        metadata["scopes_supported"],
        serde_json::json!(["groups", "read", "write"])
    );
    assert_eq!(
        metadata["bearer_methods_supported"],
        serde_json::json!(["header"])
    );
    // Still the authorization server's own.
    for path in [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
    ] {
        assert_eq!(get(path).await.unwrap().status(), StatusCode::OK, "{path}");
    }
    let refused = get("/users/").await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.headers()["www-authenticate"],
        format!(
            "Bearer realm=\"api\", scope=\"read\", \
             resource_metadata=\"{issuer}/.well-known/oauth-protected-resource\""
        )
        .as_str()
    );
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stack_on_the_same_data_leaves_the_first_serving() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let first = tokengate::start(config(&database_url, &[])).await.unwrap();
    let run = first.first_run.clone().unwrap();
    let client = (run.client_id.as_str(), run.client_secret.as_str());
    let admin = (run.admin_username.as_str(), run.admin_password.as_str());
    let secret_file = dir.join(tokengate::PROXY_SECRET_FILE);
    let kept = std::fs::read_to_string(&secret_file).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the secret file is the owner's only");
        // So is the secret the signing keys are encrypted with, made on the first start.
        let kek = dir.join(tokengate::SECRETS_SYSTEM_FILE);
        let mode = std::fs::metadata(&kek).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "the key-encryption secret is the owner's only"
        );
    }

    let second = tokengate::start(config(&database_url, &[])).await.unwrap();
    assert!(second.first_run.is_none());
    assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), kept);
    let http = reqwest::Client::new();
    for stack in [&first, &second] {
        // A token neither proxy has seen: each must introspect it with working credentials.
        let base = format!("http://{}", stack.front_door);
        let fresh = token(&http, &base, client, admin, None).await;
        let status = http
            .get(format!("{base}/users/"))
            .bearer_auth(&fresh)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, StatusCode::OK, "stack at {base}");
    }
    second.shutdown().await;
    first.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A stack whose data directory lost its key-encryption secret, on a database that holds
/// signing keys, makes no new secret (one would open none of them) and says which settings to
/// give: the standalone server's rule (`authserver::server::kept_secret`). The stack used to make
/// a new secret file there whatever the database held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_secret_is_not_replaced_on_a_database_holding_signing_keys() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let stack = tokengate::start(config(&database_url, &[])).await.unwrap();
    authserver::jwt::KeyRing::new()
        .keys_with_signer(&stack.store, authserver::jwt::Alg::EdDSA)
        .await
        .unwrap();
    stack.shutdown().await;
    let kek = dir.join(tokengate::SECRETS_SYSTEM_FILE);
    std::fs::remove_file(&kek).unwrap();
    let error = match tokengate::start(config(&database_url, &[])).await {
        Ok(_) => panic!("started without the secret of its signing keys"),
        Err(error) => format!("{error:#}"),
    };
    assert!(
        error.contains("AUTHSERVER_SECRETS_SYSTEM") && error.contains("signing keys"),
        "{error}"
    );
    assert!(!kek.exists(), "a new secret was made: {}", kek.display());
    let _ = std::fs::remove_dir_all(dir);
}

/// A fresh token through each stack's front door works: each proxy introspects with credentials
/// that still open its client.
async fn each_serves(stacks: &[&tokengate::Stack], run: &tokengate::FirstRun) {
    let http = reqwest::Client::new();
    let client = (run.client_id.as_str(), run.client_secret.as_str());
    let admin = (run.admin_username.as_str(), run.admin_password.as_str());
    for stack in stacks {
        let base = format!("http://{}", stack.front_door);
        let fresh = token(&http, &base, client, admin, None).await;
        let response = http
            .get(format!("{base}/users/"))
            .bearer_auth(&fresh)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "stack at {base}");
    }
}

/// Two stacks on one database, each with a data directory of its own (and the one
/// key-encryption secret servers on one database share), each register their own proxy client: neither rotates the other's secret, also when one restarts (the second used to
/// re-register the one `tokengate-proxy`, and the first's front door answered 503 to every new
/// token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stacks_with_data_directories_of_their_own_on_one_database_both_serve() {
    for database_url in authserver::testing::all_database_urls().await {
        let scratch = std::env::temp_dir().join(format!(
            "tg-stacks-{}",
            authserver::secrets::random_client_id()
        ));
        // One key-encryption secret for both, as every server on one database needs: the
        // signing key of the stream's SETs made by one is read by the other.
        let secrets_system = format!(
            "{}{}",
            authserver::secrets::random_client_id(),
            authserver::secrets::random_client_id()
        );
        let with_dir = |name: &str| {
            let mut config = config(
                &database_url,
                &[("AUTHSERVER_SECRETS_SYSTEM", secrets_system.as_str())],
            );
            config.data_dir = scratch.join(name);
            config
        };
        let first = tokengate::start(with_dir("a")).await.unwrap();
        let run = first.first_run.clone().unwrap();
        let second = tokengate::start(with_dir("b")).await.unwrap();
        assert!(second.first_run.is_none());
        // Past the client cache, each authorization server reads the proxy clients afresh.
        tokio::time::sleep(CLIENT_CACHE_TTL + Duration::from_secs(1)).await;
        each_serves(&[&first, &second], &run).await;
        let id = |name: &str| {
            std::fs::read_to_string(scratch.join(name).join(tokengate::PROXY_CLIENT_ID_FILE))
                .unwrap()
        };
        assert_ne!(id("a"), id("b"));
        assert!(id("a").starts_with("tokengate-proxy-"), "{}", id("a"));
        // Restarting the first leaves the second serving, and the first keeps its client.
        let kept = id("a");
        first.shutdown().await;
        let first = tokengate::start(with_dir("a")).await.unwrap();
        assert_eq!(id("a"), kept);
        tokio::time::sleep(CLIENT_CACHE_TTL + Duration::from_secs(1)).await;
        each_serves(&[&first, &second], &run).await;
        first.shutdown().await;
        second.shutdown().await;
        let _ = std::fs::remove_dir_all(&scratch);
    }
}

/// A data directory from before one client per directory (its secret kept, no id file) keeps the
/// client `tokengate-proxy` its secret opens, and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_from_before_keeps_its_proxy_client() {
    let dir = std::env::temp_dir().join(format!(
        "tg-stack-{}",
        authserver::secrets::random_client_id()
    ));
    let database_url = format!("sqlite://{}/authserver.db", dir.display());
    let store = authserver::testing::connect(&database_url).await;
    tokengate::bootstrap::proxy_secret(
        &store,
        &authserver::config::Settings::for_tests("unused"),
        tokengate::PROXY_CLIENT_ID,
        &dir.join(tokengate::PROXY_SECRET_FILE),
    )
    .await
    .unwrap();
    let stack = tokengate::start(config(&database_url, &[])).await.unwrap();
    let id = std::fs::read_to_string(dir.join(tokengate::PROXY_CLIENT_ID_FILE)).unwrap();
    assert_eq!(id, tokengate::PROXY_CLIENT_ID);
    each_serves(&[&stack], &stack.first_run.clone().unwrap()).await;
    stack.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn arguments_are_read_before_anything_starts() {
    let cwd = std::env::temp_dir().join(format!(
        "tg-args-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&cwd).unwrap();
    let run = |arg: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tokengate"))
            .arg(arg)
            .current_dir(&cwd)
            .output()
            .unwrap()
    };
    let help = run("--help");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: tokengate"));
    let version = run("--version");
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("tokengate "));
    let typo = run("--hlep");
    assert_eq!(typo.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&typo.stderr).contains("--hlep"));
    // Nothing was started: no database, no secret file.
    assert!(!cwd.join("data").exists());
    let _ = std::fs::remove_dir_all(cwd);
}
