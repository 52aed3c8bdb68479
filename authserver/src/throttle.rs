//! The password-guessing throttle shared by sign-in and the password grant: failures count per
//! username and client address, and per address, never per username alone (so one address
//! cannot lock a user out everywhere). Attempts under way are bounded per bucket, so a burst of
//! concurrent guesses cannot all pass one count.

use crate::secrets;
use crate::store::{Store, StoreResult};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Failures allowed for one username from one address within [`FAILURE_WINDOW`].
pub const MAX_FAILURES_PER_USER_AND_ADDRESS: i64 = 5;
/// Failures allowed from one address, whatever the usernames, within [`FAILURE_WINDOW`]: higher,
/// because many people may share one address behind a NAT.
pub const MAX_FAILURES_PER_ADDRESS: i64 = 20;
/// Seconds a failure counts; also the `Retry-After` of a refusal.
pub const FAILURE_WINDOW: i64 = 15 * 60;
/// Attempts under way at once in this process for one username from one address, and for one
/// address: more wait their turn (not refused: a client may well send its requests in
/// parallel). Each is counted before its password is checked, so a burst gets at most this
/// many less one guesses past a limit per process; two keep both cores hashing.
const UNDER_WAY_PER_USER_AND_ADDRESS: usize = 2;
const UNDER_WAY_PER_ADDRESS: usize = 4;

/// The failure buckets of one attempt, counted when it began.
pub struct Throttle {
    /// The client's address as text, for log lines.
    pub client: String,
    /// `login:<digest of the lowercased username>@<address>`: the username is not stored as
    /// typed (people type their password into it); `otp:<user id>` for second factors.
    user_and_address: String,
    /// `addr:<address>`.
    address: String,
    /// Failures under `user_and_address` and under `address` when the attempt began.
    counted: [i64; 2],
    /// This attempt's places among those under way, held until it is dropped.
    _under_way: [UnderWay; 2],
}

/// A place among the attempts under way on one bucket in this process. It exists (and counts
/// as a user of the bucket) from before the wait, so a request dropped while waiting (its
/// client gone) leaves the bucket as cleanly as one that finished.
struct UnderWay {
    bucket: String,
    permit: Option<OwnedSemaphorePermit>,
}

/// A bucket with attempts under way or waiting: its semaphore, and how many attempts use it.
struct Bucket {
    semaphore: Arc<Semaphore>,
    users: usize,
}

/// The buckets with attempts under way or waiting.
static BUCKETS_UNDER_WAY: LazyLock<Mutex<HashMap<String, Bucket>>> =
    LazyLock::new(Default::default);

fn buckets_under_way() -> std::sync::MutexGuard<'static, HashMap<String, Bucket>> {
    BUCKETS_UNDER_WAY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl UnderWay {
    /// Waits for a place on `bucket`, where at most `places` attempts are under way at once.
    async fn enter(bucket: &str, places: usize) -> UnderWay {
        let semaphore = {
            let mut buckets = buckets_under_way();
            let entry = buckets.entry(bucket.to_owned()).or_insert_with(|| Bucket {
                semaphore: Arc::new(Semaphore::new(places)),
                users: 0,
            });
            entry.users += 1;
            entry.semaphore.clone()
        };
        let mut place = UnderWay {
            bucket: bucket.to_owned(),
            permit: None,
        };
        place.permit = semaphore.acquire_owned().await.ok();
        place
    }
}

impl Drop for UnderWay {
    /// Leaves the place, and forgets the bucket when no other attempt uses it.
    fn drop(&mut self) {
        self.permit.take();
        let mut buckets = buckets_under_way();
        if let Some(entry) = buckets.get_mut(&self.bucket) {
            entry.users -= 1;
            if entry.users == 0 {
                buckets.remove(&self.bucket);
            }
        }
    }
}

/// The bucket an address counts in: an IPv4 address alone, an IPv6 address by its /64 (one
/// subscriber's network: rotating through its 2^64 addresses must not buy fresh budgets).
fn client_bucket(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(_) => ip.to_string(),
        IpAddr::V6(_) => crate::client_ip::IpRange::new(ip, 64).to_string(),
    }
}

impl Throttle {
    /// Waits for a place among the attempts under way on both buckets, then counts the buckets
    /// of `username` from `address` (one query), before any password hashing. Without a known
    /// address (the router driven without connect info) every client counts as the one address
    /// `unknown`.
    pub async fn check(
        store: &Store,
        username: &str,
        address: Option<IpAddr>,
    ) -> StoreResult<Throttle> {
        let client = address.map_or_else(|| "unknown".to_owned(), client_bucket);
        let user_and_address = format!(
            "login:{}@{client}",
            secrets::digest(&username.to_lowercase())
        );
        Throttle::counting(store, client, user_and_address).await
    }

