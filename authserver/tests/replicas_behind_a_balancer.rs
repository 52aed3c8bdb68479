//! Two authserver replicas (real `authserver serve` processes) on one PostgreSQL behind a
//! round-robin front without sticky sessions, every request going to the other replica than
//! the one before (issue 27, item 9): signing in, registering an application and seeing its
//! secret, regenerating it and seeing the new one, the administration's notices, consent and
//! a revocation's notice all work, each page reached by a redirect being answered by the other
//! replica than the POST that led there. Over plain HTTP, and in Chromium
//! (`tests/browser/views.mjs`, `authorize.mjs`).
//!
//! Needs `DATABASE_URL` naming a PostgreSQL server (a skip notice without it); the browser test
//! needs what `support::browser` says.

mod support;

use authserver::secrets::digest;
use authserver::store::{ApplicationInput, ClientType, GrantType, Store};
use authserver::testing;
use base64::Engine;
use reqwest::StatusCode;
use reqwest::header;
use support::browser::{browser_available, run_scenario, run_script};
use support::code_flow::{Reply, code_of, csrf_token, hidden_fields, pkce_pair, set_cookie};
use support::front::{Balancer, ReplicaProcess, assert_alternation};

const REDIRECT: &str = "https://client.example/callback";

/// The PostgreSQL URL of a fresh schema, or `None` with a skip notice (as every PostgreSQL
/// test: `.ci/run` sets `DATABASE_URL` when a server answers).
async fn postgres(test: &str) -> Option<String> {
    let url = testing::postgres_schema_url().await;
    if url.is_none() {
        eprintln!("SKIPPED {test}: needs DATABASE_URL naming a PostgreSQL server");
    }
    url
}

/// The front, and the two replicas it alternates over.
async fn replicated(database_url: &str) -> (Balancer, [ReplicaProcess; 2]) {
    let mut front = Balancer::bind().await;
    let a = ReplicaProcess::start(database_url, &front.base_url).await;
    let b = ReplicaProcess::start(database_url, &front.base_url).await;
    front.start(&[&a, &b]);
    (front, [a, b])
}

