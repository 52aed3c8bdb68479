//! Schema migrations, numbered, each written once per backend; applied in order under a lock.

use super::{Backend, StoreResult};
use sqlx::Connection;

/// (version, SQLite statements, PostgreSQL statements)
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "CREATE TABLE users (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        username TEXT NOT NULL UNIQUE,
        email TEXT NOT NULL DEFAULT '',
        first_name TEXT NOT NULL DEFAULT '',
        last_name TEXT NOT NULL DEFAULT '',
        password_hash TEXT,
        is_active INTEGER NOT NULL DEFAULT 1,
        is_staff INTEGER NOT NULL DEFAULT 0,
        is_superuser INTEGER NOT NULL DEFAULT 0,
        date_joined INTEGER NOT NULL);
    CREATE TABLE groups (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE);
    CREATE TABLE user_groups (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, group_id));
    CREATE TABLE applications (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        client_id TEXT NOT NULL UNIQUE,
        client_secret_digest TEXT,
        client_type TEXT NOT NULL,
        grant_type TEXT NOT NULL,
        redirect_uris TEXT NOT NULL DEFAULT '',
        allowed_scopes TEXT NOT NULL DEFAULT '',
        may_introspect INTEGER NOT NULL DEFAULT 0,
        owner_id INTEGER REFERENCES users(id) ON DELETE SET NULL,
        created_at INTEGER NOT NULL);
    CREATE TABLE tokens (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        application_id INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        user_id INTEGER REFERENCES users(id) ON DELETE CASCADE,
        scope TEXT NOT NULL,
        family TEXT NOT NULL,
        access_token_id INTEGER,
        issued_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX tokens_family ON tokens(family);",
        "CREATE TABLE users (
        id BIGSERIAL PRIMARY KEY,
        username TEXT NOT NULL UNIQUE,
        email TEXT NOT NULL DEFAULT '',
        first_name TEXT NOT NULL DEFAULT '',
        last_name TEXT NOT NULL DEFAULT '',
        password_hash TEXT,
        is_active BIGINT NOT NULL DEFAULT 1,
        is_staff BIGINT NOT NULL DEFAULT 0,
        is_superuser BIGINT NOT NULL DEFAULT 0,
        date_joined BIGINT NOT NULL);
    CREATE TABLE groups (
        id BIGSERIAL PRIMARY KEY,
        name TEXT NOT NULL UNIQUE);
    CREATE TABLE user_groups (
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        group_id BIGINT NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, group_id));
    CREATE TABLE applications (
        id BIGSERIAL PRIMARY KEY,
        name TEXT NOT NULL,
        client_id TEXT NOT NULL UNIQUE,
        client_secret_digest TEXT,
        client_type TEXT NOT NULL,
        grant_type TEXT NOT NULL,
        redirect_uris TEXT NOT NULL DEFAULT '',
        allowed_scopes TEXT NOT NULL DEFAULT '',
        may_introspect BIGINT NOT NULL DEFAULT 0,
        owner_id BIGINT REFERENCES users(id) ON DELETE SET NULL,
        created_at BIGINT NOT NULL);
    CREATE TABLE tokens (
        id BIGSERIAL PRIMARY KEY,
        kind TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        application_id BIGINT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        user_id BIGINT REFERENCES users(id) ON DELETE CASCADE,
        scope TEXT NOT NULL,
        family TEXT NOT NULL,
        access_token_id BIGINT,
        issued_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        revoked BIGINT NOT NULL DEFAULT 0);
    CREATE INDEX tokens_family ON tokens(family);",
    ),
    (
        2,
        "CREATE TABLE sessions (
        id_digest TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        csrf_token TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL);
    CREATE INDEX sessions_user ON sessions(user_id);
    CREATE INDEX sessions_expires ON sessions(expires_at);
    CREATE TABLE login_failures (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        bucket TEXT NOT NULL,
        failed_at INTEGER NOT NULL);
    CREATE INDEX login_failures_bucket ON login_failures(bucket, failed_at);",
        "CREATE TABLE sessions (
        id_digest TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        csrf_token TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL);
    CREATE INDEX sessions_user ON sessions(user_id);
    CREATE INDEX sessions_expires ON sessions(expires_at);
    CREATE TABLE login_failures (
        id BIGSERIAL PRIMARY KEY,
        bucket TEXT NOT NULL,
        failed_at BIGINT NOT NULL);
    CREATE INDEX login_failures_bucket ON login_failures(bucket, failed_at);",
    ),
    (
        3,
        // A family's tokens are dead once its family is here, also tokens inserted concurrently
        // with the revocation (every lookup joins this table). No backfill: families revoked
        // before this migration have every row revoked already.
        "CREATE TABLE revoked_families (
        family TEXT PRIMARY KEY,
        revoked_at INTEGER NOT NULL);",
        "CREATE TABLE revoked_families (
        family TEXT PRIMARY KEY,
        revoked_at BIGINT NOT NULL);",
    ),
    (
        4,
        // JWT access tokens (RFC 9068): the signing keys every replica shares (`generation` is
        // unique, so replicas creating the first key or rotating at once cannot both win).
        // IF NOT EXISTS: tests replay the migrations after version 2 on a database that has it.
        "CREATE TABLE IF NOT EXISTS signing_keys (
        kid TEXT PRIMARY KEY,
        generation INTEGER NOT NULL UNIQUE,
        algorithm TEXT NOT NULL,
        private_key TEXT NOT NULL,
        public_key TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        signs_from INTEGER NOT NULL);",
        "CREATE TABLE IF NOT EXISTS signing_keys (
        kid TEXT PRIMARY KEY,
        generation BIGINT NOT NULL UNIQUE,
        algorithm TEXT NOT NULL,
        private_key TEXT NOT NULL,
        public_key TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        signs_from BIGINT NOT NULL);",
    ),
    (
        5,
        // The authorization code grant (issue 13) and per-application token formats (issue 10):
        // PKCE required unless the application opts out; `token_format` NULL follows the
        // server's `access_token_format`. Codes are kept by digest with the rotation family
        // their tokens go into, so a second use revokes that family. Consents per user and
        // application. Idempotent (IF NOT EXISTS; on SQLite an existing column is skipped):
        // tests replay the migrations after version 2.
        "ALTER TABLE applications ADD COLUMN pkce_required INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE applications ADD COLUMN token_format TEXT;
    CREATE TABLE IF NOT EXISTS authorization_codes (
        digest TEXT PRIMARY KEY,
        application_id INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        redirect_uri TEXT NOT NULL,
        scope TEXT NOT NULL,
        code_challenge TEXT,
        family TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX IF NOT EXISTS authorization_codes_expires ON authorization_codes(expires_at);
    CREATE INDEX IF NOT EXISTS authorization_codes_grant ON authorization_codes(user_id, application_id);
    CREATE TABLE IF NOT EXISTS consents (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        application_id INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        scope TEXT NOT NULL,
        granted_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, application_id));",
        "ALTER TABLE applications ADD COLUMN IF NOT EXISTS pkce_required BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE applications ADD COLUMN IF NOT EXISTS token_format TEXT;
    CREATE TABLE IF NOT EXISTS authorization_codes (
        digest TEXT PRIMARY KEY,
        application_id BIGINT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        redirect_uri TEXT NOT NULL,
        scope TEXT NOT NULL,
        code_challenge TEXT,
        family TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        used BIGINT NOT NULL DEFAULT 0);
    CREATE INDEX IF NOT EXISTS authorization_codes_expires ON authorization_codes(expires_at);
    CREATE INDEX IF NOT EXISTS authorization_codes_grant ON authorization_codes(user_id, application_id);
    CREATE TABLE IF NOT EXISTS consents (
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        application_id BIGINT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        scope TEXT NOT NULL,
        granted_at BIGINT NOT NULL,
        PRIMARY KEY (user_id, application_id));",
    ),
    (
        6,
        // The purge (`cleartokens`, and `serve` every purge_interval) finds expired rows by
        // expiry, and a revoked family's codes by family, without scanning the tables.
        "CREATE INDEX IF NOT EXISTS tokens_expires ON tokens(expires_at);
    CREATE INDEX IF NOT EXISTS authorization_codes_family ON authorization_codes(family);",
        "CREATE INDEX IF NOT EXISTS tokens_expires ON tokens(expires_at);
    CREATE INDEX IF NOT EXISTS authorization_codes_family ON authorization_codes(family);",
    ),
    (
        7,
        // Secrets of the server itself that every replica shares and that outlive a restart
        // (the key CSRF tokens are signed with), by name, created on first use.
        "CREATE TABLE IF NOT EXISTS server_keys (
        name TEXT PRIMARY KEY,
        secret TEXT NOT NULL,
        created_at INTEGER NOT NULL);",
        "CREATE TABLE IF NOT EXISTS server_keys (
        name TEXT PRIMARY KEY,
        secret TEXT NOT NULL,
        created_at BIGINT NOT NULL);",
    ),
    (
        8,
        // Signing keys encrypted at rest (issue 21): the id of the key-encryption key a private
        // key is sealed with; NULL for a key stored in the clear before, which the first start
        // with a key-encryption key seals ([`super::Store::use_key_encryption`]).
        "ALTER TABLE signing_keys ADD COLUMN kek_id TEXT",
        "ALTER TABLE signing_keys ADD COLUMN IF NOT EXISTS kek_id TEXT",
    ),
    (
        9,
        // The revocation stream (issue 24, `super::events`): every change that ends tokens
        // appends its event to `ssf_events` in its own transaction; an SSF poll stream delivers
        // the events after `after_event` that it has not acknowledged (`ssf_acks`); a push
        // stream (RFC 8935) has the receiver's URL and its Authorization header.
        "CREATE TABLE IF NOT EXISTS ssf_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        event_type TEXT NOT NULL,
        subject_format TEXT NOT NULL,
        subject TEXT NOT NULL,
        occurred_at INTEGER NOT NULL);
    CREATE INDEX IF NOT EXISTS ssf_events_occurred ON ssf_events(occurred_at);
    CREATE TABLE IF NOT EXISTS ssf_streams (
        stream_id TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        events_requested TEXT NOT NULL,
        after_event INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        polled_at INTEGER NOT NULL,
        push_url TEXT,
        push_authorization TEXT);
    CREATE TABLE IF NOT EXISTS ssf_acks (
        stream_id TEXT NOT NULL REFERENCES ssf_streams(stream_id) ON DELETE CASCADE,
        event_id INTEGER NOT NULL REFERENCES ssf_events(id) ON DELETE CASCADE,
        PRIMARY KEY (stream_id, event_id));
    CREATE INDEX IF NOT EXISTS ssf_acks_event ON ssf_acks(event_id)",
        "CREATE TABLE IF NOT EXISTS ssf_events (
        id BIGSERIAL PRIMARY KEY,
        event_type TEXT NOT NULL,
        subject_format TEXT NOT NULL,
        subject TEXT NOT NULL,
        occurred_at BIGINT NOT NULL);
    CREATE INDEX IF NOT EXISTS ssf_events_occurred ON ssf_events(occurred_at);
    CREATE TABLE IF NOT EXISTS ssf_streams (
        stream_id TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        events_requested TEXT NOT NULL,
        after_event BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        polled_at BIGINT NOT NULL,
        push_url TEXT,
        push_authorization TEXT);
    CREATE TABLE IF NOT EXISTS ssf_acks (
        stream_id TEXT NOT NULL REFERENCES ssf_streams(stream_id) ON DELETE CASCADE,
        event_id BIGINT NOT NULL REFERENCES ssf_events(id) ON DELETE CASCADE,
        PRIMARY KEY (stream_id, event_id));
    CREATE INDEX IF NOT EXISTS ssf_acks_event ON ssf_acks(event_id)",
    ),
    (
        10,
        // OpenID Connect (issue 26): the directory's `email_verified` and `updated_at` (NULL:
        // never changed since `date_joined`); the `nonce` and sign-in time an authorization
        // code carries to its ID token; each application's OIDC registration (ID-token
        // algorithm, post-logout redirect URIs; no row: RS256 and none); the sign-in time of a
        // token family, for the ID tokens of its refreshes. Idempotent, as 5.
        "ALTER TABLE users ADD COLUMN email_verified INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE users ADD COLUMN updated_at INTEGER;
    ALTER TABLE authorization_codes ADD COLUMN nonce TEXT;
    ALTER TABLE authorization_codes ADD COLUMN auth_time INTEGER;
    CREATE TABLE IF NOT EXISTS oidc_clients (
        application_id INTEGER PRIMARY KEY REFERENCES applications(id) ON DELETE CASCADE,
        id_token_alg TEXT NOT NULL,
        post_logout_redirect_uris TEXT NOT NULL DEFAULT '');
    CREATE TABLE IF NOT EXISTS oidc_families (
        family TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        auth_time INTEGER NOT NULL,
        created_at INTEGER NOT NULL);",
        "ALTER TABLE users ADD COLUMN IF NOT EXISTS email_verified BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE users ADD COLUMN IF NOT EXISTS updated_at BIGINT;
    ALTER TABLE authorization_codes ADD COLUMN IF NOT EXISTS nonce TEXT;
    ALTER TABLE authorization_codes ADD COLUMN IF NOT EXISTS auth_time BIGINT;
    CREATE TABLE IF NOT EXISTS oidc_clients (
        application_id BIGINT PRIMARY KEY REFERENCES applications(id) ON DELETE CASCADE,
        id_token_alg TEXT NOT NULL,
        post_logout_redirect_uris TEXT NOT NULL DEFAULT '');
    CREATE TABLE IF NOT EXISTS oidc_families (
        family TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        auth_time BIGINT NOT NULL,
        created_at BIGINT NOT NULL);",
    ),
    (
        11,
        // Certificate-bound tokens (RFC 8705, issue 23): how an application authenticates with a
        // client certificate (`tls_client_auth` with its subject DN or SAN, or
        // `self_signed_tls_client_auth` with its certificate's thumbprint; NULL: by secret), and
        // the thumbprint a token is bound to (`cnf.x5t#S256`; NULL: a bearer token).
        "ALTER TABLE applications ADD COLUMN tls_client_auth TEXT;
    ALTER TABLE tokens ADD COLUMN cnf_x5t_s256 TEXT",
        "ALTER TABLE applications ADD COLUMN IF NOT EXISTS tls_client_auth TEXT;
    ALTER TABLE tokens ADD COLUMN IF NOT EXISTS cnf_x5t_s256 TEXT",
    ),
    (
        12,
        // Replicas without sticky sessions (issue 27): the one-time message a form's POST leaves
        // for the page it redirects to (`crate::web::flash`), so that any replica can show it.
        // Kept by the SHA-256 digest of its id, for one session (the digest of the session's
        // cookie, as `sessions` keeps it: a sign-out takes its messages along), sealed under a
        // key derived from the cookie value and the id, neither of which is stored.
        "CREATE TABLE IF NOT EXISTS flash_messages (
        id_digest TEXT PRIMARY KEY,
        session_digest TEXT NOT NULL REFERENCES sessions(id_digest) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sealed TEXT NOT NULL,
        expires_at INTEGER NOT NULL);
    CREATE INDEX IF NOT EXISTS flash_messages_session ON flash_messages(session_digest);
    CREATE INDEX IF NOT EXISTS flash_messages_expires ON flash_messages(expires_at)",
        "CREATE TABLE IF NOT EXISTS flash_messages (
        id_digest TEXT PRIMARY KEY,
        session_digest TEXT NOT NULL REFERENCES sessions(id_digest) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sealed TEXT NOT NULL,
        expires_at BIGINT NOT NULL);
    CREATE INDEX IF NOT EXISTS flash_messages_session ON flash_messages(session_digest);
    CREATE INDEX IF NOT EXISTS flash_messages_expires ON flash_messages(expires_at)",
    ),
    (
        13,
        // The revocation stream's own permission and management (issue 24): `may_use_ssf`, the
        // application flag the `ssf.read`/`ssf.manage` scopes need (set where introspection is
        // allowed today, so that existing receivers keep their stream); a stream's status
        // (`enabled`, `paused`, `disabled`, SSF 1.0 §8.1.2) and its reason; the subjects a
        // receiver added (§8.1.3; recorded, every stream delivers every subject); and the stream
        // an event is for (NULL: every stream; a verification SET is for one, §8.1.4).
        "ALTER TABLE applications ADD COLUMN may_use_ssf INTEGER NOT NULL DEFAULT 0;
    UPDATE applications SET may_use_ssf = may_introspect;
    ALTER TABLE ssf_streams ADD COLUMN status TEXT NOT NULL DEFAULT 'enabled';
    ALTER TABLE ssf_streams ADD COLUMN status_reason TEXT;
    ALTER TABLE ssf_events ADD COLUMN stream_id TEXT;
    CREATE TABLE IF NOT EXISTS ssf_subjects (
        stream_id TEXT NOT NULL REFERENCES ssf_streams(stream_id) ON DELETE CASCADE,
        subject TEXT NOT NULL,
        verified INTEGER NOT NULL,
        added_at INTEGER NOT NULL,
        PRIMARY KEY (stream_id, subject))",
        "ALTER TABLE applications ADD COLUMN IF NOT EXISTS may_use_ssf BIGINT NOT NULL DEFAULT 0;
    UPDATE applications SET may_use_ssf = may_introspect;
    ALTER TABLE ssf_streams ADD COLUMN IF NOT EXISTS status TEXT NOT NULL DEFAULT 'enabled';
    ALTER TABLE ssf_streams ADD COLUMN IF NOT EXISTS status_reason TEXT;
    ALTER TABLE ssf_events ADD COLUMN IF NOT EXISTS stream_id TEXT;
    CREATE TABLE IF NOT EXISTS ssf_subjects (
        stream_id TEXT NOT NULL REFERENCES ssf_streams(stream_id) ON DELETE CASCADE,
        subject TEXT NOT NULL,
        verified BIGINT NOT NULL,
        added_at BIGINT NOT NULL,
        PRIMARY KEY (stream_id, subject))",
    ),
    (
        15,
        // RP-initiated logout ends the tokens a browser session led to (issue 26): the token
        // family of every authorization code issued in a session, by the session's digest. No
        // foreign key: a session's row goes at logout before its families are revoked, and
        // the purge forgets the rows of sessions that are gone.
        "CREATE TABLE IF NOT EXISTS session_families (
        session_digest TEXT NOT NULL,
        family TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_digest, family))",
        "CREATE TABLE IF NOT EXISTS session_families (
        session_digest TEXT NOT NULL,
        family TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (session_digest, family))",
    ),
    (
        16,
        // PostgreSQL checks a foreign key with a query of its own for every row inserted (an
        // after-trigger through SPI: a quarter of the token writer's CPU), so `tokens` keeps
        // no foreign key to `applications` there: each statement that issues tokens inserts
        // only those whose application is there (`store/hot/postgres.rs`), and deleting an
        // application deletes its tokens itself (`delete_application`). A token a concurrent
        // issuance commits after that deletion is found nowhere, since every read of a token
        // joins its application, and ids come from a sequence, so no later application takes
        // the id. SQLite's check is one lookup of the row: kept.
        "",
        "ALTER TABLE tokens DROP CONSTRAINT IF EXISTS tokens_application_id_fkey",
    ),
    (
        17,
        // API resources and audiences (issue 39, RFC 8707): the registered APIs a token may be
        // requested for, each with its scopes; a token's audience (its resource identifiers,
        // space-separated; NULL: the server's default audience); the resources an authorization
        // code was granted for, which its exchange may only narrow.
        "CREATE TABLE IF NOT EXISTS resources (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        identifier TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        scopes TEXT NOT NULL,
        token_format TEXT,
        access_token_lifetime INTEGER,
        created_at INTEGER NOT NULL);
    ALTER TABLE tokens ADD COLUMN audience TEXT;
    ALTER TABLE authorization_codes ADD COLUMN resource TEXT",
        "CREATE TABLE IF NOT EXISTS resources (
        id BIGSERIAL PRIMARY KEY,
        identifier TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        scopes TEXT NOT NULL,
        token_format TEXT,
        access_token_lifetime BIGINT,
        created_at BIGINT NOT NULL);
    ALTER TABLE tokens ADD COLUMN IF NOT EXISTS audience TEXT;
    ALTER TABLE authorization_codes ADD COLUMN IF NOT EXISTS resource TEXT",
    ),
    (
        18,
        // Dynamic client registration (RFC 7591, issue 39): the record of an application that
        // registered itself (the SHA-256 digest of its RFC 7592 registration access token, its
        // metadata as registered, the initial access token it used), gone with the application;
        // and the initial access tokens an operator issues (`authserver registration-token`),
        // kept as digests with an expiry and an optional number of uses.
        "CREATE TABLE IF NOT EXISTS dynamic_clients (
        application_id INTEGER PRIMARY KEY REFERENCES applications(id) ON DELETE CASCADE,
        access_token_digest TEXT NOT NULL,
        metadata TEXT NOT NULL,
        initial_token_digest TEXT,
        issued_at INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS initial_access_tokens (
        digest TEXT PRIMARY KEY,
        label TEXT NOT NULL DEFAULT '',
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        max_uses INTEGER,
        uses INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS dynamic_clients (
        application_id BIGINT PRIMARY KEY REFERENCES applications(id) ON DELETE CASCADE,
        access_token_digest TEXT NOT NULL,
        metadata TEXT NOT NULL,
        initial_token_digest TEXT,
        issued_at BIGINT NOT NULL);
    CREATE TABLE IF NOT EXISTS initial_access_tokens (
        digest TEXT PRIMARY KEY,
        label TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        max_uses BIGINT,
        uses BIGINT NOT NULL DEFAULT 0)",
    ),
    (
        19,
        // Client-secret rotation with a grace period (issue 38): the digest of the secret a
        // rotation replaced and when it stops being accepted (seconds since the epoch); NULL when
        // the last rotation had no grace. The purge clears those past their expiry.
        "ALTER TABLE applications ADD COLUMN previous_secret_digest TEXT;
    ALTER TABLE applications ADD COLUMN previous_secret_expires_at INTEGER",
        "ALTER TABLE applications ADD COLUMN IF NOT EXISTS previous_secret_digest TEXT;
    ALTER TABLE applications ADD COLUMN IF NOT EXISTS previous_secret_expires_at BIGINT",
    ),
    (
        20,
        // DPoP (RFC 9449, issue 40): the thumbprint of the key a token is bound to (`cnf.jkt`;
        // NULL: not DPoP-bound), whether an application must prove a key at the token endpoint,
        // and the key an authorization request named (`dpop_jkt`, §10) for its code's exchange.
        "ALTER TABLE tokens ADD COLUMN cnf_jkt TEXT;
    ALTER TABLE applications ADD COLUMN dpop_required INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE authorization_codes ADD COLUMN dpop_jkt TEXT",
        "ALTER TABLE tokens ADD COLUMN IF NOT EXISTS cnf_jkt TEXT;
    ALTER TABLE applications ADD COLUMN IF NOT EXISTS dpop_required BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE authorization_codes ADD COLUMN IF NOT EXISTS dpop_jkt TEXT",
    ),
    (
        21,
        // Second factors (issue 41): a user's TOTP secret (sealed under the key-encryption key
        // when one is configured: `kek_id` names it; NULL: stored as is), confirmed by a first
        // code, with the last step accepted (a code is never accepted twice); their recovery
        // codes as SHA-256 digests, each spent once; sign-ins waiting for their second factor
        // (the digest of a cookie's value); the methods (`amr`, space-separated) a session, a
        // code and a token family were signed in with; and the applications whose users must sign
        // in with a second factor (beside their other sign-in settings, `oidc_clients`).
        "CREATE TABLE IF NOT EXISTS totp_factors (
        user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        secret TEXT NOT NULL,
        kek_id TEXT,
        confirmed_at INTEGER,
        last_step INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS recovery_codes (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        digest TEXT NOT NULL,
        used_at INTEGER,
        PRIMARY KEY (user_id, digest));
    CREATE TABLE IF NOT EXISTS pending_sign_ins (
        digest TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL);
    ALTER TABLE sessions ADD COLUMN amr TEXT;
    ALTER TABLE authorization_codes ADD COLUMN amr TEXT;
    ALTER TABLE oidc_families ADD COLUMN amr TEXT;
    ALTER TABLE oidc_clients ADD COLUMN require_mfa INTEGER NOT NULL DEFAULT 0",
        "CREATE TABLE IF NOT EXISTS totp_factors (
        user_id BIGINT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        secret TEXT NOT NULL,
        kek_id TEXT,
        confirmed_at BIGINT,
        last_step BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL);
    CREATE TABLE IF NOT EXISTS recovery_codes (
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        digest TEXT NOT NULL,
        used_at BIGINT,
        PRIMARY KEY (user_id, digest));
    CREATE TABLE IF NOT EXISTS pending_sign_ins (
        digest TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL);
    ALTER TABLE sessions ADD COLUMN IF NOT EXISTS amr TEXT;
    ALTER TABLE authorization_codes ADD COLUMN IF NOT EXISTS amr TEXT;
    ALTER TABLE oidc_families ADD COLUMN IF NOT EXISTS amr TEXT;
    ALTER TABLE oidc_clients ADD COLUMN IF NOT EXISTS require_mfa BIGINT NOT NULL DEFAULT 0",
    ),
    (
        22,
        // The example API's database role (issue 38 item 8), PostgreSQL only (on SQLite the API
        // opens the file itself). A user is deleted through `delete_ordinary_user`, which runs as
        // the tables' owner: never a staff or superuser account, and its revocation event
        // written by the function, so the role needs no right to insert into `ssf_events`. Its
        // search path is fixed at creation to the schema then pg_temp (the set_config below,
        // local to the migration's transaction): a caller's temporary table named `users` or
        // `ssf_events` is never the one written. Nobody may call it until `api-role` grants it.
        // A changed email is no longer verified, by a trigger: the role needs no right on
        // `email_verified`. Row security on `users`: every role sees and writes every row (one
        // permissive policy), until `api-role` adds the role's restrictive one.
        "",
        "SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
    CREATE OR REPLACE FUNCTION delete_ordinary_user(target BIGINT) RETURNS BIGINT
        LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
        WITH gone AS (
            DELETE FROM users WHERE id = target AND is_staff = 0 AND is_superuser = 0 RETURNING id)
        INSERT INTO ssf_events (event_type, subject_format, subject, occurred_at)
            SELECT 'session-revoked', 'iss_sub', gone.id::text,
                   EXTRACT(EPOCH FROM clock_timestamp())::BIGINT FROM gone
            RETURNING id $$;
    REVOKE ALL ON FUNCTION delete_ordinary_user(BIGINT) FROM PUBLIC;
    CREATE OR REPLACE FUNCTION unverify_changed_email() RETURNS trigger
        LANGUAGE plpgsql AS $$ BEGIN NEW.email_verified := 0; RETURN NEW; END $$;
    DROP TRIGGER IF EXISTS changed_email_unverified ON users;
    CREATE TRIGGER changed_email_unverified BEFORE UPDATE OF email ON users FOR EACH ROW
        WHEN (NEW.email IS DISTINCT FROM OLD.email) EXECUTE FUNCTION unverify_changed_email();
    ALTER TABLE users ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS every_row ON users;
    CREATE POLICY every_row ON users USING (true) WITH CHECK (true)",
    ),
    (
        23,
        // No allowed scope now means no scope (issue 43): an application registered before,
        // whose empty list meant every declared scope, keeps that as the explicit choice.
        "UPDATE applications SET allowed_scopes = '*' WHERE allowed_scopes = ''",
        "UPDATE applications SET allowed_scopes = '*' WHERE allowed_scopes = ''",
    ),
    (
        24,
        // Passkeys (issue 41 item 2): each user's WebAuthn credentials (the credential id and
        // the COSE public key in base64url, its algorithm, the authenticator's signature
        // counter, the name its user gave it), and the challenges of ceremonies under way: the
        // SHA-256 of each challenge, single use, bound to what started it (the digest of a
        // session's secret, of a pending sign-in's cookie or of the sign-in page's pre-session
        // cookie) and expiring.
        "CREATE TABLE IF NOT EXISTS passkeys (
        credential_id TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        public_key TEXT NOT NULL,
        algorithm INTEGER NOT NULL,
        sign_count INTEGER NOT NULL DEFAULT 0,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_used_at INTEGER);
    CREATE INDEX IF NOT EXISTS passkeys_user ON passkeys (user_id);
    CREATE TABLE IF NOT EXISTS passkey_challenges (
        digest TEXT PRIMARY KEY,
        purpose TEXT NOT NULL,
        binding TEXT NOT NULL,
        user_id INTEGER REFERENCES users(id) ON DELETE CASCADE,
        expires_at INTEGER NOT NULL)",
        "CREATE TABLE IF NOT EXISTS passkeys (
        credential_id TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        public_key TEXT NOT NULL,
        algorithm BIGINT NOT NULL,
        sign_count BIGINT NOT NULL DEFAULT 0,
        name TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        last_used_at BIGINT);
    CREATE INDEX IF NOT EXISTS passkeys_user ON passkeys (user_id);
    CREATE TABLE IF NOT EXISTS passkey_challenges (
        digest TEXT PRIMARY KEY,
        purpose TEXT NOT NULL,
        binding TEXT NOT NULL,
        user_id BIGINT REFERENCES users(id) ON DELETE CASCADE,
        expires_at BIGINT NOT NULL)",
    ),
    (
        25,
        // A client's streams by its id: creating a stream counts the client's streams, and the
        // count scanned the whole table (creating n streams took time quadratic in n).
        "CREATE INDEX IF NOT EXISTS ssf_streams_client ON ssf_streams (client_id)",
        "CREATE INDEX IF NOT EXISTS ssf_streams_client ON ssf_streams (client_id)",
    ),
];

