//! Refresh-token reuse under concurrency (issue 9, item 1), on SQLite and PostgreSQL: however N
//! presentations of one refresh token interleave, once the reuse is detected no token of the
//! family is active, and the reuse is logged once.

mod support;

use authserver::store::{GrantType, RefreshOutcome, Store, StoreError};
use authserver::testing;
use serde_json::Value;
use std::sync::Arc;
use support::{Replica, new_tokens};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

/// (racers, rounds): more rounds where a race is narrow.
const RACES: [(usize, usize); 3] = [(2, 10), (5, 5), (50, 2)];

/// What one racer presenting the shared refresh token got.
#[derive(Debug)]
enum Racer {
    /// Claimed the token; the new pair, unless the family was revoked before it was stored.
    Won(Option<(String, String)>),
    Reused,
    Revoked,
    Invalid,
}

/// A user named `username` and a password-grant application on `store`: their ids.
async fn user_and_application(store: &Store, username: &str) -> (i64, i64) {
    let user = testing::user(store, username, "pw").await;
    (user.id, support::password_application_id(store).await)
}

/// `future` on a task of its own, started once every racer waits at `barrier`.
fn spawn_racer<T: Send + 'static>(
    barrier: &Arc<Barrier>,
    future: impl Future<Output = T> + Send + 'static,
) -> JoinHandle<T> {
    let barrier = barrier.clone();
    tokio::spawn(async move {
        barrier.wait().await;
        future.await
    })
}

