//! `proxy`: the tokengate sidecar. `proxy [--config FILE]` runs it; `proxy --check-config FILE`
//! validates a configuration and exits; `proxy inject` adds the sidecar to Kubernetes workloads.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: fewer cycles per request in malloc/free, which a
/// profile of the proxy under load puts at ~12 % with glibc (issue 14, bench/proxy.sh).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc 3 gives freed memory back to the system 1 s after it is freed, and only when its
/// arena is used again: the memory of 2,000 slow connections stayed after they closed (issue 21,
/// proxy/tests/slow_clients.rs). 10 ms (mimalloc 2's default) gives it back within a moment.
/// mimalloc reads its options from the environment before `main` runs, so [`main`] re-executes
/// the binary with this set when the operator has not set it.
const PURGE_DELAY: (&str, &str) = ("MIMALLOC_PURGE_DELAY", "10");

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
    purge_freed_memory_promptly();
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

/// Re-executes this binary with [`PURGE_DELAY`] set, unless it is set already (by the operator,
/// or by this re-execution). Returns only if that is so or the re-execution failed.
fn purge_freed_memory_promptly() {
    use std::os::unix::process::CommandExt;
    let (var, value) = PURGE_DELAY;
    if std::env::var_os(var).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut argv = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = argv.next() {
        command.arg0(arg0);
    }
    let error = command.args(argv).env(var, value).exec();
    tracing::warn!(%error, "cannot re-execute with {var}={value}: memory freed after a burst of connections may not be given back");
}
