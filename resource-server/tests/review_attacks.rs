//! Security review: attacks on local JWT validation (tokens signed here with Ed25519 keys, keys
//! served from a JWKS file that the test rewrites). The first three showed a flaw, each failing
//! until its fix: a cached token outlived the withdrawal of its key when the token had no `kid`
//! or the key was replaced under the same `kid` (the cache now remembers the verifying key
//! itself). The others are attacks that held.

use test_support::ed25519_jwt;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ed25519_jwt::{JwksFile, b64, jwk, key, sign, sign_raw};
use http::{HeaderMap, HeaderValue, Method};
use resource_server::{Check, Credential, Gate, JwtValidator, Outcome, Rules};
use serde_json::{Value, json};

const ISSUER: &str = "https://idp.review";
const AUDIENCE: &str = "review-api";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn claims(scope: &str) -> Value {
    let t = now();
    json!({"iss": ISSUER, "aud": AUDIENCE, "exp": t + 3600, "iat": t, "sub": "mallory",
           "client_id": "app", "jti": format!("j-{t}"), "scope": scope})
}

/// Makes the validator re-read its JWKS, the way any token naming an unknown `kid` does.
async fn reread_jwks(v: &JwtValidator) {
    tokio::time::sleep(Duration::from_millis(80)).await;
    let probe = sign(&key(99), Some("no-such-kid"), &claims("read"));
    assert!(matches!(v.validate(&probe).await, Credential::Invalid(_)));
}

/// Publishes `keys` instead of the file's keys, lets `v` read them, and checks that `token`
/// (verified and cached by `v` before) is refused, by `v` as by a fresh validator.
async fn publish_instead(file: &JwksFile, v: &JwtValidator, keys: &[Value], token: &str) {
    file.set(keys);
    reread_jwks(v).await;
    let fresh = JwtValidator::new(file.settings(ISSUER)).unwrap();
    assert!(
        matches!(fresh.validate(token).await, Credential::Invalid(_)),
        "its key is gone: a fresh validator refuses it"
    );
    assert!(
        !is_checked(&v.validate(token).await),
        "a token whose key has left the JWKS is still accepted from the cache"
    );
}

fn is_checked(c: &Credential) -> bool {
    matches!(c, Credential::Checked(_))
}