/// An authorization-code application (confidential, PKCE, `read write`) named `name`,
/// redirecting to `redirect_uri`: its client id and secret.
async fn consenting_client(store: &Store, name: &str, redirect_uri: &str) -> (String, String) {
    let input = ApplicationInput {
        name: name.into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: redirect_uri.into(),
        allowed_scopes: vec!["read".into(), "write".into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    };
    let (app, secret) = store
        .create_application(&input, None, None, None)
        .await
        .unwrap();
    (app.client_id, secret.unwrap())
}

/// A browser without JavaScript: its cookies, sent through the front.
struct Visitor {
    base: String,
    http: reqwest::Client,
    cookies: Vec<String>,
    /// The CSRF token of the signed-in session's forms.
    form_token: String,
}

impl Visitor {
    fn new(base: &str) -> Visitor {
        Visitor {
            base: base.to_owned(),
            http: support::browser_client(),
            cookies: Vec::new(),
            form_token: String::new(),
        }
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> Reply {
        let request = if self.cookies.is_empty() {
            request
        } else {
            request.header(header::COOKIE, self.cookies.join("; "))
        };
        let response = request.send().await.unwrap();
        let reply = Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        };
        for name in ["tokengate_csrf", "tokengate_session"] {
            if let Some(cookie) = set_cookie(&reply.headers, name) {
                self.cookies.retain(|c| !c.starts_with(&format!("{name}=")));
                self.cookies.push(cookie);
            }
        }
        reply
    }

    async fn get(&mut self, path: &str) -> Reply {
        let request = self.http.get(format!("{}{path}", self.base));
        self.send(request).await
    }

    /// Posts `fields` with the session's CSRF token.
    async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Reply {
        let mut form = vec![("csrf_token", self.form_token.as_str())];
        form.extend_from_slice(fields);
        let request = self.http.post(format!("{}{path}", self.base)).form(&form);
        self.send(request).await
    }

    /// Posts `fields` and follows the `303 See Other` to the page carrying its message.
    async fn post_and_follow(&mut self, path: &str, fields: &[(&str, &str)]) -> (String, Reply) {
        let reply = self.post(path, fields).await;
        assert_eq!(
            reply.status,
            StatusCode::SEE_OTHER,
            "{path}: {}",
            reply.body
        );
        let location = reply.location().to_owned();
        assert!(location.contains("?flash="), "{location}");
        let page = self.get(&location).await;
        assert_eq!(page.status, StatusCode::OK, "{location}");
        (location, page)
    }

    async fn sign_in(&mut self, username: &str, password: &str) {
        let page = self.get("/accounts/login/").await;
        self.form_token = csrf_token(&page.body);
        let reply = self
            .post(
                "/accounts/login/",
                &[("username", username), ("password", password)],
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert!(
            self.cookies
                .iter()
                .any(|c| c.starts_with("tokengate_session="))
        );
        let page = self.get(reply.location()).await;
        assert_eq!(page.status, StatusCode::OK);
        self.form_token = csrf_token(&page.body);
    }

    /// `POST /o/token/` with HTTP Basic: the status and the JSON body.
    async fn token(&mut self, client: (&str, &str), form: &[(&str, &str)]) -> Reply {
        let request = self
            .http
            .post(format!("{}/o/token/", self.base))
            .basic_auth(client.0, Some(client.1))
            .form(form);
        self.send(request).await
    }
}

/// The value of the read-only input `id` of a page, if shown.
fn shown(body: &str, id: &str) -> Option<String> {
    let marker = format!("id=\"{id}\" class=\"mono\" value=\"");
    let start = body.find(&marker)? + marker.len();
    Some(body[start..start + body[start..].find('"')?].to_owned())
}

/// The sealed message the store holds for the id in `location`, by its digest; asserts the id
/// itself is nowhere in the table.
async fn stored_message(store: &Store, location: &str) -> Option<String> {
    let id = location.split("?flash=").nth(1).unwrap();
    let by_id: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM flash_messages WHERE id_digest = $1")
        .bind(id)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(by_id, 0, "the id is kept only as its digest");
    sqlx::query_scalar("SELECT sealed FROM flash_messages WHERE id_digest = $1")
        .bind(digest(id))
        .fetch_optional(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_every_view_works_with_each_request_on_the_other_replica() {
    let test = "over_http_every_view_works_with_each_request_on_the_other_replica";
    let Some(database_url) = postgres(test).await else {
        return;
    };
    let store = testing::connect(&database_url).await;
    support::staff(&store, "root", "root-password", true).await;
    testing::user(&store, "alice", "wonderland").await;
    let consenting = consenting_client(&store, "Photo printer", REDIRECT).await;
    let (front, replicas) = replicated(&database_url).await;

    let mut root = Visitor::new(&front.base_url);
    root.sign_in("root", "root-password").await;

    // Registering: the POST leaves the secret on one replica's database row, sealed; the page
    // it redirects to, on the other replica, shows it; the row is gone after.
    let register = [
        ("name", "Reporting job"),
        ("client_type", "confidential"),
        ("grant_type", "client-credentials"),
        ("scope", "read"),
    ];
    let reply = root.post("/o/applications/register/", &register).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let location = reply.location().to_owned();
    let sealed = stored_message(&store, &location)
        .await
        .expect("the message is in the database");
    let page = root.get(&location).await;
    let client_id = shown(&page.body, "client-id").expect("the client id");
    let secret = shown(&page.body, "client-secret").expect("the secret, on the other replica");
    let opened = base64::engine::general_purpose::STANDARD
        .decode(&sealed)
        .unwrap();
    assert!(
        !sealed.contains(&secret) && !String::from_utf8_lossy(&opened).contains(&secret),
        "the database holds the secret sealed"
    );
    assert_eq!(stored_message(&store, &location).await, None, "taken");
    let again = root.get(&location).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(shown(&again.body, "client-secret"), None, "shown once");
    let credentials = [("grant_type", "client_credentials")];
    let granted = root.token((&client_id, &secret), &credentials).await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);

    // Regenerating: the new secret is shown through the other replica; the old one is dead.
    let app_path = location.split('?').next().unwrap().to_owned();
    let (_, page) = root
        .post_and_follow(&format!("{app_path}regenerate-secret/"), &[])
        .await;
    let regenerated = shown(&page.body, "client-secret").expect("the new secret");
    assert_ne!(regenerated, secret);
    let old = root.token((&client_id, &secret), &credentials).await;
    assert_eq!(old.status, StatusCode::UNAUTHORIZED, "{}", old.body);
    let new = root.token((&client_id, &regenerated), &credentials).await;
    assert_eq!(new.status, StatusCode::OK, "{}", new.body);
    // With a grace chosen in the form, the replaced secret keeps working; a grace the form does
    // not offer in a form the server cannot read is a bad request, and changes nothing.
    let (_, page) = root
        .post_and_follow(&format!("{app_path}regenerate-secret/"), &[("grace", "1h")])
        .await;
    let graced = shown(&page.body, "client-secret").expect("the newest secret");
    assert!(page.body.contains("keeps working for 3600 more seconds"));
    for secret in [&graced, &regenerated] {
        let granted = root.token((&client_id, secret), &credentials).await;
        assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    }
    for bad in ["soon", "-1h", "99999999999d", ""] {
        let reply = root
            .post(&format!("{app_path}regenerate-secret/"), &[("grace", bad)])
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad:?}");
    }
    let kept = root.token((&client_id, &graced), &credentials).await;
    assert_eq!(kept.status, StatusCode::OK, "{}", kept.body);

    // The administration's notices.
    let (_, page) = root
        .post_and_follow(
            "/admin/users/add/",
            &[
                ("username", "carol"),
                ("password1", "carol-password"),
                ("password2", "carol-password"),
                ("is_active", "on"),
            ],
        )
        .await;
    assert!(page.body.contains("User created."), "{}", page.body);
    let (_, page) = root
        .post_and_follow("/admin/groups/", &[("name", "readers")])
        .await;
    assert!(page.body.contains("Group created."), "{}", page.body);

    // An ordinary user signs in, consents and revokes, each step on the other replica.
    let mut alice = Visitor::new(&front.base_url);
    alice.sign_in("alice", "wonderland").await;
    let (verifier, challenge) = pkce_pair();
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("response_type", "code")
        .append_pair("client_id", &consenting.0)
        .append_pair("redirect_uri", REDIRECT)
        .append_pair("scope", "read")
        .append_pair("state", "st")
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256")
        .finish();
    let consent = alice.get(&format!("/o/authorize/?{query}")).await;
    assert_eq!(consent.status, StatusCode::OK, "{}", consent.body);
    let mut fields = hidden_fields(&consent.body, "consent");
    fields.push(("decision".into(), "allow".into()));
    let request = alice
        .http
        .post(format!("{}/o/authorize/", alice.base))
        .form(&fields);
    let allowed = alice.send(request).await;
    let code = code_of(&allowed.redirected_to(REDIRECT));
    let exchanged = alice
        .token(
            (&consenting.0, &consenting.1),
            &[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", REDIRECT),
                ("code_verifier", &verifier),
            ],
        )
        .await;
    assert_eq!(exchanged.status, StatusCode::OK, "{}", exchanged.body);
    let app_id = store
        .find_application_by_client_id(&consenting.0)
        .await
        .unwrap()
        .unwrap()
        .id;
    let (_, page) = alice
        .post_and_follow(&format!("/o/authorized-tokens/{app_id}/delete/"), &[])
        .await;
    assert!(page.body.contains("Access revoked"), "{}", page.body);

    let forwarded = front.forwarded();
    let [a, b] = &replicas;
    assert_eq!(assert_alternation(&forwarded, &[a, b]), 6, "{forwarded:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_every_view_works_with_each_request_on_the_other_replica() {
    let test = "in_chromium_every_view_works_with_each_request_on_the_other_replica";
    if !browser_available(test) {
        return;
    }
    let Some(database_url) = postgres(test).await else {
        return;
    };
    let store = testing::connect(&database_url).await;
    support::staff(&store, "root", "root-password", true).await;
    testing::user(&store, "alice", "wonderland").await;
    let (password_client, password_secret) =
        testing::application(&store, GrantType::Password, false).await;
    let client_port = test_support::free_port();
    let redirect_uri = format!("http://127.0.0.1:{client_port}/callback");
    let consenting = consenting_client(&store, "Browser client", &redirect_uri).await;
    let (front, replicas) = replicated(&database_url).await;
    let base = front.base_url.clone();

    // Register (secret shown), update, regenerate (new secret shown), delete, as an operator.
    let operator = [
        ("OPERATOR", "root".to_owned()),
        ("OPERATOR_PASSWORD", "root-password".to_owned()),
        ("RESOURCE_OWNER", "alice".to_owned()),
        ("RESOURCE_OWNER_PASSWORD", "wonderland".to_owned()),
    ];
    run_scenario("applications", base.clone(), operator.to_vec()).await;
    // The administration: a user and a group created, their notices shown.
    let superuser = [
        ("SUPERUSER", "root".to_owned()),
        ("SUPERUSER_PASSWORD", "root-password".to_owned()),
        ("CLIENT_ID", password_client),
        ("CLIENT_SECRET", password_secret),
    ];
    run_scenario("admin", base.clone(), superuser.to_vec()).await;
    // An ordinary user signs in, denies, consents, is not asked again, and revokes.
    let summary = run_script(
        vec!["authorize.mjs"],
        base.clone(),
        vec![
            ("ISSUER", base.clone()),
            ("CLIENT_ID", consenting.0),
            ("CLIENT_SECRET", consenting.1),
            ("APP_NAME", "Browser client".into()),
            ("CLIENT_PORT", client_port.to_string()),
            ("REDIRECT_URI", redirect_uri),
            ("RESOURCE_OWNER", "alice".into()),
            ("RESOURCE_OWNER_PASSWORD", "wonderland".into()),
        ],
    )
    .await;
    assert_eq!(
        summary["tokens"].as_array().map(Vec::len),
        Some(3),
        "{summary}"
    );

    let forwarded = front.forwarded();
    let [a, b] = &replicas;
    // Registered, saved, regenerated; user and group created; access revoked.
    assert_eq!(assert_alternation(&forwarded, &[a, b]), 6, "{forwarded:#?}");
}
