//! The whole tokengate stack in one process: the authorization server, the example API behind
//! the proxy, and the Pingora proxy as the single front door (SPEC §5).

pub mod bootstrap;

use anyhow::{Context, bail};
use authserver::config::Settings;
use authserver::store::Store;
use proxy::{ProxyConfig, ProxyHandle};
use resource_server::layers::Overrides;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use bootstrap::FirstRun;

/// The three configurations, each read as its own binary reads it, and where the stack keeps
/// what it must remember between starts.
pub struct StackConfig {
    pub authserver: Settings,
    pub api: example_api::config::Config,
    pub proxy: ProxyConfig,
    /// `TOKENGATE_DATA_DIR`, else [`default_data_dir`].
    pub data_dir: PathBuf,
}

/// Where the stack keeps its files: the SQLite database's directory, or `data` for PostgreSQL.
pub fn default_data_dir(database_url: &str) -> PathBuf {
    database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))
        .map(|path| path.split('?').next().unwrap_or_default())
        .and_then(|path| Path::new(path).parent().map(Path::to_path_buf))
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("data"))
}

impl StackConfig {
    /// `config/authserver.yaml`, `config/example-api.yaml`, `config/proxy.yaml` (or the paths in
    /// `AUTHSERVER_CONFIG`, `EXAMPLE_API_CONFIG`, `PROXY_CONFIG`), with their environment overrides.
    pub fn load() -> anyhow::Result<StackConfig> {
        let authserver = Settings::load(None)?;
        let api = example_api::config::Config::load(None)?;
        let named = std::env::var_os("PROXY_CONFIG").filter(|p| !p.is_empty());
        let proxy =
            proxy::config::load_named_or_default(named.as_deref().map(Path::new), "PROXY_CONFIG")?;
        // The first file that names a log format picks it (`LOG_FORMAT` wins over both).
        if let Some(format) = authserver
            .log_format
            .or(proxy.log_format)
            .or(api.log_format)
        {
            resource_server::logging::set_format(format);
        }
        let data_dir = std::env::var_os("TOKENGATE_DATA_DIR")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| default_data_dir(&authserver.database_url));
        Ok(StackConfig {
            authserver,
            api,
            proxy,
            data_dir,
        })
    }
}

