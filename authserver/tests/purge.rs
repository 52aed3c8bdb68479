//! The purge of expired data (`Store::purge_expired`, `authserver cleartokens`, and `serve` every
//! `purge_interval`), on both backends: what expired goes, in batches; what a check still needs
//! stays (a live token, a rotated refresh token inside its lifetime whose replay still revokes
//! its family, a code inside its reuse window, a revoked family with a token left, an unexpired
//! session, a signing key still published).

mod support;

use authserver::config::Settings;
use authserver::jwt::keys;
use authserver::store::purge::TOKEN_GRACE;
use authserver::store::{
    CodeOutcome, IssuedTokens, NewCode, NewTokens, NewUser, RefreshOutcome, Store, now,
};
use authserver::testing;
use std::time::{Duration, Instant};

/// A user (no password: nothing here signs in) and a password-grant application's id.
async fn user_and_application(store: &Store, username: &str) -> (i64, i64) {
    let user = store
        .create_user(&NewUser {
            username: username.into(),
            is_active: true,
            ..Default::default()
        })
        .await
        .unwrap();
    (user.id, support::password_application_id(store).await)
}

/// [`tokens`], issued.
async fn issue(
    store: &Store,
    app: i64,
    user: i64,
    access: i64,
    refresh: Option<i64>,
) -> IssuedTokens {
    store
        .issue_tokens(&tokens(app, user, access, refresh))
        .await
        .unwrap()
}

/// Tokens living `access` seconds (negative: expired that long ago), with a refresh token living
/// `refresh` seconds when given.
fn tokens(app: i64, user: i64, access: i64, refresh: Option<i64>) -> NewTokens {
    NewTokens {
        cnf_x5t_s256: None,
        cnf_jkt: None,
        audience: None,
        application_id: app,
        user_id: Some(user),
        scope: "read".into(),
        access_lifetime: access,
        refresh_lifetime: refresh,
        family: None,
    }
}

