//! TokenChecker while the authorization server is failing (stopped, or answering 503): one probe
//! at a time on the backoff schedule instead of one call per request, stale answers within the
//! grace (and the revocation bound they imply), recovery within half a second, and the counters.

use test_support::fake_server;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_server::{FakeServer, Reply, json};
use resource_server::outage::PROBE_BACKOFF;
use resource_server::{
    AnswerPolicy, CacheSettings, Claims, ClientAuth, IntrospectionSettings, TokenChecker,
    Unavailable,
};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn active() -> Reply {
    json(&format!(
        r#"{{"active":true,"scope":"read","username":"alice","exp":{}}}"#,
        now() + 3600
    ))
}

fn status(status: u16, delay_ms: u64) -> Reply {
    Reply::Json {
        status,
        body: "{}".into(),
        delay: Duration::from_millis(delay_ms),
    }
}

fn checker(server: &FakeServer, max_ttl_ms: u64, grace_ms: u64) -> TokenChecker {
    let settings = IntrospectionSettings {
        url: server.url.clone(),
        auth: ClientAuth::Bearer("rs-secret".into()),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1000),
        policy: AnswerPolicy::default(),
    };
    let cache = CacheSettings {
        max_ttl: Duration::from_millis(max_ttl_ms),
        negative_ttl: Duration::from_millis(100),
        capacity: 10_000,
        stale_grace: Duration::from_millis(grace_ms),
    };
    TokenChecker::new(settings, cache).unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

type Outcome = (Result<Arc<Claims>, Unavailable>, Duration);

/// `n` checks of the distinct tokens `prefix-0`, `prefix-1`, …, started one every `every`, each
/// in a task of its own: their results and how long each took.
async fn storm(checker: &TokenChecker, prefix: &str, n: u32, every: Duration) -> Vec<Outcome> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let c = checker.clone();
        let token = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(every * i).await;
            let started = Instant::now();
            let r = c.check(&token).await;
            (r, started.elapsed())
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// The most probes the schedule allows within `span` of the failure that started an outage.
fn probes_allowed(span: Duration) -> usize {
    let mut at = Duration::ZERO;
    (0..)
        .take_while(|&k| {
            at += PROBE_BACKOFF.delay(k);
            at <= span
        })
        .count()
}

#[test]
fn the_schedule_allows_a_handful_of_probes_a_second() {
    assert_eq!(probes_allowed(ms(99)), 0);
    assert_eq!(probes_allowed(ms(1000)), 3); // at 100, 300 and 700 ms
    assert_eq!(probes_allowed(ms(1400)), 4); // and 1100 ms
}

