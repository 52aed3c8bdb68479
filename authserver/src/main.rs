//! `authserver`: parses the command line and hands over to the library.

/// mimalloc instead of glibc's malloc (bench/authserver.sh, issue 12).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    resource_server::logging::init();
    match authserver::cli::run(authserver::cli::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("authserver: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
