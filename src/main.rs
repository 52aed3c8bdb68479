//! `tokengate`: `cargo run --release` starts the whole stack on SQLite behind one front door.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
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
