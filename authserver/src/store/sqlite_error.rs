//! SQLite's failures, reported by rusqlite on the hot path's own connections, in sqlx's terms:
//! a constraint violation is recognised the same whichever library met it.

use super::StoreError;

/// A rusqlite error as the storage layer reports it: SQLite's own failures as
/// `StoreError::Database`, so constraint violations are recognised as they are from sqlx.
pub(super) fn database(error: rusqlite::Error) -> StoreError {
    match error {
        rusqlite::Error::SqliteFailure(failure, message) => {
            StoreError::Database(sqlx::Error::Database(Box::new(SqliteFailure {
                message: message.unwrap_or_else(|| failure.to_string()),
                extended_code: failure.extended_code,
            })))
        }
        other => StoreError::Other(other.into()),
    }
}

/// A failure reported by SQLite through rusqlite, in sqlx's terms.
#[derive(Debug)]
struct SqliteFailure {
    message: String,
    extended_code: i32,
}

impl std::fmt::Display for SqliteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.extended_code)
    }
}

impl std::error::Error for SqliteFailure {}

impl sqlx::error::DatabaseError for SqliteFailure {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(self.extended_code.to_string().into())
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        use rusqlite::ffi;
        match self.extended_code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                sqlx::error::ErrorKind::UniqueViolation
            }
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => sqlx::error::ErrorKind::ForeignKeyViolation,
            ffi::SQLITE_CONSTRAINT_NOTNULL => sqlx::error::ErrorKind::NotNullViolation,
            ffi::SQLITE_CONSTRAINT_CHECK => sqlx::error::ErrorKind::CheckViolation,
            _ => sqlx::error::ErrorKind::Other,
        }
    }
}
