//! The revocation stream receiver against a second, independent SSF transmitter
//! (`support/ssf_transmitter.rs`: its own Ed25519 key, a real HTTP server), through a real gate:
//! eviction by jti, subject and client; the JWT deny-list, cached verifications included; a
//! forged SET refused and counted; a lost stream flushed and recreated; a stream down longer than
//! the bound falling back to the short TTL; a stream-updated event pausing the stream.

use test_support::ssf_transmitter;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Method};
use resource_server::gate_config::{GateSettings, IntrospectionConfig, TokenSource};
use resource_server::jwt::{JwksSettings, JwksSource};
use resource_server::revoked::Lifetimes;
use resource_server::ssf::set::{STREAM_UPDATED, VERIFICATION};
use resource_server::{
    CacheSettings, ClientAuth, Denial, Gate, IntrospectionSettings, JwtSettings,
    RevocationSettings, Rules,
};
use serde_json::{Value, json};
use ssf_transmitter::{
    CLIENT_ID, CLIENT_SECRET, CREDENTIAL_CHANGE, SESSION_REVOKED, Transmitter, now,
};

fn lifetimes(unhealthy_after_ms: u64, fallback_ms: u64) -> Lifetimes {
    Lifetimes {
        healthy_max_ttl: Duration::from_secs(3600),
        fallback_ttl: Duration::from_millis(fallback_ms),
        unhealthy_after: Duration::from_millis(unhealthy_after_ms),
        remember: Duration::from_secs(86_400),
    }
}

fn settings(tx: &Transmitter, source: TokenSource, l: Lifetimes) -> GateSettings {
    let mut revocation = RevocationSettings::new(&tx.configuration_url(), CLIENT_ID, CLIENT_SECRET);
    revocation.token_url = Some(format!("{}/token", tx.url));
    revocation.lifetimes = l;
    let introspection = IntrospectionConfig {
        settings: IntrospectionSettings::new(
            format!("{}/introspect", tx.url),
            ClientAuth::Bearer("rs".into()),
        ),
        cache: CacheSettings::default(),
    };
    let mut jwt = JwtSettings::new(
        &tx.issuer,
        JwksSettings::new(JwksSource::Url(format!("{}/jwks", tx.url))),
    );
    jwt.algorithms = vec![jsonwebtoken::Algorithm::EdDSA];
    GateSettings {
        token_source: source,
        introspection: source.uses_introspection().then_some(introspection),
        jwt: Some(jwt),
        leeway: Duration::from_secs(5),
        proxy_secret: None,
        rules: Rules::from_yaml(
            "routes:\n  - { name: r, path: /r, scopes: [read] }\n",
            "t.yaml",
        )
        .unwrap(),
        revocation: Some(revocation),
        audience: None,
        resource: None,
    }
}

async fn authorize(gate: &Gate, token: &str) -> Result<(), Denial> {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    gate.authorize(&Method::GET, &"/r".parse().unwrap(), &h, None)
        .await
        .map(|_| ())
}

fn active(jti: &str, sub: &str, client: &str) -> Value {
    json!({"active": true, "scope": "read", "client_id": client, "sub": sub, "jti": jti,
           "iat": now() - 10, "exp": now() + 3600})
}

