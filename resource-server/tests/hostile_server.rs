//! A hostile RFC 7662 server: wrong types, strings for booleans, numbers out of range, refresh
//! tokens, tokens not yet valid, other issuers and audiences, slow, truncated, oversized and
//! non-JSON answers, 5xx. For each, the exact outcome of `TokenChecker::check` + the gate's
//! audience + `decide`, and the counters: nothing is ever allowed, unreadable answers are 503 and counted as malformed,
//! answers that say "not for you" are 401.

use test_support::fake_server;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_server::{FakeServer, Reply, json};
use http::Method;
use resource_server::decision::{EXPIRED_TOKEN, INACTIVE_TOKEN, NOT_YET_VALID_TOKEN};
use resource_server::outage::PROBE_BACKOFF;
use resource_server::{
    AnswerPolicy, Audience, CacheSettings, ClientAuth, Credential, Decision, IntrospectionSettings,
    Rules, TokenChecker, Unavailable, WRONG_AUDIENCE, decide,
};
use serde_json::{Value, json as j};

const ISSUER: &str = "https://auth.example";
const AUDIENCE: &str = "api";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// An answer the checker accepts: active, scope `read`, the expected issuer and audience.
fn good() -> Value {
    j!({
        "active": true,
        "scope": "read write",
        "client_id": "app",
        "username": "alice",
        "sub": "42",
        "token_type": "Bearer",
        "exp": now() + 3600,
        "iat": now() - 10,
        "iss": ISSUER,
        "aud": [AUDIENCE, "other"],
    })
}

/// [`good`] with `field` set to `value` (`None` removes it).
fn with(field: &str, value: Option<Value>) -> String {
    let mut v = good();
    let map = v.as_object_mut().unwrap();
    match value {
        Some(value) => map.insert(field.into(), value),
        None => map.remove(field),
    };
    v.to_string()
}

fn status(status: u16, body: &str) -> Reply {
    Reply::Json {
        status,
        body: body.into(),
        delay: Duration::ZERO,
    }
}

const TIMEOUT: Duration = Duration::from_millis(400);

fn checker(server: &FakeServer, cache: CacheSettings) -> TokenChecker {
    let settings = IntrospectionSettings {
        url: server.url.clone(),
        auth: ClientAuth::Bearer("rs-secret".into()),
        connect_timeout: Duration::from_millis(500),
        request_timeout: TIMEOUT,
        policy: AnswerPolicy {
            issuer: Some(ISSUER.into()),
            leeway: Duration::from_secs(5),
        },
    };
    TokenChecker::new(settings, cache).unwrap()
}

fn cache(max_ttl_ms: u64, negative_ttl_ms: u64, grace_ms: u64) -> CacheSettings {
    CacheSettings {
        max_ttl: Duration::from_millis(max_ttl_ms),
        negative_ttl: Duration::from_millis(negative_ttl_ms),
        capacity: 1000,
        stale_grace: Duration::from_millis(grace_ms),
    }
}

fn rules() -> Rules {
    Rules::from_yaml(
        "routes:\n  - { name: api, prefix: /api/, scopes: [read] }\n",
        "test.yaml",
    )
    .unwrap()
}

/// What the proxy or the example API decides for `GET /api/x` with `token`, its audience
/// [`AUDIENCE`].
async fn outcome(checker: &TokenChecker, rules: &Rules, token: &str) -> Decision {
    let route = rules.find(&Method::GET, "/api/x");
    assert!(route.is_some());
    let credential = match checker.check(token).await {
        Ok(claims) => Credential::Checked(claims),
        Err(Unavailable) => Credential::Unavailable,
    };
    let audience = Audience::new(vec![AUDIENCE.into()]).unwrap();
    decide(route, &audience.screen(credential), checker.leeway())
}

/// After a failure that began an outage, waits until the checker's next probe is due, so that
/// the next check reaches the server.
async fn probe_due(checker: &TokenChecker) {
    if checker.is_failing() {
        tokio::time::sleep(PROBE_BACKOFF.max).await;
    }
}

/// How a hostile answer must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// 503, counted as a malformed answer.
    Malformed,
    /// 503, an error but not a malformed answer (status, transport, timeout, size).
    Failed,
    /// 401 with this `error_description`; `refused` when the policy turned it down.
    Invalid(&'static str, bool),
}

fn truncated_close_delimited() -> Reply {
    Reply::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"active\":true,\"scope\":\"re"
            .to_vec(),
    )
}

fn truncated_with_length() -> Reply {
    Reply::Raw(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"active\":true}"
            .to_vec(),
    )
}

fn oversized(announced: bool) -> Reply {
    let mut body = with("padding", Some(Value::String("x".repeat(70_000))));
    if announced {
        return json(&body);
    }
    body.insert_str(
        0,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
    );
    Reply::Raw(body.into_bytes())
}

