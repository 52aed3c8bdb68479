//! Passkeys over real HTTP (issue 41 item 2), with a software authenticator written here (a
//! P-256 key of `ring`, authenticator data and attestation objects built by hand, as WebAuthn
//! L2 §6 lays them out): registration from the two-factor page, the sign-in's factor step,
//! the sign-in without password, and the callers who must be refused: another user's passkey,
//! a replayed answer, a counter that went back, a request without session or CSRF token.

mod support;

use authserver::testing;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::StatusCode;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::Value;
use sha2::{Digest, Sha256};
use support::code_flow::{Fixture, PASSWORD, Reply, csrf_token, set_cookie};

/// The relying party of `Settings::for_tests`' issuer, `http://127.0.0.1:8000`.
const RP_ID: &str = "127.0.0.1";
const ORIGIN: &str = "http://127.0.0.1:8000";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A software authenticator with one credential: a P-256 key and its id.
struct SoftKey {
    pair: EcdsaKeyPair,
    id: Vec<u8>,
    count: u32,
}

impl SoftKey {
    fn new(id: &[u8]) -> SoftKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        SoftKey {
            pair,
            id: id.to_vec(),
            count: 0,
        }
    }

    /// The COSE_Key (RFC 9053 EC2, P-256, ES256).
    fn cose(&self) -> Vec<u8> {
        let point = self.pair.public_key().as_ref();
        let mut key = vec![0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20];
        key.extend_from_slice(&point[1..33]);
        key.extend_from_slice(&[0x22, 0x58, 0x20]);
        key.extend_from_slice(&point[33..65]);
        key
    }

    fn auth_data(&self, flags: u8, count: u32, attested: bool) -> Vec<u8> {
        let mut data = Sha256::digest(RP_ID.as_bytes()).to_vec();
        data.push(flags | if attested { 0x40 } else { 0 });
        data.extend_from_slice(&count.to_be_bytes());
        if attested {
            data.extend_from_slice(&[0u8; 16]);
            data.extend_from_slice(&(self.id.len() as u16).to_be_bytes());
            data.extend_from_slice(&self.id);
            data.extend_from_slice(&self.cose());
        }
        data
    }

    /// The form fields of a registration answering `challenge`.
    fn registration(&self, challenge: &str, name: &str) -> Vec<(String, String)> {
        let client = client_json("webauthn.create", challenge);
        let data = self.auth_data(0x05, self.count, true);
        let mut object = vec![0xa3, 0x63];
        object.extend_from_slice(b"fmt");
        object.extend_from_slice(&[0x64, b'n', b'o', b'n', b'e', 0x67]);
        object.extend_from_slice(b"attStmt");
        object.extend_from_slice(&[0xa0, 0x68]);
        object.extend_from_slice(b"authData");
        object.push(0x59);
        object.extend_from_slice(&(data.len() as u16).to_be_bytes());
        object.extend_from_slice(&data);
        fields(&[
            ("action", "add"),
            ("name", name),
            ("credential_id", &b64(&self.id)),
            ("client_data", &b64(&client)),
            ("attestation_object", &b64(&object)),
        ])
    }

    /// The form fields of an assertion answering `challenge` (flags 0x01 present, 0x04
    /// verified), with the next counter value.
    fn assertion(
        &mut self,
        challenge: &str,
        flags: u8,
        user_handle: &[u8],
    ) -> Vec<(String, String)> {
        self.count += 1;
        let client = client_json("webauthn.get", challenge);
        let data = self.auth_data(flags, self.count, false);
        let mut signed = data.clone();
        signed.extend_from_slice(&Sha256::digest(&client));
        let signature = self.pair.sign(&SystemRandom::new(), &signed).unwrap();
        fields(&[
            ("credential_id", &b64(&self.id)),
            ("client_data", &b64(&client)),
            ("authenticator_data", &b64(&data)),
            ("signature", &b64(signature.as_ref())),
            ("user_handle", &b64(user_handle)),
        ])
    }
}

