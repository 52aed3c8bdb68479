//! RFC 8935 push delivery of the revocation stream: one task per push stream each round, each
//! stream with its own backoff, so a receiver that never answers delays no other; and the guard
//! on where a push may go (no redirects; no loopback, private, link-local or other non-public
//! address unless `ssf_push_networks` allows it, checked on the URL and again on every address a
//! name resolves to when the connection is made).

use super::OAuthError;
use super::ssf::{MAX_EVENTS, delivered, may_use_stream, pending, signed};
use crate::AppState;
use crate::client_ip::IpRange;
use crate::store::{PushTarget, StreamRecord};
use axum::http::header;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How soon a stream whose push was not accepted is tried again, doubling with each failure
/// up to [`PUSH_RETRY_MAX`].
const PUSH_RETRY: Duration = Duration::from_secs(5);
const PUSH_RETRY_MAX: Duration = Duration::from_secs(300);
/// How often the pusher reads the log with nothing to wake it (a lost notification).
const PUSH_RECHECK: Duration = Duration::from_secs(60);
/// How long one push may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a push URL is refused, as the stream endpoints answer it.
pub const NOT_PUBLIC: &str = "Push delivery to a loopback, private, link-local or other non-public address is not allowed (see ssf_push_networks).";

/// Whether `ip` is an address of the public internet: not loopback, private, shared (CGNAT),
/// link-local, unique-local, unspecified, multicast, broadcast, documentation or reserved,
/// an IPv4 address inside IPv6 judged as the IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0)
                || (a == 198 && (18..20).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped().or_else(|| v6.to_ipv4()) {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0xdb8)
        }
    }
}

/// Whether a push may go to `ip`: a public address, or one inside `allowed`.
pub fn may_push_to(ip: IpAddr, allowed: &[IpRange]) -> bool {
    is_public(ip) || allowed.iter().any(|r| r.contains(ip))
}

/// Whether `url`'s host, when it is an address (the URL parser reads `2130706433` and
/// `0x7f.1` as 127.0.0.1), is one a push may go to. Names are checked when resolved.
pub fn url_allowed(url: &reqwest::Url, allowed: &[IpRange]) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    match literal.unwrap_or(host).parse::<IpAddr>() {
        Ok(ip) => may_push_to(ip, allowed),
        Err(_) => true,
    }
}

/// Resolves names as the system does, keeping only the addresses a push may go to: a name
/// that points (or is re-pointed, DNS rebinding) at an internal address reaches nothing.
struct GuardedResolver {
    allowed: Arc<Vec<IpRange>>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let kept: Vec<SocketAddr> = found.filter(|a| may_push_to(a.ip(), &allowed)).collect();
            if kept.is_empty() {
                return Err(NOT_PUBLIC.into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The push client: no redirects, names resolved through the guard, every push bounded.
fn client(allowed: &[IpRange]) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(PUSH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver {
            allowed: Arc::new(allowed.to_vec()),
        }))
        .build()
}

/// A stream's failures in a row, and when it may be tried again.
struct Backoff {
    failures: u32,
    next: Instant,
}

/// Until aborted, pushes every push stream's pending SETs (one request each,
/// `Content-Type: application/secevent+jwt`), woken by each appended event and by a new push
/// stream, each due stream in a task of its own. `202` acknowledges a SET; `400` (the receiver
/// refused it, logged) too; any other answer or none leaves it pending and the stream waits
/// [`PUSH_RETRY`], doubling. Every replica pushes, so a receiver may get a SET twice (same
/// `jti`), never not at all.
pub fn spawn_pusher(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = match client(&state.settings.ssf_push_networks) {
            Ok(http) => http,
            Err(error) => {
                tracing::error!(%error, "cannot build the push client; push streams get nothing");
                return;
            }
        };
        let bell = state.store.event_bell();
        let push_bell = state.store.push_bell();
        let mut backoff: HashMap<String, Backoff> = HashMap::new();
        while !state.store.polls_closing() {
            let rung = bell.notified();
            let pushed = push_bell.notified();
            tokio::pin!(rung, pushed);
            rung.as_mut().enable();
            pushed.as_mut().enable();
            let again = match push_all(&state, &http, &mut backoff).await {
                Ok(again) => again,
                Err(error) => {
                    tracing::warn!(error = %format!("{error:?}"), "pushing revocation events failed");
                    PUSH_RETRY
                }
            };
            tokio::select! {
                _ = rung => {}
                _ = pushed => {}
                _ = tokio::time::sleep(again) => {}
            }
        }
    })
}

