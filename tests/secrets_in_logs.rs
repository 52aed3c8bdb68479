//! Secrets in debug logs (security round 3, item 5): the `tokengate` binary at `RUST_LOG=trace`
//! through a whole flow (password grant, client credentials, introspection and revocation
//! through the front door, a refresh, an API call, a sign-in), and then every password, secret,
//! token and cookie used is searched for in what it logged. Pingora printed request and response
//! headers and bodies at debug and trace; the crates that do are now capped at info unless
//! `TOKENGATE_UNSAFE_LOG_SECRETS=1`, which the second test sets to show the search finds them.
//! The flow also registers an application in the views (its secret shown once, kept as a sealed
//! message), configures and polls a revocation stream, and signs out.
//! The access lines of the proxy and the authorization server (issue 27) are checked for their
//! fields, as text and as JSON (`LOG_FORMAT=json`), in the same logs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use test_support::free_port;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::Value;

/// The stack binary at `RUST_LOG=trace` on free ports and a fresh SQLite database, its stderr
/// in a file; the credentials of its first start read from its banner.
struct Stack {
    child: Child,
    dir: PathBuf,
    base: String,
    admin: (String, String),
    client: (String, String),
    resource_server: (String, String),
}

impl Stack {
    fn start(unsafe_opt_in: bool) -> Stack {
        Stack::start_with(unsafe_opt_in, false)
    }

    fn start_with(unsafe_opt_in: bool, json: bool) -> Stack {
        let dir =
            std::env::temp_dir().join(format!("tg-logs-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = format!("sqlite://{}/authserver.db", dir.display());
        let front = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_tokengate"));
        command
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("RUST_LOG", "trace")
            .env("AUTHSERVER_DATABASE_URL", &db)
            .env("EXAMPLE_API_DATABASE_URL", &db)
            .env("TOKENGATE_DATA_DIR", &dir)
            .env("AUTHSERVER_LISTEN", format!("127.0.0.1:{}", free_port()))
            .env("EXAMPLE_API_LISTEN", format!("127.0.0.1:{}", free_port()))
            .env("PROXY_LISTEN", format!("127.0.0.1:{front}"))
            .env("PROXY_ADMIN_LISTEN", format!("127.0.0.1:{}", free_port()))
            .env_remove("TOKENGATE_UNSAFE_LOG_SECRETS")
            .env("LOG_FORMAT", if json { "json" } else { "text" })
            .env_remove("PROXY_ACCESS_LOG")
            .env_remove("AUTHSERVER_ACCESS_LOG")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap());
        if unsafe_opt_in {
            command.env("TOKENGATE_UNSAFE_LOG_SECRETS", "1");
        }
        let mut child = command.spawn().unwrap();
        let (lines_tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        let mut banner = String::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !banner.contains("client_secret") || banner.matches("client_secret").count() < 2 {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    banner.push_str(&line);
                    banner.push('\n');
                }
                Err(_) => panic!(
                    "no banner: {banner}\n{}",
                    std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
                ),
            }
        }
        let field = |label: &str, nth: usize| -> String {
            banner
                .lines()
                .filter_map(|l| l.trim().strip_prefix(label))
                .nth(nth)
                .unwrap_or_else(|| panic!("no {label} in {banner}"))
                .trim()
                .to_owned()
        };
        let admin_line = field("administrator", 0);
        let mut admin = admin_line.split_whitespace();
        let admin_user = admin.next().unwrap().to_owned();
        assert_eq!(admin.next(), Some("/"));
        let admin_password = admin.next().unwrap().to_owned();
        Stack {
            child,
            dir,
            base: format!("http://127.0.0.1:{front}"),
            admin: (admin_user, admin_password),
            client: (field("client_id", 0), field("client_secret", 0)),
            resource_server: (field("client_id", 1), field("client_secret", 1)),
        }
    }

