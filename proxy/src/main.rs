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

/// mimalloc gives memory back to the system once it has been free for its `purge_delay`, and
/// only when a page is freed after that. Two settings of the `proxy` binary keep the sidecar in its
/// memory budget:
/// - [`PURGE_DELAY`]: 250 ms instead of mimalloc 3's 1 s. Under the stall attack of
///   `proxy/tests/h2_stalls.rs` 1 s held about 20 MiB more at the peak (171–179 MiB against
///   151–153, release); 10 ms (mimalloc 2's default, used before) gave pages back so eagerly that
///   every proxied request faulted about 3 of them in again (2,900 minor faults per 1000
///   requests, 20 % of the proxy's CPU; 250 ms: about 350, 1 s: about 80). mimalloc reads it
///   from the environment before `main` runs, so [`main`] re-executes the binary with it set
///   when the operator has not set it.
/// - [`GIVE_BACK_EVERY`]: an idle sidecar frees no page, so the memory of a burst of 2,000 slow
///   connections stayed (issue 21, `proxy/tests/slow_clients.rs`). A thread of ours frees one
///   that often: a block over mimalloc's 512 KiB limit for shared pages gets a page of its own,
///   and freeing a page purges what has expired.
const PURGE_DELAY: (&str, &str) = ("MIMALLOC_PURGE_DELAY", "250");
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
    purge_freed_memory_promptly();
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
    tracing::warn!(%error, "cannot re-execute with {var}={value}: memory freed during a burst of connections is given back later");
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
