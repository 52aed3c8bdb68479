//! DPoP at the authorization server (RFC 9449, issue 40), on SQLite and PostgreSQL: tokens bound
//! to the key a token request proves (`token_type: DPoP`, `cnf.jkt` in introspection and in JWT
//! access tokens), refresh tokens spent only with a proof of the same key, every malformed or
//! replayed proof refused with `invalid_dpop_proof`, the nonce flow (`use_dpop_nonce` with a
//! `DPoP-Nonce` header and no `WWW-Authenticate`), the metadata, and the UserInfo endpoint.
//! The proofs are signed here with `resource_server::dpop::signer`; tests/browser/dpop.mjs signs
//! them with panva's oauth4webapi (`tests/dpop_clients.rs` at the root).

mod support;

use authserver::config::{AccessTokenFormat, Settings};
use authserver::store::{GrantType, Store};
use authserver::testing;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use resource_server::dpop::signer::{ProofClaims, ProofSigner, new_jti};
use serde_json::Value;

const TOKEN_URL: &str = "http://127.0.0.1:8000/o/token/";

fn now() -> i64 {
    authserver::store::now()
}

struct Server {
    running: testing::RunningServer,
    http: reqwest::Client,
}

/// What a token request answered: status, the `DPoP-Nonce` and `WWW-Authenticate` headers, body.
struct Reply {
    status: u16,
    nonce: Option<String>,
    challenge: Option<String>,
    body: Value,
}

impl Server {
    async fn start(store: Store, configure: impl FnOnce(&mut Settings)) -> Server {
        let mut settings = Settings::for_tests("unused");
        configure(&mut settings);
        let running = testing::spawn_server(store, settings, "127.0.0.1:0".parse().unwrap()).await;
        Server {
            running,
            http: reqwest::Client::new(),
        }
    }