/// One round: each push stream that is due, at once; how long until the next round is due.
async fn push_all(
    state: &AppState,
    http: &reqwest::Client,
    backoff: &mut HashMap<String, Backoff>,
) -> Result<Duration, OAuthError> {
    let streams = state.store.push_streams().await?;
    if streams.is_empty() {
        backoff.clear();
        return Ok(PUSH_RECHECK);
    }
    // The signing key made once, before the streams' tasks sign at the same time: racing to
    // make the first key, all but one would fail, and wait out a backoff.
    state
        .keys
        .keys_with_signer(&state.store, crate::jwt::Alg::EdDSA)
        .await?;
    let now = Instant::now();
    backoff.retain(|id, _| streams.iter().any(|s| &s.stream_id == id));
    let mut tasks = tokio::task::JoinSet::new();
    for stream in streams {
        if backoff.get(&stream.stream_id).is_some_and(|b| b.next > now) {
            continue;
        }
        let (state, http) = (state.clone(), http.clone());
        tasks.spawn(async move {
            let accepted = push_stream(&state, &http, &stream).await;
            (stream.stream_id, accepted)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let Ok((stream_id, accepted)) = done else {
            continue;
        };
        match accepted {
            Ok(true) => {
                backoff.remove(&stream_id);
            }
            stalled => {
                if let Err(error) = stalled {
                    tracing::warn!(stream_id = %stream_id, error = %format!("{error:?}"), "pushing revocation events failed");
                }
                let entry = backoff.entry(stream_id).or_insert(Backoff {
                    failures: 0,
                    next: now,
                });
                entry.failures = entry.failures.saturating_add(1);
                let delay = PUSH_RETRY
                    .saturating_mul(1 << entry.failures.min(8).saturating_sub(1))
                    .min(PUSH_RETRY_MAX);
                entry.next = Instant::now() + delay;
            }
        }
    }
    let now = Instant::now();
    Ok(backoff
        .values()
        .map(|b| b.next.saturating_duration_since(now))
        .min()
        .unwrap_or(PUSH_RECHECK)
        .min(PUSH_RECHECK))
}

/// Pushes `stream`'s pending SETs, oldest first, until one is not accepted: whether all were.
async fn push_stream(
    state: &AppState,
    http: &reqwest::Client,
    stream: &StreamRecord,
) -> Result<bool, OAuthError> {
    let Some(target) = &stream.push else {
        return Ok(true);
    };
    // Nothing to an application that may no longer use the stream.
    let app = state
        .store
        .find_application_by_client_id(&stream.client_id)
        .await?;
    if !app.as_deref().is_some_and(may_use_stream) {
        return Ok(true);
    }
    let Some(url) = reqwest::Url::parse(&target.endpoint_url)
        .ok()
        .filter(|u| url_allowed(u, &state.settings.ssf_push_networks))
    else {
        tracing::warn!(stream_id = %stream.stream_id, "push target refused: {NOT_PUBLIC}");
        return Ok(false);
    };
    let types = delivered(stream);
    loop {
        let (events, more) = pending(state, stream, &types, MAX_EVENTS).await?;
        let sets = signed(state, stream, &events).await?;
        let mut accepted = Vec::new();
        let mut stalled = false;
        for (event, (jti, token)) in events.iter().zip(sets) {
            match push_one(http, &url, target, token).await {
                Ok(202) => accepted.push(event.id),
                Ok(400) => {
                    tracing::warn!(stream_id = %stream.stream_id, jti = %jti, "the receiver refused a pushed SET");
                    accepted.push(event.id);
                }
                other => {
                    let answer = other.map_err(|e| e.to_string());
                    tracing::warn!(stream_id = %stream.stream_id, ?answer, "push not accepted; trying again later");
                    stalled = true;
                    break;
                }
            }
        }
        if !accepted.is_empty() {
            state
                .store
                .acknowledge(&stream.stream_id, &accepted)
                .await?;
        }
        if stalled || !more {
            return Ok(!stalled);
        }
    }
}

/// One SET to `url`: the receiver's answer status.
async fn push_one(
    http: &reqwest::Client,
    url: &reqwest::Url,
    target: &PushTarget,
    token: String,
) -> reqwest::Result<u16> {
    let mut request = http
        .post(url.clone())
        .header(header::CONTENT_TYPE, "application/secevent+jwt")
        .header(header::ACCEPT, "application/json")
        .body(token);
    if let Some(authorization) = &target.authorization {
        request = request.header(header::AUTHORIZATION, authorization);
    }
    Ok(request.send().await?.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_in_every_spelling() {
        for internal in [
            "http://127.0.0.1/e",
            "http://2130706433/e",
            "http://0x7f.1/e",
            "http://0/e",
            "http://[::1]/e",
            "http://[::ffff:127.0.0.1]/e",
            "http://[::ffff:a00:1]/e",
            "http://10.1.2.3/e",
            "http://172.16.0.1/e",
            "http://192.168.1.1/e",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/e",
            "http://[fd00::1]/e",
            "http://[fe80::1]/e",
            "http://255.255.255.255/e",
        ] {
            assert!(!url_allowed(&url(internal), &[]), "{internal}");
        }
        for public in [
            "https://receiver.example/e",
            "http://93.184.215.14/e",
            "http://[2606:4700::1111]/e",
        ] {
            assert!(url_allowed(&url(public), &[]), "{public}");
        }
        let loopback = IpRange::loopback();
        assert!(url_allowed(&url("http://127.0.0.1:9/e"), &loopback));
        assert!(url_allowed(&url("http://[::1]:9/e"), &loopback));
        assert!(!url_allowed(&url("http://10.0.0.1/e"), &loopback));
    }
}