fn client_json(kind: &str, challenge: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"{kind}","challenge":"{challenge}","origin":"{ORIGIN}","crossOrigin":false}}"#
    )
    .into_bytes()
}

fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn with(mut form: Vec<(String, String)>, more: &[(&str, &str)]) -> Vec<(String, String)> {
    form.extend(fields(more));
    form
}

/// The user handle the server gives user `id`'s credentials.
fn handle(id: i64) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

/// Registers `key` for the user of `session` (a `tokengate_session=…` cookie): the reply to
/// the registration's post, and the options the server gave.
async fn register(fx: &Fixture, session: &str, key: &SoftKey, name: &str) -> (Reply, Value) {
    let page = fx.get("/accounts/two-factor/", Some(session)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let token = csrf_token(&page.body);
    let options = fx
        .post(
            "/accounts/two-factor/passkeys/options/",
            Some(session),
            &fields(&[("csrf_token", &token)]),
        )
        .await;
    assert_eq!(options.status, StatusCode::OK, "{}", options.body);
    let options = options.json();
    let challenge = options["challenge"].as_str().unwrap();
    let form = with(key.registration(challenge, name), &[("csrf_token", &token)]);
    let reply = fx
        .post("/accounts/two-factor/passkeys/", Some(session), &form)
        .await;
    (reply, options)
}

/// A sign-in page's cookies and CSRF token: the pre-session cookie, and a pending sign-in's
/// cookie after a right password when `password` is given.
struct SignIn {
    cookies: String,
    token: String,
}

async fn start_sign_in(fx: &Fixture, password_of: Option<&str>) -> SignIn {
    let page = fx.get("/accounts/login/", None).await;
    let csrf_cookie = set_cookie(&page.headers, "tokengate_csrf").unwrap();
    let token = csrf_token(&page.body);
    let mut cookies = csrf_cookie;
    if let Some(username) = password_of {
        let form = fields(&[
            ("csrf_token", &token),
            ("username", username),
            ("password", PASSWORD),
            ("next", ""),
        ]);
        let reply = fx.post("/accounts/login/", Some(&cookies), &form).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert!(reply.location().starts_with("/accounts/login/code/"));
        let pending = set_cookie(&reply.headers, "tokengate_pending").unwrap();
        cookies = format!("{cookies}; {pending}");
    }
    SignIn { cookies, token }
}

impl SignIn {
    async fn options(&self, fx: &Fixture, mode: &str) -> Reply {
        let form = fields(&[("csrf_token", &self.token), ("mode", mode)]);
        fx.post(
            "/accounts/login/passkey/options/",
            Some(&self.cookies),
            &form,
        )
        .await
    }

    async fn challenge(&self, fx: &Fixture, mode: &str) -> String {
        let reply = self.options(fx, mode).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply.json()["challenge"].as_str().unwrap().to_owned()
    }

    async fn finish(&self, fx: &Fixture, mode: &str, answer: &[(String, String)]) -> Reply {
        let form = with(
            answer.to_vec(),
            &[("csrf_token", &self.token), ("mode", mode)],
        );
        fx.post("/accounts/login/passkey/", Some(&self.cookies), &form)
            .await
    }
}

/// The methods the session of a sign-in's reply was signed in with.
async fn amr_of(fx: &Fixture, reply: &Reply) -> String {
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let cookie = set_cookie(&reply.headers, "tokengate_session").expect("a session");
    let id = cookie.split_once('=').unwrap().1;
    fx.store.find_session(id).await.unwrap().unwrap().amr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passkey_is_registered_then_signs_in_after_the_password_and_without_it() {
    let fx = Fixture::start(testing::store().await, |_| {}).await;
    let alice = fx
        .store
        .find_user_by_username("alice")
        .await
        .unwrap()
        .unwrap();
    let session = fx.alice().await;
    let mut key = SoftKey::new(b"alice-key-1");
    let (reply, options) = register(&fx, &session, &key, "Alice's laptop").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    // The options: this relying party, attestation none, a discoverable credential.
    assert_eq!(options["rp"]["id"], RP_ID);
    assert_eq!(options["attestation"], "none");
    assert_eq!(options["authenticatorSelection"]["residentKey"], "required");
    assert_eq!(options["user"]["id"], b64(&handle(alice.id)));
    let page = fx.get("/accounts/two-factor/", Some(&session)).await;
    assert!(page.body.contains("Alice&#39;s laptop") || page.body.contains("Alice's laptop"));
    assert!(fx.store.has_second_factor(alice.id).await.unwrap());
    // The same registration again: its challenge is spent.
    let replayed = fx
        .post(
            "/accounts/two-factor/passkeys/",
            Some(&session),
            &with(
                key.registration(options["challenge"].as_str().unwrap(), "again"),
                &[("csrf_token", &csrf_token(&page.body))],
            ),
        )
        .await;
    assert_eq!(replayed.status, StatusCode::BAD_REQUEST);
    assert!(replayed.body.contains("used already"), "{}", replayed.body);

    // Password, then the passkey: the factor step offers it, allowing only alice's.
    let sign_in = start_sign_in(&fx, Some("alice")).await;
    let code_page = fx
        .get("/accounts/login/code/", Some(&sign_in.cookies))
        .await;
    assert!(code_page.body.contains("id=\"passkey-form\""));
    assert!(
        !code_page.body.contains("id=\"code-form\""),
        "no TOTP, no recovery codes"
    );
    let options = sign_in.options(&fx, "second-factor").await.json();
    assert_eq!(
        options["allowCredentials"],
        serde_json::json!([{"type": "public-key", "id": b64(&key.id)}])
    );
    let challenge = options["challenge"].as_str().unwrap();
    let answer = key.assertion(challenge, 0x01, b"");
    let reply = sign_in.finish(&fx, "second-factor", &answer).await;
    assert_eq!(amr_of(&fx, &reply).await, "pwd swk mfa");
    assert_eq!(reply.location(), "/o/authorized-tokens/");

    // Without password: a verified user, named by the user handle.
    let sign_in = start_sign_in(&fx, None).await;
    let options = sign_in.options(&fx, "passwordless").await.json();
    assert_eq!(options["userVerification"], "required");
    assert_eq!(options["allowCredentials"], serde_json::json!([]));
    let challenge = options["challenge"].as_str().unwrap();
    let answer = key.assertion(challenge, 0x05, &handle(alice.id));
    let reply = sign_in.finish(&fx, "passwordless", &answer).await;
    assert_eq!(amr_of(&fx, &reply).await, "swk user mfa");
    // The same answer again: the challenge is spent.
    let replayed = sign_in.finish(&fx, "passwordless", &answer).await;
    assert_eq!(replayed.status, StatusCode::BAD_REQUEST);
    assert!(replayed.body.contains("used already"), "{}", replayed.body);
    assert!(set_cookie(&replayed.headers, "tokengate_session").is_none());

    // Present but not verified: no sign-in without password.
    let challenge = sign_in.challenge(&fx, "passwordless").await;
    let answer = key.assertion(&challenge, 0x01, &handle(alice.id));
    let refused = sign_in.finish(&fx, "passwordless", &answer).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("did not verify you"),
        "{}",
        refused.body
    );

    // A counter that went back (a copied authenticator): refused.
    let challenge = sign_in.challenge(&fx, "passwordless").await;
    key.count = 1;
    let answer = key.assertion(&challenge, 0x05, &handle(alice.id));
    let refused = sign_in.finish(&fx, "passwordless", &answer).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("counter went back"),
        "{}",
        refused.body
    );
    assert!(set_cookie(&refused.headers, "tokengate_session").is_none());
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passkey_of_one_user_cannot_finish_another_users_sign_in() {
    let fx = Fixture::start(testing::store().await, |_| {}).await;
    let bob = testing::user(&fx.store, "bob", PASSWORD).await;
    let alice = fx
        .store
        .find_user_by_username("alice")
        .await
        .unwrap()
        .unwrap();
    let mut alice_key = SoftKey::new(b"alice-key");
    let mut bob_key = SoftKey::new(b"bob-key");
    let (reply, _) = register(&fx, &fx.alice().await, &alice_key, "alice").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let bob_session = fx.sign_in("bob", PASSWORD, "").await.0;
    let (reply, _) = register(&fx, &bob_session, &bob_key, "bob").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    // Alice's passkey registered again for bob: its credential id is taken.
    let (reply, _) = register(&fx, &bob_session, &alice_key, "stolen").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("registered already"), "{}", reply.body);

    // Bob's password, then alice's passkey at bob's factor step: refused, no session.
    let sign_in = start_sign_in(&fx, Some("bob")).await;
    let challenge = sign_in.challenge(&fx, "second-factor").await;
    let answer = alice_key.assertion(&challenge, 0x05, b"");
    let refused = sign_in.finish(&fx, "second-factor", &answer).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert!(
        refused.body.contains("not registered here"),
        "{}",
        refused.body
    );
    assert!(set_cookie(&refused.headers, "tokengate_session").is_none());
    // Bob's own passkey on a challenge issued for the password-less page: refused too.
    let page_challenge = start_sign_in(&fx, None)
        .await
        .challenge(&fx, "passwordless")
        .await;
    let answer = bob_key.assertion(&page_challenge, 0x05, b"");
    let refused = sign_in.finish(&fx, "second-factor", &answer).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    // Then bob's own passkey on his own challenge passes: the refusals above were about the
    // passkey, not the sign-in.
    let challenge = sign_in.challenge(&fx, "second-factor").await;
    let answer = bob_key.assertion(&challenge, 0x05, b"");
    let reply = sign_in.finish(&fx, "second-factor", &answer).await;
    assert_eq!(amr_of(&fx, &reply).await, "pwd swk mfa");

    // Without password, alice's passkey claiming to be bob's (his user handle): refused.
    let sign_in = start_sign_in(&fx, None).await;
    let challenge = sign_in.challenge(&fx, "passwordless").await;
    let answer = alice_key.assertion(&challenge, 0x05, &handle(bob.id));
    let refused = sign_in.finish(&fx, "passwordless", &answer).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    let challenge = sign_in.challenge(&fx, "passwordless").await;
    let answer = alice_key.assertion(&challenge, 0x05, &handle(alice.id));
    let reply = sign_in.finish(&fx, "passwordless", &answer).await;
    assert_eq!(amr_of(&fx, &reply).await, "swk user mfa");
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_and_removing_passkeys_need_a_signed_in_user_and_csrf() {
    let fx = Fixture::start(testing::store().await, |_| {}).await;
    let alice = fx
        .store
        .find_user_by_username("alice")
        .await
        .unwrap()
        .unwrap();
    // No session: to the sign-in page, nothing issued.
    let anonymous = fx
        .post("/accounts/two-factor/passkeys/options/", None, &[])
        .await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    assert!(anonymous.location().starts_with("/accounts/login/"));
    let session = fx.alice().await;
    // A session without its CSRF token, or with another's.
    let bob_session = {
        testing::user(&fx.store, "bob", PASSWORD).await;
        fx.sign_in("bob", PASSWORD, "").await.0
    };
    let bob_token = csrf_token(
        &fx.get("/accounts/two-factor/", Some(&bob_session))
            .await
            .body,
    );
    for form in [vec![], fields(&[("csrf_token", &bob_token)])] {
        let refused = fx
            .post(
                "/accounts/two-factor/passkeys/options/",
                Some(&session),
                &form,
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    }
    // A registration posted without its CSRF token: refused, nothing stored.
    let key = SoftKey::new(b"alice-key");
    let page = fx.get("/accounts/two-factor/", Some(&session)).await;
    let options = fx
        .post(
            "/accounts/two-factor/passkeys/options/",
            Some(&session),
            &fields(&[("csrf_token", &csrf_token(&page.body))]),
        )
        .await
        .json();
    let challenge = options["challenge"].as_str().unwrap();
    let refused = fx
        .post(
            "/accounts/two-factor/passkeys/",
            Some(&session),
            &key.registration(challenge, "no csrf"),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // Alice's challenge answered from bob's session (with bob's token): not his.
    let refused = fx
        .post(
            "/accounts/two-factor/passkeys/",
            Some(&bob_session),
            &with(
                key.registration(challenge, "x"),
                &[("csrf_token", &bob_token)],
            ),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(fx.store.passkeys_of(alice.id).await.unwrap().is_empty());

    // Two passkeys; removal needs the CSRF token; the last one's removal leaves no factor.
    let second = SoftKey::new(b"alice-key-2");
    for key in [&key, &second] {
        let (reply, _) = register(&fx, &session, key, "k").await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    }
    let token = csrf_token(&fx.get("/accounts/two-factor/", Some(&session)).await.body);
    let remove = |id: &[u8], token: &str| {
        fields(&[
            ("action", "remove"),
            ("credential_id", &b64(id)),
            ("csrf_token", token),
        ])
    };
    let refused = fx
        .post(
            "/accounts/two-factor/passkeys/",
            Some(&session),
            &remove(&key.id, &bob_token),
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // Bob cannot remove alice's passkey.
    let refused = fx
        .post(
            "/accounts/two-factor/passkeys/",
            Some(&bob_session),
            &remove(&key.id, &bob_token),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(fx.store.passkeys_of(alice.id).await.unwrap().len(), 2);
    // A sign-in older than 10 minutes (a stolen cookie, perhaps) adds no passkey, removes none
    // and makes no recovery codes: the user signs in again first.
    sqlx::query("UPDATE sessions SET created_at = created_at - 700")
        .execute(fx.store.pool())
        .await
        .unwrap();
    let stale = [
        (
            "/accounts/two-factor/passkeys/options/",
            fields(&[("csrf_token", &token)]),
        ),
        ("/accounts/two-factor/passkeys/", remove(&key.id, &token)),
        (
            "/accounts/two-factor/",
            fields(&[("action", "recovery-codes"), ("csrf_token", &token)]),
        ),
    ];
    for (path, form) in &stale {
        let refused = fx.post(path, Some(&session), form).await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{path}: {}",
            refused.body
        );
        assert!(
            refused.body.contains("sign in again"),
            "{path}: {}",
            refused.body
        );
    }
    assert_eq!(fx.store.passkeys_of(alice.id).await.unwrap().len(), 2);
    sqlx::query("UPDATE sessions SET created_at = created_at + 700")
        .execute(fx.store.pool())
        .await
        .unwrap();
    // New recovery codes (shown once), then both passkeys removed: the codes go with the last.
    let codes = fx
        .post(
            "/accounts/two-factor/",
            Some(&session),
            &fields(&[("action", "recovery-codes"), ("csrf_token", &token)]),
        )
        .await;
    assert_eq!(codes.status, StatusCode::OK);
    assert_eq!(
        codes.body.matches("<li><code>").count(),
        10,
        "{}",
        codes.body
    );
    assert_eq!(fx.store.recovery_codes_left(alice.id).await.unwrap(), 10);
    for id in [&key.id, &second.id] {
        let reply = fx
            .post(
                "/accounts/two-factor/passkeys/",
                Some(&session),
                &remove(id, &token),
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert_eq!(
            fx.store.recovery_codes_left(alice.id).await.unwrap(),
            if *id == key.id { 10 } else { 0 }
        );
    }
    assert!(!fx.store.has_second_factor(alice.id).await.unwrap());
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passkey_answers_count_in_the_second_factor_throttle() {
    let fx = Fixture::start(testing::store().await, |_| {}).await;
    let mut key = SoftKey::new(b"alice-key");
    let (reply, _) = register(&fx, &fx.alice().await, &key, "k").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let sign_in = start_sign_in(&fx, Some("alice")).await;
    // Five answers with a broken signature (the flags byte flipped after signing).
    for _ in 0..5 {
        let challenge = sign_in.challenge(&fx, "second-factor").await;
        let mut answer = key.assertion(&challenge, 0x05, b"");
        let data = &mut answer[2].1;
        let mut bytes = URL_SAFE_NO_PAD.decode(&*data).unwrap();
        bytes[32] ^= 0x08;
        *data = b64(&bytes);
        let refused = sign_in.finish(&fx, "second-factor", &answer).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
        assert!(
            refused.body.contains("signature is not right"),
            "{}",
            refused.body
        );
    }
    // Then a right answer is refused too, for the rest of the window.
    let challenge = sign_in.challenge(&fx, "second-factor").await;
    let answer = key.assertion(&challenge, 0x05, b"");
    let throttled = sign_in.finish(&fx, "second-factor", &answer).await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(throttled.headers["retry-after"], "900");
    assert!(set_cookie(&throttled.headers, "tokengate_session").is_none());
    fx.server.stop().await;
}

/// The password-less sign-in options make a stored challenge for anyone with a sign-in page's
/// cookie, so an address gets [`authserver::throttle::MAX_PASSKEY_CHALLENGES_PER_ADDRESS`] of
/// them per window, then 429 with `Retry-After` and no more rows; another address is still
/// served. A pending sign-in's second factor from the refused address is served too: its
/// challenges need a right password and are bound to that sign-in, so a neighbour behind the
/// same NAT cannot lock its user out. (The test server trusts loopback as a proxy:
/// `X-Forwarded-For` names the client.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_passkey_options_are_limited_per_address() {
    let fx = Fixture::start(testing::store().await, |_| {}).await;
    let key = SoftKey::new(b"alice-key");
    let (reply, _) = register(&fx, &fx.alice().await, &key, "k").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let sign_in = start_sign_in(&fx, None).await;
    let options_from = |address: &str| {
        let form = fields(&[("csrf_token", &sign_in.token), ("mode", "passwordless")]);
        let request = fx
            .http
            .post(fx.url("/accounts/login/passkey/options/"))
            .header("X-Forwarded-For", address)
            .form(&form);
        fx.send(request, Some(&sign_in.cookies))
    };
    let challenges = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM passkey_challenges WHERE purpose <> 'register'",
        )
        .fetch_one(fx.store.pool())
        .await
        .unwrap()
    };
    // A refusal at the limit: 429, Retry-After the window, an error naming it.
    let assert_refused = |refused: &Reply| {
        assert_eq!(
            refused.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            refused.body
        );
        assert_eq!(refused.headers["retry-after"], "900");
        assert!(
            refused.json()["error"]
                .as_str()
                .unwrap()
                .contains("Too many")
        );
    };
    let limit = authserver::throttle::MAX_PASSKEY_CHALLENGES_PER_ADDRESS;
    for i in 0..limit {
        let reply = options_from("198.51.100.7").await;
        assert_eq!(reply.status, StatusCode::OK, "request {i}: {}", reply.body);
    }
    assert_eq!(challenges().await, limit);
    assert_refused(&options_from("198.51.100.7").await);
    assert_eq!(challenges().await, limit, "no row for a refused request");
    // The second-factor mode is not limited per address, and does not count.
    let pending = start_sign_in(&fx, Some("alice")).await;
    let form = fields(&[("csrf_token", &pending.token), ("mode", "second-factor")]);
    for i in 0..2 {
        let request = fx
            .http
            .post(fx.url("/accounts/login/passkey/options/"))
            .header("X-Forwarded-For", "198.51.100.7")
            .form(&form);
        let served = fx.send(request, Some(&pending.cookies)).await;
        assert_eq!(
            served.status,
            StatusCode::OK,
            "request {i}: {}",
            served.body
        );
        assert_eq!(
            served.json()["allowCredentials"][0]["id"],
            b64(b"alice-key")
        );
    }
    assert_eq!(challenges().await, limit + 2);
    assert_refused(&options_from("198.51.100.7").await);
    // Another address is served, with the same cookie.
    let other = options_from("198.51.100.8").await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.body);
    assert!(other.json()["challenge"].is_string());
    fx.server.stop().await;
}