/// Applies every migration not yet recorded in `schema_migrations`. On PostgreSQL an advisory
/// lock keeps replicas that start together from racing.
pub(super) async fn run(writer: &sqlx::AnyPool, backend: Backend) -> StoreResult<()> {
    let mut conn = writer.acquire().await?;
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_lock(727170)")
            .execute(&mut *conn)
            .await?;
    }
    let result = apply(&mut conn, backend).await;
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_unlock(727170)")
            .execute(&mut *conn)
            .await?;
    }
    result
}

async fn apply(conn: &mut sqlx::AnyConnection, backend: Backend) -> StoreResult<()> {
    // Nothing to do, nothing written: a role without the right to create tables (the example
    // API's, see `authserver api-role`) opens a database the authorization server migrated.
    let applied: Option<Vec<i64>> = sqlx::query_scalar("SELECT version FROM schema_migrations")
        .fetch_all(&mut *conn)
        .await
        .ok();
    if applied.is_some_and(|applied| MIGRATIONS.iter().all(|(v, _, _)| applied.contains(v))) {
        return Ok(());
    }
    sqlx::query("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY)")
        .execute(&mut *conn)
        .await?;
    for (version, sqlite, postgres) in MIGRATIONS {
        let done: Option<i64> =
            sqlx::query_scalar("SELECT version FROM schema_migrations WHERE version = $1")
                .bind(version)
                .fetch_optional(&mut *conn)
                .await?;
        if done.is_some() {
            continue;
        }
        let script = if backend == Backend::Postgres {
            postgres
        } else {
            sqlite
        };
        let mut tx = conn.begin().await?;
        for statement in statements(script) {
            if backend == Backend::Sqlite
                && let Some((table, column)) = added_column(statement)
            {
                let present: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pragma_table_info($1) WHERE name = $2",
                )
                .bind(table)
                .bind(column)
                .fetch_one(&mut *tx)
                .await?;
                if present > 0 {
                    continue;
                }
            }
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        sqlx::query("INSERT INTO schema_migrations (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::info!(version, "applied database migration");
    }
    Ok(())
}

/// The statements of a migration script: split at each `;` outside a dollar-quoted body
/// (`$$ ... $$`, a function's), trimmed, empty ones left out.
fn statements(script: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    let bytes = script.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at..].starts_with(b"$$") {
            quoted = !quoted;
            at += 2;
            continue;
        }
        if bytes[at] == b';' && !quoted {
            out.push(script[start..at].trim());
            start = at + 1;
        }
        at += 1;
    }
    out.push(script[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// The table and column of an `ALTER TABLE t ADD COLUMN c …` statement: SQLite has no
/// `ADD COLUMN IF NOT EXISTS`, so the runner skips a column that exists.
fn added_column(statement: &str) -> Option<(&str, &str)> {
    let words: Vec<&str> = statement.split_whitespace().take(6).collect();
    match words.as_slice() {
        [alter, table_kw, table, add, column_kw, column]
            if alter.eq_ignore_ascii_case("ALTER")
                && table_kw.eq_ignore_ascii_case("TABLE")
                && add.eq_ignore_ascii_case("ADD")
                && column_kw.eq_ignore_ascii_case("COLUMN") =>
        {
            Some((table, column))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_outside_dollar_quoted_bodies() {
        assert_eq!(statements("A; B ;\n;"), ["A", "B"]);
        assert_eq!(
            statements("CREATE F AS $$ BEGIN X; RETURN Y; END $$; DROP Z"),
            ["CREATE F AS $$ BEGIN X; RETURN Y; END $$", "DROP Z"]
        );
    }

    #[test]
    fn added_columns_are_recognised() {
        assert_eq!(
            added_column("ALTER TABLE applications ADD COLUMN token_format TEXT"),
            Some(("applications", "token_format"))
        );
        assert_eq!(added_column("CREATE TABLE x (a INTEGER)"), None);
    }

    /// Replaying migration 5 on a database that has it changes nothing and fails nowhere.
    #[tokio::test]
    async fn migration_5_replays() {
        for store in crate::testing::all_stores().await {
            sqlx::query("DELETE FROM schema_migrations WHERE version >= 5")
                .execute(store.pool())
                .await
                .unwrap();
            run(&store.writer, store.backend).await.unwrap();
            let versions: Vec<i64> =
                sqlx::query_scalar("SELECT version FROM schema_migrations ORDER BY version")
                    .fetch_all(store.pool())
                    .await
                    .unwrap();
            let all: Vec<i64> = MIGRATIONS.iter().map(|(v, _, _)| *v).collect();
            assert_eq!(versions, all);
        }
    }

    /// Migration 13 gives the revocation stream to every application allowed to introspect
    /// before it (they held the stream scopes through that permission), and to no other.
    #[tokio::test]
    async fn migration_13_keeps_the_stream_of_applications_that_introspect() {
        use crate::store::GrantType;
        for store in crate::testing::all_stores().await {
            let (introspects, _) =
                crate::testing::application(&store, GrantType::ClientCredentials, true).await;
            let (plain, _) =
                crate::testing::application(&store, GrantType::ClientCredentials, false).await;
            // As before migration 13: no application has the flag.
            sqlx::query("UPDATE applications SET may_use_ssf = 0")
                .execute(store.pool())
                .await
                .unwrap();
            sqlx::query("DELETE FROM schema_migrations WHERE version = 13")
                .execute(store.pool())
                .await
                .unwrap();
            run(&store.writer, store.backend).await.unwrap();
            for (client_id, expected) in [(introspects, 1), (plain, 0)] {
                let flag: i64 =
                    sqlx::query_scalar("SELECT may_use_ssf FROM applications WHERE client_id = $1")
                        .bind(&client_id)
                        .fetch_one(store.pool())
                        .await
                        .unwrap();
                assert_eq!(flag, expected, "{client_id}");
            }
        }
    }

    /// Migration 23: an application stored with no allowed scope (which meant every scope then)
    /// keeps every scope, as the explicit `*`; one with its own list keeps its list.
    #[tokio::test]
    async fn migration_23_keeps_every_scope_for_applications_that_had_it() {
        use crate::store::GrantType;
        for store in crate::testing::all_stores().await {
            let (before, _) =
                crate::testing::application(&store, GrantType::ClientCredentials, false).await;
            let (listed, _) = crate::testing::application(&store, GrantType::Password, false).await;
            for (client_id, scopes) in [(&before, ""), (&listed, "read")] {
                sqlx::query("UPDATE applications SET allowed_scopes = $1 WHERE client_id = $2")
                    .bind(scopes)
                    .bind(client_id)
                    .execute(store.pool())
                    .await
                    .unwrap();
            }
            sqlx::query("DELETE FROM schema_migrations WHERE version = 23")
                .execute(store.pool())
                .await
                .unwrap();
            run(&store.writer, store.backend).await.unwrap();
            for (client_id, expected) in [(before, "*"), (listed, "read")] {
                let scopes: String = sqlx::query_scalar(
                    "SELECT allowed_scopes FROM applications WHERE client_id = $1",
                )
                .bind(&client_id)
                .fetch_one(store.pool())
                .await
                .unwrap();
                assert_eq!(scopes, expected, "{client_id}");
            }
        }
    }
}
