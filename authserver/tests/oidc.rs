//! OpenID Connect (issue 26) over real HTTP against the real server, on SQLite and (with
//! `DATABASE_URL`) PostgreSQL: the discovery document, ID tokens on the code flow (RS256 by
//! default, EdDSA per application) verified here against the published JWKS, refreshes, key
//! rotation of both key types, the UserInfo endpoint, the request parameters and RP-initiated
//! logout, with the attacks on each.

mod support;

/// The `openidconnect` crate as a relying party.
#[path = "oidc/openidconnect_crate.rs"]
mod openidconnect_crate;

use authserver::config::AccessTokenFormat;
use authserver::store::{ClientType, GrantType, OidcClient};
use authserver::testing;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use reqwest::StatusCode;
use serde_json::Value;
use sha2::Digest;
use support::code_flow::*;

const NONCE: &str = "n-0S6_WzA2Mj";

/// The JSON of a JWT's segment `index` (0 header, 1 claims).
fn segment(token: &str, index: usize) -> Value {
    let part = token.split('.').nth(index).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

/// The left half of SHA-256 (RS256) or SHA-512 (EdDSA) of `token`, base64url.
fn half_hash(token: &str, alg: &str) -> String {
    let digest = match alg {
        "RS256" => sha2::Sha256::digest(token.as_bytes()).to_vec(),
        _ => sha2::Sha512::digest(token.as_bytes()).to_vec(),
    };
    URL_SAFE_NO_PAD.encode(&digest[..digest.len() / 2])
}

impl Fixture {
    async fn json(&self, path: &str) -> Value {
        let reply = self.get(path, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
        reply.json()
    }

    /// A code for `client` with `scope` and the nonce, its PKCE verifier.
    async fn openid_code(&self, cookie: &str, client: &Client, scope: &str) -> (String, String) {
        let (verifier, challenge) = pkce_pair();
        let path = Fixture::authorize_path(&[
            ("response_type", Some("code")),
            ("client_id", Some(&client.id)),
            ("redirect_uri", Some(REDIRECT)),
            ("scope", Some(scope)),
            ("state", Some("st")),
            ("nonce", Some(NONCE)),
            ("code_challenge", Some(&challenge)),
            ("code_challenge_method", Some("S256")),
        ]);
        let page = self.get(&path, Some(cookie)).await;
        let reply = if page.status == StatusCode::OK {
            self.decide(cookie, &page, "allow").await
        } else {
            page
        };
        (code_of(&reply.redirected_to(REDIRECT)), verifier)
    }

    /// The claims of `id_token` once its signature verifies with the key of the JWKS its kid
    /// names, for `client_id`.
    async fn verify_id_token(&self, id_token: &str, client_id: &str) -> Value {
        let header = jsonwebtoken::decode_header(id_token).unwrap();
        let kid = header.kid.clone().expect("a kid");
        let jwks = self.json("/.well-known/jwks.json").await;
        let jwk = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == kid.as_str())
            .unwrap_or_else(|| panic!("kid {kid} not in {jwks}"))
            .clone();
        let key = match header.alg {
            Algorithm::RS256 => {
                assert_eq!(jwk["kty"], "RSA");
                DecodingKey::from_rsa_components(
                    jwk["n"].as_str().unwrap(),
                    jwk["e"].as_str().unwrap(),
                )
                .unwrap()
            }
            Algorithm::EdDSA => {
                assert_eq!(jwk["kty"], "OKP");
                DecodingKey::from_ed_components(jwk["x"].as_str().unwrap()).unwrap()
            }
            other => panic!("unexpected alg {other:?}"),
        };
        assert_eq!(jwk["alg"], segment(id_token, 0)["alg"]);
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[client_id]);
        validation.set_required_spec_claims(&["iss", "sub", "aud", "exp", "iat"]);
        jsonwebtoken::decode::<Value>(id_token, &key, &validation)
            .unwrap_or_else(|e| panic!("ID token does not verify: {e}"))
            .claims
    }
}

#[tokio::test]
async fn discovery_names_every_required_field_and_keeps_rfc8414() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let d = f.json("/.well-known/openid-configuration").await;
    // OpenID Connect Discovery 1.0 §3, REQUIRED.
    for field in [
        "issuer",
        "authorization_endpoint",
        "token_endpoint",
        "jwks_uri",
        "response_types_supported",
        "subject_types_supported",
        "id_token_signing_alg_values_supported",
    ] {
        assert!(d.get(field).is_some(), "{field} missing from {d}");
    }
    assert_eq!(d["issuer"], f.issuer.as_str());
    assert_eq!(
        d["userinfo_endpoint"],
        format!("{}/o/userinfo/", f.issuer).as_str()
    );
    assert_eq!(
        d["end_session_endpoint"],
        format!("{}/o/logout/", f.issuer).as_str()
    );
    assert_eq!(d["response_types_supported"], serde_json::json!(["code"]));
    assert_eq!(d["subject_types_supported"], serde_json::json!(["public"]));
    let algs = d["id_token_signing_alg_values_supported"].to_string();
    assert!(algs.contains("RS256") && algs.contains("EdDSA"), "{algs}");
    // oidcc-idtoken-unsigned: no unsigned ID tokens.
    assert!(!algs.to_lowercase().contains("none"), "{algs}");
    // oidcc-scope-address, -phone: not offered, so the plan skips them.
    for scope in ["address", "phone"] {
        assert!(
            !d["scopes_supported"].to_string().contains(scope),
            "{scope}"
        );
    }
    for scope in ["openid", "profile", "email", "read"] {
        assert!(d["scopes_supported"].to_string().contains(scope), "{scope}");
    }
    for claim in ["sub", "nonce", "email_verified", "preferred_username"] {
        assert!(d["claims_supported"].to_string().contains(claim), "{claim}");
    }
    assert_eq!(d["claims_parameter_supported"], false);
    assert_eq!(d["request_parameter_supported"], false);
    assert_eq!(d["request_uri_parameter_supported"], false);
    // The RFC 8414 document is still served, and agrees.
    let m = f.json("/.well-known/oauth-authorization-server").await;
    for field in [
        "issuer",
        "token_endpoint",
        "jwks_uri",
        "introspection_endpoint",
    ] {
        assert_eq!(m[field], d[field], "{field}");
    }
}

