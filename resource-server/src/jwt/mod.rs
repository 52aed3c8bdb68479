//! Local validation of JWT access tokens (RFC 9068) with keys from a JWKS: [`JwtValidator`].
//!
//! A token is refused (401 `invalid_token`) unless, in this order: it is a JWS compact token
//! whose header reads strictly ([`header`]); its `alg` is on the allow-list (never `none` nor an
//! HMAC algorithm: a JWKS publishes public keys, so an HMAC "signed" with one is a forgery); its
//! `typ` is accepted (`at+jwt` by default); a key of the set ([`keys`]) has its `kid` and fits its
//! algorithm; the signature verifies (`jsonwebtoken`'s ring backend for RSA and ECDSA,
//! `ed25519-dalek` for EdDSA); and its claims pass RFC 9068's checks ([`claims`]). Verified
//! tokens are cached until `exp` under a keyed hash of the token ([`crate::token_key`]), with the key that verified them (its published `kid`
//! and a fingerprint of its material): once that key has left the JWKS, or been replaced under
//! the same `kid`, the cached token is no longer accepted. With no key known at all (the JWKS
//! could not be fetched) every token is refused with 503.

pub mod claims;
pub mod header;
pub mod jwks;
pub mod keys;
pub mod metrics;
pub mod raw;

use std::str::FromStr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use moka::Expiry;
use moka::future::Cache;
use serde_json::Value;

use crate::claims::Claims;
use crate::decision::Credential;
use crate::decision::{EXPIRED_TOKEN, NOT_YET_VALID_TOKEN};
use crate::token_key::{KeyCache, KeyHash, TokenKey, TokenKeys};
use crate::token_log_id;
pub use claims::ClaimRules;
use header::{Header, HeaderError};
use jwks::KeyStore;
pub use jwks::{JwksSettings, JwksSource};
pub use metrics::{JwtMetrics, Validation};

/// Not a JWS compact token, or a header that does not read.
pub const NOT_A_JWT: &str = "The access token is not a JWT this API accepts.";
/// `alg` not on the allow-list.
pub const ALGORITHM_REFUSED: &str = "The access token's signing algorithm is not accepted.";
/// `typ` not accepted.
pub const TYPE_REFUSED: &str = "The access token's type (typ) is not accepted.";
/// No key of the JWKS for its `kid` and algorithm.
pub const UNKNOWN_KEY: &str = "The access token is signed by an unknown key.";
/// The signature does not verify.
pub const BAD_SIGNATURE: &str = "The access token's signature does not verify.";

/// The algorithms that may be allowed: asymmetric ones only.
pub const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Everything a [`JwtValidator`] is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtSettings {
    pub jwks: JwksSettings,
    /// Issuer, claim names, `jti`, leeway (the audience is the gate's: [`crate::audience`]).
    pub claims: ClaimRules,
    /// The allow-list (a subset of [`ASYMMETRIC`]).
    pub algorithms: Vec<Algorithm>,
    /// Accepted `typ` header values (`at+jwt` by default).
    pub typ: Vec<String>,
    /// Most verified tokens cached.
    pub cache_capacity: u64,
}

impl JwtSettings {
    pub const DEFAULT_ALGORITHMS: [Algorithm; 3] =
        [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];
    pub const DEFAULT_TYP: &'static str = "at+jwt";
    pub const DEFAULT_CACHE_CAPACITY: u64 = 100_000;

    /// The default settings for an issuer and JWKS.
    pub fn new(issuer: &str, jwks: JwksSettings) -> Self {
        JwtSettings {
            jwks,
            claims: ClaimRules {
                issuer: issuer.to_owned(),
                scope_claim: "scope".into(),
                username_claim: ClaimRules::DEFAULT_USERNAME_CLAIM.into(),
                client_id_claim: "client_id".into(),
                require_jti: true,
                leeway_secs: crate::AnswerPolicy::DEFAULT_LEEWAY.as_secs() as i64,
            },
            algorithms: Self::DEFAULT_ALGORITHMS.to_vec(),
            typ: vec![Self::DEFAULT_TYP.to_owned()],
            cache_capacity: Self::DEFAULT_CACHE_CAPACITY,
        }
    }

