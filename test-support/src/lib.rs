//! Fixtures shared by the tests of every crate of the workspace (a dev-dependency only): stand-in
//! servers, signed tokens, test certificates, and loopback ports. What needs the authorization
//! server's internals (fresh stores, a running server) is `authserver::testing` instead.

pub mod ed25519_jwt;
pub mod fake_server;
pub mod jwks;
pub mod log_buffer;
pub mod pki;
pub mod ssf_transmitter;

pub use log_buffer::LogBuffer;

/// A loopback port nothing listens on, for a server another process starts later (the binary,
/// node's pages, nginx, the proxy): below the kernel's ephemeral range (32768 and up), from
/// which `bind(0)` and every outgoing connection of the servers under test draw theirs; one of
/// those once took a port `bind(0)` had handed out before node could bind it. Each call in a
/// process hands out another port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 20_000 + (std::process::id().wrapping_mul(37) % 11_000) as u16;
    let _ = NEXT.compare_exchange(0, start, Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        assert!(port < 32_768, "no free port below the ephemeral range");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The environment process `pid` runs with (`/proc/<pid>/environ`), as `NAME=value` entries;
/// empty once it is gone.
pub fn environment_of(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| String::from_utf8_lossy(entry).into_owned())
        .collect()
}

/// The `Authorization` value of HTTP Basic client authentication.
pub fn basic_auth(client_id: &str, secret: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:{secret}"))
    )
}
