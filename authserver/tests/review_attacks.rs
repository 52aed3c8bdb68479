//! Attacks of a security review, each against a real server on a loopback port. Four were flaws
//! the review found, each test failing until its fix: tokens surviving an admin password reset,
//! tokens coming back with a reactivated account, introspection open to a public client, and
//! other sessions surviving one's own password change. The others document checks that held.

mod support;

use support::code_flow::set_cookie;

use authserver::config::Settings;
use authserver::store::{ApplicationInput, ClientType, GrantType, NewUser, Store, User};
use authserver::testing::{self, RunningServer};
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::Value;

const PASSWORD: &str = "wonderland-pass";
const OPERATOR_PASSWORD: &str = "operator-pass";

struct Harness {
    server: RunningServer,
    store: Store,
    http: reqwest::Client,
}

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

/// A signed-in browser: its session cookie and the session's CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

fn hidden(body: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body.find(&marker)? + marker.len();
    let end = body[start..].find('"')? + start;
    Some(body[start..end].to_owned())
}

async fn create(store: &Store, username: &str, staff: bool, superuser: bool) -> User {
    store
        .create_user(&NewUser {
            username: username.into(),
            password: Some(if staff { OPERATOR_PASSWORD } else { PASSWORD }.into()),
            is_active: true,
            is_staff: staff,
            is_superuser: superuser,
            ..Default::default()
        })
        .await
        .unwrap()
}

fn input(name: &str, client_type: ClientType, grant_type: GrantType) -> ApplicationInput {
    ApplicationInput {
        name: name.into(),
        client_type,
        grant_type,
        redirect_uris: String::new(),
        allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    }
}

