//! Two authserver replicas on one database (issue 9, item 6), on SQLite and PostgreSQL: an
//! application deleted on one is refused by the other with `401 invalid_client`, never a 500,
//! also while the other still holds it in its client cache (PostgreSQL, the change's
//! notification not yet delivered or lost); a user deleted on one while the other is issuing
//! their tokens is `400 invalid_grant`, never a 500.

mod support;

use authserver::oauth::OAuthError;
use authserver::store::{
    Backend, FOREIGN_COMMIT_BOUND, GrantType, RefreshOutcome, Store, StoreError,
};
use authserver::testing;
use axum::response::IntoResponse;
use serde_json::Value;
use support::{Replica, new_tokens};

const PASSWORD_GRANT: [(&str, &str); 3] = [
    ("grant_type", "password"),
    ("username", "alice"),
    ("password", "wonderland"),
];
const CLIENT_CREDENTIALS: [(&str, &str); 1] = [("grant_type", "client_credentials")];

/// Deletes the application of `client` through `store`. On PostgreSQL without the notification
/// the views and CLI send (as if it were lost, or not yet delivered), so that the other replica
/// still holds the application in its cache; on SQLite as the views and CLI do, returning once
/// the deletion counts for the other replica's lookups (a commit by another connection does
/// [`FOREIGN_COMMIT_BOUND`] after it). Whether the other replica is left with a stale entry.
async fn delete(store: &Store, client: &(String, String)) -> bool {
    let app = store
        .find_application_by_client_id(&client.0)
        .await
        .unwrap()
        .unwrap();
    if store.backend() == Backend::Sqlite {
        assert!(store.delete_application(app.id).await.unwrap());
        tokio::time::sleep(FOREIGN_COMMIT_BOUND * 2).await;
        return false;
    }
    let mut tx = store.pool().begin().await.unwrap();
    for statement in [
        "DELETE FROM tokens WHERE application_id = $1",
        "DELETE FROM applications WHERE id = $1",
        // The token caches do hear it (docs/scaling.md#introspection-from-memory).
        // The channel is named after the schema (docs/scaling.md), as the store names it.
        "SELECT pg_notify('tokengate_token_cache_' || md5(current_schema()), 'all') WHERE $1::bigint IS NOT NULL",
    ] {
        sqlx::query(statement)
            .bind(app.id)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    true
}

fn error_of(reply: &(u16, Value)) -> (u16, &str) {
    (reply.0, reply.1["error"].as_str().unwrap_or_default())
}

#[tokio::test]
async fn a_token_request_for_an_application_deleted_elsewhere_is_invalid_client() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        testing::user(&a, "alice", "wonderland").await;
        testing::client_cache_ready(&b).await;
        let server = Replica::start(b.clone()).await;
        for (grant, form) in [
            (GrantType::Password, &PASSWORD_GRANT[..]),
            (GrantType::ClientCredentials, &CLIENT_CREDENTIALS[..]),
        ] {
            let what = format!("{backend:?}, {grant:?}");
            // The channel that empties client caches is the schema's (the change bus): other
            // tests' changes do not reach B, but this test's own do, when they please: the
            // notification of the application's creation on A, heard by B after the warm-up,
            // empties B's cache, and the stale entry this test needs is gone. Tried again, then.
            let mut attempts = 0;
            let client = loop {
                attempts += 1;
                let client = testing::application(&a, grant, false).await;
                // B authenticates the client once: its cache now holds the application.
                let warm = server.post("/o/token/", &client, form).await;
                assert_eq!(warm.0, 200, "{what}: {}", warm.1);
                let stale = delete(&a, &client).await;
                let cached = b
                    .find_application_by_client_id(&client.0)
                    .await
                    .unwrap()
                    .is_some();
                if !stale || cached || attempts == 5 {
                    assert!(
                        !stale || cached,
                        "{what}: B still has the application cached"
                    );
                    break client;
                }
            };
            let reply = server.post("/o/token/", &client, form).await;
            assert_eq!(
                error_of(&reply),
                (401, "invalid_client"),
                "{what}: {}",
                reply.1
            );
            // The failed insert evicted the stale entry: B now reads the deletion.
            assert!(
                b.find_application_by_client_id(&client.0)
                    .await
                    .unwrap()
                    .is_none(),
                "{what}: evicted"
            );
            let reply = server.post("/o/token/", &client, form).await;
            assert_eq!(error_of(&reply), (401, "invalid_client"), "{what}");
        }
    }
}

