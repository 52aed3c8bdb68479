//! RFC 8935 push delivery of the revocation stream: a task per push stream with something to
//! send, each stream with its own backoff; a round starts whenever an event is appended and
//! does not wait for the tasks of the one before, so a receiver that never answers delays no
//! other stream, now or later; no redirects,
//! and every address a name resolves to checked ([`super::push_networks`]) when the connection
//! is made.

use super::OAuthError;
use super::push_networks::{NOT_PUBLIC, may_push_to, url_allowed};
use super::ssf::{MAX_EVENTS, delivered, may_use_stream, pending, signed};
use crate::AppState;
use crate::client_ip::IpRange;
use crate::store::{PushTarget, StreamRecord};
use axum::http::header;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
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
        let mut pushes = Pushes::default();
        while !state.store.polls_closing() {
            let rung = bell.notified();
            let pushed = push_bell.notified();
            tokio::pin!(rung, pushed);
            rung.as_mut().enable();
            pushed.as_mut().enable();
            let again = match push_all(&state, &http, &mut pushes).await {
                Ok(again) => again,
                Err(error) => {
                    tracing::warn!(error = %format!("{error:?}"), "pushing revocation events failed");
                    PUSH_RETRY
                }
            };
            tokio::select! {
                _ = rung => {}
                _ = pushed => {}
                Some(done) = pushes.tasks.join_next(), if !pushes.tasks.is_empty() => {
                    if let Ok((stream_id, accepted)) = done {
                        pushes.finished(stream_id, accepted);
                    }
                }
                _ = tokio::time::sleep(again) => {}
            }
        }
    })
}

/// The pushes under way and each stream's backoff.
#[derive(Default)]
struct Pushes {
    tasks: tokio::task::JoinSet<(String, Result<bool, OAuthError>)>,
    /// The streams with a task under way: not started again until it ends.
    busy: HashSet<String>,
    backoff: HashMap<String, Backoff>,
}

impl Pushes {
    /// A stream's task ended: all its SETs accepted, or tried again after its backoff.
    fn finished(&mut self, stream_id: String, accepted: Result<bool, OAuthError>) {
        self.busy.remove(&stream_id);
        match accepted {
            Ok(true) => {
                self.backoff.remove(&stream_id);
            }
            stalled => {
                if let Err(error) = stalled {
                    tracing::warn!(stream_id = %stream_id, error = %format!("{error:?}"), "pushing revocation events failed");
                }
                let entry = self.backoff.entry(stream_id).or_insert(Backoff {
                    failures: 0,
                    next: Instant::now(),
                });
                entry.failures = entry.failures.saturating_add(1);
                let delay = PUSH_RETRY
                    .saturating_mul(1 << entry.failures.min(8).saturating_sub(1))
                    .min(PUSH_RETRY_MAX);
                entry.next = Instant::now() + delay;
            }
        }
    }
}

/// One round: a task for each push stream that is due and has none under way; how long until
/// the next round is due.
async fn push_all(
    state: &AppState,
    http: &reqwest::Client,
    pushes: &mut Pushes,
) -> Result<Duration, OAuthError> {
    let streams = state.store.push_streams().await?;
    if streams.is_empty() {
        pushes.backoff.clear();
        return Ok(PUSH_RECHECK);
    }
    // The signing key made once, before the streams' tasks sign at the same time: racing to
    // make the first key, all but one would fail, and wait out a backoff.
    state
        .keys
        .keys_with_signer(&state.store, crate::jwt::Alg::EdDSA)
        .await?;
    let now = Instant::now();
    pushes
        .backoff
        .retain(|id, _| streams.iter().any(|s| &s.stream_id == id));
    for stream in streams {
        let backed_off = pushes
            .backoff
            .get(&stream.stream_id)
            .is_some_and(|b| b.next > now);
        if backed_off || !pushes.busy.insert(stream.stream_id.clone()) {
            continue;
        }
        let (state, http) = (state.clone(), http.clone());
        pushes.tasks.spawn(async move {
            let accepted = push_stream(&state, &http, &stream).await;
            (stream.stream_id, accepted)
        });
    }
    // A stream under way is due again only when its task ends (which wakes the pusher).
    let now = Instant::now();
    Ok(pushes
        .backoff
        .iter()
        .filter(|(id, _)| !pushes.busy.contains(*id))
        .map(|(_, b)| b.next.saturating_duration_since(now))
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
