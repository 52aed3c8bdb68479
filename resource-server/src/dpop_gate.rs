//! The gate's half of DPoP (RFC 9449 §7), over [`crate::dpop`]: a token bound to a key
//! (`cnf.jkt`, from introspection or a JWT) stands only under the `DPoP` scheme with a proof of that key for this very request
//! (`htm`, `htu` as the client saw it, `ath` of the token, a `jti` not seen within the window);
//! sent as a bearer token it is refused (§7.2). A route's `dpop: required` refuses unbound
//! tokens too.

use http::HeaderMap;
use http::header::AUTHORIZATION;

use crate::decision::{Credential, DpopRefusal};
use crate::dpop::{self, DpopPolicy, Expected, ProofError, ReplayCache};

/// How old a proof may be at the gate (seconds): each request carries a new one, so a short
/// window keeps the replay cache small.
pub const GATE_WINDOW: i64 = 60;
/// Proofs a gate remembers: 10,000 requests/s over the window and its leeway (65 s) is 650,000
/// (17 MiB, `bench/dpop_verify`); past it the oldest are forgotten first.
pub const GATE_REPLAY_CAPACITY: u64 = 1_000_000;

/// The token of `Authorization: DPoP <token>` (scheme case-insensitive): `None` under another
/// scheme (or none), `Err` for an empty, overlong or malformed token, or two headers.
pub fn dpop_scheme_token(headers: &HeaderMap) -> Option<Result<&str, &'static str>> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next()?;
    let text = value.to_str().ok()?.trim_matches(' ');
    let (scheme, token) = text.split_once(' ').unwrap_or((text, ""));
    if !scheme.eq_ignore_ascii_case(dpop::SCHEME) {
        return None;
    }
    if values.next().is_some() {
        return Some(Err(crate::bearer::MULTIPLE_HEADERS));
    }
    let token = token.trim_matches(' ');
    if token.is_empty() || token.len() > crate::bearer::MAX_TOKEN_LEN {
        return Some(Err(crate::bearer::MALFORMED_TOKEN));
    }
    if !token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b))
    {
        return Some(Err(crate::bearer::MALFORMED_TOKEN));
    }
    Some(Ok(token))
}

/// How the server running the gate learns the URL the client sent a request to (a proof's
/// `htu`), besides the configured `resource`'s origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeenAs {
    /// Only the `resource`'s origin.
    Resource,
    /// This scheme (`https` on a TLS listener) and the request's `Host` (`:authority`).
    Listener(&'static str),
    /// From a trusted peer in front (an ingress): its `X-Forwarded-Proto` and
    /// `X-Forwarded-Host`, each in place of the listener's scheme or `Host` when given once.
    Forwarded(&'static str),
}

/// The request a proof must match.
pub struct ProofRequest<'a> {
    pub method: &'a http::Method,
    pub uri: &'a http::Uri,
    pub headers: &'a HeaderMap,
    /// The token under the `DPoP` scheme; `None` when it came as a bearer token.
    pub dpop_token: Option<&'a str>,
    pub seen: SeenAs,
    /// The origin of the configured `resource`.
    pub resource_origin: Option<&'a str>,
}

impl ProofRequest<'_> {
    /// The URL (normalized) the client may have sent the request to: under the configured
    /// `resource`'s origin when there is one, and only there (a proof made for another server is
    /// refused whatever `Host` the request carries); else under the origin the request shows.
    fn urls(&self) -> Vec<String> {
        let path = self.uri.path();
        let origin = match (self.resource_origin, self.seen) {
            (Some(resource), _) => Some(resource.to_owned()),
            (None, SeenAs::Resource) => None,
            (None, SeenAs::Listener(scheme)) => {
                client_origin(scheme, self.uri, self.headers, false)
            }
            (None, SeenAs::Forwarded(scheme)) => {
                client_origin(scheme, self.uri, self.headers, true)
            }
        };
        origin
            .and_then(|origin| dpop::normalize_htu(&format!("{origin}{path}")))
            .into_iter()
            .collect()
    }
}

/// The gate's DPoP check: its replay cache, kept across reloads.
#[derive(Clone, Debug)]
pub struct DpopCheck {
    replay: ReplayCache,
    window: i64,
}

impl Default for DpopCheck {
    fn default() -> Self {
        DpopCheck {
            replay: ReplayCache::new(GATE_REPLAY_CAPACITY, GATE_WINDOW),
            window: GATE_WINDOW,
        }
    }
}

const fn refusal(error: &'static str, description: &'static str) -> Credential {
    Credential::Dpop(DpopRefusal { error, description })
}

/// `error_description` for a DPoP-bound token sent as a bearer token.
pub const BOUND_AS_BEARER: &str =
    "The access token is bound to a DPoP key: send it with the DPoP scheme and a proof.";
/// `error_description` for an unbound token on a route with `dpop: required`.
pub const NOT_BOUND: &str = "This route requires a DPoP-bound access token.";
/// `error_description` for a proof by another key than the token's.
pub const OTHER_KEY: &str = "The DPoP proof is signed by another key than the token is bound to.";

