//! The admin listener's `/metrics` carries the process metrics (issue 27): CPU, resident
//! memory, file descriptors, start time, under the names every Prometheus client uses.

mod common;

use common::Fixture;

#[tokio::test(flavor = "multi_thread")]
async fn metrics_carry_the_process_figures() {
    let f = Fixture::start().await;
    let text = f.metrics().await;
    f.stop().await;
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing"))
            .parse()
            .unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1_000_000.0);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    assert!(value("process_cpu_seconds_total") > 0.0);
    assert!(value("process_start_time_seconds") > 1_600_000_000.0);
    assert!(text.contains("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total "));
}