async fn count(store: &Store, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn family_of(store: &Store, token: &str) -> String {
    store.find_token(token).await.unwrap().unwrap().family
}

/// Moves a revoked family's revocation back past the grace.
/// Whether the stored `token` exists and is active.
async fn is_active(store: &Store, token: &str) -> bool {
    store.find_token(token).await.unwrap().unwrap().is_active()
}

async fn revoked_long_ago(store: &Store, family: &str) {
    sqlx::query("UPDATE revoked_families SET revoked_at = $1 WHERE family = $2")
        .bind(now() - 2 * TOKEN_GRACE)
        .bind(family)
        .execute(store.pool())
        .await
        .unwrap();
}

/// A code for `user` at `app`, already presented once, expiring at `expires_at`.
async fn spent_code(store: &Store, app: i64, user: i64, expires_at: i64) -> String {
    let code = store
        .issue_code(&NewCode {
            application_id: app,
            user_id: user,
            redirect_uri: "https://client.example/cb".into(),
            scope: "read".into(),
            code_challenge: None,
            lifetime: 60,
            nonce: None,
            auth_time: None,
            amr: None,
            resource: None,
            session_key: None,
            dpop_jkt: None,
        })
        .await
        .unwrap();
    assert!(matches!(
        store.claim_code(&code).await.unwrap(),
        CodeOutcome::Claimed(_)
    ));
    sqlx::query("UPDATE authorization_codes SET expires_at = $1 WHERE digest = $2")
        .bind(expires_at)
        .bind(authserver::secrets::digest(&code))
        .execute(store.pool())
        .await
        .unwrap();
    code
}

#[tokio::test]
async fn the_purge_deletes_what_expired_and_keeps_what_checks_need() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (user, app) = user_and_application(&store, "purged").await;
        let long_ago = -(TOKEN_GRACE + 60);

        // Must go: three tokens expired beyond the grace (one with its refresh token).
        let dead = issue(&store, app, user, long_ago, Some(long_ago)).await;
        let dead_alone = issue(&store, app, user, long_ago, None).await;
        // Must go: a revoked family none of whose tokens is left once they are purged.
        let revoked_dead = issue(&store, app, user, long_ago, None).await;
        let revoked_dead_family = family_of(&store, &revoked_dead.access_token).await;
        assert!(store.revoke_family(&revoked_dead_family).await.unwrap());
        revoked_long_ago(&store, &revoked_dead_family).await;

        // Must stay: a live token; one expired within the grace.
        let live = issue(&store, app, user, 3600, None).await;
        let just_expired = issue(&store, app, user, -5, None).await;
        // Must stay: a rotated refresh token still inside its lifetime (its access token has
        // expired long ago), and the tokens it was rotated into.
        let rotated = issue(&store, app, user, long_ago, Some(3600)).await;
        let rotated_refresh = rotated.refresh_token.clone().unwrap();
        let RefreshOutcome::Claimed(claimed) = store
            .claim_refresh_token(&rotated_refresh, app)
            .await
            .unwrap()
        else {
            panic!("{backend:?}: the first refresh")
        };
        let successor = store
            .issue_tokens(&NewTokens {
                cnf_x5t_s256: None,
                cnf_jkt: None,
                audience: None,
                family: Some(claimed.family.clone()),
                ..tokens(app, user, 3600, Some(3600))
            })
            .await
            .unwrap();
        // Must stay: a revoked family with a token inside its lifetime (revoked only by the
        // family's row).
        let revoked_live = issue(&store, app, user, 3600, None).await;
        let revoked_live_family = family_of(&store, &revoked_live.access_token).await;
        assert!(store.revoke_family(&revoked_live_family).await.unwrap());
        revoked_long_ago(&store, &revoked_live_family).await;

        // Codes: one spent and expired beyond the day of reuse detection goes; one expired an
        // hour ago (inside it) stays, and so does the revoked family of the tokens issued from
        // it, whose tokens are gone.
        let recent = spent_code(&store, app, user, now() - 3600).await;
        let forgotten = spent_code(&store, app, user, now() - 24 * 3600 - 60).await;
        let recent_family: String =
            sqlx::query_scalar("SELECT family FROM authorization_codes WHERE digest = $1")
                .bind(authserver::secrets::digest(&recent))
                .fetch_one(store.pool())
                .await
                .unwrap();
        sqlx::query("INSERT INTO revoked_families (family, revoked_at) VALUES ($1, $2)")
            .bind(&recent_family)
            .bind(now() - 2 * TOKEN_GRACE)
            .execute(store.pool())
            .await
            .unwrap();

        // Sessions: a live one stays, an expired one goes.
        let session = store.create_session(user, 3600).await.unwrap();
        store.create_session(user, -5).await.unwrap();
        assert_eq!(count(&store, "SELECT COUNT(*) FROM sessions").await, 2);

        let tokens_before = count(&store, "SELECT COUNT(*) FROM tokens").await;
        let purged = store.purge_expired_in_batches(2).await.unwrap();
        // The three dead tokens, the refresh token with them, and the rotated refresh token's
        // access token.
        assert_eq!(purged.tokens, 5, "{backend:?}: {purged:?}");
        assert_eq!(purged.authorization_codes, 1, "{backend:?}: {purged:?}");
        assert_eq!(purged.revoked_families, 1, "{backend:?}: {purged:?}");
        assert_eq!(purged.sessions, 1, "{backend:?}: {purged:?}");
        // Five tokens two at a time: three batches; one for each of the other five tables.
        assert_eq!(purged.batches, 8, "{backend:?}: {purged:?}");
        assert_eq!(
            count(&store, "SELECT COUNT(*) FROM tokens").await,
            tokens_before - 5
        );

        // Gone.
        for token in [
            &dead.access_token,
            dead.refresh_token.as_ref().unwrap(),
            &dead_alone.access_token,
            &revoked_dead.access_token,
            &rotated.access_token,
        ] {
            assert!(
                store.find_token(token).await.unwrap().is_none(),
                "{backend:?}"
            );
        }
        let families: Vec<String> = sqlx::query_scalar("SELECT family FROM revoked_families")
            .fetch_all(store.pool())
            .await
            .unwrap();
        assert!(!families.contains(&revoked_dead_family), "{backend:?}");
        assert!(matches!(
            store.claim_code(&forgotten).await.unwrap(),
            CodeOutcome::Unknown
        ));
        assert_eq!(count(&store, "SELECT COUNT(*) FROM sessions").await, 1);

        // Kept.
        assert!(
            store
                .find_session(&session.session_id)
                .await
                .unwrap()
                .is_some(),
            "{backend:?}"
        );
        let live = store.find_token(&live.access_token).await.unwrap().unwrap();
        assert!(live.is_active(), "{backend:?}");
        assert!(
            store
                .find_token(&just_expired.access_token)
                .await
                .unwrap()
                .is_some(),
            "{backend:?}: a token expired inside the grace stays"
        );
        let revoked = store
            .find_token(&revoked_live.access_token)
            .await
            .unwrap()
            .unwrap();
        assert!(!revoked.is_active(), "{backend:?}: still revoked");
        assert!(families.contains(&revoked_live_family), "{backend:?}");
        assert!(families.contains(&recent_family), "{backend:?}");
        assert!(matches!(
            store.claim_code(&recent).await.unwrap(),
            CodeOutcome::Reused
        ));
        // The rotated refresh token presented again revokes its family, the successor with it.
        let successor_access = successor.access_token.clone();
        assert!(
            store
                .find_token(&successor_access)
                .await
                .unwrap()
                .unwrap()
                .is_active()
        );
        assert!(
            matches!(
                store
                    .claim_refresh_token(&rotated_refresh, app)
                    .await
                    .unwrap(),
                RefreshOutcome::Reused
            ),
            "{backend:?}: the replay is still recognised"
        );
        for token in [&successor_access, successor.refresh_token.as_ref().unwrap()] {
            let record = store.find_token(token).await.unwrap().unwrap();
            assert!(!record.is_active(), "{backend:?}: the family is revoked");
        }

        // Nothing more to do: a second purge deletes nothing.
        let again = store.purge_expired().await.unwrap();
        assert_eq!(
            (
                again.tokens,
                again.authorization_codes,
                again.revoked_families,
                again.sessions
            ),
            (0, 0, 0, 0),
            "{backend:?}"
        );
    }
}

