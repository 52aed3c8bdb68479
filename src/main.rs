//! `tokengate`: `cargo run --release` starts the whole stack on SQLite behind one front door.

use std::process::ExitCode;

/// Starts the authorization server, the example API and the proxy in front of both, from
/// `config/authserver.yaml`, `config/example-api.yaml` and `config/proxy.yaml` (or the paths in
/// AUTHSERVER_CONFIG, EXAMPLE_API_CONFIG, PROXY_CONFIG) and their environment overrides. The
/// proxy's introspection secret is kept in TOKENGATE_DATA_DIR (default: the SQLite file's
/// directory, or ./data).
#[derive(clap::Parser)]
#[command(version, about)]
struct Args {}

#[tokio::main]
async fn main() -> ExitCode {
    // Arguments first: `--help`, `--version` or a typo never start anything.
    let Args {} = clap::Parser::parse();
    resource_server::logging::init();
    let stack = match tokengate::StackConfig::load() {
        Ok(config) => tokengate::start(config).await,
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
    authserver::shutdown_signal().await;
    tracing::info!("shutting down: draining the proxy, then the servers behind it");
    stack.shutdown().await;
    ExitCode::SUCCESS
}
