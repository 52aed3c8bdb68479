//! The hot storage path (issue 12) on SQLite and PostgreSQL: what one replica changes, another
//! sees (at once for tokens and, through PostgreSQL's notification, for applications); writes
//! that share one SQLite commit fail alone; an in-memory SQLite URL is one database for both paths.

use authserver::store::{GrantType, NewTokens, RefreshOutcome, Store, StoreError};
use authserver::testing;
use std::time::Duration;

/// A client-credentials token request's row for `application_id`, or a refresh-grant pair in
/// `family`.
fn tokens(application_id: i64, family: Option<String>) -> NewTokens {
    NewTokens {
        cnf_x5t_s256: None,
        cnf_jkt: None,
        audience: None,
        application_id,
        user_id: None,
        scope: "read".into(),
        access_lifetime: 600,
        refresh_lifetime: family.as_ref().map(|_| 3600),
        family,
    }
}

async fn application_id(store: &Store, client_id: &str) -> i64 {
    store
        .find_application_by_client_id(client_id)
        .await
        .unwrap()
        .expect("the application exists")
        .id
}

/// Two replicas on one database: B caches an application (on PostgreSQL); A gives it a new
/// secret and deletes another. B sees both changes as soon as PostgreSQL delivers A's
/// notification (at once on SQLite, which caches nothing), well within a second, never after
/// the cache's lifetime. A token revoked on A is inactive on B at once (never cached).
async fn changes_on_one_replica_reach_the_other(a: Store, b: Store) {
    let backend = a.backend();
    let (rotated, old_secret) = testing::application(&a, GrantType::ClientCredentials, true).await;
    let (deleted, _) = testing::application(&a, GrantType::ClientCredentials, true).await;
    let rotated_id = application_id(&b, &rotated).await;
    let deleted_id = application_id(&b, &deleted).await;
    let issued = b.issue_tokens(&tokens(rotated_id, None)).await.unwrap();

    assert!(
        a.revoke_token(&issued.access_token, rotated_id)
            .await
            .unwrap()
    );
    let seen = b.find_token(&issued.access_token).await.unwrap().unwrap();
    assert!(!seen.is_active(), "{backend:?}: revocation seen at once");

    // B listens for changes before A makes them (PostgreSQL).
    testing::client_cache_ready(&b).await;
    let new_secret = a
        .regenerate_secret(rotated_id, std::time::Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(a.delete_application(deleted_id).await.unwrap());
    let changed = std::time::Instant::now();
    while b
        .find_application_by_client_id(&deleted)
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "{backend:?}: the deletion is not seen after {:?}",
            changed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fresh = b
        .find_application_by_client_id(&rotated)
        .await
        .unwrap()
        .unwrap();
    assert!(fresh.secret_matches(&new_secret), "{backend:?}: new secret");
    assert!(
        !fresh.secret_matches(&old_secret),
        "{backend:?}: old secret"
    );
    assert!(
        b.find_application_by_client_id(&deleted)
            .await
            .unwrap()
            .is_none(),
        "{backend:?}: deletion seen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_see_each_others_changes_at_once() {
    let pairs = testing::all_replica_pairs().await;
    let runs: Vec<_> = pairs
        .into_iter()
        .map(|(a, b)| tokio::spawn(changes_on_one_replica_reach_the_other(a, b)))
        .collect();
    for run in runs {
        run.await.unwrap();
    }
}

/// Many writes at once (on SQLite they share commits): those into a revoked family, pairs and
/// lone tokens, fail with `FamilyRevoked`, and the others are stored all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_fail_alone() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (client_id, _) = testing::application(&store, GrantType::Password, false).await;
        let app = application_id(&store, &client_id).await;
        let first = store
            .issue_tokens(&tokens(app, Some("dead-family".into())))
            .await
            .unwrap();
        assert!(store.revoke_family("dead-family").await.unwrap());
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let family = (i % 2 == 0).then(|| "dead-family".to_owned());
                    let mut new = tokens(app, family);
                    if i % 4 == 0 {
                        // A lone token continuing the family (a code exchange without a
                        // refresh token): one statement, no savepoint, on SQLite.
                        new.refresh_lifetime = None;
                    }
                    (i, store.issue_tokens(&new).await)
                })
            })
            .collect();
        for task in tasks {
            match task.await.unwrap() {
                (i, Err(StoreError::FamilyRevoked)) if i % 2 == 0 => {}
                (i, Ok(issued)) if i % 2 == 1 => {
                    let found = store.find_token(&issued.access_token).await.unwrap();
                    assert!(found.unwrap().is_active(), "{backend:?}: write {i} stored");
                }
                (i, other) => panic!("{backend:?}: write {i} gave {other:?}"),
            }
        }
        let refresh = first.refresh_token.unwrap();
        assert!(matches!(
            store.claim_refresh_token(&refresh, app).await.unwrap(),
            RefreshOutcome::Revoked
        ));
    }
}

/// Cold-path writes (through sqlx) interleaved with hot ones all succeed: they take turns
/// rather than meeting SQLite's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_and_hot_writes_take_turns() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (client_id, _) = testing::application(&store, GrantType::ClientCredentials, true).await;
        let app = application_id(&store, &client_id).await;
        let hot: Vec<_> = (0..100)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.issue_tokens(&tokens(app, None)).await })
            })
            .collect();
        let cold: Vec<_> = (0..10)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    testing::application(&store, GrantType::Password, false).await
                })
            })
            .collect();
        for task in hot {
            task.await
                .unwrap()
                .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        }
        for task in cold {
            task.await.unwrap();
        }
    }
}

/// `sqlite::memory:` is one database for sqlx and for the hot path (a temporary file).
#[tokio::test]
async fn an_in_memory_sqlite_url_is_one_database() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let (client_id, secret) =
        testing::application(&store, GrantType::ClientCredentials, true).await;
    let app = store
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .expect("written through sqlx, read on the hot path");
    assert!(app.secret_matches(&secret));
    let issued = store.issue_tokens(&tokens(app.id, None)).await.unwrap();
    assert!(
        store
            .find_token(&issued.access_token)
            .await
            .unwrap()
            .unwrap()
            .is_active()
    );
    let other = Store::connect("sqlite::memory:").await.unwrap();
    assert!(
        other
            .find_application_by_client_id(&client_id)
            .await
            .unwrap()
            .is_none(),
        "each in-memory URL is a database of its own"
    );
}

/// Lookups made at once (on PostgreSQL they share statements) each get their own token, also
/// when several ask for the same one, and unknown tokens stay unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_each_get_their_token() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (client_id, _) = testing::application(&store, GrantType::ClientCredentials, true).await;
        let app = application_id(&store, &client_id).await;
        let mut issued = Vec::new();
        for _ in 0..3 {
            let tokens = store.issue_tokens(&tokens(app, None)).await.unwrap();
            let id = store
                .find_token(&tokens.access_token)
                .await
                .unwrap()
                .unwrap()
                .id;
            issued.push((tokens.access_token, Some(id)));
        }
        issued.push(("not-a-token".to_owned(), None));
        let lookups: Vec<_> = (0..96)
            .map(|i| {
                let (store, (token, id)) = (store.clone(), issued[i % issued.len()].clone());
                tokio::spawn(async move {
                    let found = store.find_token(&token).await.unwrap();
                    (found.map(|record| record.id), id)
                })
            })
            .collect();
        for lookup in lookups {
            let (found, expected) = lookup.await.unwrap();
            assert_eq!(found, expected, "{backend:?}");
        }
    }
}