/// The running stack.
pub struct Stack {
    /// The proxy: the one address users talk to.
    pub front_door: SocketAddr,
    pub proxy_admin: SocketAddr,
    pub authserver: SocketAddr,
    pub api: SocketAddr,
    pub store: Store,
    /// Set on the first start with an empty database: the credentials created then.
    pub first_run: Option<FirstRun>,
    proxy: ProxyHandle,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

/// The application the proxy introspects with: `tokengate-proxy-<random>`, one per data
/// directory, its id kept in [`PROXY_CLIENT_ID_FILE`] and its secret in [`PROXY_SECRET_FILE`]
/// there (a data directory from before keeps plain `tokengate-proxy`).
pub const PROXY_CLIENT_ID: &str = "tokengate-proxy";
/// The file in the data directory holding the proxy's introspection client id (mode 0600).
pub const PROXY_CLIENT_ID_FILE: &str = "proxy-client.id";
/// The file in the data directory holding the proxy's introspection secret (mode 0600).
pub const PROXY_SECRET_FILE: &str = "proxy-client.secret";
/// The file in the data directory holding the secret the signing keys are encrypted with when
/// neither `AUTHSERVER_SECRETS_SYSTEM` nor `AUTHSERVER_SECRETS_SYSTEM_FILE` is set (mode 0600):
/// the one a standalone authorization server keeps beside its SQLite database.
pub const SECRETS_SYSTEM_FILE: &str = authserver::key_encryption::KEPT_FILE_NAME;

/// Starts the authorization server and the example API on their listen addresses (port 0 = any
/// free port), then the proxy in front of both.
///
/// What the stack decides for its parts (the per-start proxy secret, the front door's port and
/// the issuer that follows it, where the two servers really listen, the proxy's introspection
/// client) is handed to each part as the override layer of
/// its settings, and each validates again: nothing validated is edited afterwards, and an error
/// names the key "set by the stack".
pub async fn start(config: StackConfig) -> anyhow::Result<Stack> {
    if config.api.gate.token_source != resource_server::TokenSource::BehindProxy {
        bail!(
            "{}: the stack runs the example API behind the proxy: set token_source: behind_proxy",
            config.api.file
        );
    }
    // The example API believes the proxy's identity headers, and the authorization server its
    // X-Forwarded-For, only with this per-start secret, which the proxy adds and strips from
    // clients: not from any other process that reaches their loopback ports. One the operator
    // gave the example API (EXAMPLE_API_PROXY_SECRET) is kept.
    let proxy_proof = match &config.api.gate.proxy_secret {
        Some(given) => given.expose().to_owned(),
        None => authserver::secrets::random_token(),
    };
    let api = config
        .api
        .with_overrides(&Overrides::from([("proxy_secret", proxy_proof.as_str())]))?;
    // The front door's port is chosen now (port 0: a free one), so that the issuer can name it.
    let front_door = proxy::server::claim_port(config.proxy.listen)?;
    let mut decided = Overrides::from([("proxy_secret", proxy_proof.as_str())]);
    if let Some(issuer) = front_door_issuer(
        &config.authserver.issuer,
        config.authserver.issuer_is_listen,
        front_door,
    ) {
        tracing::info!(%issuer, "the issuer (and a defaulted JWT audience) follows the front door's address");
        decided.set("issuer", issuer);
    }
    let mut settings = config.authserver.with_overrides(&decided)?;
    // Given no key-encryption secret, the one the data directory keeps, by the standalone
    // server's rule (`authserver::server::kept_secret`).
    let store = authserver::server::open_store(&mut settings, Some(&config.data_dir)).await?;
    let first_run = bootstrap::first_run(&store, &settings).await?;
    let secret_file = config.data_dir.join(PROXY_SECRET_FILE);
    let proxy_client_id = bootstrap::proxy_client_id(
        &store,
        &config.data_dir.join(PROXY_CLIENT_ID_FILE),
        &secret_file,
        PROXY_CLIENT_ID,
    )
    .await?;
    let proxy_secret =
        bootstrap::proxy_secret(&store, &settings, &proxy_client_id, &secret_file).await?;

    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    let auth_listener = bind(settings.listen, "authserver").await?;
    let authserver_addr = auth_listener.local_addr()?;
    let api_listener = bind(api.listen, "example API").await?;
    let api_addr = api_listener.local_addr()?;

    let proxy_config = config.proxy.with_overrides(&proxy_decisions(
        &config.proxy,
        &settings,
        ProxyParts {
            front_door,
            authserver: authserver_addr,
            api: api_addr,
            proof: &proxy_proof,
            client: (&proxy_client_id, &proxy_secret),
        },
    )?)?;
    let state =
        authserver::server::ready(authserver::AppState::new(settings, store.clone())).await?;
    let (stop, stopped) = oneshot::channel();
    stops.push(stop);
    tasks.push(tokio::spawn(authserver::serve(
        auth_listener,
        state,
        async { drop(stopped.await) },
    )));

    let api_state =
        example_api::AppState::new(store.clone(), example_api::guard::Guard::from_config(&api)?);
    let (stop, stopped) = oneshot::channel();
    stops.push(stop);
    tasks.push(tokio::spawn(example_api::serve(
        api_listener,
        api_state,
        async { drop(stopped.await) },
    )));

    let proxy = tokio::task::spawn_blocking(move || proxy::spawn(proxy_config)).await??;
    Ok(Stack {
        front_door: proxy.listen_addr(),
        proxy_admin: proxy.admin_addr(),
        authserver: authserver_addr,
        api: api_addr,
        store,
        first_run,
        proxy,
        stops,
        tasks,
    })
}

impl Stack {
    /// Drains the proxy, then stops the two servers behind it.
    pub async fn shutdown(self) {
        let proxy = self.proxy;
        let _ = tokio::task::spawn_blocking(move || proxy.shutdown()).await;
        for stop in self.stops {
            let _ = stop.send(());
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("{what}: cannot listen on {addr}"))
}

/// What the stack has settled when it starts the proxy.
struct ProxyParts<'a> {
    /// The front door's address (its port claimed).
    front_door: SocketAddr,
    /// Where the two servers behind it listen.
    authserver: SocketAddr,
    api: SocketAddr,
    /// The per-start secret the proxy proves itself to both with.
    proof: &'a str,
    /// The proxy's introspection client: id and secret.
    client: (&'a str, &'a str),
}

/// The proxy's settings the stack decides, as overrides of its file's keys (kept on every rule
/// reload): the front door's port; the `authserver` and `api` upstreams where those servers
/// listen, proven to with the per-start secret; introspection and the revocation stream at the
/// authorization server, with the stack's own client (the stream's `token_url` and `jwks_uri`
/// there too when the file names none: a URL the file names is the operator's and stays); and, when the proxy's file names no
/// `resource`, the front door as a protected resource (RFC 9728) whose `resource` is the audience
/// the authorization server gives tokens requested without `resource` (its
/// `access_token_audience`: by default its issuer, the front door's URL), so that such tokens
/// (the seed's password flow) still pass, and whose `authorization_servers` is that issuer. An
/// audience that is not a URL stays the proxy's audience, without metadata.
fn proxy_decisions(
    proxy: &ProxyConfig,
    authserver: &Settings,
    parts: ProxyParts<'_>,
) -> anyhow::Result<Overrides> {
    for name in ["authserver", "api"] {
        if !proxy.upstreams.contains_key(name) {
            bail!("proxy configuration: the stack needs an upstream named \"{name}\"");
        }
    }
    if proxy.gate.introspection.is_none() {
        bail!("proxy configuration: the stack's proxy introspects at the authserver");
    }
    let at_authserver = |path: &str| format!("http://{}{path}", parts.authserver);
    let (client_id, client_secret) = parts.client;
    let mut decided = Overrides::from([
        ("listen", parts.front_door.to_string()),
        ("upstreams.authserver.address", parts.authserver.to_string()),
        ("upstreams.api.address", parts.api.to_string()),
        ("upstreams.authserver.proxy_secret", parts.proof.to_owned()),
        ("upstreams.api.proxy_secret", parts.proof.to_owned()),
        (
            "introspection.url",
            at_authserver(authserver::oauth::INTROSPECTION_PATH),
        ),
        ("introspection.client_id", client_id.to_owned()),
        ("introspection.client_secret", client_secret.to_owned()),
    ]);
    // The revocation stream comes from the same authserver, with the same client; its token
    // endpoint and JWKS too, unless the proxy's file names them (then the file's stay).
    if let Some(revocation) = &proxy.gate.revocation {
        decided
            .set(
                "revocation.configuration_url",
                at_authserver(authserver::oauth::ssf::CONFIGURATION_PATH),
            )
            .set("revocation.client_id", client_id)
            .set("revocation.client_secret", client_secret);
        if revocation.token_url.is_none() {
            decided.set(
                "revocation.token_url",
                at_authserver(authserver::oauth::TOKEN_PATH),
            );
        }
        if revocation.jwks_uri.is_none() {
            decided.set(
                "revocation.jwks_uri",
                at_authserver(authserver::oauth::JWKS_PATH),
            );
        }
    }
    let gate = &proxy.gate;
    let audience = &authserver.access_token_audience;
    if gate.resource.is_none() {
        if resource_server::protected_resource::check_resource(audience).is_ok() {
            decided
                .set("resource", audience.as_str())
                .set("authorization_servers", authserver.issuer.as_str());
        } else if gate.audience.is_none() {
            decided.set("audience", audience.as_str());
        }
    }
    Ok(decided)
}

/// The issuer the stack advertises: one left to default (the authserver's listen address) or a
/// loopback `http://` one follows the front door's address when that is known; any other issuer
/// is the operator's and stays.
fn front_door_issuer(issuer: &str, defaulted: bool, front_door: SocketAddr) -> Option<String> {
    let authority = issuer.strip_prefix("http://")?.trim_end_matches('/');
    let loopback = authority.starts_with("127.0.0.1:")
        || authority.starts_with("localhost:")
        || authority.starts_with("[::1]:");
    ((defaulted || loopback) && front_door.port() != 0 && authority != front_door.to_string())
        .then(|| format!("http://{front_door}"))
}
#[cfg(test)]
mod tests {
    use super::{ProxyParts, default_data_dir, front_door_issuer, proxy_decisions};
    use std::path::PathBuf;

