//! `proxy`: the tokengate sidecar. `proxy [--config FILE]` runs it; `proxy --check-config FILE`
//! validates a configuration and exits; `proxy inject` adds the sidecar to Kubernetes workloads.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: fewer cycles per request in malloc/free, which a
/// profile of the proxy under load puts at ~12 % with glibc (issue 14, bench/proxy.sh); run with
/// the settings of [`resource_server::allocator`].
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "proxy",
    version,
    about = "Bearer-token checking reverse proxy (Pingora)"
)]
struct Args {
    /// Configuration file (default: config/proxy.yaml when the working directory has one, else
    /// the shipped configuration compiled in).
    #[arg(short, long, env = "PROXY_CONFIG")]
    config: Option<PathBuf>,
    /// Validate this configuration file and exit (0 = valid).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Add the tokengate sidecar to Kubernetes workloads (like `linkerd inject`): reads YAML
    /// from FILE or stdin, writes it to stdout.
    Inject(proxy::inject::InjectArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Command::Inject(inject)) = args.command {
        return proxy::inject::run(inject);
    }
    resource_server::logging::init();
    if let Some(path) = args.check_config {
        return match proxy::load_config(&path) {
            Ok(config) => {
                println!(
                    "{}: OK ({})",
                    path.display(),
                    proxy::config::summary(&config)
                );
                warn_about_scopes(&config.gate);
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        };
    }
    resource_server::allocator::apply();
    let config =
        match proxy::config::load_named_or_default(args.config.as_deref(), "--config/PROXY_CONFIG")
        {
            Ok(c) => c,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
    if let Some(format) = config.log_format {
        resource_server::logging::set_format(format);
    }
    resource_server::open_files::raise_to_hard_limit();
    match proxy::spawn_with(config, proxy::Signals::Handle) {
        Ok(handle) => {
            handle.wait();
            tracing::info!("proxy stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-config`: a warning on stderr for each rule's scope the authorization server does not
/// list (a note when its metadata cannot be read); never a failure.
fn warn_about_scopes(gate: &resource_server::GateSettings) {
    use proxy::scope_check::{Checked, check, metadata_url};
    let Some(url) = metadata_url(gate) else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    match runtime.block_on(check(&gate.rules, &url)) {
        Checked::Warnings(warnings) => {
            for warning in warnings {
                eprintln!("warning: {warning}");
            }
        }
        Checked::NotChecked(note) => eprintln!("note: {note}"),
    }
}
