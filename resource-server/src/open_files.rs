//! The open-file soft limit raised to the hard limit by every binary once it is about to serve
//! (after its configuration is read: a command that only reports an error writes nothing more).

/// Raises the soft limit on open files to the hard limit, and says so in one line: each client
/// connection is a descriptor, and systemd's and many containers' soft default (1,024) is below
/// what a server is meant to hold (the proxy's `connections.max` + `admin_max` + upstream
/// connections; an authorization server's waiting revocation-stream polls, one per sidecar).
pub fn raise_to_hard_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= hard {
        tracing::debug!(limit = soft, "open-file limit already at its hard limit");
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => tracing::info!(
            from = soft,
            to = hard,
            "raised the open-file soft limit to the hard limit"
        ),
        Err(error) => tracing::warn!(soft, hard, %error, "cannot raise the open-file soft limit"),
    }
}
