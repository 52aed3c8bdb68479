//! An attacker's review of the authorization code flow (issue 13, commit 0009056) over real HTTP
//! against the real server, on SQLite and (with `DATABASE_URL`) PostgreSQL. The tests whose
//! names start with `finding_` fail on the code as reviewed (see /work/notes/authcode-review.md);
//! the others pin what held: the code-reuse race, the revoke IDOR, session fixation, framing of
//! the consent page, `next` open redirects, and PKCE verifier syntax.

mod support;

use authserver::protocol::pkce;
use authserver::store::{ApplicationInput, ClientType, GrantType};
use authserver::testing;
use reqwest::StatusCode;
use reqwest::header;
use serde_json::Value;
use support::code_flow::*;

/// An "Attack target" application redirecting to `REDIRECT` alone, PKCE required.
fn input(client_type: ClientType, allowed_scopes: &[&str]) -> ApplicationInput {
    ApplicationInput {
        name: format!("Attack target {}", client_type.as_str()),
        client_type,
        grant_type: GrantType::AuthorizationCode,
        redirect_uris: REDIRECT.into(),
        allowed_scopes: allowed_scopes.iter().map(|s| s.to_string()).collect(),
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    }
}

/// A code for `client`, allowing on the consent page when it is shown.
async fn code(f: &Fixture, cookie: &str, client: &Client, scope: &str, challenge: &str) -> String {
    code_of(&f.authorize(cookie, client, scope, Some(challenge)).await)
}

/// RFC 6749 §4.1.2.1: `error_description` is limited to %x20-21 / %x23-5B / %x5D-7E.
fn rfc6749_description_char(c: char) -> bool {
    matches!(c, '\x20'..='\x21' | '\x23'..='\x5B' | '\x5D'..='\x7E')
}

/// FINDING: an unknown scope is copied into `error_description` between double quotes, so an
/// attacker's link makes the authorization server hand the client's error page text of the
/// attacker's choosing (content spoofing with the server's authority), and the description
/// breaks RFC 6749's character set (`"`, and whatever the attacker sends).
#[tokio::test]
async fn finding_error_description_reflects_attacker_text() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.register(&input(ClientType::Public, &["*"])).await;
        let (_, challenge) = pkce_pair();
        let bait = "Your-account-is-locked.Call+1-555-0100\\é";
        let path = Fixture::request(&client, bait, "st", Some(&challenge));
        let answer = f.get(&path, None).await.redirected_to(REDIRECT);
        assert_eq!(answer["error"], "invalid_scope");
        let description = &answer["error_description"];
        assert!(
            !description.contains("Call+1-555"),
            "{backend:?}: the attacker's text is reflected: {description:?}"
        );
        assert!(
            description.chars().all(rfc6749_description_char),
            "{backend:?}: error_description outside RFC 6749's set: {description:?}"
        );
    }
}

/// FINDING: the code's scope is issued as it was at authorization time. An operator who
/// withdraws a scope from the application (a compromised client, a scope removed) still sees
/// it granted by every code issued before, while a refresh of the same grant drops it: the
/// exchange must narrow to what the application may have now (fail closed).
#[tokio::test]
async fn finding_a_code_exchange_grants_a_scope_the_application_lost() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.register(&input(ClientType::Public, &["*"])).await;
        let cookie = f.sign_in("alice", PASSWORD, "").await.0;
        let (verifier, challenge) = pkce_pair();
        let code = code(&f, &cookie, &client, "read write", &challenge).await;
        // The operator withdraws `write` from the application.
        f.store
            .update_application(client.app_id, &input(ClientType::Public, &["read"]))
            .await
            .unwrap()
            .unwrap();
        let reply = f.exchange(&client, &code, Some(&verifier)).await;
        if reply.status == StatusCode::OK {
            let scope = reply.json()["scope"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                !scope.split(' ').any(|s| s == "write"),
                "{backend:?}: the token got a scope the application no longer has: {scope}"
            );
        } else {
            assert_eq!(reply.json()["error"], "invalid_grant", "{}", reply.body);
        }
    }
}