/// `n` access tokens of `app` that expired an hour ago, in one statement.
async fn expired_backlog(store: &Store, app: i64, n: i64) {
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
         INSERT INTO tokens (kind, digest, application_id, scope, family, issued_at, expires_at)
         SELECT 'access', $4 || i, $2, 'read', $4 || i, $3, $3 FROM n",
    )
    .bind(n)
    .bind(app)
    .bind(now() - 3600 - TOKEN_GRACE)
    .bind(format!(
        "backlog-{}-",
        authserver::secrets::random_client_id()
    ))
    .execute(store.pool())
    .await
    .unwrap();
}

#[tokio::test]
async fn a_backlog_larger_than_a_batch_is_purged_in_several_batches() {
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (user, app) = user_and_application(&store, "backlog").await;
        let live = issue(&store, app, user, 3600, Some(7200)).await;
        let n = 2 * authserver::store::purge::PURGE_BATCH + 500;
        expired_backlog(&store, app, n).await;
        let purged = store.purge_expired().await.unwrap();
        assert_eq!(purged.tokens, n as u64, "{backend:?}");
        // Three batches of tokens (1000, 1000, 500), one for each of the other five tables.
        assert_eq!(purged.batches, 8, "{backend:?}: {purged:?}");
        assert_eq!(count(&store, "SELECT COUNT(*) FROM tokens").await, 2);
        for token in [&live.access_token, live.refresh_token.as_ref().unwrap()] {
            assert!(is_active(&store, token).await, "{backend:?}");
        }
    }
}

