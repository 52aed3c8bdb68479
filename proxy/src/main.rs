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

/// mimalloc gives memory freed for its `purge_delay` (1 s) back to the system only when a thread
/// of the process frees a page after that: an idle sidecar kept the memory of a burst of 2,000
/// slow connections (issue 21, proxy/tests/slow_clients.rs). A thread of ours frees one every
/// [`GIVE_BACK_EVERY`]: a block over mimalloc's 512 KiB limit for shared pages gets a page of its
/// own, and freeing a page purges what has expired. (A purge delay of 10 ms did it without the
/// thread, but the pages the proxy frees and takes again under load were given back and faulted
/// in anew: about 3 page faults and 40 % more CPU per proxied request, bench/proxy.sh.)
const GIVE_BACK_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

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
    give_back_freed_memory();
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

/// Starts the thread of [`GIVE_BACK_EVERY`].
fn give_back_freed_memory() {
    const PAGE_OF_ITS_OWN: usize = 1 << 20;
    let spawned = std::thread::Builder::new()
        .name("give-back-mem".into())
        .spawn(|| {
            loop {
                std::thread::sleep(GIVE_BACK_EVERY);
                drop(std::hint::black_box(Vec::<u8>::with_capacity(
                    PAGE_OF_ITS_OWN,
                )));
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the thread that gives freed memory back to the system");
    }
}