impl DpopCheck {
    /// The proofs remembered now.
    pub fn replay_cache(&self) -> &ReplayCache {
        &self.replay
    }

    /// Holds `credential` to DPoP (see the module). Only active checked claims are looked at;
    /// every other credential passes unchanged.
    pub async fn screen(
        &self,
        credential: Credential,
        request: &ProofRequest<'_>,
        policy: DpopPolicy,
    ) -> Credential {
        let Credential::Checked(claims) = &credential else {
            return credential;
        };
        if !claims.active {
            return credential;
        }
        let jkt = claims.cnf.as_ref().and_then(|cnf| cnf.jkt.as_deref());
        let Some(token) = request.dpop_token else {
            return match (jkt, policy) {
                (Some(_), _) => refusal("invalid_token", BOUND_AS_BEARER),
                (None, DpopPolicy::Required) => refusal("invalid_token", NOT_BOUND),
                (None, DpopPolicy::Allowed) => credential,
            };
        };
        let proven = match self.proof(request, token) {
            Ok(proven) => proven,
            Err(ProofError::Invalid(why)) => return refusal(dpop::INVALID_DPOP_PROOF, why),
            Err(ProofError::UseNonce) => {
                return refusal(dpop::USE_DPOP_NONCE, ProofError::UseNonce.description());
            }
        };
        match jkt {
            Some(jkt) if !dpop::thumbprint_matches(jkt, &proven.jkt) => {
                return refusal(dpop::INVALID_DPOP_PROOF, OTHER_KEY);
            }
            None if policy == DpopPolicy::Required => return refusal("invalid_token", NOT_BOUND),
            _ => {}
        }
        if !self.replay.first_use(&proven) {
            return refusal(dpop::INVALID_DPOP_PROOF, "The DPoP proof was used already.");
        }
        credential
    }

    /// The request's one proof, checked against it.
    fn proof(&self, request: &ProofRequest<'_>, token: &str) -> Result<dpop::Proof, ProofError> {
        let mut values = request.headers.get_all(dpop::DPOP_HEADER).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(ProofError::Invalid("Send exactly one DPoP proof."));
        };
        let proof = value
            .to_str()
            .map_err(|_| ProofError::Invalid("The DPoP proof is not a compact JWS."))?;
        let htu = request.urls();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        dpop::verify(
            proof,
            &Expected {
                htm: request.method.as_str(),
                htu: &htu,
                access_token: Some(token),
                nonces: None,
                now,
                window: self.window,
            },
        )
    }
}