    /// The revocation stream's token endpoint and JWKS follow the stack's authorization server
    /// when the proxy's file names neither (they were left to discovery through the issuer's
    /// URL), and a URL the file names stays as written.
    #[test]
    fn the_streams_urls_follow_the_stacks_authserver_unless_the_file_names_them() {
        let shipped = include_str!("../config/proxy.yaml");
        let decide = |extra: &str| {
            let text = shipped.replace("revocation:\n", &format!("revocation:\n{extra}"));
            let proxy = proxy::config::parse_config(&text, "p.yaml", |_| None).unwrap();
            let authserver = authserver::config::Settings::from_yaml("", "a.yaml").unwrap();
            let parts = ProxyParts {
                front_door: "127.0.0.1:9000".parse().unwrap(),
                authserver: "127.0.0.1:9001".parse().unwrap(),
                api: "127.0.0.1:9002".parse().unwrap(),
                proof: "a-per-start-proof-secret",
                client: ("id", "secret"),
            };
            let decided = proxy_decisions(&proxy, &authserver, parts).unwrap();
            let get = |key: &str| decided.get(key).map(str::to_owned);
            let proxy = proxy.with_overrides(&decided).unwrap();
            let r = proxy.gate.revocation.unwrap();
            (get("revocation.token_url"), r.token_url, r.jwks_uri)
        };
        let (_, token_url, jwks_uri) = decide("");
        assert_eq!(
            (token_url.as_deref(), jwks_uri.as_deref()),
            (
                Some("http://127.0.0.1:9001/o/token/"),
                Some("http://127.0.0.1:9001/.well-known/jwks.json")
            )
        );
        let named =
            "  token_url: https://idp.example/token\n  jwks_uri: https://idp.example/jwks\n";
        let (decided, token_url, jwks_uri) = decide(named);
        assert_eq!(decided, None);
        assert_eq!(
            (token_url.as_deref(), jwks_uri.as_deref()),
            (
                Some("https://idp.example/token"),
                Some("https://idp.example/jwks")
            )
        );
    }