/// The issuer withdraws a key (rotation, or a compromised key) whose tokens carry no `kid`.
/// A fresh validator refuses the token; the validator that verified it once before kept
/// accepting it from its cache until `exp`, because a cached entry without a `kid` was never
/// re-checked against the key set.
#[tokio::test]
async fn cached_token_without_kid_outlives_the_removal_of_its_key() {
    let (old, new) = (key(1), key(2));
    let file = JwksFile::new(&[jwk(&old, Some("key-1"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    // A token without kid, valid until the year 9999 (what a holder of a leaked key would
    // mint): verified with the only key that fits (key-1), and cached until its exp.
    let mut forged = claims("read write groups admin");
    forged["exp"] = json!(253_402_300_799_i64);
    let token = sign(&old, None, &forged);
    assert!(is_checked(&v.validate(&token).await));

    // key-1 is withdrawn, key-2 published.
    publish_instead(&file, &v, &[jwk(&new, Some("key-2"))], &token).await;
    assert_eq!(v.key_count(), 1);
}

/// Same with a JWKS whose keys carry no `kid` at all (a static one-key file).
#[tokio::test]
async fn cached_token_of_a_kidless_key_outlives_its_replacement() {
    let (old, new) = (key(3), key(4));
    let file = JwksFile::new(&[jwk(&old, None)]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let token = sign(&old, None, &claims("read"));
    assert!(is_checked(&v.validate(&token).await));
    publish_instead(&file, &v, &[jwk(&new, None)], &token).await;
}

/// The issuer replaces a compromised key but keeps its `kid` (kid "1", "default", ...): a check
/// by kid alone kept serving the cached token of the withdrawn key.
#[tokio::test]
async fn cached_token_outlives_a_key_replaced_under_the_same_kid() {
    let (old, new) = (key(5), key(6));
    let file = JwksFile::new(&[jwk(&old, Some("1"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let token = sign(&old, Some("1"), &claims("read write"));
    assert!(is_checked(&v.validate(&token).await));
    publish_instead(&file, &v, &[jwk(&new, Some("1"))], &token).await;
}

// ---- attacks that held ----

/// A key embedded in the header (`jwk`), or pointed at (`jku`, `x5u`), is never used: the
/// attacker's self-signed token is refused and its URL never fetched.
#[tokio::test]
async fn header_keys_and_key_urls_are_ignored() {
    let (issuer_key, attacker) = (key(7), key(8));
    let file = JwksFile::new(&[jwk(&issuer_key, Some("k"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let payload = claims("read write groups");
    for extra in [
        json!({"jwk": jwk(&attacker, Some("k"))}),
        json!({"jwk": jwk(&attacker, None)}),
        json!({"jku": "http://127.0.0.1:9/jwks.json", "kid": "k"}),
        json!({"x5u": "http://127.0.0.1:9/cert.pem", "kid": "k"}),
        json!({"kid": "k", "x5c": ["AAAA"]}),
    ] {
        let mut header = json!({"alg": "EdDSA", "typ": "at+jwt"});
        for (k, val) in extra.as_object().unwrap() {
            header[k] = val.clone();
        }
        let token = sign_raw(&attacker, &header, &payload);
        assert!(
            matches!(v.validate(&token).await, Credential::Invalid(_)),
            "{header}"
        );
    }
}

/// `crit`, a nested JWT (`cty: JWT`, payload a JWS string), `alg` in odd case or `none`, a
/// `typ` of `JWT`, and the right token with a payload swapped in: all refused.
#[tokio::test]
async fn header_confusions_are_refused() {
    let k = key(9);
    let file = JwksFile::new(&[jwk(&k, Some("k"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let p = claims("read");
    let inner = sign(&k, Some("k"), &p);
    let cases = [
        sign_raw(
            &k,
            &json!({"alg":"EdDSA","typ":"at+jwt","kid":"k","crit":["exp"],"exp":1}),
            &p,
        ),
        sign_raw(
            &k,
            &json!({"alg":"EdDSA","typ":"at+jwt","kid":"k","cty":"JWT"}),
            &json!(inner),
        ),
        sign_raw(&k, &json!({"alg":"eddsa","typ":"at+jwt","kid":"k"}), &p),
        sign_raw(&k, &json!({"alg":"Ed25519","typ":"at+jwt","kid":"k"}), &p),
        sign_raw(&k, &json!({"alg":"EdDSA","typ":"JWT","kid":"k"}), &p),
        sign_raw(&k, &json!({"alg":"EdDSA","kid":"k"}), &p),
        format!(
            "{}.{}.",
            b64(r#"{"alg":"none","typ":"at+jwt"}"#),
            b64(p.to_string())
        ),
    ];
    for token in &cases {
        assert!(
            matches!(v.validate(token).await, Credential::Invalid(_)),
            "{token}"
        );
    }
    // The signature of one token over another's payload.
    let good = sign(&k, Some("k"), &p);
    let other = sign(&k, Some("k"), &claims("read write groups admin"));
    let (gh, rest) = good.split_once('.').unwrap();
    let sig = rest.rsplit_once('.').unwrap().1;
    let op = other.split('.').nth(1).unwrap();
    let spliced = format!("{gh}.{op}.{sig}");
    assert!(matches!(v.validate(&spliced).await, Credential::Invalid(_)));
    assert!(is_checked(&v.validate(&good).await));
}

fn rules() -> Rules {
    Rules::from_yaml(
        "routes:\n  - { name: admin, path: /admin, scopes: [admin] }\n",
        "review.yaml",
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

/// Claim-type tricks: `scp` when the scope claim is `scope`, a scope string with a non-ASCII
/// lookalike, an `aud` string naming two audiences, a scope array with an item holding a space,
/// an `exp` far in the future as a float, `nbf` beyond the leeway.
#[tokio::test]
async fn claim_confusions_grant_nothing() {
    let k = key(10);
    let file = JwksFile::new(&[jwk(&k, Some("k"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let audience = resource_server::Audience::new(vec![AUDIENCE.into()]).unwrap();
    let gate = Gate::new(rules(), Check::Jwt(v.clone())).with_audience(Some(audience));
    let outcome = |token: String| {
        let gate = &gate;
        async move {
            let uri = "/admin".parse().unwrap();
            match gate
                .authorize(&Method::GET, &uri, &bearer(&token), None)
                .await
            {
                Ok(_) => Outcome::Allow,
                Err(d) => d.outcome,
            }
        }
    };
    let with = |field: &str, value: Value| {
        let mut p = claims("read");
        p[field] = value;
        p
    };
    // Only `scope` is read.
    let mut p = claims("read");
    p["scp"] = json!(["admin"]);
    assert_eq!(
        outcome(sign(&k, Some("k"), &p)).await,
        Outcome::InsufficientScope
    );
    assert_eq!(
        outcome(sign(&k, Some("k"), &with("scope", json!("аdmin")))).await,
        Outcome::InsufficientScope,
        "Cyrillic a"
    );
    assert_eq!(
        outcome(sign(&k, Some("k"), &with("scope", json!("ADMIN")))).await,
        Outcome::InsufficientScope
    );
    for (field, value) in [
        ("scope", json!(["read admin"])),
        ("scope", json!({"admin": true})),
        ("aud", json!(format!("{AUDIENCE} other"))),
        ("aud", json!([[AUDIENCE]])),
        ("exp", json!(1e300)),
        ("exp", json!(format!("{}", now() + 60))),
        ("nbf", json!(now() + 120)),
        ("iat", json!(now() + 120)),
        ("iss", json!(format!("{ISSUER}/"))),
        ("client_id", json!(null)),
    ] {
        assert_eq!(
            outcome(sign(&k, Some("k"), &with(field, value.clone()))).await,
            Outcome::InvalidToken,
            "{field}: {value}"
        );
    }
    assert_eq!(
        outcome(sign(
            &k,
            Some("k"),
            &with("scope", json!(["read", "admin"]))
        ))
        .await,
        Outcome::Allow
    );
}

/// Two keys under one `kid` (duplicate kids): a token signed by a key that is not in the set
/// is refused whichever key comes first, and no key of another type is tried for `EdDSA`.
#[tokio::test]
async fn duplicate_kids_never_accept_a_stranger() {
    let (a, b, stranger) = (key(11), key(12), key(13));
    let file = JwksFile::new(&[jwk(&a, Some("dup")), jwk(&b, Some("dup"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let p = claims("read");
    assert!(is_checked(&v.validate(&sign(&a, Some("dup"), &p)).await));
    assert!(matches!(
        v.validate(&sign(&stranger, Some("dup"), &p)).await,
        Credential::Invalid(_)
    ));
    // No kid with two fitting keys: refused (ambiguous), never "any key that verifies".
    assert!(matches!(
        v.validate(&sign(&stranger, None, &p)).await,
        Credential::Invalid(_)
    ));
}

/// RFC 9068 §2.2 requires `sub`. A token without one, or with a null, was accepted: the routes'
/// scopes were all that was checked (round 3, item 12).
#[tokio::test]
async fn a_token_about_nobody_is_refused() {
    let k = key(14);
    let file = JwksFile::new(&[jwk(&k, Some("k"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    for sub in [None, Some(Value::Null)] {
        let mut p = claims("admin");
        match sub {
            None => drop(p.as_object_mut().unwrap().remove("sub")),
            Some(null) => p["sub"] = null,
        }
        assert!(
            matches!(
                v.validate(&sign(&k, Some("k"), &p)).await,
                Credential::Invalid(_)
            ),
            "{p}"
        );
    }
    assert!(is_checked(
        &v.validate(&sign(&k, Some("k"), &claims("admin"))).await
    ));
}

/// Our authorization server's JWT of a user: `sub` is the user's numeric id, `username` the
/// name. With the default settings `X-Auth-Username` was the id, so an API keyed on names saw
/// "7" (a user who might be named "7" by someone else); it is now the `username` claim, as
/// introspection answers give it (round 3, item 12).
#[tokio::test]
async fn the_username_header_is_the_username_not_the_numeric_sub() {
    let k = key(15);
    let file = JwksFile::new(&[jwk(&k, Some("k"))]);
    let v = JwtValidator::new(file.settings(ISSUER)).unwrap();
    let gate = Gate::new(rules(), Check::Jwt(v));
    let uri = "/admin".parse().unwrap();
    let mut p = claims("admin");
    p["sub"] = json!("7");
    p["username"] = json!("alice");
    let allow = gate
        .authorize(&Method::GET, &uri, &bearer(&sign(&k, Some("k"), &p)), None)
        .await
        .unwrap();
    let identity = allow.identity.unwrap();
    assert_eq!(identity.username.as_deref(), Some("alice"));
    // A client's own token (client_credentials) has no username: no header, not the client id.
    p.as_object_mut().unwrap().remove("username");
    p["sub"] = json!("app");
    let allow = gate
        .authorize(&Method::GET, &uri, &bearer(&sign(&k, Some("k"), &p)), None)
        .await
        .unwrap();
    assert_eq!(allow.identity.unwrap().username, None);
}
