//! How long the store's calls on the request paths take, by operation: a histogram kept here
//! (the store stands below `crate::metrics`, which registers [`call_durations`]).

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;
use resource_server::metrics::HistogramFamily;

/// The store calls timed by [`StoreTimer`]: those on the request paths (tokens, introspection,
/// client authentication, sign-in, sessions, authorization codes).
#[derive(Clone, Copy, Debug)]
pub enum StoreOp {
    IssueTokens,
    FindToken,
    ClaimRefreshToken,
    RevokeToken,
    RevokeFamily,
    FindApplication,
    GetApplication,
    UserWithPassword,
    CountLoginFailures,
    RecordLoginFailure,
    CreateSession,
    FindSession,
    IssueCode,
    ClaimCode,
}

impl StoreOp {
    const ALL: [StoreOp; 14] = [
        StoreOp::IssueTokens,
        StoreOp::FindToken,
        StoreOp::ClaimRefreshToken,
        StoreOp::RevokeToken,
        StoreOp::RevokeFamily,
        StoreOp::FindApplication,
        StoreOp::GetApplication,
        StoreOp::UserWithPassword,
        StoreOp::CountLoginFailures,
        StoreOp::RecordLoginFailure,
        StoreOp::CreateSession,
        StoreOp::FindSession,
        StoreOp::IssueCode,
        StoreOp::ClaimCode,
    ];

    fn as_str(self) -> &'static str {
        match self {
            StoreOp::IssueTokens => "issue_tokens",
            StoreOp::FindToken => "find_token",
            StoreOp::ClaimRefreshToken => "claim_refresh_token",
            StoreOp::RevokeToken => "revoke_token",
            StoreOp::RevokeFamily => "revoke_family",
            StoreOp::FindApplication => "find_application_by_client_id",
            StoreOp::GetApplication => "get_application",
            StoreOp::UserWithPassword => "user_with_password",
            StoreOp::CountLoginFailures => "count_login_failures",
            StoreOp::RecordLoginFailure => "record_login_failure",
            StoreOp::CreateSession => "create_session",
            StoreOp::FindSession => "find_session",
            StoreOp::IssueCode => "issue_code",
            StoreOp::ClaimCode => "claim_code",
        }
    }
}

/// Upper bounds of the store latency histogram's buckets, in seconds (`+Inf` implied).
const STORE_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// The call durations: the family to register, a series per [`StoreOp::ALL`] position.
struct CallDurations {
    family: HistogramFamily,
    by_op: [Histogram; StoreOp::ALL.len()],
}

impl CallDurations {
    fn new() -> CallDurations {
        let (family, by_op) = resource_server::metrics::histograms(
            || Histogram::new(STORE_BUCKETS),
            "operation",
            StoreOp::ALL.map(StoreOp::as_str),
        );
        CallDurations { family, by_op }
    }
}

/// This process's store call durations.
static CALL_DURATIONS: LazyLock<CallDurations> = LazyLock::new(CallDurations::new);

/// The histogram family of this process's store call durations, in seconds, by `operation`.
pub fn call_durations() -> &'static HistogramFamily {
    &CALL_DURATIONS.family
}

/// Times a store call from its creation to its drop (whatever way the call ends):
/// `let _timer = StoreTimer::start(StoreOp::FindToken);` first in the method.
pub struct StoreTimer {
    op: StoreOp,
    started: Instant,
}

impl StoreTimer {
    pub fn start(op: StoreOp) -> StoreTimer {
        StoreTimer {
            op,
            started: Instant::now(),
        }
    }
}

impl Drop for StoreTimer {
    fn drop(&mut self) {
        CALL_DURATIONS.by_op[self.op as usize].observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_has_its_series_and_a_call_lands_in_its_bucket() {
        let durations = CallDurations::new();
        durations.by_op[StoreOp::FindToken as usize].observe(0.0003);
        let family = durations.family.clone();
        let text = resource_server::metrics::text("", move |s| {
            s.metric("store_duration_seconds", "Store calls", &family)
        });
        let store = "store_duration_seconds";
        for line in [
            format!("{store}_bucket{{le=\"0.00025\",operation=\"find_token\"}} 0"),
            format!("{store}_bucket{{le=\"0.0005\",operation=\"find_token\"}} 1"),
            format!("{store}_count{{operation=\"find_token\"}} 1"),
            format!("{store}_count{{operation=\"issue_tokens\"}} 0"),
            format!("{store}_count{{operation=\"claim_code\"}} 0"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}
