//! Behind-proxy mode: the caller's identity as the sidecar forwards it in `X-Auth-*` headers
//! ([`crate::identity`]), read back into claims so the same decision applies. Only for an API
//! that nothing but the proxy can reach.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use crate::claims::Claims;
use crate::gate::{Credential, TokenCheck};
use crate::identity::{IDENTITY_HEADERS, Identity, IdentityError};

/// An identity header sent more than once.
pub const REPEATED: &str = "Repeated identity header.";
/// An identity header the proxy would not have written.
pub const NOT_ENCODED: &str = "Identity header is not percent-encoded UTF-8.";
/// `X-Auth-Expires` that is not a number of seconds.
pub const BAD_EXPIRES: &str = "X-Auth-Expires is not a number of seconds.";

/// Trusts the proxy's identity headers; `X-Auth-Expires` is checked with `leeway`, which should
/// be the proxy's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardedIdentity {
    pub leeway: Duration,
}

/// What the identity headers say.
pub fn forwarded_credential(headers: &HeaderMap) -> Credential {
    let mut values: [Option<&[u8]>; 4] = [None; 4];
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
            token_type: Some("Bearer".into()),
            ..Claims::default()
        })),
        Err(IdentityError::Encoding) => Credential::Malformed(NOT_ENCODED),
        Err(IdentityError::Expires) => Credential::Malformed(BAD_EXPIRES),
    }
}

impl TokenCheck for ForwardedIdentity {
    async fn credential(&self, headers: &HeaderMap, _query: Option<&str>) -> Credential {
        forwarded_credential(headers)
    }

    fn leeway(&self) -> Duration {
        self.leeway
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
}