fn cases() -> Vec<(&'static str, Reply, Want)> {
    use Want::*;
    let t = now();
    let deep = format!(
        "{{\"active\":true,\"x\":{}{}}}",
        "[".repeat(300),
        "]".repeat(300)
    );
    vec![
        // Strings and other types for the boolean.
        (
            "active string true",
            json(&with("active", Some(j!("true")))),
            Malformed,
        ),
        (
            "active string TRUE",
            json(&with("active", Some(j!("TRUE")))),
            Malformed,
        ),
        (
            "active number 1",
            json(&with("active", Some(j!(1)))),
            Malformed,
        ),
        (
            "active array",
            json(&with("active", Some(j!([true])))),
            Malformed,
        ),
        (
            "active object",
            json(&with("active", Some(j!({"v": true})))),
            Malformed,
        ),
        // Times: huge, negative, strings, beyond year 9999.
        ("exp 1e300", json(&with("exp", Some(j!(1e300)))), Malformed),
        (
            "exp u64 max",
            json(&with("exp", Some(j!(u64::MAX)))),
            Malformed,
        ),
        (
            "exp i64 max",
            json(&with("exp", Some(j!(i64::MAX)))),
            Malformed,
        ),
        (
            "exp year 10000",
            json(&with("exp", Some(j!(253_402_300_800_i64)))),
            Malformed,
        ),
        ("exp negative", json(&with("exp", Some(j!(-1)))), Malformed),
        (
            "exp negative float",
            json(&with("exp", Some(j!(-0.5)))),
            Malformed,
        ),
        (
            "exp string",
            json(&with("exp", Some(j!((t + 3600).to_string())))),
            Malformed,
        ),
        (
            "iat huge float",
            json(&with("iat", Some(j!(9.3e18)))),
            Malformed,
        ),
        ("nbf string", json(&with("nbf", Some(j!("0")))), Malformed),
        ("nbf bool", json(&with("nbf", Some(j!(false)))), Malformed),
        // Identity fields of the wrong type.
        (
            "username object",
            json(&with("username", Some(j!({"name": "alice"})))),
            Malformed,
        ),
        (
            "username number",
            json(&with("username", Some(j!(7)))),
            Malformed,
        ),
        (
            "client_id number",
            json(&with("client_id", Some(j!(42)))),
            Malformed,
        ),
        ("sub number", json(&with("sub", Some(j!(42)))), Malformed),
        (
            "token_type array",
            json(&with("token_type", Some(j!(["Bearer"])))),
            Malformed,
        ),
        ("iss number", json(&with("iss", Some(j!(1)))), Malformed),
        (
            "scope object",
            json(&with("scope", Some(j!({"read": true})))),
            Malformed,
        ),
        (
            "scope mixed array",
            json(&with("scope", Some(j!(["read", 1])))),
            Malformed,
        ),
        (
            "aud object",
            json(&with("aud", Some(j!({"api": true})))),
            Malformed,
        ),
        (
            "aud mixed array",
            json(&with("aud", Some(j!([AUDIENCE, null])))),
            Malformed,
        ),
        // Not an object, not JSON, cut short.
        ("array", json("[true]"), Malformed),
        ("bare true", json("true"), Malformed),
        ("not json", json("active=true"), Malformed),
        ("html", json("<html>OK</html>"), Malformed),
        ("empty body", json(""), Malformed),
        ("deeply nested", json(&deep), Malformed),
        (
            "truncated, close-delimited",
            truncated_close_delimited(),
            Malformed,
        ),
        // Failures that are not about the answer's content.
        ("truncated, Content-Length", truncated_with_length(), Failed),
        ("oversized, announced", oversized(true), Failed),
        ("oversized, close-delimited", oversized(false), Failed),
        (
            "500 with an active body",
            status(500, &good().to_string()),
            Failed,
        ),
        ("503", status(503, "{}"), Failed),
        ("401", status(401, &good().to_string()), Failed),
        ("302", status(302, ""), Failed),
        ("closed without answer", Reply::Close, Failed),
        ("not HTTP", Reply::Raw(b"garbage\r\n\r\n".to_vec()), Failed),
        (
            "slower than the timeout",
            Reply::Json {
                status: 200,
                body: good().to_string(),
                delay: TIMEOUT * 2,
            },
            Failed,
        ),
        (
            "body dripping past the timeout",
            Reply::Drip {
                bytes: 100,
                every: Duration::from_millis(20),
            },
            Failed,
        ),
        // Well-formed answers that must not let the token in.
        (
            "active missing",
            json(&with("active", None)),
            Invalid(INACTIVE_TOKEN, false),
        ),
        (
            "active null",
            json(&with("active", Some(Value::Null))),
            Invalid(INACTIVE_TOKEN, false),
        ),
        (
            "active false",
            json(&with("active", Some(j!(false)))),
            Invalid(INACTIVE_TOKEN, false),
        ),
        ("empty object", json("{}"), Invalid(INACTIVE_TOKEN, false)),
        (
            "refresh token",
            json(&with("token_type", Some(j!("refresh_token")))),
            Invalid(INACTIVE_TOKEN, true),
        ),
        (
            "refresh token, upper case",
            json(&with("token_type", Some(j!("REFRESH_TOKEN")))),
            Invalid(INACTIVE_TOKEN, true),
        ),
        (
            "other issuer",
            json(&with("iss", Some(j!("https://evil.example")))),
            Invalid(INACTIVE_TOKEN, true),
        ),
        (
            "issuer with a slash",
            json(&with("iss", Some(j!("https://auth.example/")))),
            Invalid(INACTIVE_TOKEN, true),
        ),
        (
            "issuer missing",
            json(&with("iss", None)),
            Invalid(INACTIVE_TOKEN, true),
        ),
        (
            "other audience",
            json(&with("aud", Some(j!(["web", "API"])))),
            Invalid(WRONG_AUDIENCE, false),
        ),
        (
            "audience missing",
            json(&with("aud", None)),
            Invalid(WRONG_AUDIENCE, false),
        ),
        (
            "audience empty",
            json(&with("aud", Some(j!([])))),
            Invalid(WRONG_AUDIENCE, false),
        ),
        (
            "expired",
            json(&with("exp", Some(j!(t - 60)))),
            Invalid(EXPIRED_TOKEN, false),
        ),
        (
            "expired past the leeway",
            json(&with("exp", Some(j!(t - 6)))),
            Invalid(EXPIRED_TOKEN, false),
        ),
        (
            "expired long ago",
            json(&with("exp", Some(j!(0)))),
            Invalid(EXPIRED_TOKEN, false),
        ),
        (
            "nbf in the future",
            json(&with("nbf", Some(j!(t + 3600)))),
            Invalid(NOT_YET_VALID_TOKEN, false),
        ),
        (
            "nbf past the leeway",
            json(&with("nbf", Some(j!(t + 30)))),
            Invalid(NOT_YET_VALID_TOKEN, false),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_answers_are_never_allowed() {
    let server = FakeServer::start(json("{}")).await;
    let checker = checker(&server, cache(60_000, 60_000, 60_000));
    let rules = rules();
    let m = checker.metrics();
    for (i, (name, reply, want)) in cases().into_iter().enumerate() {
        server.set(reply);
        let (errors, malformed, refused) = (m.errors(), m.malformed(), m.refused());
        let started = std::time::Instant::now();
        let got = outcome(&checker, &rules, &format!("hostile-{i}")).await;
        assert!(!got.is_allow(), "{name}: allowed");
        let expected = match want {
            Want::Malformed | Want::Failed => Decision::Unavailable,
            Want::Invalid(why, _) => Decision::InvalidToken(why),
        };
        assert_eq!(got, expected, "{name}");
        let failed = matches!(want, Want::Malformed | Want::Failed);
        assert_eq!(m.errors() - errors, u64::from(failed), "{name}: errors");
        assert_eq!(
            m.malformed() - malformed,
            u64::from(want == Want::Malformed),
            "{name}: malformed"
        );
        assert_eq!(
            m.refused() - refused,
            u64::from(matches!(want, Want::Invalid(_, true))),
            "{name}: refused"
        );
        // Every call is bounded by the request timeout.
        assert!(
            started.elapsed() < TIMEOUT + Duration::from_millis(600),
            "{name} took {:?}",
            started.elapsed()
        );
        // Asked again: failures were not cached, answers were (but never past their exp).
        probe_due(&checker).await;
        let calls = server.calls();
        let again = outcome(&checker, &rules, &format!("hostile-{i}")).await;
        assert_eq!(again, got, "{name}: second time");
        let cached = !failed && want != Want::Invalid(EXPIRED_TOKEN, false);
        assert_eq!(
            server.calls() - calls,
            usize::from(!cached),
            "{name}: cached?"
        );
        probe_due(&checker).await;
    }
    assert_eq!(checker.metrics().stale_served(), 0);
    let text = resource_server::metrics::text("tokengate_proxy", {
        let checker = checker.clone();
        move |s| checker.collect(s)
    });
    let count = |f: fn(&Want) -> bool| cases().iter().filter(|c| f(&c.2)).count();
    // Malformed answers were asked for twice (never cached); refusals once.
    let malformed = 2 * count(|w| *w == Want::Malformed);
    let refused = count(|w| matches!(w, Want::Invalid(_, true)));
    assert_eq!(refused, 5);
    assert!(
        text.contains(&format!(
            "# TYPE tokengate_proxy_introspection_malformed counter\ntokengate_proxy_introspection_malformed_total {malformed}\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "\ntokengate_proxy_introspection_refused_total {refused}\n"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn what_a_strict_check_still_accepts() {
    let server = FakeServer::start(json(&good().to_string())).await;
    let checker = checker(&server, cache(0, 0, 0));
    let rules = rules();
    let t = now();
    let allowed = |d: Decision| match d {
        Decision::Allow(Some(identity)) => identity,
        other => panic!("{other:?}"),
    };
    let id = allowed(outcome(&checker, &rules, "good").await);
    assert_eq!(
        (id.username.as_deref(), id.scope.as_str()),
        (Some("alice"), "read write")
    );
    for (name, body) in [
        ("aud as a string", with("aud", Some(j!(AUDIENCE)))),
        ("exp within the leeway", with("exp", Some(j!(t - 2)))),
        ("nbf within the leeway", with("nbf", Some(j!(t + 3)))),
        ("nbf now", with("nbf", Some(j!(t)))),
        ("float exp", with("exp", Some(j!(t as f64 + 3600.75)))),
        ("null fields", with("username", Some(Value::Null))),
        ("scope as an array", with("scope", Some(j!(["read"])))),
        ("extra fields", with("cnf", Some(j!({"x5t#S256": "abc"})))),
        (
            "token_type access_token",
            with("token_type", Some(j!("access_token"))),
        ),
    ] {
        server.set(json(&body));
        allowed(outcome(&checker, &rules, name).await);
    }
    // The largest exp accepted is forwarded as is (never i64::MAX).
    server.set(json(&with("exp", Some(j!(253_402_300_799_i64)))));
    let id = allowed(outcome(&checker, &rules, "far").await);
    assert!(
        id.headers()
            .contains(&("x-auth-expires", "253402300799".to_owned()))
    );
    server.set(json(&with("scope", Some(j!("write")))));
    assert_eq!(
        outcome(&checker, &rules, "no read").await,
        Decision::InsufficientScope("read".into())
    );
    assert_eq!(checker.metrics().malformed(), 0);
    assert_eq!(checker.metrics().refused(), 0);
}

#[tokio::test]
async fn refused_answers_are_cached_for_the_negative_ttl() {
    let server = FakeServer::start(json(&with("token_type", Some(j!("refresh_token"))))).await;
    let checker = checker(&server, cache(60_000, 300, 0));
    let rules = rules();
    for _ in 0..3 {
        assert_eq!(
            outcome(&checker, &rules, "refresh").await,
            Decision::InvalidToken(INACTIVE_TOKEN)
        );
    }
    assert_eq!(server.calls(), 1);
    assert_eq!(checker.metrics().refused(), 1);
    tokio::time::sleep(Duration::from_millis(450)).await;
    outcome(&checker, &rules, "refresh").await;
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn stale_grace_never_serves_malformed_or_refused_answers() {
    let server = FakeServer::start(json(&good().to_string())).await;
    let checker = checker(&server, cache(200, 100, 60_000));
    let rules = rules();
    for token in [
        "turns-malformed",
        "turns-refresh",
        "turns-other-audience",
        "stays-good",
    ] {
        assert!(outcome(&checker, &rules, token).await.is_allow(), "{token}");
    }
    tokio::time::sleep(Duration::from_millis(250)).await; // past max_ttl
    server.set(json(&with("active", Some(j!("true")))));
    assert_eq!(
        outcome(&checker, &rules, "turns-malformed").await,
        Decision::Unavailable
    );
    server.set(json(&with("token_type", Some(j!("refresh_token")))));
    assert_eq!(
        outcome(&checker, &rules, "turns-refresh").await,
        Decision::InvalidToken(INACTIVE_TOKEN)
    );
    server.set(json(&with("aud", Some(j!("web")))));
    assert_eq!(
        outcome(&checker, &rules, "turns-other-audience").await,
        Decision::InvalidToken(WRONG_AUDIENCE)
    );
    assert_eq!(checker.metrics().stale_served(), 0);
    // Now the server is down: only the token whose last answer was good is served stale; the
    // one whose last answer names another API is served as it was, and still refused.
    server.stop();
    tokio::time::sleep(Duration::from_millis(250)).await;
    for token in ["turns-malformed", "turns-refresh"] {
        assert_eq!(
            outcome(&checker, &rules, token).await,
            Decision::Unavailable,
            "{token}"
        );
    }
    assert_eq!(
        outcome(&checker, &rules, "turns-other-audience").await,
        Decision::InvalidToken(WRONG_AUDIENCE)
    );
    assert!(outcome(&checker, &rules, "stays-good").await.is_allow());
    assert_eq!(checker.metrics().stale_served(), 2);
}