/// The code flow with `openid`: an RS256 ID token with every claim of Core 1.0 §2 that
/// verifies against the JWKS; with EdDSA for an application that chose it; none without
/// `openid`; a refresh returns a fresh one.
#[tokio::test]
async fn the_code_flow_with_openid_returns_an_id_token_that_verifies_against_the_jwks() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let alice = f.user_id("alice").await;
        let cookie = f.alice().await;
        let client = f
            .client_with(
                ClientType::Confidential,
                true,
                &["*"],
                Some(AccessTokenFormat::Jwt),
            )
            .await;
        let (code, verifier) = f.openid_code(&cookie, &client, "openid read").await;
        let before = authserver::store::now();
        let reply = f.exchange(&client, &code, Some(&verifier)).await;
        assert_eq!(reply.status, StatusCode::OK, "{backend:?}: {}", reply.body);
        let body = reply.json();
        let id_token = body["id_token"].as_str().expect("an id_token");
        let access_token = body["access_token"].as_str().unwrap();
        let header = segment(id_token, 0);
        assert_eq!(header["alg"], "RS256", "the default");
        assert_eq!(header["typ"], "JWT");
        let claims = f.verify_id_token(id_token, &client.id).await;
        assert_eq!(claims["sub"], alice.to_string().as_str());
        assert_eq!(claims["aud"], client.id.as_str());
        assert_eq!(claims["azp"], client.id.as_str());
        assert_eq!(claims["nonce"], NONCE);
        assert_eq!(claims["at_hash"], half_hash(access_token, "RS256").as_str());
        let (iat, exp, auth_time) = (
            claims["iat"].as_i64().unwrap(),
            claims["exp"].as_i64().unwrap(),
            claims["auth_time"].as_i64().unwrap(),
        );
        assert!(auth_time <= iat && iat >= before - 1 && exp > iat && exp <= iat + 3600);
        // The JWKS publishes both types now: Ed25519 (JWT access tokens) and RSA.
        let jwks = f.json("/.well-known/jwks.json").await;
        let types: Vec<&str> = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kty"].as_str().unwrap())
            .collect();
        assert!(types.contains(&"RSA") && types.contains(&"OKP"), "{jwks}");

        // A refresh keeps openid: a fresh ID token, same user and sign-in time, no nonce,
        // at_hash of the new access token.
        let refreshed = f
            .token(
                &client,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", body["refresh_token"].as_str().unwrap()),
                ],
            )
            .await;
        assert_eq!(refreshed.status, StatusCode::OK, "{}", refreshed.body);
        let refreshed = refreshed.json();
        let again = refreshed["id_token"].as_str().expect("a fresh id_token");
        assert_ne!(again, id_token);
        let claims = f.verify_id_token(again, &client.id).await;
        assert_eq!(claims["sub"], alice.to_string().as_str());
        assert_eq!(claims["auth_time"].as_i64(), Some(auth_time));
        assert!(claims.get("nonce").is_none());
        assert_eq!(
            claims["at_hash"],
            half_hash(refreshed["access_token"].as_str().unwrap(), "RS256").as_str()
        );
        // Narrowed to read alone on refresh: no ID token.
        let narrowed = f
            .token(
                &client,
                &[
                    ("grant_type", "refresh_token"),
                    (
                        "refresh_token",
                        refreshed["refresh_token"].as_str().unwrap(),
                    ),
                    ("scope", "read"),
                ],
            )
            .await;
        assert_eq!(narrowed.status, StatusCode::OK, "{}", narrowed.body);
        assert!(narrowed.json().get("id_token").is_none());

        // No openid, no ID token.
        let plain = f.client(ClientType::Public, true, &["*"]).await;
        let (code, verifier) = f.openid_code(&cookie, &plain, "read").await;
        let reply = f.exchange(&plain, &code, Some(&verifier)).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.json().get("id_token").is_none(), "{}", reply.body);

        // An application registered for EdDSA ID tokens (opaque access tokens).
        let ed = f.client(ClientType::Public, true, &["*"]).await;
        f.store
            .set_oidc_client(
                ed.app_id,
                &OidcClient {
                    id_token_alg: "EdDSA".into(),
                    ..OidcClient::default()
                },
            )
            .await
            .unwrap();
        let (code, verifier) = f.openid_code(&cookie, &ed, "openid").await;
        let reply = f.exchange(&ed, &code, Some(&verifier)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let body = reply.json();
        let id_token = body["id_token"].as_str().unwrap();
        assert_eq!(segment(id_token, 0)["alg"], "EdDSA");
        let claims = f.verify_id_token(id_token, &ed.id).await;
        assert_eq!(
            claims["at_hash"],
            half_hash(body["access_token"].as_str().unwrap(), "EdDSA").as_str()
        );
        f.server.stop().await;
    }
}

/// An ID token is for its client only: verifying it for another audience fails, and a
/// replayed code (the nonce's one use) is refused and revokes what it gave.
#[tokio::test]
async fn an_id_token_is_bound_to_its_client_and_its_code_to_one_use() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let cookie = f.alice().await;
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let other = f.client(ClientType::Confidential, true, &["*"]).await;
    let (code, verifier) = f.openid_code(&cookie, &client, "openid").await;
    let reply = f.exchange(&client, &code, Some(&verifier)).await;
    let body = reply.json();
    let id_token = body["id_token"].as_str().unwrap();
    let header = jsonwebtoken::decode_header(id_token).unwrap();
    let jwks = f.json("/.well-known/jwks.json").await;
    let jwk: jsonwebtoken::jwk::JwkSet = serde_json::from_value(jwks).unwrap();
    let key = DecodingKey::from_jwk(jwk.find(&header.kid.unwrap()).unwrap()).unwrap();
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_audience(&[&other.id]);
    assert!(jsonwebtoken::decode::<Value>(id_token, &key, &validation).is_err());
    validation.set_audience(&[&client.id]);
    assert!(jsonwebtoken::decode::<Value>(id_token, &key, &validation).is_ok());
    // The same code again: refused, and the tokens of the first exchange are revoked.
    let again = f.exchange(&client, &code, Some(&verifier)).await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert!(!f.active(body["access_token"].as_str().unwrap()).await);
    // The other client cannot exchange a code issued to the first.
    let (code, verifier) = f.openid_code(&cookie, &client, "openid").await;
    let stolen = f.exchange(&other, &code, Some(&verifier)).await;
    assert_eq!(stolen.status, StatusCode::BAD_REQUEST, "{}", stolen.body);
    f.server.stop().await;
}

/// `keys rotate` adds a key of each type; the JWKS publishes both new keys at once, and ID
/// tokens go on verifying (old key until the new one signs).
#[tokio::test]
async fn rotation_covers_both_key_types() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let cookie = f.alice().await;
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let (code, verifier) = f.openid_code(&cookie, &client, "openid").await;
    let first = f.exchange(&client, &code, Some(&verifier)).await.json();
    let rotated = authserver::jwt::rotation::rotate(&f.store, 3600, 36_000)
        .await
        .unwrap();
    // RSA keys are in use (the ID token above): both types rotate.
    let rsa = rotated.rsa.expect("a new RSA key");
    assert_eq!(rotated.key.algorithm, "EdDSA");
    assert_eq!(rsa.algorithm, "RS256");
    assert_eq!(rsa.generation, rotated.key.generation + 1);
    let keys =
        authserver::jwt::KeySet::from_stored(&f.store.signing_keys().await.unwrap()).unwrap();
    let jwks = keys.jwks(authserver::store::now(), 36_000);
    let kids = jwks.to_string();
    assert!(kids.contains(&rsa.kid) && kids.contains(&rotated.key.kid));
    // The RSA key that signed before the rotation still signs (the new one is pending).
    let signer = keys
        .signer(authserver::jwt::Alg::RS256, authserver::store::now())
        .unwrap();
    assert_ne!(signer.kid, rsa.kid);
    let header = jsonwebtoken::decode_header(first["id_token"].as_str().unwrap()).unwrap();
    assert_eq!(header.kid.as_deref(), Some(signer.kid.as_str()));
    f.server.stop().await;
}

