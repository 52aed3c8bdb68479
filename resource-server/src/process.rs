//! Process metrics with the names every Prometheus client library uses
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), read from Linux's
//! `/proc/self` at each scrape by [`register`]'s collector. Elsewhere (or when `/proc` cannot be
//! read) nothing is written.

use crate::metrics::{Collect, Registry, Scrape};

/// Clock ticks per second in `/proc/*/stat` (USER_HZ, 100 on every Linux architecture).
const TICKS_PER_SECOND: f64 = 100.0;

/// What one scrape read.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
    pub threads: u64,
}

impl ProcessStats {
    /// This process, now; `None` without a readable `/proc/self/stat`.
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        let mut stats = parse_stat(&stat, boot)?;
        stats.resident_bytes = status_kib(&status, "VmRSS:").map_or(0, |k| k * 1024);
        stats.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        stats.max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| max_open_files(&l));
        Some(stats)
    }

    /// Writes these figures.
    pub fn collect(&self, s: &mut Scrape) -> std::fmt::Result {
        s.counter(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            self.cpu_seconds,
        )?;
        s.gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            self.resident_bytes,
        )?;
        s.gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            self.virtual_bytes,
        )?;
        s.gauge(
            "process_open_fds",
            "Number of open file descriptors",
            self.open_fds,
        )?;
        if let Some(max) = self.max_fds {
            s.gauge(
                "process_max_fds",
                "Maximum number of open file descriptors",
                max,
            )?;
        }
        if let Some(start) = self.start_time_seconds {
            s.gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                start,
            )?;
        }
        s.gauge(
            "process_threads",
            "Number of OS threads in the process",
            self.threads,
        )
    }
}

/// Registers the collector of this process's metrics (on a registry without prefix: the names
/// are the same in every program).
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(Collect(|s: &mut Scrape| {
        ProcessStats::read().map_or(Ok(()), |stats| stats.collect(s))
    })));
}

/// `/proc/self/stat`: after the command name in parentheses (which may hold spaces), field 14
/// utime, 15 stime, 20 num_threads, 22 starttime (ticks after boot), 23 vsize (bytes).
fn parse_stat(stat: &str, boot_time: Option<f64>) -> Option<ProcessStats> {
    let after = &stat[stat.rfind(')')? + 1..];
    // `after` starts at field 3 (state).
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = field(14)? + field(15)?;
    Some(ProcessStats {
        cpu_seconds: ticks as f64 / TICKS_PER_SECOND,
        virtual_bytes: field(23).unwrap_or(0),
        threads: field(20).unwrap_or(0),
        start_time_seconds: boot_time
            .zip(field(22))
            .map(|(boot, start)| boot + start as f64 / TICKS_PER_SECOND),
        ..ProcessStats::default()
    })
}

/// A `Name:   1234 kB` line of `/proc/self/status`, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_a_command_name_with_spaces() {
        let stat = "4242 (my (odd) proxy) S 1 4242 4242 0 -1 4194560 2016 0 0 0 250 75 0 0 20 0 7 0 12345 1048576000 9000 18446744073709551615";
        let s = parse_stat(stat, Some(1_700_000_000.0)).unwrap();
        assert_eq!(s.cpu_seconds, 3.25);
        assert_eq!(s.threads, 7);
        assert_eq!(s.virtual_bytes, 1_048_576_000);
        assert_eq!(s.start_time_seconds, Some(1_700_000_123.45));
        assert_eq!(parse_stat("garbage", None), None);
        assert_eq!(
            status_kib("Name:\tx\nVmRSS:\t  5120 kB\n", "VmRSS:"),
            Some(5120)
        );
        assert_eq!(
            max_open_files(
                "Limit  Soft Limit  Hard Limit  Units\nMax open files            1024                 524288               files\n"
            ),
            Some(1024)
        );
    }

    #[test]
    fn this_process_reads_and_renders() {
        let Some(stats) = ProcessStats::read() else {
            return; // not Linux
        };
        assert!(stats.resident_bytes > 0 && stats.open_fds > 0 && stats.threads > 0);
        let out = crate::metrics::text("", move |s| stats.collect(s));
        assert!(
            out.contains("# TYPE process_cpu_seconds counter\n"),
            "{out}"
        );
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(out.contains(&format!("\n{name} ")), "{name} in {out}");
        }
    }
}
