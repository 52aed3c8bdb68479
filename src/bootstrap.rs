//! First start of the stack: an administrator and a demo application with random secrets,
//! printed once; and the proxy's own introspection client, one per data directory, whose id and
//! secret are kept there: a second process on the same data directory reuses them, and a stack
//! with a data directory of its own on the same database registers a client of its own, so
//! stacks on one database never rotate each other's proxy secret.

use anyhow::Context;
use authserver::config::Settings;
use authserver::jwt::KeyRing;
use authserver::private_files;
use authserver::registration;
use authserver::secrets::random_token;
use authserver::store::{ApplicationInput, ClientType, GrantType, NewUser, OidcClient, Store};
use std::net::SocketAddr;
use std::path::Path;

/// What the first start created; shown once, never stored in the clear. `Debug` hides the
/// secrets.
#[derive(Clone)]
pub struct FirstRun {
    pub admin_username: String,
    pub admin_password: String,
    pub client_id: String,
    pub client_secret: String,
    /// A client-credentials application allowed to introspect: what a resource server uses.
    pub resource_server_id: String,
    pub resource_server_secret: String,
}

impl std::fmt::Debug for FirstRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstRun")
            .field("admin_username", &self.admin_username)
            .field("admin_password", &"<redacted>")
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("resource_server_id", &self.resource_server_id)
            .field("resource_server_secret", &"<redacted>")
            .finish()
    }
}

/// On an empty database: creates `admin` (staff, superuser), a confidential password-grant
/// application "demo" (not allowed to introspect), and a client-credentials application
/// "resource-server" allowed to introspect, all with random secrets. Otherwise does nothing.
pub async fn first_run(store: &Store, settings: &Settings) -> anyhow::Result<Option<FirstRun>> {
    if store.count_users().await? > 0 {
        return Ok(None);
    }
    let admin_password = random_token();
    let admin = NewUser {
        username: "admin".into(),
        password: Some(admin_password.clone()),
        is_active: true,
        is_staff: true,
        is_superuser: true,
        ..Default::default()
    };
    let admin = store.create_user(&admin).await?;
    let demo = ApplicationInput {
        name: "demo".into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::Password,
        redirect_uris: String::new(),
        // The demo application of the first run may ask for every declared scope.
        allowed_scopes: vec![authserver::domain::EVERY_SCOPE.into()],
        may_introspect: false,
        may_use_ssf: false,
        pkce_required: true,
        token_format: None,
    };
    let demo = register(store, settings, demo, Some(admin.id), None).await?;
    let resource_server = introspection_client("resource-server");
    let rs = register(store, settings, resource_server, Some(admin.id), None).await?;
    Ok(Some(FirstRun {
        admin_username: admin.username,
        admin_password,
        client_id: demo.app.client_id,
        client_secret: demo.secret.unwrap_or_default(),
        resource_server_id: rs.app.client_id,
        resource_server_secret: rs.secret.unwrap_or_default(),
    }))
}

/// Registers `input` through the authorization server's one registration service (with the
/// signing keys its tokens need).
async fn register(
    store: &Store,
    settings: &Settings,
    input: ApplicationInput,
    owner_id: Option<i64>,
    client_id: Option<String>,
) -> anyhow::Result<registration::Registered> {
    let create = registration::Create {
        registration: registration::Registration {
            input,
            tls_client_auth: None,
            dpop_required: false,
            oidc: OidcClient::default(),
        },
        owner_id,
        client_id,
        client_secret: None,
        dynamic: None,
    };
    Ok(registration::create(store, &KeyRing::new(), settings, create).await?)
}

/// The client id of the proxy's introspection client for this data directory: the one kept in
/// `id_file`; else `legacy_id` when the directory's `secret_file` still opens that client (a
/// stack from before one client per directory); else a new random `<legacy_id>-…`. Written to
/// `id_file` (mode 0600) when it was not read from there.
pub async fn proxy_client_id(
    store: &Store,
    id_file: &Path,
    secret_file: &Path,
    legacy_id: &str,
) -> anyhow::Result<String> {
    match std::fs::read_to_string(id_file) {
        Ok(text) => {
            let id = text.trim();
            let fits = id.starts_with(legacy_id)
                && id.len() <= 100
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !fits {
                anyhow::bail!(
                    "{}: \"{}\" is not a proxy client id (like {legacy_id}-<random>); delete the file to register a new client",
                    id_file.display(),
                    id.escape_debug()
                );
            }
            return Ok(id.to_owned());
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("cannot read {}", id_file.display()));
        }
    }
    let legacy = store.find_application_by_client_id(legacy_id).await?;
    let kept = std::fs::read_to_string(secret_file).ok();
    let id = match (legacy, kept) {
        (Some(app), Some(kept)) if app.secret_matches(kept.trim()) => legacy_id.to_owned(),
        _ => format!("{legacy_id}-{}", authserver::secrets::random_client_id()),
    };
    private_files::write_secret(id_file, &id)
        .with_context(|| format!("cannot keep the proxy's client id in {}", id_file.display()))?;
    Ok(id)
}