    /// The first setting that does not do.
    pub fn check(&self) -> Result<(), String> {
        if self.claims.issuer.trim().is_empty() {
            return Err("issuer: required (the exact `iss` of the tokens)".into());
        }
        if self.algorithms.is_empty() {
            return Err("algorithms: empty".into());
        }
        if let Some(a) = self.algorithms.iter().find(|a| !ASYMMETRIC.contains(a)) {
            return Err(format!(
                "algorithms: {a:?} is never accepted (only public-key algorithms: a JWKS publishes public keys)"
            ));
        }
        if self.typ.is_empty() || self.typ.iter().any(|t| t.trim().is_empty()) {
            return Err("typ: empty".into());
        }
        for (key, name) in [
            ("scope_claim", &self.claims.scope_claim),
            ("username_claim", &self.claims.username_claim),
            ("client_id_claim", &self.claims.client_id_claim),
        ] {
            if name.trim().is_empty() {
                return Err(format!("{key}: empty"));
            }
        }
        let max = crate::AnswerPolicy::MAX_LEEWAY.as_secs() as i64;
        if !(0..=max).contains(&self.claims.leeway_secs) {
            return Err(format!("leeway: at most {max}s"));
        }
        let j = &self.jwks;
        if j.refresh_min.is_zero() || j.refresh_min > j.refresh_max {
            return Err("jwks_refresh_min: must be positive and at most jwks_refresh_max".into());
        }
        if j.timeout.is_zero() {
            return Err("jwks_timeout: must be positive".into());
        }
        if self.cache_capacity == 0 {
            return Err("cache_capacity: must be positive".into());
        }
        Ok(())
    }
}

#[derive(Clone)]
struct Verified {
    claims: Arc<Claims>,
    /// The verifying key: its `kid` as published (not the token's, which may have none) and
    /// its fingerprint.
    kid: Option<String>,
    key: [u8; 32],
    /// The key set's generation before the key was looked up.
    generation: u64,
    ttl: Duration,
}

struct UntilExp;

impl Expiry<TokenKey, Verified> for UntilExp {
    fn expire_after_create(&self, _: &TokenKey, v: &Verified, _: Instant) -> Option<Duration> {
        Some(v.ttl)
    }
}

struct Inner {
    settings: JwtSettings,
    keys: Arc<KeyStore>,
    /// Verified tokens, by [`TokenKeys::of`] under `keys`.
    cache: KeyCache<Verified>,
    cache_keys: TokenKeys,
    metrics: Arc<JwtMetrics>,
    /// `kid`s withdrawn by the revocation stream: never accepted again, published or not.
    withdrawn: std::sync::RwLock<Vec<String>>,
    any_withdrawn: std::sync::atomic::AtomicBool,
}

/// Validates JWT access tokens locally. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct JwtValidator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JwtValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtValidator")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they are the same validator.
impl PartialEq for JwtValidator {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for JwtValidator {}

/// Validators alive in the process, by settings (see [`JwtValidator::shared`]).
static LIVE: Mutex<Vec<(JwtSettings, Weak<Inner>)>> = Mutex::new(Vec::new());

impl JwtValidator {
    /// A new validator (a static JWKS file is read now; a URL is fetched on
    /// [`JwtValidator::start`] or the first validation).
    pub fn new(settings: JwtSettings) -> Result<JwtValidator, String> {
        settings.check()?;
        let metrics = Arc::new(JwtMetrics::default());
        let keys = KeyStore::new(settings.jwks.clone(), metrics.clone())
            .map_err(|e| format!("jwks: {e}"))?;
        let cache = Cache::builder()
            .max_capacity(settings.cache_capacity)
            .expire_after(UntilExp)
            .build_with_hasher(KeyHash);
        let cache_keys = TokenKeys::random()
            .ok_or("no randomness for the key of the cache of verified tokens")?;
        Ok(JwtValidator {
            inner: Arc::new(Inner {
                settings,
                keys: Arc::new(keys),
                cache,
                cache_keys,
                metrics,
                withdrawn: Default::default(),
                any_withdrawn: Default::default(),
            }),
        })
    }

    /// The validator with these settings that is already alive in the process, or a new one:
    /// a configuration reload that keeps the `jwt:` section keeps the keys, the cache and the
    /// counters.
    pub fn shared(settings: JwtSettings) -> Result<JwtValidator, String> {
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = live
            .iter()
            .find(|(s, _)| *s == settings)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(JwtValidator { inner });
        }
        let v = JwtValidator::new(settings.clone())?;
        live.push((settings, Arc::downgrade(&v.inner)));
        Ok(v)
    }

    /// Fetches the JWKS now (if not yet tried) and starts its background refresh. Needs a tokio
    /// runtime; the first validation does it otherwise.
    pub async fn start(&self) {
        self.inner.keys.start().await;
    }

    /// The key `kid` was withdrawn: tokens it signs are refused from now on, cached ones
    /// included, whether the JWKS still publishes it or not; the JWKS is fetched again.
    pub async fn withdraw_key(&self, kid: &str) {
        let inner = &*self.inner;
        if let Ok(mut w) = inner.withdrawn.write()
            && !w.iter().any(|k| k == kid)
        {
            w.push(kid.to_owned());
        }
        inner
            .any_withdrawn
            .store(true, std::sync::atomic::Ordering::Release);
        inner.keys.refresh().await;
    }

    /// Whether a key's published `kid` was withdrawn.
    fn withdrawn(&self, kid: Option<&str>) -> bool {
        let inner = &*self.inner;
        inner
            .any_withdrawn
            .load(std::sync::atomic::Ordering::Acquire)
            && kid.is_some_and(|kid| {
                inner
                    .withdrawn
                    .read()
                    .is_ok_and(|w| w.iter().any(|k| k == kid))
            })
    }

