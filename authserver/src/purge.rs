//! The purge of expired data, run by `authserver cleartokens` and by `serve` every
//! `purge_interval`: the store's batched deletes ([`Store::purge_expired`]) and the signing keys
//! no longer published ([`rotation::prune_expired`], as `keys rotate` does).

use crate::config::Settings;
use crate::jwt::rotation;
use crate::store::{Purged, Store};
use rand::Rng;
use std::time::Duration;

/// Purges once: tables first, then signing keys.
pub async fn run(store: &Store, settings: &Settings) -> anyhow::Result<Purged> {
    let mut purged = store.purge_expired().await?;
    purged.signing_keys = rotation::prune_expired(store, settings.access_token_lifetime)
        .await?
        .len() as u64;
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
                    signing_keys = purged.signing_keys,
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