/// Waits until the receiver's stream is healthy (created and polled).
async fn healthy(gate: &Gate) {
    let r = gate.revocation().unwrap().revoked().clone();
    let until = Instant::now() + Duration::from_secs(10);
    while r.health().is_err() {
        assert!(Instant::now() < until, "never healthy: {:?}", r.health());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `authorize` until it refuses, returning how long that took.
async fn refused_within(gate: &Gate, token: &str, bound: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if authorize(gate, token).await.is_err() {
            return started.elapsed();
        }
        assert!(started.elapsed() < bound, "still accepted after {bound:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_evict_by_jti_subject_and_client_through_a_gate() {
    let tx = Transmitter::start(Duration::from_secs(2)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000)),
        None,
    )
    .unwrap();
    let tokens = [
        ("tok-a", active("fam-a", "1", "app-a")),
        ("tok-b", active("fam-b", "2", "app-b")),
        ("tok-c", active("fam-c", "3", "app-c")),
        ("tok-d", active("fam-d", "4", "app-d")),
    ];
    for (t, a) in &tokens {
        tx.answer(t, a.clone());
    }
    healthy(&gate).await;
    for (t, _) in &tokens {
        authorize(&gate, t).await.unwrap();
        authorize(&gate, t).await.unwrap();
        assert_eq!(tx.introspections_of(t), 1, "{t} cached");
    }
    let cases = [
        (
            "tok-a",
            json!({"format": "jwt_id", "iss": tx.issuer, "jti": "fam-a"}),
            SESSION_REVOKED,
        ),
        (
            "tok-b",
            json!({"format": "iss_sub", "iss": tx.issuer, "sub": "2"}),
            CREDENTIAL_CHANGE,
        ),
        (
            "tok-c",
            json!({"format": "opaque", "id": "app-c"}),
            SESSION_REVOKED,
        ),
    ];
    let mut latencies = Vec::new();
    for (token, sub_id, event) in cases {
        // The server's own answer changes with the event, as a real server's would.
        tx.answer(token, json!({"active": false}));
        let body = json!({"event_timestamp": now(), "change_type": "update", "credential_type": "password"});
        let set = tx.emit(event, body, sub_id);
        latencies.push(refused_within(&gate, token, Duration::from_secs(1)).await);
        let denial = authorize(&gate, token).await.unwrap_err();
        assert_eq!(denial.refusal.status, 401);
        let until = Instant::now() + Duration::from_secs(3);
        while !tx.acked().contains(&set) {
            assert!(Instant::now() < until, "{set} never acknowledged");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The others were not touched: still served from the cache.
    authorize(&gate, "tok-d").await.unwrap();
    assert_eq!(tx.introspections_of("tok-d"), 1);
    let r = gate.revocation().unwrap().revoked();
    assert_eq!(r.metrics.sets_applied.load(Relaxed), 3);
    assert_eq!(r.metrics.sets_refused.load(Relaxed), 0);
    eprintln!("revocation latency through the gate: {latencies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jwt_deny_list_refuses_cached_verifications_by_jti_and_subject() {
    let tx = Transmitter::start(Duration::from_secs(2)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Jwt, lifetimes(5000, 60_000)),
        None,
    )
    .unwrap();
    let issued = now() - 30;
    let a = tx.access_jwt("jwt-a", "10", "app", issued);
    let b = tx.access_jwt("jwt-b", "11", "app", issued);
    authorize(&gate, &a).await.unwrap();
    authorize(&gate, &b).await.unwrap();
    healthy(&gate).await;
    // Cached now: the deny-list is consulted after the cache.
    authorize(&gate, &a).await.unwrap();
    tx.emit(
        SESSION_REVOKED,
        json!({}),
        json!({"format": "jwt_id", "iss": tx.issuer, "jti": "jwt-a"}),
    );
    refused_within(&gate, &a, Duration::from_secs(1)).await;
    let denial = authorize(&gate, &a).await.unwrap_err();
    assert!(
        denial
            .refusal
            .www_authenticate
            .as_deref()
            .unwrap()
            .contains("revoked"),
        "{denial:?}"
    );
    authorize(&gate, &b).await.unwrap();
    // A user-wide event refuses that user's tokens issued up to it, not later ones.
    tx.emit(
        SESSION_REVOKED,
        json!({"event_timestamp": issued + 5}),
        json!({"format": "iss_sub", "iss": tx.issuer, "sub": "11"}),
    );
    refused_within(&gate, &b, Duration::from_secs(1)).await;
    let later = tx.access_jwt("jwt-c", "11", "app", issued + 6);
    authorize(&gate, &later).await.unwrap();
    // A signing key withdrawn (still published in the JWKS: the event alone must do): its
    // tokens are refused at once, cached ones included.
    tx.withdraw_access_key(false);
    refused_within(&gate, &later, Duration::from_secs(1)).await;
    let r = gate.revocation().unwrap().revoked();
    let until = Instant::now() + Duration::from_secs(3);
    while r.metrics.sets_applied.load(Relaxed) != 3 {
        assert!(Instant::now() < until, "{:?}", r.metrics);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_set_is_refused_counted_and_turns_the_stream_unhealthy() {
    let tx = Transmitter::start(Duration::from_millis(300)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(1500, 60_000)),
        None,
    )
    .unwrap();
    tx.answer("tok", active("fam", "5", "app"));
    authorize(&gate, "tok").await.unwrap();
    healthy(&gate).await;
    let r = gate.revocation().unwrap().revoked().clone();
    let forged = tx.emit_forged(
        SESSION_REVOKED,
        json!({}),
        json!({"format": "jwt_id", "iss": tx.issuer, "jti": "fam"}),
    );
    let until = Instant::now() + Duration::from_secs(3);
    while r.metrics.sets_refused.load(Relaxed) == 0 {
        assert!(Instant::now() < until, "the forgery was never refused");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        r.health(),
        Err("revocation stream unhealthy: a SET failed verification")
    );
    // Nothing applied: the token is still good (introspected again after the flush).
    authorize(&gate, "tok").await.unwrap();
    assert_eq!(
        tx.introspections_of("tok"),
        2,
        "the forgery flushed the cache"
    );
    assert_eq!(r.metrics.sets_applied.load(Relaxed), 0);
    let until = Instant::now() + Duration::from_secs(3);
    while !tx.errors().iter().any(|(j, _)| *j == forged) {
        assert!(Instant::now() < until, "no setErrs for the forgery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        tx.errors(),
        vec![(forged, "authentication_failed".to_owned())]
    );
    assert!(
        resource_server::metrics::text("t", {
            let r = r.clone();
            move |s| r.collect(s)
        })
        .contains("\nt_revocation_sets_refused_total 1\n")
    );
    // Healthy again once unhealthy_after has passed with good polls.
    let until = Instant::now() + Duration::from_secs(10);
    while r.health().is_err() {
        assert!(Instant::now() < until, "still unhealthy: {:?}", r.health());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_stream_is_recreated_and_the_cache_flushed() {
    let tx = Transmitter::start(Duration::from_millis(300)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000)),
        None,
    )
    .unwrap();
    tx.answer("tok", active("fam", "6", "app"));
    authorize(&gate, "tok").await.unwrap();
    healthy(&gate).await;
    authorize(&gate, "tok").await.unwrap();
    let calls = tx.introspections_of("tok");
    // Revoked while the stream is lost: its event is gone with it.
    tx.lose_streams();
    tx.answer("tok", json!({"active": false}));
    refused_within(&gate, "tok", Duration::from_secs(2)).await;
    assert_eq!(tx.introspections_of("tok"), calls + 1);
    assert_eq!(tx.streams_created.load(Relaxed), 2);
    let r = gate.revocation().unwrap().revoked();
    assert!(r.metrics.flushes.load(Relaxed) >= 2);
    healthy(&gate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_down_longer_than_the_bound_falls_back_to_the_short_ttl() {
    let tx = Transmitter::start(Duration::from_millis(200)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(1000, 1500)),
        None,
    )
    .unwrap();
    tx.answer("tok", active("fam", "7", "app"));
    authorize(&gate, "tok").await.unwrap();
    healthy(&gate).await;
    authorize(&gate, "tok").await.unwrap();
    let calls = tx.introspections_of("tok");
    // Healthy: an answer older than the fallback TTL is still served from the cache.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    authorize(&gate, "tok").await.unwrap();
    assert_eq!(tx.introspections_of("tok"), calls, "served from the cache");
    let r = gate.revocation().unwrap().revoked().clone();
    tx.set_down(true);
    let started = Instant::now();
    while r.health().is_ok() {
        assert!(started.elapsed() < Duration::from_secs(3), "still healthy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        r.health(),
        Err("revocation stream unhealthy: no successful poll within unhealthy_after")
    );
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert!(
        resource_server::metrics::text("t", {
            let r = r.clone();
            move |s| r.collect(s)
        })
        .contains("\nt_revocation_stream_healthy 0\n")
    );
    // Unhealthy: the cached answer (older than fallback_ttl) is not served; asked again.
    authorize(&gate, "tok").await.unwrap();
    assert_eq!(tx.introspections_of("tok"), calls + 1);
    authorize(&gate, "tok").await.unwrap();
    assert_eq!(
        tx.introspections_of("tok"),
        calls + 1,
        "a fresh answer is cached"
    );
    tx.set_down(false);
    healthy(&gate).await;
}

/// The cost the receiver adds: a cached token through the gate with and without a revocation
/// stream (and with a deny-list of 10 000 entries), and an eviction over a warm cache. A
/// measurement, not a check: `cargo test --release -p resource-server --test revocation cost --
/// --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn cost_of_the_receiver_on_the_request_path() {
    let tx = Transmitter::start(Duration::from_secs(2)).await;
    let with = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000)),
        None,
    )
    .unwrap();
    let mut plain = settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000));
    plain.revocation = None;
    let without = Gate::build(plain, None).unwrap();
    healthy(&with).await;
    const N: usize = 2000;
    for i in 0..N {
        tx.answer(
            &format!("t{i}"),
            active(&format!("f{i}"), &format!("u{i}"), "app"),
        );
    }
    for gate in [&with, &without] {
        for i in 0..N {
            authorize(gate, &format!("t{i}")).await.unwrap();
        }
    }
    let time = |gate: &Gate| {
        let gate = gate.clone();
        async move {
            let started = Instant::now();
            for round in 0..50 {
                for i in 0..N {
                    let _ = authorize(&gate, &format!("t{}", (i + round) % N)).await;
                }
            }
            started.elapsed().as_nanos() as f64 / (50 * N) as f64
        }
    };
    // Interleaved, best of three: the machine is shared.
    let (mut base, mut stream) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        base = base.min(time(&without).await);
        stream = stream.min(time(&with).await);
    }
    let r = with.revocation().unwrap().revoked().clone();
    for i in 0..10_000 {
        r.deny(
            resource_server::revoked::Subject::Jti(format!("other-{i}")),
            0,
        );
        r.deny(
            resource_server::revoked::Subject::User(format!("other-{i}")),
            now(),
        );
    }
    let mut listed = f64::MAX;
    for _ in 0..3 {
        listed = listed.min(time(&with).await);
    }
    let checker = with.check().introspection().unwrap().clone();
    let started = Instant::now();
    for i in 0..100 {
        checker.evict(&resource_server::revoked::Subject::Jti(format!("f{i}")));
    }
    let evict = started.elapsed().as_nanos() as f64 / 100.0;
    let started = Instant::now();
    let hot = time(&with).await;
    let after = started.elapsed();
    eprintln!(
        "authorize, cached token: without stream {base:.0} ns, with {stream:.0} ns \
         ({:+.1} %), with 20 000 deny-list entries {listed:.0} ns; evict() {evict:.0} ns each; \
         authorize right after 100 evictions over {N} entries {hot:.0} ns ({after:?} for {} calls)",
        (stream / base - 1.0) * 100.0,
        50 * N
    );
}

