//! The example API's PostgreSQL role (`authserver api-role`, issue 21 item 3): with it, every
//! query the example API makes works (users and groups listed, created, renamed, deleted, a user
//! holding tokens included), and the signing keys, tokens, applications and password hashes are
//! refused, as are the flags that make a user staff or superuser. And (issue 38 item 8) what a
//! compromised API would try with its role: writing `ssf_events` (a forged revocation every
//! sidecar would apply), setting `email_verified`, renaming or deleting the superuser, deleting
//! a user directly (without its event), and shadowing the tables the deletion function writes
//! with temporary ones: each refused. Needs `DATABASE_URL` (PostgreSQL); without it the tests
//! print a skip notice.

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
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set DATABASE_URL: the database-role tests run on PostgreSQL only"
        );
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

/// The rows of `ssf_events` naming `subject`, read as the tables' owner.
async fn events_for(admin: &Store, subject: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM ssf_events WHERE subject = $1")
        .bind(subject)
        .fetch_one(admin.pool())
        .await
        .unwrap()
}

/// The SQLSTATE of a statement's failure, or `None` if it succeeded.
async fn refused_with(conn: &mut sqlx::PgConnection, statement: &str) -> Option<String> {
    match sqlx::query(statement).execute(&mut *conn).await {
        Ok(_) => None,
        Err(error) => error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned()),
    }
}

