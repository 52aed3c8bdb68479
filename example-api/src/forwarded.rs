//! `behind-proxy` mode: the caller's identity as the sidecar proxy forwards it in `X-Auth-*`
//! headers (percent-encoded UTF-8, see `resource_server::identity`), turned back into
//! introspection claims so the same decision applies.

use axum::http::HeaderMap;
use resource_server::identity::IdentityError;
use resource_server::{Claims, IDENTITY_HEADERS, Identity};

/// What the identity headers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// None of the headers: the proxy authenticated no one.
    Missing,
    /// An authenticated caller (the proxy only forwards active tokens).
    Identity(Box<Claims>),
    /// Headers the proxy would never send (repeated, not percent-encoded UTF-8, a non-numeric
    /// expiry).
    Malformed(&'static str),
}

pub const REPEATED: &str = "Repeated identity header.";
pub const NOT_ENCODED: &str = "Identity header is not percent-encoded UTF-8.";
pub const BAD_EXPIRES: &str = "X-Auth-Expires is not a number of seconds.";

/// Reads `X-Auth-Username`, `X-Auth-Client-Id`, `X-Auth-Scope` and `X-Auth-Expires`.
pub fn identity(headers: &HeaderMap) -> Forwarded {
    let mut values: [Option<&[u8]>; 4] = [None; 4];
    for (slot, name) in values.iter_mut().zip(IDENTITY_HEADERS) {
        let mut all = headers.get_all(name).iter();
        let Some(first) = all.next() else { continue };
        if all.next().is_some() {
            return Forwarded::Malformed(REPEATED);
        }
        *slot = Some(first.as_bytes());
    }
    if values.iter().all(Option::is_none) {
        return Forwarded::Missing;
    }
    let scope_sent = values[2].is_some();
    match Identity::from_header_values(values) {
        Ok(id) => Forwarded::Identity(Box::new(Claims {
            active: true,
            scope: scope_sent.then_some(id.scope),
            client_id: id.client_id,
            username: id.username,
            exp: id.exp,
            token_type: Some("Bearer".into()),
            ..Claims::default()
        })),
        Err(IdentityError::Encoding) => Forwarded::Malformed(NOT_ENCODED),
        Err(IdentityError::Expires) => Forwarded::Malformed(BAD_EXPIRES),
    }
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

    /// What the proxy sends for these names reads back as the same names.
    #[test]
    fn non_ascii_names_round_trip_from_the_proxys_headers() {
        for name in [
            "josé",
            "日本",
            "🦀",
            "100%",
            "ann marie",
            "a\r\nX-Evil: 1",
            "%41",
        ] {
            let sent = Identity {
                username: Some(name.into()),
                client_id: Some(format!("app {name}")),
                scope: "read é".into(),
                exp: Some(1_700_000_000),
            };
            let mut h = HeaderMap::new();
            for (k, v) in sent.headers() {
                h.append(k, HeaderValue::from_str(&v).unwrap());
            }
            let Forwarded::Identity(c) = identity(&h) else {
                panic!("{name:?}: identity expected")
            };
            assert_eq!(c.username.as_deref(), Some(name));
            assert_eq!(c.client_id, Some(format!("app {name}")));
            assert_eq!(c.scopes().collect::<Vec<_>>(), ["read", "é"]);
            assert_eq!(Identity::from_claims(&c), sent);
        }
        let h = headers(&[("x-auth-username", "jos%C3%A9"), ("x-auth-scope", "read")]);
        let Forwarded::Identity(c) = identity(&h) else {
            panic!()
        };
        assert_eq!(c.username.as_deref(), Some("josé"));
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
        let Forwarded::Identity(c) = identity(&headers(&[("x-auth-username", "bob")])) else {
            panic!()
        };
        assert_eq!((c.username.as_deref(), c.scope), (Some("bob"), None));
        assert_eq!(
            identity(&headers(&[
                ("x-auth-scope", "read"),
                ("x-auth-scope", "groups")
            ])),
            Forwarded::Malformed(REPEATED)
        );
        for exp in ["soon", "-1", "1e9", "253402300800"] {
            assert_eq!(
                identity(&headers(&[
                    ("x-auth-scope", "read"),
                    ("x-auth-expires", exp)
                ])),
                Forwarded::Malformed(BAD_EXPIRES),
                "{exp}"
            );
        }
        for (name, value) in [
            ("x-auth-username", "jos%C3"),
            ("x-auth-username", "100%"),
            ("x-auth-username", "a%zz"),
            ("x-auth-username", "ann marie"),
            ("x-auth-client-id", "%FF"),
            ("x-auth-scope", "read  write"),
            ("x-auth-scope", "read%20write"),
        ] {
            assert_eq!(
                identity(&headers(&[(name, value)])),
                Forwarded::Malformed(NOT_ENCODED),
                "{name}: {value}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert(
            "x-auth-username",
            HeaderValue::from_bytes(b"jos\xc3\xa9").unwrap(),
        );
        assert_eq!(identity(&h), Forwarded::Malformed(NOT_ENCODED));
    }
}
