//! DPoP at the token endpoint (RFC 9449 §5): the proof a token request comes with, checked by
//! [`resource_server::dpop`] against the endpoint's public URL, its `jti` remembered for the
//! proof window, and the thumbprint of its key returned for the tokens to be bound to.

use super::OAuthError;
use crate::AppState;
use crate::store::now;
use axum::http::HeaderMap;
use resource_server::dpop::{self, Expected, Nonces, ProofError, ReplayCache};

/// Proofs this process remembers (per replica: a proof replayed to another replica within the
/// window is not caught here, docs/dpop.md).
const REPLAY_CAPACITY: u64 = 100_000;

/// How long one nonce slot lasts (seconds): a nonce is good for one to two of them.
pub const NONCE_PERIOD: i64 = 120;

/// What the token endpoint keeps between DPoP requests.
pub struct DpopState {
    pub replay: ReplayCache,
    pub nonces: std::sync::Arc<Nonces>,
    /// The token endpoint's URLs a proof's `htu` may name, normalised once.
    token_endpoint_urls: Vec<String>,
}

impl DpopState {
    /// The state of a server with `settings`: its nonces under the key derived from the
    /// key-encryption secrets when there are (every replica issues and accepts the same), else
    /// under a random key of this process.
    pub fn new(settings: &crate::config::Settings) -> DpopState {
        let nonces = match &settings.key_encryption {
            Some(keys) => Nonces::new(keys.dpop_nonce_key(), NONCE_PERIOD),
            None => Nonces::random(NONCE_PERIOD),
        };
        DpopState {
            replay: ReplayCache::new(REPLAY_CAPACITY, dpop::DEFAULT_WINDOW),
            nonces: std::sync::Arc::new(nonces),
            token_endpoint_urls: token_endpoint_urls(settings),
        }
    }
}

/// The token endpoint's URLs a proof's `htu` may name: under the issuer, and under the mTLS
/// alias when there is one.
fn token_endpoint_urls(settings: &crate::config::Settings) -> Vec<String> {
    std::iter::once(&settings.issuer)
        .chain(settings.mtls_endpoint_base.as_ref())
        .filter_map(|base| dpop::normalize_htu(&format!("{base}/o/token/")))
        .collect()
}

/// The thumbprint of the key a token request proved (its `DPoP` header), None without a
/// proof. A second `DPoP` header, an invalid or replayed proof, or (with `dpop_nonce:
/// required`) one without a current nonce is refused.
pub async fn proven_key(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<String>, OAuthError> {
    let mut values = headers.get_all(dpop::DPOP_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(OAuthError::InvalidDpopProof("More than one DPoP header."));
    }
    let proof = value
        .to_str()
        .map_err(|_| OAuthError::InvalidDpopProof("The DPoP proof is not a compact JWS."))?;
    let now = now();
    let nonces = state.dpop.nonces.as_ref();
    let expected = Expected {
        htm: "POST",
        htu: &state.dpop.token_endpoint_urls,
        access_token: None,
        nonces: state.settings.dpop_nonce_required.then_some(nonces),
        now,
        window: dpop::DEFAULT_WINDOW,
    };
    let proven = dpop::verify(proof, &expected).map_err(|error| match error {
        ProofError::Invalid(description) => OAuthError::InvalidDpopProof(description),
        ProofError::UseNonce => OAuthError::UseDpopNonce(nonces.issue(now)),
    })?;
    if !state.dpop.replay.first_use(&proven) {
        return Err(OAuthError::InvalidDpopProof(
            "The DPoP proof was used already.",
        ));
    }
    Ok(Some(proven.jkt))
}

/// The nonce to hand out with a successful answer when nonces are required (§8.2), so the
/// client's next proof carries a fresh one.
pub fn next_nonce(state: &AppState) -> Option<String> {
    state
        .settings
        .dpop_nonce_required
        .then(|| state.dpop.nonces.issue(now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replicas given the same key-encryption secrets accept each other's nonces; a server
    /// without them makes its own.
    #[test]
    fn replicas_with_the_same_secrets_share_nonces() {
        let mut settings = crate::config::Settings::for_tests("unused");
        settings.key_encryption = Some(crate::testing::key_encryption());
        let (one, two) = (DpopState::new(&settings), DpopState::new(&settings));
        let nonce = one.nonces.issue(now());
        assert!(two.nonces.is_current(&nonce, now()));
        let alone = DpopState::new(&crate::config::Settings::for_tests("unused"));
        assert!(!alone.nonces.is_current(&nonce, now()));
    }
}
