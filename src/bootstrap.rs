//! First start of the stack: an administrator and a demo application with random secrets,
//! printed once; and the proxy's own introspection client, whose secret changes every start.

use authserver::secrets::random_token;
use authserver::store::{ApplicationInput, ClientType, GrantType, NewUser, Store};
use std::net::SocketAddr;

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
pub async fn first_run(store: &Store) -> anyhow::Result<Option<FirstRun>> {
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
        allowed_scopes: Vec::new(),
        may_introspect: false,
    };
    let (app, secret) = store
        .create_application(&demo, Some(admin.id), None, None)
        .await?;
    let resource_server = ApplicationInput {
        name: "resource-server".into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::ClientCredentials,
        redirect_uris: String::new(),
        allowed_scopes: vec!["introspection".into()],
        may_introspect: true,
    };
    let (rs, rs_secret) = store
        .create_application(&resource_server, Some(admin.id), None, None)
        .await?;
    Ok(Some(FirstRun {
        admin_username: admin.username,
        admin_password,
        client_id: app.client_id,
        client_secret: secret.unwrap_or_default(),
        resource_server_id: rs.client_id,
        resource_server_secret: rs_secret.unwrap_or_default(),
    }))
}

/// Registers the proxy's client-credentials application (allowed to introspect) when missing,
/// and gives it a new random secret, returned for the proxy to use.
pub async fn rotate_proxy_secret(store: &Store, client_id: &str) -> anyhow::Result<String> {
    if let Some(app) = store.find_application_by_client_id(client_id).await?
        && let Some(secret) = store.regenerate_secret(app.id).await?
    {
        return Ok(secret);
    }
    let input = ApplicationInput {
        name: "tokengate proxy (introspection)".into(),
        client_type: ClientType::Confidential,
        grant_type: GrantType::ClientCredentials,
        redirect_uris: String::new(),
        allowed_scopes: vec!["introspection".into()],
        may_introspect: true,
    };
    let (_, secret) = store
        .create_application(&input, None, Some(client_id.into()), None)
        .await?;
    secret.ok_or_else(|| anyhow::anyhow!("a confidential application got no secret"))
}

/// The text printed at start: where things listen and, on the first start, the credentials and
/// the seed's walkthrough as commands ready to paste.
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

The seed's walkthrough:
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
