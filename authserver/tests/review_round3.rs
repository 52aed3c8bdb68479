//! Attacks of the third security review (issue 21) on the authorization server, each against a
//! real server on a loopback port and each failing before its fix: a token read from a GET query
//! at introspection (item 8), an old client secret still accepted after `rotate-secret` run by
//! the CLI in another process (item 9), a sign-in CSRF token made up by the visitor (item 10),
//! `client_id` beside HTTP Basic refused (item 13), a forged `X-Forwarded-For` believed from any
//! local process (item 2), and the Kubernetes authserver without trusted proxies (item 11).

mod support;

use support::binary;
use support::code_flow::{csrf_token, set_cookie};

use authserver::config::Settings;
use authserver::store::{Backend, FOREIGN_COMMIT_BOUND, GrantType, NewUser, Store};
use authserver::testing::{self, RunningServer};
use reqwest::header::{self, HeaderMap};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::{Duration, Instant};

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.unwrap();
    Reply {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

async fn server(store: &Store, tweak: impl FnOnce(&mut Settings)) -> RunningServer {
    let mut settings = Settings::for_tests("unused");
    tweak(&mut settings);
    testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await
}

/// A client-credentials token request with HTTP Basic: the reply.
async fn client_credentials(base: &str, client: &(String, String)) -> Reply {
    send(
        support::browser_client()
            .post(format!("{base}/o/token/"))
            .basic_auth(&client.0, Some(&client.1))
            .form(&[("grant_type", "client_credentials")]),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Item 8: introspection and revocation take POST only.

#[tokio::test]
async fn introspection_and_revocation_refuse_every_method_but_post() {
    let store = testing::store().await;
    let introspector = testing::application(&store, GrantType::ClientCredentials, true).await;
    let server = server(&store, |_| {}).await;
    let base = &server.base_url;
    let http = support::browser_client();
    let token = client_credentials(base, &introspector).await.json()["access_token"]
        .as_str()
        .unwrap()
        .to_owned();

    // The review's request: the token in the query of a GET, with valid credentials.
    let get = send(
        http.get(format!("{base}/o/introspect/?token={token}"))
            .basic_auth(&introspector.0, Some(&introspector.1)),
    )
    .await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED, "{}", get.body);
    assert!(!get.body.contains("active"), "{}", get.body);

    for path in ["/o/introspect/", "/o/revoke_token/", "/o/token/"] {
        for method in [
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::DELETE,
            Method::PATCH,
            Method::OPTIONS,
        ] {
            let reply = send(
                http.request(method.clone(), format!("{base}{path}?token={token}"))
                    .basic_auth(&introspector.0, Some(&introspector.1)),
            )
            .await;
            assert_eq!(
                reply.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(reply.headers[header::ALLOW], "POST", "{method} {path}");
            assert_eq!(reply.headers[header::CACHE_CONTROL], "no-store");
            if method != Method::HEAD {
                assert_eq!(reply.json()["error"], "invalid_request", "{method} {path}");
                assert!(
                    reply.json()["error_description"]
                        .as_str()
                        .unwrap()
                        .starts_with("Use POST"),
                    "{}",
                    reply.body
                );
            }
        }
    }

    // A POST reads its body only: a token in the query is not a parameter.
    let post = send(
        http.post(format!("{base}/o/introspect/?token={token}"))
            .basic_auth(&introspector.0, Some(&introspector.1))
            .form(&[("unrelated", "x")]),
    )
    .await;
    assert_eq!(post.status, StatusCode::BAD_REQUEST, "{}", post.body);
    assert_eq!(
        post.json()["error_description"],
        "The parameter \"token\" is missing."
    );
    // The token was neither revoked nor spoilt by any of it.
    let live = send(
        http.post(format!("{base}/o/introspect/"))
            .basic_auth(&introspector.0, Some(&introspector.1))
            .form(&[("token", token.as_str())]),
    )
    .await;
    assert_eq!(live.json()["active"], true, "{}", live.body);
}

// ---------------------------------------------------------------------------------------------
// Item 13: client_id in the body beside HTTP Basic.

#[tokio::test]
async fn client_id_beside_basic_is_accepted_for_the_same_client_only() {
    let store = testing::store().await;
    let client = testing::application(&store, GrantType::ClientCredentials, false).await;
    let other = testing::application(&store, GrantType::ClientCredentials, false).await;
    let server = server(&store, |_| {}).await;
    let url = format!("{}/o/token/", server.base_url);
    let http = support::browser_client();
    let with_body = |pairs: &[(&str, &str)]| {
        http.post(&url)
            .basic_auth(&client.0, Some(&client.1))
            .form(pairs)
    };

    let same = send(with_body(&[
        ("grant_type", "client_credentials"),
        ("client_id", &client.0),
    ]))
    .await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert!(same.json()["access_token"].is_string());

    let another = send(with_body(&[
        ("grant_type", "client_credentials"),
        ("client_id", &other.0),
    ]))
    .await;
    assert_eq!(another.status, StatusCode::UNAUTHORIZED, "{}", another.body);
    assert_eq!(another.json()["error"], "invalid_client");
    assert_eq!(
        another.headers[header::WWW_AUTHENTICATE],
        "Basic realm=\"oauth\""
    );

    // A secret in the body too is two authentication methods at once.
    let two = send(with_body(&[
        ("grant_type", "client_credentials"),
        ("client_id", &client.0),
        ("client_secret", &client.1),
    ]))
    .await;
    assert_eq!(two.status, StatusCode::BAD_REQUEST, "{}", two.body);
    assert_eq!(two.json()["error"], "invalid_request");

    // Clients nobody here wrote: python requests and authlib, sending client_id beside Basic
    // as requests-oauthlib's include_client_id does.
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let has_clients = std::process::Command::new(&python)
        .args(["-c", "import authlib, requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_clients {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install authlib and requests (pip install authlib requests)"
        );
        eprintln!("skipping the python clients: pip install authlib requests");
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/client_id_beside_basic.py"
    );
    let mut command = std::process::Command::new(&python);
    command
        .arg(script)
        .arg(&url)
        .args([&client.0, &client.1, &other.0]);
    let out = tokio::task::spawn_blocking(move || command.output().expect("run python3"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "python clients: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["requests_same"]["status"], 200, "{seen}");
    assert_eq!(seen["authlib_same"]["status"], 200, "{seen}");
    assert_eq!(seen["requests_other"]["status"], 401, "{seen}");
    assert_eq!(seen["requests_other"]["error"], "invalid_client", "{seen}");
    assert_eq!(
        seen["requests_other"]["www_authenticate"], "Basic realm=\"oauth\"",
        "{seen}"
    );
}

// ---------------------------------------------------------------------------------------------
// Item 9: a rotated secret stops working at once, also when the CLI rotates it.

/// How long after a rotation made by another process the old secret may still pass: on SQLite
/// [`FOREIGN_COMMIT_BOUND`] (the CLI commits before it exits, so any request sent later is
/// past it); on PostgreSQL the delivery of the notification (milliseconds; the README's bound).
fn rotation_bound(backend: Backend) -> Duration {
    match backend {
        Backend::Sqlite => FOREIGN_COMMIT_BOUND,
        Backend::Postgres => Duration::from_secs(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_by_the_cli_is_refused_by_a_running_server_at_once() {
    for url in testing::all_database_urls().await {
        let store = Store::connect(&url).await.unwrap();
        let backend = store.backend();
        let client = testing::application(&store, GrantType::ClientCredentials, false).await;
        let server = server(&store, |_| {}).await;
        let base = &server.base_url;
        // The running server has read the client (and cached it, where it caches).
        for _ in 0..3 {
            assert_eq!(
                client_credentials(base, &client).await.status,
                StatusCode::OK
            );
        }
        // The server listens for changes (PostgreSQL) before the CLI makes one.
        testing::client_cache_ready(&store).await;

        let out = binary::run_ok(&["app", "rotate-secret", &client.0, "--json"], &url).await;
        let rotated_at = Instant::now();
        let rotated: Value = serde_json::from_slice(&out).unwrap();
        let new = (
            client.0.clone(),
            rotated["client_secret"].as_str().unwrap().to_owned(),
        );

        let mut attempts = 0;
        let refused_after = loop {
            attempts += 1;
            let sent = rotated_at.elapsed();
            let reply = client_credentials(base, &client).await;
            if reply.status == StatusCode::UNAUTHORIZED {
                assert_eq!(reply.json()["error"], "invalid_client");
                break sent;
            }
            assert!(
                sent < rotation_bound(backend),
                "{backend:?}: the old secret still works {sent:?} after the rotation"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        println!(
            "{backend:?}: old secret refused {refused_after:?} after the CLI's rotation ({attempts} attempt(s))"
        );
        assert_eq!(client_credentials(base, &new).await.status, StatusCode::OK);

        // Rotated by the server's own store (the views): refused at the next request.
        let id = store
            .find_application_by_client_id(&client.0)
            .await
            .unwrap()
            .unwrap()
            .id;
        assert_eq!(client_credentials(base, &new).await.status, StatusCode::OK);
        let newer = store
            .regenerate_secret(id, std::time::Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            client_credentials(base, &new).await.status,
            StatusCode::UNAUTHORIZED,
            "{backend:?}"
        );
        assert_eq!(
            client_credentials(base, &(client.0.clone(), newer))
                .await
                .status,
            StatusCode::OK
        );
    }
}

/// An introspection with HTTP Basic client authentication: the reply.
async fn introspect(base: &str, client: &(String, String), token: &str) -> Reply {
    send(
        support::browser_client()
            .post(format!("{base}/o/introspect/"))
            .basic_auth(&client.0, Some(&client.1))
            .form(&[("token", token)]),
    )
    .await
}

/// The same, when the server answers from its caches: introspections write nothing, so nothing
/// but the CLI's rotation changes the database (on SQLite, where any commit empties the cache of
/// applications, the token requests above would hide a server that never heard the rotation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_by_the_cli_is_refused_at_once_by_a_server_answering_from_its_caches() {
    for url in testing::all_database_urls().await {
        let store = Store::connect(&url).await.unwrap();
        let backend = store.backend();
        let client = testing::application(&store, GrantType::ClientCredentials, true).await;
        let server = server(&store, |_| {}).await;
        let base = &server.base_url;
        let reply = client_credentials(base, &client).await;
        assert_eq!(reply.status, StatusCode::OK);
        let token = reply.json()["access_token"].as_str().unwrap().to_owned();
        testing::client_cache_ready(&store).await;
        // The client and the token are cached now, and nothing is written meanwhile.
        for _ in 0..3 {
            let reply = introspect(base, &client, &token).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            assert_eq!(reply.json()["active"], true);
        }

        let out = binary::run_ok(&["app", "rotate-secret", &client.0, "--json"], &url).await;
        let rotated_at = Instant::now();
        let rotated: Value = serde_json::from_slice(&out).unwrap();
        let new = (
            client.0.clone(),
            rotated["client_secret"].as_str().unwrap().to_owned(),
        );

        let bound = rotation_bound(backend);
        loop {
            let sent = rotated_at.elapsed();
            let reply = introspect(base, &client, &token).await;
            if reply.status == StatusCode::UNAUTHORIZED {
                break;
            }
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            assert!(
                sent < bound,
                "{backend:?}: the old secret still works {sent:?} after the rotation"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let reply = introspect(base, &new, &token).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert_eq!(reply.json()["active"], true);
    }
}

// ---------------------------------------------------------------------------------------------
// Item 10: CSRF tokens signed under a server key and bound to their session.

const PASSWORD: &str = "operator-pass";

async fn staff(store: &Store, username: &str) {
    store
        .create_user(&NewUser {
            username: username.into(),
            password: Some(PASSWORD.into()),
            is_active: true,
            is_staff: true,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// The sign-in page's pre-session cookie (`name=value`) and its form's token.
async fn sign_in_page(base: &str) -> (String, String) {
    let (cookie, token, _) = sign_in_page_with(base, "tokengate_csrf").await;
    (cookie, token)
}

/// The sign-in page's pre-session cookie `name` (`name=value`), its form's token, and the whole
/// `Set-Cookie` value.
async fn sign_in_page_with(base: &str, name: &str) -> (String, String, String) {
    let page = send(support::browser_client().get(format!("{base}/accounts/login/"))).await;
    assert_eq!(page.status, StatusCode::OK);
    let cookie = set_cookie(&page.headers, name).expect("the pre-session cookie");
    let whole = page
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|v| v.starts_with(&format!("{name}=")))
        .unwrap();
    (cookie, csrf_token(&page.body), whole)
}

async fn submit_sign_in(base: &str, cookie: &str, token: &str, username: &str) -> Reply {
    send(
        support::browser_client()
            .post(format!("{base}/accounts/login/"))
            .header(header::COOKIE, cookie)
            .form(&[
                ("csrf_token", token),
                ("username", username),
                ("password", PASSWORD),
                ("next", ""),
            ]),
    )
    .await
}

/// Signs in: the session cookie and the token of the session's forms.
async fn signed_in(base: &str, username: &str) -> (String, String) {
    let (cookie, token) = sign_in_page(base).await;
    let reply = submit_sign_in(base, &cookie, &token, username).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let session = set_cookie(&reply.headers, "tokengate_session").unwrap();
    let page = send(
        support::browser_client()
            .get(format!("{base}/o/applications/"))
            .header(header::COOKIE, &session),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    (session, csrf_token(&page.body))
}

async fn sign_out(base: &str, session: &str, token: &str) -> Reply {
    send(
        support::browser_client()
            .post(format!("{base}/accounts/logout/"))
            .header(header::COOKIE, session)
            .form(&[("csrf_token", token)]),
    )
    .await
}

#[tokio::test]
async fn csrf_tokens_are_signed_by_the_server_and_bound_to_their_session() {
    let store = testing::store().await;
    staff(&store, "olivia").await;
    staff(&store, "oscar").await;
    let server = server(&store, |_| {}).await;
    let base = &server.base_url;

    // The review's attack: a cookie and a field of the attacker's choosing, equal.
    let made_up = "A".repeat(43);
    let reply = submit_sign_in(
        base,
        &format!("tokengate_csrf={made_up}"),
        &made_up,
        "olivia",
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    assert!(reply.body.contains("CSRF"), "{}", reply.body);
    // A real pre-session cookie, echoed in the field: the same double submit.
    let (cookie, token) = sign_in_page(base).await;
    let echoed = cookie.split_once('=').unwrap().1;
    let reply = submit_sign_in(base, &cookie, echoed, "olivia").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    // A token made for another pre-session cookie.
    let (other_cookie, other_token) = sign_in_page(base).await;
    assert_ne!(token, other_token);
    let reply = submit_sign_in(base, &cookie, &other_token, "olivia").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    let reply = submit_sign_in(base, &other_cookie, &token, "olivia").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    // The browser's own pair signs in.
    let reply = submit_sign_in(base, &cookie, &token, "olivia").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);

    // Signed-in forms: a token of another session is refused, and so is the session's stored
    // secret itself (what the forms carried before tokens were signed).
    let (olivia, olivia_token) = signed_in(base, "olivia").await;
    let (oscar, oscar_token) = signed_in(base, "oscar").await;
    assert_ne!(olivia_token, oscar_token);
    let reply = sign_out(base, &olivia, &oscar_token).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    let stored: Vec<String> = sqlx::query_scalar(
        "SELECT s.csrf_token FROM sessions s JOIN users u ON u.id = s.user_id WHERE u.username = 'olivia'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert!(!stored.is_empty());
    for secret in &stored {
        assert_ne!(secret, &olivia_token);
        let reply = sign_out(base, &olivia, secret).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    }
    assert_eq!(
        sign_out(base, &olivia, &olivia_token).await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        sign_out(base, &oscar, &oscar_token).await.status,
        StatusCode::SEE_OTHER
    );
}

/// The scenario: a sibling subdomain plants a pre-session cookie (with the token it
/// fetched for it) in the victim's browser and posts its own credentials. On an https issuer
/// the cookie is `__Host-` prefixed, which no other host can set: the planted one is not read.
#[tokio::test]
async fn on_https_a_sibling_subdomain_cannot_plant_the_pre_session_cookie() {
    let store = testing::store().await;
    staff(&store, "olivia").await;
    let server = server(&store, |s| s.issuer = "https://auth.example".into()).await;
    let base = &server.base_url;
    let (cookie, token, whole) = sign_in_page_with(base, "__Host-tokengate_csrf").await;
    assert!(whole.contains("; Path=/;"), "{whole}");
    assert!(whole.contains("; Secure"), "{whole}");
    assert!(!whole.to_ascii_lowercase().contains("domain="), "{whole}");

    // The attacker's own valid pair, its value planted under the name a sibling can set.
    let (attacker, attacker_token, _) = sign_in_page_with(base, "__Host-tokengate_csrf").await;
    let planted = format!("tokengate_csrf={}", attacker.split_once('=').unwrap().1);
    let reply = submit_sign_in(base, &planted, &attacker_token, "olivia").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    // Beside the browser's own cookie, it changes nothing either way.
    let both = format!("{planted}; {cookie}");
    let reply = submit_sign_in(base, &both, &attacker_token, "olivia").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    let reply = submit_sign_in(base, &both, &token, "olivia").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csrf_token_holds_across_replicas_and_restarts() {
    for (a, b) in testing::all_replica_pairs().await {
        staff(&a, "olivia").await;
        let first = server(&a, |_| {}).await;
        let second = server(&b, |_| {}).await;
        // The sign-in page of one replica, submitted to the other.
        let (cookie, token) = sign_in_page(&first.base_url).await;
        let reply = submit_sign_in(&second.base_url, &cookie, &token, "olivia").await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        // A page served before a restart, submitted after it.
        let (cookie, token) = sign_in_page(&first.base_url).await;
        first.stop().await;
        let restarted = server(&a, |_| {}).await;
        let reply = submit_sign_in(&restarted.base_url, &cookie, &token, "olivia").await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    }
}

// ---------------------------------------------------------------------------------------------
// Item 2 (authserver side): nothing is believed because it comes from loopback.

/// Password-grant guesses from this process (loopback), each for another username and claiming
/// another address in `X-Forwarded-For`, with `extra` headers: the statuses.
async fn guesses(
    base: &str,
    client: &(String, String),
    count: usize,
    extra: &[(&str, &str)],
) -> Vec<u16> {
    let http = support::browser_client();
    let mut statuses = Vec::new();
    for i in 0..count {
        let mut request = http
            .post(format!("{base}/o/token/"))
            .basic_auth(&client.0, Some(&client.1))
            .header("x-forwarded-for", format!("198.51.100.{}", i + 1))
            .form(&[
                ("grant_type", "password"),
                ("username", &format!("guess{i}")),
                ("password", "wrong-password"),
            ]);
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        statuses.push(request.send().await.unwrap().status().as_u16());
    }
    statuses
}

const GUESSES: usize = 24;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_forwarded_for_from_loopback_is_not_believed() {
    // The server's own default: no proxy is trusted, loopback included.
    let defaults = Settings::from_yaml("", "defaults.yaml").unwrap();
    let store = testing::store().await;
    let client = testing::application(&store, GrantType::Password, false).await;
    let plain = server(&store, |s| {
        s.trusted_proxies = defaults.trusted_proxies.clone()
    })
    .await;
    let statuses = guesses(&plain.base_url, &client, GUESSES, &[]).await;
    assert_eq!(statuses[..20], [400; 20], "{statuses:?}");
    assert!(statuses[20..].iter().all(|s| *s == 429), "{statuses:?}");

    // Loopback trusted but a proxy secret set: without the secret, the peer is the client.
    let secret = "proxy-secret-0123456789abcdef";
    let settings = Settings::from_yaml(
        &format!("trusted_proxies: [127.0.0.0/8, '::1']\nproxy_secret: {secret}"),
        "c.yaml",
    )
    .unwrap();
    let store = testing::store().await;
    let client = testing::application(&store, GrantType::Password, false).await;
    let proxied = server(&store, |s| {
        s.trusted_proxies = settings.trusted_proxies.clone();
        s.proxy_secret = settings.proxy_secret.clone();
    })
    .await;
    let wrong = guesses(
        &proxied.base_url,
        &client,
        GUESSES,
        &[("x-tokengate-proxy-secret", "not-the-secret-at-all")],
    )
    .await;
    assert!(wrong[20..].iter().all(|s| *s == 429), "{wrong:?}");
    // With the secret (what the proxy sends), each claimed address is believed: none is
    // throttled, since each failed once.
    let store = testing::store().await;
    let client = testing::application(&store, GrantType::Password, false).await;
    let proxied = server(&store, |s| {
        s.trusted_proxies = settings.trusted_proxies.clone();
        s.proxy_secret = settings.proxy_secret.clone();
    })
    .await;
    let proven = guesses(
        &proxied.base_url,
        &client,
        GUESSES,
        &[("x-tokengate-proxy-secret", secret)],
    )
    .await;
    assert_eq!(proven, [400; GUESSES], "{proven:?}");
}

// ---------------------------------------------------------------------------------------------
// Item 11: the Kubernetes authserver lists the ingress as its trusted proxy.

#[test]
fn the_kubernetes_authserver_names_the_ingress_it_trusts() {
    use serde::Deserialize;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/kubernetes/authserver.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let doc = serde_yaml_ng::Value::deserialize(document).unwrap();
        if doc["kind"] != "Deployment" || doc["metadata"]["name"] != "authserver" {
            continue;
        }
        for container in doc["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .unwrap()
        {
            for var in container["env"].as_sequence().unwrap() {
                if var["name"] == "AUTHSERVER_TRUSTED_PROXIES" {
                    values.push(var["value"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    assert_eq!(
        values.len(),
        1,
        "AUTHSERVER_TRUSTED_PROXIES in the authserver Deployment"
    );
    let placeholder = &values[0];
    assert!(placeholder.contains("INGRESS"), "{placeholder}");
    // Left as shipped, the server refuses to start and says which variable to fill in.
    let env = |key: &str| (key == "AUTHSERVER_TRUSTED_PROXIES").then(|| placeholder.clone());
    let err = Settings::load_with_env(Some(std::path::Path::new("/dev/null")), env)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("environment variable AUTHSERVER_TRUSTED_PROXIES: \"REPLACE-WITH"),
        "{err}"
    );
    // Filled in with a CIDR, it is what the server trusts.
    let env = |key: &str| (key == "AUTHSERVER_TRUSTED_PROXIES").then(|| "10.8.0.0/16".to_owned());
    let settings = Settings::load_with_env(Some(std::path::Path::new("/dev/null")), env).unwrap();
    assert_eq!(settings.trusted_proxies.len(), 1);
}