#[tokio::test]
async fn a_compromised_api_cannot_forge_events_verify_emails_or_touch_the_superuser() {
    let Some(url) = testing::postgres_schema_url().await else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set DATABASE_URL: the database-role tests run on PostgreSQL only"
        );
        eprintln!("skipped: set DATABASE_URL=postgres://… to run the database-role test");
        return;
    };
    let admin = testing::connect(&url).await;
    let root = admin
        .create_user(&NewUser {
            username: "root".into(),
            password: Some("root-password".into()),
            is_active: true,
            is_staff: true,
            is_superuser: true,
            ..NewUser::default()
        })
        .await
        .unwrap();
    let ann = testing::user(&admin, "ann", "ann-password").await;
    let role = format!(
        "tg_api_{}",
        authserver::secrets::random_client_id()
            .to_lowercase()
            .replace('-', "_")
    );
    let password = authserver::secrets::random_token();
    admin.grant_api_role(&role, &password).await.unwrap();
    let api_url = as_role(&url, &role, &password);
    let mut conn = sqlx::PgConnection::connect(&api_url).await.unwrap();
    let (root_id, ann_id) = (root.id, ann.id);

    // Refused outright (42501, insufficient privilege).
    for statement in [
        // A forged revocation of the superuser's tokens, or of a whole client's.
        format!("INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at) VALUES ('session-revoked', 'iss_sub', '{root_id}', 0)"),
        "INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at) VALUES ('session-revoked', 'opaque', 'proxy', 0)".to_owned(),
        "SELECT nextval('ssf_events_id_seq')".to_owned(),
        "DELETE FROM ssf_events".to_owned(),
        "UPDATE ssf_events SET subject = 'x'".to_owned(),
        // The directory vouching for an address the API chose.
        format!("UPDATE users SET email_verified = 1 WHERE id = {root_id}"),
        format!("UPDATE users SET email_verified = 1 WHERE id = {ann_id}"),
        "INSERT INTO users (username, email, email_verified, date_joined) VALUES ('eve', 'eve@example.org', 1, 0)".to_owned(),
        // Deletions only through the function.
        format!("DELETE FROM users WHERE id = {root_id}"),
        format!("DELETE FROM users WHERE id = {ann_id}"),
        "TRUNCATE users".to_owned(),
        // The function and trigger are the owner's.
        "CREATE OR REPLACE FUNCTION delete_ordinary_user(target BIGINT) RETURNS BIGINT LANGUAGE sql AS 'SELECT 1::BIGINT'".to_owned(),
        "DROP TRIGGER changed_email_unverified ON users".to_owned(),
        "ALTER TABLE users DISABLE ROW LEVEL SECURITY".to_owned(),
    ] {
        let code = refused_with(&mut conn, &statement).await;
        assert!(
            code.as_deref() == Some("42501"),
            "{statement}: {code:?}"
        );
    }

    // The superuser's row is out of reach: renaming it, or changing its email, touches nothing.
    for statement in [
        format!("UPDATE users SET username = 'pwned' WHERE id = {root_id}"),
        format!("UPDATE users SET email = 'eve@example.org' WHERE id = {root_id}"),
        "UPDATE users SET first_name = 'pwned'".to_owned(),
    ] {
        let done = sqlx::query(&statement).execute(&mut conn).await.unwrap();
        let touched = done.rows_affected();
        assert!(touched <= 1, "{statement}: {touched} rows (ann's at most)");
    }
    let after = admin.get_user(root_id).await.unwrap().unwrap();
    assert_eq!(
        (
            after.username.as_str(),
            after.email.as_str(),
            after.first_name.as_str()
        ),
        ("root", "", "")
    );
    // The function leaves the superuser alone, and writes no event for it.
    let deleted: Option<i64> = sqlx::query_scalar("SELECT delete_ordinary_user($1)")
        .bind(root_id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted, None);
    assert!(admin.get_user(root_id).await.unwrap().is_some());
    assert_eq!(events_for(&admin, &root_id.to_string()).await, 0);

    // Temporary tables named like the function's cannot stand in for them: the function's
    // search path is its schema, then pg_temp. A temporary `users` holding a row with the
    // superuser's id, marked ordinary, would otherwise have it "deleted" and revoked.
    let shadow = refused_with(
        &mut conn,
        "CREATE TEMP TABLE users (id BIGINT, is_staff BIGINT, is_superuser BIGINT)",
    )
    .await;
    if shadow.is_none() {
        sqlx::query(&format!(
            "INSERT INTO pg_temp.users VALUES ({root_id}, 0, 0)"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
        let deleted: Option<i64> = sqlx::query_scalar("SELECT delete_ordinary_user($1)")
            .bind(root_id)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(deleted, None);
        assert_eq!(events_for(&admin, &root_id.to_string()).await, 0);
        sqlx::query("DROP TABLE pg_temp.users")
            .execute(&mut conn)
            .await
            .unwrap();
    }

    // What the API does still works through its store: a verified address, changed by the
    // API, is verified no more; a deletion writes the user's revocation event.
    let api = Store::connect(&api_url).await.unwrap();
    admin.set_email_verified(ann_id, true).await.unwrap();
    assert!(admin.profile(ann_id).await.unwrap().unwrap().email_verified);
    let update = UserUpdate {
        email: Some("ann@example.org".into()),
        ..UserUpdate::default()
    };
    assert!(matches!(
        api.update_ordinary_user(ann_id, &update).await.unwrap(),
        authserver::store::Guarded::Done(_)
    ));
    assert!(!admin.profile(ann_id).await.unwrap().unwrap().email_verified);
    // The operator's own change keeps its choice (the trigger fires on a changed email only).
    admin.set_email_verified(ann_id, true).await.unwrap();
    let rename = UserUpdate {
        first_name: Some("Ann".into()),
        ..UserUpdate::default()
    };
    api.update_ordinary_user(ann_id, &rename).await.unwrap();
    assert!(admin.profile(ann_id).await.unwrap().unwrap().email_verified);
    // The superuser, through the store: refused as privileged, unchanged.
    assert!(matches!(
        api.delete_ordinary_user(root_id).await.unwrap(),
        authserver::store::Guarded::Privileged
    ));
    assert!(matches!(
        api.update_ordinary_user(root_id, &rename).await.unwrap(),
        authserver::store::Guarded::Privileged
    ));
    assert_eq!(events_for(&admin, &ann_id.to_string()).await, 0);
    assert!(matches!(
        api.delete_ordinary_user(ann_id).await.unwrap(),
        authserver::store::Guarded::Done(())
    ));
    assert!(admin.get_user(ann_id).await.unwrap().is_none());
    assert_eq!(events_for(&admin, &ann_id.to_string()).await, 1);
    assert!(matches!(
        api.delete_ordinary_user(ann_id).await.unwrap(),
        authserver::store::Guarded::Missing
    ));
    assert_eq!(
        admin.get_user(root_id).await.unwrap().unwrap().username,
        "root"
    );

    drop(conn);
    api.pool().close().await;
    drop(api);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for cleanup in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        let _ = sqlx::query(&cleanup).execute(&mut conn).await;
    }
}
