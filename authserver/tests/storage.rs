//! The same storage cases on SQLite and, when `DATABASE_URL` names one, on PostgreSQL.

use authserver::store::{
    ApplicationInput, ClientType, GrantType, NewTokens, NewUser, RefreshOutcome, StoreError,
    UserUpdate,
};
use authserver::{secrets, testing};

#[tokio::test]
async fn users_groups_and_memberships() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let alice = testing::user(&store, "alice", "pw-alice").await;
        let duplicate = store
            .create_user(&NewUser {
                username: "alice".into(),
                ..Default::default()
            })
            .await;
        assert!(
            matches!(duplicate, Err(StoreError::Conflict(_))),
            "{backend:?}"
        );
        assert_eq!(
            store
                .authenticate_user("alice", "pw-alice")
                .await
                .unwrap()
                .map(|u| u.id),
            Some(alice.id)
        );
        assert!(
            store
                .authenticate_user("alice", "wrong")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .authenticate_user("ghost", "pw-alice")
                .await
                .unwrap()
                .is_none()
        );

        let update = UserUpdate {
            email: Some("a@example.org".into()),
            password: Some("new-pw".into()),
            ..Default::default()
        };
        let updated = store.update_user(alice.id, &update).await.unwrap().unwrap();
        assert_eq!(updated.email, "a@example.org");
        assert!(
            store
                .authenticate_user("alice", "new-pw")
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(store.search_users("EXAMPLE.org").await.unwrap().len(), 1);

        let staff = store.create_group("staff").await.unwrap();
        assert!(matches!(
            store.create_group("staff").await,
            Err(StoreError::Conflict(_))
        ));
        store.add_member(staff.id, alice.id).await.unwrap();
        store.add_member(staff.id, alice.id).await.unwrap();
        assert_eq!(
            store.group_members(staff.id).await.unwrap(),
            vec![updated.clone()]
        );
        assert_eq!(
            store.user_groups(alice.id).await.unwrap(),
            vec![staff.clone()]
        );
        assert_eq!(
            store
                .rename_group(staff.id, "crew")
                .await
                .unwrap()
                .unwrap()
                .name,
            "crew"
        );
        assert!(store.delete_user(alice.id).await.unwrap());
        assert!(store.group_members(staff.id).await.unwrap().is_empty());
        assert!(store.delete_group(staff.id).await.unwrap());
        assert!(store.get_group(staff.id).await.unwrap().is_none());
    }
}