/// Enters an outage with one failing check.
async fn fail_once(checker: &TokenChecker) -> Instant {
    assert_eq!(checker.check("first-failure").await, Err(Unavailable));
    assert!(checker.is_failing());
    Instant::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_gets_a_handful_of_calls_not_one_per_request() {
    let server = FakeServer::start(status(503, 0)).await;
    let checker = checker(&server, 60_000, 0);
    let started = fail_once(&checker).await;
    assert_eq!(server.calls(), 1);
    // 200 checks of distinct tokens over one second.
    let results = storm(&checker, "tok", 200, ms(5)).await;
    // The outage began a little before `started` was taken.
    let span = started.elapsed() + ms(20);
    let calls = server.calls() - 1;
    let slowest = results.iter().map(|r| r.1).max().unwrap();
    eprintln!(
        "503 outage: 200 checks over {span:?}: {calls} calls reached the server (schedule allows {}), slowest check {slowest:?}",
        probes_allowed(span)
    );
    assert!(results.iter().all(|r| r.0 == Err(Unavailable)));
    assert!(calls >= 2, "no probe at all: {calls}");
    assert!(calls <= probes_allowed(span), "{calls} calls in {span:?}");
    // Fail closed at once: nobody waited on the dead server.
    assert!(slowest < ms(100), "{slowest:?}");
    let m = checker.metrics();
    assert_eq!(m.skipped() as usize, 200 - calls);
    assert_eq!(m.misses() as usize, 1 + calls);
    assert_eq!(m.errors() as usize, 1 + calls);
    let text = resource_server::metrics::text("tokengate_proxy", {
        let checker = checker.clone();
        move |s| checker.collect(s)
    });
    assert!(
        text.contains(&format!(
            "# TYPE tokengate_proxy_introspection_skipped counter\ntokengate_proxy_introspection_skipped_total {}\n",
            200 - calls
        )),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_probed_not_hammered() {
    let server = FakeServer::start(active()).await;
    let checker = checker(&server, 60_000, 0);
    server.stop();
    tokio::time::sleep(ms(20)).await;
    let started = fail_once(&checker).await;
    let results = storm(&checker, "tok", 200, ms(5)).await;
    // The outage began a little before `started` was taken.
    let span = started.elapsed() + ms(20);
    // The server counts nothing now: count the calls the checker made.
    let calls = checker.metrics().misses() as usize - 1;
    eprintln!(
        "refused connections: 200 checks over {span:?}: {calls} calls attempted (schedule allows {})",
        probes_allowed(span)
    );
    assert!(results.iter().all(|r| r.0 == Err(Unavailable)));
    assert!((2..=probes_allowed(span)).contains(&calls), "{calls}");
    assert_eq!(checker.metrics().skipped() as usize, 200 - calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_probe_in_flight_at_a_time_and_the_same_token_still_coalesces() {
    // A slow failing server: each call takes 300 ms.
    let server = FakeServer::start(status(503, 300)).await;
    let checker = checker(&server, 60_000, 0);
    fail_once(&checker).await;
    tokio::time::sleep(PROBE_BACKOFF.initial + ms(20)).await; // a probe is due
    let mut tasks = Vec::new();
    for i in 0..100 {
        let c = checker.clone();
        // Half ask about one token, half about tokens of their own.
        let token = if i % 2 == 0 {
            "shared".to_owned()
        } else {
            format!("own-{i}")
        };
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            (c.check(&token).await, started.elapsed(), token)
        }));
    }
    let mut waited_for_the_probe = 0;
    for t in tasks {
        let (r, took, token) = t.await.unwrap();
        assert_eq!(r, Err(Unavailable));
        if took >= ms(250) {
            waited_for_the_probe += 1;
        } else {
            assert!(took < ms(100), "{token} took {took:?}");
        }
    }
    let m = checker.metrics();
    eprintln!(
        "100 concurrent checks with a probe due: {} call(s), {waited_for_the_probe} waited for it, {} skipped, {} coalesced",
        server.calls() - 1,
        m.skipped(),
        m.coalesced()
    );
    assert_eq!(server.calls(), 2, "exactly one probe");
    // The probe was for one token; only checks of that token waited for it (when the shared
    // token was the probe: its 50 checks, coalesced; otherwise one own token).
    assert!(waited_for_the_probe == 50 || waited_for_the_probe == 1);
    assert_eq!(m.misses(), 2);
    assert_eq!(m.skipped() + m.coalesced(), 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_answers_are_served_within_the_grace_and_counted() {
    let server = FakeServer::start(active()).await;
    // Answers live 300 ms, then may be served 1 s more while the server cannot be asked.
    let checker = checker(&server, 300, 1000);
    let fetched = Instant::now();
    assert!(checker.check("kept").await.unwrap().active);
    server.set(status(503, 0));
    // For 1.6 s: every 10 ms the kept token and a new one.
    let kept = {
        let c = checker.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while fetched.elapsed() < ms(1600) {
                let r = c.check("kept").await;
                seen.push((fetched.elapsed(), r.is_ok()));
                tokio::time::sleep(ms(10)).await;
            }
            seen
        })
    };
    let others = storm(&checker, "new", 160, ms(10)).await;
    let seen = kept.await.unwrap();
    assert!(others.iter().all(|r| r.0 == Err(Unavailable)));
    // Served until max_ttl + stale_grace after the answer was fetched, refused after.
    for &(at, ok) in &seen {
        if at < ms(1250) {
            assert!(ok, "refused at {at:?}");
        } else if at > ms(1350) {
            assert!(!ok, "served at {at:?}");
        }
    }
    let m = checker.metrics();
    let fresh = seen.iter().filter(|s| s.1 && s.0 < ms(300)).count() as u64;
    let served = seen.iter().filter(|s| s.1).count() as u64;
    let calls = server.calls() - 1;
    eprintln!(
        "stale grace: kept token served {served} times ({} stale), {} other checks refused, {calls} calls in 1.6 s, {} skipped",
        m.stale_served(),
        others.len(),
        m.skipped()
    );
    // Every answer for the kept token came from the fresh cache (a hit) or the stale grace.
    assert_eq!(m.hits() + m.stale_served(), served);
    assert!(fresh > 0 && m.stale_served() > 50);
    // The failure that started the outage, then the probes.
    assert!(calls <= 1 + probes_allowed(ms(1600)), "{calls}");
    let text = resource_server::metrics::text("tokengate_proxy", {
        let checker = checker.clone();
        move |s| checker.collect(s)
    });
    assert!(
        text.contains(&format!(
            "# TYPE tokengate_proxy_stale_served counter\ntokengate_proxy_stale_served_total {}\n",
            m.stale_served()
        )),
        "{text}"
    );
}

#[tokio::test]
async fn revocation_is_seen_within_max_ttl_or_max_ttl_plus_stale_grace_during_an_outage() {
    let server = FakeServer::start(active()).await;
    let checker = checker(&server, 300, 600);
    // Reachable server: the revoked token is served from the cache until max_ttl, then refused.
    let fetched = Instant::now();
    assert!(checker.check("revoked").await.unwrap().active);
    server.set(json(r#"{"active":false}"#)); // revoked now
    assert!(checker.check("revoked").await.unwrap().active); // cached
    tokio::time::sleep(ms(320).saturating_sub(fetched.elapsed())).await;
    assert!(!checker.check("revoked").await.unwrap().active);
    assert_eq!(checker.metrics().stale_served(), 0);

    // Revoked, then the server dies before anyone asks again: the answer outlives the revocation,
    // but never by more than max_ttl + stale_grace after it was fetched.
    server.set(active());
    let fetched = Instant::now();
    assert!(checker.check("revoked-then-outage").await.unwrap().active);
    server.set(json(r#"{"active":false}"#));
    server.stop();
    tokio::time::sleep(ms(600).saturating_sub(fetched.elapsed())).await;
    assert!(checker.check("revoked-then-outage").await.unwrap().active); // stale
    assert_eq!(checker.metrics().stale_served(), 1);
    tokio::time::sleep(ms(950).saturating_sub(fetched.elapsed())).await;
    assert_eq!(checker.check("revoked-then-outage").await, Err(Unavailable));
    // Back up: the revocation is seen at once (the outage probe is due by now).
    server.restart().await;
    tokio::time::sleep(PROBE_BACKOFF.max).await;
    assert!(!checker.check("revoked-then-outage").await.unwrap().active);
    assert!(!checker.is_failing());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_comes_within_half_a_second_of_the_server_returning() {
    let server = FakeServer::start(active()).await;
    let checker = checker(&server, 60_000, 0);
    let mut worst = Duration::ZERO;
    for round in 0..3u32 {
        server.stop();
        tokio::time::sleep(ms(20)).await;
        fail_once(&checker).await;
        // Long enough for the backoff to reach its cap, ending at a different phase each round.
        storm(&checker, &format!("down-{round}"), 150 + 13 * round, ms(10)).await;
        server.restart().await;
        let back = Instant::now();
        let mut i = 0;
        let recovered = loop {
            i += 1;
            if let Ok(c) = checker.check(&format!("up-{round}-{i}")).await {
                assert!(c.active);
                break back.elapsed();
            }
            assert!(back.elapsed() < Duration::from_secs(3), "never recovered");
            tokio::time::sleep(ms(5)).await;
        };
        worst = worst.max(recovered);
        eprintln!("round {round}: served again {recovered:?} after the server returned");
        assert!(!checker.is_failing());
        // Healthy again: every new token is asked at once, none skipped.
        let skipped = checker.metrics().skipped();
        let calls = server.calls();
        let results = storm(&checker, &format!("after-{round}"), 20, Duration::ZERO).await;
        assert!(results.iter().all(|r| r.0.as_ref().is_ok_and(|c| c.active)));
        assert_eq!(server.calls() - calls, 20);
        assert_eq!(checker.metrics().skipped(), skipped);
    }
    assert!(worst < ms(500), "recovery took {worst:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_resets_the_backoff() {
    let server = FakeServer::start(status(503, 0)).await;
    let checker = checker(&server, 60_000, 0);
    fail_once(&checker).await;
    // 1.5 s of failing probes: the backoff is at its cap (400 ms).
    storm(&checker, "down", 150, ms(10)).await;
    server.set(active());
    let back = Instant::now();
    while checker.check("probe").await.is_err() {
        assert!(back.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(ms(5)).await;
    }
    // A new outage: its first probe comes 100 ms after the failure, not 400 ms.
    server.set(status(503, 0));
    let calls = server.calls();
    let failed = fail_once(&checker).await;
    assert_eq!(server.calls(), calls + 1);
    assert_eq!(checker.check("too-early").await, Err(Unavailable));
    assert_eq!(server.calls(), calls + 1, "skipped");
    tokio::time::sleep((PROBE_BACKOFF.initial + ms(30)).saturating_sub(failed.elapsed())).await;
    assert_eq!(checker.check("due").await, Err(Unavailable));
    assert_eq!(
        server.calls(),
        calls + 2,
        "probed after the initial backoff"
    );
}

#[tokio::test]
async fn answers_from_a_server_that_is_up_never_start_an_outage() {
    // Refusals and unreadable answers come from a server that is up (and may be about the token
    // sent): they fail closed but keep every other token's check going to the server.
    let server = FakeServer::start(json("not json")).await;
    let checker = checker(&server, 60_000, 0);
    for (i, reply) in [
        json("not json"),
        status(401, 0),
        status(413, 0),
        json(r#"{"active":"yes"}"#),
    ]
    .into_iter()
    .enumerate()
    {
        server.set(reply);
        assert_eq!(checker.check(&format!("odd-{i}")).await, Err(Unavailable));
        assert!(!checker.is_failing(), "case {i}");
    }
    server.set(active());
    assert!(checker.check("good").await.unwrap().active);
    assert_eq!(server.calls(), 5);
    assert_eq!(checker.metrics().skipped(), 0);
    // A 5xx or 429 does; a refusal during the outage ends it (the server is up).
    for code in [500, 429] {
        server.set(status(code, 0));
        fail_once(&checker).await;
        tokio::time::sleep(PROBE_BACKOFF.initial + ms(20)).await;
        server.set(status(401, 0));
        assert_eq!(
            checker.check(&format!("after-{code}")).await,
            Err(Unavailable)
        );
        assert!(!checker.is_failing());
    }
}