/// An independent transmitter's stream-updated event (SSF 1.0 §8.1.5): `paused` or `disabled`
/// makes the stream unhealthy (the short TTL in force, `/readyz` says why) until one says
/// `enabled`; a verification event nobody asked for is acknowledged, neither refused nor
/// applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_updated_event_turns_the_stream_unhealthy_until_enabled() {
    let tx = Transmitter::start(Duration::from_millis(300)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000)),
        None,
    )
    .unwrap();
    tx.answer("tok", active("fam", "5", "app"));
    authorize(&gate, "tok").await.unwrap();
    healthy(&gate).await;
    let r = gate.revocation().unwrap().revoked().clone();
    let stream = json!({"format": "opaque", "id": "any"});
    let acked = async |jti: &str| {
        let until = Instant::now() + Duration::from_secs(5);
        while !tx.acked().iter().any(|j| j == jti) {
            assert!(Instant::now() < until, "{jti} never acknowledged");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let verification = tx.emit(VERIFICATION, json!({"state": "not ours"}), stream.clone());
    acked(&verification).await;
    assert_eq!(r.metrics.sets_refused.load(Relaxed), 0);
    assert_eq!(r.metrics.sets_applied.load(Relaxed), 0);
    assert_eq!(r.metrics.verifications.load(Relaxed), 0, "not asked for");
    assert!(r.is_healthy());

    for status in ["paused", "disabled"] {
        let paused = tx.emit(
            STREAM_UPDATED,
            json!({"status": status, "reason": "test"}),
            stream.clone(),
        );
        acked(&paused).await;
        assert_eq!(
            r.health(),
            Err("revocation stream unhealthy: the stream is paused or disabled"),
            "{status}"
        );
        assert_eq!(r.max_age(), r.lifetimes.fallback_ttl);
        let enabled = tx.emit(STREAM_UPDATED, json!({"status": "enabled"}), stream.clone());
        acked(&enabled).await;
        assert!(r.is_healthy(), "{:?}", r.health());
    }
    assert_eq!(r.metrics.sets_refused.load(Relaxed), 0);
}

/// A transmitter that answers every poll with a SET that fails verification gets polled with
/// backoff, not in a busy loop (security round 4: 1.04 M WARN lines in 19 s before), and the
/// stream is unhealthy meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_events_slow_the_polls_down() {
    let tx = Transmitter::start(Duration::from_millis(300)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(1500, 60_000)),
        None,
    )
    .unwrap();
    healthy(&gate).await;
    let r = gate.revocation().unwrap().revoked().clone();
    tx.set_hostile(Some(ssf_transmitter::HostilePoll::Garbage));
    let before = tx.polls();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let polls = tx.polls() - before;
    assert!(polls >= 2, "the receiver kept polling: {polls}");
    // 100 ms doubling: about 5 in 2 s; a busy loop makes thousands.
    assert!(polls <= 12, "{polls} polls in 2 s");
    assert!(r.metrics.sets_refused.load(Relaxed) >= 2);
    assert!(r.health().is_err());
    tx.set_hostile(None);
}