    #[test]
    fn a_loopback_issuer_follows_the_front_door() {
        let door = "127.0.0.1:9000".parse().unwrap();
        assert_eq!(
            front_door_issuer("http://127.0.0.1:8000", false, door).as_deref(),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(
            front_door_issuer("http://127.0.0.1:9000", false, door),
            None
        );
        assert_eq!(
            front_door_issuer("https://auth.example.com", false, door),
            None
        );
        assert_eq!(
            front_door_issuer(
                "http://127.0.0.1:8000",
                false,
                "127.0.0.1:0".parse().unwrap()
            ),
            None
        );
        // Left to default, the authserver's own listen address: the front door's, whatever it is.
        assert_eq!(
            front_door_issuer("http://0.0.0.0:8001", true, door).as_deref(),
            Some("http://127.0.0.1:9000")
        );
    }

    #[test]
    fn the_data_directory_is_the_sqlite_files_or_data() {
        assert_eq!(
            default_data_dir("sqlite://data/authserver.db"),
            PathBuf::from("data")
        );
        assert_eq!(
            default_data_dir("sqlite:///var/lib/tg/a.db?mode=rwc"),
            PathBuf::from("/var/lib/tg")
        );
        assert_eq!(default_data_dir("sqlite://a.db"), PathBuf::from("data"));
        assert_eq!(
            default_data_dir("postgres://u@db/tokengate"),
            PathBuf::from("data")
        );
    }
}