/// A confidential application of the password grant, allowed `read`.
fn reader_app(name: &str) -> ApplicationInput {
    ApplicationInput {
        name: name.into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::Password,
        redirect_uris: String::new(),
        allowed_scopes: vec!["read".into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    }
}

/// `read` tokens of a new family: an access token for a minute, with a refresh token for two
/// when `refresh`.
fn tokens_of(application_id: i64, user_id: Option<i64>, refresh: bool) -> NewTokens {
    NewTokens {
        cnf_x5t_s256: None,
        cnf_jkt: None,
        audience: None,
        application_id,
        user_id,
        scope: "read".into(),
        access_lifetime: 60,
        refresh_lifetime: refresh.then_some(120),
        family: None,
    }
}

#[tokio::test]
async fn secrets_and_tokens_are_stored_as_digests() {
    for store in testing::all_stores().await {
        let user = testing::user(&store, "bob", "pw").await;
        let input = reader_app("app");
        let (app, secret) = store
            .create_application(&input, Some(user.id), None, None)
            .await
            .unwrap();
        let secret = secret.unwrap();
        assert!(app.secret_matches(&secret));
        assert!(!app.secret_matches("guess"));
        assert_eq!(app.allowed_scopes, vec!["read"]);

        let new = tokens_of(app.id, Some(user.id), true);
        let issued = store.issue_tokens(&new).await.unwrap();
        let refresh = issued.refresh_token.clone().unwrap();

        // Nothing secret is stored in the clear anywhere in the database.
        let texts: Vec<String> = sqlx::query_scalar("SELECT digest FROM tokens")
            .fetch_all(store.pool())
            .await
            .unwrap();
        assert!(texts.contains(&secrets::token_key(&issued.access_token)));
        assert_eq!(
            secrets::token_key(&issued.access_token)[..13],
            issued.access_token[..13],
            "a token is kept under its time prefix, then its digest"
        );
        // The prefix is no handle: the same token under another time is no token.
        let mut tampered = issued.access_token.clone();
        let last = if tampered.as_bytes()[12] == b'0' {
            "1"
        } else {
            "0"
        };
        tampered.replace_range(12..13, last);
        assert!(store.find_token(&tampered).await.unwrap().is_none());
        // A token issued before tokens had the prefix (43 characters) is kept under its bare
        // digest, and is still found, through the cache too.
        let earlier = secrets::random_token();
        sqlx::query(
            "INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, issued_at, expires_at)
             SELECT kind, $1, application_id, user_id, scope, family, issued_at, expires_at
             FROM tokens WHERE digest = $2",
        )
        .bind(secrets::digest(&earlier))
        .bind(secrets::token_key(&issued.access_token))
        .execute(store.pool())
        .await
        .unwrap();
        assert_eq!(
            store.find_token(&earlier).await.unwrap().unwrap().scope,
            "read"
        );
        for _ in 0..2 {
            let (found, _) = store.introspect_token(&earlier).await.unwrap();
            assert!(found.unwrap().record.is_active());
        }
        assert!(
            !texts
                .iter()
                .any(|t| t == &issued.access_token || t == &refresh)
        );
        let stored_secret: Option<String> =
            sqlx::query_scalar("SELECT client_secret_digest FROM applications")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(stored_secret, Some(secrets::digest(&secret)));
        let hash: Option<String> = sqlx::query_scalar("SELECT password_hash FROM users")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert!(hash.unwrap().starts_with("$argon2id$"));

        // Rotation and reuse detection.
        let RefreshOutcome::Claimed(record) =
            store.claim_refresh_token(&refresh, app.id).await.unwrap()
        else {
            panic!("first use claims")
        };
        assert!(
            !store
                .find_token(&issued.access_token)
                .await
                .unwrap()
                .unwrap()
                .is_active()
        );
        let next = store
            .issue_tokens(&NewTokens {
                cnf_x5t_s256: None,
                cnf_jkt: None,
                audience: None,
                family: Some(record.family),
                ..new.clone()
            })
            .await
            .unwrap();
        assert!(matches!(
            store.claim_refresh_token(&refresh, app.id).await.unwrap(),
            RefreshOutcome::Reused
        ));
        assert!(
            !store
                .find_token(&next.access_token)
                .await
                .unwrap()
                .unwrap()
                .is_active()
        );
        assert!(matches!(
            store.claim_refresh_token("nope", app.id).await.unwrap(),
            RefreshOutcome::Invalid
        ));

        // Regenerating a secret and deleting the application.
        let new_secret = store
            .regenerate_secret(app.id, std::time::Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        let app = store.get_application(app.id).await.unwrap().unwrap();
        assert!(app.secret_matches(&new_secret) && !app.secret_matches(&secret));
        assert!(store.delete_application(app.id).await.unwrap());
        assert!(
            store
                .find_token(&next.access_token)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .find_application_by_client_id(&app.client_id)
                .await
                .unwrap()
                .is_none()
        );
    }
}

/// The race `delete_application` cannot see: a token committed after the application's tokens
/// were deleted. On PostgreSQL, where `tokens` keeps no foreign key to `applications`
/// (migration 16), its row stays behind; it is found nowhere, by lookup or by refresh, and no
/// later application takes its application's id. On SQLite the foreign key deletes it.
#[tokio::test]
async fn a_token_whose_application_is_gone_is_found_nowhere() {
    for store in testing::all_stores().await {
        let user = testing::user(&store, "dora", "pw").await;
        let input = reader_app("gone");
        let (app, _) = store
            .create_application(&input, Some(user.id), None, None)
            .await
            .unwrap();
        let issued = store
            .issue_tokens(&tokens_of(app.id, Some(user.id), true))
            .await
            .unwrap();
        let refresh = issued.refresh_token.clone().unwrap();
        // The application goes as a concurrent deletion would leave it: its row only.
        sqlx::query("DELETE FROM applications WHERE id = $1")
            .bind(app.id)
            .execute(store.pool())
            .await
            .unwrap();
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tokens WHERE application_id = $1")
            .bind(app.id)
            .fetch_one(store.pool())
            .await
            .unwrap();
        let postgres = store.backend() == authserver::store::Backend::Postgres;
        assert_eq!(left, if postgres { 2 } else { 0 }, "postgres: {postgres}");
        for token in [&issued.access_token, &refresh] {
            assert!(store.find_token(token).await.unwrap().is_none());
        }
        // A token asked for it now (a replica whose cache still holds it) is refused.
        let refused = store.issue_tokens(&tokens_of(app.id, None, false)).await;
        assert!(
            matches!(refused, Err(StoreError::UnknownApplication)),
            "{refused:?}"
        );
        let (again, _) = store
            .create_application(&input, Some(user.id), None, None)
            .await
            .unwrap();
        assert_ne!(again.id, app.id, "an application id is never given again");
        assert!(matches!(
            store.claim_refresh_token(&refresh, again.id).await.unwrap(),
            RefreshOutcome::Invalid
        ));
        assert!(matches!(
            store.claim_refresh_token(&refresh, app.id).await.unwrap(),
            RefreshOutcome::Invalid
        ));
    }
}

#[tokio::test]
async fn migrations_run_once_and_reopen_cleanly() {
    let dir = std::env::temp_dir().join(format!("tg-reopen-{}", secrets::random_client_id()));
    let url = format!("sqlite://{}/nested/db.sqlite", dir.display());
    let store = authserver::store::Store::connect(&url).await.unwrap();
    testing::user(&store, "carol", "pw").await;
    drop(store);
    let again = authserver::store::Store::connect(&url).await.unwrap();
    assert_eq!(again.count_users().await.unwrap(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// A change through the example API (a rename) racing an operator's deactivation: only the
/// fields each change names are written, so the rename never writes back the `is_active` it
/// would have read before the deactivation committed.
#[tokio::test]
async fn a_rename_racing_a_deactivation_never_reactivates_the_account() {
    for store in testing::all_stores().await {
        for round in 0..25 {
            let user = testing::user(&store, &format!("racer-{round}"), "pw-racer").await;
            let rename = UserUpdate {
                username: Some(format!("renamed-{round}")),
                ..UserUpdate::default()
            };
            let deactivate = UserUpdate {
                is_active: Some(false),
                ..UserUpdate::default()
            };
            let (renamed, deactivated) = tokio::join!(
                store.update_ordinary_user(user.id, &rename),
                store.update_user(user.id, &deactivate)
            );
            renamed.unwrap();
            deactivated.unwrap();
            let now = store.get_user(user.id).await.unwrap().unwrap();
            assert_eq!(
                (now.username.as_str(), now.is_active),
                (format!("renamed-{round}").as_str(), false),
                "{:?} round {round}",
                store.backend()
            );
        }
    }
}