/// Two signing keys: the first retired long enough ago that no token it signed is alive, the
/// second signing. Returns their kids.
async fn an_expired_and_a_signing_key(store: &Store, settings: &Settings) -> (String, String) {
    let at = now();
    let retired = at - settings.access_token_lifetime - keys::CLOCK_LEEWAY - 10;
    let first = keys::generate(1, at - 100_000, at - 100_000).unwrap();
    let second = keys::generate(2, retired, retired).unwrap();
    assert!(store.add_signing_key(&first).await.unwrap());
    assert!(store.add_signing_key(&second).await.unwrap());
    (first.kid, second.kid)
}

async fn kids(store: &Store) -> Vec<String> {
    store
        .signing_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.kid)
        .collect()
}

fn cleartokens(db: &str, json: bool) -> String {
    let mut command = support::binary::command(&["cleartokens", "--database-url", db]);
    if json {
        command.arg("--json");
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn cleartokens_purges_and_prints_the_counts() {
    for db in testing::all_database_urls().await {
        let store = authserver::testing::connect(&db).await;
        let backend = store.backend();
        let (user, app) = user_and_application(&store, "cli").await;
        let live = issue(&store, app, user, 3600, None).await;
        expired_backlog(&store, app, 3).await;
        store.create_session(user, -5).await.unwrap();
        let (expired, signing) =
            an_expired_and_a_signing_key(&store, &Settings::for_tests(&db)).await;

        let printed: serde_json::Value = serde_json::from_str(&cleartokens(&db, true)).unwrap();
        assert_eq!(printed["tokens"], 3, "{backend:?}: {printed}");
        assert_eq!(printed["sessions"], 1, "{backend:?}: {printed}");
        assert_eq!(printed["signing_keys"], 1, "{backend:?}: {printed}");
        assert_eq!(printed["authorization_codes"], 0, "{backend:?}: {printed}");
        assert_eq!(printed["revoked_families"], 0, "{backend:?}: {printed}");
        assert_eq!(kids(&store).await, [signing], "{backend:?}: {expired} went");
        assert!(is_active(&store, &live.access_token).await);

        expired_backlog(&store, app, 2).await;
        assert_eq!(
            cleartokens(&db, false).trim(),
            "deleted 2 tokens, 0 authorization codes, 0 revoked families, 0 sessions, 0 signing keys",
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn serve_purges_every_interval_and_logs_the_counts() {
    support::capture_logs();
    for store in testing::all_stores().await {
        let backend = store.backend();
        let (user, app) = user_and_application(&store, "serve").await;
        let live = issue(&store, app, user, 3600, None).await;
        let mut settings = Settings::for_tests("unused");
        settings.purge_interval = 1;
        let (expired, signing) = an_expired_and_a_signing_key(&store, &settings).await;
        let server =
            testing::spawn_server(store.clone(), settings, "127.0.0.1:0".parse().unwrap()).await;
        // Purges keep coming: each backlog goes within a few intervals.
        for round in 0..2 {
            expired_backlog(&store, app, 1 + round).await;
            let deadline = Instant::now() + Duration::from_secs(20);
            while count(&store, "SELECT COUNT(*) FROM tokens").await > 1 {
                assert!(
                    Instant::now() < deadline,
                    "{backend:?}: round {round} not purged"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        assert_eq!(kids(&store).await, [signing], "{backend:?}: {expired} went");
        assert!(is_active(&store, &live.access_token).await);
        server.stop().await;
    }
    let logged = support::logged();
    assert!(
        logged.contains("purged expired data")
            && logged.contains("tokens=1")
            && logged.contains("tokens=2")
            && logged.contains("signing_keys=1"),
        "{logged}"
    );
}
