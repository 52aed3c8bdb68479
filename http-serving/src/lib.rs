//! The HTTP serving of tokengate's two axum servers, the authorization server and the example
//! API: the server loop with its limits ([`serve`]), errors logged in one middleware
//! ([`RequestLog`], [`with_error`]), the signal they stop on ([`shutdown_signal`]), and database
//! URLs fit for a log line ([`redact_url`]).

pub mod redact;
pub mod request_log;
pub mod server;
pub mod shutdown;

pub use redact::redact_url;
pub use request_log::{RequestLog, with_error};
pub use server::{Limits, serve};
pub use shutdown::shutdown_signal;
