//! The password-guessing throttle shared by operator sign-in and the password grant: failures
//! count per username and client address, and per address, never per username alone (so one
//! address cannot lock a user out everywhere).

use crate::secrets;
use crate::store::{Store, StoreResult};
use std::net::IpAddr;

/// Failures allowed for one username from one address within [`FAILURE_WINDOW`].
pub const MAX_FAILURES_PER_USER_AND_ADDRESS: i64 = 5;
/// Failures allowed from one address, whatever the usernames, within [`FAILURE_WINDOW`]: higher,
/// because many people may share one address behind a NAT.
pub const MAX_FAILURES_PER_ADDRESS: i64 = 20;
/// Seconds a failure counts; also the `Retry-After` of a refusal.
pub const FAILURE_WINDOW: i64 = 15 * 60;

/// The failure buckets of one attempt.
pub struct Throttle {
    /// The client's address as text, for log lines.
    pub client: String,
    /// `login:<digest of the lowercased username>@<address>`: the username is not stored as
    /// typed (people type their password into it).
    user_and_address: String,
    /// `addr:<address>`.
    address: String,
}

impl Throttle {
    /// The buckets of `username` from `address`. Without a known address (the router driven
    /// without connect info) every client counts as the one address `unknown`.
    pub fn new(username: &str, address: Option<IpAddr>) -> Throttle {
        let client = address.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        Throttle {
            user_and_address: format!(
                "login:{}@{client}",
                secrets::digest(&username.to_lowercase())
            ),
            address: format!("addr:{client}"),
            client,
        }
    }

    /// Whether this attempt may be checked at all; checked before any password hashing.
    pub async fn allows(&self, store: &Store) -> StoreResult<bool> {
        Ok(store
            .count_login_failures(&self.user_and_address, FAILURE_WINDOW)
            .await?
            < MAX_FAILURES_PER_USER_AND_ADDRESS
            && store
                .count_login_failures(&self.address, FAILURE_WINDOW)
                .await?
                < MAX_FAILURES_PER_ADDRESS)
    }

    pub async fn failed(&self, store: &Store) -> StoreResult<()> {
        store
            .record_login_failure(
                &[self.user_and_address.clone(), self.address.clone()],
                FAILURE_WINDOW,
            )
            .await
    }

    /// Clears this username's count from this address; the address count stays, or one valid
    /// account would let an attacker reset it between guesses.
    pub async fn succeeded(&self, store: &Store) -> StoreResult<()> {
        store.clear_login_failures(&self.user_and_address).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn buckets_are_per_user_and_address_and_per_address() {
        let store = crate::testing::sqlite_store().await;
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let alice_from_a = Throttle::new("Alice", Some(a));
        for _ in 0..MAX_FAILURES_PER_USER_AND_ADDRESS {
            assert!(alice_from_a.allows(&store).await.unwrap());
            alice_from_a.failed(&store).await.unwrap();
        }
        assert!(
            !Throttle::new("alice", Some(a))
                .allows(&store)
                .await
                .unwrap()
        );
        assert!(
            Throttle::new("alice", Some(b))
                .allows(&store)
                .await
                .unwrap()
        );
        assert!(Throttle::new("bob", Some(a)).allows(&store).await.unwrap());
        // The username is not stored as typed.
        let stored: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM login_failures WHERE bucket LIKE '%lice%'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(stored, 0);
        for i in 0..(MAX_FAILURES_PER_ADDRESS - MAX_FAILURES_PER_USER_AND_ADDRESS) {
            let other = Throttle::new(&format!("user{i}"), Some(a));
            assert!(other.allows(&store).await.unwrap());
            other.failed(&store).await.unwrap();
        }
        assert!(
            !Throttle::new("carol", Some(a))
                .allows(&store)
                .await
                .unwrap()
        );
        assert!(
            Throttle::new("carol", Some(b))
                .allows(&store)
                .await
                .unwrap()
        );
        // Success clears the username's count from that address, not the address's.
        let alice_from_b = Throttle::new("alice", Some(b));
        alice_from_b.failed(&store).await.unwrap();
        alice_from_b.succeeded(&store).await.unwrap();
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM login_failures WHERE bucket = $1")
            .bind("addr:192.0.2.2")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(left, 1);
        alice_from_a.succeeded(&store).await.unwrap();
        assert!(
            !alice_from_a.allows(&store).await.unwrap(),
            "a's address stays full"
        );
    }
}