    pub fn settings(&self) -> &JwtSettings {
        &self.inner.settings
    }

    pub fn metrics(&self) -> &Arc<JwtMetrics> {
        &self.inner.metrics
    }

    /// Keys currently known.
    pub fn key_count(&self) -> usize {
        self.inner.keys.keys().len()
    }

    /// The clock leeway for `exp`/`nbf`.
    pub fn leeway(&self) -> Duration {
        Duration::from_secs(self.inner.settings.claims.leeway_secs.max(0) as u64)
    }

    /// Verifies `token`: its claims, or why it is refused.
    pub async fn validate(&self, token: &str) -> Credential {
        let inner = &*self.inner;
        let key = inner.cache_keys.of(token);
        if let Some(hit) = inner.cache.get(&key).await {
            let key_still_known = (hit.generation == inner.keys.generation()
                || inner.keys.keys().holds(hit.kid.as_deref(), &hit.key))
                && !self.withdrawn(hit.kid.as_deref());
            if key_still_known {
                inner.metrics.record(Validation::Cached);
                return Credential::Checked(hit.claims);
            }
            // Its key left the JWKS: verified again (and refused) below.
            inner.cache.invalidate(&key).await;
        }
        let (outcome, result) = self.verify(token).await;
        inner.metrics.record(outcome);
        match result {
            Ok(verified) => {
                let claims = verified.claims.clone();
                inner.cache.insert(key, verified).await;
                Credential::Checked(claims)
            }
            Err(credential) => {
                tracing::debug!(token = %token_log_id(token), outcome = outcome.as_str(), "JWT refused");
                credential
            }
        }
    }

    async fn verify(&self, token: &str) -> (Validation, Result<Verified, Credential>) {
        let inner = &*self.inner;
        let s = &inner.settings;
        let refuse = |outcome, why| (outcome, Err(Credential::Invalid(why)));
        let header = match Header::parse(token) {
            Ok(h) => h,
            Err(HeaderError::NotAJwt | HeaderError::Field(_) | HeaderError::Critical) => {
                return refuse(Validation::Malformed, NOT_A_JWT);
            }
        };
        let Some(alg) = Algorithm::from_str(&header.alg)
            .ok()
            .filter(|a| s.algorithms.contains(a))
        else {
            return refuse(Validation::Malformed, ALGORITHM_REFUSED);
        };
        if !header.typ_is_one_of(&s.typ) {
            return refuse(Validation::Malformed, TYPE_REFUSED);
        }
        let since = Instant::now();
        inner.keys.start().await;
        let kid = header.kid.as_deref();
        let mut generation = inner.keys.generation();
        let mut keys = inner.keys.keys();
        if keys.find(kid, alg, &header.alg).is_none() {
            inner.keys.refetch_for(since).await;
            generation = inner.keys.generation();
            keys = inner.keys.keys();
        }
        if keys.is_empty() {
            return (Validation::Unavailable, Err(Credential::Unavailable));
        }
        let Some(key) = keys
            .find(kid, alg, &header.alg)
            .filter(|k| !self.withdrawn(k.kid.as_deref()))
        else {
            return refuse(Validation::UnknownKey, UNKNOWN_KEY);
        };
        // The signature over `header.payload` ([`keys::Key::check_signature`]), then the payload
        // read once: the header was read above, and `claims` checks what jsonwebtoken's own
        // validation would, so `jsonwebtoken::decode` would only read both a second time.
        let Some((message, signature)) = token.rsplit_once('.') else {
            return refuse(Validation::Malformed, NOT_A_JWT);
        };
        match key.check_signature(message.as_bytes(), signature, alg) {
            Ok(true) => {}
            Ok(false) => return refuse(Validation::BadSignature, BAD_SIGNATURE),
            Err(_) => return refuse(Validation::Malformed, NOT_A_JWT),
        }
        let payload = message
            .split_once('.')
            .and_then(|(_, payload)| URL_SAFE_NO_PAD.decode(payload).ok())
            .and_then(|json| serde_json::from_slice::<Value>(&json).ok());
        let Some(payload) = payload else {
            return refuse(Validation::Malformed, NOT_A_JWT);
        };
        let now_ms = unix_millis();
        match s.claims.read(payload, now_ms / 1000) {
            Ok(claims) => {
                let exp_ms = claims.exp.unwrap_or(0).saturating_mul(1000);
                let ttl = Duration::from_millis(u64::try_from(exp_ms - now_ms).unwrap_or(0));
                (
                    Validation::Verified,
                    Ok(Verified {
                        claims: Arc::new(claims),
                        kid: key.kid.clone(),
                        key: key.fingerprint,
                        generation,
                        ttl,
                    }),
                )
            }
            Err(why @ (EXPIRED_TOKEN | NOT_YET_VALID_TOKEN | claims::ISSUED_IN_FUTURE)) => {
                refuse(Validation::Expired, why)
            }
            Err(why) => refuse(Validation::BadClaims, why),
        }
    }
}

fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