impl Harness {
    /// A server with staff `olivia` and `oscar`, superuser `root`, and user `alice`.
    async fn start(tweak: impl FnOnce(&mut Settings)) -> Harness {
        let store = testing::store().await;
        create(&store, "olivia", true, false).await;
        create(&store, "oscar", true, false).await;
        create(&store, "root", true, true).await;
        create(&store, "alice", false, false).await;
        let mut settings = Settings::for_tests("unused");
        tweak(&mut settings);
        let server =
            testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await;
        Harness {
            server,
            store,
            http: support::browser_client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.unwrap();
        Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    async fn user(&self, username: &str) -> User {
        self.store
            .find_user_by_username(username)
            .await
            .unwrap()
            .unwrap()
    }

    /// A confidential application owned by `owner` (None: registered from the command line).
    async fn app(
        &self,
        input: &ApplicationInput,
        owner: Option<i64>,
    ) -> (authserver::store::Application, Option<String>) {
        self.store
            .create_application(input, owner, None, None)
            .await
            .unwrap()
    }

    async fn sign_in(&self, username: &str, password: &str) -> Browser {
        let page = self.send(self.http.get(self.url("/accounts/login/"))).await;
        let csrf_cookie = set_cookie(&page.headers, "tokengate_csrf").unwrap();
        let token = hidden(&page.body, "csrf_token").unwrap();
        let reply = self
            .send(
                self.http
                    .post(self.url("/accounts/login/"))
                    .header(header::COOKIE, &csrf_cookie)
                    .form(&[
                        ("csrf_token", token.as_str()),
                        ("username", username),
                        ("password", password),
                        ("next", ""),
                    ]),
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        let cookie = set_cookie(&reply.headers, "tokengate_session").unwrap();
        let page = self
            .send(
                self.http
                    .get(self.url("/o/authorized-tokens/"))
                    .header(header::COOKIE, &cookie),
            )
            .await;
        assert_eq!(page.status, StatusCode::OK);
        let csrf = hidden(&page.body, "csrf_token").expect("the page carries the session token");
        Browser { cookie, csrf }
    }

    async fn browser_get(&self, browser: &Browser, path: &str) -> Reply {
        self.send(
            self.http
                .get(self.url(path))
                .header(header::COOKIE, &browser.cookie),
        )
        .await
    }

    /// Posts `pairs` with the browser's cookie and, first, `csrf` (the session's own when None).
    async fn browser_post_with(
        &self,
        browser: &Browser,
        path: &str,
        csrf: Option<&str>,
        pairs: &[(&str, &str)],
    ) -> Reply {
        let mut all: Vec<(&str, &str)> = Vec::new();
        if let Some(token) = csrf {
            all.push(("csrf_token", token));
        }
        all.extend_from_slice(pairs);
        self.send(
            self.http
                .post(self.url(path))
                .header(header::COOKIE, &browser.cookie)
                .form(&all),
        )
        .await
    }

    async fn browser_post(&self, browser: &Browser, path: &str, pairs: &[(&str, &str)]) -> Reply {
        self.browser_post_with(browser, path, Some(&browser.csrf), pairs)
            .await
    }

    /// A form posted to an OAuth endpoint with HTTP Basic client credentials.
    async fn oauth(&self, path: &str, client: (&str, &str), form: &[(&str, &str)]) -> Reply {
        self.send(
            self.http
                .post(self.url(path))
                .basic_auth(client.0, Some(client.1))
                .form(form),
        )
        .await
    }

    async fn password_tokens(&self, client: (&str, &str), scope: Option<&str>) -> Value {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", PASSWORD),
        ];
        if let Some(scope) = scope {
            form.push(("scope", scope));
        }
        let reply = self.oauth("/o/token/", client, &form).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.json()
    }

    /// `/admin/users/<id>/password/` posted by `operator`.
    async fn set_password(&self, operator: &Browser, user_id: i64, password: &str) -> Reply {
        let path = format!("/admin/users/{user_id}/password/");
        let form = [("password1", password), ("password2", password)];
        self.browser_post(operator, &path, &form).await
    }

    /// A refresh grant by `client`.
    async fn refresh(&self, client: (&str, &str), refresh_token: &str) -> Reply {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ];
        self.oauth("/o/token/", client, &form).await
    }

    /// Neither the access token of `tokens` introspects active nor its refresh token refreshes
    /// (the access token is asked first: the refresh would rotate it away).
    async fn assert_dead(
        &self,
        client: &(String, String),
        introspector: &(String, String),
        tokens: &Value,
        when: &str,
    ) {
        let access_active = self
            .active(pair(introspector), s(&tokens["access_token"]))
            .await;
        let refreshed = self
            .refresh(pair(client), s(&tokens["refresh_token"]))
            .await;
        assert!(
            !access_active && refreshed.status == StatusCode::BAD_REQUEST,
            "{when}: the old access token is active: {access_active}; its refresh token: {} {}",
            refreshed.status,
            refreshed.body
        );
    }

    /// Whether `token` is active, asked by an application allowed to introspect.
    async fn active(&self, introspector: (&str, &str), token: &str) -> bool {
        let reply = self
            .oauth("/o/introspect/", introspector, &[("token", token)])
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.json()["active"] == Value::Bool(true)
    }

    /// A confidential password client and a confidential introspecting client.
    async fn clients(&self) -> ((String, String), (String, String)) {
        let password = testing::application(&self.store, GrantType::Password, false).await;
        let introspector =
            testing::application(&self.store, GrantType::ClientCredentials, true).await;
        (password, introspector)
    }
}

fn pair(client: &(String, String)) -> (&str, &str) {
    (client.0.as_str(), client.1.as_str())
}

fn s(value: &Value) -> &str {
    value.as_str().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Findings, fixed (each test failed until its fix)
// ---------------------------------------------------------------------------------------------

/// An operator who resets a user's password (account taken over, password leaked) expects
/// whoever held the old one to be locked out. The sessions ended (admin.rs), but the OAuth access
/// and refresh tokens obtained with the old password kept working for their full lifetime
/// (refresh tokens rotate forever); now the password change revokes them.
#[tokio::test]
async fn a_password_reset_by_the_admin_ends_the_tokens_got_with_the_old_password() {
    let h = Harness::start(|_| {}).await;
    let (client, introspector) = h.clients().await;
    let stolen = h.password_tokens(pair(&client), None).await;
    let alice = h.user("alice").await;
    let root = h.sign_in("root", OPERATOR_PASSWORD).await;
    let reply = h.set_password(&root, alice.id, "brand-new-pass").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    // The old password no longer works...
    let old = h
        .oauth(
            "/o/token/",
            pair(&client),
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(old.status, StatusCode::BAD_REQUEST);
    // ...nor does what it bought.
    h.assert_dead(&client, &introspector, &stolen, "after a password reset")
        .await;
}

/// Deactivating a compromised account is the usual first response; reactivating it (after a
/// password reset) must not bring the attacker's tokens back. The tokens were only hidden while
/// `is_active` was false (TokenRecord::is_active joins the user's flag) and came back to life,
/// refresh tokens included, the moment the account was reactivated; now deactivation revokes.
#[tokio::test]
async fn deactivating_a_user_ends_their_tokens_for_good() {
    let h = Harness::start(|_| {}).await;
    let (client, introspector) = h.clients().await;
    let stolen = h.password_tokens(pair(&client), None).await;
    let alice = h.user("alice").await;
    let root = h.sign_in("root", OPERATOR_PASSWORD).await;
    let path = format!("/admin/users/{}/", alice.id);
    let deactivate = h
        .browser_post(&root, &path, &[("username", "alice"), ("email", "")])
        .await;
    assert_eq!(
        deactivate.status,
        StatusCode::SEE_OTHER,
        "{}",
        deactivate.body
    );
    assert!(!h.user("alice").await.is_active);
    // While inactive the tokens are refused (this part holds).
    assert!(
        !h.active(pair(&introspector), s(&stolen["access_token"]))
            .await
    );
    let reactivate = h
        .browser_post(
            &root,
            &path,
            &[("username", "alice"), ("email", ""), ("is_active", "on")],
        )
        .await;
    assert_eq!(
        reactivate.status,
        StatusCode::SEE_OTHER,
        "{}",
        reactivate.body
    );
    h.assert_dead(
        &client,
        &introspector,
        &stolen,
        "after deactivate + reactivate",
    )
    .await;
}

/// Only superusers may let an application introspect (applications.rs introspect_flag). A staff
/// owner of an application a superuser allowed to introspect could turn it into a public client
/// (the flag was kept); a public client authenticates by its client_id alone
/// (params.rs authenticate_client_if_presented), so from then on anyone who knew that
/// non-secret identifier could introspect every token of the server. Now the flag falls with the
/// change, and introspection demands a confidential client even where a public one still has
/// the flag (rows written before the fix, or by hand).
#[tokio::test]
async fn introspection_is_never_open_to_a_client_without_a_secret() {
    let h = Harness::start(|_| {}).await;
    let (client, _) = h.clients().await;
    let olivia = h.user("olivia").await;
    let mut granted = input(
        "Resource server",
        ClientType::Confidential,
        GrantType::Password,
    );
    granted.may_introspect = true; // set by a superuser
    let (app, _) = h.app(&granted, Some(olivia.id)).await;
    let staff = h.sign_in("olivia", OPERATOR_PASSWORD).await;
    let reply = h
        .browser_post(
            &staff,
            &format!("/o/applications/{}/update/", app.id),
            &[
                ("name", "Resource server"),
                ("client_type", "public"),
                ("grant_type", "password"),
                ("redirect_uris", ""),
                ("token_format", ""),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let now = h.store.get_application(app.id).await.unwrap().unwrap();
    assert_eq!(now.client_type, ClientType::Public);
    assert!(
        !now.may_introspect,
        "the superuser's flag survived the edit"
    );
    let mut stored = input("Resource server", ClientType::Public, GrantType::Password);
    stored.may_introspect = true;
    h.store
        .update_application(app.id, &stored)
        .await
        .unwrap()
        .unwrap();
    // Anyone on the network, with nothing but the client_id.
    let victim = h.password_tokens(pair(&client), None).await;
    let anonymous = h
        .send(h.http.post(h.url("/o/introspect/")).form(&[
            ("client_id", app.client_id.as_str()),
            ("token", s(&victim["access_token"])),
        ]))
        .await;
    assert!(
        anonymous.status == StatusCode::UNAUTHORIZED || anonymous.status == StatusCode::FORBIDDEN,
        "introspection with a bare client_id answered {}: {}",
        anonymous.status,
        anonymous.body
    );
}

// ---------------------------------------------------------------------------------------------
// Attacks that held
// ---------------------------------------------------------------------------------------------

/// Staff cannot reach `/admin/` by a direct POST with a valid CSRF token: no self-promotion to
/// superuser, no membership changes, no password resets; ordinary users cannot register apps.
#[tokio::test]
async fn staff_and_users_cannot_post_to_superuser_views() {
    let h = Harness::start(|_| {}).await;
    let olivia = h.user("olivia").await;
    let root_user = h.user("root").await;
    let group = h.store.create_group("admins").await.unwrap();
    let staff = h.sign_in("olivia", OPERATOR_PASSWORD).await;
    let own = format!("/admin/users/{}/", olivia.id);
    let attempts: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            own.clone(),
            vec![
                ("username", "olivia"),
                ("is_active", "on"),
                ("is_staff", "on"),
                ("is_superuser", "on"),
            ],
        ),
        (
            format!("/admin/users/{}/password/", root_user.id),
            vec![("password1", "taken-over!"), ("password2", "taken-over!")],
        ),
        (format!("/admin/users/{}/delete/", root_user.id), Vec::new()),
        (
            format!("/admin/groups/{}/members/add/", group.id),
            vec![("username", "olivia")],
        ),
        (
            "/admin/users/add/".into(),
            vec![
                ("username", "mallory"),
                ("password1", "mallory-pass"),
                ("password2", "mallory-pass"),
                ("is_active", "on"),
                ("is_superuser", "on"),
            ],
        ),
    ];
    for (path, form) in &attempts {
        let reply = h.browser_post(&staff, path, form).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{path}: {}",
            reply.body
        );
    }
    let olivia_now = h.user("olivia").await;
    assert!(!olivia_now.is_superuser);
    assert!(
        h.store
            .find_user_by_username("mallory")
            .await
            .unwrap()
            .is_none()
    );
    assert!(h.store.group_members(group.id).await.unwrap().is_empty());
    assert!(h.store.get_user(root_user.id).await.unwrap().is_some());
    // An ordinary user: not even the operator views.
    let alice = h.sign_in("alice", PASSWORD).await;
    let reply = h
        .browser_post(
            &alice,
            "/o/applications/register/",
            &[
                ("name", "x"),
                ("client_type", "confidential"),
                ("grant_type", "client-credentials"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(h.store.list_applications(None).await.unwrap().is_empty());
}

/// A staff operator cannot set may-introspect (also by repeating the field), nor read, change,
/// regenerate or delete another operator's or an ownerless application.
#[tokio::test]
async fn staff_cannot_grant_introspection_or_touch_foreign_applications() {
    let h = Harness::start(|_| {}).await;
    let oscar = h.user("oscar").await;
    let staff = h.sign_in("olivia", OPERATOR_PASSWORD).await;
    let reply = h
        .browser_post(
            &staff,
            "/o/applications/register/",
            &[
                ("name", "Sneaky"),
                ("client_type", "confidential"),
                ("grant_type", "client-credentials"),
                ("may_introspect", "on"),
                ("may_introspect", "on"),
                ("scope", "introspection"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let mine = h
        .store
        .list_applications(Some(h.user("olivia").await.id))
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert!(!mine[0].may_introspect);
    let (foreign, _) = h
        .app(
            &input("Oscar's", ClientType::Confidential, GrantType::Password),
            Some(oscar.id),
        )
        .await;
    let (ownerless, _) = h
        .app(
            &input(
                "tokengate-proxy",
                ClientType::Confidential,
                GrantType::ClientCredentials,
            ),
            None,
        )
        .await;
    for app in [&foreign, &ownerless] {
        for path in ["", "update/", "delete/", "regenerate-secret/"] {
            let page = h
                .browser_get(&staff, &format!("/o/applications/{}/{path}", app.id))
                .await;
            assert_eq!(page.status, StatusCode::FORBIDDEN, "GET {path}");
        }
        let update = h
            .browser_post(
                &staff,
                &format!("/o/applications/{}/update/", app.id),
                &[
                    ("name", "Hijacked"),
                    ("client_type", "public"),
                    ("grant_type", "password"),
                ],
            )
            .await;
        assert_eq!(update.status, StatusCode::FORBIDDEN);
        for path in ["delete/", "regenerate-secret/"] {
            let reply = h
                .browser_post(&staff, &format!("/o/applications/{}/{path}", app.id), &[])
                .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "POST {path}");
        }
        let now = h.store.get_application(app.id).await.unwrap().unwrap();
        assert_eq!(now.name, app.name);
        assert_eq!(now.client_secret_digest, app.client_secret_digest);
    }
}

/// Every state-changing POST wants the session's own CSRF token: none, or another session's
/// (a signed-in attacker's own token), is 403.
#[tokio::test]
async fn posts_want_the_csrf_token_of_their_own_session() {
    let h = Harness::start(|_| {}).await;
    let alice = h.user("alice").await;
    let root = h.sign_in("root", OPERATOR_PASSWORD).await;
    let attacker = h.sign_in("olivia", OPERATOR_PASSWORD).await;
    let promote = [
        ("username", "alice"),
        ("is_active", "on"),
        ("is_staff", "on"),
        ("is_superuser", "on"),
    ];
    let path = format!("/admin/users/{}/", alice.id);
    for csrf in [None, Some(attacker.csrf.as_str()), Some("")] {
        let reply = h.browser_post_with(&root, &path, csrf, &promote).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{csrf:?}");
    }
    // The Django field name is no side door either.
    let reply = h
        .browser_post_with(
            &root,
            &path,
            None,
            &[
                ("csrfmiddlewaretoken", attacker.csrf.as_str()),
                ("username", "alice"),
                ("is_active", "on"),
                ("is_superuser", "on"),
            ],
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let logout = h
        .browser_post_with(&root, "/accounts/logout/", Some(&attacker.csrf), &[])
        .await;
    assert_eq!(logout.status, StatusCode::FORBIDDEN);
    assert!(!h.user("alice").await.is_superuser);
    // Administration state never changes through GET.
    let page = h
        .browser_get(&root, &format!("/admin/users/{}/delete/", alice.id))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(h.store.get_user(alice.id).await.unwrap().is_some());
}

/// RFC 7009: client B cannot revoke client A's tokens (A's access and refresh tokens survive,
/// the answer is the same 200 as for an unknown token).
#[tokio::test]
async fn a_client_cannot_revoke_another_clients_tokens() {
    let h = Harness::start(|_| {}).await;
    let (a, introspector) = h.clients().await;
    let b = testing::application(&h.store, GrantType::Password, false).await;
    let tokens = h.password_tokens(pair(&a), None).await;
    for token in [&tokens["access_token"], &tokens["refresh_token"]] {
        let reply = h
            .oauth("/o/revoke_token/", pair(&b), &[("token", s(token))])
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "");
    }
    assert!(
        h.active(pair(&introspector), s(&tokens["access_token"]))
            .await
    );
    let refreshed = h.refresh(pair(&a), s(&tokens["refresh_token"])).await;
    assert_eq!(refreshed.status, StatusCode::OK, "{}", refreshed.body);
    // Without its secret, A cannot be impersonated on revocation.
    let reply = h
        .send(h.http.post(h.url("/o/revoke_token/")).form(&[
            ("client_id", a.0.as_str()),
            ("token", s(&refreshed.json()["access_token"])),
        ]))
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}

/// A client without may_introspect learns nothing from introspection: 401/403 without
/// `active`, and cannot mint itself an `introspection` token by any grant.
#[tokio::test]
async fn introspection_without_permission_learns_nothing() {
    let h = Harness::start(|_| {}).await;
    let (client, _) = h.clients().await;
    let cc = testing::application(&h.store, GrantType::ClientCredentials, false).await;
    let tokens = h.password_tokens(pair(&client), None).await;
    let token = s(&tokens["access_token"]);
    let forbidden = h
        .oauth("/o/introspect/", pair(&client), &[("token", token)])
        .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    assert!(
        forbidden.json().get("active").is_none(),
        "{}",
        forbidden.body
    );
    let anonymous = h
        .send(
            h.http
                .post(h.url("/o/introspect/"))
                .form(&[("token", token)]),
        )
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let bearer = h
        .send(
            h.http
                .post(h.url("/o/introspect/"))
                .bearer_auth(token)
                .form(&[("token", token)]),
        )
        .await;
    assert_eq!(bearer.status, StatusCode::FORBIDDEN);
    for (who, grant) in [(&client, "password"), (&cc, "client_credentials")] {
        let reply = h
            .oauth(
                "/o/token/",
                pair(who),
                &[
                    ("grant_type", grant),
                    ("username", "alice"),
                    ("password", PASSWORD),
                    ("scope", "introspection"),
                ],
            )
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{grant}");
        assert_eq!(reply.json()["error"], "invalid_scope");
    }
}

/// Refresh: no widening, no other client's refresh token (and the attempt does not burn it),
/// no access token in its place; client_credentials stays within the allowed scopes; a client
/// cannot use a grant it is not registered for.
#[tokio::test]
async fn grants_stay_within_their_client_and_scope() {
    let h = Harness::start(|_| {}).await;
    let (a, _) = h.clients().await;
    let b = testing::application(&h.store, GrantType::Password, false).await;
    let tokens = h.password_tokens(pair(&a), Some("read")).await;
    let refresh = s(&tokens["refresh_token"]);
    let widen = h
        .oauth(
            "/o/token/",
            pair(&a),
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh),
                ("scope", "read write"),
            ],
        )
        .await;
    assert_eq!(widen.json()["error"], "invalid_scope");
    let switched = h.refresh(pair(&b), refresh).await;
    assert_eq!(switched.json()["error"], "invalid_grant");
    let access_as_refresh = h.refresh(pair(&a), s(&tokens["access_token"])).await;
    assert_eq!(access_as_refresh.json()["error"], "invalid_grant");
    let fine = h.refresh(pair(&a), refresh).await;
    assert_eq!(fine.status, StatusCode::OK, "{}", fine.body);
    assert_eq!(fine.json()["scope"], "read");

    let mut limited = input(
        "limited",
        ClientType::Confidential,
        GrantType::ClientCredentials,
    );
    limited.allowed_scopes = vec!["read".into()];
    let (app, secret) = h.app(&limited, None).await;
    let cc = (app.client_id.clone(), secret.unwrap());
    let wide = h
        .oauth(
            "/o/token/",
            pair(&cc),
            &[
                ("grant_type", "client_credentials"),
                ("scope", "read write"),
            ],
        )
        .await;
    assert_eq!(wide.json()["error"], "invalid_scope");
    let default = h
        .oauth(
            "/o/token/",
            pair(&cc),
            &[("grant_type", "client_credentials")],
        )
        .await;
    assert_eq!(default.json()["scope"], "read", "{}", default.body);
    let password = h
        .oauth(
            "/o/token/",
            pair(&cc),
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(password.json()["error"], "unauthorized_client");
}

/// Tokens of a deleted application or a deleted user are dead everywhere.
#[tokio::test]
async fn tokens_of_deleted_applications_and_users_are_dead() {
    let h = Harness::start(|_| {}).await;
    let (_, introspector) = h.clients().await;
    let olivia = h.user("olivia").await;
    let (app, secret) = h
        .app(
            &input("doomed", ClientType::Confidential, GrantType::Password),
            Some(olivia.id),
        )
        .await;
    let doomed = (app.client_id.clone(), secret.unwrap());
    let tokens = h.password_tokens(pair(&doomed), None).await;
    let staff = h.sign_in("olivia", OPERATOR_PASSWORD).await;
    let reply = h
        .browser_post(&staff, &format!("/o/applications/{}/delete/", app.id), &[])
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(
        !h.active(pair(&introspector), s(&tokens["access_token"]))
            .await
    );
    let refreshed = h.refresh(pair(&doomed), s(&tokens["refresh_token"])).await;
    assert_eq!(
        refreshed.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        refreshed.body
    );

    let (client, _) = h.clients().await;
    let tokens = h.password_tokens(pair(&client), None).await;
    let alice = h.user("alice").await;
    let root = h.sign_in("root", OPERATOR_PASSWORD).await;
    let reply = h
        .browser_post(&root, &format!("/admin/users/{}/delete/", alice.id), &[])
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(
        !h.active(pair(&introspector), s(&tokens["access_token"]))
            .await
    );
    let refreshed = h.refresh(pair(&client), s(&tokens["refresh_token"])).await;
    assert_eq!(refreshed.json()["error"], "invalid_grant");
}

/// A peer that is not a trusted proxy cannot pick its address with X-Forwarded-For: five bad
/// passwords from "five addresses" still throttle the sixth attempt.
#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_does_not_reset_the_throttle() {
    let h = Harness::start(|settings| settings.trusted_proxies = Vec::new()).await;
    let (client, _) = h.clients().await;
    let guess = |i: usize| {
        h.http
            .post(h.url("/o/token/"))
            .basic_auth(&client.0, Some(&client.1))
            .header("X-Forwarded-For", format!("198.51.100.{i}"))
            .form(&[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "wrong-guess"),
            ])
    };
    for i in 1..=5 {
        assert_eq!(h.send(guess(i)).await.status, StatusCode::BAD_REQUEST);
    }
    assert_eq!(h.send(guess(6)).await.status, StatusCode::TOO_MANY_REQUESTS);
    // The control: from a trusted peer (loopback, the default) the same header is believed, so
    // the refusal above comes from distrusting the peer, not from one shared "unknown" address.
    let trusting = Harness::start(|_| {}).await;
    let (client, _) = trusting.clients().await;
    let guess = |i: usize| {
        trusting
            .http
            .post(trusting.url("/o/token/"))
            .basic_auth(&client.0, Some(&client.1))
            .header("X-Forwarded-For", format!("198.51.100.{i}"))
            .form(&[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "wrong-guess"),
            ])
    };
    for i in 1..=6 {
        assert_eq!(
            trusting.send(guess(i)).await.status,
            StatusCode::BAD_REQUEST
        );
    }
}

/// No password, token, secret or session id reaches a log line.
#[tokio::test]
async fn no_secret_reaches_a_log_line() {
    support::capture_logs();
    let h = Harness::start(|_| {}).await;
    let (client, introspector) = h.clients().await;
    let tokens = h.password_tokens(pair(&client), None).await;
    let wrong_secret = "Wr0ngSecretThatMustNotBeLogged_0123456789abc";
    let _ = h
        .oauth(
            "/o/token/",
            (client.0.as_str(), wrong_secret),
            &[("grant_type", "client_credentials")],
        )
        .await;
    let _ = h
        .oauth(
            "/o/token/",
            pair(&client),
            &[
                ("grant_type", "password"),
                ("username", "TypedPasswordAsUsername!"),
                ("password", "bad-password-guess"),
            ],
        )
        .await;
    let refreshed = h.refresh(pair(&client), s(&tokens["refresh_token"])).await;
    // A reuse (logged as a warning) of the spent refresh token.
    let _ = h.refresh(pair(&client), s(&tokens["refresh_token"])).await;
    let _ = h
        .oauth(
            "/o/revoke_token/",
            pair(&client),
            &[("token", s(&refreshed.json()["access_token"]))],
        )
        .await;
    let _ = h
        .oauth(
            "/o/introspect/",
            pair(&introspector),
            &[("token", s(&tokens["access_token"]))],
        )
        .await;
    let browser = h.sign_in("root", OPERATOR_PASSWORD).await;
    let _ = h
        .browser_post(
            &browser,
            "/o/applications/register/",
            &[
                ("name", "logged?"),
                ("client_type", "confidential"),
                ("grant_type", "client-credentials"),
            ],
        )
        .await;
    let logged = support::logged();
    assert!(logged.contains("user signed in"), "logs are captured");
    let session = browser.cookie.split_once('=').unwrap().1;
    for secret in [
        PASSWORD,
        OPERATOR_PASSWORD,
        "bad-password-guess",
        "TypedPasswordAsUsername!",
        wrong_secret,
        client.1.as_str(),
        introspector.1.as_str(),
        s(&tokens["access_token"]),
        s(&tokens["refresh_token"]),
        s(&refreshed.json()["access_token"]),
        session,
        browser.csrf.as_str(),
    ] {
        assert!(!logged.contains(secret), "logged: {secret}");
    }
}

/// The authorized-tokens page acts on the signed-in user's grants only: alice withdrawing an
/// application's authorization ends her tokens and leaves bob's (same application) alone.
#[tokio::test]
async fn withdrawing_an_authorization_touches_only_ones_own_tokens() {
    let h = Harness::start(|_| {}).await;
    let (client, introspector) = h.clients().await;
    create(&h.store, "bob", false, false).await;
    let bob = h
        .oauth(
            "/o/token/",
            pair(&client),
            &[
                ("grant_type", "password"),
                ("username", "bob"),
                ("password", PASSWORD),
            ],
        )
        .await
        .json();
    let mine = h.password_tokens(pair(&client), None).await;
    let app = h
        .store
        .find_application_by_client_id(&client.0)
        .await
        .unwrap()
        .unwrap();
    let alice = h.sign_in("alice", PASSWORD).await;
    let reply = h
        .browser_post(
            &alice,
            &format!("/o/authorized-tokens/{}/delete/", app.id),
            &[],
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(
        !h.active(pair(&introspector), s(&mine["access_token"]))
            .await
    );
    assert!(h.active(pair(&introspector), s(&bob["access_token"])).await);
}

/// A superuser who fears their account is known to someone else changes their own password
/// (`/admin/users/<self>/password/`, the only way in the views). Every other session of that
/// account, the intruder's, must end; admin.rs set_password skips the session deletion when the
/// user is the operator, so the intruder stays signed in with full administration rights.
#[tokio::test]
async fn changing_ones_own_password_ends_ones_other_sessions() {
    let h = Harness::start(|_| {}).await;
    let root = h.user("root").await;
    let intruder = h.sign_in("root", OPERATOR_PASSWORD).await;
    let owner = h.sign_in("root", OPERATOR_PASSWORD).await;
    let reply = h.set_password(&owner, root.id, "fresh-root-pass").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    // The session that changed it goes on (this part holds).
    assert_eq!(
        h.browser_get(&owner, "/admin/").await.status,
        StatusCode::OK
    );
    let page = h.browser_get(&intruder, "/admin/").await;
    assert_eq!(
        page.status,
        StatusCode::SEE_OTHER,
        "the other session of the account still opens /admin/ after the password change"
    );
}

/// The last superuser cannot lock the administration out: not by demoting, deactivating or
/// deleting their own account (another superuser's checks keep one standing too).
#[tokio::test]
async fn the_last_superuser_cannot_remove_themselves() {
    let h = Harness::start(|_| {}).await;
    let root_user = h.user("root").await;
    let root = h.sign_in("root", OPERATOR_PASSWORD).await;
    let path = format!("/admin/users/{}/", root_user.id);
    for form in [
        vec![
            ("username", "root"),
            ("is_active", "on"),
            ("is_staff", "on"),
        ],
        vec![
            ("username", "root"),
            ("is_staff", "on"),
            ("is_superuser", "on"),
        ],
        // A repeated field: the first value is the one checked and the one stored.
        vec![
            ("username", "root"),
            ("is_active", "on"),
            ("is_staff", "on"),
            ("is_superuser", ""),
            ("is_superuser", "on"),
        ],
    ] {
        let reply = h.browser_post(&root, &path, &form).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{form:?}");
    }
    let reply = h
        .browser_post(
            &root,
            &format!("/admin/users/{}/delete/", root_user.id),
            &[],
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let now = h.user("root").await;
    assert!(now.is_superuser && now.is_active);
}
