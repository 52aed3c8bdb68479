//! The operator commands on users, groups and applications. Every value goes through the same
//! rules as the views' forms ([`crate::validation`]), and a refusal carries the form's message.

use super::prompt;
use super::{AppCommand, CreateApp, GroupCommand, UserCommand, UserGroupsCommand};
use crate::config::Settings;
use crate::registration::{self, Registration, RegistrationError};
use crate::store::{ClientType, NewUser, Store, StoreError};
use crate::validation::{self, ApplicationDraft};
use anyhow::{Context, bail};

/// `Err("<flag>: <message>")` when a shared rule refuses.
fn checked(flag: &str, check: Result<(), String>) -> anyhow::Result<()> {
    check.map_err(|message| anyhow::anyhow!("{flag}: {message}"))
}

/// `Err("<flag> \"<value>\": <message>")` when a shared rule refuses a value that is no secret.
fn checked_value(flag: &str, value: &str, check: Result<(), String>) -> anyhow::Result<()> {
    check.map_err(|message| anyhow::anyhow!("{flag} {value:?}: {message}"))
}

/// The store's conflict as the form words it, other errors as they are.
fn conflict(error: StoreError, message: &str) -> anyhow::Error {
    match error {
        StoreError::Conflict(_) => anyhow::anyhow!("{message}"),
        other => other.into(),
    }
}

/// The new user's fields, checked as the add-user form checks them, then the password.
pub struct NewAccount {
    pub username: String,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub is_staff: bool,
    pub is_superuser: bool,
}

/// Creates a user after checking every field, the password last (so a bad name is refused
/// before anyone types a password).
pub async fn create_user(store: &Store, account: NewAccount) -> anyhow::Result<()> {
    checked_value(
        "--username",
        &account.username,
        validation::username(&account.username),
    )?;
    checked_value("--email", &account.email, validation::email(&account.email))?;
    checked_value(
        "--first-name",
        &account.first_name,
        validation::first_name(&account.first_name),
    )?;
    checked_value(
        "--last-name",
        &account.last_name,
        validation::last_name(&account.last_name),
    )?;
    if store
        .find_user_by_username(&account.username)
        .await?
        .is_some()
    {
        bail!("--username: A user with that username already exists.");
    }
    let password = prompt::password("AUTHSERVER_PASSWORD", "password").await?;
    checked("password", validation::password(&password))?;
    let new = NewUser {
        username: account.username,
        email: account.email,
        first_name: account.first_name,
        last_name: account.last_name,
        password: Some(password),
        is_active: true,
        is_staff: account.is_staff || account.is_superuser,
        is_superuser: account.is_superuser,
    };
    let user = store
        .create_user(&new)
        .await
        .map_err(|e| conflict(e, "--username: A user with that username already exists."))?;
    let kind = if user.is_superuser {
        "superuser"
    } else {
        "user"
    };
    println!("created {kind} {} (id {})", user.username, user.id);
    Ok(())
}