    /// The throttle of second-factor codes (TOTP or recovery codes) of `user_id`, whose password
    /// was right: [`MAX_FAILURES_PER_USER_AND_ADDRESS`] wrong codes per [`FAILURE_WINDOW`] for the
    /// user from any address (whoever holds the password may ask from many), and the address's
    /// bucket shared with passwords.
    pub async fn second_factor(
        store: &Store,
        user_id: i64,
        address: Option<IpAddr>,
    ) -> StoreResult<Throttle> {
        let client = address.map_or_else(|| "unknown".to_owned(), client_bucket);
        Throttle::counting(store, client, format!("otp:{user_id}")).await
    }

    /// Waits for a place on `user_bucket` and the address's bucket, then counts both.
    async fn counting(
        store: &Store,
        client: String,
        user_and_address: String,
    ) -> StoreResult<Throttle> {
        let address = format!("addr:{client}");
        // Always the address first: one order, so two attempts never wait on each other.
        let under_way = [
            UnderWay::enter(&address, UNDER_WAY_PER_ADDRESS).await,
            UnderWay::enter(&user_and_address, UNDER_WAY_PER_USER_AND_ADDRESS).await,
        ];
        let counted = store
            .count_login_failures([&user_and_address, &address], FAILURE_WINDOW)
            .await?;
        Ok(Throttle {
            client,
            user_and_address,
            address,
            counted,
            _under_way: under_way,
        })
    }

    /// Whether the attempt is refused without looking at the password.
    pub fn refused(&self) -> bool {
        let [user_and_address, address] = self.counted;
        user_and_address >= MAX_FAILURES_PER_USER_AND_ADDRESS || address >= MAX_FAILURES_PER_ADDRESS
    }

    pub async fn failed(&self, store: &Store) -> StoreResult<()> {
        store
            .record_login_failure(
                &[self.user_and_address.clone(), self.address.clone()],
                FAILURE_WINDOW,
            )
            .await
    }

    /// Clears this username's count from this address, if it had any (most sign-ins write
    /// nothing); the address count stays, or one valid account would let an attacker reset it
    /// between guesses.
    pub async fn succeeded(&self, store: &Store) -> StoreResult<()> {
        if self.counted[0] == 0 {
            return Ok(());
        }
        store.clear_login_failures(&self.user_and_address).await
    }
}

/// Dynamic client registrations (RFC 7591) allowed from one address within
/// [`FAILURE_WINDOW`].
pub const MAX_REGISTRATIONS_PER_ADDRESS: i64 = 10;
/// Password-less sign-in passkey challenges (`POST /accounts/login/passkey/options/`
/// `mode=passwordless`, each a stored row) made for one address within [`FAILURE_WINDOW`]: one
/// per press of a passkey button, so a person needs a few, and people behind one NAT share them.
/// (The second factor's are not counted: they are bound to a pending sign-in.)
pub const MAX_PASSKEY_CHALLENGES_PER_ADDRESS: i64 = 60;

/// What is counted per client address when it goes ahead (not only when it fails), and
/// refused past its limit within [`FAILURE_WINDOW`].
#[derive(Clone, Copy, Debug)]
pub enum PerAddress {
    /// Dynamic client registrations: [`MAX_REGISTRATIONS_PER_ADDRESS`].
    Registration,
    /// Password-less sign-in passkey challenges: [`MAX_PASSKEY_CHALLENGES_PER_ADDRESS`].
    PasskeyChallenge,
}

impl PerAddress {
    fn prefix(self) -> &'static str {
        match self {
            PerAddress::Registration => "register",
            PerAddress::PasskeyChallenge => "passkey",
        }
    }

    pub fn limit(self) -> i64 {
        match self {
            PerAddress::Registration => MAX_REGISTRATIONS_PER_ADDRESS,
            PerAddress::PasskeyChallenge => MAX_PASSKEY_CHALLENGES_PER_ADDRESS,
        }
    }
}

/// A request from an address that may go ahead: it holds the address's one place among the
/// requests of its kind under way in this process until it is dropped.
pub struct Turn {
    bucket: String,
    _under_way: UnderWay,
}

impl Turn {
    /// Waits for the address's turn, then counts its requests of this kind; None when it had
    /// the kind's limit within the window. The same store table and window as failed sign-ins,
    /// under a bucket of its own (`register:<address>`, `passkey:<address>`).
    pub async fn check(
        store: &Store,
        kind: PerAddress,
        address: Option<IpAddr>,
    ) -> StoreResult<Option<Turn>> {
        let client = address.map_or_else(|| "unknown".to_owned(), client_bucket);
        let bucket = format!("{}:{client}", kind.prefix());
        let under_way = UnderWay::enter(&bucket, 1).await;
        let [count, _] = store
            .count_login_failures([&bucket, &bucket], FAILURE_WINDOW)
            .await?;
        Ok((count < kind.limit()).then_some(Turn {
            bucket,
            _under_way: under_way,
        }))
    }

