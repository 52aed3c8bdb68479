//! Users: the resource owners of the password grant, the operators and the example API's users.

use super::Revocation;
use super::bus::Change;
use super::hot::{self, Hot};
use super::timing::{StoreOp, StoreTimer};
use super::tokens::revoke_user_families;
use super::{Backend, Store, StoreResult, conflict, now};
use crate::secrets;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

/// A user as everything outside storage sees it: never the password hash.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub is_active: bool,
    pub is_staff: bool,
    pub is_superuser: bool,
    pub date_joined: i64,
}

/// What creating a user takes; the password, if any, is hashed with argon2id before storage.
#[derive(Debug, Clone, Default)]
pub struct NewUser {
    pub username: String,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub password: Option<String>,
    pub is_active: bool,
    pub is_staff: bool,
    pub is_superuser: bool,
}

/// A partial update: `None` leaves the field as it is.
#[derive(Debug, Clone, Default)]
pub struct UserUpdate {
    pub username: Option<String>,
    pub email: Option<String>,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub password: Option<String>,
    pub is_active: Option<bool>,
    pub is_staff: Option<bool>,
    pub is_superuser: Option<bool>,
}

/// The outcome of a change that may not touch staff or superuser accounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarded<T> {
    Done(T),
    /// No such user.
    Missing,
    /// The user is staff or superuser: left as it was.
    Privileged,
}

/// Which accounts a change may touch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    Any,
    /// Neither staff nor superuser.
    Ordinary,
}

impl Reach {
    fn condition(self) -> &'static str {
        match self {
            Reach::Any => "1 = 1",
            Reach::Ordinary => "is_staff = 0 AND is_superuser = 0",
        }
    }
}

pub(super) const COLUMNS: &str =
    "id, username, email, first_name, last_name, is_active, is_staff, is_superuser, date_joined";

pub(super) fn from_row(row: &AnyRow) -> StoreResult<User> {
    Ok(User {
        id: row.try_get("id")?,
        username: row.try_get("username")?,
        email: row.try_get("email")?,
        first_name: row.try_get("first_name")?,
        last_name: row.try_get("last_name")?,
        is_active: row.try_get::<i64, _>("is_active")? != 0,
        is_staff: row.try_get::<i64, _>("is_staff")? != 0,
        is_superuser: row.try_get::<i64, _>("is_superuser")? != 0,
        date_joined: row.try_get("date_joined")?,
    })
}

impl Store {
    pub async fn create_user(&self, new: &NewUser) -> StoreResult<User> {
        let hash = match &new.password {
            Some(password) => Some(secrets::hash_password(password.clone()).await?),
            None => None,
        };
        // The flags are written only when set (the columns default to ordinary): the example
        // API's database role may not write is_staff or is_superuser at all.
        let mut columns = vec![
            "username",
            "email",
            "first_name",
            "last_name",
            "password_hash",
            "is_active",
            "date_joined",
        ];
        columns.extend(new.is_staff.then_some("is_staff"));
        columns.extend(new.is_superuser.then_some("is_superuser"));
        let placeholders: Vec<String> = (1..=columns.len()).map(|n| format!("${n}")).collect();
        let sql = format!(
            "INSERT INTO users ({}) VALUES ({}) RETURNING {COLUMNS}",
            columns.join(", "),
            placeholders.join(", ")
        );
        let mut query = sqlx::query(&sql)
            .bind(&new.username)
            .bind(&new.email)
            .bind(&new.first_name)
            .bind(&new.last_name)
            .bind(hash)
            .bind(i64::from(new.is_active))
            .bind(now());
        for _ in 7..columns.len() {
            query = query.bind(1_i64);
        }
        let _exclusive = self.exclusive().await?;
        let row = query
            .fetch_one(&self.writer)
            .await
            .map_err(conflict("a user with that username"))?;
        from_row(&row)
    }

