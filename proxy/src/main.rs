//! `proxy`: the tokengate sidecar. `proxy [--config FILE]` runs it; `proxy --check-config FILE`
//! validates a configuration and exits; `proxy inject` adds the sidecar to Kubernetes workloads.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc: fewer cycles per request in malloc/free, which a
/// profile of the proxy under load puts at ~12 % with glibc (issue 14, bench/proxy.sh).
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
    init_logging();
    if let Some(path) = args.check_config {
        return match proxy::load_config(&path) {
            Ok(config) => {
                let routes = config.routing.rules.routes().len();
                let upstreams = config.routing.upstreams.len();
                println!(
                    "{}: OK ({routes} routes, {upstreams} upstreams)",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let config =
        match proxy::config::load_named_or_default(args.config.as_deref(), "--config/PROXY_CONFIG")
        {
            Ok(c) => c,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
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

/// `RUST_LOG`-filtered `tracing` output; Pingora's `log` records are bridged into it. Pingora is
/// capped at `info`: its debug lines print whole request headers, `Authorization` included.
fn init_logging() {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for cap in ["pingora_core=info", "pingora_proxy=info"] {
        if let Ok(d) = cap.parse() {
            filter = filter.add_directive(d);
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
