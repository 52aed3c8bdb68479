//! Registered API resources (RFC 8707): the audiences tokens may be requested for.

use super::{Store, StoreResult, conflict, now};
use crate::domain::{AccessTokenFormat, Resource};
use sqlx::Row;

/// The fields an operator sets.
#[derive(Debug, Clone)]
pub struct ResourceInput {
    pub identifier: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub token_format: Option<AccessTokenFormat>,
    pub access_token_lifetime: Option<i64>,
}

const COLUMNS: &str =
    "id, identifier, name, scopes, token_format, access_token_lifetime, created_at";

fn from_row(row: &sqlx::any::AnyRow) -> StoreResult<Resource> {
    Ok(Resource {
        id: row.try_get("id")?,
        identifier: row.try_get("identifier")?,
        name: row.try_get("name")?,
        scopes: super::split_scopes(&row.try_get::<String, _>("scopes")?),
        token_format: crate::store::parse_token_format(row.try_get("token_format")?)?,
        access_token_lifetime: row.try_get("access_token_lifetime")?,
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    /// Registers a resource; `Conflict` when its identifier is taken.
    pub async fn create_resource(&self, input: &ResourceInput) -> StoreResult<Resource> {
        let _exclusive = self.exclusive().await?;
        let row = sqlx::query(&format!(
            "INSERT INTO resources (identifier, name, scopes, token_format, access_token_lifetime, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}"
        ))
        .bind(&input.identifier)
        .bind(&input.name)
        .bind(input.scopes.join(" "))
        .bind(input.token_format.map(AccessTokenFormat::as_str))
        .bind(input.access_token_lifetime)
        .bind(now())
        .fetch_one(&self.writer)
        .await
        .map_err(conflict("a resource with that identifier"))?;
        from_row(&row)
    }

    /// Every resource, by identifier.
    pub async fn list_resources(&self) -> StoreResult<Vec<Resource>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM resources ORDER BY identifier"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Every scope of a registered resource, each once.
    pub async fn resource_scopes(&self) -> StoreResult<Vec<String>> {
        let mut scopes: Vec<String> = Vec::new();
        for resource in self.list_resources().await? {
            for scope in resource.scopes {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
        }
        Ok(scopes)
    }

    /// The resource registered under `identifier` (compared exactly).
    pub async fn find_resource(&self, identifier: &str) -> StoreResult<Option<Resource>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM resources WHERE identifier = $1"
        ))
        .bind(identifier)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Forgets a resource: no new token names it. Tokens issued for it run to their expiry.
    pub async fn delete_resource(&self, identifier: &str) -> StoreResult<bool> {
        let _exclusive = self.exclusive().await?;
        let done = sqlx::query("DELETE FROM resources WHERE identifier = $1")
            .bind(identifier)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
