//! Local JWT validation against tokens signed by a third-party library (Python's Authlib, see
//! `support/jwt_tokens.py`) and keys served by a JWKS server on 127.0.0.1:0: accepted tokens with
//! their scopes, the adversarial corpus refused with 401 `invalid_token`, refetches bounded,
//! rotation, background refresh and failing closed.

use test_support::jwks;

use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderValue, Method};
use jwks::{Corpus, JwksServer};
use resource_server::jwt::{JwksSettings, JwksSource, Validation};
use resource_server::{
    Audience, Check, Credential, Denial, Gate, Identity, JwtSettings, JwtValidator, Outcome, Rules,
};

const ISSUER: &str = "https://idp.test/realms/demo";
const AUDIENCE: &str = "tokengate-api";

fn corpus() -> &'static Corpus {
    static C: OnceLock<Corpus> = OnceLock::new();
    C.get_or_init(|| Corpus::generate(ISSUER, AUDIENCE))
}

fn settings(server: &JwksServer) -> JwtSettings {
    let mut jwks = JwksSettings::new(JwksSource::Url(server.url()));
    jwks.refresh_min = Duration::from_secs(60);
    JwtSettings::new(ISSUER, jwks)
}

fn keycloak(mut s: JwtSettings) -> JwtSettings {
    s.typ = vec!["JWT".into()];
    s.claims.client_id_claim = "azp".into();
    s.claims.username_claim = "preferred_username".into();
    s
}

fn entra(mut s: JwtSettings) -> JwtSettings {
    s.typ = vec!["JWT".into()];
    s.claims.scope_claim = "scp".into();
    s.claims.client_id_claim = "azp".into();
    s.claims.username_claim = "preferred_username".into();
    s.claims.require_jti = false;
    s
}

fn rules() -> Rules {
    Rules::from_yaml(
        r#"
routes:
  - { name: read, path: /read, scopes: [read] }
  - { name: groups, path: /groups, scopes: [groups] }
  - { name: admin, path: /admin, scopes: [admin] }
"#,
        "jwt-test.yaml",
    )
    .unwrap()
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    h
}

/// The gate's decision with this API's audience ([`AUDIENCE`]).
async fn authorize(v: &JwtValidator, path: &str, token: &str) -> Result<Option<Identity>, Denial> {
    let audience = Audience::new(vec![AUDIENCE.into()]).unwrap();
    authorize_for(v, Some(audience), path, token).await
}

/// The gate's decision with `audience` (`None`: any `aud`).
async fn authorize_for(
    v: &JwtValidator,
    audience: Option<Audience>,
    path: &str,
    token: &str,
) -> Result<Option<Identity>, Denial> {
    let gate = Gate::new(rules(), Check::Jwt(v.clone())).with_audience(audience);
    gate.authorize(&Method::GET, &path.parse().unwrap(), &bearer(token), None)
        .await
        .map(|allow| allow.identity.map(|i| i.identity.clone()))
}

async fn server() -> JwksServer {
    JwksServer::start(&corpus().jwks, "max-age=300").await
}

#[tokio::test]
async fn third_party_tokens_are_accepted_with_their_scopes() {
    let s = server().await;
    let v = JwtValidator::new(settings(&s)).unwrap();
    for (name, path) in [
        ("rs256", "/read"),
        ("es256", "/groups"),
        ("eddsa", "/read"),
        // Its JWK has a coordinate short of 32 bytes (Authlib drops leading zeros).
        ("es256_short_coordinate", "/read"),
    ] {
        let allow = authorize(&v, path, corpus().token(name))
            .await
            .unwrap_or_else(|d| panic!("{name}: {d:?}"));
        let id = allow.unwrap();
        assert_eq!(id.username.as_deref(), Some("alice"), "{name}");
        assert_eq!(id.client_id.as_deref(), Some("app-1"), "{name}");
    }
    // The right scopes, not more.
    let denial = authorize(&v, "/admin", corpus().token("rs256"))
        .await
        .unwrap_err();
    assert_eq!(denial.outcome, Outcome::InsufficientScope);
    let denial = authorize(&v, "/groups", corpus().token("eddsa"))
        .await
        .unwrap_err();
    assert_eq!(denial.refusal.status, 403);
    assert_eq!(s.fetches(), 1, "one fetch at start");
}

