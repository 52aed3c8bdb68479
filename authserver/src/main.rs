//! `authserver`: parses the command line and hands over to the library.

/// mimalloc instead of glibc's malloc (bench/authserver.sh, issue 12), run with the settings of
/// [`resource_server::allocator`].
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    resource_server::logging::init();
    resource_server::allocator::apply();
    run()
}

#[tokio::main]
async fn run() -> std::process::ExitCode {
    match authserver::cli::run(authserver::cli::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("authserver: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