/// `GET`/`POST /o/userinfo/` with `token` in the header (or, `in_form`, the POST body).
async fn userinfo(f: &Fixture, token: &str, method: &str) -> Reply {
    let url = f.url("/o/userinfo/");
    let request = match method {
        "GET" => f.http.get(url).bearer_auth(token),
        "POST" => f.http.post(url).bearer_auth(token),
        "FORM" => f.http.post(url).form(&[("access_token", token)]),
        "BOTH" => f
            .http
            .post(url)
            .bearer_auth(token)
            .form(&[("access_token", token)]),
        _ => f.http.get(url),
    };
    f.send(request, None).await
}

fn challenge(reply: &Reply) -> String {
    reply
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// UserInfo by GET and POST (header or form), the claims of the token's scopes, and the
/// RFC 6750 refusals: no token, a bad one, a revoked one, one without `openid`, two at once.
#[tokio::test]
async fn userinfo_answers_by_scope_and_refuses_as_rfc6750_says() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let alice = f.user_id("alice").await;
        let update = authserver::store::UserUpdate {
            email: Some("alice@wonderland.example".into()),
            first_name: Some("Alice".into()),
            last_name: Some("Liddell".into()),
            ..Default::default()
        };
        f.store.update_user(alice, &update).await.unwrap();
        f.store.set_email_verified(alice, true).await.unwrap();
        let cookie = f.alice().await;
        for format in [AccessTokenFormat::Opaque, AccessTokenFormat::Jwt] {
            let client = f
                .client_with(ClientType::Confidential, true, &["*"], Some(format))
                .await;
            let (code, verifier) = f
                .openid_code(&cookie, &client, "openid profile email read")
                .await;
            let tokens = f.exchange(&client, &code, Some(&verifier)).await.json();
            let token = tokens["access_token"].as_str().unwrap();
            for method in ["GET", "POST", "FORM"] {
                let reply = userinfo(&f, token, method).await;
                assert_eq!(
                    reply.status,
                    StatusCode::OK,
                    "{backend:?} {method}: {}",
                    reply.body
                );
                assert_eq!(reply.headers["cache-control"], "no-store");
                let claims = reply.json();
                assert_eq!(claims["sub"], alice.to_string().as_str());
                assert_eq!(claims["preferred_username"], "alice");
                assert_eq!(claims["name"], "Alice Liddell");
                assert_eq!(claims["given_name"], "Alice");
                assert_eq!(claims["family_name"], "Liddell");
                assert_eq!(claims["email"], "alice@wonderland.example");
                assert_eq!(claims["email_verified"], true);
                assert!(claims["updated_at"].as_i64().unwrap() > 0);
            }
            // Both ways at once.
            let both = userinfo(&f, token, "BOTH").await;
            assert_eq!(both.status, StatusCode::BAD_REQUEST, "{}", both.body);
            assert!(challenge(&both).contains("error=\"invalid_request\""));
            // Revoked: invalid_token.
            let revoke = f
                .send(
                    f.http
                        .post(f.url("/o/revoke_token/"))
                        .basic_auth(&client.id, client.secret.as_deref())
                        .form(&[("token", token)]),
                    None,
                )
                .await;
            assert_eq!(revoke.status, StatusCode::OK);
            let revoked = userinfo(&f, token, "GET").await;
            assert_eq!(revoked.status, StatusCode::UNAUTHORIZED);
            assert!(challenge(&revoked).contains("error=\"invalid_token\""));
            assert_eq!(revoked.json()["error"], "invalid_token");
        }
        // The scope decides: openid alone gives sub alone; email without profile no name.
        let client = f.client(ClientType::Public, true, &["*"]).await;
        for (scope, present, absent) in [
            (
                "openid",
                vec!["sub"],
                vec!["email", "name", "preferred_username"],
            ),
            (
                "openid email",
                vec!["email", "email_verified"],
                vec!["name", "updated_at"],
            ),
        ] {
            let (code, verifier) = f.openid_code(&cookie, &client, scope).await;
            let tokens = f.exchange(&client, &code, Some(&verifier)).await.json();
            let claims = userinfo(&f, tokens["access_token"].as_str().unwrap(), "GET")
                .await
                .json();
            for name in present {
                assert!(claims.get(name).is_some(), "{scope}: {name} in {claims}");
            }
            for name in absent {
                assert!(claims.get(name).is_none(), "{scope}: {name} in {claims}");
            }
        }
        // A token without openid: insufficient_scope, 403.
        let (code, verifier) = f.openid_code(&cookie, &client, "read").await;
        let tokens = f.exchange(&client, &code, Some(&verifier)).await.json();
        let reply = userinfo(&f, tokens["access_token"].as_str().unwrap(), "GET").await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
        assert!(challenge(&reply).contains("error=\"insufficient_scope\""));
        assert!(challenge(&reply).contains("scope=\"openid\""));
        // A client's own token (client credentials): no user, so invalid_token, 401, not the
        // 403 insufficient_scope a user's token without openid gets.
        let receiver = Receiver::start(&f).await;
        let reply = userinfo(&f, &receiver.token, "GET").await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
        assert!(challenge(&reply).contains("error=\"invalid_token\""));
        assert_eq!(reply.json()["error"], "invalid_token");
        // No token: a challenge without an error code; garbage: invalid_token.
        let none = userinfo(&f, "", "NONE").await;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED);
        assert_eq!(challenge(&none), "Bearer realm=\"userinfo\"");
        let forged = userinfo(&f, "not-a-token", "GET").await;
        assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
        assert!(challenge(&forged).contains("error=\"invalid_token\""));
        let basic = f
            .send(
                f.http.get(f.url("/o/userinfo/")).basic_auth("a", Some("b")),
                None,
            )
            .await;
        assert_eq!(basic.status, StatusCode::BAD_REQUEST);
        f.server.stop().await;
    }
}

/// Changing the email through the store unverifies it and moves `updated_at`.
#[tokio::test]
async fn a_changed_email_is_no_longer_verified() {
    for store in testing::all_stores().await {
        let user = testing::user(&store, "bob", "builder-password").await;
        store.set_email_verified(user.id, true).await.unwrap();
        let before = store.profile(user.id).await.unwrap().unwrap();
        assert!(before.email_verified);
        let rename = authserver::store::UserUpdate {
            first_name: Some("Bob".into()),
            ..Default::default()
        };
        store.update_user(user.id, &rename).await.unwrap();
        assert!(
            store
                .profile(user.id)
                .await
                .unwrap()
                .unwrap()
                .email_verified
        );
        let same = authserver::store::UserUpdate {
            email: Some(before.user.email.clone()),
            ..Default::default()
        };
        store.update_user(user.id, &same).await.unwrap();
        assert!(
            store
                .profile(user.id)
                .await
                .unwrap()
                .unwrap()
                .email_verified
        );
        let other = authserver::store::UserUpdate {
            email: Some("bob@elsewhere.example".into()),
            ..Default::default()
        };
        store.update_user(user.id, &other).await.unwrap();
        let after = store.profile(user.id).await.unwrap().unwrap();
        assert!(!after.email_verified);
        assert!(after.updated_at >= before.updated_at);
    }
}