#[tokio::test]
async fn keycloak_and_entra_shaped_tokens() {
    let s = server().await;
    let kc = JwtValidator::new(keycloak(settings(&s))).unwrap();
    let id = authorize(&kc, "/read", corpus().token("keycloak"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id.username.as_deref(), Some("alice"));
    assert_eq!(id.client_id.as_deref(), Some("shop-frontend"));
    assert_eq!(id.scope, "openid profile email read write");
    assert!(
        authorize(&kc, "/groups", corpus().token("keycloak"))
            .await
            .is_err()
    );

    let ms = JwtValidator::new(entra(settings(&s))).unwrap();
    let id = authorize(&ms, "/groups", corpus().token("entra"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id.username.as_deref(), Some("alice@contoso.example"));
    assert_eq!(
        id.client_id.as_deref(),
        Some("11111111-2222-3333-4444-555555555555")
    );
    assert_eq!(id.scope, "read groups");
    // Entra ID sends no jti: the RFC 9068 default refuses it.
    let strict = JwtValidator::new(settings(&s)).unwrap();
    assert_eq!(
        authorize(&strict, "/read", corpus().token("entra"))
            .await
            .unwrap_err()
            .refusal
            .status,
        401
    );
    // `typ: at+jwt` (the default) refuses Keycloak's `typ: JWT`.
    assert_eq!(
        authorize(&strict, "/read", corpus().token("keycloak"))
            .await
            .unwrap_err()
            .outcome,
        Outcome::InvalidToken
    );
}

/// Every token of the corpus is refused with 401 `invalid_token`, and the one unknown `kid`
/// costs at most one JWKS refetch.
#[tokio::test]
async fn the_adversarial_corpus_is_refused() {
    let s = server().await;
    let v = JwtValidator::new(settings(&s)).unwrap();
    for name in jwks::ADVERSARIAL {
        for _ in 0..3 {
            let denial = authorize(&v, "/read", corpus().token(name))
                .await
                .expect_err(name);
            assert_eq!(denial.refusal.status, 401, "{name}");
            assert_eq!(denial.outcome, Outcome::InvalidToken, "{name}");
            let challenge = denial.refusal.www_authenticate.unwrap();
            assert!(
                challenge.contains("error=\"invalid_token\""),
                "{name}: {challenge}"
            );
        }
    }
    assert_eq!(
        s.fetches(),
        2,
        "the start, and one refetch for the unknown kid"
    );
    let m = v.metrics();
    // Only wrong_aud verifies (then from the cache): its audience is the gate's to refuse.
    assert_eq!(m.validations(Validation::Verified), 1);
    assert_eq!(m.validations(Validation::Cached), 2);
    assert_eq!(m.validations(Validation::UnknownKey), 3);
    assert_eq!(m.validations(Validation::BadSignature), 9);
    // The sound token still goes through.
    assert!(
        authorize(&v, "/read", corpus().token("rs256"))
            .await
            .is_ok()
    );
}

/// A token whose header names `kid` with the rest of another token (the signature cannot
/// verify, but the key lookup comes first).
fn with_kid(token: &str, kid: &str) -> String {
    let header = format!(r#"{{"alg":"RS256","typ":"at+jwt","kid":"{kid}"}}"#);
    let rest = token.split_once('.').unwrap().1;
    format!("{}.{rest}", URL_SAFE_NO_PAD.encode(header))
}

#[tokio::test]
async fn forged_kids_cause_no_refetch_storm() {
    let s = server().await;
    let mut settings = settings(&s);
    settings.jwks.refresh_min = Duration::from_millis(300);
    let v = JwtValidator::new(settings).unwrap();
    let base = corpus().token("rs256");
    assert!(matches!(v.validate(base).await, Credential::Checked(_)));
    tokio::time::sleep(Duration::from_millis(350)).await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (v, token) = (v.clone(), with_kid(base, &format!("forged-{i}")));
        tasks.push(tokio::spawn(async move { v.validate(&token).await }));
    }
    for t in tasks {
        assert!(matches!(t.await.unwrap(), Credential::Invalid(_)));
    }
    assert_eq!(
        s.fetches(),
        2,
        "start + one refetch, whatever the number of kids"
    );
    assert!(
        v.metrics()
            .jwks_refetches_suppressed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 199
    );
}

/// Checks arriving together on a fresh validator wait for the one first fetch: no second
/// fetch, and no unknown-kid refetch used up (it would delay a rotation by `refresh_min`).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_first_checks_share_the_first_fetch() {
    let s = server().await;
    let v = JwtValidator::new(settings(&s)).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let v = v.clone();
        tasks.push(tokio::spawn(async move {
            v.validate(corpus().token("rs256")).await
        }));
    }
    for t in tasks {
        assert!(matches!(t.await.unwrap(), Credential::Checked(_)));
    }
    assert_eq!(s.fetches(), 1);
    assert_eq!(
        v.metrics()
            .jwks_refetches_suppressed
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // So a key published now is found at the first token that names it.
    s.set(&corpus().jwks_rotated);
    assert!(matches!(
        v.validate(corpus().token("rotated_in")).await,
        Credential::Checked(_)
    ));
}

#[tokio::test]
async fn rotation_needs_no_failed_request_and_removed_keys_are_refused() {
    let s = server().await;
    let mut settings = settings(&s);
    settings.jwks.refresh_min = Duration::from_millis(200);
    let v = JwtValidator::new(settings).unwrap();
    assert!(
        authorize(&v, "/read", corpus().token("rs256"))
            .await
            .is_ok()
    );
    assert!(
        authorize(&v, "/read", corpus().token("rs256"))
            .await
            .is_ok()
    );
    assert_eq!(v.metrics().validations(Validation::Cached), 1);

    // The issuer rotates: rsa-b appears, rsa-a is withdrawn. The first token signed with the
    // new key is accepted at once (one refetch for its kid).
    s.set(&corpus().jwks_rotated);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        authorize(&v, "/read", corpus().token("rotated_in"))
            .await
            .is_ok()
    );
    assert_eq!(s.fetches(), 2);
    // Tokens of the withdrawn key: refused, even the one verified (and cached) before.
    for name in ["rotated_out", "rs256"] {
        let denial = authorize(&v, "/read", corpus().token(name))
            .await
            .unwrap_err();
        assert_eq!(denial.refusal.status, 401, "{name}");
    }
    assert_eq!(v.key_count(), 4);
}