/// The proxy's introspection secret: the one kept in `secret_file` while it still opens the
/// application `client_id`; otherwise (first start, file lost, secret regenerated by an operator)
/// a new one, registering the application when missing, written to `secret_file` (mode 0600).
/// A second stack on the same data directory thus reuses the secret and the first keeps working.
pub async fn proxy_secret(
    store: &Store,
    settings: &Settings,
    client_id: &str,
    secret_file: &Path,
) -> anyhow::Result<String> {
    let app = store.find_application_by_client_id(client_id).await?;
    let kept = std::fs::read_to_string(secret_file).ok();
    if let (Some(app), Some(kept)) = (&app, kept.as_deref().map(str::trim))
        && app.may_introspect
        && app.secret_matches(kept)
    {
        return Ok(kept.to_owned());
    }
    let secret = match app {
        Some(app) => {
            store
                .regenerate_secret(app.id, std::time::Duration::ZERO)
                .await?
        }
        None => {
            let input = introspection_client("tokengate proxy (introspection)");
            register(store, settings, input, None, Some(client_id.into()))
                .await?
                .secret
        }
    };
    let secret =
        secret.ok_or_else(|| anyhow::anyhow!("a confidential application got no secret"))?;
    private_files::write_secret(secret_file, &secret).with_context(|| {
        format!(
            "cannot keep the proxy's introspection secret in {}",
            secret_file.display()
        )
    })?;
    Ok(secret)
}

/// A client_credentials application that may introspect and use the revocation stream: what a
/// resource server or the proxy checks tokens with.
fn introspection_client(name: &str) -> ApplicationInput {
    ApplicationInput {
        name: name.into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::ClientCredentials,
        redirect_uris: String::new(),
        // The revocation stream's scopes too (issue 24): the proxy follows it with this client.
        allowed_scopes: vec![
            "introspection".into(),
            "ssf.read".into(),
            "ssf.manage".into(),
        ],
        may_introspect: true,
        may_use_ssf: true,
        pkce_required: true,
        token_format: None,
    }
}

/// The text printed at start: where things listen and, on the first start, the credentials and
/// the README's walkthrough ("Try the whole stack") as commands ready to paste.
pub fn banner(
    front_door: SocketAddr,
    authserver: SocketAddr,
    api: SocketAddr,
    admin: SocketAddr,
    first: Option<&FirstRun>,
) -> String {
    let base = format!("http://{front_door}");
    let mut text = format!(
        "tokengate is up. Front door: {base}\n  authorization server {authserver}, example API {api}, proxy admin http://{admin}/metrics\n"
    );
    match first {
        None => text.push_str(
            "  (credentials were printed on the first start; make more with\n   `cargo run --release -p authserver -- app create --name NAME` and `... user create --username NAME`)\n",
        ),
        Some(f) => text.push_str(&format!(
            r#"
First start: created these; they are shown only now.
  administrator     {user} / {pw}   (sign in at {base}/admin/ and {base}/o/applications/)
  demo application  confidential, Resource owner password-based
    client_id       {id}
    client_secret   {secret}
  resource-server   confidential, client credentials, may introspect
    client_id       {rs_id}
    client_secret   {rs_secret}

Try it (README.md: Try the whole stack):
  CLIENT='{id}:{secret}'
  # 1. a token with the password grant (HTTP Basic client authentication)
  curl -s -u "$CLIENT" -d grant_type=password -d username={user} -d password='{pw}' {base}/o/token/
  TOKEN=$(curl -s -u "$CLIENT" -d grant_type=password -d username={user} -d password='{pw}' {base}/o/token/ | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  # 2. the protected API
  curl -s -H "Authorization: Bearer $TOKEN" {base}/users/
  # 3. a read-only token is refused on /groups/ (403)
  READ=$(curl -s -u "$CLIENT" -d grant_type=password -d username={user} -d password='{pw}' -d scope=read {base}/o/token/ | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  curl -si -H "Authorization: Bearer $READ" {base}/groups/
  # 4. introspection with a token that carries the introspection scope (only an application
  #    allowed to introspect can have it: here the resource-server one)
  RS=$(curl -s -u '{rs_id}:{rs_secret}' -d grant_type=client_credentials -d scope=introspection {base}/o/token/ | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  curl -s -H "Authorization: Bearer $RS" -d token="$TOKEN" {base}/o/introspect/
"#,
            user = f.admin_username,
            pw = f.admin_password,
            id = f.client_id,
            secret = f.client_secret,
            rs_id = f.resource_server_id,
            rs_secret = f.resource_server_secret,
        )),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::FirstRun;

    #[test]
    fn debug_hides_the_secrets() {
        let first = FirstRun {
            admin_username: "admin".into(),
            admin_password: "admin-pw-secret".into(),
            client_id: "demo-id".into(),
            client_secret: "demo-secret".into(),
            resource_server_id: "rs-id".into(),
            resource_server_secret: "rs-secret".into(),
        };
        let shown = format!("{first:?}");
        assert!(
            shown.contains("demo-id") && shown.contains("rs-id"),
            "{shown}"
        );
        for secret in ["admin-pw-secret", "demo-secret", "rs-secret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