/// `racers` futures made by `racer(i)`, released together; their results in order.
async fn race<T: Send + 'static, F: Future<Output = T> + Send + 'static>(
    racers: usize,
    racer: impl Fn(usize) -> F,
) -> Vec<T> {
    let barrier = Arc::new(Barrier::new(racers));
    let tasks: Vec<_> = (0..racers)
        .map(|i| spawn_racer(&barrier, racer(i)))
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// A refresh the way the token endpoint does it: claim, then issue into the same family.
async fn refresh(store: &Store, refresh_token: &str, app_id: i64, user_id: i64) -> Racer {
    match store
        .claim_refresh_token(refresh_token, app_id)
        .await
        .unwrap()
    {
        RefreshOutcome::Claimed(record) => {
            let new = new_tokens(app_id, user_id, Some(record.family));
            match store.issue_tokens(&new).await {
                Ok(issued) => {
                    Racer::Won(Some((issued.access_token, issued.refresh_token.unwrap())))
                }
                Err(StoreError::FamilyRevoked) => Racer::Won(None),
                Err(other) => panic!("issuing into the family: {other}"),
            }
        }
        RefreshOutcome::Reused => Racer::Reused,
        RefreshOutcome::Revoked => Racer::Revoked,
        RefreshOutcome::Invalid => Racer::Invalid,
    }
}

/// Every access and refresh token listed is inactive, and no refresh token can be claimed. (All
/// are looked at before any is presented again: presenting a spent one revokes the family.)
async fn assert_family_dead(store: &Store, app_id: i64, tokens: &[(String, String)], what: &str) {
    for (access, refresh) in tokens {
        for token in [access, refresh] {
            let record = store.find_token(token).await.unwrap().expect("stored");
            assert!(!record.is_active(), "{what}: a token is still active");
        }
    }
    for (_, refresh) in tokens {
        let again = store.claim_refresh_token(refresh, app_id).await.unwrap();
        assert!(
            matches!(again, RefreshOutcome::Revoked),
            "{what}: a further refresh gave {again:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reuse_leaves_no_active_token_in_the_family() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (user_id, app_id) = user_and_application(&store, "racer").await;
        for (racers, rounds) in RACES {
            let mut winner_got_tokens = 0;
            for round in 0..rounds {
                let what = format!("{backend:?}, {racers} racers, round {round}");
                let first = store
                    .issue_tokens(&new_tokens(app_id, user_id, None))
                    .await
                    .unwrap();
                let presented = first.refresh_token.clone().unwrap();
                let results = race(racers, |_| {
                    let (store, presented) = (store.clone(), presented.clone());
                    async move { refresh(&store, &presented, app_id, user_id).await }
                })
                .await;
                let count = |f: fn(&Racer) -> bool| results.iter().filter(|r| f(r)).count();
                assert_eq!(
                    count(|r| matches!(r, Racer::Won(_))),
                    1,
                    "{what}: {results:?}"
                );
                assert_eq!(
                    count(|r| matches!(r, Racer::Reused)),
                    1,
                    "{what}: {results:?}"
                );
                assert_eq!(
                    count(|r| matches!(r, Racer::Invalid)),
                    0,
                    "{what}: {results:?}"
                );
                let mut received = vec![(first.access_token, presented)];
                for result in results {
                    if let Racer::Won(Some(pair)) = result {
                        winner_got_tokens += 1;
                        received.push(pair);
                    }
                }
                assert_family_dead(&store, app_id, &received, &what).await;
            }
            eprintln!(
                "{backend:?}, {racers} racers: the winner got (dead) tokens in {winner_got_tokens} of {rounds} rounds, invalid_grant in the others"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revocation_racing_a_refresh_leaves_no_active_token() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (user_id, app_id) = user_and_application(&store, "revoker").await;
        for round in 0..20 {
            let first = store
                .issue_tokens(&new_tokens(app_id, user_id, None))
                .await
                .unwrap();
            let presented = first.refresh_token.clone().unwrap();
            let barrier = Arc::new(Barrier::new(2));
            let refresher = {
                let (store, presented) = (store.clone(), presented.clone());
                spawn_racer(&barrier, async move {
                    refresh(&store, &presented, app_id, user_id).await
                })
            };
            let revoker = {
                let (store, access) = (store.clone(), first.access_token.clone());
                spawn_racer(&barrier, async move {
                    store.revoke_token(&access, app_id).await.unwrap()
                })
            };
            assert!(revoker.await.unwrap(), "{backend:?}: revoked");
            let mut received = vec![(first.access_token, presented)];
            if let Racer::Won(Some(pair)) = refresher.await.unwrap() {
                received.push(pair);
            }
            assert_family_dead(
                &store,
                app_id,
                &received,
                &format!("{backend:?}, round {round}"),
            )
            .await;
        }
    }
}

#[tokio::test]
async fn sequential_refresh_rotates_single_use() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (user_id, app_id) = user_and_application(&store, "rotor").await;
        let first = store
            .issue_tokens(&new_tokens(app_id, user_id, None))
            .await
            .unwrap();
        let mut current = (first.access_token, first.refresh_token.unwrap());
        for step in 0..3 {
            let Racer::Won(Some(next)) = refresh(&store, &current.1, app_id, user_id).await else {
                panic!("{backend:?}: rotation {step} failed");
            };
            for (token, active) in [
                (&current.0, false),
                (&current.1, false),
                (&next.0, true),
                (&next.1, true),
            ] {
                let record = store.find_token(token).await.unwrap().unwrap();
                assert_eq!(record.is_active(), active, "{backend:?}, rotation {step}");
            }
            current = next;
        }
    }
}

/// A database made before the `revoked_families` migration upgrades, keeps its tokens, and
/// detects reuse afterwards.
#[tokio::test]
async fn existing_databases_upgrade() {
    for url in testing::all_database_urls().await {
        let store = Store::connect(&url).await.unwrap();
        let backend = store.backend();
        let (user_id, app_id) = user_and_application(&store, "old").await;
        let old = store
            .issue_tokens(&new_tokens(app_id, user_id, None))
            .await
            .unwrap();
        for undo in [
            "DROP TABLE revoked_families",
            "DELETE FROM schema_migrations WHERE version >= 3",
        ] {
            sqlx::query(undo).execute(store.pool()).await.unwrap();
        }
        store.pool().close().await;
        drop(store);

        let store = Store::connect(&url).await.unwrap();
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM schema_migrations ORDER BY version")
                .fetch_all(store.pool())
                .await
                .unwrap();
        assert!(versions.contains(&3), "{backend:?}: {versions:?}");
        let record = store.find_token(&old.access_token).await.unwrap().unwrap();
        assert!(record.is_active(), "{backend:?}: old tokens survive");
        let presented = old.refresh_token.unwrap();
        let Racer::Won(Some(next)) = refresh(&store, &presented, app_id, user_id).await else {
            panic!("{backend:?}: refresh after the upgrade")
        };
        assert!(matches!(
            refresh(&store, &presented, app_id, user_id).await,
            Racer::Reused
        ));
        assert_family_dead(&store, app_id, &[next], &format!("{backend:?}")).await;
    }
}

// --- The same races through `POST /o/token/`, across two replicas on one database. ---

fn reuse_warnings(client_id: &str) -> usize {
    support::logged()
        .lines()
        .filter(|line| {
            line.contains(" WARN ")
                && line.contains("refresh token reused")
                && line.contains(&format!("client_id={client_id}"))
        })
        .count()
}

struct Replicas {
    replicas: [Replica; 2],
    /// An application allowed to introspect.
    introspector: (String, String),
}

impl Replicas {
    /// A server on each store; `introspector` is an application allowed to introspect.
    async fn start(stores: [Store; 2], introspector: (String, String)) -> Arc<Replicas> {
        let [first, second] = stores;
        Arc::new(Replicas {
            replicas: [Replica::start(first).await, Replica::start(second).await],
            introspector,
        })
    }

    /// [`Replica::post`] to replica `replica` (modulo 2).
    async fn post(
        &self,
        replica: usize,
        path: &str,
        client: &(String, String),
        form: &[(&str, &str)],
    ) -> (u16, Value) {
        self.replicas[replica % 2].post(path, client, form).await
    }

    async fn refresh(
        &self,
        replica: usize,
        client: &(String, String),
        refresh_token: &str,
    ) -> (u16, Value) {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ];
        self.post(replica, "/o/token/", client, &form).await
    }

    /// Whether either replica's introspection calls the token active (asked as its own kind).
    async fn active(&self, token: &str, hint: &str) -> bool {
        let mut active = false;
        for replica in 0..2 {
            let form = [("token", token), ("token_type_hint", hint)];
            let (status, body) = self
                .post(replica, "/o/introspect/", &self.introspector, &form)
                .await;
            assert_eq!(status, 200, "{body}");
            active |= body["active"] == true;
        }
        active
    }
}

/// The access and refresh token of a token response.
fn token_pair(body: &Value) -> (String, String) {
    let token = |name: &str| body[name].as_str().unwrap().to_owned();
    (token("access_token"), token("refresh_token"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refresh_requests_leave_no_active_token() {
    support::capture_logs();
    for (first, second) in testing::all_replica_pairs().await {
        let backend = first.backend();
        testing::user(&first, "alice", "wonderland").await;
        let introspector = testing::application(&first, GrantType::ClientCredentials, true).await;
        let replicas = Replicas::start([first.clone(), second], introspector).await;
        for (racers, rounds) in RACES {
            for round in 0..rounds {
                let what = format!("{backend:?}, {racers} racers, round {round}");
                // A client of its own per round, so its warnings are this round's.
                let client = testing::application(&first, GrantType::Password, false).await;
                let form = [
                    ("grant_type", "password"),
                    ("username", "alice"),
                    ("password", "wonderland"),
                ];
                let (status, body) = replicas.post(0, "/o/token/", &client, &form).await;
                assert_eq!(status, 200, "{what}: {body}");
                let mut received = vec![token_pair(&body)];
                let presented = received[0].1.clone();
                let replies = race(racers, |racer| {
                    let (replicas, client, presented) =
                        (replicas.clone(), client.clone(), presented.clone());
                    async move { replicas.refresh(racer, &client, &presented).await }
                })
                .await;
                let ok = replies.iter().filter(|(status, _)| *status == 200).count();
                assert!(ok <= 1, "{what}: {ok} refreshes succeeded");
                for (status, body) in &replies {
                    match status {
                        200 => received.push(token_pair(body)),
                        _ => assert_eq!(
                            (*status, &body["error"]),
                            (400, &Value::from("invalid_grant")),
                            "{what}"
                        ),
                    }
                }
                // Every token looked at before any is presented again (that would revoke).
                for (access, refresh) in &received {
                    assert!(
                        !replicas.active(access, "access_token").await,
                        "{what}: access token active"
                    );
                    assert!(
                        !replicas.active(refresh, "refresh_token").await,
                        "{what}: refresh token active"
                    );
                }
                for (_, refresh) in &received {
                    let (status, body) = replicas.refresh(round, &client, refresh).await;
                    assert_eq!(
                        (status, &body["error"]),
                        (400, &Value::from("invalid_grant")),
                        "{what}"
                    );
                }
                assert_eq!(
                    reuse_warnings(&client.0),
                    1,
                    "{what}: one warning per reuse"
                );
            }
        }
    }
}

#[tokio::test]
async fn sequential_refresh_requests_rotate() {
    support::capture_logs();
    for (first, second) in testing::all_replica_pairs().await {
        let backend = first.backend();
        testing::user(&first, "bob", "builder").await;
        let introspector = testing::application(&first, GrantType::ClientCredentials, true).await;
        let client = testing::application(&first, GrantType::Password, false).await;
        let replicas = Replicas::start([first, second], introspector).await;
        let form = [
            ("grant_type", "password"),
            ("username", "bob"),
            ("password", "builder"),
        ];
        let (_, mut current) = replicas.post(0, "/o/token/", &client, &form).await;
        for step in 0..3 {
            let (status, next) = replicas
                .refresh(step, &client, current["refresh_token"].as_str().unwrap())
                .await;
            assert_eq!(status, 200, "{backend:?}, rotation {step}: {next}");
            for (body, active) in [(&current, false), (&next, true)] {
                let access = body["access_token"].as_str().unwrap();
                let refresh = body["refresh_token"].as_str().unwrap();
                assert_eq!(
                    replicas.active(access, "access_token").await,
                    active,
                    "{backend:?}, rotation {step}"
                );
                assert_eq!(
                    replicas.active(refresh, "refresh_token").await,
                    active,
                    "{backend:?}, rotation {step}"
                );
            }
            current = next;
        }
        assert_eq!(
            reuse_warnings(&client.0),
            0,
            "{backend:?}: rotation is no reuse"
        );
    }
}
