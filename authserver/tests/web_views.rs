//! Router tests of the browser views (tower `oneshot`): sign-in and sessions, CSRF, the
//! applications pages and the administration, with their redirects, 400s, 403s and 404s.

use authserver::config::Settings;
use authserver::store::{
    Application, ApplicationInput, ClientType, GrantType, NewUser, Store, User,
};
use authserver::{AppState, app, testing};
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode, header};
use tower::ServiceExt;

struct Page {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The value of the first hidden `csrf_token` field.
    fn csrf(&self) -> String {
        hidden(&self.body, "csrf_token").unwrap_or_else(|| panic!("no csrf_token in {}", self.body))
    }

    /// The `name=value` of a `Set-Cookie` header for `name`.
    fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookie(name)
            .map(|c| c.split(';').next().unwrap_or_default().to_owned())
    }

    fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with(&format!("{name}=")))
            .map(str::to_owned)
    }
}

/// The value of the first hidden field `name`.
fn hidden(body: &str, name: &str) -> Option<String> {
    quoted_after(body, &format!("name=\"{name}\" value=\""))
}

/// The text between the first `marker` and the next `"`.
fn quoted_after(body: &str, marker: &str) -> Option<String> {
    let start = body.find(marker)? + marker.len();
    let end = body[start..].find('"')? + start;
    Some(body[start..end].to_owned())
}

fn encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