/// The other endpoints that take the cached application: a refresh, an introspection and a
/// revocation by a client deleted on the other replica are answered, never with a 500.
#[tokio::test]
async fn other_endpoints_do_not_fail_for_an_application_deleted_elsewhere() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        testing::user(&a, "alice", "wonderland").await;
        testing::client_cache_ready(&b).await;
        let server = Replica::start(b.clone()).await;
        let client = testing::application(&a, GrantType::Password, false).await;
        let introspector = testing::application(&a, GrantType::ClientCredentials, true).await;
        let (status, tokens) = server.post("/o/token/", &client, &PASSWORD_GRANT).await;
        assert_eq!(status, 200, "{tokens}");
        let access = tokens["access_token"].as_str().unwrap();
        let refresh = tokens["refresh_token"].as_str().unwrap();
        let introspect = [("token", access)];
        let (status, answer) = server
            .post("/o/introspect/", &introspector, &introspect)
            .await;
        assert_eq!((status, &answer["active"]), (200, &Value::Bool(true)));

        let stale = delete(&a, &client).await;
        // Its tokens went with it: a refresh is refused (the token is unknown now; or, where B
        // reads the deletion, the client is).
        // The client-cache channel is the schema's (the change bus), so only this test's own
        // changes reach B, but when they please: the notification of an application created
        // on A above may empty B's cache first, and then B reads the deletion too. Either
        // refusal, never a 500.
        let reply = server
            .post(
                "/o/token/",
                &client,
                &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
            )
            .await;
        let got = error_of(&reply);
        assert!(
            got == (401, "invalid_client") || (stale && got == (400, "invalid_grant")),
            "{backend:?}: {}",
            reply.1
        );
        // Inactive once B's token cache has heard the deletion (within its propagation bound).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (status, answer) = server
                .post("/o/introspect/", &introspector, &introspect)
                .await;
            assert_eq!(status, 200, "{backend:?}: {answer}");
            if answer["active"] == false {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: {answer}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let reply = server
            .post("/o/revoke_token/", &client, &[("token", refresh)])
            .await;
        assert!(
            reply.0 == 401 || (stale && reply.0 == 200),
            "{backend:?}: revocation answered {}",
            reply.0
        );

        // The introspecting application itself deleted on A (still cached on B, where B caches):
        // inactive, or the caller unknown; never a 500.
        let stale = delete(&a, &introspector).await;
        let (status, answer) = server
            .post("/o/introspect/", &introspector, &introspect)
            .await;
        if stale && status == 200 {
            assert_eq!(answer["active"], Value::Bool(false), "{backend:?}");
        } else {
            assert_eq!(
                error_of(&(status, answer)),
                (401, "invalid_token"),
                "{backend:?}"
            );
        }
    }
}

/// What the token endpoint answers for a store error: the status and the `error` code.
async fn answer(error: StoreError) -> (u16, String) {
    let response = OAuthError::from(error).into_response();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    let json: Value = serde_json::from_slice(&body).unwrap();
    (
        status,
        json["error"].as_str().unwrap_or_default().to_owned(),
    )
}

/// B authenticates a user (a password grant) or claims their refresh token (a refresh grant);
/// A deletes the user; B then issues the tokens: `UnknownUser`, which the token endpoint
/// answers `400 invalid_grant`.
#[tokio::test]
async fn tokens_for_a_user_deleted_elsewhere_meanwhile_are_invalid_grant() {
    for (a, b) in testing::all_replica_pairs().await {
        let backend = a.backend();
        let (client_id, _) = testing::application(&a, GrantType::Password, false).await;
        let app = b
            .find_application_by_client_id(&client_id)
            .await
            .unwrap()
            .unwrap();

        // Password grant: authenticated on B, deleted on A, issued on B.
        let alice = testing::user(&a, "alice", "wonderland").await;
        let user = b
            .authenticate_user("alice", "wonderland")
            .await
            .unwrap()
            .expect("alice signs in on B");
        assert!(a.delete_user(alice.id).await.unwrap());
        let password_grant = b.issue_tokens(&new_tokens(app.id, user.id, None)).await;

        // Refresh grant: claimed on B, user deleted on A, issued into the family on B.
        let bob = testing::user(&a, "bob", "builder").await;
        let issued = b
            .issue_tokens(&new_tokens(app.id, bob.id, None))
            .await
            .unwrap();
        let refresh = issued.refresh_token.unwrap();
        let RefreshOutcome::Claimed(record) =
            b.claim_refresh_token(&refresh, app.id).await.unwrap()
        else {
            panic!("{backend:?}: bob's refresh token is claimed");
        };
        assert!(a.delete_user(bob.id).await.unwrap());
        let refresh_grant = b
            .issue_tokens(&new_tokens(app.id, bob.id, Some(record.family)))
            .await;

        for (grant, result) in [("password", password_grant), ("refresh", refresh_grant)] {
            let error = result.expect_err("no tokens for a deleted user");
            assert!(
                matches!(error, StoreError::UnknownUser),
                "{backend:?}, {grant}: {error}"
            );
            assert_eq!(
                answer(error).await,
                (400, "invalid_grant".to_owned()),
                "{backend:?}, {grant}"
            );
        }
        // The application was not mistaken for the row that went.
        assert!(
            b.find_application_by_client_id(&client_id)
                .await
                .unwrap()
                .is_some(),
            "{backend:?}"
        );
    }
}