    pub async fn list_users(&self) -> StoreResult<Vec<User>> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM users ORDER BY id"))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(from_row).collect()
    }

    /// Users whose username, email or name contains `needle` (case-insensitive).
    pub async fn search_users(&self, needle: &str) -> StoreResult<Vec<User>> {
        let pattern = format!("%{}%", needle.to_lowercase());
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM users WHERE lower(username) LIKE $1 OR lower(email) LIKE $2
             OR lower(first_name) LIKE $3 OR lower(last_name) LIKE $4 ORDER BY id"
        ))
        .bind(&pattern)
        .bind(&pattern)
        .bind(&pattern)
        .bind(&pattern)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }

    pub async fn get_user(&self, id: i64) -> StoreResult<Option<User>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    pub async fn find_user_by_username(&self, username: &str) -> StoreResult<Option<User>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM users WHERE username = $1"))
            .bind(username)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// The user whose username and password match, if active. Always spends one argon2
    /// verification, whether or not the username exists.
    pub async fn authenticate_user(
        &self,
        username: &str,
        password: &str,
    ) -> StoreResult<Option<User>> {
        let columns = {
            // The lookup only: the password hash's verification is not the store's time.
            let _timer = StoreTimer::start(StoreOp::UserWithPassword);
            match &self.hot {
                Hot::Sqlite(local) => {
                    local.read(|conn| hot::sqlite::user_with_password(conn, username))?
                }
                Hot::Postgres(pool) => hot::postgres::user_with_password(pool, username).await?,
            }
        };
        let (user, hash) = match columns.map(hot::UserColumns::split) {
            Some((user, hash)) => (Some(user), hash),
            None => (None, None),
        };
        let matches = secrets::verify_password(password.to_owned(), hash).await;
        Ok(user.filter(|u| matches && u.is_active))
    }

    /// Any change, for the operators' views and the CLI.
    pub async fn update_user(&self, id: i64, update: &UserUpdate) -> StoreResult<Option<User>> {
        self.update_user_where(id, update, Reach::Any).await
    }

    /// A change through the example API: staff and superuser accounts are out of its reach, checked
    /// in the same statement that writes, so a concurrent promotion cannot slip between.
    pub async fn update_ordinary_user(
        &self,
        id: i64,
        update: &UserUpdate,
    ) -> StoreResult<Guarded<User>> {
        match self.update_user_where(id, update, Reach::Ordinary).await? {
            Some(user) => Ok(Guarded::Done(user)),
            None => self.why_not(id).await,
        }
    }

    async fn update_user_where(
        &self,
        id: i64,
        update: &UserUpdate,
        reach: Reach,
    ) -> StoreResult<Option<User>> {
        // Only the fields given are written, each in the statement itself: a change racing
        // another one (an operator deactivating the account while the API renames it) never
        // writes back a value read before the other committed.
        let exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        // Only the columns given are in the statement: the example API's database role may
        // update the names and the email, never the flags.
        let texts = [
            ("username", update.username.as_deref()),
            ("email", update.email.as_deref()),
            ("first_name", update.first_name.as_deref()),
            ("last_name", update.last_name.as_deref()),
        ];
        let flags = [
            ("is_active", update.is_active),
            ("is_staff", update.is_staff),
            ("is_superuser", update.is_superuser),
        ];
        let set: Vec<&str> = texts
            .iter()
            .filter_map(|(column, value)| value.map(|_| *column))
            .chain(
                flags
                    .iter()
                    .filter_map(|(column, value)| value.map(|_| *column)),
            )
            .collect();
        let sql = if set.is_empty() {
            format!(
                "SELECT {COLUMNS} FROM users WHERE id = $1 AND {}",
                reach.condition()
            )
        } else {
            let mut assignments: Vec<String> = set
                .iter()
                .enumerate()
                .map(|(at, column)| format!("{column} = ${}", at + 2))
                .collect();
            // OpenID Connect's `updated_at`; a changed email is no longer verified (the SET
            // expressions read the row as it was).
            assignments.push(format!("updated_at = {}", now()));
            // On PostgreSQL a trigger does it (migration 22): the example API's role has no
            // right on that column.
            if self.backend != Backend::Postgres
                && let Some(at) = set.iter().position(|c| *c == "email")
            {
                assignments.push(format!(
                    "email_verified = CASE WHEN email = ${} THEN email_verified ELSE 0 END",
                    at + 2
                ));
            }
            format!(
                "UPDATE users SET {} WHERE id = $1 AND {} RETURNING {COLUMNS}",
                assignments.join(", "),
                reach.condition()
            )
        };
        let mut query = sqlx::query(&sql).bind(id);
        for value in texts.iter().filter_map(|(_, value)| *value) {
            query = query.bind(value);
        }
        for value in flags.iter().filter_map(|(_, value)| *value) {
            query = query.bind(i64::from(value));
        }
        let row = query
            .fetch_optional(&mut *tx)
            .await
            .map_err(conflict("a user with that username"))?;
        // A deactivated account's tokens are refused while it is inactive; they are revoked
        // too, so that reactivating it does not bring them back.
        let deactivated = row.is_some() && update.is_active == Some(false);
        // A new username or state changes what introspection says of the user's tokens.
        let changed = row.is_some() && !set.is_empty();
        let mut changes = Vec::new();
        if changed {
            let change = Change::User(id);
            self.announce(&mut tx, &change).await?;
            changes.push(change);
        }
        if deactivated {
            revoke_user_families(&mut tx, id, None).await?;
            let event = Revocation::User {
                sub: id.to_string(),
            };
            changes.push(self.append_event(&mut tx, &event).await?);
        }
        tx.commit().await?;
        drop(exclusive);
        for change in &changes {
            self.changed(change);
        }
        if row.is_some()
            && let Some(password) = &update.password
        {
            self.set_password(id, password).await?;
        }
        row.as_ref().map(from_row).transpose()
    }

    /// Why a guarded change touched no row: the user is gone, or is (now) staff or superuser.
    async fn why_not<T>(&self, id: i64) -> StoreResult<Guarded<T>> {
        Ok(match self.get_user(id).await? {
            None => Guarded::Missing,
            Some(_) => Guarded::Privileged,
        })
    }

    /// Sets the password and, in the same transaction, revokes every token the user holds: a
    /// password is changed because it may be known to someone else, who may hold tokens got
    /// with it (browser sessions are the caller's to end).
    pub async fn set_password(&self, id: i64, password: &str) -> StoreResult<bool> {
        let hash = secrets::hash_password(password.to_owned()).await?;
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(hash)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        revoke_user_families(&mut tx, id, None).await?;
        let changed = done.rows_affected() == 1;
        let event = Revocation::Password {
            sub: id.to_string(),
        };
        let appended = match changed {
            true => Some(self.append_event(&mut tx, &event).await?),
            false => None,
        };
        tx.commit().await?;
        if let Some(appended) = &appended {
            self.changed(appended);
        }
        Ok(changed)
    }

    /// Deletes any user, for the operators' views and the CLI.
    pub async fn delete_user(&self, id: i64) -> StoreResult<bool> {
        self.delete_user_where(id, Reach::Any).await
    }

    /// A deletion through the example API: never a staff or superuser account.
    pub async fn delete_ordinary_user(&self, id: i64) -> StoreResult<Guarded<()>> {
        if self.delete_user_where(id, Reach::Ordinary).await? {
            Ok(Guarded::Done(()))
        } else {
            self.why_not(id).await
        }
    }

    /// Deletes the user if within `reach`; what hangs on it goes with it by the foreign keys
    /// (memberships, tokens, codes, consents and sessions deleted, applications left without an
    /// owner), which PostgreSQL runs as the tables' owner: the example API's database role
    /// deletes users without any right on the tokens or applications tables.
    ///
    /// On PostgreSQL an ordinary user is deleted by the database function
    /// `delete_ordinary_user` (migration 22), which appends the revocation event itself: the
    /// example API's role may call it, and may neither delete from `users` nor insert into
    /// `ssf_events` directly.
    async fn delete_user_where(&self, id: i64, reach: Reach) -> StoreResult<bool> {
        let exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let event = Revocation::User {
            sub: id.to_string(),
        };
        let appended = if self.backend == Backend::Postgres && reach == Reach::Ordinary {
            // The function appends the event; it is announced here, as any other.
            let appended: Option<i64> = sqlx::query_scalar("SELECT delete_ordinary_user($1)")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
            match appended {
                Some(id) => {
                    let change = Change::Appended { id, event };
                    self.announce(&mut tx, &change).await?;
                    Some(change)
                }
                None => None,
            }
        } else {
            let done = sqlx::query(&format!(
                "DELETE FROM users WHERE id = $1 AND {}",
                reach.condition()
            ))
            .bind(id)
            .execute(&mut *tx)
            .await?;
            match done.rows_affected() == 1 {
                true => Some(self.append_event(&mut tx, &event).await?),
                false => None,
            }
        };
        tx.commit().await?;
        drop(exclusive);
        if let Some(appended) = &appended {
            self.changed(appended);
        }
        Ok(appended.is_some())
    }

    pub async fn count_users(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?)
    }
}
