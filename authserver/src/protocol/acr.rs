//! How a user signed in, in tokens (issue 41): RFC 8176 `amr` method values kept with a sign-in,
//! the `acr` value they amount to, and whether an authorization request's `acr_values` (or an
//! application's setting) asks for a second factor the current sign-in lacks.

/// `acr` of a sign-in with a password alone.
pub const ACR_PASSWORD: &str = "urn:tokengate:acr:pwd";
/// `acr` of a sign-in with a password and a second factor.
pub const ACR_MFA: &str = "urn:tokengate:acr:mfa";
/// `acr_values_supported`, weakest first.
pub const SUPPORTED: [&str; 2] = [ACR_PASSWORD, ACR_MFA];
/// `amr` of a sign-in whose methods were not recorded (before second factors): a password.
pub const DEFAULT_AMR: &str = "pwd";

/// The `amr` array of a sign-in recorded as space-separated values.
pub fn amr_list(amr: &str) -> Vec<String> {
    let list: Vec<String> = amr.split_whitespace().map(str::to_owned).collect();
    if list.is_empty() {
        vec![DEFAULT_AMR.to_owned()]
    } else {
        list
    }
}

/// Whether a sign-in with methods `amr` used more than one factor.
pub fn is_multi_factor(amr: &str) -> bool {
    amr.split_whitespace().any(|m| m == "mfa")
}

/// The `acr` of a sign-in with methods `amr`.
pub fn acr_of(amr: &str) -> &'static str {
    if is_multi_factor(amr) {
        ACR_MFA
    } else {
        ACR_PASSWORD
    }
}

/// Whether `acr_values` (the request's, space-separated, in order of preference) asks for a
/// second factor: its first value this server knows is [`ACR_MFA`]. Values it does not know are
/// skipped (OpenID Connect Core 1.0 §3.1.2.1: `acr_values` is a voluntary request).
pub fn asks_for_mfa(acr_values: Option<&str>) -> bool {
    acr_values
        .unwrap_or_default()
        .split_whitespace()
        .find(|v| SUPPORTED.contains(v))
        == Some(ACR_MFA)
}

/// Whether a signed-in session with methods `amr` must sign in again, with its second factor,
/// before this authorization: a second factor is wanted (by the request or the application)
/// and the user has one the session did not use.
pub fn needs_step_up(mfa_wanted: bool, session_amr: &str, user_has_factor: bool) -> bool {
    mfa_wanted && user_has_factor && !is_multi_factor(session_amr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acr_follows_amr_and_requests_ask_in_order() {
        assert_eq!(acr_of("pwd"), ACR_PASSWORD);
        assert_eq!(acr_of("pwd otp mfa"), ACR_MFA);
        assert_eq!(amr_list(""), vec!["pwd"]);
        assert_eq!(amr_list("pwd otp mfa"), vec!["pwd", "otp", "mfa"]);
        assert!(asks_for_mfa(Some(ACR_MFA)));
        assert!(asks_for_mfa(Some(&format!(
            "urn:other {ACR_MFA} {ACR_PASSWORD}"
        ))));
        assert!(!asks_for_mfa(Some(&format!("{ACR_PASSWORD} {ACR_MFA}"))));
        assert!(!asks_for_mfa(Some("urn:unknown")));
        assert!(!asks_for_mfa(None));
        assert!(needs_step_up(true, "pwd", true));
        assert!(!needs_step_up(true, "pwd otp mfa", true));
        assert!(!needs_step_up(true, "pwd", false), "no factor to use");
        assert!(!needs_step_up(false, "pwd", true));
    }
}