/// Authlib (discovery validator, OAuth2Session, CodeIDToken) and PyJWT as the relying party:
/// `tests/oidc_rp.py`. Skipped without python3 + authlib + PyJWT, unless `CI` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authlib_and_pyjwt_as_relying_party() {
    let found = std::process::Command::new("python3")
        .args(["-c", "import authlib, jwt, requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").is_err(),
            "CI must install authlib, pyjwt, requests"
        );
        eprintln!("SKIPPED: pip install authlib pyjwt requests");
        return;
    }
    let f = Fixture::start(testing::store().await, |_| {}).await;
    let alice = f.user_id("alice").await;
    let update = authserver::store::UserUpdate {
        email: Some("alice@wonderland.example".into()),
        ..Default::default()
    };
    f.store.update_user(alice, &update).await.unwrap();
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oidc_rp.py");
    let mut command = std::process::Command::new("python3");
    command.args([
        script,
        &f.server.base_url,
        "alice",
        PASSWORD,
        &client.id,
        client.secret.as_deref().unwrap(),
        REDIRECT,
    ]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "oidc_rp.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["alg"], "RS256");
    assert_eq!(summary["sub"], alice.to_string().as_str());
    for refusal in [
        "wrong_nonce",
        "other_audience",
        "other_access_token",
        "pyjwt_other_audience",
    ] {
        assert!(summary["refusals"].get(refusal).is_some(), "{summary}");
    }
    for claim in ["at_hash", "auth_time", "azp", "nonce"] {
        assert!(summary["claims"].to_string().contains(claim), "{summary}");
    }
    assert_eq!(summary["userinfo"]["email"], "alice@wonderland.example");
    assert_eq!(summary["userinfo"]["email_verified"], false);
    // The script's tokens are ours, live.
    assert!(f.active(summary["access_token"].as_str().unwrap()).await);
    f.server.stop().await;
}

/// An authorization request of `client` for `openid` with these extra parameters.
fn oidc_request(client: &Client, extra: &[(&str, &str)]) -> String {
    let (_, challenge) = pkce_pair();
    let mut pairs: Vec<(&str, Option<&str>)> = vec![
        ("response_type", Some("code")),
        ("client_id", Some(&client.id)),
        ("redirect_uri", Some(REDIRECT)),
        ("scope", Some("openid")),
        ("state", Some("st")),
        ("code_challenge", Some(&challenge)),
        ("code_challenge_method", Some("S256")),
    ];
    for (name, value) in extra {
        pairs.retain(|(n, _)| n != name);
        pairs.push((name, Some(value)));
    }
    Fixture::authorize_path(&pairs)
}

/// The `error` of a redirect to the client, checking `state` and `iss` came along.
fn error_of(f: &Fixture, reply: &Reply) -> String {
    let answer = reply.redirected_to(REDIRECT);
    assert_eq!(answer.get("state").map(String::as_str), Some("st"));
    assert_eq!(answer.get("iss"), Some(&f.issuer));
    answer.get("error").cloned().unwrap_or_default()
}

/// The modules of the OpenID Foundation's `oidcc-basic-certification-test-plan` that no other
/// test here covers, one request each (docs/oidc.md lists every module and its test): what the
/// OP must accept (no nonce, `display`, locales, `acr_values`, an unknown parameter, another
/// scope order, an essential claim asked by `claims`) each yields a code whose ID token
/// verifies; an authorization request by POST; `client_secret_post` at the token endpoint.
#[tokio::test]
async fn basic_op_plan_modules_of_their_own() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let cookie = f.alice().await;
    let request = |extra: &[(&str, &str)], challenge: &str| -> Vec<(String, String)> {
        let mut pairs = vec![
            ("response_type", "code"),
            ("client_id", client.id.as_str()),
            ("redirect_uri", REDIRECT),
            ("scope", "openid"),
            ("state", "st"),
            ("code_challenge", challenge),
            ("code_challenge_method", "S256"),
        ];
        for &(name, value) in extra {
            pairs.retain(|&(n, _)| n != name);
            pairs.push((name, value));
        }
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    // The ID token of a redirect to the client, `reply` (through consent if it is the page).
    let id_token_after = async |reply: Reply, verifier: &str| -> Value {
        let reply = if reply.status == StatusCode::OK {
            f.decide(&cookie, &reply, "allow").await
        } else {
            reply
        };
        assert_eq!(error_of(&f, &reply), "", "{:?}", reply.location());
        let code = code_of(&reply.redirected_to(REDIRECT));
        let tokens = f.exchange(&client, &code, Some(verifier)).await;
        assert_eq!(tokens.status, StatusCode::OK, "{}", tokens.body);
        let id_token = tokens.json()["id_token"].as_str().unwrap().to_owned();
        f.verify_id_token(&id_token, &client.id).await
    };
    for (module, extra) in [
        (
            "oidcc-ensure-request-without-nonce-succeeds-for-code-flow",
            vec![],
        ),
        ("oidcc-display-page", vec![("display", "page")]),
        ("oidcc-display-popup", vec![("display", "popup")]),
        ("oidcc-ui-locales", vec![("ui_locales", "se")]),
        ("oidcc-claims-locales", vec![("claims_locales", "se")]),
        (
            "oidcc-ensure-request-with-acr-values-succeeds",
            vec![("acr_values", "1 2")],
        ),
        (
            "oidcc-ensure-request-with-unknown-parameter-succeeds",
            vec![("extra", "foobar")],
        ),
        (
            "oidcc-ensure-other-scope-order-succeeds",
            vec![("scope", "email openid")],
        ),
        (
            "oidcc-claims-essential",
            vec![("claims", r#"{"userinfo":{"name":{"essential":true}}}"#)],
        ),
    ] {
        let (verifier, challenge) = pkce_pair();
        let pairs = request(&extra, &challenge);
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&pairs)
            .finish();
        let reply = f
            .get(&format!("/o/authorize/?{query}"), Some(&cookie))
            .await;
        let claims = id_token_after(reply, &verifier).await;
        assert!(claims.get("nonce").is_none(), "{module}: {claims}");
    }

    // oidcc-ensure-post-request-succeeds: the request in a form body. Signed in, at once;
    // not (a cross-site POST carries no SameSite=Lax cookie), through the sign-in, as a GET.
    let (verifier, challenge) = pkce_pair();
    let form = request(&[("nonce", NONCE)], &challenge);
    let by_post = f
        .send(
            f.http.post(f.url("/o/authorize/")).form(&form),
            Some(&cookie),
        )
        .await;
    let claims = id_token_after(by_post, &verifier).await;
    assert_eq!(claims["nonce"], NONCE);
    let (verifier, challenge) = pkce_pair();
    let form = request(&[("nonce", NONCE)], &challenge);
    let anonymous = f
        .send(f.http.post(f.url("/o/authorize/")).form(&form), None)
        .await;
    assert_eq!(
        anonymous.status,
        StatusCode::SEE_OTHER,
        "{}",
        anonymous.body
    );
    let login = anonymous.location().to_owned();
    let next: String = form_urlencoded::parse(login.split_once('?').unwrap().1.as_bytes())
        .find(|(k, _)| k == "next")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no next in {login}"));
    assert!(next.starts_with("/o/authorize/?"), "{next}");
    let (fresh, signed_in) = f.sign_in("alice", PASSWORD, &next).await;
    assert_eq!(signed_in.location(), next);
    let reply = f.get(&next, Some(&fresh)).await;
    let reply = if reply.status == StatusCode::OK {
        f.decide(&fresh, &reply, "allow").await
    } else {
        reply
    };
    let code = code_of(&reply.redirected_to(REDIRECT));
    let tokens = f.exchange(&client, &code, Some(&verifier)).await.json();
    let id_token = tokens["id_token"].as_str().unwrap();
    assert_eq!(
        f.verify_id_token(id_token, &client.id).await["nonce"],
        NONCE
    );
    // A POST that repeats a parameter is refused, as a GET is.
    let mut twice = request(&[], &challenge);
    twice.push(("scope".into(), "openid email".into()));
    let refused = f
        .send(
            f.http.post(f.url("/o/authorize/")).form(&twice),
            Some(&cookie),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);

    // oidcc-server-client-secret-post: the client authenticates in the form.
    let (code, verifier) = f.openid_code(&cookie, &client, "openid").await;
    let secret = client.secret.clone().unwrap();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", verifier.as_str()),
        ("client_id", client.id.as_str()),
        ("client_secret", secret.as_str()),
    ];
    let tokens = f
        .send(f.http.post(f.url("/o/token/")).form(&form), None)
        .await;
    assert_eq!(tokens.status, StatusCode::OK, "{}", tokens.body);
    let id_token = tokens.json()["id_token"].as_str().unwrap().to_owned();
    assert_eq!(
        f.verify_id_token(&id_token, &client.id).await["nonce"],
        NONCE
    );
    f.server.stop().await;
}

