//! mimalloc's settings for every binary that serves (the `proxy`, the `authserver`): memory freed
//! is given back to the system promptly, and never held in transparent huge pages.
//!
//! mimalloc gives memory back once it has been free for its `purge_delay`, and only when a page
//! is freed after that. Three settings keep a sidecar in its memory budget; mimalloc reads the
//! first two from the environment before `main` runs, so [`apply`] re-executes the binary with
//! those the operator has not set ([`SETTINGS`]; an operator's value wins):
//! - `MIMALLOC_PURGE_DELAY=250` instead of mimalloc 3's 1 s. Under the stall attack of
//!   `proxy/tests/h2_stalls.rs` 1 s held about 20 MiB more at the peak (171–179 MiB against
//!   151–153, release, with huge pages); 10 ms (mimalloc 2's default, used before) gave pages
//!   back so eagerly that every proxied request faulted about 3 of them in again (2,900 minor
//!   faults per 1000 requests, 20 % of the proxy's CPU; 250 ms: about 350-440, 1 s: about 80).
//! - `MIMALLOC_ALLOW_THP=0`: no transparent huge pages. mimalloc asks for them (`madvise`) on its
//!   2 MiB-aligned arenas, and a kernel that grants them on request (THP `madvise`, Debian's
//!   default) then holds whole 2 MiB pages for a few KiB in use: an idle proxy took 26 MiB
//!   instead of 13.4 and an idle authorization server 30 MiB instead of 19; the peak of the
//!   stall attack was 140–142 MiB instead of 101–114 (dist build, `h2_stalls.rs`'s attack by
//!   hand, 2026-11-28). Without huge pages a 1 s purge delay held 2–15 MiB more at that peak than
//!   250 ms (103–129 MiB), so 250 ms stays. CPU per request was the same either way, within
//!   the bench's noise (`bench/proxy.sh`, `MIMALLOC_ALLOW_THP=0` and `=1`).
//! - [`GIVE_BACK_EVERY`]: an idle server frees no page, so the memory of a burst of 2,000 slow
//!   connections stayed (issue 21, `proxy/tests/slow_clients.rs`). A thread frees one that
//!   often: a block over mimalloc's 512 KiB limit for shared pages gets a page of its own, and
//!   freeing a page purges what has expired.

use std::time::Duration;

/// The environment mimalloc is run with, where the operator has not set it.
pub const SETTINGS: [(&str, &str); 2] =
    [("MIMALLOC_PURGE_DELAY", "250"), ("MIMALLOC_ALLOW_THP", "0")];
/// How often the `give-back-mem` thread frees a page.
const GIVE_BACK_EVERY: Duration = Duration::from_millis(500);

/// Re-executes this binary with each of [`SETTINGS`] that is not set already (by the operator,
/// or by this re-execution), then starts the `give-back-mem` thread. Call it first in `main`,
/// once logging is set up and before any thread or file is opened.
pub fn apply() {
    reexecute_with_settings();
    give_back_freed_memory();
}

/// Returns only if every setting is set or the re-execution failed (logged).
fn reexecute_with_settings() {
    use std::os::unix::process::CommandExt;
    let unset: Vec<_> = SETTINGS
        .iter()
        .filter(|(var, _)| std::env::var_os(var).is_none())
        .collect();
    if unset.is_empty() {
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
    let error = command
        .args(argv)
        .envs(unset.iter().copied().copied())
        .exec();
    tracing::warn!(%error, ?unset, "cannot re-execute with the allocator's settings: the process holds more memory than it needs");
}

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
