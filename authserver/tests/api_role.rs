//! The example API's PostgreSQL role (`authserver api-role`, issue 21 item 3): with it, every
//! query the example API makes works (users and groups listed, created, renamed, deleted, a user
//! holding tokens included), and the signing keys, tokens, applications and password hashes are
//! refused, as are the flags that make a user staff or superuser. Needs `DATABASE_URL`
//! (PostgreSQL); without it the test prints a skip notice.

use authserver::jwt::KeyRing;
use authserver::store::{GrantType, NewUser, Store, UserUpdate};
use authserver::testing;
use sqlx::Connection;

/// `url` logging in as `role` (the test server trusts local connections; the password is still
/// what a deployment would put in the URL).
fn as_role(url: &str, role: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}:{password}@{host}")
}

#[tokio::test]
async fn the_example_apis_role_runs_its_queries_and_reads_no_secret() {
    let Some(url) = testing::postgres_schema_url().await else {
        eprintln!("skipped: set DATABASE_URL=postgres://… to run the database-role test");
        return;
    };
    // The authorization server's side: a signing key, an application, a user with a token.
    let admin = testing::connect(&url).await;
    KeyRing::new()
        .keys_with_signer(&admin, authserver::jwt::Alg::EdDSA)
        .await
        .unwrap();
    let (client_id, _) = testing::application(&admin, GrantType::Password, false).await;
    let holder = testing::user(&admin, "holder", "holder-password").await;
    let app = admin
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap();
    admin
        .issue_tokens(&authserver::store::NewTokens {
            cnf_x5t_s256: None,
            cnf_jkt: None,
            audience: None,
            application_id: app.id,
            user_id: Some(holder.id),
            scope: "read".into(),
            access_lifetime: 3600,
            refresh_lifetime: Some(3600),
            family: None,
        })
        .await
        .unwrap();
    let role = format!(
        "tg_api_{}",
        authserver::secrets::random_client_id()
            .to_lowercase()
            .replace('-', "_")
    );
    let password = authserver::secrets::random_token();
    admin.grant_api_role(&role, &password).await.unwrap();
    // Again: a new password for an existing role.
    admin.grant_api_role(&role, &password).await.unwrap();
    let api_url = as_role(&url, &role, &password);

    // The example API opens the database as its main does (the migrations are already applied).
    let api = Store::connect(&api_url).await.unwrap();
    let created = api
        .create_user(&NewUser {
            username: "ann".into(),
            password: Some("ann-password".into()),
            is_active: true,
            ..NewUser::default()
        })
        .await
        .unwrap();
    assert!(!created.is_staff && !created.is_superuser);
    assert_eq!(api.list_users().await.unwrap().len(), 2);
    assert_eq!(
        api.get_user(created.id).await.unwrap().unwrap().username,
        "ann"
    );
    assert!(api.find_user_by_username("ann").await.unwrap().is_some());
    let renamed = UserUpdate {
        username: Some("anna".into()),
        email: Some("anna@example.org".into()),
        ..UserUpdate::default()
    };
    assert!(matches!(
        api.update_ordinary_user(created.id, &renamed).await.unwrap(),
        authserver::store::Guarded::Done(user) if user.username == "anna"
    ));
    assert!(matches!(
        api.update_ordinary_user(created.id, &UserUpdate::default())
            .await
            .unwrap(),
        authserver::store::Guarded::Done(_)
    ));
    // A user holding tokens: deleted with them (the foreign keys, run as the tables' owner).
    assert!(matches!(
        api.delete_ordinary_user(holder.id).await.unwrap(),
        authserver::store::Guarded::Done(())
    ));
    let group = api.create_group("staff").await.unwrap();
    assert_eq!(api.list_groups().await.unwrap().len(), 1);
    assert_eq!(
        api.rename_group(group.id, "team")
            .await
            .unwrap()
            .unwrap()
            .name,
        "team"
    );
    assert!(api.get_group(group.id).await.unwrap().is_some());
    assert!(api.delete_group(group.id).await.unwrap());
    // The tokens went with their user, though the role cannot see them.
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tokens")
        .fetch_one(admin.pool())
        .await
        .unwrap();
    assert_eq!(left, 0);

    // What it may not touch: refused by PostgreSQL (42501, insufficient privilege).
    let mut conn = sqlx::PgConnection::connect(&api_url).await.unwrap();
    for statement in [
        "SELECT private_key FROM signing_keys",
        "SELECT kid FROM signing_keys",
        "SELECT digest FROM tokens",
        "DELETE FROM tokens",
        "SELECT client_secret_digest FROM applications",
        "SELECT previous_secret_digest FROM applications",
        "UPDATE applications SET may_introspect = 1",
        "SELECT id_digest FROM sessions",
        "SELECT password_hash FROM users",
        "UPDATE users SET is_superuser = 1",
        "UPDATE users SET is_staff = 1",
        "UPDATE users SET password_hash = NULL",
        "INSERT INTO users (username, is_superuser, date_joined) VALUES ('eve', 1, 0)",
        "INSERT INTO signing_keys (kid, generation, algorithm, private_key, public_key, created_at, signs_from) VALUES ('k', 99, 'EdDSA', 'x', 'y', 0, 0)",
        "INSERT INTO user_groups (user_id, group_id) VALUES (1, 1)",
        "CREATE TABLE planted (a INT)",
    ] {
        let error = sqlx::query(statement)
            .execute(&mut conn)
            .await
            .expect_err(statement);
        let code = error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("42501"), "{statement}: {error}");
    }
    drop(conn);
    api.pool().close().await;
    drop(api);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for cleanup in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        let _ = sqlx::query(&cleanup).execute(&mut conn).await;
    }
}