/// `prompt=none` answers without a page: login_required without a session, consent_required
/// without consent, a code once both are there; `prompt=consent` shows the page although a
/// consent is remembered.
#[tokio::test]
async fn prompt_none_never_shows_a_page_and_prompt_consent_always_does() {
    for store in testing::all_stores().await {
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let none = oidc_request(&client, &[("prompt", "none")]);
        assert_eq!(error_of(&f, &f.get(&none, None).await), "login_required");
        let cookie = f.alice().await;
        assert_eq!(
            error_of(&f, &f.get(&none, Some(&cookie)).await),
            "consent_required"
        );
        // Consent once, then prompt=none gets a code.
        f.openid_code(&cookie, &client, "openid").await;
        let answer = f.get(&none, Some(&cookie)).await.redirected_to(REDIRECT);
        assert!(answer.contains_key("code"), "{answer:?}");
        // prompt=consent: the page again, remembered consent or not.
        let page = f
            .get(
                &oidc_request(&client, &[("prompt", "consent")]),
                Some(&cookie),
            )
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains(r#"id="consent""#));
        // A scope wider than the consent: consent_required.
        let wider = oidc_request(&client, &[("prompt", "none"), ("scope", "openid email")]);
        assert_eq!(
            error_of(&f, &f.get(&wider, Some(&cookie)).await),
            "consent_required"
        );
        // none with anything else is malformed.
        let mixed = oidc_request(&client, &[("prompt", "none login")]);
        assert_eq!(
            error_of(&f, &f.get(&mixed, Some(&cookie)).await),
            "invalid_request"
        );
        f.server.stop().await;
    }
}

/// `prompt=login` and an exceeded `max_age` send a signed-in user to the sign-in form (shown,
/// not skipped, with `login_hint` prefilled); once signed in again the request goes on, and
/// the ID token's `auth_time` is the new sign-in.
#[tokio::test]
async fn prompt_login_and_max_age_force_a_new_sign_in() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let cookie = f.alice().await;
        f.openid_code(&cookie, &client, "openid").await;
        // An old sign-in: ten minutes ago.
        sqlx::query("UPDATE sessions SET created_at = created_at - 600")
            .execute(f.store.pool())
            .await
            .unwrap();
        // max_age larger than its age: straight on.
        let fine = f
            .get(
                &oidc_request(&client, &[("max_age", "3600")]),
                Some(&cookie),
            )
            .await;
        assert!(
            fine.redirected_to(REDIRECT).contains_key("code"),
            "{backend:?}"
        );
        for extra in [
            vec![("prompt", "login"), ("login_hint", "alice")],
            vec![("max_age", "60"), ("login_hint", "alice")],
            vec![("max_age", "0"), ("login_hint", "alice")],
        ] {
            let path = oidc_request(&client, &extra);
            let reply = f.get(&path, Some(&cookie)).await;
            assert_eq!(
                reply.status,
                StatusCode::SEE_OTHER,
                "{extra:?}: {}",
                reply.body
            );
            let login = reply.location().to_owned();
            assert!(login.starts_with("/accounts/login/?next="), "{login}");
            assert!(login.contains("prompt=login"), "{login}");
            let next: String = form_urlencoded::parse(login.split_once('?').unwrap().1.as_bytes())
                .find(|(k, _)| k == "next")
                .unwrap()
                .1
                .into_owned();
            assert!(
                !next.contains("prompt=login") && !next.contains("max_age"),
                "{next}"
            );
            // The form is shown to the signed-in user, username prefilled.
            let page = f.get(&login, Some(&cookie)).await;
            assert_eq!(page.status, StatusCode::OK, "{}", page.body);
            assert_eq!(input_value(&page.body, "username"), "alice");
            // With prompt=none, an exceeded max_age cannot be met: login_required.
            if extra[0].0 == "max_age" {
                let silent = [extra[0], ("prompt", "none")];
                assert_eq!(
                    error_of(
                        &f,
                        &f.get(&oidc_request(&client, &silent), Some(&cookie)).await
                    ),
                    "login_required",
                    "{silent:?}"
                );
            }
            // Signing in again goes back to the request, which now issues a code.
            let (fresh, back) = f.sign_in("alice", PASSWORD, &next).await;
            assert_eq!(back.location(), next);
            let answer = f.get(&next, Some(&fresh)).await.redirected_to(REDIRECT);
            assert!(answer.contains_key("code"), "{answer:?}");
        }
        // The ID token of a forced sign-in carries the new sign-in time.
        let before = authserver::store::now();
        let (fresh, _) = f.sign_in("alice", PASSWORD, "/").await;
        let (code, verifier) = f.openid_code(&fresh, &client, "openid").await;
        let body = f.exchange(&client, &code, Some(&verifier)).await.json();
        let claims = segment(body["id_token"].as_str().unwrap(), 1);
        assert!(claims["auth_time"].as_i64().unwrap() >= before);
        f.server.stop().await;
    }
}

/// What this server does not do is refused with the codes OpenID Connect names, sent back to
/// the client: request objects, `claims`, and implicit or hybrid response types.
#[tokio::test]
async fn unsupported_request_parameters_are_refused_by_name() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let cookie = f.alice().await;
    for (extra, error) in [
        (
            ("request", "eyJhbGciOiJub25lIn0.e30."),
            "request_not_supported",
        ),
        (
            ("request_uri", "https://rp.example/r"),
            "request_uri_not_supported",
        ),
        (("response_type", "id_token"), "unsupported_response_type"),
        (
            ("response_type", "code id_token"),
            "unsupported_response_type",
        ),
        (("response_type", "token"), "unsupported_response_type"),
        (("max_age", "-1"), "invalid_request"),
        (("prompt", "sometimes"), "invalid_request"),
    ] {
        let reply = f.get(&oidc_request(&client, &[extra]), Some(&cookie)).await;
        assert_eq!(error_of(&f, &reply), error, "{extra:?}");
    }
    f.server.stop().await;
}

