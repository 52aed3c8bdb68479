//! Client-secret rotation with a grace period (issue 38): the previous secret authenticates its
//! client until the grace ends and never after; without a grace it dies at once; another
//! client's secret never works. On every backend, through the token endpoint.

use std::time::Duration;

use authserver::config::Settings;
use authserver::registration;
use authserver::store::{GrantType, Store};
use authserver::testing;
use authserver::{AppState, app};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use test_support::basic_auth;
use tower::ServiceExt;

/// The token endpoint's status for a client-credentials request authenticated by this pair.
async fn token_status(state: &AppState, client_id: &str, secret: &str) -> StatusCode {
    let request = Request::builder()
        .method("POST")
        .uri("/o/token/")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::AUTHORIZATION, basic_auth(client_id, secret))
        .body(Body::from("grant_type=client_credentials"))
        .unwrap();
    app(state.clone()).oneshot(request).await.unwrap().status()
}

async fn id_of(store: &Store, client_id: &str) -> i64 {
    store
        .find_application_by_client_id(client_id)
        .await
        .unwrap()
        .unwrap()
        .id
}

#[tokio::test]
async fn the_previous_secret_works_until_its_grace_ends_and_never_after() {
    for store in testing::all_stores().await {
        let (client_id, original) =
            testing::application(&store, GrantType::ClientCredentials, false).await;
        let (_, stranger) = testing::application(&store, GrantType::ClientCredentials, false).await;
        let state = AppState::new(Settings::for_tests("unused"), store.clone());
        let id = id_of(&store, &client_id).await;
        let ok = StatusCode::OK;
        let refused = StatusCode::UNAUTHORIZED;
        assert_eq!(token_status(&state, &client_id, &original).await, ok);

        let first = registration::rotate_secret(&store, id, Duration::from_secs(3600))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(token_status(&state, &client_id, &first).await, ok);
        assert_eq!(
            token_status(&state, &client_id, &original).await,
            ok,
            "in its grace"
        );
        assert_eq!(token_status(&state, &client_id, &stranger).await, refused);
        assert_eq!(token_status(&state, &client_id, "").await, refused);

        // A second rotation replaces the previous secret: the original is gone at once.
        let second = registration::rotate_secret(&store, id, Duration::from_secs(2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(token_status(&state, &client_id, &second).await, ok);
        assert_eq!(
            token_status(&state, &client_id, &first).await,
            ok,
            "in its grace"
        );
        assert_eq!(token_status(&state, &client_id, &original).await, refused);
        assert_eq!(token_status(&state, &client_id, &stranger).await, refused);

        // Once the grace has ended (whole seconds), the previous secret is refused, even by a
        // cached application.
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert_eq!(token_status(&state, &client_id, &first).await, refused);
        assert_eq!(token_status(&state, &client_id, &second).await, ok);

        // The purge clears it.
        let app = store.get_application(id).await.unwrap().unwrap();
        assert!(app.previous_secret.is_some());
        store.purge_expired().await.unwrap();
        let app = store.get_application(id).await.unwrap().unwrap();
        assert!(app.previous_secret.is_none());
        assert!(app.secret_matches(&second) && !app.secret_matches(&first));
    }
}

#[tokio::test]
async fn without_a_grace_the_previous_secret_dies_at_once() {
    for store in testing::all_stores().await {
        let (client_id, original) =
            testing::application(&store, GrantType::ClientCredentials, false).await;
        let state = AppState::new(Settings::for_tests("unused"), store.clone());
        let id = id_of(&store, &client_id).await;
        // A rotation with a grace, then one without: no previous secret is left at all.
        let first = registration::rotate_secret(&store, id, Duration::from_secs(3600))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            token_status(&state, &client_id, &original).await,
            StatusCode::OK
        );
        let second = registration::rotate_secret(&store, id, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            token_status(&state, &client_id, &second).await,
            StatusCode::OK
        );
        for dead in [&original, &first] {
            assert_eq!(
                token_status(&state, &client_id, dead).await,
                StatusCode::UNAUTHORIZED
            );
        }
        let app = store.get_application(id).await.unwrap().unwrap();
        assert!(app.previous_secret.is_none());
    }
}

/// The rule itself: an expired previous secret is refused, an unexpired one accepted, and the
/// current one always.
#[tokio::test]
async fn secret_matches_honours_the_expiry() {
    let store = testing::store().await;
    let (client_id, original) =
        testing::application(&store, GrantType::ClientCredentials, false).await;
    let id = id_of(&store, &client_id).await;
    let new = registration::rotate_secret(&store, id, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let app = store.get_application(id).await.unwrap().unwrap();
    let expires_at = app.previous_secret.as_ref().unwrap().expires_at;
    assert!(app.secret_matches_at(&original, expires_at - 1));
    assert!(!app.secret_matches_at(&original, expires_at));
    assert!(app.secret_matches_at(&new, expires_at + 1_000_000));
}
