//! `tokengate`: `cargo run --release` starts the whole stack on SQLite behind one front door.

use std::process::ExitCode;

/// Starts the authorization server, the example API and the proxy in front of both, from
/// `config/authserver.yaml`, `config/example-api.yaml` and `config/proxy.yaml` (or the paths in
/// AUTHSERVER_CONFIG, EXAMPLE_API_CONFIG, PROXY_CONFIG) and their environment overrides. The
/// proxy's introspection secret is kept in TOKENGATE_DATA_DIR (default: the SQLite file's
/// directory, or ./data).
#[derive(clap::Parser)]
#[command(version, about, after_help = FILES_AND_ENVIRONMENT)]
struct Args {}

/// What `tokengate --help` says it reads, besides the arguments.
const FILES_AND_ENVIRONMENT: &str = "\
Files (relative to the working directory; each missing one is replaced by the shipped
configuration compiled into the binary, so tokengate runs from any directory):
  config/authserver.yaml   the authorization server (AUTHSERVER_CONFIG names another file)
  config/example-api.yaml  the example API (EXAMPLE_API_CONFIG names another file)
  config/proxy.yaml        the proxy, the front door (PROXY_CONFIG names another file)
  A file named by one of those variables must exist: tokengate exits 1 naming the variable.

Environment:
  AUTHSERVER_<KEY>         overrides a key of the authserver's file (AUTHSERVER_LISTEN,
                           AUTHSERVER_ISSUER, AUTHSERVER_DATABASE_URL, ...; docs/authorization-server.md)
  EXAMPLE_API_<KEY>        overrides a key of the example API's file (EXAMPLE_API_LISTEN, ...)
  PROXY_LISTEN, PROXY_ADMIN_LISTEN, PROXY_INTROSPECTION_URL, PROXY_AUTH_TOKEN,
  PROXY_CLIENT_ID, PROXY_CLIENT_SECRET, PROXY_UPSTREAM_<NAME>_ADDRESS
                           override the proxy's file
  TOKENGATE_DATA_DIR       where the proxy's introspection secret is kept (default: the SQLite
                           database's directory, or ./data)
  RUST_LOG                 log filter (default: info; Pingora, hyper and reqwest stay at info)
  TOKENGATE_UNSAFE_LOG_SECRETS=1
                           lets those log at debug and trace too, secrets included";

#[tokio::main]
async fn main() -> ExitCode {
    // Arguments first: `--help`, `--version` or a typo never start anything.
    let Args {} = clap::Parser::parse();
    resource_server::logging::init();
    let stack = match tokengate::StackConfig::load() {
        Ok(config) => {
            resource_server::open_files::raise_to_hard_limit();
            tokengate::start(config).await
        }
        Err(error) => Err(error),
    };
    let stack = match stack {
        Ok(stack) => stack,
        Err(error) => {
            eprintln!("tokengate: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let banner = tokengate::bootstrap::banner(
        stack.front_door,
        stack.authserver,
        stack.api,
        stack.proxy_admin,
        stack.first_run.as_ref(),
    );
    println!("{banner}");
    http_serving::shutdown_signal().await;
    tracing::info!("shutting down: draining the proxy, then the servers behind it");
    stack.shutdown().await;
    ExitCode::SUCCESS
}
