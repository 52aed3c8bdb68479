//! TokenChecker against a real (tiny) HTTP/1.1 introspection server on 127.0.0.1:0.

use test_support::fake_server;

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_server::{FakeServer, Reply, json};
use resource_server::outage::PROBE_BACKOFF;
use resource_server::{
    AnswerPolicy, CacheSettings, ClientAuth, IntrospectionSettings, TokenChecker, Unavailable,
};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn active_until(exp: i64) -> String {
    format!(
        r#"{{"active":true,"scope":"read write","client_id":"app","username":"alice","exp":{exp}}}"#
    )
}

fn settings(server: &FakeServer) -> IntrospectionSettings {
    IntrospectionSettings {
        url: server.url.clone(),
        auth: ClientAuth::Bearer("rs-secret".into()),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1000),
        policy: AnswerPolicy::default(),
    }
}

fn cache(max_ttl_ms: u64, negative_ttl_ms: u64, grace_ms: u64) -> CacheSettings {
    CacheSettings {
        max_ttl: Duration::from_millis(max_ttl_ms),
        negative_ttl: Duration::from_millis(negative_ttl_ms),
        capacity: 1000,
        stale_grace: Duration::from_millis(grace_ms),
    }
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test]
async fn active_answer_is_cached_and_max_ttl_bounds_it() {
    let server = FakeServer::start(json(&active_until(now() + 3600))).await;
    let checker = TokenChecker::new(settings(&server), cache(400, 100, 0)).unwrap();
    for _ in 0..3 {
        let c = checker.check("tok-a").await.unwrap();
        assert!(c.active);
        assert_eq!(c.username.as_deref(), Some("alice"));
    }
    assert_eq!(server.calls(), 1);
    assert_eq!(
        (checker.metrics().hits(), checker.metrics().misses()),
        (2, 1)
    );
    // Another token is another entry.
    checker.check("tok-b").await.unwrap();
    assert_eq!(server.calls(), 2);
    // max_ttl (400 ms) is shorter than exp (1 h): the entry expires.
    sleep_ms(550).await;
    checker.check("tok-a").await.unwrap();
    assert_eq!(server.calls(), 3);
    // One keep-alive connection carried every call.
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn entry_never_outlives_exp() {
    let exp = now() + 2;
    let server = FakeServer::start(json(&active_until(exp))).await;
    let checker = TokenChecker::new(settings(&server), cache(60_000, 100, 0)).unwrap();
    checker.check("tok").await.unwrap();
    checker.check("tok").await.unwrap();
    assert_eq!(server.calls(), 1);
    // Wait until exp has passed: the next check asks again although max_ttl is 60 s.
    while now() <= exp {
        sleep_ms(100).await;
    }
    checker.check("tok").await.unwrap();
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn inactive_answer_is_cached_for_negative_ttl() {
    let server = FakeServer::start(json(r#"{"active":false}"#)).await;
    let checker = TokenChecker::new(settings(&server), cache(60_000, 300, 0)).unwrap();
    assert!(!checker.check("bad").await.unwrap().active);
    assert!(!checker.check("bad").await.unwrap().active);
    assert_eq!(server.calls(), 1);
    sleep_ms(450).await;
    assert!(!checker.check("bad").await.unwrap().active);
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn zero_max_ttl_turns_the_cache_off() {
    let server = FakeServer::start(json(&active_until(now() + 3600))).await;
    let checker = TokenChecker::new(settings(&server), cache(0, 1000, 1000)).unwrap();
    for _ in 0..3 {
        assert!(checker.check("tok").await.unwrap().active);
    }
    assert_eq!(server.calls(), 3);
    assert_eq!(checker.metrics().misses(), 3);
    assert_eq!(checker.entry_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_make_one_call() {
    let server = FakeServer::start(Reply::Json {
        status: 200,
        body: active_until(now() + 3600),
        delay: Duration::from_millis(300),
    })
    .await;
    let checker = TokenChecker::new(settings(&server), cache(60_000, 100, 0)).unwrap();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let c = checker.clone();
        set.spawn(async move { c.check("new-token").await });
    }
    while let Some(r) = set.join_next().await {
        assert!(r.unwrap().unwrap().active);
    }
    assert_eq!(server.calls(), 1);
    let m = checker.metrics();
    assert_eq!(m.misses(), 1);
    assert_eq!(m.hits() + m.coalesced(), 49);
    assert!(m.coalesced() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_failures_make_one_call_and_are_not_cached() {
    let server = FakeServer::start(Reply::Json {
        status: 500,
        body: "{}".into(),
        delay: Duration::from_millis(300),
    })
    .await;
    let checker = TokenChecker::new(settings(&server), cache(60_000, 100, 0)).unwrap();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let c = checker.clone();
        set.spawn(async move { c.check("tok").await });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap(), Err(Unavailable));
    }
    assert_eq!(server.calls(), 1);
    assert_eq!(checker.metrics().errors(), 1);
    // The failure was not cached. (A 5xx also began an outage: the next call is its probe, due
    // after the first backoff.)
    tokio::time::sleep(PROBE_BACKOFF.initial).await;
    server.set(json(&active_until(now() + 3600)));
    assert!(checker.check("tok").await.unwrap().active);
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn unavailable_server_fails_closed() {
    let server = FakeServer::start(json(&active_until(now() + 3600))).await;
    let checker = TokenChecker::new(settings(&server), cache(60_000, 100, 0)).unwrap();
    server.stop();
    sleep_ms(50).await;
    assert_eq!(checker.check("tok").await, Err(Unavailable));
    assert_eq!(checker.metrics().errors(), 1);
    assert_eq!(checker.metrics().last_success(), None);
}

#[tokio::test]
async fn bad_answers_are_unavailable() {
    let server = FakeServer::start(json("not json")).await;
    let mut s = settings(&server);
    s.request_timeout = Duration::from_millis(300);
    let checker = TokenChecker::new(s, cache(60_000, 100, 0)).unwrap();
    let cases = [
        json("not json"),
        json("[1, 2]"),
        json(r#"{"active":true,"exp":"soon"}"#),
        Reply::Json {
            status: 401,
            body: r#"{"active":true}"#.into(),
            delay: Duration::ZERO,
        },
        Reply::Json {
            status: 503,
            body: r#"{"active":true}"#.into(),
            delay: Duration::ZERO,
        },
        Reply::Json {
            status: 302,
            body: String::new(),
            delay: Duration::ZERO,
        },
        Reply::Close,
        // Slower than the request timeout.
        Reply::Json {
            status: 200,
            body: active_until(now() + 3600),
            delay: Duration::from_millis(800),
        },
    ];
    for (i, reply) in cases.into_iter().enumerate() {
        server.set(reply);
        let started = std::time::Instant::now();
        assert_eq!(
            checker.check(&format!("tok-{i}")).await,
            Err(Unavailable),
            "case {i}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(700),
            "case {i} took {:?}",
            started.elapsed()
        );
        // A failure that says the server is down began an outage: wait for its probe, so that
        // the next case reaches the server too.
        if checker.is_failing() {
            tokio::time::sleep(PROBE_BACKOFF.max).await;
        }
    }
    assert_eq!(checker.metrics().errors(), 8);
    assert_eq!(checker.entry_count(), 0);
}

#[tokio::test]
async fn stale_grace_serves_a_previous_active_answer_while_down() {
    let server = FakeServer::start(json(&active_until(now() + 3600))).await;
    let checker = TokenChecker::new(settings(&server), cache(200, 100, 1500)).unwrap();
    let no_grace = TokenChecker::new(settings(&server), cache(200, 100, 0)).unwrap();
    checker.check("tok").await.unwrap();
    no_grace.check("tok").await.unwrap();
    server.stop();
    sleep_ms(300).await; // past max_ttl: the fresh entries are gone
    let c = checker.check("tok").await.expect("served stale");
    assert!(c.active);
    assert_eq!(c.username.as_deref(), Some("alice"));
    assert_eq!(checker.metrics().stale_served(), 1);
    assert_eq!(no_grace.check("tok").await, Err(Unavailable));
    // Tokens never seen are not served.
    assert_eq!(checker.check("other").await, Err(Unavailable));
    // Past max_ttl + grace: unavailable.
    sleep_ms(1500).await;
    assert_eq!(checker.check("tok").await, Err(Unavailable));
}

#[tokio::test]
async fn stale_grace_never_serves_revoked_or_expired_tokens() {
    let server = FakeServer::start(json(&active_until(now() + 3600))).await;
    let checker = TokenChecker::new(settings(&server), cache(200, 100, 60_000)).unwrap();
    // Revoked: active, then inactive, then the server goes down.
    checker.check("revoked").await.unwrap();
    sleep_ms(250).await;
    server.set(json(r#"{"active":false}"#));
    assert!(!checker.check("revoked").await.unwrap().active);
    // An inactive answer is never served stale either.
    assert!(!checker.check("never-active").await.unwrap().active);
    // Expiring soon.
    let exp = now() + 2;
    server.set(json(&active_until(exp)));
    checker.check("expiring").await.unwrap();
    server.stop();
    sleep_ms(250).await;
    assert_eq!(checker.check("revoked").await, Err(Unavailable));
    assert_eq!(checker.check("never-active").await, Err(Unavailable));
    // Within the grace but before exp: served; after exp: not.
    assert!(checker.check("expiring").await.unwrap().active);
    while now() <= exp {
        sleep_ms(100).await;
    }
    assert_eq!(checker.check("expiring").await, Err(Unavailable));
}

#[tokio::test]
async fn sends_bearer_auth_and_form_body() {
    let server = FakeServer::start(json(&active_until(now() + 3600))).await;
    let checker = TokenChecker::new(settings(&server), cache(60_000, 100, 0)).unwrap();
    checker.check("tok+with/odd=chars").await.unwrap();
    let r = server.last();
    assert_eq!(r.header("authorization"), Some("Bearer rs-secret"));
    assert_eq!(r.header("accept"), Some("application/json"));
    assert_eq!(
        r.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        r.body,
        "token=tok%2Bwith%2Fodd%3Dchars&token_type_hint=access_token"
    );
    assert!(checker.metrics().last_success().is_some());
    let text = resource_server::metrics::text("tokengate_proxy", {
        let checker = checker.clone();
        move |s| checker.collect(s)
    });
    assert!(
        text.contains("\ntokengate_proxy_cache_misses_total 1\n"),
        "{text}"
    );
    assert!(text.contains("\ntokengate_proxy_cache_entries "), "{text}");
    assert!(
        text.contains("\ntokengate_proxy_introspection_duration_seconds_count 1\n"),
        "{text}"
    );
}

#[tokio::test]
async fn sends_basic_auth_with_form_encoded_credentials() {
    let server = FakeServer::start(json(r#"{"active":false}"#)).await;
    let mut s = settings(&server);
    s.auth = ClientAuth::ClientSecret {
        client_id: "my client".into(),
        client_secret: "s3cr:t/+é".into(),
        secret_file: None,
    };
    let checker = TokenChecker::new(s, cache(60_000, 100, 0)).unwrap();
    checker.check("tok").await.unwrap();
    // base64("my+client:s3cr%3At%2F%2B%C3%A9")
    assert_eq!(
        server.last().header("authorization"),
        Some("Basic bXkrY2xpZW50OnMzY3IlM0F0JTJGJTJCJUMzJUE5")
    );
    assert_eq!(server.last().body, "token=tok&token_type_hint=access_token");
}

/// A refused secret read from a file: the file is read again and the call retried once with
/// the new secret, which later calls send first; when the file holds the same secret, no retry.
#[tokio::test]
async fn a_refused_secret_is_read_again_from_its_file_and_retried_once() {
    let server = FakeServer::start(Reply::Json {
        status: 401,
        body: r#"{"error":"invalid_client"}"#.into(),
        delay: Duration::ZERO,
    })
    .await;
    let dir = std::env::temp_dir().join(format!("checker-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    std::fs::write(&path, "old\n").unwrap();
    let mut s = settings(&server);
    s.auth = ClientAuth::ClientSecret {
        client_id: "c".into(),
        client_secret: "old".into(),
        secret_file: Some(path.clone()),
    };
    let checker = TokenChecker::new(s, cache(0, 0, 0)).unwrap();
    let basic = |secret: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("c:{secret}"))
        )
    };
    // Same secret in the file: refused, not retried.
    assert!(checker.check("t1").await.is_err());
    assert_eq!(server.calls(), 1);
    // Another refusal within REREAD_INTERVAL of that read: the file is not read again.
    std::fs::write(&path, "new\n").unwrap();
    assert!(checker.check("t1b").await.is_err());
    assert_eq!(server.calls(), 2);
    // Rotated, and the interval past: one retry, with the new secret.
    sleep_ms(resource_server::introspection::REREAD_INTERVAL.as_millis() as u64 + 50).await;
    assert!(checker.check("t2").await.is_err());
    assert_eq!(server.calls(), 4);
    assert_eq!(server.last().header("authorization"), Some(&*basic("new")));
    // Accepted now: the new secret is sent first, once.
    server.set(json(r#"{"active":false}"#));
    assert!(!checker.check("t3").await.unwrap().active);
    assert_eq!(server.calls(), 5);
    assert_eq!(server.last().header("authorization"), Some(&*basic("new")));
    // An unreadable file: the refusal stands, nothing retried.
    server.set(Reply::Json {
        status: 401,
        body: "{}".into(),
        delay: Duration::ZERO,
    });
    std::fs::remove_file(&path).unwrap();
    assert!(checker.check("t4").await.is_err());
    assert_eq!(server.calls(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}
