//! The PostgreSQL notification channels, named after the schema the connection works in: two
//! deployments in schemas of one database do not wake each other or empty each other's caches
//! (NOTIFY channels are database-wide). The default schema, `public`, keeps the plain names.

/// Every appended revocation event, its payload the event with its id: the stream's polls and
/// pushes wake, the token caches evict what it names ([`super::events`]).
pub(super) const EVENTS: &str = "tokengate_ssf_events";
/// Any change to an application: every process empties its application and token caches
/// ([`super::client_cache`]).
pub(super) const APPLICATIONS: &str = "tokengate_applications";
/// The changes that alter introspection answers without being revocations (a user's row, a
/// group, a spent refresh token; [`super::token_cache`]).
pub(super) const TOKENS: &str = "tokengate_token_cache";

/// SQL naming the channel whose base name is the bind parameter `$param` (a string literal such
/// as `"$1"`) for the schema the statement runs in.
macro_rules! channel_of {
    ($param:literal) => {
        concat!(
            "(CASE WHEN current_schema() = 'public' THEN ",
            $param,
            "::text ELSE ",
            $param,
            "::text || '_' || md5(current_schema()) END)"
        )
    };
}
pub(crate) use channel_of;

/// `SELECT pg_notify(<channel $1 of this schema>, $2)`.
pub(super) const NOTIFY: &str = concat!("SELECT pg_notify(", channel_of!("$1"), ", $2)");

/// The name of the channel `base` for the schema `listener`'s connection works in.
pub(super) async fn name(
    listener: &mut sqlx::postgres::PgListener,
    base: &str,
) -> sqlx::Result<String> {
    sqlx::query_scalar(concat!("SELECT ", channel_of!("$1")))
        .bind(base)
        .fetch_one(listener)
        .await
}