/// FINDING (PostgreSQL): a NUL byte in `client_id` or `username` (a client's or an attacker's
/// mistake) reaches PostgreSQL, which refuses it: the authorization endpoint, the token
/// endpoint and the sign-in form answer 500 (and log an error) instead of 400. SQLite is fine.
#[tokio::test]
async fn finding_a_nul_byte_is_a_client_error_not_a_500() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let mut failures = Vec::new();
        let path = format!(
            "/o/authorize/?response_type=code&client_id=a%00b&redirect_uri={}",
            form_urlencoded::byte_serialize(REDIRECT.as_bytes()).collect::<String>()
        );
        let reply = f.get(&path, None).await;
        if reply.status != StatusCode::BAD_REQUEST || reply.headers.contains_key(header::LOCATION) {
            failures.push(format!("GET /o/authorize/: {}", reply.status));
        }
        // The token endpoint and the sign-in form, the same mistake: 4xx, never 500.
        let token = f
            .send(
                f.http
                    .post(f.url("/o/token/"))
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body("grant_type=authorization_code&code=x&redirect_uri=y&client_id=a%00b"),
                None,
            )
            .await;
        if !token.status.is_client_error() {
            failures.push(format!("POST /o/token/: {}", token.status));
        }
        let login = f.sign_in_reply("al\0ice", PASSWORD, "", None).await;
        if !login.status.is_client_error() {
            failures.push(format!("POST /accounts/login/: {}", login.status));
        }
        assert!(failures.is_empty(), "{backend:?}: {failures:?}");
    }
}

/// FINDING (RFC 8252 §8.6, RFC 6749 §10.2): a remembered consent is replayed without any
/// interaction for a public client whose redirect URI is a loopback address. Any local
/// process that binds that port while the real app is not listening can send the user's
/// browser to `/o/authorize/` with its own PKCE challenge and silently receive a code it can
/// exchange (public client: `client_id` alone), i.e. tokens for the user. For such clients the
/// consent page must be shown every time.
#[tokio::test]
async fn finding_remembered_consent_is_replayed_silently_to_a_loopback_public_client() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let loopback = "http://127.0.0.1:9876/cb";
        let app = f
            .register(&ApplicationInput {
                redirect_uris: loopback.into(),
                ..input(ClientType::Public, &["*"])
            })
            .await;
        let cookie = f.sign_in("alice", PASSWORD, "").await.0;
        let request =
            |challenge: &str| Fixture::request_to(&app.id, loopback, "read", "st", Some(challenge));
        // The real app: the user consents once.
        let (_, challenge) = pkce_pair();
        let page = f.get(&request(&challenge), Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let allowed = f.decide(&cookie, &page, "allow").await;
        assert!(allowed.location().starts_with(loopback));
        // The impersonator, with a challenge of its own, later.
        let (_, impostor) = pkce_pair();
        let reply = f.get(&request(&impostor), Some(&cookie)).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{backend:?}: a code went to the loopback port without the user: {}",
            reply.location()
        );
    }
}

/// Held: of concurrent exchanges of one code at most one succeeds, the others are
/// invalid_grant (never 500), and a success's tokens do not outlive the reuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_exchanges_of_one_code_let_at_most_one_win() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.register(&input(ClientType::Confidential, &["*"])).await;
        let cookie = f.sign_in("alice", PASSWORD, "").await.0;
        for round in 0..5 {
            let (verifier, challenge) = pkce_pair();
            let code = code(&f, &cookie, &client, "read", &challenge).await;
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(6));
            let racers: Vec<_> = (0..6)
                .map(|_| {
                    let request =
                        f.exchange_request(&client, &code, Some(REDIRECT), Some(&verifier));
                    let start = start.clone();
                    tokio::spawn(async move {
                        start.wait().await;
                        let response = request.send().await.unwrap();
                        let status = response.status();
                        (status, response.text().await.unwrap())
                    })
                })
                .collect();
            let mut replies = Vec::new();
            for racer in racers {
                replies.push(racer.await.unwrap());
            }
            let wins: Vec<&String> = replies
                .iter()
                .filter(|(status, _)| *status == StatusCode::OK)
                .map(|(_, body)| body)
                .collect();
            assert!(
                wins.len() <= 1,
                "{backend:?} round {round}: {} won",
                wins.len()
            );
            for (status, body) in replies.iter().filter(|(s, _)| *s != StatusCode::OK) {
                assert_eq!(*status, StatusCode::BAD_REQUEST, "{backend:?}: {body}");
                assert!(body.contains("\"invalid_grant\""), "{body}");
            }
            // Every loser is a reuse: the winner's tokens are revoked.
            if let Some(win) = wins.first() {
                let tokens: Value = serde_json::from_str(win).unwrap();
                for kind in ["access_token", "refresh_token"] {
                    let token = tokens[kind].as_str().unwrap();
                    assert!(!f.active(token).await, "{backend:?}: {kind} outlived reuse");
                }
            }
        }
    }
}

