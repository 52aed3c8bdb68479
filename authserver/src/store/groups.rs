//! Groups of users and their memberships.

use super::bus::Change;
use super::{Store, StoreResult, User, conflict};
use serde::Serialize;
use sqlx::Row;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Group {
    pub id: i64,
    pub name: String,
}

fn from_row(row: &sqlx::any::AnyRow) -> StoreResult<Group> {
    Ok(Group {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
    })
}

impl Store {
    pub async fn create_group(&self, name: &str) -> StoreResult<Group> {
        let _exclusive = self.exclusive().await?;
        let row = sqlx::query("INSERT INTO groups (name) VALUES ($1) RETURNING id, name")
            .bind(name)
            .fetch_one(&self.writer)
            .await
            .map_err(conflict("a group with that name"))?;
        from_row(&row)
    }

    pub async fn list_groups(&self) -> StoreResult<Vec<Group>> {
        let rows = sqlx::query("SELECT id, name FROM groups ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(from_row).collect()
    }

    pub async fn get_group(&self, id: i64) -> StoreResult<Option<Group>> {
        let row = sqlx::query("SELECT id, name FROM groups WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    pub async fn rename_group(&self, id: i64, name: &str) -> StoreResult<Option<Group>> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query("UPDATE groups SET name = $1 WHERE id = $2 RETURNING id, name")
            .bind(name)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(conflict("a group with that name"))?;
        self.commit_announcing(tx, &[Change::EveryToken]).await?;
        row.as_ref().map(from_row).transpose()
    }

    pub async fn delete_group(&self, id: i64) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM user_groups WHERE group_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM groups WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        self.commit_announcing(tx, &[Change::EveryToken]).await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn group_members(&self, group_id: i64) -> StoreResult<Vec<User>> {
        // One query; `user_groups` has no column of the same name as a user column.
        let rows = sqlx::query(&format!(
            "SELECT {} FROM users u JOIN user_groups m ON m.user_id = u.id
             WHERE m.group_id = $1 ORDER BY u.id",
            super::users::COLUMNS
        ))
        .bind(group_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(super::users::from_row).collect()
    }

    pub async fn user_groups(&self, user_id: i64) -> StoreResult<Vec<Group>> {
        let rows = sqlx::query(
            "SELECT g.id, g.name FROM groups g JOIN user_groups m ON m.group_id = g.id WHERE m.user_id = $1 ORDER BY g.id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Adds a membership; adding one that exists is not an error.
    pub async fn add_member(&self, group_id: i64, user_id: i64) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO user_groups (user_id, group_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(user_id)
        .bind(group_id)
        .execute(&mut *tx)
        .await?;
        self.commit_announcing(tx, &[Change::User(user_id)]).await
    }

    pub async fn remove_member(&self, group_id: i64, user_id: i64) -> StoreResult<()> {
        let _exclusive = self.exclusive().await?;
        let mut tx = self.writer.begin().await?;
        sqlx::query("DELETE FROM user_groups WHERE user_id = $1 AND group_id = $2")
            .bind(user_id)
            .bind(group_id)
            .execute(&mut *tx)
            .await?;
        self.commit_announcing(tx, &[Change::User(user_id)]).await
    }
}
