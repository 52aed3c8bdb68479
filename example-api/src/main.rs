//! `example-api`: reads the settings and hands over to the library (`--check-config` only validates).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use example_api::config::Config;
use example_api::guard::Guard;

/// Users-and-groups API over the authorization server's directory, protected by bearer tokens.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Settings file (default: $EXAMPLE_API_CONFIG, else config/example-api.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Validate the settings and exit (0 = valid): FILE if given, as `proxy --check-config FILE`
    /// does, else the file `--config` or the default names.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    check_config: Option<Option<PathBuf>>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let file = match &args.check_config {
        Some(Some(file)) => Some(file.as_path()),
        _ => args.config.as_deref(),
    };
    let config = match Config::load(file) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("example-api: {error}");
            return ExitCode::FAILURE;
        }
    };
    if args.check_config.is_some() {
        return match Guard::from_config(&config) {
            Ok(_) => {
                println!(
                    "{}: OK (token_source {}, listen {}, {} routes)",
                    config.file,
                    config.gate.token_source.as_str(),
                    config.listen,
                    config.gate.rules.routes().len()
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("example-api: {error}");
                ExitCode::FAILURE
            }
        };
    }
    resource_server::logging::init();
    resource_server::open_files::raise_to_hard_limit();
    if let Some(format) = config.log_format {
        resource_server::logging::set_format(format);
    }
    match example_api::run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("example-api: {error:#}");
            ExitCode::FAILURE
        }
    }
}