/// Held: Bob posting the revoke form for the application Alice authorized (his own CSRF
/// token, her application's id) changes nothing of hers.
#[tokio::test]
async fn revoking_another_users_authorization_changes_nothing() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.register(&input(ClientType::Public, &["*"])).await;
        let alice = f.sign_in("alice", PASSWORD, "").await.0;
        let (verifier, challenge) = pkce_pair();
        let code = code(&f, &alice, &client, "read", &challenge).await;
        let tokens = f.exchange(&client, &code, Some(&verifier)).await.json();
        testing::user(&f.store, "bob", "builder-pass").await;
        let bob = f.sign_in("bob", "builder-pass", "").await.0;
        let page = f.get("/o/authorized-tokens/", Some(&bob)).await;
        assert!(!page.body.contains(&client.id));
        let csrf = csrf_token(&page.body);
        let reply = f
            .post(
                &format!("/o/authorized-tokens/{}/delete/", client.app_id),
                Some(&bob),
                &[("csrfmiddlewaretoken".into(), csrf)],
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        assert!(f.active(tokens["access_token"].as_str().unwrap()).await);
        assert!(f.active(tokens["refresh_token"].as_str().unwrap()).await);
        let list = f.get("/o/authorized-tokens/", Some(&alice)).await;
        assert!(list.body.contains(&client.id));
    }
}

/// Held: a session id planted before sign-in (fixation) is never the one signed in; the
/// cookie set is fresh, and the planted value is no session.
#[tokio::test]
async fn sign_in_never_adopts_a_planted_session_id() {
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let planted = "tokengate_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let reply = f.sign_in_reply("alice", PASSWORD, "", Some(planted)).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let fresh = set_cookie(&reply.headers, "tokengate_session").unwrap();
    assert_ne!(fresh, planted);
    let as_planted = f.get("/o/authorized-tokens/", Some(planted)).await;
    assert_eq!(as_planted.status, StatusCode::SEE_OTHER);
    assert!(as_planted.location().starts_with("/accounts/login/"));
    // The session signed in before is ended by the next sign-in of this browser.
    let again = f.sign_in_reply("alice", PASSWORD, "", Some(&fresh)).await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);
    let old = f.get("/o/authorized-tokens/", Some(&fresh)).await;
    assert_eq!(old.status, StatusCode::SEE_OTHER);
}

/// Held: the consent page cannot be framed (clickjacking), and its `form-action` adds only the
/// client's origin.
#[tokio::test]
async fn the_consent_page_cannot_be_framed() {
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let client = f.register(&input(ClientType::Public, &["*"])).await;
    let cookie = f.sign_in("alice", PASSWORD, "").await.0;
    let (_, challenge) = pkce_pair();
    let page = f
        .ask(&client, "read", "st", Some(&challenge), Some(&cookie))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.headers[header::X_FRAME_OPTIONS], "DENY");
    let csp = assert_form_action_allows_the_client(&page);
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers[header::CACHE_CONTROL], "no-store");
}

/// Held: whatever `next` an attacker puts in a sign-in link, the sign-in lands on this site.
#[tokio::test]
async fn sign_in_next_never_leaves_the_site() {
    let f = Fixture::start(testing::store().await, |_| {}).await;
    for next in [
        "//evil.example/",
        "/\\evil.example",
        "\\\\evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "/\t/evil.example",
        "/\r\nLocation: https://evil.example",
        " //evil.example",
        "/%2F%2Fevil.example",
        "/\u{3000}/evil.example",
        "http:/evil.example",
        "data:text/html,x",
    ] {
        let reply = f.sign_in_reply("alice", PASSWORD, next, None).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{next:?}");
        let location = reply.location();
        assert!(
            location.starts_with('/')
                && !location.starts_with("//")
                && !location.contains('\\')
                && !location.contains(['\r', '\n', '\t']),
            "{next:?} -> {location:?}"
        );
        let resolved = reqwest::Url::parse("https://as.example/x/")
            .unwrap()
            .join(location)
            .unwrap();
        assert_eq!(resolved.host_str(), Some("as.example"), "{next:?}");
    }
}

/// Held: a verifier outside RFC 7636's syntax is refused even when it hashes to the challenge
/// (too short, a character outside the unreserved set), and the code is spent.
#[tokio::test]
async fn verifiers_outside_the_rfc_7636_syntax_are_refused() {
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let client = f.register(&input(ClientType::Public, &["*"])).await;
    let cookie = f.sign_in("alice", PASSWORD, "").await.0;
    for verifier in [
        "short-but-hashed".to_owned(),
        format!("{}+/", "a".repeat(41)),
        "a".repeat(129),
    ] {
        let challenge = pkce::s256(&verifier);
        let code = code(&f, &cookie, &client, "read", &challenge).await;
        let reply = f.exchange(&client, &code, Some(&verifier)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{verifier}");
        assert_eq!(reply.json()["error"], "invalid_grant");
    }
}
