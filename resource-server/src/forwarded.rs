//! Behind-proxy mode: the caller's identity as the sidecar forwards it in `X-Auth-*` headers
//! ([`crate::identity`]), read back into claims so the same decision applies. The headers are
//! believed only from a request that proves it came through the proxy: the shared
//! [`ProxySecret`] in [`PROXY_SECRET_HEADER`], which the proxy adds and strips from clients.
//! Nothing is believed because it comes from loopback.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use crate::claims::Claims;
use crate::decision::Credential;
use crate::identity::{IDENTITY_HEADERS, Identity, IdentityError};

/// An identity header sent more than once.
pub const REPEATED: &str = "Repeated identity header.";
/// An identity header the proxy would not have written.
pub const NOT_ENCODED: &str = "Identity header is not percent-encoded UTF-8.";
/// `X-Auth-Expires` that is not a number of seconds.
pub const BAD_EXPIRES: &str = "X-Auth-Expires is not a number of seconds.";

/// The header in which the proxy proves itself to what stands behind it (the example API, the
/// authorization server). The proxy strips every `X-Tokengate-*` header a client sends.
pub const PROXY_SECRET_HEADER: &str = "x-tokengate-proxy-secret";

/// The secret shared by the proxy and what stands behind it. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxySecret(Arc<str>);

impl ProxySecret {
    /// The shortest secret accepted, in characters (`openssl rand -hex 32` gives 64).
    pub const MIN_LENGTH: usize = 16;

    /// A secret of at least [`Self::MIN_LENGTH`] visible ASCII characters (it travels as a
    /// header value), or why not, without the value. Surrounding white space (a file's final
    /// newline) is dropped.
    pub fn new(secret: &str) -> Result<ProxySecret, String> {
        let secret = secret.trim();
        if secret.len() < Self::MIN_LENGTH {
            return Err(format!(
                "the proxy secret must be at least {} characters long (it has {})",
                Self::MIN_LENGTH,
                secret.chars().count()
            ));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the proxy secret must be visible ASCII characters only (it travels as \
                        an HTTP header value)"
                    .into(),
            );
        }
        Ok(ProxySecret(secret.into()))
    }

    /// The value the proxy sends.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the request carries exactly one [`PROXY_SECRET_HEADER`] equal to this secret
    /// (compared in constant time).
    pub fn proven_by(&self, headers: &HeaderMap) -> bool {
        use subtle::ConstantTimeEq;
        let mut values = headers.get_all(PROXY_SECRET_HEADER).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => bool::from(v.as_bytes().ct_eq(self.0.as_bytes())),
            _ => false,
        }
    }
}

impl std::fmt::Debug for ProxySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxySecret(<redacted>)")
    }
}

/// Believes the proxy's identity headers on a request that carries `secret`; `X-Auth-Expires` is
/// checked with `leeway`, which should be the proxy's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedIdentity {
    pub leeway: Duration,
    pub secret: ProxySecret,
}

/// What the identity headers say.
pub fn forwarded_credential(headers: &HeaderMap) -> Credential {
    let mut values: [Option<&[u8]>; 5] = [None; 5];
    for (slot, name) in values.iter_mut().zip(IDENTITY_HEADERS) {
        let mut all = headers.get_all(name).iter();
        let Some(first) = all.next() else { continue };
        if all.next().is_some() {
            return Credential::Malformed(REPEATED);
        }
        *slot = Some(first.as_bytes());
    }
    if values.iter().all(Option::is_none) {
        return Credential::Missing;
    }
    let scope_sent = values[2].is_some();
    match Identity::from_header_values(values) {
        Ok(id) => Credential::Checked(Arc::new(Claims {
            active: true,
            scope: scope_sent.then_some(id.scope),
            client_id: id.client_id,
            username: id.username,
            exp: id.exp,
            groups: id.groups,
            token_type: Some("Bearer".into()),
            ..Claims::default()
        })),
        Err(IdentityError::Encoding) => Credential::Malformed(NOT_ENCODED),
        Err(IdentityError::Expires) => Credential::Malformed(BAD_EXPIRES),
    }
}

impl ForwardedIdentity {
    /// What the request's identity headers say; nothing, unless the request proves it came
    /// through the proxy.
    pub fn credential(&self, headers: &HeaderMap) -> Credential {
        if !self.secret.proven_by(headers) {
            return Credential::Missing;
        }
        forwarded_credential(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn reads_what_the_proxy_writes() {
        assert_eq!(forwarded_credential(&HeaderMap::new()), Credential::Missing);
        let Credential::Checked(c) = forwarded_credential(&headers(&[
            ("x-auth-username", "jos%C3%A9"),
            ("x-auth-scope", "read write"),
            ("x-auth-expires", "1700000000"),
        ])) else {
            panic!("not checked")
        };
        assert_eq!(c.username.as_deref(), Some("josé"));
        assert!(c.has_scope("write"));
        assert_eq!(c.exp, Some(1_700_000_000));
        assert_eq!(
            forwarded_credential(&headers(&[("x-auth-scope", "a"), ("x-auth-scope", "b")])),
            Credential::Malformed(REPEATED)
        );
        assert_eq!(
            forwarded_credential(&headers(&[("x-auth-username", "a b")])),
            Credential::Malformed(NOT_ENCODED)
        );
        assert_eq!(
            forwarded_credential(&headers(&[("x-auth-expires", "soon")])),
            Credential::Malformed(BAD_EXPIRES)
        );
    }

    #[test]
    fn nothing_is_believed_without_the_proxy_secret() {
        let secret = ProxySecret::new(&"s".repeat(40)).unwrap();
        let forwarded = ForwardedIdentity {
            leeway: Duration::ZERO,
            secret: secret.clone(),
        };
        let identity = [("x-auth-username", "root"), ("x-auth-scope", "write")];
        assert_eq!(
            forwarded.credential(&headers(&identity)),
            Credential::Missing
        );
        let wrong = "t".repeat(40);
        let short = "s".repeat(39);
        let long = "s".repeat(41);
        let right = "s".repeat(40);
        for bad in [&wrong, &short, &long] {
            let h = headers(&[identity[0], identity[1], (PROXY_SECRET_HEADER, bad)]);
            assert_eq!(forwarded.credential(&h), Credential::Missing, "{bad}");
        }
        let twice = headers(&[
            identity[0],
            (PROXY_SECRET_HEADER, &right),
            (PROXY_SECRET_HEADER, &right),
        ]);
        assert_eq!(forwarded.credential(&twice), Credential::Missing);
        let h = headers(&[identity[0], identity[1], (PROXY_SECRET_HEADER, &right)]);
        assert!(matches!(forwarded.credential(&h), Credential::Checked(_)));
        assert!(!format!("{forwarded:?}").contains("sss"));
        assert!(ProxySecret::new("short").is_err());
        assert!(ProxySecret::new(&format!("{}\u{e9}", "s".repeat(40))).is_err());
    }
}
