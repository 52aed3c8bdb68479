//! `behind-proxy` mode: the caller's identity as the sidecar proxy forwards it in `X-Auth-*`
//! headers, turned back into introspection claims so the same decision applies.

use axum::http::HeaderMap;
use resource_server::{Claims, IDENTITY_HEADERS};

/// What the identity headers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// None of the headers: the proxy authenticated no one.
    Missing,
    /// An authenticated caller (the proxy only forwards active tokens).
    Identity(Claims),
    /// Headers the proxy would never send (repeated, not text, a non-numeric expiry).
    Malformed(&'static str),
}

pub const REPEATED: &str = "Repeated identity header.";
pub const NOT_TEXT: &str = "Identity header is not visible ASCII.";
pub const BAD_EXPIRES: &str = "X-Auth-Expires is not a number of seconds.";

/// Reads `X-Auth-Username`, `X-Auth-Client-Id`, `X-Auth-Scope` and `X-Auth-Expires`.
pub fn identity(headers: &HeaderMap) -> Forwarded {
    let mut values: [Option<String>; 4] = Default::default();
    for (slot, name) in values.iter_mut().zip(IDENTITY_HEADERS) {
        let mut all = headers.get_all(name).iter();
        let Some(first) = all.next() else { continue };
        if all.next().is_some() {
            return Forwarded::Malformed(REPEATED);
        }
        match first.to_str() {
            Ok(text) => *slot = Some(text.to_owned()),
            Err(_) => return Forwarded::Malformed(NOT_TEXT),
        }
    }
    if values.iter().all(Option::is_none) {
        return Forwarded::Missing;
    }
    let [username, client_id, scope, expires] = values;
    let exp = match expires.as_deref().map(|e| e.trim().parse::<i64>()) {
        None => None,
        Some(Ok(exp)) => Some(exp),
        Some(Err(_)) => return Forwarded::Malformed(BAD_EXPIRES),
    };
    Forwarded::Identity(Claims {
        active: true,
        scope,
        client_id,
        username,
        exp,
        token_type: Some("Bearer".into()),
        ..Claims::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn reads_the_four_headers() {
        let h = headers(&[
            ("x-auth-username", "alice"),
            ("X-Auth-Client-Id", "app"),
            ("x-auth-scope", "read write"),
            ("x-auth-expires", "1700000000"),
            ("authorization", "Bearer ignored"),
        ]);
        let Forwarded::Identity(c) = identity(&h) else {
            panic!("identity expected")
        };
        assert!(c.active);
        assert_eq!(c.username.as_deref(), Some("alice"));
        assert_eq!(c.client_id.as_deref(), Some("app"));
        assert_eq!(c.exp, Some(1_700_000_000));
        assert!(c.has_scope("read") && c.has_scope("write") && !c.has_scope("groups"));
    }

    #[test]
    fn missing_partial_and_malformed() {
        assert_eq!(
            identity(&headers(&[("authorization", "Bearer x")])),
            Forwarded::Missing
        );
        let Forwarded::Identity(c) = identity(&headers(&[("x-auth-scope", "")])) else {
            panic!()
        };
        assert_eq!(
            (c.username.as_deref(), c.exp, c.scopes().count()),
            (None, None, 0)
        );
        assert_eq!(
            identity(&headers(&[
                ("x-auth-scope", "read"),
                ("x-auth-scope", "groups")
            ])),
            Forwarded::Malformed(REPEATED)
        );
        assert_eq!(
            identity(&headers(&[
                ("x-auth-scope", "read"),
                ("x-auth-expires", "soon")
            ])),
            Forwarded::Malformed(BAD_EXPIRES)
        );
        let mut h = HeaderMap::new();
        h.insert(
            "x-auth-username",
            HeaderValue::from_bytes(b"\xffbad").unwrap(),
        );
        assert_eq!(identity(&h), Forwarded::Malformed(NOT_TEXT));
    }
}