    /// Counts a request that went ahead (a registration stored, a challenge made).
    pub async fn counted(self, store: &Store) -> StoreResult<()> {
        store
            .record_login_failure(std::slice::from_ref(&self.bucket), FAILURE_WINDOW)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `username` from `address` may try now.
    async fn allowed(store: &Store, username: &str, address: IpAddr) -> bool {
        !Throttle::check(store, username, Some(address))
            .await
            .unwrap()
            .refused()
    }

    /// Failures stored under `bucket`.
    async fn stored(store: &Store, bucket: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM login_failures WHERE bucket = $1")
            .bind(bucket)
            .fetch_one(store.pool())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn buckets_are_per_user_and_address_and_per_address() {
        let store = crate::testing::sqlite_store().await;
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..MAX_FAILURES_PER_USER_AND_ADDRESS {
            let alice_from_a = Throttle::check(&store, "Alice", Some(a)).await.unwrap();
            assert!(!alice_from_a.refused());
            alice_from_a.failed(&store).await.unwrap();
        }
        assert!(!allowed(&store, "alice", a).await);
        assert!(allowed(&store, "alice", b).await);
        assert!(allowed(&store, "bob", a).await);
        // The username is not stored as typed.
        let stored_as_typed: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM login_failures WHERE bucket LIKE '%lice%'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(stored_as_typed, 0);
        for i in 0..(MAX_FAILURES_PER_ADDRESS - MAX_FAILURES_PER_USER_AND_ADDRESS) {
            let other = Throttle::check(&store, &format!("user{i}"), Some(a))
                .await
                .unwrap();
            assert!(!other.refused());
            other.failed(&store).await.unwrap();
        }
        assert!(!allowed(&store, "carol", a).await);
        assert!(allowed(&store, "carol", b).await);
        // Success clears the username's count from that address, not the address's.
        Throttle::check(&store, "alice", Some(b))
            .await
            .unwrap()
            .failed(&store)
            .await
            .unwrap();
        let alice_from_b = Throttle::check(&store, "alice", Some(b)).await.unwrap();
        alice_from_b.succeeded(&store).await.unwrap();
        assert_eq!(stored(&store, &alice_from_b.user_and_address).await, 0);
        assert_eq!(stored(&store, "addr:192.0.2.2").await, 1);
        let alice_from_a = Throttle::check(&store, "alice", Some(a)).await.unwrap();
        alice_from_a.succeeded(&store).await.unwrap();
        assert_eq!(stored(&store, &alice_from_a.user_and_address).await, 0);
        assert!(!allowed(&store, "alice", a).await, "a's address stays full");
    }

    #[tokio::test]
    async fn an_ipv6_network_is_one_client() {
        let store = crate::testing::sqlite_store().await;
        // One subscriber's /64, a different address for every guess.
        for i in 0..MAX_FAILURES_PER_USER_AND_ADDRESS {
            let ip: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().unwrap();
            let attempt = Throttle::check(&store, "alice", Some(ip)).await.unwrap();
            assert!(!attempt.refused());
            attempt.failed(&store).await.unwrap();
        }
        let fresh: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert!(!allowed(&store, "alice", fresh).await, "same /64: refused");
        let elsewhere: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(allowed(&store, "alice", elsewhere).await, "another /64");
        assert_eq!(stored(&store, "addr:2001:db8:1:2::/64").await, 5);
    }

    /// 40 simultaneous attempts for one user from one address, each failing after a pretend
    /// password check, and whether they passed the throttle.
    async fn burst(store: &Store, user: &str, fail: bool) -> usize {
        let address: IpAddr = "198.51.100.7".parse().unwrap();
        let attempts = (0..40).map(|_| {
            let (store, user) = (store.clone(), user.to_owned());
            tokio::spawn(async move {
                let attempt = Throttle::check(&store, &user, Some(address)).await.unwrap();
                if attempt.refused() {
                    return false;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                if fail {
                    attempt.failed(&store).await.unwrap();
                } else {
                    attempt.succeeded(&store).await.unwrap();
                }
                true
            })
        });
        let mut passed = 0;
        for attempt in attempts.collect::<Vec<_>>() {
            passed += usize::from(attempt.await.unwrap());
        }
        passed
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_guesses_cannot_all_pass_one_count() {
        for store in crate::testing::all_stores().await {
            let user = format!("burst-{}", secrets::random_client_id());
            let guesses = burst(&store, &user, true).await;
            let limit = MAX_FAILURES_PER_USER_AND_ADDRESS as usize;
            assert!(
                (limit..limit + UNDER_WAY_PER_USER_AND_ADDRESS).contains(&guesses),
                "40 simultaneous guesses: {guesses} reached a password check"
            );
            // A client that sends its good requests in parallel waits its turn, never refused.
            let other = format!("parallel-{}", secrets::random_client_id());
            assert_eq!(burst(&store, &other, false).await, 40);
            assert!(
                BUCKETS_UNDER_WAY.lock().unwrap().is_empty(),
                "buckets forgotten"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_dropped_while_waiting_leaves_no_bucket_behind() {
        let bucket = format!("test:{}", secrets::random_client_id());
        for _ in 0..200 {
            let holder = UnderWay::enter(&bucket, 1).await;
            let waiting = {
                let bucket = bucket.clone();
                tokio::spawn(async move { UnderWay::enter(&bucket, 1).await })
            };
            tokio::task::yield_now().await;
            waiting.abort();
            drop(holder);
            let _ = waiting.await;
        }
        assert!(!buckets_under_way().contains_key(&bucket));
    }
}