/// `id_token_hint`: an ID token of ours for this client naming the signed-in user lets
/// `prompt=none` through; one naming someone else is login_required; one for another client,
/// forged, or from another issuer is invalid_request.
#[tokio::test]
async fn id_token_hints_must_be_ours_for_this_client() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    testing::user(&f.store, "bob", "builder-password").await;
    let client = f.client(ClientType::Confidential, true, &["*"]).await;
    let other = f.client(ClientType::Confidential, true, &["*"]).await;
    let alice = f.alice().await;
    let bob = f.sign_in("bob", "builder-password", "/").await.0;
    let id_token_of = async |cookie: &str, client: &Client| -> String {
        let (code, verifier) = f.openid_code(cookie, client, "openid").await;
        let body = f.exchange(client, &code, Some(&verifier)).await.json();
        body["id_token"].as_str().unwrap().to_owned()
    };
    let alices = id_token_of(&alice, &client).await;
    let bobs = id_token_of(&bob, &client).await;
    let for_other = id_token_of(&alice, &other).await;
    let silent = |hint: &str| oidc_request(&client, &[("prompt", "none"), ("id_token_hint", hint)]);
    let answer = f
        .get(&silent(&alices), Some(&alice))
        .await
        .redirected_to(REDIRECT);
    assert!(answer.contains_key("code"), "{answer:?}");
    assert_eq!(
        error_of(&f, &f.get(&silent(&bobs), Some(&alice)).await),
        "login_required"
    );
    assert_eq!(
        error_of(&f, &f.get(&silent(&alices), None).await),
        "login_required"
    );
    // Not prompt=none: bob's hint sends alice to the sign-in form.
    let hinted = oidc_request(&client, &[("id_token_hint", &bobs)]);
    let reply = f.get(&hinted, Some(&alice)).await;
    assert!(
        reply.location().starts_with("/accounts/login/"),
        "{}",
        reply.location()
    );
    // Another client's, forged, foreign: invalid_request.
    let parts: Vec<&str> = alices.split('.').collect();
    let mut claims = segment(&alices, 1);
    claims["sub"] = "1".into();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap()),
        parts[2]
    );
    let foreign_key = authserver::jwt::KeySet::from_stored(&[authserver::jwt::keys::generate_for(
        authserver::jwt::Alg::RS256,
        1,
        0,
        0,
    )
    .unwrap()])
    .unwrap();
    let mut theirs: authserver::jwt::id_token::IdTokenClaims =
        serde_json::from_value(segment(&alices, 1)).unwrap();
    theirs.iss = "https://elsewhere.example".into();
    let elsewhere = authserver::jwt::id_token::sign(
        foreign_key.signer(authserver::jwt::Alg::RS256, 0).unwrap(),
        &theirs,
    )
    .unwrap();
    // Our issuer's name on a foreign key: refused as well.
    theirs.iss = f.issuer.clone();
    let impostor = authserver::jwt::id_token::sign(
        foreign_key.signer(authserver::jwt::Alg::RS256, 0).unwrap(),
        &theirs,
    )
    .unwrap();
    for (what, hint) in [
        ("another client's", for_other.as_str()),
        ("forged", &forged),
        ("another issuer's", &elsewhere),
        ("an impostor's", &impostor),
        ("garbage", "a.b.c"),
    ] {
        assert_eq!(
            error_of(&f, &f.get(&silent(hint), Some(&alice)).await),
            "invalid_request",
            "{what}"
        );
    }
    f.server.stop().await;
}

const BYE: &str = "https://client.example/signed-out";

/// Whether the session `cookie` still signs its user in.
async fn signed_in(f: &Fixture, cookie: &str) -> bool {
    f.get("/o/authorized-tokens/", Some(cookie)).await.status == StatusCode::OK
}

fn logout_path(pairs: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        query.append_pair(name, value);
    }
    format!("/o/logout/?{}", query.finish())
}