    /// A token request of `client` with these `proofs` (each a `DPoP` header).
    async fn token(
        &self,
        client: &(String, String),
        form: &[(&str, &str)],
        proofs: &[&str],
    ) -> Reply {
        let mut request = self
            .http
            .post(format!("{}/o/token/", self.running.base_url))
            .basic_auth(&client.0, Some(&client.1))
            .form(form);
        for proof in proofs {
            request = request.header("DPoP", *proof);
        }
        let reply = request.send().await.unwrap();
        let header = |name: &str| {
            reply
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        Reply {
            status: reply.status().as_u16(),
            nonce: header("dpop-nonce"),
            challenge: header("www-authenticate"),
            body: reply.json().await.unwrap_or(Value::Null),
        }
    }

    async fn introspect(&self, client: &(String, String), token: &str) -> Value {
        self.http
            .post(format!("{}/o/introspect/", self.running.base_url))
            .basic_auth(&client.0, Some(&client.1))
            .form(&[("token", token)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A token-endpoint proof of `signer`, now.
fn proof(signer: &ProofSigner) -> String {
    signer.proof("POST", TOKEN_URL, now(), None)
}

fn assert_refused(reply: &Reply, error: &str, what: &str) {
    assert_eq!(reply.status, 400, "{what}: {}", reply.body);
    assert_eq!(reply.body["error"], error, "{what}");
    assert!(
        reply.challenge.is_none(),
        "{what}: no WWW-Authenticate (RFC 9449 §5)"
    );
}

#[tokio::test]
async fn client_credentials_with_a_proof_is_a_dpop_token_bound_to_the_key() {
    for store in testing::all_stores().await {
        let service = testing::application(&store, GrantType::ClientCredentials, true).await;
        let server = Server::start(store, |_| {}).await;
        // Several at once: on PostgreSQL they are written in one group (`INSERT_GROUP`).
        let signers: Vec<ProofSigner> = (0..6)
            .map(|i| {
                if i % 2 == 0 {
                    ProofSigner::es256()
                } else {
                    ProofSigner::eddsa()
                }
            })
            .collect();
        let replies = futures_join(signers.iter().map(|signer| {
            let proof = proof(signer);
            let server = &server;
            let service = &service;
            async move {
                server
                    .token(service, &[("grant_type", "client_credentials")], &[&proof])
                    .await
            }
        }))
        .await;
        for (signer, reply) in signers.iter().zip(&replies) {
            assert_eq!(reply.status, 200, "{}", reply.body);
            assert_eq!(reply.body["token_type"], "DPoP");
            let token = reply.body["access_token"].as_str().unwrap();
            let answer = server.introspect(&service, token).await;
            assert_eq!(answer["active"], true);
            assert_eq!(answer["token_type"], "DPoP");
            assert_eq!(answer["cnf"]["jkt"], signer.thumbprint());
            assert!(answer["cnf"].get("x5t#S256").is_none());
        }
        // Without a proof: a bearer token, as before.
        let bearer = server
            .token(&service, &[("grant_type", "client_credentials")], &[])
            .await;
        assert_eq!(bearer.body["token_type"], "Bearer");
        let answer = server
            .introspect(&service, bearer.body["access_token"].as_str().unwrap())
            .await;
        assert!(answer.get("cnf").is_none(), "{answer}");
        assert_eq!(answer["token_type"], "Bearer");
    }
}

/// `join_all` without the futures crate: each future spawned on this task's runtime in turn.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in pinned.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn jwt_access_tokens_carry_cnf_jkt() {
    let store = testing::store().await;
    let service = testing::application(&store, GrantType::ClientCredentials, true).await;
    let server = Server::start(store, |s| s.access_token_format = AccessTokenFormat::Jwt).await;
    let signer = ProofSigner::eddsa();
    let reply = server
        .token(
            &service,
            &[("grant_type", "client_credentials")],
            &[&proof(&signer)],
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["token_type"], "DPoP");
    let jwt = reply.body["access_token"].as_str().unwrap();
    let payload = jwt.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert_eq!(claims["cnf"]["jkt"], signer.thumbprint());
    assert_eq!(
        server.introspect(&service, jwt).await["cnf"]["jkt"],
        signer.thumbprint()
    );
}

#[tokio::test]
async fn invalid_proofs_are_refused_with_invalid_dpop_proof() {
    let store = testing::store().await;
    let service = testing::application(&store, GrantType::ClientCredentials, true).await;
    let server = Server::start(store, |_| {}).await;
    let signer = ProofSigner::es256();
    let form = [("grant_type", "client_credentials")];
    let claims = |htm: &str, htu: &str, iat: i64| ProofClaims {
        htm: htm.into(),
        htu: htu.into(),
        iat,
        jti: new_jti(),
        ath: None,
        nonce: None,
    };
    let other_key_header = serde_json::json!({
        "typ": "dpop+jwt", "alg": "ES256", "jwk": ProofSigner::es256().jwk()
    });
    let replayed = proof(&signer);
    assert_eq!(
        server.token(&service, &form, &[&replayed]).await.status,
        200
    );
    let cases: Vec<(&str, String)> = vec![
        ("replay", replayed.clone()),
        (
            "wrong htu",
            signer.sign(&claims(
                "POST",
                "http://127.0.0.1:8000/o/introspect/",
                now(),
            )),
        ),
        (
            "another host",
            signer.sign(&claims("POST", "https://evil.example/o/token/", now())),
        ),
        ("wrong htm", signer.sign(&claims("GET", TOKEN_URL, now()))),
        (
            "stale iat",
            signer.sign(&claims("POST", TOKEN_URL, now() - 3600)),
        ),
        (
            "iat in the future",
            signer.sign(&claims("POST", TOKEN_URL, now() + 3600)),
        ),
        (
            "another key's jwk",
            signer.sign_with_header(other_key_header, &claims("POST", TOKEN_URL, now())),
        ),
        ("garbage", "not.a.proof".into()),
    ];
    for (what, proof) in &cases {
        let reply = server.token(&service, &form, &[proof]).await;
        assert_refused(&reply, "invalid_dpop_proof", what);
        assert!(reply.body["error_description"].is_string(), "{what}");
    }
    // Two proofs at once (§4.3 check 1).
    let two = server
        .token(&service, &form, &[&proof(&signer), &proof(&signer)])
        .await;
    assert_refused(&two, "invalid_dpop_proof", "two DPoP headers");
    // The query of the endpoint's URL is ignored (§4.3 check 9).
    let with_query = signer.sign(&claims(
        "POST",
        "http://127.0.0.1:8000/o/token/?a=b#c",
        now(),
    ));
    assert_eq!(
        server.token(&service, &form, &[&with_query]).await.status,
        200
    );
}

#[tokio::test]
async fn refresh_tokens_are_spent_only_with_a_proof_of_the_same_key() {
    for store in testing::all_stores().await {
        testing::user(&store, "alice", "wonderland").await;
        let client = testing::application(&store, GrantType::Password, false).await;
        let server = Server::start(store, |_| {}).await;
        let signer = ProofSigner::es256();
        let granted = server
            .token(
                &client,
                &[
                    ("grant_type", "password"),
                    ("username", "alice"),
                    ("password", "wonderland"),
                ],
                &[&proof(&signer)],
            )
            .await;
        assert_eq!(granted.status, 200, "{}", granted.body);
        assert_eq!(granted.body["token_type"], "DPoP");
        let refresh = granted.body["refresh_token"].as_str().unwrap().to_owned();
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh.as_str()),
        ];
        let without = server.token(&client, &form, &[]).await;
        assert_refused(&without, "invalid_dpop_proof", "refresh without a proof");
        let another = server
            .token(&client, &form, &[&proof(&ProofSigner::es256())])
            .await;
        assert_refused(&another, "invalid_dpop_proof", "refresh with another key");
        assert!(
            another.body["error_description"]
                .as_str()
                .unwrap()
                .contains("another")
        );
        // Neither refusal spent the token: the right key still refreshes, bound to it again.
        let refreshed = server.token(&client, &form, &[&proof(&signer)]).await;
        assert_eq!(refreshed.status, 200, "{}", refreshed.body);
        assert_eq!(refreshed.body["token_type"], "DPoP");
        let next = refreshed.body["refresh_token"].as_str().unwrap();
        let again = server
            .token(
                &client,
                &[("grant_type", "refresh_token"), ("refresh_token", next)],
                &[],
            )
            .await;
        assert_refused(
            &again,
            "invalid_dpop_proof",
            "the rotated refresh token is bound too",
        );
    }
}

#[tokio::test]
async fn a_required_nonce_is_asked_for_with_use_dpop_nonce() {
    let store = testing::store().await;
    let service = testing::application(&store, GrantType::ClientCredentials, true).await;
    let server = Server::start(store, |s| s.dpop_nonce_required = true).await;
    let signer = ProofSigner::eddsa();
    let form = [("grant_type", "client_credentials")];
    let first = server.token(&service, &form, &[&proof(&signer)]).await;
    assert_refused(&first, "use_dpop_nonce", "a proof without a nonce");
    let nonce = first.nonce.expect("a DPoP-Nonce header");
    let mut claims = ProofClaims {
        htm: "POST".into(),
        htu: TOKEN_URL.into(),
        iat: now(),
        jti: new_jti(),
        ath: None,
        nonce: Some("a nonce of another server".into()),
    };
    let forged = server
        .token(&service, &form, &[&signer.sign(&claims)])
        .await;
    assert_refused(
        &forged,
        "use_dpop_nonce",
        "a nonce this server did not issue",
    );
    claims.jti = new_jti();
    claims.nonce = Some(nonce);
    let second = server
        .token(&service, &form, &[&signer.sign(&claims)])
        .await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.body["token_type"], "DPoP");
    assert!(
        second.nonce.is_some(),
        "a fresh nonce with the tokens (§8.2)"
    );
}

#[tokio::test]
async fn metadata_lists_the_proof_algorithms() {
    let store = testing::store().await;
    let server = Server::start(store, |_| {}).await;
    let metadata: Value = server
        .http
        .get(format!(
            "{}/.well-known/oauth-authorization-server",
            server.running.base_url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let algs = metadata["dpop_signing_alg_values_supported"]
        .as_array()
        .unwrap();
    for alg in ["ES256", "EdDSA"] {
        assert!(algs.iter().any(|a| a == alg), "{metadata}");
    }
}

#[tokio::test]
async fn an_application_that_requires_dpop_is_refused_without_a_proof() {
    use authserver::jwt::KeyRing;
    use authserver::registration::{self, Create, Registration};
    use authserver::validation::{ApplicationDraft, OidcDraft};
    let store = testing::store().await;
    let settings = Settings::for_tests("unused");
    let draft = ApplicationDraft {
        name: "dpop only".into(),
        client_type: "confidential".into(),
        grant_type: "client-credentials".into(),
        dpop_required: true,
        // Every declared scope (no scope at all would leave nothing to grant).
        scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        ..ApplicationDraft::default()
    };
    let registration = Registration::check(&settings, &[], &draft, &OidcDraft::default()).unwrap();
    let registered = registration::create(
        &store,
        &KeyRing::new(),
        &settings,
        Create {
            registration: registration.clone(),
            owner_id: None,
            client_id: None,
            client_secret: None,
            dynamic: None,
        },
    )
    .await
    .unwrap();
    assert!(registered.app.dpop_required);
    let client = (registered.app.client_id.clone(), registered.secret.unwrap());
    let server = Server::start(store.clone(), |_| {}).await;
    let form = [("grant_type", "client_credentials")];
    let without = server.token(&client, &form, &[]).await;
    assert_refused(
        &without,
        "invalid_dpop_proof",
        "no proof from a client that requires DPoP",
    );
    let with = server
        .token(&client, &form, &[&proof(&ProofSigner::es256())])
        .await;
    assert_eq!(with.status, 200, "{}", with.body);
    assert_eq!(with.body["token_type"], "DPoP");
    // The flag goes through an update of the registration too.
    let mut registration = registration;
    registration.dpop_required = false;
    let updated = registration::update(
        &store,
        &KeyRing::new(),
        &settings,
        registered.app.id,
        registration,
        None,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!updated.app.dpop_required);
    assert!(
        !store
            .get_application(registered.app.id)
            .await
            .unwrap()
            .unwrap()
            .dpop_required
    );
}

#[tokio::test]
async fn a_code_requested_for_a_key_is_exchanged_only_with_a_proof_of_it_and_userinfo_takes_dpop() {
    use authserver::store::ClientType;
    use support::code_flow::{Fixture, REDIRECT, code_of, pkce_pair};
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let cookie = f.alice().await;
    let signer = ProofSigner::es256();
    let jkt = signer.thumbprint();
    // A code for the key (RFC 9449 §10), through the consent page (its hidden fields keep it).
    let code_for = |jkt: String, challenge: String| {
        let f = &f;
        let client = &client;
        let cookie = &cookie;
        async move {
            let path = Fixture::authorize_path(&[
                ("response_type", Some("code")),
                ("client_id", Some(&client.id)),
                ("redirect_uri", Some(REDIRECT)),
                ("scope", Some("openid read")),
                ("state", Some("st")),
                ("code_challenge", Some(&challenge)),
                ("code_challenge_method", Some("S256")),
                ("dpop_jkt", Some(&jkt)),
            ]);
            let page = f.get(&path, Some(cookie)).await;
            let reply = if page.status == reqwest::StatusCode::OK {
                f.decide(cookie, &page, "allow").await
            } else {
                page
            };
            reply.redirected_to(REDIRECT)
        }
    };
    let exchange = |code: String, verifier: String, proof: Option<String>| {
        let f = &f;
        let client = &client;
        async move {
            let mut request = f.exchange_request(client, &code, Some(REDIRECT), Some(&verifier));
            if let Some(proof) = proof {
                request = request.header("DPoP", proof);
            }
            f.send(request, None).await
        }
    };
    let token_url = format!("{}/o/token/", f.issuer);
    for (what, proof) in [
        ("no proof", None),
        (
            "another key",
            Some(ProofSigner::es256().proof("POST", &token_url, now(), None)),
        ),
    ] {
        let (verifier, challenge) = pkce_pair();
        let code = code_of(&code_for(jkt.clone(), challenge).await);
        let reply = exchange(code, verifier, proof).await;
        assert_eq!(reply.status, 400, "{what}: {}", reply.body);
        assert_eq!(reply.json()["error"], "invalid_dpop_proof", "{what}");
    }
    let (verifier, challenge) = pkce_pair();
    let code = code_of(&code_for(jkt.clone(), challenge).await);
    let reply = exchange(
        code,
        verifier,
        Some(signer.proof("POST", &token_url, now(), None)),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["token_type"], "DPoP");

    // The UserInfo endpoint takes the token under the DPoP scheme with a proof of its key,
    // and refuses it as a bearer token or with a proof for another URL (RFC 9449 §7).
    let token = reply.json()["access_token"].as_str().unwrap().to_owned();
    let userinfo_url = format!("{}/o/userinfo/", f.issuer);
    let userinfo = |authorization: String, proof: Option<String>| {
        let f = &f;
        async move {
            let mut request = f
                .http
                .get(f.url("/o/userinfo/"))
                .header("authorization", authorization);
            if let Some(proof) = proof {
                request = request.header("DPoP", proof);
            }
            f.send(request, None).await
        }
    };
    let proof = signer.proof("GET", &userinfo_url, now(), Some(&token));
    let claims = userinfo(format!("DPoP {token}"), Some(proof.clone())).await;
    assert_eq!(claims.status, 200, "{}", claims.body);
    assert!(claims.json()["sub"].is_string());
    let challenge = |reply: &support::code_flow::Reply| {
        reply.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let replay = userinfo(format!("DPoP {token}"), Some(proof)).await;
    assert_eq!(replay.status, 401);
    assert!(challenge(&replay).starts_with("DPoP error=\"invalid_dpop_proof\""));
    let elsewhere = signer.proof("GET", &token_url, now(), Some(&token));
    let wrong = userinfo(format!("DPoP {token}"), Some(elsewhere)).await;
    assert_eq!(wrong.status, 401);
    assert!(challenge(&wrong).starts_with("DPoP error=\"invalid_dpop_proof\""));
    let bearer = userinfo(format!("Bearer {token}"), None).await;
    assert_eq!(bearer.status, 401);
    assert!(challenge(&bearer).starts_with("DPoP error=\"invalid_token\""));
    // A dpop_jkt that is no thumbprint: invalid_request back to the client.
    let (_, challenge) = pkce_pair();
    let refused = code_for("not-a-thumbprint".into(), challenge).await;
    assert_eq!(
        refused.get("error").map(String::as_str),
        Some("invalid_request")
    );
}