#[tokio::test]
async fn background_refresh_honours_max_age_within_bounds() {
    let s = JwksServer::start(&corpus().jwks, "public, max-age=1").await;
    let mut settings = settings(&s);
    settings.jwks.refresh_min = Duration::from_millis(500);
    settings.jwks.refresh_max = Duration::from_secs(60);
    let v = JwtValidator::new(settings).unwrap();
    v.start().await;
    assert_eq!(s.fetches(), 1);
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let n = s.fetches();
    assert!(
        (2..=4).contains(&n),
        "max-age=1: about one fetch a second, got {n}"
    );

    // max-age above the ceiling: the ceiling wins.
    let s = JwksServer::start(&corpus().jwks, "max-age=86400").await;
    let mut settings2 = self::settings(&s);
    settings2.jwks.refresh_min = Duration::from_millis(100);
    settings2.jwks.refresh_max = Duration::from_millis(700);
    let v2 = JwtValidator::new(settings2).unwrap();
    v2.start().await;
    // A key added in the background is used without any refetch on the request path.
    s.set(&corpus().jwks_rotated);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = s.fetches();
    assert!(before >= 2, "refreshed within the ceiling: {before}");
    assert!(
        authorize(&v2, "/read", corpus().token("rotated_in"))
            .await
            .is_ok()
    );
    assert_eq!(s.fetches(), before);
    drop((v, v2));
}

#[tokio::test]
async fn no_key_known_fails_closed_with_503() {
    let s = server().await;
    s.set_status(500);
    let v = JwtValidator::new(settings(&s)).unwrap();
    let denial = authorize(&v, "/read", corpus().token("rs256"))
        .await
        .unwrap_err();
    assert_eq!(
        (denial.refusal.status, denial.outcome),
        (503, Outcome::Unavailable)
    );
    assert_eq!(v.metrics().jwks_failures(), 1);
    // Unreachable altogether.
    let mut gone = settings(&s);
    gone.jwks.source = JwksSource::Url("http://127.0.0.1:9/jwks".into());
    let v = JwtValidator::new(gone).unwrap();
    assert_eq!(
        v.validate(corpus().token("rs256")).await,
        Credential::Unavailable
    );
    // A failed refresh keeps the keys already known.
    s.set_status(200);
    let mut quick = settings(&s);
    quick.jwks.refresh_min = Duration::from_millis(50);
    let v = JwtValidator::new(quick).unwrap();
    assert!(matches!(
        v.validate(corpus().token("rs256")).await,
        Credential::Checked(_)
    ));
    s.set_status(503);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(matches!(
        v.validate(&with_kid(corpus().token("rs256"), "new")).await,
        Credential::Invalid(_)
    ));
    assert_eq!(v.key_count(), 4);
    assert!(matches!(
        v.validate(corpus().token("eddsa")).await,
        Credential::Checked(_)
    ));
}

#[tokio::test]
async fn a_static_jwks_file() {
    let path = std::env::temp_dir().join(format!("tokengate-jwks-{}.json", std::process::id()));
    std::fs::write(&path, corpus().jwks.to_string()).unwrap();
    let s = JwtSettings::new(ISSUER, JwksSettings::new(JwksSource::File(path.clone())));
    let v = JwtValidator::new(s).unwrap();
    assert!(
        authorize(&v, "/read", corpus().token("rs256"))
            .await
            .is_ok()
    );
    // Audience disabled: another API's token is accepted.
    assert!(
        authorize_for(&v, None, "/read", corpus().token("wrong_aud"))
            .await
            .is_ok()
    );
    assert_eq!(
        authorize(&v, "/read", corpus().token("alg_none"))
            .await
            .unwrap_err()
            .refusal
            .status,
        401
    );
    std::fs::remove_file(&path).unwrap();
    // A missing file is a configuration error.
    let s = JwtSettings::new(ISSUER, JwksSettings::new(JwksSource::File(path)));
    assert!(JwtValidator::new(s).unwrap_err().starts_with("jwks: "));
}