/// A poll answer larger than the receiver reads is a failed poll, retried with backoff, and
/// nothing in it is applied (`bounded_body`'s own tests show that the rest is never read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_poll_answer_is_a_failed_poll() {
    let tx = Transmitter::start(Duration::from_millis(300)).await;
    let gate = Gate::build(
        settings(&tx, TokenSource::Introspection, lifetimes(1000, 60_000)),
        None,
    )
    .unwrap();
    healthy(&gate).await;
    let r = gate.revocation().unwrap().revoked().clone();
    let errors_before = r.metrics.poll_errors.load(Relaxed);
    // 4 MiB: more than 100 SETs of 16 KiB.
    tx.set_hostile(Some(ssf_transmitter::HostilePoll::Huge(4 << 20)));
    let until = Instant::now() + Duration::from_secs(10);
    while r.metrics.poll_errors.load(Relaxed) < errors_before + 2 {
        assert!(
            Instant::now() < until,
            "the oversized answers were not refused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(r.metrics.sets_applied.load(Relaxed), 0);
    assert_eq!(
        r.metrics.sets_refused.load(Relaxed),
        0,
        "refused unread, not verified"
    );
    tx.set_hostile(None);
}

/// A receiver whose secret comes from a file reads the file before each token request: the
/// secret it was started with is stale (rotated since), the file holds the current one, and
/// the stream turns healthy; without the file the same stale secret never gets a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_reads_its_rotated_secret_from_its_file() {
    let tx = Transmitter::start(Duration::from_millis(200)).await;
    let path = std::env::temp_dir().join(format!("ssf-rotated-{}", std::process::id()));
    std::fs::write(&path, format!("{CLIENT_SECRET}\n")).unwrap();
    let mut s = settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000));
    let revocation = s.revocation.as_mut().unwrap();
    revocation.client_secret = "stale-secret".into();
    revocation.client_secret_file = Some(path.clone());
    let gate = Gate::build(s, None).unwrap();
    healthy(&gate).await;

    let mut stale = settings(&tx, TokenSource::Introspection, lifetimes(5000, 60_000));
    stale.revocation.as_mut().unwrap().client_secret = "stale-secret".into();
    let gate = Gate::build(stale, None).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(gate.revocation().unwrap().revoked().health().is_err());
    let _ = std::fs::remove_file(&path);
}