pub async fn user(store: &Store, command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Create {
            username,
            email,
            first_name,
            last_name,
            staff,
        } => {
            let account = NewAccount {
                username,
                email,
                first_name,
                last_name,
                is_staff: staff,
                is_superuser: false,
            };
            create_user(store, account).await?;
        }
        UserCommand::List { json } => {
            let users = store.list_users().await?;
            if json {
                let rows: Vec<serde_json::Value> = users
                    .iter()
                    .map(|u| {
                        serde_json::json!({
                            "id": u.id, "username": u.username, "email": u.email,
                            "first_name": u.first_name, "last_name": u.last_name,
                            "is_active": u.is_active, "is_staff": u.is_staff,
                            "is_superuser": u.is_superuser, "date_joined": u.date_joined,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::from(rows));
            } else {
                for u in &users {
                    let mut roles = Vec::new();
                    if u.is_superuser {
                        roles.push("superuser");
                    } else if u.is_staff {
                        roles.push("staff");
                    }
                    if !u.is_active {
                        roles.push("inactive");
                    }
                    println!("{}  {}  {}", u.id, u.username, roles.join(","));
                }
            }
        }
        UserCommand::SetPassword { username } => {
            let user = store
                .find_user_by_username(&username)
                .await?
                .with_context(|| format!("no user named {username:?}"))?;
            let password = prompt::password("AUTHSERVER_PASSWORD", "password").await?;
            checked("password", validation::password(&password))?;
            store.set_password(user.id, &password).await?;
            let ended = store.delete_user_sessions(user.id).await?;
            println!(
                "password of {} changed; its tokens revoked; {ended} browser session(s) ended",
                user.username
            );
        }
        UserCommand::Delete { username } => {
            let user = store
                .find_user_by_username(&username)
                .await?
                .with_context(|| format!("no user named {username:?}"))?;
            if !store.delete_user(user.id).await? {
                bail!("no user named {username:?}");
            }
            println!(
                "deleted user {} (id {}) and their tokens",
                user.username, user.id
            );
        }
        UserCommand::Groups(command) => user_groups(store, command).await?,
    }
    Ok(())
}

/// `user groups add|remove|list`: a user's memberships, by user and group name.
async fn user_groups(store: &Store, command: UserGroupsCommand) -> anyhow::Result<()> {
    let find_user = |username: String| async move {
        store
            .find_user_by_username(&username)
            .await?
            .with_context(|| format!("no user named {username:?}"))
    };
    let find_group = |name: String| async move {
        store
            .list_groups()
            .await?
            .into_iter()
            .find(|g| g.name == name)
            .with_context(|| format!("no group named {name:?} (create it with `group create`)"))
    };
    match command {
        UserGroupsCommand::Add { username, group } => {
            let user = find_user(username).await?;
            let group = find_group(group).await?;
            store.add_member(group.id, user.id).await?;
            println!("{} is in group {}", user.username, group.name);
        }
        UserGroupsCommand::Remove { username, group } => {
            let user = find_user(username).await?;
            let group = find_group(group).await?;
            store.remove_member(group.id, user.id).await?;
            println!("{} is not in group {}", user.username, group.name);
        }
        UserGroupsCommand::List { username, json } => {
            let user = find_user(username).await?;
            let names: Vec<String> = store
                .user_groups(user.id)
                .await?
                .into_iter()
                .map(|g| g.name)
                .collect();
            if json {
                println!("{}", serde_json::Value::from(names));
            } else {
                for name in names {
                    println!("{name}");
                }
            }
        }
    }
    Ok(())
}

pub async fn group(store: &Store, command: GroupCommand) -> anyhow::Result<()> {
    match command {
        GroupCommand::Create { name } => {
            let name = name.trim().to_owned();
            checked_value("name", &name, validation::group_name(&name))?;
            let group = store
                .create_group(&name)
                .await
                .map_err(|e| conflict(e, "name: A group with that name already exists."))?;
            println!("created group {} (id {})", group.name, group.id);
        }
        GroupCommand::List { json } => {
            let groups = store.list_groups().await?;
            let mut rows = Vec::new();
            for group in &groups {
                let members: Vec<String> = store
                    .group_members(group.id)
                    .await?
                    .into_iter()
                    .map(|u| u.username)
                    .collect();
                rows.push((group, members));
            }
            if json {
                let rows: Vec<serde_json::Value> = rows
                    .iter()
                    .map(|(g, members)| {
                        serde_json::json!({ "id": g.id, "name": g.name, "members": members })
                    })
                    .collect();
                println!("{}", serde_json::Value::from(rows));
            } else {
                for (g, members) in &rows {
                    println!("{}  {}  members: {}", g.id, g.name, members.join(" "));
                }
            }
        }
        GroupCommand::Delete { name } => {
            let group = store
                .list_groups()
                .await?
                .into_iter()
                .find(|g| g.name == name)
                .with_context(|| format!("no group named {name:?}"))?;
            if !store.delete_group(group.id).await? {
                bail!("no group named {name:?}");
            }
            println!("deleted group {} (id {})", group.name, group.id);
        }
    }
    Ok(())
}

/// The command-line flag of an application form field, and the value given for it.
/// `uri_flag` names the flag the redirect URIs came from.
fn app_field(
    draft: &ApplicationDraft,
    field: &str,
    uri_flag: &'static str,
) -> (&'static str, String) {
    match field {
        "name" => ("--name", draft.name.clone()),
        "client_type" => ("--client-type", draft.client_type.clone()),
        "grant_type" => ("--grant-type", draft.grant_type.clone()),
        "redirect_uris" => (uri_flag, draft.redirect_uris.clone()),
        "pkce_optional" => ("--pkce-optional", draft.pkce_optional.to_string()),
        "may_introspect" => ("--introspect", draft.may_introspect.to_string()),
        "may_use_ssf" => ("--ssf", draft.may_use_ssf.to_string()),
        "token_format" => ("--token-format", draft.token_format.clone()),
        "tls_client_auth" => ("--tls-client-auth", draft.tls_client_auth.clone()),
        _ => ("--scopes", draft.scopes.join(" ")),
    }
}

/// `--tls-client-auth` as given, except that `self_signed_jwks:@FILE` is the JWKS in FILE.
fn registration_text(given: &str) -> anyhow::Result<String> {
    match given.strip_prefix("self_signed_jwks:@") {
        Some(file) => {
            let jwks = std::fs::read_to_string(file)
                .map_err(|e| anyhow::anyhow!("--tls-client-auth: cannot read {file}: {e}"))?;
            Ok(format!("self_signed_jwks:{}", jwks.trim()))
        }
        None => Ok(given.to_owned()),
    }
}

/// `app create`: checks the draft as the registration form does, then registers it.
async fn create_app(store: &Store, settings: &Settings, create: CreateApp) -> anyhow::Result<()> {
    let CreateApp {
        name,
        client_type,
        grant_type,
        client_id,
        client_secret_stdin,
        introspect,
        ssf,
        scopes,
        redirect_uri,
        redirect_uris,
        pkce_optional,
        token_format,
        tls_client_auth,
        dpop_required,
        post_logout_redirect_uri,
        id_token_alg,
        require_mfa,
        json,
    } = create;
    let mut scope_list: Vec<String> = Vec::new();
    for scope in scopes.split_whitespace() {
        if !scope_list.iter().any(|s| s == scope) {
            scope_list.push(scope.to_owned());
        }
    }
    let uri_flag = if redirect_uri.is_empty() {
        "--redirect-uris"
    } else {
        "--redirect-uri"
    };
    let draft = ApplicationDraft {
        name: name.trim().to_owned(),
        client_type: client_type.trim().to_owned(),
        grant_type: grant_type.trim().to_owned(),
        redirect_uris: redirect_uri
            .iter()
            .map(String::as_str)
            .chain(redirect_uris.split_whitespace())
            .collect::<Vec<_>>()
            .join(" "),
        scopes: scope_list,
        may_introspect: introspect,
        may_use_ssf: ssf,
        pkce_optional,
        token_format: token_format.unwrap_or_default().trim().to_owned(),
        tls_client_auth: registration_text(tls_client_auth.unwrap_or_default().trim())?,
        dpop_required,
    };

    let oidc = validation::OidcDraft {
        post_logout_redirect_uris: post_logout_redirect_uri.join(" "),
        id_token_alg: id_token_alg.unwrap_or_default().trim().to_owned(),
        require_mfa,
    };
    // Every flag checked before the secret is read, so a typo is refused before anyone types it.
    let resource_scopes = store.resource_scopes().await?;
    let mut registration = Registration::check(settings, &resource_scopes, &draft, &oidc)
        .map_err(|refusals| refused(&refusals, &draft, &oidc, uri_flag))?;
    // The permissions bring their scopes, as in the form.
    let permissions = crate::domain::Permissions { introspect, ssf };
    registration.input.allowed_scopes =
        crate::domain::with_permission_scopes(&registration.input.allowed_scopes, permissions);
    if let Some(id) = &client_id
        && let Some(problem) = registration::client_id_problem(id)
    {
        bail!("--client-id {id:?}: {problem}");
    }
    if let Some(id) = &client_id
        && store.find_application_by_client_id(id).await?.is_some()
    {
        bail!("--client-id: an application with client id {id:?} already exists");
    }
    if registration.tls_client_auth.is_some() && client_secret_stdin {
        bail!("--tls-client-auth: a client authenticating with a certificate has no secret");
    }
    if client_secret_stdin && registration.input.client_type == ClientType::Public {
        bail!("--client-secret-stdin: a public client has no secret");
    }
    let client_secret = if client_secret_stdin {
        Some(prompt::read_secret("client secret", false).await?)
    } else {
        None
    };
    let create = registration::Create {
        registration,
        owner_id: None,
        client_id,
        client_secret,
        dynamic: None,
    };
    let registered = registration::create(store, &crate::jwt::KeyRing::new(), settings, create)
        .await
        .map_err(|error| match error {
            RegistrationError::Refused(refusals) => refused(&refusals, &draft, &oidc, uri_flag),
            other => other.into(),
        })?;
    let (app, secret) = (registered.app, registered.secret);
    if json {
        println!(
            "{}",
            serde_json::json!({ "id": app.id, "client_id": app.client_id, "client_secret": secret })
        );
    } else {
        println!("client_id: {}", app.client_id);
        if let Some(secret) = secret {
            println!("client_secret: {secret}");
            println!("(the secret is shown only now; store it safely)");
        }
    }
    Ok(())
}

/// The refusals of `app create` as lines naming the flag and the value given (never a secret).
fn refused(
    refusals: &validation::Refusals,
    draft: &ApplicationDraft,
    oidc: &validation::OidcDraft,
    uri_flag: &'static str,
) -> anyhow::Error {
    let lines: Vec<String> = refusals
        .iter()
        .map(|(field, message)| match field {
            "id_token_alg" => format!("--id-token-alg {:?}: {message}", oidc.id_token_alg),
            "post_logout_redirect_uris" => format!(
                "--post-logout-redirect-uri {:?}: {message}",
                oidc.post_logout_redirect_uris
            ),
            "client_id" => format!("--client-id: {message}"),
            "client_secret" => format!("--client-secret-stdin: {message}"),
            _ => {
                let (flag, value) = app_field(draft, field, uri_flag);
                format!("{flag} {value:?}: {message}")
            }
        })
        .collect();
    anyhow::anyhow!("{}", lines.join("\n"))
}

pub async fn app(store: &Store, settings: &Settings, command: AppCommand) -> anyhow::Result<()> {
    match command {
        AppCommand::Create(create) => create_app(store, settings, *create).await?,
        AppCommand::List { json } => {
            let apps = store.list_applications(None).await?;
            if json {
                let rows: Vec<serde_json::Value> = apps
                    .iter()
                    .map(|a| {
                        serde_json::json!({
                            "id": a.id, "name": a.name, "client_id": a.client_id,
                            "client_type": a.client_type.as_str(), "grant_type": a.grant_type.as_str(),
                            "redirect_uris": a.redirect_uris.split_whitespace().collect::<Vec<_>>(),
                            "allowed_scopes": a.allowed_scopes, "may_introspect": a.may_introspect,
                            "may_use_ssf": a.may_use_ssf,
                            "pkce_required": a.pkce_required,
                            "dpop_required": a.dpop_required,
                            "token_format": a.access_token_format(settings.access_token_format),
                            "token_format_own": a.token_format,
                            "owner_id": a.owner_id, "secret_fingerprint": a.secret_fingerprint(),
                            "created_at": a.created_at,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::from(rows));
            } else {
                let rows: Vec<[String; 5]> = apps
                    .iter()
                    .map(|a| {
                        [
                            a.id.to_string(),
                            a.client_id.clone(),
                            a.client_type.as_str().to_owned(),
                            a.grant_type.as_str().to_owned(),
                            a.name.clone(),
                        ]
                    })
                    .collect();
                print_table(["ID", "CLIENT ID", "TYPE", "GRANT", "NAME"], &rows);
            }
        }
        AppCommand::Delete { client_id } => {
            let app = store
                .find_application_by_client_id(&client_id)
                .await?
                .with_context(|| format!("no application with client id {client_id:?}"))?;
            if !registration::delete(store, app.id).await? {
                bail!("no application with client id {client_id:?}");
            }
            println!(
                "deleted application {} ({}); its tokens no longer work",
                app.name, app.client_id
            );
        }
        AppCommand::RotateSecret {
            client_id,
            grace,
            json,
        } => {
            let grace_text = grace;
            let grace = registration::parse_grace(&grace_text)
                .map_err(|expected| anyhow::anyhow!("--grace {grace_text:?}: {expected}"))?;
            let app = store
                .find_application_by_client_id(&client_id)
                .await?
                .with_context(|| format!("no application with client id {client_id:?}"))?;
            let secret = match registration::rotate_secret(store, app.id, grace).await {
                Err(RegistrationError::PublicClient) => {
                    bail!("{client_id} is a public client: it has no secret")
                }
                rotated => rotated?
                    .with_context(|| format!("no application with client id {client_id:?}"))?,
            };
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "client_id": app.client_id,
                        "client_secret": secret,
                        "previous_secret_valid_for": grace.as_secs(),
                    })
                );
            } else {
                println!("client_id: {}", app.client_id);
                println!("client_secret: {secret}");
                if grace.is_zero() {
                    println!("(the previous secret no longer works; this one is shown only now)");
                } else {
                    println!(
                        "(the previous secret keeps working for {grace_text}; this one is shown only now)"
                    );
                }
            }
        }
    }
    Ok(())
}

/// `registration-token`: a new initial access token for dynamic client registration, kept as a
/// digest with its expiry and number of uses, printed once.
pub async fn registration_token(
    store: &Store,
    settings: &Settings,
    expires_in: &str,
    uses: Option<u32>,
    label: String,
    json: bool,
) -> anyhow::Result<()> {
    let lifetime = resource_server::settings::parse_duration(expires_in)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
        .filter(|secs| (1..=crate::config::MAX_SECONDS).contains(secs))
        .with_context(|| {
            format!("--expires-in {expires_in:?}: a duration from 1s to ten years, like 3600, 15m, 10h or 7d")
        })?;
    if uses == Some(0) {
        bail!("--uses 0: a token that registers no client is of no use");
    }
    checked_value(
        "--label",
        &label,
        validation::length(&label, "The label", false, 255),
    )?;
    if settings.dynamic_registration != crate::config::DynamicRegistration::InitialAccessToken {
        eprintln!(
            "note: dynamic_registration is not initial_access_token here: the token works once the server runs with that policy"
        );
    }
    let token = crate::secrets::random_token();
    let at = crate::store::now();
    let issued = crate::store::InitialAccessToken {
        digest: crate::secrets::digest(&token),
        label,
        created_at: at,
        expires_at: at + lifetime,
        max_uses: uses.map(i64::from),
        uses: 0,
    };
    store.add_initial_access_token(&issued).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "initial_access_token": token, "expires_at": issued.expires_at,
                "max_uses": issued.max_uses,
            })
        );
    } else {
        println!("initial_access_token: {token}");
        let uses = match issued.max_uses {
            Some(n) => format!("{n} registration(s)"),
            None => "any number of registrations".to_owned(),
        };
        println!(
            "(valid for {lifetime} s, {uses}; shown only now: send it as `Authorization: Bearer` to POST /o/register)"
        );
    }
    Ok(())
}

/// Prints `rows` under a header row, each column as wide as its widest cell (two spaces between
/// columns, the last left ragged).
fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header);
    for row in rows {
        line(std::array::from_fn(|i| row[i].as_str()));
    }
}
