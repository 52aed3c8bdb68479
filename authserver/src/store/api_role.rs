//! The example API's own PostgreSQL role (`authserver api-role`): it logs in, reads and writes
//! the user and group tables through the columns and rows the API uses, deletes a user through
//! a database function, and has no right on anything else (signing keys, tokens, applications, sessions, codes). Created, or given a new password,
//! by the bootstrap step (compose's `bootstrap` service, the Kubernetes Job), which runs as the
//! authorization server's own database user and so needs `CREATEROLE`.

use super::{Backend, Store, StoreResult};

/// What the role may do, statement by statement (`{role}` replaced by its name). What an
/// earlier version granted is taken back first (grants add up). Users: every column but the
/// password hash is read; a user is created ordinary (the flags and `email_verified` are not
/// among the columns it may write, and a changed email is unverified by a trigger); only an
/// ordinary user's names and email are changed (a restrictive row policy: a staff or superuser
/// row is out of reach); a user is deleted only through `delete_ordinary_user` (migration 22),
/// which runs as the tables' owner, refuses staff and superusers, and appends the revocation
/// event itself (the role cannot write `ssf_events`, so it cannot forge an event every sidecar
/// would apply; deletions take the user's tokens along by the foreign keys). Groups:
/// everything; memberships: deleted with a user or group only.
pub const GRANTS: &[&str] = &[
    "REVOKE ALL ON users, ssf_events FROM {role}",
    "REVOKE ALL ON SEQUENCE ssf_events_id_seq FROM {role}",
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT ON schema_migrations TO {role}",
    "GRANT SELECT (id, username, email, first_name, last_name, is_active, is_staff, is_superuser, date_joined, email_verified, updated_at),
       INSERT (username, email, first_name, last_name, password_hash, is_active, date_joined),
       UPDATE (username, email, first_name, last_name, updated_at) ON users TO {role}",
    "DROP POLICY IF EXISTS {role}_ordinary_rows ON users",
    "CREATE POLICY {role}_ordinary_rows ON users AS RESTRICTIVE FOR UPDATE TO {role}
       USING (is_staff = 0 AND is_superuser = 0) WITH CHECK (is_staff = 0 AND is_superuser = 0)",
    "GRANT EXECUTE ON FUNCTION delete_ordinary_user(BIGINT) TO {role}",
    "GRANT SELECT, INSERT, UPDATE (name), DELETE ON groups TO {role}",
    "GRANT SELECT, DELETE ON user_groups TO {role}",
    "GRANT USAGE ON SEQUENCE users_id_seq, groups_id_seq TO {role}",
];

/// Checks a role name: lower-case letters, digits and `_`, not starting with a digit, at most
/// 63 characters (PostgreSQL's limit), so it needs no quoting.
pub fn check_role_name(name: &str) -> Result<(), String> {
    let fits = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if fits {
        Ok(())
    } else {
        Err(format!(
            "\"{}\" is not a role name (lower-case letters, digits and _, not starting with a digit, at most 63)",
            name.escape_debug()
        ))
    }
}

impl Store {
    /// Creates the login role `role` with `password` (or sets its password when it exists) and
    /// gives it [`GRANTS`] in the current schema. PostgreSQL only. `role` must pass
    /// [`check_role_name`]; `password` is sent as a quoted literal (role statements take no
    /// parameters), single quotes doubled.
    pub async fn grant_api_role(&self, role: &str, password: &str) -> StoreResult<()> {
        if self.backend != Backend::Postgres {
            return Err(anyhow::anyhow!(
                "a database role is for PostgreSQL: on SQLite the example API opens the file itself"
            )
            .into());
        }
        check_role_name(role).map_err(anyhow::Error::msg)?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
                .bind(role)
                .fetch_one(&self.pool)
                .await?;
        let schema: String = sqlx::query_scalar("SELECT current_schema()::text")
            .fetch_one(&self.pool)
            .await?;
        let literal = password.replace('\'', "''");
        let login = if exists {
            format!("ALTER ROLE {role} WITH LOGIN PASSWORD '{literal}'")
        } else {
            format!("CREATE ROLE {role} WITH LOGIN PASSWORD '{literal}'")
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query(&login).execute(&mut *tx).await?;
        for grant in GRANTS {
            let statement = grant
                .replace("{role}", role)
                .replace("{schema}", &format!("\"{}\"", schema.replace('"', "\"\"")));
            sqlx::query(&statement).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check_role_name;

    #[test]
    fn role_names_need_no_quoting() {
        assert!(check_role_name("tokengate_api").is_ok());
        for bad in ["", "Api", "1api", "api; DROP", "a\"b", &"a".repeat(64)] {
            assert!(check_role_name(bad).is_err(), "{bad}");
        }
    }
}
