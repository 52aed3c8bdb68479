//! The `authserver` command line: serve, and the operator commands for scripts and containers.

mod operators;
mod prompt;
mod resources;

use crate::config::Settings;
use crate::jwt::{KeySet, KeyState, rotation};
use crate::serve;
use crate::store::{Store, now};
use anyhow::{Context, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use http_serving::{redact_url, shutdown_signal};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[derive(Debug, Parser)]
#[command(
    name = "authserver",
    version,
    about = "tokengate's OAuth 2.0 authorization server"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    /// Validate the configuration and exit (0 = valid): FILE if given, as `proxy --check-config
    /// FILE` does, else the file of --config, AUTHSERVER_CONFIG or the default.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    pub check_config: Option<Option<PathBuf>>,
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
    /// Create the database if missing and bring its schema up to date, then exit (every other
    /// command but serve and createsuperuser needs an existing database).
    Migrate,
    /// Create an administrator (staff and superuser). Password from AUTHSERVER_PASSWORD, piped
    /// stdin, or typed twice without echo at a terminal.
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
    /// The APIs (RFC 8707 resources) tokens may be requested for, each with its scopes.
    #[command(subcommand)]
    Resource(ResourceCommand),
    /// The keys that sign JWT access tokens.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Issue an initial access token for dynamic client registration (RFC 7591; policy
    /// `dynamic_registration: initial_access_token`) and print it (the only time it is shown).
    RegistrationToken {
        /// How long it may register clients: seconds or 90s, 15m, 10h, 7d (default 1d).
        #[arg(long, default_value = "1d")]
        expires_in: String,
        /// How many clients it may register (default: any number until it expires).
        #[arg(long)]
        uses: Option<u32>,
        /// A note for operators (who it was given to).
        #[arg(long, default_value = "")]
        label: String,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// PostgreSQL: create the example API's login role (or give it a new password), limited to
    /// the user and group tables; the password is read from stdin (at least 32 characters).
    /// Run by the bootstrap step as the authorization server's database user (needs CREATEROLE).
    ApiRole {
        /// The role's name (lower-case letters, digits and _).
        #[arg(default_value = "tokengate_api")]
        name: String,
    },
    /// Delete expired tokens, authorization codes past their reuse window, revoked families
    /// with nothing left, expired browser sessions and signing keys no longer published (what
    /// `serve` does every purge_interval), and print how many of each.
    Cleartokens {
        /// Print JSON instead of a line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// List the signing keys and where each stands (pending, signing, retired, expired).
    List {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Add a signing key: in the JWKS at once, signing after --delay seconds; keys whose
    /// tokens have all expired are deleted.
    Rotate {
        /// Seconds before the new key signs (default: twice jwks_max_age plus 10 s, so every
        /// validator has refetched the JWKS). 0 only to replace a compromised key at once.
        #[arg(long)]
        delay: Option<i64>,
    },
    /// Encrypt every signing key with the first secret of AUTHSERVER_SECRETS_SYSTEM (or its
    /// file): after putting a new secret first, before removing the old one from the list.
    Reencrypt,
    /// Delete a key that no longer signs (a compromised one, after `keys rotate --delay 0`):
    /// it leaves the JWKS, and its tokens stop introspecting, within 10 s on every replica.
    Delete {
        /// A kid is base64url: it may begin with `-` (so may names and client ids below).
        #[arg(allow_hyphen_values = true)]
        kid: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user. Password from AUTHSERVER_PASSWORD, piped stdin, or typed twice without
    /// echo at a terminal.
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
    /// List the users.
    List {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Set a user's password (read like `create`'s) and end their browser sessions.
    SetPassword {
        #[arg(allow_hyphen_values = true)]
        username: String,
    },
    /// Delete a user, their tokens and memberships; their applications lose their owner.
    Delete {
        #[arg(allow_hyphen_values = true)]
        username: String,
    },
    /// A user's groups: what their tokens name under the `groups` scope (X-Auth-Groups).
    #[command(subcommand)]
    Groups(UserGroupsCommand),
}

#[derive(Debug, Subcommand)]
pub enum UserGroupsCommand {
    /// Put a user in a group (already in it: no change).
    Add {
        #[arg(allow_hyphen_values = true)]
        username: String,
        #[arg(allow_hyphen_values = true)]
        group: String,
    },
    /// Take a user out of a group (not in it: no change).
    Remove {
        #[arg(allow_hyphen_values = true)]
        username: String,
        #[arg(allow_hyphen_values = true)]
        group: String,
    },
    /// List a user's groups, one name a line.
    List {
        #[arg(allow_hyphen_values = true)]
        username: String,
        /// Print a JSON list instead of lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ResourceCommand {
    /// Register an API: tokens requested with `resource=<identifier>` carry it as their
    /// audience and only its scopes.
    Create {
        /// An absolute https URI (http on loopback), e.g. https://orders.example/
        #[arg(long)]
        identifier: String,
        /// What the consent page and the views show (default: the identifier).
        #[arg(long)]
        name: Option<String>,
        /// The scopes this API knows, space-separated, e.g. "orders:read orders:write".
        #[arg(long)]
        scopes: String,
        /// opaque or jwt (default: the application's, then the server's format).
        #[arg(long)]
        token_format: Option<String>,
        /// Access-token lifetime in seconds, at most the server's (default: the server's).
        #[arg(long)]
        lifetime: Option<i64>,
    },
    /// List the resources.
    List {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Delete a resource: no new token names it; tokens issued for it run to their expiry.
    Delete { identifier: String },
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Create a group.
    Create { name: String },
    /// List the groups and their members.
    List {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Delete a group (its members stay).
    Delete {
        #[arg(allow_hyphen_values = true)]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Register an application and print its client id and secret (the only time it is shown).
    Create(Box<CreateApp>),
    /// List the applications (never their secrets: only fingerprints).
    List {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Delete an application; its tokens stop working.
    Delete {
        #[arg(allow_hyphen_values = true)]
        client_id: String,
    },
    /// Give an application a new secret and print it (the only time it is shown); the previous
    /// secret keeps working for `--grace` (default 0: it stops working at once).
    RotateSecret {
        #[arg(allow_hyphen_values = true)]
        client_id: String,
        /// How long the previous secret stays valid, like 3600, 15m, 1h or 7d (at most ten
        /// years); the default 0 makes it stop working at once. Rotating again replaces it.
        #[arg(long, default_value = "0")]
        grace: String,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// `app create`: the application to register.
#[derive(Debug, Args)]
pub struct CreateApp {
    /// A name people recognise in the applications list, the views and consent pages (up to
    /// 255 characters).
    #[arg(long)]
    name: String,
    /// confidential or public.
    #[arg(long, default_value = "confidential")]
    client_type: String,
    /// password, client-credentials or authorization-code.
    #[arg(long, default_value = "password")]
    grant_type: String,
    #[arg(long)]
    client_id: Option<String>,
    /// Read the client secret from stdin instead of generating one (at least 32 characters).
    #[arg(long)]
    client_secret_stdin: bool,
    /// Allow this application to call the introspection endpoint (scope introspection).
    #[arg(long)]
    introspect: bool,
    /// Allow this application to use the revocation stream (scopes ssf.read, ssf.manage).
    #[arg(long)]
    ssf: bool,
    /// Scopes it may ask for, space-separated (e.g. "read write"); "*" for every declared scope,
    /// now and later. Without it: none (least privilege); --introspect and --ssf bring their own
    /// scopes.
    #[arg(long, default_value = "")]
    scopes: String,
    /// A redirect URI of the authorization code grant (repeatable): an absolute https URL,
    /// or http to 127.0.0.1, [::1] or localhost; matched exactly.
    #[arg(long = "redirect-uri", value_name = "URI")]
    redirect_uri: Vec<String>,
    /// Redirect URIs, space-separated (the older form of --redirect-uri).
    #[arg(long, default_value = "")]
    redirect_uris: String,
    /// Let this confidential client leave PKCE out of the authorization code grant (public
    /// clients always need it).
    #[arg(long)]
    pkce_optional: bool,
    /// Access-token format: opaque or jwt (default: the server's access_token_format).
    #[arg(long, value_name = "opaque|jwt")]
    token_format: Option<String>,
    /// Authenticate with a client certificate instead of a secret (RFC 8705; confidential
    /// clients): `subject_dn:<DN>` or `san_dns:<name>` (tls_client_auth, a certificate from the
    /// proxy's client CAs), `self_signed:<x5t#S256>` or `self_signed_jwks:<JWKS JSON>` /
    /// `self_signed_jwks:@FILE` (self_signed_tls_client_auth: that certificate, or any in the
    /// JWKS keys' x5c). Its tokens are bound to the certificate.
    #[arg(long, value_name = "KIND:VALUE")]
    tls_client_auth: Option<String>,
    /// Refuse this client's token requests that come without a DPoP proof (RFC 9449): all its
    /// tokens are bound to its key.
    #[arg(long)]
    dpop_required: bool,
    /// OpenID Connect: a post-logout redirect URI (repeatable; the redirect URI rules, matched
    /// exactly).
    #[arg(long = "post-logout-redirect-uri", value_name = "URI")]
    post_logout_redirect_uri: Vec<String>,
    /// OpenID Connect: the ID-token signing algorithm, RS256 (default) or EdDSA.
    #[arg(long, value_name = "RS256|EdDSA")]
    id_token_alg: Option<String>,
    /// Its users must sign in with a second factor (TOTP).
    #[arg(long)]
    require_mfa: bool,
    /// Print JSON instead of lines.
    #[arg(long)]
    json: bool,
}

impl Cli {
    /// [`Parser::parse`] of the process's arguments, except that a subcommand's name right after
    /// `--check-config` is that subcommand, not the FILE: clap alone reads
    /// `--check-config serve` as the file `serve` (`--check-config=serve` still is).
    pub fn parse() -> Cli {
        Cli::try_parse_args(std::env::args_os()).unwrap_or_else(|error| error.exit())
    }

    /// [`Cli::parse`] of `args` (the first is the program name).
    pub fn try_parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let bare = bare_check_config(&args);
        if let Some(at) = bare {
            args.remove(at);
        }
        let mut cli = Cli::try_parse_from(args)?;
        if bare.is_some() {
            cli.check_config = Some(None);
        }
        Ok(cli)
    }

    /// The settings file this command reads: `--check-config FILE`, else `--config`, else
    /// `None` (AUTHSERVER_CONFIG or the default).
    fn config_file(&self) -> Option<&std::path::Path> {
        match &self.check_config {
            Some(Some(file)) => Some(file),
            _ => self.common.config.as_deref(),
        }
    }

    pub fn settings(&self) -> Result<Settings, crate::config::ConfigError> {
        let mut settings = Settings::load(self.config_file())?;
        if let Some(format) = settings.log_format {
            resource_server::logging::set_format(format);
        }
        if let Some(url) = &self.common.database_url {
            settings.database_url = url.clone();
        }
        Ok(settings)
    }
}

/// Where `args` has a `--check-config` followed by a subcommand's name (before the subcommand
/// begins, skipping the values of the global options), if anywhere.
fn bare_check_config(args: &[OsString]) -> Option<usize> {
    let command = Cli::command();
    let is_subcommand = |arg: &OsString| {
        arg.to_str()
            .is_some_and(|name| command.find_subcommand(name).is_some())
    };
    let mut at = 1;
    while at < args.len() {
        let arg = &args[at];
        if arg == "--" || is_subcommand(arg) {
            return None;
        }
        if arg == "--check-config" {
            return args
                .get(at + 1)
                .filter(|next| is_subcommand(next))
                .map(|_| at);
        }
        if arg == "--config" || arg == "--database-url" {
            at += 1;
        }
        at += 1;
    }
    None
}

/// Runs one command. Errors come back for `main` to print; nothing here panics or exits.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut settings = cli.settings()?;
    if cli.check_config.is_some() {
        let named = cli
            .config_file()
            .map(std::path::Path::to_path_buf)
            .or_else(|| std::env::var_os("AUTHSERVER_CONFIG").map(PathBuf::from));
        let file = match named {
            Some(file) => file.display().to_string(),
            None if Path::new(crate::config::DEFAULT_CONFIG_PATH).exists() => {
                crate::config::DEFAULT_CONFIG_PATH.to_owned()
            }
            None => format!(
                "{} not found here; the shipped settings, built in,",
                crate::config::DEFAULT_CONFIG_PATH
            ),
        };
        println!(
            "{file}: OK (listen {}, issuer {}, database {})",
            settings.listen,
            settings.issuer,
            redact_url(&settings.database_url)
        );
        return Ok(());
    }
    let command = cli.command.unwrap_or(Command::Serve);
    // Only these make a database: a typo in a path, or a command run in the wrong directory,
    // must not leave an empty database (and its folders) behind and report success.
    let creates = matches!(
        command,
        Command::Serve | Command::Migrate | Command::Createsuperuser { .. }
    );
    if !creates
        && let Some(file) = crate::store::sqlite_file(&settings.database_url)
        && !file.exists()
    {
        bail!(
            "the database {} does not exist: create it with `authserver migrate` (or serve, \
             createsuperuser), or name another with --database-url or database_url",
            file.display()
        );
    }
    let store = crate::server::open_store(&mut settings, None).await?;
    match command {
        Command::Serve => {
            resource_server::open_files::raise_to_hard_limit();
            let listener = tokio::net::TcpListener::bind(settings.listen)
                .await
                .with_context(|| format!("cannot listen on {}", settings.listen))?;
            let mut settings = settings;
            settings.follow_bound_address(listener.local_addr()?);
            let state = crate::server::ready(crate::AppState::new(settings, store)).await?;
            tracing::info!(listen = %state.settings.listen, issuer = %state.settings.issuer, "authorization server listening");
            serve(listener, state, shutdown_signal()).await?;
        }
        Command::Migrate => println!(
            "database {}: schema up to date",
            redact_url(&settings.database_url)
        ),
        Command::Createsuperuser { username, email } => {
            let account = operators::NewAccount {
                username,
                email,
                first_name: String::new(),
                last_name: String::new(),
                is_staff: true,
                is_superuser: true,
            };
            operators::create_user(&store, account).await?;
        }
        Command::User(command) => operators::user(&store, command).await?,
        Command::Group(command) => operators::group(&store, command).await?,
        Command::App(command) => operators::app(&store, &settings, command).await?,
        Command::Resource(command) => resources::resource(&store, &settings, command).await?,
        Command::Keys(command) => keys_command(&store, &settings, command).await?,
        Command::RegistrationToken {
            expires_in,
            uses,
            label,
            json,
        } => {
            operators::registration_token(&store, &settings, &expires_in, uses, label, json).await?
        }
        Command::ApiRole { name } => {
            crate::store::api_role::check_role_name(&name)
                .map_err(|problem| anyhow::anyhow!("role name: {problem}"))?;
            let password = prompt::read_secret("role password", false).await?;
            if password.chars().count() < 32 || password.chars().any(char::is_control) {
                bail!("role password (stdin): at least 32 characters, no control characters");
            }
            store.grant_api_role(&name, &password).await?;
            println!("role {name}: may log in, read and write the user and group tables only");
        }
        Command::Cleartokens { json } => {
            let purged = crate::purge::run(&store, &settings).await?;
            if json {
                println!("{}", serde_json::to_string(&purged)?);
            } else {
                println!(
                    "deleted {} tokens, {} authorization codes, {} revoked families, {} sessions, {} signing keys",
                    purged.tokens,
                    purged.authorization_codes,
                    purged.revoked_families,
                    purged.sessions,
                    purged.signing_keys
                );
            }
        }
    }
    Ok(())
}

async fn keys_command(
    store: &Store,
    settings: &Settings,
    command: KeysCommand,
) -> anyhow::Result<()> {
    let lifetime = settings.access_token_lifetime;
    match command {
        KeysCommand::List { json } => {
            let at = now();
            let keys = KeySet::from_stored(&store.signing_keys().await?)?;
            let states = keys.states(at, lifetime);
            if json {
                let rows: Vec<serde_json::Value> = states
                    .iter()
                    .map(|(key, state)| {
                        let (name, until) = describe(*state);
                        serde_json::json!({
                            "kid": key.kid, "generation": key.generation, "alg": key.alg.as_str(),
                            "created_at": key.created_at, "signs_from": key.signs_from,
                            "state": name, "until": until,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::from(rows));
            } else if states.is_empty() {
                println!("no signing key yet (the first is created on first need)");
            }
            for (key, state) in states.iter().filter(|_| !json) {
                let shown = match *state {
                    KeyState::Pending { signs_from } => {
                        format!("pending: published, signs {}", relative(signs_from - at))
                    }
                    KeyState::Signing => "signing".to_owned(),
                    KeyState::Retired { published_until } => {
                        format!("retired: published for {} s more", published_until - at)
                    }
                    KeyState::Expired => "expired: no longer published".to_owned(),
                };
                println!(
                    "{}  generation {}  {shown}  [{}]",
                    key.kid,
                    key.generation,
                    key.alg.as_str()
                );
            }
        }
        KeysCommand::Rotate { delay } => {
            let default = rotation::default_delay(settings.jwks_max_age);
            let delay = delay.unwrap_or(default);
            if !(0..=crate::config::MAX_SECONDS).contains(&delay) {
                bail!(
                    "--delay: {delay} is not a number of seconds from 0 to {}",
                    crate::config::MAX_SECONDS
                );
            }
            let rotated = rotation::rotate(store, delay, lifetime).await?;
            let key = &rotated.key;
            for new in std::iter::once(&rotated.key).chain(&rotated.rsa) {
                let alg = if new.algorithm == "EdDSA" {
                    ""
                } else {
                    "RS256 "
                };
                println!(
                    "added {alg}signing key {} (generation {}): published now, signing {}",
                    new.kid,
                    new.generation,
                    relative(new.signs_from - new.created_at)
                );
            }
            if key.generation > 1 && delay < rotation::safe_delay(settings.jwks_max_age) {
                println!(
                    "warning: validators that cached the JWKS in the last {} s do not know this key yet and refuse its tokens until they refetch",
                    rotation::safe_delay(settings.jwks_max_age)
                );
            }
            for kid in rotated.pruned {
                println!("deleted signing key {kid}: every token it signed has expired");
            }
        }
        KeysCommand::Reencrypt => {
            let changed = store.reencrypt_signing_keys().await?;
            let kek = settings
                .key_encryption
                .as_ref()
                .map_or("", |kek| kek.current_id());
            println!(
                "re-encrypted {changed} signing keys under key-encryption key {kek}; every key now opens with the first secret alone"
            );
        }
        KeysCommand::Delete { kid } => {
            let at = now();
            let keys = KeySet::from_stored(&store.signing_keys().await?)?;
            let signs = crate::jwt::Alg::ALL
                .into_iter()
                .any(|alg| keys.signer(alg, at).is_some_and(|k| k.kid == kid));
            if signs {
                bail!(
                    "{kid} signs new tokens: run `keys rotate` first (--delay 0 for a compromised key)"
                );
            }
            if !store.delete_signing_key(&kid).await? {
                bail!("no signing key {kid}");
            }
            println!(
                "deleted signing key {kid}: replicas stop publishing it and accepting its tokens within {} s, validators once they refetch the JWKS (max-age {} s)",
                crate::jwt::KEY_CACHE_TTL.as_secs(),
                settings.jwks_max_age
            );
        }
    }
    Ok(())
}

/// A state's name and when it ends (Unix seconds), if it does.
fn describe(state: KeyState) -> (&'static str, Option<i64>) {
    match state {
        KeyState::Pending { signs_from } => ("pending", Some(signs_from)),
        KeyState::Signing => ("signing", None),
        KeyState::Retired { published_until } => ("retired", Some(published_until)),
        KeyState::Expired => ("expired", None),
    }
}

/// "now", "in 610 s" or "610 s ago".
fn relative(seconds: i64) -> String {
    match seconds {
        0 => "now".to_owned(),
        s if s > 0 => format!("in {s} s"),
        s => format!("{} s ago", -s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Cli {
        Cli::try_parse_args(std::iter::once("authserver").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn a_subcommand_after_check_config_is_not_its_file() {
        let cli = parsed(&["--check-config", "serve"]);
        assert!(matches!(cli.check_config, Some(None)), "{cli:?}");
        assert!(matches!(cli.command, Some(Command::Serve)), "{cli:?}");
        let cli = parsed(&["--check-config", "cleartokens", "--json"]);
        assert!(matches!(cli.check_config, Some(None)), "{cli:?}");
        assert!(matches!(
            cli.command,
            Some(Command::Cleartokens { json: true })
        ));
        let cli = parsed(&["--check-config", "user", "list"]);
        assert!(matches!(cli.check_config, Some(None)), "{cli:?}");
        assert!(matches!(
            cli.command,
            Some(Command::User(UserCommand::List { .. }))
        ));
    }

    #[test]
    fn check_config_still_takes_a_file() {
        let cli = parsed(&["--check-config", "config/x.yaml"]);
        assert_eq!(
            cli.config_file(),
            Some(std::path::Path::new("config/x.yaml"))
        );
        assert!(cli.command.is_none());
        // Written with `=`, or as another option's value, `serve` is a file.
        let cli = parsed(&["--check-config=serve"]);
        assert_eq!(cli.config_file(), Some(std::path::Path::new("serve")));
        let cli = parsed(&["--config", "serve", "--check-config"]);
        assert!(matches!(cli.check_config, Some(None)));
        assert_eq!(cli.config_file(), Some(std::path::Path::new("serve")));
        assert!(cli.command.is_none());
        let cli = parsed(&["--database-url", "sqlite://a.db", "--check-config", "serve"]);
        assert!(matches!(cli.check_config, Some(None)));
        assert!(matches!(cli.command, Some(Command::Serve)));
        assert_eq!(cli.common.database_url.as_deref(), Some("sqlite://a.db"));
    }
}