/// The origin a request was sent to as its client saw it: `scheme` and the URI's authority
/// (HTTP/2's `:authority`) or the `Host` header; with `forwarded` (a trusted peer in front),
/// `X-Forwarded-Proto` and `X-Forwarded-Host` when each is given once. `None` without a host.
pub fn client_origin(
    scheme: &str,
    uri: &http::Uri,
    headers: &HeaderMap,
    forwarded: bool,
) -> Option<String> {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok().map(str::trim),
            _ => None,
        }
    };
    let scheme = match forwarded.then(|| one("x-forwarded-proto")).flatten() {
        Some(proto) if proto.eq_ignore_ascii_case("https") => "https",
        Some(proto) if proto.eq_ignore_ascii_case("http") => "http",
        _ => scheme,
    };
    let host = match forwarded.then(|| one("x-forwarded-host")).flatten() {
        Some(host) => host,
        None => match uri.authority() {
            Some(authority) => authority.as_str(),
            None => one("host")?,
        },
    };
    if host.is_empty() || host.contains(['/', '@', ' ', ',']) {
        return None;
    }
    Some(format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::{Claims, Confirmation};
    use crate::dpop::signer::ProofSigner;
    use http::{HeaderValue, Method, Uri};
    use std::sync::Arc;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn claims(jkt: Option<&str>) -> Credential {
        Credential::Checked(Arc::new(Claims {
            active: true,
            cnf: jkt.map(|jkt| Confirmation {
                x5t_s256: None,
                jkt: Some(jkt.to_owned()),
            }),
            ..Claims::default()
        }))
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn the_dpop_scheme_and_its_token() {
        assert_eq!(dpop_scheme_token(&headers(&[])), None);
        assert_eq!(
            dpop_scheme_token(&headers(&[("authorization", "Bearer abc")])),
            None
        );
        assert_eq!(
            dpop_scheme_token(&headers(&[("authorization", "dpop abc.def-_~+/=")])),
            Some(Ok("abc.def-_~+/="))
        );
        for bad in ["DPoP", "DPoP a b", "DPoP a\"b"] {
            assert!(
                matches!(
                    dpop_scheme_token(&headers(&[("authorization", bad)])),
                    Some(Err(_))
                ),
                "{bad}"
            );
        }
        let two = headers(&[("authorization", "DPoP a"), ("authorization", "DPoP b")]);
        assert_eq!(
            dpop_scheme_token(&two),
            Some(Err(crate::bearer::MULTIPLE_HEADERS))
        );
    }

    #[test]
    fn the_origin_the_client_saw() {
        let uri: Uri = "/users/?a=1".parse().unwrap();
        let h = headers(&[
            ("host", "api.internal:8080"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "api.example"),
        ]);
        assert_eq!(
            client_origin("http", &uri, &h, false).as_deref(),
            Some("http://api.internal:8080")
        );
        assert_eq!(
            client_origin("http", &uri, &h, true).as_deref(),
            Some("https://api.example")
        );
        let absolute: Uri = "https://h2.example/users/".parse().unwrap();
        assert_eq!(
            client_origin("https", &absolute, &h, false).as_deref(),
            Some("https://h2.example")
        );
        assert_eq!(client_origin("http", &uri, &headers(&[]), false), None);
        assert_eq!(
            client_origin("http", &uri, &headers(&[("host", "a@b")]), false),
            None
        );
    }

    #[tokio::test]
    async fn bound_tokens_need_their_key_and_required_routes_a_bound_token() {
        let check = DpopCheck::default();
        let signer = ProofSigner::eddsa();
        let (method, uri) = (Method::GET, "/r".parse::<Uri>().unwrap());
        let url = "http://api.example/r";
        let request = |h: &'static HeaderMap, token: Option<&'static str>| ProofRequest {
            method: &method,
            uri: &uri,
            headers: h,
            dpop_token: token,
            seen: SeenAs::Listener("http"),
            resource_origin: None,
        };
        let bare: &'static HeaderMap = Box::leak(Box::new(headers(&[("host", "api.example")])));
        let bound = claims(Some(&signer.thumbprint()));
        let refused = |c: Credential| match c {
            Credential::Dpop(r) => (r.error, r.description),
            other => panic!("not refused: {other:?}"),
        };
        // Bearer: a bound token is refused, an unbound one passes unless the route requires DPoP.
        let as_bearer = check
            .screen(bound.clone(), &request(bare, None), DpopPolicy::Allowed)
            .await;
        assert_eq!(refused(as_bearer), ("invalid_token", BOUND_AS_BEARER));
        assert_eq!(
            check
                .screen(claims(None), &request(bare, None), DpopPolicy::Allowed)
                .await,
            claims(None)
        );
        let required = check
            .screen(claims(None), &request(bare, None), DpopPolicy::Required)
            .await;
        assert_eq!(refused(required), ("invalid_token", NOT_BOUND));
        // Under DPoP with a proof of the key: passes once.
        let proof = signer.proof("GET", url, now(), Some("tok"));
        let with: &'static HeaderMap = Box::leak(Box::new(headers(&[
            ("host", "api.example"),
            ("dpop", &proof),
        ])));
        let ok = check
            .screen(
                bound.clone(),
                &request(with, Some("tok")),
                DpopPolicy::Required,
            )
            .await;
        assert_eq!(ok, bound);
        let replay = check
            .screen(
                bound.clone(),
                &request(with, Some("tok")),
                DpopPolicy::Required,
            )
            .await;
        assert_eq!(refused(replay).0, dpop::INVALID_DPOP_PROOF);
        // Another key's proof.
        let other = ProofSigner::eddsa().proof("GET", url, now(), Some("tok"));
        let with_other: &'static HeaderMap = Box::leak(Box::new(headers(&[
            ("host", "api.example"),
            ("dpop", &other),
        ])));
        let refusal = check
            .screen(
                bound.clone(),
                &request(with_other, Some("tok")),
                DpopPolicy::Allowed,
            )
            .await;
        assert_eq!(refused(refusal), (dpop::INVALID_DPOP_PROOF, OTHER_KEY));
        // Inactive claims are left to the decision.
        let inactive = Credential::Checked(Arc::new(Claims::inactive()));
        assert_eq!(
            check
                .screen(inactive.clone(), &request(bare, None), DpopPolicy::Required)
                .await,
            inactive
        );
    }

    /// With `resource:` set, only its origin is the request's: a proof made for another server,
    /// replayed here with that server's `Host`, is refused.
    #[tokio::test]
    async fn a_configured_resource_is_the_only_origin_a_proof_may_name() {
        let check = DpopCheck::default();
        let signer = ProofSigner::eddsa();
        let bound = claims(Some(&signer.thumbprint()));
        let (method, uri) = (Method::GET, "/r".parse::<Uri>().unwrap());
        let screen = |htu: &str| {
            let proof = signer.proof("GET", htu, now(), Some("tok"));
            let h = headers(&[("host", "other.example"), ("dpop", &proof)]);
            let check = check.clone();
            let (method, uri, bound) = (method.clone(), uri.clone(), bound.clone());
            async move {
                let request = ProofRequest {
                    method: &method,
                    uri: &uri,
                    headers: &h,
                    dpop_token: Some("tok"),
                    seen: SeenAs::Listener("https"),
                    resource_origin: Some("https://api.example"),
                };
                check.screen(bound, &request, DpopPolicy::Allowed).await
            }
        };
        assert_eq!(screen("https://api.example/r").await, bound);
        match screen("https://other.example/r").await {
            Credential::Dpop(refusal) => assert_eq!(refusal.error, dpop::INVALID_DPOP_PROOF),
            other => panic!("a proof for the Host, not the resource, passed: {other:?}"),
        }
    }
}
