//! The `authserver` command line: serve, and the operator commands for scripts and containers.

use crate::config::{Settings, redact_url};
use crate::store::{ApplicationInput, ClientType, GrantType, NewUser, Store};
use crate::{AppState, serve, shutdown_signal};
use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use std::io::BufRead;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "authserver",
    version,
    about = "tokengate's OAuth 2.0 authorization server"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Args, Clone)]
pub struct Common {
    /// The YAML settings file (default config/authserver.yaml, or AUTHSERVER_CONFIG).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Overrides database_url (sqlite://… or postgres://…).
    #[arg(long, global = true)]
    pub database_url: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve,
    /// Create an administrator (staff and superuser). Password from AUTHSERVER_PASSWORD or stdin.
    Createsuperuser {
        #[arg(long)]
        username: String,
        #[arg(long, default_value = "")]
        email: String,
    },
    /// Users.
    #[command(subcommand)]
    User(UserCommand),
    /// Groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Client applications.
    #[command(subcommand)]
    App(AppCommand),
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user. Password from AUTHSERVER_PASSWORD or stdin.
    Create {
        #[arg(long)]
        username: String,
        #[arg(long, default_value = "")]
        email: String,
        #[arg(long, default_value = "")]
        first_name: String,
        #[arg(long, default_value = "")]
        last_name: String,
        #[arg(long)]
        staff: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Create a group.
    Create { name: String },
}

#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Register an application and print its client id and secret (the only time it is shown).
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "confidential")]
        client_type: ClientType,
        #[arg(long, default_value = "password")]
        grant_type: GrantType,
        #[arg(long)]
        client_id: Option<String>,
        /// Read the client secret from stdin instead of generating one.
        #[arg(long)]
        client_secret_stdin: bool,
        /// Allow this application to call the introspection endpoint.
        #[arg(long)]
        introspect: bool,
        /// Scopes it may ask for, space-separated (default: every declared scope).
        #[arg(long, default_value = "")]
        scopes: String,
        #[arg(long, default_value = "")]
        redirect_uris: String,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
}

impl Cli {
    pub fn settings(&self) -> Result<Settings, crate::config::ConfigError> {
        let mut settings = Settings::load(self.common.config.as_deref())?;
        if let Some(url) = &self.common.database_url {
            settings.database_url = url.clone();
        }
        Ok(settings)
    }
}

/// Runs one command. Errors come back for `main` to print; nothing here panics or exits.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let settings = cli.settings()?;
    if cli.check_config {
        println!(
            "configuration is valid (listen {}, database {})",
            settings.listen,
            redact_url(&settings.database_url)
        );
        return Ok(());
    }
    let store = Store::connect(&settings.database_url)
        .await
        .with_context(|| {
            format!(
                "cannot open the database {}",
                redact_url(&settings.database_url)
            )
        })?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let listener = tokio::net::TcpListener::bind(settings.listen)
                .await
                .with_context(|| format!("cannot listen on {}", settings.listen))?;
            tracing::info!(listen = %settings.listen, issuer = %settings.issuer, "authorization server listening");
            serve(listener, AppState::new(settings, store), shutdown_signal()).await?;
        }
        Command::Createsuperuser { username, email } => {
            let password = read_secret("AUTHSERVER_PASSWORD", "password")?;
            let new = NewUser {
                username,
                email,
                password: Some(password),
                is_active: true,
                is_staff: true,
                is_superuser: true,
                ..Default::default()
            };
            let user = store.create_user(&new).await?;
            println!("created superuser {} (id {})", user.username, user.id);
        }
        Command::User(UserCommand::Create {
            username,
            email,
            first_name,
            last_name,
            staff,
        }) => {
            let password = read_secret("AUTHSERVER_PASSWORD", "password")?;
            let new = NewUser {
                username,
                email,
                first_name,
                last_name,
                password: Some(password),
                is_active: true,
                is_staff: staff,
                ..Default::default()
            };
            let user = store.create_user(&new).await?;
            println!("created user {} (id {})", user.username, user.id);
        }
        Command::Group(GroupCommand::Create { name }) => {
            let group = store.create_group(&name).await?;
            println!("created group {} (id {})", group.name, group.id);
        }
        Command::App(AppCommand::Create {
            name,
            client_type,
            grant_type,
            client_id,
            client_secret_stdin,
            introspect,
            scopes,
            redirect_uris,
            json,
        }) => {
            let allowed_scopes: Vec<String> =
                scopes.split_whitespace().map(str::to_owned).collect();
            if let Some(unknown) = allowed_scopes
                .iter()
                .find(|s| !settings.scopes.contains_key(*s))
            {
                bail!("--scopes: scope \"{unknown}\" is not declared in the configuration");
            }
            let secret = if client_secret_stdin {
                Some(read_line("client secret")?)
            } else {
                None
            };
            let input = ApplicationInput {
                name,
                client_type,
                grant_type,
                redirect_uris,
                allowed_scopes,
                may_introspect: introspect,
            };
            let (app, secret) = store
                .create_application(&input, None, client_id, secret)
                .await?;
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
        }
    }
    Ok(())
}

fn read_secret(variable: &str, what: &str) -> anyhow::Result<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Ok(value),
        _ => read_line(what),
    }
}

fn read_line(what: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .with_context(|| format!("cannot read the {what} from stdin"))?;
    let value = line.trim_end_matches(['\r', '\n']).to_owned();
    if value.is_empty() {
        bail!("no {what} given: pipe it on stdin");
    }
    Ok(value)
}