/// RP-Initiated Logout 1.0: with a hint naming the signed-in user, the session ends and the
/// browser goes back to the registered URI with `state`; without one, a confirmation page
/// (CSRF-checked) comes first; nothing but an exactly registered URI of the named client is
/// ever redirected to.
#[tokio::test]
async fn rp_initiated_logout_ends_the_session_and_redirects_only_where_registered() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        testing::user(&f.store, "bob", "builder-password").await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let other = f.client(ClientType::Confidential, true, &["*"]).await;
        for app in [&client, &other] {
            let registration = OidcClient {
                post_logout_redirect_uris: format!("{BYE} https://client.example/other?x=1"),
                ..OidcClient::default()
            };
            f.store
                .set_oidc_client(app.app_id, &registration)
                .await
                .unwrap();
        }
        let id_token_of = async |cookie: &str, client: &Client| -> String {
            let (code, verifier) = f.openid_code(cookie, client, "openid").await;
            let body = f.exchange(client, &code, Some(&verifier)).await.json();
            body["id_token"].as_str().unwrap().to_owned()
        };
        let alice = f.alice().await;
        let hint = id_token_of(&alice, &client).await;
        let others_hint = id_token_of(&alice, &other).await;

        // Open redirects: every near miss is refused with a page, and the session stays.
        for (what, uri) in [
            ("prefix", "https://client.example/signed-out/x"),
            ("shorter", "https://client.example/signed"),
            (
                "query added",
                "https://client.example/signed-out?next=https://evil.example",
            ),
            ("fragment", "https://client.example/signed-out#x"),
            ("other host", "https://evil.example/signed-out"),
            (
                "userinfo trick",
                "https://client.example@evil.example/signed-out",
            ),
            ("scheme", "http://client.example/signed-out"),
            ("case", "https://CLIENT.example/signed-out"),
            ("protocol-relative", "//evil.example/"),
            ("the authorize redirect_uri", REDIRECT),
        ] {
            let reply = f
                .get(
                    &logout_path(&[("id_token_hint", &hint), ("post_logout_redirect_uri", uri)]),
                    Some(&alice),
                )
                .await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{backend:?} {what}: {}",
                reply.body
            );
            assert!(reply.headers.get("location").is_none(), "{what}");
            assert!(reply.body.contains(r#"id="logout-error""#), "{what}");
        }
        // A URI but no client named; a client_id the hint was not issued to; a forged hint.
        let mut forged = hint.clone();
        forged.pop();
        forged.push(if hint.ends_with('A') { 'B' } else { 'A' });
        for (what, pairs) in [
            ("no client", vec![("post_logout_redirect_uri", BYE)]),
            (
                "another client's hint",
                vec![
                    ("id_token_hint", others_hint.as_str()),
                    ("client_id", client.id.as_str()),
                    ("post_logout_redirect_uri", BYE),
                ],
            ),
            (
                "forged hint",
                vec![
                    ("id_token_hint", forged.as_str()),
                    ("post_logout_redirect_uri", BYE),
                ],
            ),
            (
                "unknown client",
                vec![("client_id", "nobody"), ("post_logout_redirect_uri", BYE)],
            ),
        ] {
            let reply = f.get(&logout_path(&pairs), Some(&alice)).await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{what}: {}",
                reply.body
            );
            assert!(reply.headers.get("location").is_none(), "{what}");
        }
        assert!(
            signed_in(&f, &alice).await,
            "no refused request signed alice out"
        );

        // No hint: a confirmation page; its form without the CSRF token is refused.
        let ask = logout_path(&[
            ("client_id", &client.id),
            ("post_logout_redirect_uri", BYE),
            ("state", "s-1"),
        ]);
        let page = f.get(&ask, Some(&alice)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(
            page.body.contains(r#"id="logout-confirm""#),
            "{}",
            page.body
        );
        let csp = page.headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("form-action 'self' https://client.example"),
            "{csp}"
        );
        let mut fields = hidden_fields(&page.body, "logout-confirm");
        let forged_form: Vec<(String, String)> = fields
            .iter()
            .filter(|(k, _)| k != "csrf_token")
            .cloned()
            .collect();
        let refused = f.post("/o/logout/", Some(&alice), &forged_form).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert!(signed_in(&f, &alice).await);
        // A hint naming someone else: the confirmation page too.
        let bob = f.sign_in("bob", "builder-password", "/").await.0;
        let bobs_hint = id_token_of(&bob, &client).await;
        let page = f
            .get(&logout_path(&[("id_token_hint", &bobs_hint)]), Some(&alice))
            .await;
        assert!(page.body.contains(r#"id="logout-confirm""#));
        assert!(signed_in(&f, &alice).await);
        // Confirmed: signed out, back to the client with its state.
        fields.retain(|(k, _)| k != "decision");
        let confirmed = f.post("/o/logout/", Some(&alice), &fields).await;
        assert_eq!(confirmed.location(), format!("{BYE}?state=s-1"));
        assert!(!signed_in(&f, &alice).await);

        // With a hint naming the signed-in user: at once, state carried, cookie cleared.
        let alice = f.alice().await;
        let reply = f
            .get(
                &logout_path(&[
                    ("id_token_hint", &hint),
                    (
                        "post_logout_redirect_uri",
                        "https://client.example/other?x=1",
                    ),
                    ("state", "a b&c"),
                ]),
                Some(&alice),
            )
            .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert_eq!(
            reply.location(),
            "https://client.example/other?x=1&state=a+b%26c"
        );
        assert!(
            set_cookie(&reply.headers, "tokengate_session")
                .is_some_and(|c| c == "tokengate_session="),
            "{:?}",
            reply.headers
        );
        assert!(!signed_in(&f, &alice).await);
        // Nobody signed in: straight back; no URI: our page.
        let reply = f
            .get(
                &logout_path(&[("client_id", &client.id), ("post_logout_redirect_uri", BYE)]),
                None,
            )
            .await;
        assert_eq!(reply.location(), BYE);
        let reply = f.get("/o/logout/", None).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.body.contains(r#"id="logout-done""#));
        // Bob's session was never touched.
        assert!(signed_in(&f, &bob).await);
        f.server.stop().await;
    }
}

/// The `jti`s of the `session-revoked` events (subject `jwt_id`) pending on a new stream of
/// `f`'s server: one per token family ended.
struct Receiver {
    token: String,
    stream: String,
}

impl Receiver {
    async fn start(f: &Fixture) -> Receiver {
        let (id, secret) = testing::application(&f.store, GrantType::ClientCredentials, true).await;
        let client = Client {
            id,
            secret: Some(secret),
            app_id: 0,
        };
        let reply = f
            .token(
                &client,
                &[
                    ("grant_type", "client_credentials"),
                    ("scope", "ssf.read ssf.manage"),
                ],
            )
            .await;
        let token = reply.json()["access_token"].as_str().unwrap().to_owned();
        let created = f
            .send(
                f.http
                    .post(f.url("/ssf/stream"))
                    .bearer_auth(&token)
                    .json(&serde_json::json!({"delivery": {"method": "urn:ietf:rfc:8936"}})),
                None,
            )
            .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        let stream = created.json()["stream_id"].as_str().unwrap().to_owned();
        Receiver { token, stream }
    }

    /// The `jti` of every pending `session-revoked` event about one token family, sorted.
    async fn revoked_families(&self, f: &Fixture) -> Vec<String> {
        let poll = f
            .send(
                f.http
                    .post(f.url(&format!("/ssf/poll/{}", self.stream)))
                    .bearer_auth(&self.token)
                    .json(&serde_json::json!({"returnImmediately": true, "maxEvents": 100})),
                None,
            )
            .await;
        assert_eq!(poll.status, StatusCode::OK, "{}", poll.body);
        let mut jtis: Vec<String> = poll.json()["sets"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|set| {
                let claims = segment(set.as_str().unwrap(), 1);
                let event = &claims["events"][SESSION_REVOKED];
                (event.is_object() && claims["sub_id"]["format"] == "jwt_id")
                    .then(|| claims["sub_id"]["jti"].as_str().unwrap().to_owned())
            })
            .collect();
        jtis.sort();
        jtis
    }
}

const SESSION_REVOKED: &str = "https://schemas.openid.net/secevent/caep/event-type/session-revoked";

/// RP-initiated logout ends the tokens its browser session led to, every client's (with a
/// `session-revoked` event per token family on the revocation stream, so the sidecars drop
/// them), including those of an earlier sign-in in the same browser (`prompt=login`); the same
/// user's tokens from another sign-in stay, and so does that session. The sign-out button
/// does the same.
#[tokio::test]
async fn logout_ends_the_tokens_of_its_session_with_a_session_revoked_event_each() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let f = Fixture::start(store, |_| {}).await;
        let client = f.client(ClientType::Confidential, true, &["*"]).await;
        let other = f.client(ClientType::Public, true, &["*"]).await;
        let receiver = Receiver::start(&f).await;
        let tokens_of = async |cookie: &str, client: &Client| -> Value {
            let (code, verifier) = f.openid_code(cookie, client, "openid read").await;
            let reply = f.exchange(client, &code, Some(&verifier)).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            reply.json()
        };
        let family_jti = async |tokens: &Value| -> String {
            let access = tokens["access_token"].as_str().unwrap();
            let record = f.store.find_token(access).await.unwrap().unwrap();
            authserver::store::family_jti(&record.family)
        };
        let here = f.alice().await;
        let first = tokens_of(&here, &client).await;
        // A second sign-in in the same browser (prompt=login sends it to the form again).
        let again = f.sign_in_reply("alice", PASSWORD, "", Some(&here)).await;
        let here = set_cookie(&again.headers, "tokengate_session").unwrap();
        let second = tokens_of(&here, &other).await;
        let third = tokens_of(&here, &client).await;
        let elsewhere = f.alice().await;
        let kept = tokens_of(&elsewhere, &client).await;
        assert!(receiver.revoked_families(&f).await.is_empty());

        let hint = third["id_token"].as_str().unwrap();
        let reply = f
            .get(&logout_path(&[("id_token_hint", hint)]), Some(&here))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{backend:?}: {}", reply.body);
        assert!(reply.body.contains(r#"id="logout-done""#));
        let mut ended = Vec::new();
        for tokens in [&first, &second, &third] {
            ended.push(family_jti(tokens).await);
            for kind in ["access_token", "refresh_token"] {
                let token = tokens[kind].as_str().unwrap();
                assert!(!f.active(token).await, "{backend:?}: {kind} still active");
            }
        }
        ended.sort();
        assert_eq!(receiver.revoked_families(&f).await, ended, "{backend:?}");
        // The refresh token of a session that ended is refused.
        let refresh = f
            .token(
                &client,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", third["refresh_token"].as_str().unwrap()),
                ],
            )
            .await;
        assert_eq!(refresh.status, StatusCode::BAD_REQUEST, "{}", refresh.body);
        assert_eq!(refresh.json()["error"], "invalid_grant");
        // The other sign-in and its tokens are untouched.
        assert!(signed_in(&f, &elsewhere).await);
        assert!(f.active(kept["access_token"].as_str().unwrap()).await);

        // The sign-out button ends that session's tokens the same way.
        let page = f.get("/o/authorized-tokens/", Some(&elsewhere)).await;
        let form = vec![("csrf_token".to_owned(), csrf_token(&page.body))];
        let out = f.post("/accounts/logout/", Some(&elsewhere), &form).await;
        assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
        assert!(!f.active(kept["access_token"].as_str().unwrap()).await);
        let pending = receiver.revoked_families(&f).await;
        assert_eq!(pending.len(), 4, "{backend:?}: {pending:?}");
        assert!(pending.contains(&family_jti(&kept).await), "{backend:?}");
        f.server.stop().await;
    }
}

/// The registration form takes post-logout redirect URIs and the ID-token algorithm (checked
/// like redirect URIs), lists the OIDC scopes, and the detail page shows them; `app create`
/// takes the same as flags.
#[tokio::test]
async fn views_and_cli_register_the_oidc_fields() {
    let store = testing::sqlite_store().await;
    let operator = authserver::store::NewUser {
        username: "op".into(),
        password: Some("operator-password".into()),
        is_active: true,
        is_staff: true,
        ..Default::default()
    };
    store.create_user(&operator).await.unwrap();
    let f = Fixture::start(store, |_| {}).await;
    let (cookie, _) = f.sign_in("op", "operator-password", "/").await;
    let page = f.get("/o/applications/register/", Some(&cookie)).await;
    for needle in [
        r#"name="post_logout_redirect_uris""#,
        r#"<option value="RS256" selected>"#,
        r#"value="openid""#,
        r#"value="email""#,
    ] {
        assert!(page.body.contains(needle), "{needle}");
    }
    let token = csrf_token(&page.body);
    let form = |uris: &str, alg: &str| -> Vec<(String, String)> {
        [
            ("csrf_token", token.as_str()),
            ("name", "Sign-in site"),
            ("client_type", "confidential"),
            ("grant_type", "authorization-code"),
            ("redirect_uris", REDIRECT),
            ("post_logout_redirect_uris", uris),
            ("id_token_alg", alg),
            ("scope", "openid"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec()
    };
    let bad = f
        .post(
            "/o/applications/register/",
            Some(&cookie),
            &form("https://rp.example/bye#x", "HS256"),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(
        bad.body
            .contains("Post-logout redirect URIs follow the redirect URI rules")
    );
    assert!(bad.body.contains("Choose RS256 or EdDSA."));
    let good = f
        .post(
            "/o/applications/register/",
            Some(&cookie),
            &form("https://rp.example/bye\nhttps://rp.example/again", "EdDSA"),
        )
        .await;
    assert_eq!(good.status, StatusCode::SEE_OTHER, "{}", good.body);
    let detail = f.get(good.location(), Some(&cookie)).await;
    assert!(
        detail.body.contains(r#"<dd id="id-token-alg">EdDSA</dd>"#),
        "{}",
        detail.body
    );
    assert!(
        detail
            .body
            .contains("<code>https://rp.example/again</code>")
    );
    let app = f
        .store
        .list_applications(None)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.name == "Sign-in site")
        .unwrap();
    let registration = f.store.oidc_client(app.id).await.unwrap();
    assert_eq!(registration.id_token_alg, "EdDSA");
    assert_eq!(
        registration.post_logout_redirect_uris,
        "https://rp.example/bye https://rp.example/again"
    );
    // The edit form shows them back.
    let edit = f
        .get(
            &format!("/o/applications/{}/update/", app.id),
            Some(&cookie),
        )
        .await;
    assert!(edit.body.contains(r#"<option value="EdDSA" selected>"#));
    assert!(
        edit.body
            .contains("https://rp.example/bye\nhttps://rp.example/again")
    );
    f.server.stop().await;

    // The same through `app create`.
    let db = testing::created_sqlite_url();
    let out = support::binary::run(
        &[
            "app",
            "create",
            "--name",
            "cli rp",
            "--grant-type",
            "authorization-code",
            "--redirect-uri",
            REDIRECT,
            "--post-logout-redirect-uri",
            "https://rp.example/bye",
            "--id-token-alg",
            "EdDSA",
            "--json",
        ],
        &db,
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let store = testing::connect(&db).await;
    let registration = store
        .oidc_client(created["id"].as_i64().unwrap())
        .await
        .unwrap();
    assert_eq!(registration.id_token_alg, "EdDSA");
    assert_eq!(
        registration.post_logout_redirect_uris,
        "https://rp.example/bye"
    );
    let out = support::binary::run(
        &["app", "create", "--name", "x", "--id-token-alg", "none"],
        &db,
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--id-token-alg \"none\": Choose RS256 or EdDSA."),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An ID token is no access token: UserInfo and introspection refuse it.
#[tokio::test]
async fn an_id_token_is_not_an_access_token() {
    let f = Fixture::start(testing::sqlite_store().await, |_| {}).await;
    let cookie = f.alice().await;
    let client = f
        .client_with(
            ClientType::Confidential,
            true,
            &["*"],
            Some(AccessTokenFormat::Jwt),
        )
        .await;
    let (code, verifier) = f.openid_code(&cookie, &client, "openid").await;
    let body = f.exchange(&client, &code, Some(&verifier)).await.json();
    let id_token = body["id_token"].as_str().unwrap();
    let reply = userinfo(&f, id_token, "GET").await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
    assert!(challenge(&reply).contains("error=\"invalid_token\""));
    let (rs_id, rs_secret) = testing::application(
        &f.store,
        authserver::store::GrantType::ClientCredentials,
        true,
    )
    .await;
    let answer = f
        .send(
            f.http
                .post(f.url("/o/introspect/"))
                .basic_auth(&rs_id, Some(&rs_secret))
                .form(&[("token", id_token)]),
            None,
        )
        .await;
    assert_eq!(answer.json(), serde_json::json!({ "active": false }));
    // The access token beside it is active.
    let answer = f
        .send(
            f.http
                .post(f.url("/o/introspect/"))
                .basic_auth(&rs_id, Some(&rs_secret))
                .form(&[("token", body["access_token"].as_str().unwrap())]),
            None,
        )
        .await;
    assert_eq!(answer.json()["active"], true);
    f.server.stop().await;
}

/// The purge forgets a family's sign-in time once none of its tokens is left.
#[tokio::test]
async fn the_purge_forgets_sign_in_times_of_families_without_tokens() {
    for store in testing::all_stores().await {
        let user = testing::user(&store, "carol", "carol-password").await;
        let old = authserver::store::now() - 10_000;
        store
            .remember_auth_time("gone", user.id, old)
            .await
            .unwrap();
        store
            .remember_auth_time("fresh", user.id, old)
            .await
            .unwrap();
        sqlx::query("UPDATE oidc_families SET created_at = $1 WHERE family = 'gone'")
            .bind(old)
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(store.purge_oidc_families().await.unwrap(), 1);
        assert_eq!(store.auth_time_of("gone").await.unwrap(), None);
        assert_eq!(store.auth_time_of("fresh").await.unwrap(), Some(old));
    }
}