async fn send(
    state: &AppState,
    method: &str,
    uri: &str,
    cookie: Option<&str>,
    body: Option<String>,
) -> Page {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let response = app(state.clone())
        .oneshot(request.body(Body::from(body.unwrap_or_default())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    Page {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn get(state: &AppState, uri: &str, cookie: Option<&str>) -> Page {
    send(state, "GET", uri, cookie, None).await
}

async fn post(state: &AppState, uri: &str, cookie: Option<&str>, pairs: &[(&str, &str)]) -> Page {
    send(state, "POST", uri, cookie, Some(form(pairs))).await
}

/// A signed-in browser: its session cookie and the session's CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

impl Browser {
    async fn get(&self, state: &AppState, uri: &str) -> Page {
        get(state, uri, Some(&self.cookie)).await
    }

    /// Follows a post/redirect/get: the reply must be `303 See Other`; the page it names comes back.
    async fn follow(&self, state: &AppState, reply: &Page) -> Page {
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        self.get(state, reply.location()).await
    }

    /// Posts a form with this session's CSRF token added.
    async fn post(&self, state: &AppState, uri: &str, pairs: &[(&str, &str)]) -> Page {
        let mut all = vec![("csrf_token", self.csrf.as_str())];
        all.extend_from_slice(pairs);
        post(state, uri, Some(&self.cookie), &all).await
    }
}

/// Opens the sign-in page and submits it; returns the POST's response and the login CSRF cookie.
async fn submit_login(state: &AppState, username: &str, password: &str, next: &str) -> Page {
    let page = get(state, "/accounts/login/", None).await;
    assert_eq!(page.status, StatusCode::OK);
    // `__Host-` prefixed on an https issuer.
    let csrf_cookie = page
        .cookie("tokengate_csrf")
        .or_else(|| page.cookie("__Host-tokengate_csrf"))
        .expect("the sign-in page sets its CSRF cookie");
    let token = page.csrf();
    post(
        state,
        "/accounts/login/",
        Some(&csrf_cookie),
        &[
            ("csrf_token", &token),
            ("username", username),
            ("password", password),
            ("next", next),
        ],
    )
    .await
}

async fn sign_in(state: &AppState, username: &str, password: &str) -> Browser {
    let reply = submit_login(state, username, password, "").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let cookie = reply.cookie("tokengate_session").expect("a session cookie");
    let page = get(state, "/o/applications/", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    Browser {
        cookie,
        csrf: page.csrf(),
    }
}

async fn staff(store: &Store, username: &str, superuser: bool) {
    let new = NewUser {
        username: username.into(),
        password: Some("operator-pass".into()),
        is_active: true,
        is_staff: true,
        is_superuser: superuser,
        ..Default::default()
    };
    store.create_user(&new).await.unwrap();
}

async fn state() -> AppState {
    let store = testing::store().await;
    staff(&store, "olivia", false).await;
    staff(&store, "oscar", false).await;
    staff(&store, "root", true).await;
    testing::user(&store, "alice", "wonderland").await;
    AppState::new(Settings::for_tests("unused"), store)
}

async fn user_named(state: &AppState, username: &str) -> User {
    state
        .store
        .find_user_by_username(username)
        .await
        .unwrap()
        .unwrap()
}

async fn application_of(state: &AppState, client_id: &str) -> Application {
    state
        .store
        .find_application_by_client_id(client_id)
        .await
        .unwrap()
        .unwrap()
        .as_ref()
        .clone()
}

fn app_input(name: &str) -> ApplicationInput {
    ApplicationInput {
        name: name.into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::Password,
        redirect_uris: String::new(),
        allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    }
}

#[tokio::test]
async fn anonymous_visits_go_to_the_sign_in_page_and_come_back() {
    let state = state().await;
    for path in [
        "/o/applications/",
        "/o/applications/register/",
        "/o/applications/1/",
        "/o/applications/1/update/",
        "/o/applications/1/delete/",
        "/admin/",
        "/admin/users/?q=a",
        "/admin/users/add/",
        "/admin/users/1/",
        "/admin/users/1/password/",
        "/admin/groups/",
        "/admin/groups/1/",
    ] {
        let page = get(&state, path, None).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        let expected = if path == "/o/applications/" {
            "/accounts/login/".to_owned()
        } else {
            format!("/accounts/login/?next={}", encode(path))
        };
        assert_eq!(page.location(), expected, "{path}");
    }
    for path in [
        "/o/applications/register/",
        "/o/applications/1/delete/",
        "/admin/groups/",
        "/accounts/logout/",
    ] {
        let page = post(&state, path, None, &[("name", "x")]).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.location(), "/accounts/login/", "{path}");
    }
    // A stale or made-up session cookie is no session.
    let page = get(
        &state,
        "/o/applications/",
        Some("tokengate_session=made-up"),
    )
    .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);

    // Sign-in brings the visitor back to a local `next`, never elsewhere.
    let reply = submit_login(
        &state,
        "olivia",
        "operator-pass",
        "/o/applications/register/",
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(reply.location(), "/o/applications/register/");
    let set = reply.set_cookie("tokengate_session").unwrap();
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(
        !set.contains("Secure"),
        "no Secure flag on an http issuer: {set}"
    );
    for foreign in [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
    ] {
        let reply = submit_login(&state, "olivia", "operator-pass", foreign).await;
        assert_eq!(reply.location(), "/o/applications/", "{foreign}");
    }
    // The login page carries `next` in its form.
    let page = get(&state, "/accounts/login/?next=%2Fadmin%2F", None).await;
    assert_eq!(hidden(&page.body, "next").as_deref(), Some("/admin/"));
    let page = get(
        &state,
        "/accounts/login/?next=https%3A%2F%2Fevil.example%2F",
        None,
    )
    .await;
    assert_eq!(
        hidden(&page.body, "next").as_deref(),
        Some("/o/applications/")
    );
}

#[tokio::test]
async fn the_session_cookie_is_secure_on_an_https_issuer() {
    let store = testing::store().await;
    staff(&store, "olivia", false).await;
    let mut settings = Settings::for_tests("unused");
    settings.issuer = "https://auth.example".into();
    let state = AppState::new(settings, store);
    let reply = submit_login(&state, "olivia", "operator-pass", "").await;
    assert!(
        reply
            .set_cookie("tokengate_session")
            .unwrap()
            .contains("; Secure")
    );
}

#[tokio::test]
async fn sign_in_refusals_and_throttling() {
    let state = state().await;
    // Wrong password: 400, the form again with the username kept.
    let reply = submit_login(&state, "olivia", "wrong", "").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("value=\"olivia\""));
    assert!(reply.body.contains("correct username and password"));
    assert!(reply.cookie("tokengate_session").is_none());
    // Not staff: signed in (to authorize applications), landing on the authorized
    // applications, but refused the operator views.
    let reply = submit_login(&state, "alice", "wonderland", "").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(reply.location(), "/o/authorized-tokens/");
    let alice = Browser {
        cookie: reply.cookie("tokengate_session").unwrap(),
        csrf: String::new(),
    };
    for path in [
        "/o/applications/",
        "/o/applications/register/",
        "/admin/",
        "/admin/users/",
    ] {
        assert_eq!(
            alice.get(&state, path).await.status,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    assert_eq!(
        alice.get(&state, "/o/authorized-tokens/").await.status,
        StatusCode::OK
    );
    // No CSRF cookie, or a token that does not match it: 403.
    let page = get(&state, "/accounts/login/", None).await;
    let token = page.csrf();
    let reply = post(
        &state,
        "/accounts/login/",
        None,
        &[
            ("csrf_token", &token),
            ("username", "olivia"),
            ("password", "operator-pass"),
        ],
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(reply.body.contains("CSRF"));
    let cookie = page.cookie("tokengate_csrf").unwrap();
    let reply = post(
        &state,
        "/accounts/login/",
        Some(&cookie),
        &[
            ("csrf_token", "x"),
            ("username", "olivia"),
            ("password", "operator-pass"),
        ],
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);

    // Five failures for a username: the sixth attempt is refused even with the right password.
    for _ in 0..4 {
        assert_eq!(
            submit_login(&state, "oscar", "nope", "").await.status,
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!(
        submit_login(&state, "Oscar", "nope", "").await.status,
        StatusCode::BAD_REQUEST
    );
    let reply = submit_login(&state, "oscar", "operator-pass", "").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(reply.headers.contains_key(header::RETRY_AFTER));
    assert!(reply.body.contains("Too many failed sign-in attempts"));
    // Other usernames are not affected (an address may fail more often than one username).
    assert_eq!(
        submit_login(&state, "olivia", "operator-pass", "")
            .await
            .status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn sign_in_throttling_follows_the_client_address() {
    let mut settings = Settings::for_tests("unused");
    settings.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()];
    let state = AppState::new(settings, state().await.store.clone());
    let page = get(&state, "/accounts/login/", None).await;
    let cookie = page.cookie("tokengate_csrf").unwrap();
    let token = page.csrf();
    // A sign-in from the socket peer `peer` with this `X-Forwarded-For`.
    let attempt = |peer: &str, forwarded: &str, username: &str, password: &str| {
        let body = form(&[
            ("csrf_token", &token),
            ("username", username),
            ("password", password),
        ]);
        let mut request = Request::post("/accounts/login/")
            .header(header::COOKIE, &cookie)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if !forwarded.is_empty() {
            request = request.header("x-forwarded-for", forwarded);
        }
        let request = request.body(Body::from(body)).unwrap();
        let peer = std::net::SocketAddr::new(peer.parse().unwrap(), 50000);
        let app = app(state.clone()).layer(MockConnectInfo(peer));
        async move { app.oneshot(request).await.unwrap().status() }
    };
    // Five failures for oscar from 192.0.2.1, each claiming another address: the sixth attempt
    // from there is refused, whatever it claims.
    for i in 0..5 {
        let spoofed = format!("198.51.100.{i}");
        assert_eq!(
            attempt("192.0.2.1", &spoofed, "oscar", "nope").await,
            StatusCode::BAD_REQUEST
        );
    }
    for (peer, forwarded, expected) in [
        ("192.0.2.1", "198.51.100.9", StatusCode::TOO_MANY_REQUESTS),
        // Through the trusted proxy, 192.0.2.1 is still itself; the spoofed addresses and the
        // real oscar elsewhere are not locked out.
        ("10.0.0.1", "192.0.2.1", StatusCode::TOO_MANY_REQUESTS),
        ("10.0.0.1", "198.51.100.1", StatusCode::SEE_OTHER),
        ("192.0.2.2", "", StatusCode::SEE_OTHER),
    ] {
        assert_eq!(
            attempt(peer, forwarded, "oscar", "operator-pass").await,
            expected,
            "oscar from {peer}, X-Forwarded-For {forwarded:?}"
        );
    }
    // Per address, across usernames: the higher limit.
    for i in 0..authserver::throttle::MAX_FAILURES_PER_ADDRESS {
        assert_eq!(
            attempt("192.0.2.3", "", &format!("u{i}"), "guess").await,
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!(
        attempt("192.0.2.3", "", "olivia", "operator-pass").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn sign_out_ends_the_session() {
    let state = state().await;
    let browser = sign_in(&state, "olivia", "operator-pass").await;
    let reply = post(
        &state,
        "/accounts/logout/",
        Some(&browser.cookie),
        &[("csrf_token", "wrong")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let reply = browser.post(&state, "/accounts/logout/", &[]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(reply.location(), "/accounts/login/");
    assert!(
        reply
            .set_cookie("tokengate_session")
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(
        browser.get(&state, "/o/applications/").await.status,
        StatusCode::SEE_OTHER
    );
    // Signed in already: the sign-in page sends you on.
    let again = sign_in(&state, "olivia", "operator-pass").await;
    let page = again
        .get(
            &state,
            "/accounts/login/?next=%2Fo%2Fapplications%2Fregister%2F",
        )
        .await;
    assert_eq!(page.location(), "/o/applications/register/");
}

#[tokio::test]
async fn applications_register_read_update_regenerate_delete() {
    let state = state().await;
    let browser = sign_in(&state, "olivia", "operator-pass").await;
    let list = browser.get(&state, "/o/applications/").await;
    assert!(list.body.contains("href=\"/o/applications/register/\""));
    let form_page = browser.get(&state, "/o/applications/register/").await;
    assert_eq!(form_page.status, StatusCode::OK);
    for text in [
        "Resource owner password-based",
        "Client credentials",
        "Authorization code",
        "name=\"scope\" value=\"groups\"",
        "<label for=\"name\">",
    ] {
        assert!(form_page.body.contains(text), "{text}");
    }
    // Only superusers see "may introspect".
    assert!(!form_page.body.contains("may_introspect"));

    // Validation: 400, the form again with what was entered and the message beside the field.
    let reply = browser
        .post(
            &state,
            "/o/applications/register/",
            &[
                ("name", "Needs URIs"),
                ("client_type", "confidential"),
                ("grant_type", "authorization-code"),
                ("scope", "write"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("value=\"Needs URIs\""));
    assert!(reply.body.contains("id=\"redirect_uris-error\""));
    assert!(reply.body.contains("value=\"write\" checked"));
    assert!(
        reply
            .body
            .contains("<option value=\"authorization-code\" selected>")
    );
    let reply = browser
        .post(
            &state,
            "/o/applications/register/",
            &[
                ("name", ""),
                ("client_type", "x"),
                ("grant_type", "password"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.body.contains("id=\"name-error\"") && reply.body.contains("id=\"client_type-error\"")
    );

    // Registration redirects to the application's page, which shows the secret once.
    let reply = browser
        .post(
            &state,
            "/o/applications/register/",
            &[
                ("name", "Mobile <app>"),
                ("client_type", "confidential"),
                ("grant_type", "password"),
                ("scope", "read"),
                ("may_introspect", "on"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let shown_at = reply.location().to_owned();
    let reply = browser.follow(&state, &reply).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains("Application registered."));
    assert!(
        reply.body.contains("Mobile &#60;app&#62;") || reply.body.contains("Mobile &lt;app&gt;"),
        "names are escaped"
    );
    assert!(reply.body.contains("will not be shown again"));
    let secret = hidden_input(&reply.body, "client-secret").expect("the secret is shown");
    let client_id = hidden_input(&reply.body, "client-id").unwrap();
    let app = application_of(&state, &client_id).await;
    assert!(app.secret_matches(&secret));
    assert_eq!(app.owner_id, Some(user_named(&state, "olivia").await.id));
    assert_eq!(app.allowed_scopes, ["read"]);
    assert!(
        !app.may_introspect,
        "a staff operator cannot let it introspect"
    );

    // A reload of that page registers nothing more and shows the secret no more.
    let reload = browser.get(&state, &shown_at).await;
    assert_eq!(reload.status, StatusCode::OK);
    assert!(!reload.body.contains(&secret));
    assert!(!reload.body.contains("Application registered."));
    assert_eq!(state.store.list_applications(None).await.unwrap().len(), 1);

    // Afterwards only the fingerprint.
    let detail = browser
        .get(&state, &format!("/o/applications/{}/", app.id))
        .await;
    assert_eq!(detail.status, StatusCode::OK);
    assert!(!detail.body.contains(&secret));
    assert!(detail.body.contains(app.secret_fingerprint().unwrap()));
    assert!(
        detail
            .headers
            .get(header::CACHE_CONTROL)
            .unwrap()
            .to_str()
            .unwrap()
            .contains("no-store")
    );
    let list = browser.get(&state, "/o/applications/").await;
    assert!(list.body.contains(&client_id));

    // Update: the form is filled in; a good post redirects to the detail page.
    let page = browser
        .get(&state, &format!("/o/applications/{}/update/", app.id))
        .await;
    assert!(page.body.contains("value=\"read\" checked"));
    let reply = browser
        .post(
            &state,
            &format!("/o/applications/{}/update/", app.id),
            &[
                ("name", "Renamed"),
                ("client_type", "confidential"),
                ("grant_type", "client-credentials"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(
        reply
            .location()
            .starts_with(&format!("/o/applications/{}/?flash=", app.id))
    );
    let saved = browser.follow(&state, &reply).await;
    assert!(
        saved
            .body
            .contains("role=\"status\" id=\"notice\">Saved.</p>")
    );
    assert!(hidden_input(&saved.body, "client-secret").is_none());
    let updated = state.store.get_application(app.id).await.unwrap().unwrap();
    assert_eq!(
        (
            updated.name.as_str(),
            updated.grant_type,
            updated.may_introspect
        ),
        ("Renamed", GrantType::ClientCredentials, false)
    );
    assert!(updated.allowed_scopes.is_empty());
    let reply = browser
        .post(
            &state,
            &format!("/o/applications/{}/update/", app.id),
            &[
                ("name", "Renamed"),
                ("client_type", "public"),
                ("grant_type", "client-credentials"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("id=\"grant_type-error\""));

    // Regenerate: asked first; then a new secret, shown once; the old one stops working.
    let regenerate = format!("/o/applications/{}/regenerate-secret/", app.id);
    let page = browser.get(&state, &regenerate).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("The current secret stops working at once")
    );
    assert!(page.body.contains("Yes, regenerate it"));
    assert_eq!(page.csrf(), browser.csrf);
    assert!(
        state
            .store
            .get_application(app.id)
            .await
            .unwrap()
            .unwrap()
            .secret_matches(&secret),
        "showing the question changes nothing"
    );
    let reply = browser.post(&state, &regenerate, &[]).await;
    let shown_at = reply.location().to_owned();
    let reply = browser.follow(&state, &reply).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains("The previous secret no longer works."));
    let new_secret = hidden_input(&reply.body, "client-secret").unwrap();
    let again = state.store.get_application(app.id).await.unwrap().unwrap();
    assert!(again.secret_matches(&new_secret) && !again.secret_matches(&secret));
    // A reload regenerates nothing and shows the secret no more.
    let reload = browser.get(&state, &shown_at).await;
    assert_eq!(reload.status, StatusCode::OK);
    assert!(!reload.body.contains(&new_secret));
    let again = state.store.get_application(app.id).await.unwrap().unwrap();
    assert!(again.secret_matches(&new_secret));

    // Delete: a confirmation page, then the POST.
    let page = browser
        .get(&state, &format!("/o/applications/{}/delete/", app.id))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Yes, delete it"));
    let reply = browser
        .post(&state, &format!("/o/applications/{}/delete/", app.id), &[])
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(reply.location(), "/o/applications/");
    assert!(state.store.get_application(app.id).await.unwrap().is_none());
    assert_eq!(
        browser
            .get(&state, &format!("/o/applications/{}/", app.id))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

/// The `value` of the input with this `id`.
fn hidden_input(body: &str, id: &str) -> Option<String> {
    quoted_after(body, &format!("id=\"{id}\" class=\"mono\" value=\""))
}

#[tokio::test]
async fn a_public_client_turned_confidential_gets_its_first_secret() {
    let state = state().await;
    let browser = sign_in(&state, "olivia", "operator-pass").await;
    let reply = browser
        .post(
            &state,
            "/o/applications/register/",
            &[
                ("name", "Device"),
                ("client_type", "public"),
                ("grant_type", "password"),
            ],
        )
        .await;
    let reply = browser.follow(&state, &reply).await;
    assert!(hidden_input(&reply.body, "client-secret").is_none());
    assert!(reply.body.contains("none (public client)"));
    assert!(!reply.body.contains("regenerate-secret"));
    let client_id = hidden_input(&reply.body, "client-id").unwrap();
    let app = application_of(&state, &client_id).await;
    let reply = browser
        .post(
            &state,
            &format!("/o/applications/{}/update/", app.id),
            &[
                ("name", "Device"),
                ("client_type", "confidential"),
                ("grant_type", "password"),
            ],
        )
        .await;
    let reply = browser.follow(&state, &reply).await;
    assert!(reply.body.contains("now confidential"));
    let secret = hidden_input(&reply.body, "client-secret").unwrap();
    assert!(
        state
            .store
            .get_application(app.id)
            .await
            .unwrap()
            .unwrap()
            .secret_matches(&secret)
    );
}

#[tokio::test]
async fn operators_see_only_their_own_applications() {
    let state = state().await;
    let olivia = user_named(&state, "olivia").await;
    let (app, _) = state
        .store
        .create_application(&app_input("Olivia's"), Some(olivia.id), None, None)
        .await
        .unwrap();
    let oscar = sign_in(&state, "oscar", "operator-pass").await;
    let list = oscar.get(&state, "/o/applications/").await;
    assert!(!list.body.contains("Olivia&#39;s") && !list.body.contains(&app.client_id));
    for path in ["", "update/", "delete/", "regenerate-secret/"] {
        let page = oscar
            .get(&state, &format!("/o/applications/{}/{path}", app.id))
            .await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{path}");
        assert!(!page.body.contains(&app.client_id));
    }
    for path in ["update/", "delete/", "regenerate-secret/"] {
        let reply = oscar
            .post(
                &state,
                &format!("/o/applications/{}/{path}", app.id),
                &[
                    ("name", "Mine"),
                    ("client_type", "confidential"),
                    ("grant_type", "password"),
                ],
            )
            .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{path}");
    }
    let still = state.store.get_application(app.id).await.unwrap().unwrap();
    assert_eq!(still.name, "Olivia's");
    assert_eq!(still.client_secret_digest, app.client_secret_digest);

    // A superuser sees and opens every application.
    let root = sign_in(&state, "root", "operator-pass").await;
    assert!(
        root.get(&state, "/o/applications/")
            .await
            .body
            .contains(&app.client_id)
    );
    assert_eq!(
        root.get(&state, &format!("/o/applications/{}/", app.id))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn only_superusers_may_let_an_application_introspect() {
    let state = state().await;
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let fields = [
        ("name", "Resource server"),
        ("client_type", "confidential"),
        ("grant_type", "client-credentials"),
        ("may_introspect", "on"),
    ];
    // A staff operator's tick is ignored, and the box is not shown to them.
    let reply = olivia
        .post(&state, "/o/applications/register/", &fields)
        .await;
    let reply = olivia.follow(&state, &reply).await;
    let app = application_of(&state, &hidden_input(&reply.body, "client-id").unwrap()).await;
    assert!(!app.may_introspect);
    let update = format!("/o/applications/{}/update/", app.id);
    assert!(
        !olivia
            .get(&state, &update)
            .await
            .body
            .contains("may_introspect")
    );
    let reply = olivia.post(&state, &update, &fields).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let stored = |id| {
        let state = state.clone();
        async move {
            state
                .store
                .get_application(id)
                .await
                .unwrap()
                .unwrap()
                .may_introspect
        }
    };
    assert!(!stored(app.id).await);

    // A superuser sees the box and sets the flag on olivia's application.
    let page = root.get(&state, &update).await;
    assert!(page.body.contains("name=\"may_introspect\""));
    let reply = root.post(&state, &update, &fields).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(stored(app.id).await);
    // Olivia's later edit (without the box she cannot see) keeps it.
    let reply = olivia
        .post(
            &state,
            &update,
            &[
                ("name", "Renamed by olivia"),
                ("client_type", "confidential"),
                ("grant_type", "client-credentials"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(stored(app.id).await);
    // Only a superuser clears it.
    let reply = root.post(&state, &update, &fields[..3]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(!stored(app.id).await);
    // And a superuser registers an introspecting application directly.
    let reply = root
        .post(&state, "/o/applications/register/", &fields)
        .await;
    let reply = root.follow(&state, &reply).await;
    let app = application_of(&state, &hidden_input(&reply.body, "client-id").unwrap()).await;
    assert!(app.may_introspect);
}

/// The revocation stream's flag is set like the introspection one (superusers only), and apart
/// from it.
#[tokio::test]
async fn only_superusers_may_let_an_application_use_the_revocation_stream() {
    let state = state().await;
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let fields = [
        ("name", "Stream follower"),
        ("client_type", "confidential"),
        ("grant_type", "client-credentials"),
        ("may_use_ssf", "on"),
    ];
    let reply = olivia
        .post(&state, "/o/applications/register/", &fields)
        .await;
    let reply = olivia.follow(&state, &reply).await;
    let app = application_of(&state, &hidden_input(&reply.body, "client-id").unwrap()).await;
    assert!(!app.may_use_ssf, "a staff operator's tick is ignored");
    let update = format!("/o/applications/{}/update/", app.id);
    assert!(
        !olivia
            .get(&state, &update)
            .await
            .body
            .contains("may_use_ssf")
    );
    let stored = |id| {
        let state = state.clone();
        async move { state.store.get_application(id).await.unwrap().unwrap() }
    };
    let page = root.get(&state, &update).await;
    assert!(page.body.contains("name=\"may_use_ssf\""));
    let reply = root.post(&state, &update, &fields).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let app = stored(app.id).await;
    assert!(app.may_use_ssf);
    assert!(!app.may_introspect, "the two flags are apart");
    let detail = root
        .get(&state, &format!("/o/applications/{}/", app.id))
        .await;
    assert!(detail.body.contains("<dd id=\"may-use-ssf\">yes</dd>"));
    // Olivia's edit keeps it; a superuser's without the box clears it.
    let reply = olivia.post(&state, &update, &fields[..3]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(stored(app.id).await.may_use_ssf);
    let reply = root.post(&state, &update, &fields[..3]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(!stored(app.id).await.may_use_ssf);
}

#[tokio::test]
async fn an_application_registered_for_certificate_authentication() {
    let state = state().await;
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let mut fields = vec![
        ("name", "Billing batch"),
        ("client_type", "confidential"),
        ("grant_type", "client-credentials"),
        ("tls_client_auth", "cn:billing"),
    ];
    // A registration that is none of the three kinds is refused with the field named.
    let reply = olivia
        .post(&state, "/o/applications/register/", &fields)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply
            .body
            .contains("expected subject_dn, san_dns, self_signed or self_signed_jwks"),
        "{}",
        reply.body
    );
    // A malformed JWKS or DN is refused with the reason (HTML-escaped).
    for (bad, says) in [
        ("self_signed_jwks:{\"keys\":", "the JWKS is not JSON"),
        (
            "self_signed_jwks:{\"keys\":[]}",
            "non-empty &#34;keys&#34; array",
        ),
        (
            "self_signed_jwks:{\"keys\":[{\"kty\":\"EC\"}]}",
            "keys[0] has no &#34;x5c&#34;",
        ),
        (
            "self_signed_jwks:{\"keys\":[{\"x5c\":[\"AAAA\"]}]}",
            "keys[0].x5c[0] is not a DER X.509 certificate",
        ),
        (
            "self_signed_jwks:{\"keys\":[{\"d\":\"x\",\"x5c\":[\"AAAA\"]}]}",
            "private key material",
        ),
        ("subject_dn:CN=a;O=b", "must be escaped"),
        ("subject_dn:XX=a", "unknown attribute type"),
    ] {
        fields[3].1 = bad;
        let reply = olivia
            .post(&state, "/o/applications/register/", &fields)
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(reply.body.contains(says), "{bad}: {}", reply.body);
    }
    fields[3].1 = "san_dns:billing.example.com";
    let reply = olivia
        .post(&state, "/o/applications/register/", &fields)
        .await;
    let page = olivia.follow(&state, &reply).await;
    // No secret is shown: the certificate replaces it.
    assert!(!page.body.contains("id=\"client-secret\""), "{}", page.body);
    assert!(
        page.body
            .contains("none (authenticates with a certificate)"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("tls_client_auth (san_dns:billing.example.com)"),
        "{}",
        page.body
    );
    let app = application_of(&state, &hidden_input(&page.body, "client-id").unwrap()).await;
    assert_eq!(
        app.tls_client_auth,
        Some(authserver::mtls::TlsClientAuth::SanDns(
            "billing.example.com".into()
        ))
    );
    // The edit form shows it, and an edit without it goes back to the secret.
    let update = format!("/o/applications/{}/update/", app.id);
    assert!(
        olivia
            .get(&state, &update)
            .await
            .body
            .contains("value=\"san_dns:billing.example.com\"")
    );
    let reply = olivia.post(&state, &update, &fields[..3]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let stored = state.store.get_application(app.id).await.unwrap().unwrap();
    assert_eq!(stored.tls_client_auth, None);
    // A public client cannot have one.
    let public = [
        ("name", "Public"),
        ("client_type", "public"),
        ("grant_type", "password"),
        ("tls_client_auth", "san_dns:x.example"),
    ];
    let reply = olivia
        .post(&state, "/o/applications/register/", &public)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn csrf_refusals_are_403_and_change_nothing() {
    let state = state().await;
    let browser = sign_in(&state, "olivia", "operator-pass").await;
    let fields = [
        ("name", "Sneaky"),
        ("client_type", "confidential"),
        ("grant_type", "password"),
    ];
    let reply = post(
        &state,
        "/o/applications/register/",
        Some(&browser.cookie),
        &fields,
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let mut with_bad = vec![("csrf_token", "not-the-token")];
    with_bad.extend_from_slice(&fields);
    let reply = post(
        &state,
        "/o/applications/register/",
        Some(&browser.cookie),
        &with_bad,
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(reply.body.contains("CSRF verification failed"));
    assert!(
        state
            .store
            .list_applications(None)
            .await
            .unwrap()
            .is_empty()
    );
    // Another session's token is not this session's.
    let other = sign_in(&state, "oscar", "operator-pass").await;
    let mut with_other = vec![("csrf_token", other.csrf.as_str())];
    with_other.extend_from_slice(&fields);
    assert_eq!(
        post(
            &state,
            "/o/applications/register/",
            Some(&browser.cookie),
            &with_other
        )
        .await
        .status,
        StatusCode::FORBIDDEN
    );
    let root = sign_in(&state, "root", "operator-pass").await;
    let reply = post(
        &state,
        "/admin/groups/",
        Some(&root.cookie),
        &[("csrf_token", ""), ("name", "g")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(state.store.list_groups().await.unwrap().is_empty());
}

#[tokio::test]
async fn missing_records_are_404() {
    let state = state().await;
    let root = sign_in(&state, "root", "operator-pass").await;
    for path in [
        "/o/applications/999999/",
        "/o/applications/abc/",
        "/o/applications/-1/update/",
        "/o/applications/999999/delete/",
        "/o/applications/999999/regenerate-secret/",
        "/admin/users/999999/",
        "/admin/users/x/password/",
        "/admin/groups/999999/",
        "/admin/groups/999999/delete/",
    ] {
        let page = root.get(&state, path).await;
        assert_eq!(page.status, StatusCode::NOT_FOUND, "{path}");
        assert!(page.body.contains("Not found"), "{path}");
    }
    let reply = root
        .post(&state, "/o/applications/999999/regenerate-secret/", &[])
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn only_superusers_enter_the_administration() {
    let state = state().await;
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    for path in [
        "/admin/",
        "/admin/users/",
        "/admin/users/add/",
        "/admin/users/1/",
        "/admin/groups/",
    ] {
        assert_eq!(
            olivia.get(&state, path).await.status,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    let reply = olivia
        .post(
            &state,
            "/admin/users/add/",
            &[
                ("username", "eve"),
                ("password1", "12345678"),
                ("password2", "12345678"),
                ("is_superuser", "on"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(
        state
            .store
            .find_user_by_username("eve")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !olivia
            .get(&state, "/o/applications/")
            .await
            .body
            .contains("href=\"/admin/\"")
    );
    let root = sign_in(&state, "root", "operator-pass").await;
    assert!(
        root.get(&state, "/o/applications/")
            .await
            .body
            .contains("href=\"/admin/\"")
    );
    assert_eq!(root.get(&state, "/admin/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn admin_manages_users() {
    let state = state().await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let page = root.get(&state, "/admin/users/add/").await;
    assert!(page.body.contains("<label for=\"password1\">"));

    // Refusals: 400 with the values kept and the messages beside the fields.
    let reply = root
        .post(
            &state,
            "/admin/users/add/",
            &[
                ("username", "bob smith"),
                ("email", "bob"),
                ("password1", "short"),
                ("password2", "short"),
                ("is_staff", "on"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    for id in ["username-error", "email-error", "password1-error"] {
        assert!(reply.body.contains(id), "{id}");
    }
    assert!(
        reply.body.contains("value=\"bob smith\"")
            && reply.body.contains("id=\"is_staff\" checked")
    );
    let reply = root
        .post(
            &state,
            "/admin/users/add/",
            &[
                ("username", "alice"),
                ("password1", "long enough"),
                ("password2", "long enough"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("already exists"));
    let reply = root
        .post(
            &state,
            "/admin/users/add/",
            &[
                ("username", "bob"),
                ("password1", "long enough"),
                ("password2", "different!"),
            ],
        )
        .await;
    assert!(reply.body.contains("password2-error"));

    // Create, search, edit, reset the password, delete.
    let reply = root
        .post(
            &state,
            "/admin/users/add/",
            &[
                ("username", "bob"),
                ("email", "bob@example.org"),
                ("first_name", "Bob"),
                ("password1", "bob-password"),
                ("password2", "bob-password"),
                ("is_active", "on"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let bob = state
        .store
        .authenticate_user("bob", "bob-password")
        .await
        .unwrap()
        .expect("bob signs in with his password");
    assert!(!bob.is_staff);
    assert!(
        reply
            .location()
            .starts_with(&format!("/admin/users/{}/?flash=", bob.id))
    );
    assert!(
        root.follow(&state, &reply)
            .await
            .body
            .contains(">User created.</p>")
    );
    let list = root.get(&state, "/admin/users/?q=EXAMPLE.org").await;
    assert!(list.body.contains(">bob</a>") && !list.body.contains(">alice</a>"));
    let list = root.get(&state, "/admin/users/").await;
    assert!(list.body.contains(">alice</a>") && list.body.contains(">bob</a>"));

    let page = root.get(&state, &format!("/admin/users/{}/", bob.id)).await;
    assert!(page.body.contains("value=\"bob@example.org\""));
    let reply = root
        .post(
            &state,
            &format!("/admin/users/{}/", bob.id),
            &[
                ("username", "bob"),
                ("email", "b@example.org"),
                ("is_active", "on"),
                ("is_staff", "on"),
            ],
        )
        .await;
    let saved = root.follow(&state, &reply).await;
    assert!(
        saved
            .body
            .contains("role=\"status\" id=\"notice\">Saved.</p>")
    );
    assert!(saved.body.contains("value=\"b@example.org\""));
    let reload = root.get(&state, reply.location()).await;
    assert!(!reload.body.contains("Saved."), "the notice is shown once");
    let bob = state.store.get_user(bob.id).await.unwrap().unwrap();
    assert!(bob.is_staff && !bob.is_superuser && bob.email == "b@example.org");
    let reply = root
        .post(
            &state,
            &format!("/admin/users/{}/", bob.id),
            &[("username", "root"), ("is_active", "on")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("already exists"));

    // A staff member signed in loses the session when deactivated: it is deleted, so it stays
    // gone once the account is active again.
    let bob_browser = sign_in(&state, "bob", "bob-password").await;
    let bob_url = format!("/admin/users/{}/", bob.id);
    assert_eq!(
        root.post(&state, &bob_url, &[("username", "bob"), ("is_staff", "on")])
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        bob_browser.get(&state, "/o/applications/").await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        root.post(
            &state,
            &bob_url,
            &[("username", "bob"), ("is_staff", "on"), ("is_active", "on")]
        )
        .await
        .status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        bob_browser.get(&state, "/o/applications/").await.status,
        StatusCode::SEE_OTHER
    );

    let bob_browser = sign_in(&state, "bob", "bob-password").await;
    let reply = root
        .post(
            &state,
            &format!("/admin/users/{}/password/", bob.id),
            &[("password1", "tiny"), ("password2", "tiny")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = root
        .post(
            &state,
            &format!("/admin/users/{}/password/", bob.id),
            &[
                ("password1", "new-bob-password"),
                ("password2", "new-bob-password"),
            ],
        )
        .await;
    let changed = root.follow(&state, &reply).await;
    assert!(changed.body.contains(">Password changed.</p>"));
    // A password reset signs the user out everywhere.
    assert_eq!(
        bob_browser.get(&state, "/o/applications/").await.status,
        StatusCode::SEE_OTHER
    );
    assert!(
        state
            .store
            .authenticate_user("bob", "new-bob-password")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        state
            .store
            .authenticate_user("bob", "bob-password")
            .await
            .unwrap()
            .is_none()
    );

    // Superusers cannot lock themselves out.
    let me = user_named(&state, "root").await;
    let reply = root
        .post(
            &state,
            &format!("/admin/users/{}/", me.id),
            &[
                ("username", "root"),
                ("is_active", "on"),
                ("is_staff", "on"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("is_superuser-error"));
    assert_eq!(
        root.post(&state, &format!("/admin/users/{}/delete/", me.id), &[])
            .await
            .status,
        StatusCode::BAD_REQUEST
    );

    assert_eq!(
        root.get(&state, &format!("/admin/users/{}/delete/", bob.id))
            .await
            .status,
        StatusCode::OK
    );
    let reply = root
        .post(&state, &format!("/admin/users/{}/delete/", bob.id), &[])
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(state.store.get_user(bob.id).await.unwrap().is_none());
}

#[tokio::test]
async fn admin_manages_groups() {
    let state = state().await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let reply = root.post(&state, "/admin/groups/", &[("name", "  ")]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("name-error"));
    let reply = root
        .post(&state, "/admin/groups/", &[("name", "editors")])
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let group = state.store.list_groups().await.unwrap().pop().unwrap();
    assert!(
        reply
            .location()
            .starts_with(&format!("/admin/groups/{}/?flash=", group.id))
    );
    assert!(
        root.follow(&state, &reply)
            .await
            .body
            .contains(">Group created.</p>")
    );
    let reply = root
        .post(&state, "/admin/groups/", &[("name", "editors")])
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("already exists") && reply.body.contains("value=\"editors\""));

    let base = format!("/admin/groups/{}/", group.id);
    let reply = root.post(&state, &base, &[("name", "writers")]).await;
    let saved = root.follow(&state, &reply).await;
    assert!(saved.body.contains(">Saved.</p>") && saved.body.contains("writers"));
    assert_eq!(
        state.store.get_group(group.id).await.unwrap().unwrap().name,
        "writers"
    );
    let reply = root
        .post(
            &state,
            &format!("{base}members/add/"),
            &[("username", "nobody")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.body.contains("There is no user with that username")
            && reply.body.contains("value=\"nobody\"")
    );
    assert_eq!(
        root.post(
            &state,
            &format!("{base}members/add/"),
            &[("username", "alice")]
        )
        .await
        .status,
        StatusCode::SEE_OTHER
    );
    let alice = user_named(&state, "alice").await;
    assert_eq!(
        state.store.group_members(group.id).await.unwrap(),
        std::slice::from_ref(&alice)
    );
    let page = root.get(&state, &base).await;
    assert!(page.body.contains(&format!("members/{}/remove/", alice.id)));
    let groups = root.get(&state, "/admin/groups/").await;
    assert!(groups.body.contains(">writers</a>"));
    let reply = root
        .post(&state, &format!("{base}members/{}/remove/", alice.id), &[])
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(
        state
            .store
            .group_members(group.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        root.get(&state, &format!("{base}delete/")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        root.post(&state, &format!("{base}delete/"), &[])
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    assert!(state.store.get_group(group.id).await.unwrap().is_none());
}

#[tokio::test]
async fn the_stylesheet_is_served() {
    let state = state().await;
    let page = get(&state, "/static/style.css", None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.headers
            .get(header::CONTENT_TYPE)
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert!(page.body.contains("@media"));
    let login = get(&state, "/accounts/login/", None).await;
    assert!(login.body.contains("name=\"viewport\"") && login.body.contains("/static/style.css"));
    assert!(login.headers.contains_key(header::CONTENT_SECURITY_POLICY));
    assert_eq!(login.headers.get(header::X_FRAME_OPTIONS).unwrap(), "DENY");
}

#[tokio::test]
async fn the_new_secret_is_shown_once_and_only_to_the_session_that_asked() {
    let state = state().await;
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let fields = [
        ("name", "Once"),
        ("client_type", "confidential"),
        ("grant_type", "password"),
    ];
    let reply = olivia
        .post(&state, "/o/applications/register/", &fields)
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let shown_at = reply.location().to_owned();
    // A superuser may open the application, but the secret was not left for their session,
    // nor for olivia's other session.
    let root = sign_in(&state, "root", "operator-pass").await;
    let page = root.get(&state, &shown_at).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(hidden_input(&page.body, "client-secret").is_none());
    let olivia_elsewhere = sign_in(&state, "olivia", "operator-pass").await;
    let page = olivia_elsewhere.get(&state, &shown_at).await;
    assert!(hidden_input(&page.body, "client-secret").is_none());
    // Those attempts did not use it up; the first look of the right session does.
    let page = olivia.get(&state, &shown_at).await;
    let secret = hidden_input(&page.body, "client-secret").expect("shown to its session");
    assert!(!shown_at.contains(&secret), "never in a URL");
    let app = application_of(&state, &hidden_input(&page.body, "client-id").unwrap()).await;
    assert!(app.secret_matches(&secret));
    for _ in 0..2 {
        let page = olivia.get(&state, &shown_at).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains(&secret));
    }
    assert_eq!(state.store.list_applications(None).await.unwrap().len(), 1);
    // Regenerating wants the CSRF token too.
    let reply = post(
        &state,
        &format!("/o/applications/{}/regenerate-secret/", app.id),
        Some(&olivia.cookie),
        &[],
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let again = state.store.get_application(app.id).await.unwrap().unwrap();
    assert!(again.secret_matches(&secret));
}

#[tokio::test]
async fn a_flash_id_opens_nothing_on_another_page() {
    let state = state().await;
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let register = |name: &'static str| {
        [
            ("name", name),
            ("client_type", "confidential"),
            ("grant_type", "password"),
        ]
    };
    // Another application of the same operator, its own flash taken.
    let reply = olivia
        .post(&state, "/o/applications/register/", &register("Other"))
        .await;
    let page = olivia.follow(&state, &reply).await;
    let other = application_of(&state, &hidden_input(&page.body, "client-id").unwrap()).await;
    let reply = olivia
        .post(&state, "/o/applications/register/", &register("Once"))
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let shown_at = reply.location().to_owned();
    let (_, id) = shown_at.split_once("?flash=").expect("a flash id");
    // The same id on the other application's page, and on pages that take no flash: the same
    // session, but not the page the slot was left for.
    for elsewhere in [
        format!("/o/applications/{}/?flash={id}", other.id),
        format!("/o/applications/?flash={id}"),
        format!("/o/applications/{}/update/?flash={id}", other.id),
    ] {
        let page = olivia.get(&state, &elsewhere).await;
        assert_eq!(page.status, StatusCode::OK, "{elsewhere}");
        assert!(
            hidden_input(&page.body, "client-secret").is_none(),
            "{elsewhere}"
        );
        assert!(
            !page.body.contains("Application registered."),
            "{elsewhere}"
        );
    }
    // Still there for the page it was left for, once.
    let page = olivia.get(&state, &shown_at).await;
    assert!(page.body.contains("Application registered."));
    let secret = hidden_input(&page.body, "client-secret").expect("shown on its own page");
    let once = application_of(&state, &hidden_input(&page.body, "client-id").unwrap()).await;
    assert_ne!(once.id, other.id);
    assert!(once.secret_matches(&secret));
    assert!(!other.secret_matches(&secret));
    let page = olivia.get(&state, &shown_at).await;
    assert!(hidden_input(&page.body, "client-secret").is_none());
}

/// Signs in a user who is not staff: the session cookie, and the CSRF token of their pages.
async fn sign_in_user(state: &AppState, username: &str, password: &str) -> Browser {
    let reply = submit_login(state, username, password, "").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let cookie = reply.cookie("tokengate_session").expect("a session cookie");
    let page = get(state, "/o/authorized-tokens/", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    Browser {
        cookie,
        csrf: page.csrf(),
    }
}

#[tokio::test]
async fn a_403_page_keeps_the_header_and_leads_somewhere_the_user_may_go() {
    let state = state().await;
    let alice = sign_in_user(&state, "alice", "wonderland").await;
    let page = alice.get(&state, "/o/applications/").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(
        page.body.contains(r#"<span class="who">alice</span>"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("Sign out"),
        "the header keeps the sign-out button"
    );
    assert!(
        page.body
            .contains(r#"href="/o/authorized-tokens/" id="error-link""#),
        "{}",
        page.body
    );
    // An operator who is no superuser, at the administration: back to the applications.
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let page = olivia.get(&state, "/admin/users/").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(page.body.contains(r#"<span class="who">olivia</span>"#));
    assert!(
        page.body
            .contains(r#"href="/o/applications/" id="error-link""#)
    );
    // Another operator's application: the same.
    let oscar = user_named(&state, "oscar").await;
    let (theirs, _) = state
        .store
        .create_application(&app_input("Oscar's"), Some(oscar.id), None, None)
        .await
        .unwrap();
    let page = olivia
        .get(&state, &format!("/o/applications/{}/", theirs.id))
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(page.body.contains(r#"<span class="who">olivia</span>"#));
}

#[tokio::test]
async fn the_sign_in_page_of_an_authorization_names_the_application() {
    let state = state().await;
    let input = ApplicationInput {
        grant_type: GrantType::AuthorizationCode,
        client_type: ClientType::Public,
        redirect_uris: "https://photos.example/cb".into(),
        ..app_input("Photo <b>app</b>")
    };
    let (photos, _) = state
        .store
        .create_application(&input, None, None, None)
        .await
        .unwrap();
    let next = format!(
        "/o/authorize/?response_type=code&client_id={}&redirect_uri={}&code_challenge={}&code_challenge_method=S256",
        photos.client_id,
        encode("https://photos.example/cb"),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
    let page = get(
        &state,
        &format!("/accounts/login/?next={}", encode(&next)),
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("Sign in to continue to <strong>Photo &#60;b&#62;app&#60;/b&#62;</strong>")
            || page
                .body
                .contains("Sign in to continue to <strong>Photo &lt;b&gt;app&lt;/b&gt;</strong>"),
        "{}",
        page.body
    );
    // Any other sign-in names none; an unknown client none either.
    let plain = get(&state, "/accounts/login/", None).await;
    assert!(!plain.body.contains("Sign in to continue to"));
    let unknown = next.replace(&photos.client_id, "nobody");
    let page = get(
        &state,
        &format!("/accounts/login/?next={}", encode(&unknown)),
        None,
    )
    .await;
    assert!(!page.body.contains("Sign in to continue to"));
}

#[tokio::test]
async fn a_revoke_confirms_with_a_notice_once() {
    let state = state().await;
    let alice_user = user_named(&state, "alice").await;
    let (app, _) = state
        .store
        .create_application(&app_input("Calendar"), None, None, None)
        .await
        .unwrap();
    state
        .store
        .remember_consent(alice_user.id, app.id, "read")
        .await
        .unwrap();
    let alice = sign_in_user(&state, "alice", "wonderland").await;
    let reply = alice
        .post(
            &state,
            &format!("/o/authorized-tokens/{}/delete/", app.id),
            &[],
        )
        .await;
    let page = alice.follow(&state, &reply).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("Access revoked: Calendar can no longer use your account"),
        "{}",
        page.body
    );
    assert!(page.body.contains(r#"role="status""#));
    // Once: the same address again shows no notice.
    let again = alice.get(&state, reply.location()).await;
    assert!(!again.body.contains("Access revoked"));
}

#[tokio::test]
async fn the_favicon_is_served_and_named_by_every_page() {
    let state = state().await;
    for path in ["/favicon.ico", "/static/favicon.svg"] {
        let page = get(&state, path, None).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert_eq!(page.headers[header::CONTENT_TYPE], "image/svg+xml");
        assert!(page.body.starts_with("<svg"), "{path}");
    }
    let login = get(&state, "/accounts/login/", None).await;
    assert!(
        login
            .body
            .contains(r#"<link rel="icon" href="/static/favicon.svg""#)
    );
}

/// `/admin/resources/`: a superuser registers an API with the rules the CLI checks and deletes
/// it; a staff member who is no superuser, and a form without its CSRF token, change nothing.
#[tokio::test]
async fn admin_manages_api_resources() {
    let state = state().await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let page = root.get(&state, "/admin/resources/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("No APIs yet"));
    let fields = |identifier: &'static str, scopes: &'static str| {
        [
            ("identifier", identifier),
            ("name", "Orders <API>"),
            ("scopes", scopes),
            ("token_format", ""),
            ("access_token_lifetime", ""),
        ]
    };
    let refused = root
        .post(
            &state,
            "/admin/resources/",
            &fields("javascript:alert(1)", "orders:read"),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("identifier-error"),
        "{}",
        refused.body
    );
    let refused = root
        .post(
            &state,
            "/admin/resources/",
            &fields("https://orders.example/", "introspection"),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.body.contains("scopes-error"));
    assert!(state.store.list_resources().await.unwrap().is_empty());

    let created = root
        .post(
            &state,
            "/admin/resources/",
            &fields("https://orders.example/", "orders:read orders:write"),
        )
        .await;
    let listed = root.follow(&state, &created).await;
    assert!(listed.body.contains("https://orders.example/"));
    // Escaped as any name.
    assert!(
        listed.body.contains("Orders &#60;API&#62;") || listed.body.contains("Orders &lt;API&gt;")
    );
    let twice = root
        .post(
            &state,
            "/admin/resources/",
            &fields("https://orders.example/", "x"),
        )
        .await;
    assert_eq!(twice.status, StatusCode::BAD_REQUEST);
    assert!(twice.body.contains("already exists"));

    // Not a superuser: 403; no CSRF token: 403; nothing changes.
    let olivia = sign_in(&state, "olivia", "operator-pass").await;
    let page = olivia.get(&state, "/admin/resources/").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    let reply = olivia
        .post(
            &state,
            "/admin/resources/delete/",
            &[("identifier", "https://orders.example/")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let reply = post(
        &state,
        "/admin/resources/delete/",
        Some(&root.cookie),
        &[("identifier", "https://orders.example/")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(state.store.list_resources().await.unwrap().len(), 1);

    let deleted = root
        .post(
            &state,
            "/admin/resources/delete/",
            &[("identifier", "https://orders.example/")],
        )
        .await;
    assert_eq!(deleted.status, StatusCode::SEE_OTHER);
    assert!(state.store.list_resources().await.unwrap().is_empty());
    let again = root
        .post(
            &state,
            "/admin/resources/delete/",
            &[("identifier", "https://orders.example/")],
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_forms_and_pages_show_only_what_the_grant_type_needs() {
    let state = state().await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let code_section = "<fieldset class=\"grant-fields\" data-grant=\"authorization-code\"";
    // The register form starts on the password grant: the authorization code section is in the
    // page (the script shows it when that grant is picked) but hidden and disabled.
    let register = root.get(&state, "/o/applications/register/").await;
    assert!(
        register
            .body
            .contains(&format!("{code_section} hidden disabled>")),
        "{}",
        register.body
    );
    // A client-credentials application: neither its page nor its edit form shows PKCE, redirect
    // URIs or the ID-token algorithm.
    let fields = [
        ("name", "Machine"),
        ("client_type", "confidential"),
        ("grant_type", "client-credentials"),
    ];
    let reply = root
        .post(&state, "/o/applications/register/", &fields)
        .await;
    let detail = root.follow(&state, &reply).await;
    let app = application_of(&state, &hidden_input(&detail.body, "client-id").unwrap()).await;
    let detail = root
        .get(&state, &format!("/o/applications/{}/", app.id))
        .await;
    for absent in ["PKCE", "ID-token", "RS256", "Redirect URIs", "Post-logout"] {
        assert!(
            !detail.body.contains(absent),
            "{absent} in\n{}",
            detail.body
        );
    }
    let edit = root
        .get(&state, &format!("/o/applications/{}/update/", app.id))
        .await;
    assert!(
        edit.body
            .contains(&format!("{code_section} hidden disabled>"))
    );
    // An authorization code application: all of it, the section shown and enabled.
    let fields = [
        ("name", "Web app"),
        ("client_type", "confidential"),
        ("grant_type", "authorization-code"),
        ("redirect_uris", "https://web.example/cb"),
        ("id_token_alg", "RS256"),
    ];
    let reply = root
        .post(&state, "/o/applications/register/", &fields)
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let detail = root.follow(&state, &reply).await;
    let app = application_of(&state, &hidden_input(&detail.body, "client-id").unwrap()).await;
    let detail = root
        .get(&state, &format!("/o/applications/{}/", app.id))
        .await;
    for present in [
        "<dd id=\"pkce\">required (S256)</dd>",
        "<dd id=\"id-token-alg\">RS256</dd>",
        "https://web.example/cb",
    ] {
        assert!(
            detail.body.contains(present),
            "{present} missing in\n{}",
            detail.body
        );
    }
    let edit = root
        .get(&state, &format!("/o/applications/{}/update/", app.id))
        .await;
    assert!(
        edit.body.contains(&format!("{code_section}>")),
        "{}",
        edit.body
    );
    // The script that shows a section when its grant is picked is served.
    let script = get(&state, "/static/app.js", None).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(script.body.contains("fieldset[data-grant]"));
}

#[tokio::test]
async fn no_scope_ticked_means_no_scope_and_every_scope_is_a_choice() {
    let state = state().await;
    let root = sign_in(&state, "root", "operator-pass").await;
    let register = root.get(&state, "/o/applications/register/").await;
    assert!(
        register
            .body
            .contains("<input type=\"checkbox\" name=\"scope\" value=\"*\">"),
        "{}",
        register.body
    );
    assert!(
        register
            .body
            .contains("None ticked: the application may ask for no scope at all.")
    );
    let base = [
        ("client_type", "confidential"),
        ("grant_type", "client-credentials"),
    ];
    let register_with = |name: &'static str, extra: Vec<(&'static str, &'static str)>| {
        let mut fields = vec![("name", name)];
        fields.extend(base);
        fields.extend(extra);
        fields
    };
    for (name, extra, stored, shown) in [
        ("No scope", vec![], vec![], "<dd>none</dd>"),
        (
            "Every scope",
            vec![("scope", "*")],
            vec!["*"],
            "<dd>every declared scope</dd>",
        ),
        (
            "Read only",
            vec![("scope", "read")],
            vec!["read"],
            "<dd>read</dd>",
        ),
    ] {
        let reply = root
            .post(
                &state,
                "/o/applications/register/",
                &register_with(name, extra),
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        let detail = root.follow(&state, &reply).await;
        let app = application_of(&state, &hidden_input(&detail.body, "client-id").unwrap()).await;
        assert_eq!(app.allowed_scopes, stored, "{name}");
        let detail = root
            .get(&state, &format!("/o/applications/{}/", app.id))
            .await;
        assert!(detail.body.contains(shown), "{name}: {}", detail.body);
        // What the token endpoint's scope rule makes of it.
        let may = authserver::protocol::scope::may_have(&app, "read");
        assert_eq!(may, name != "No scope", "{name}");
    }
}
