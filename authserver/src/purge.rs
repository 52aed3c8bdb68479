//! The purge of expired data, run by `authserver cleartokens` and by `serve` every
//! `purge_interval`: the store's batched deletes ([`Store::purge_expired`]) and the signing keys
//! no longer published ([`rotation::prune_expired`], as `keys rotate` does), and the OpenID
//! Connect sign-in times of token families none of whose tokens is left.

use crate::config::Settings;
use crate::jwt::rotation;
use crate::store::{Purged, Store};
use rand::Rng;
use std::time::Duration;

/// How long a revocation stream may go unpolled before the purge deletes it (seconds).
pub const STREAM_IDLE: i64 = 24 * 3600;

/// Purges once: tables first, then signing keys, then the revocation events no token they
/// could concern outlives (older than the longest token lifetime and its grace) and the streams
/// not polled for [`STREAM_IDLE`].
pub async fn run(store: &Store, settings: &Settings) -> anyhow::Result<Purged> {
    let mut purged = store.purge_expired().await?;
    purged.signing_keys = rotation::prune_expired(store, settings.access_token_lifetime)
        .await?
        .len() as u64;
    purged.oidc_families = store.purge_oidc_families().await?;
    let longest = settings
        .access_token_lifetime
        .max(settings.refresh_token_lifetime)
        + crate::store::purge::TOKEN_GRACE;
    let at = crate::store::now();
    let (events, streams) = store.purge_events(at - longest, at - STREAM_IDLE).await?;
    if events + streams > 0 {
        tracing::info!(events, streams, "purged revocation events and idle streams");
    }
    Ok(purged)
}

/// Purges every `settings.purge_interval` seconds (nothing when it is 0) until the task is
/// aborted, each wait drawn between half and one and a half intervals so that replicas started
/// together do not purge together. One log line per purge; a failed purge is logged and retried
/// at the next turn.
pub fn spawn_periodic(
    store: Store,
    settings: std::sync::Arc<Settings>,
) -> Option<tokio::task::JoinHandle<()>> {
    let interval = u64::try_from(settings.purge_interval)
        .ok()
        .filter(|&s| s > 0)?;
    Some(tokio::spawn(async move {
        loop {
            tokio::time::sleep(jittered(interval)).await;
            match run(&store, &settings).await {
                Ok(purged) => tracing::info!(
                    tokens = purged.tokens,
                    authorization_codes = purged.authorization_codes,
                    revoked_families = purged.revoked_families,
                    sessions = purged.sessions,
                    session_families = purged.session_families,
                    signing_keys = purged.signing_keys,
                    oidc_families = purged.oidc_families,
                    batches = purged.batches,
                    "purged expired data"
                ),
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), "purging expired data failed")
                }
            }
        }
    }))
}

/// A wait drawn uniformly between half and one and a half times `interval` seconds.
fn jittered(interval: u64) -> Duration {
    let millis = interval.saturating_mul(1000);
    Duration::from_millis(
        rand::thread_rng().gen_range(millis / 2..=millis.saturating_add(millis / 2)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_spread_around_the_interval() {
        let waits: Vec<Duration> = (0..200).map(|_| jittered(3600)).collect();
        assert!(waits.iter().all(|w| (1800..=5400).contains(&w.as_secs())));
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 100, "the waits differ between calls");
    }
}