    /// Stops the stack (SIGTERM, as an operator would) and returns what it logged.
    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap()
    }

    /// The proxy's own introspection secret, kept in the data directory.
    fn proxy_secret(&self) -> String {
        std::fs::read_to_string(self.dir.join(tokengate::PROXY_SECRET_FILE))
            .unwrap()
            .trim()
            .to_owned()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn basic((id, secret): &(String, String)) -> String {
    STANDARD.encode(format!("{id}:{secret}"))
}

async fn token(
    http: &reqwest::Client,
    stack: &Stack,
    client: &(String, String),
    form: &[(&str, &str)],
) -> Value {
    let reply = http
        .post(format!("{}/o/token/", stack.base))
        .basic_auth(&client.0, Some(&client.1))
        .form(form)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    reply.json().await.unwrap()
}

/// The `name=value` pairs of the `Set-Cookie` headers of `reply`.
fn cookies_of(reply: &reqwest::Response) -> Vec<String> {
    reply
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .map(str::to_owned)
        .collect()
}

/// The value of the hidden input `name` in `html`.
fn hidden(html: &str, name: &str) -> Option<String> {
    html.split(&format!("name=\"{name}\" value=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned)
}

/// The full flow; returns every secret value it used or was given.
async fn flow(stack: &Stack) -> Vec<(String, String)> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = &stack.base;
    let mut secrets = vec![
        ("admin password".to_owned(), stack.admin.1.clone()),
        ("client secret".to_owned(), stack.client.1.clone()),
        ("client Basic".to_owned(), basic(&stack.client)),
        (
            "resource-server secret".to_owned(),
            stack.resource_server.1.clone(),
        ),
        (
            "resource-server Basic".to_owned(),
            basic(&stack.resource_server),
        ),
        ("proxy secret".to_owned(), stack.proxy_secret()),
        (
            "proxy Basic".to_owned(),
            basic(&(tokengate::PROXY_CLIENT_ID.to_owned(), stack.proxy_secret())),
        ),
    ];
    let password = token(
        &http,
        stack,
        &stack.client,
        &[
            ("grant_type", "password"),
            ("username", &stack.admin.0),
            ("password", &stack.admin.1),
        ],
    )
    .await;
    let access = password["access_token"].as_str().unwrap().to_owned();
    let refresh = password["refresh_token"].as_str().unwrap().to_owned();
    secrets.push(("access token".into(), access.clone()));
    secrets.push(("refresh token".into(), refresh.clone()));

    // The API through the proxy (which introspects the token with its own secret).
    let users = http
        .get(format!("{base}/users/"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(users.status(), StatusCode::OK);
    // A token in the query string as well (refused: RFC 6750 allows one method per request):
    // the access line's path leaves the query out.
    let users = http
        .get(format!("{base}/users/?access_token={access}"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(users.status(), StatusCode::BAD_REQUEST);

    // Introspection through the front door, with a token and with HTTP Basic.
    let rs = token(
        &http,
        stack,
        &stack.resource_server,
        &[
            ("grant_type", "client_credentials"),
            ("scope", "introspection"),
        ],
    )
    .await;
    let rs_token = rs["access_token"].as_str().unwrap().to_owned();
    secrets.push(("introspection token".into(), rs_token.clone()));
    let by_token: Value = http
        .post(format!("{base}/o/introspect/"))
        .bearer_auth(&rs_token)
        .form(&[("token", access.as_str())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(by_token["active"], true);
    let by_basic: Value = http
        .post(format!("{base}/o/introspect/"))
        .basic_auth(&stack.resource_server.0, Some(&stack.resource_server.1))
        .form(&[("token", refresh.as_str())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(by_basic.get("active").is_some(), "{by_basic}");

    // A refresh, and the new pair revoked.
    let refreshed = token(
        &http,
        stack,
        &stack.client,
        &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
    )
    .await;
    let new_access = refreshed["access_token"].as_str().unwrap().to_owned();
    let new_refresh = refreshed["refresh_token"].as_str().unwrap().to_owned();
    secrets.push(("refreshed access token".into(), new_access.clone()));
    secrets.push(("refreshed refresh token".into(), new_refresh.clone()));
    let revoked = http
        .post(format!("{base}/o/revoke_token/"))
        .basic_auth(&stack.client.0, Some(&stack.client.1))
        .form(&[("token", new_refresh.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);

    // Sign-in at the views: the form's CSRF cookie and field, then the session cookie.
    let page = http
        .get(format!("{base}/accounts/login/"))
        .send()
        .await
        .unwrap();
    let page_cookies = cookies_of(&page);
    assert!(
        !page_cookies.is_empty(),
        "the sign-in form sets its CSRF cookie"
    );
    let html = page.text().await.unwrap();
    let (field_name, field) = ["csrf_token", "csrfmiddlewaretoken"]
        .into_iter()
        .find_map(|name| hidden(&html, name).map(|v| (name, v)))
        .expect("a CSRF field");
    let next = hidden(&html, "next").unwrap_or_default();
    let signed_in = http
        .post(format!("{base}/accounts/login/"))
        .header(COOKIE, page_cookies.join("; "))
        .form(&[
            ("username", stack.admin.0.as_str()),
            ("password", stack.admin.1.as_str()),
            (field_name, field.as_str()),
            ("next", next.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert!(
        signed_in.status().is_redirection(),
        "{}",
        signed_in.status()
    );
    let session = cookies_of(&signed_in)
        .into_iter()
        .find(|c| c.starts_with("tokengate_session="))
        .expect("a session cookie");
    let session_value = session.split_once('=').unwrap().1.to_owned();
    secrets.push(("session cookie".into(), session_value));
    secrets.push(("sign-in CSRF token".into(), field));
    for cookie in page_cookies {
        let (name, value) = cookie.split_once('=').unwrap();
        secrets.push((format!("cookie {name}"), value.to_owned()));
    }
    let admin_page = http
        .get(format!("{base}/admin/"))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    assert_eq!(admin_page.status(), StatusCode::OK);
    let csrf_field = |html: &str| hidden(html, "csrf_token").expect("a CSRF field");

    // An application registered in the views: its new secret crosses the store as a sealed
    // one-time message and is shown once on the next page.
    let form = signed_in_page(&http, &format!("{base}/o/applications/register/"), &session).await;
    let registered = http
        .post(format!("{base}/o/applications/register/"))
        .header(COOKIE, &session)
        .form(&[
            ("name", "logs-app"),
            ("client_type", "confidential"),
            ("grant_type", "client-credentials"),
            ("redirect_uris", ""),
            ("scope", "read"),
            ("csrf_token", &csrf_field(&form)),
        ])
        .send()
        .await
        .unwrap();
    assert!(
        registered.status().is_redirection(),
        "{}",
        registered.status()
    );
    let detail = registered.headers()["location"]
        .to_str()
        .unwrap()
        .to_owned();
    let detail = signed_in_page(&http, &format!("{base}{detail}"), &session).await;
    let new_secret = detail
        .split("id=\"client-secret\" class=\"mono\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the new secret shown once")
        .to_owned();
    secrets.push(("registered application's secret".into(), new_secret));

    // The revocation stream's configuration: created, changed with PATCH, polled.
    let ssf = token(
        &http,
        stack,
        &stack.resource_server,
        &[
            ("grant_type", "client_credentials"),
            ("scope", "ssf.read ssf.manage"),
        ],
    )
    .await;
    let ssf_token = ssf["access_token"].as_str().unwrap().to_owned();
    secrets.push(("stream token".into(), ssf_token.clone()));
    let stream: Value = http
        .post(format!("{base}/ssf/stream"))
        .bearer_auth(&ssf_token)
        .json(&serde_json::json!({"delivery": {"method": "urn:ietf:rfc:8936"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stream_id = stream["stream_id"].as_str().expect("a stream").to_owned();
    let patched = http
        .patch(format!("{base}/ssf/stream"))
        .bearer_auth(&ssf_token)
        .json(&serde_json::json!({"stream_id": stream_id, "events_requested": ["https://schemas.openid.net/secevent/caep/event-type/session-revoked"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), StatusCode::OK);
    let polled = http
        .post(format!("{base}/ssf/poll/{stream_id}"))
        .bearer_auth(&ssf_token)
        .json(&serde_json::json!({"maxEvents": 10, "returnImmediately": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(polled.status(), StatusCode::OK);

    // Signing out (which revokes the session's token families and says so on the stream).
    let admin_html = signed_in_page(&http, &format!("{base}/admin/"), &session).await;
    let signed_out = http
        .post(format!("{base}/accounts/logout/"))
        .header(COOKIE, &session)
        .form(&[("csrf_token", csrf_field(&admin_html).as_str())])
        .send()
        .await
        .unwrap();
    assert!(
        signed_out.status().is_redirection(),
        "{}",
        signed_out.status()
    );
    secrets
}

/// The text of the page at `url` for the session cookie `session`.
async fn signed_in_page(http: &reqwest::Client, url: &str, session: &str) -> String {
    let page = http.get(url).header(COOKIE, session).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK, "{url}");
    page.text().await.unwrap()
}

/// The secrets of `secrets` found in `log`.
fn leaked<'a>(log: &str, secrets: &'a [(String, String)]) -> Vec<&'a str> {
    secrets
        .iter()
        .filter(|(_, value)| value.len() >= 8 && log.contains(value.as_str()))
        .map(|(what, _)| what.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_log_of_a_whole_flow_holds_no_secret() {
    let stack = Stack::start(false);
    let secrets = flow(&stack).await;
    let log = stack.stop();
    // The level was really above info: debug lines (sqlx's, the servers') are there.
    assert!(
        log.lines().filter(|l| l.contains("DEBUG")).count() > 10,
        "no debug lines: is RUST_LOG read?\n{}",
        &log[..log.len().min(4000)]
    );
    let found = leaked(&log, &secrets);
    assert!(
        found.is_empty(),
        "the trace log holds: {found:?} ({} lines)",
        log.lines().count()
    );
}

/// The proxy's access line of the API call and the authorization server's of the password
/// grant, in text: every field there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lines_name_the_request_and_never_its_token() {
    let stack = Stack::start(false);
    let admin = stack.admin.0.clone();
    let client_id = stack.client.0.clone();
    let rs_id = stack.resource_server.0.clone();
    let secrets = flow(&stack).await;
    let log = stack.stop();
    let access: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" access: request"))
        .collect();
    let proxied = access
        .iter()
        .find(|l| l.contains("path=\"/users/\"") && l.contains("upstream_status"))
        .unwrap_or_else(|| panic!("no access line of GET /users/ in {access:#?}"));
    for field in [
        "server=\"proxy\"".to_owned(),
        "method=\"GET\"".to_owned(),
        "route=\"users-read\"".to_owned(),
        "decision=\"allow\"".to_owned(),
        format!("client_id=\"{client_id}\""),
        format!("user=\"{admin}\""),
        "status=200".to_owned(),
        "upstream_status=200".to_owned(),
        "latency_ms=".to_owned(),
    ] {
        assert!(proxied.contains(&field), "{field} missing in {proxied}");
    }
    let token = access
        .iter()
        // The proxy's own token request for the revocation stream is also there: the user's.
        .find(|l| {
            l.contains("route=\"/o/token/\"")
                && !l.contains("upstream_status")
                && !l.contains("client_id=\"tokengate-proxy")
        })
        .unwrap_or_else(|| panic!("no authorization server line of /o/token/ in {access:#?}"));
    // The authorization server names the user by id, never by name.
    for field in [
        "server=\"authserver\"".to_owned(),
        "method=\"POST\"".to_owned(),
        "path=\"/o/token/\"".to_owned(),
        format!("client_id=\"{client_id}\""),
        "user=\"1\"".to_owned(),
        "status=200".to_owned(),
    ] {
        assert!(token.contains(&field), "{field} missing in {token}");
    }
    // The views name the signed-in user, introspection its caller.
    let admin_page = access
        .iter()
        .find(|l| l.contains("path=\"/admin/\"") && !l.contains("upstream_status"))
        .unwrap_or_else(|| panic!("no authorization server line of /admin/ in {access:#?}"));
    assert!(admin_page.contains("user=\"1\""), "{admin_page}");
    let rs_id = format!("client_id=\"{rs_id}\"");
    assert!(
        access
            .iter()
            .any(|l| l.contains("route=\"/o/introspect/\"") && l.contains(&rs_id)),
        "no introspection line naming its caller in {access:#?}"
    );
    assert!(!log.contains("access_token="), "a query string was logged");
    assert_eq!(leaked(&log, &secrets), Vec::<&str>::new());
}

/// `LOG_FORMAT=json`: every line one JSON object with its level, target and fields; the access
/// lines with theirs; still no secret at trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_hold_their_fields_and_no_secret() {
    let stack = Stack::start_with(false, true);
    let client_id = stack.client.0.clone();
    let secrets = flow(&stack).await;
    let log = stack.stop();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() > 50, "{} lines", lines.len());
    for line in &lines {
        for key in ["timestamp", "level", "target"] {
            assert!(line.get(key).is_some(), "no {key} in {line}");
        }
    }
    assert!(
        lines.iter().any(|l| l["level"] == "DEBUG"),
        "RUST_LOG=trace is read"
    );
    let access: Vec<&Value> = lines.iter().filter(|l| l["target"] == "access").collect();
    let proxied = access
        .iter()
        .find(|l| l["path"] == "/users/" && l.get("upstream_status").is_some())
        .unwrap_or_else(|| panic!("no access line of GET /users/ in {access:#?}"));
    assert_eq!(proxied["server"], "proxy");
    assert_eq!(proxied["method"], "GET");
    assert_eq!(proxied["route"], "users-read");
    assert_eq!(proxied["decision"], "allow");
    assert_eq!(proxied["client_id"], client_id.as_str());
    assert_eq!(proxied["status"], 200);
    assert_eq!(proxied["upstream_status"], 200);
    assert!(proxied["latency_ms"].as_f64().is_some(), "{proxied}");
    let token = access
        .iter()
        .find(|l| {
            l["route"] == "/o/token/"
                && l.get("upstream_status").is_none()
                && !l["client_id"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("tokengate-proxy"))
        })
        .unwrap_or_else(|| panic!("no authorization server line of /o/token/ in {access:#?}"));
    assert_eq!(token["server"], "authserver");
    assert_eq!(token["client_id"], client_id.as_str());
    assert_eq!(token["status"], 200);
    assert_eq!(leaked(&log, &secrets), Vec::<&str>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unsafe_opt_in_lifts_the_cap_and_says_so() {
    let stack = Stack::start(true);
    let secrets = flow(&stack).await;
    let log = stack.stop();
    assert!(
        log.contains("TOKENGATE_UNSAFE_LOG_SECRETS=1"),
        "the opt-in is not announced"
    );
    // Pingora's trace lines print request headers: the search above would have found them.
    let found = leaked(&log, &secrets);
    assert!(found.contains(&"client Basic"), "{found:?}");
    // ...and the requests of the stream's configuration, so the search covers that path too.
    assert!(found.contains(&"stream token"), "{found:?}");
}
