//! Which client-sent headers may never reach an upstream: the identity headers the proxy sets,
//! and the `X-Tokengate-*` namespace (the proxy's secret, by which upstreams tell it apart).

use http::{HeaderMap, HeaderName};
use resource_server::IDENTITY_HEADERS;

/// Whether `name` is (or could be read by an upstream as) one of the proxy's identity headers:
/// any of [`IDENTITY_HEADERS`] or anything in the `X-Auth-` or `X-Tokengate-` namespaces, in any
/// case, with `_` in place of `-` too (CGI-style servers map both to the same variable).
/// (Asked for every header of every request: compares in place, no allocation.)
pub fn is_identity_header(name: &str) -> bool {
    let name = name.as_bytes();
    starts_with_normalized(name, b"x-auth-")
        || starts_with_normalized(name, b"x-tokengate-")
        || IDENTITY_HEADERS
            .iter()
            .any(|h| h.len() == name.len() && starts_with_normalized(name, h.as_bytes()))
}

/// Whether `name`, lower-cased and with `_` read as `-`, starts with `prefix` (lower case).
fn starts_with_normalized(name: &[u8], prefix: &[u8]) -> bool {
    name.len() >= prefix.len()
        && name.iter().zip(prefix).all(|(&n, &p)| {
            let n = if n == b'_' {
                b'-'
            } else {
                n.to_ascii_lowercase()
            };
            n == p
        })
}

/// The distinct header names in `headers` that `strip` selects (each to be removed with all its
/// values).
pub fn names_to_strip(headers: &HeaderMap, strip: impl Fn(&str) -> bool) -> Vec<HeaderName> {
    let mut out: Vec<HeaderName> = Vec::new();
    for name in headers.keys() {
        if strip(name.as_str()) && !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_headers_in_every_spelling() {
        for h in IDENTITY_HEADERS {
            assert!(is_identity_header(h));
            assert!(is_identity_header(&h.to_ascii_uppercase()));
            assert!(is_identity_header(&h.replace('-', "_")));
        }
        assert!(is_identity_header("X-Auth-Anything"));
        // The proxy's secret, in any spelling a client might send it.
        for h in [
            "X-Tokengate-Proxy-Secret",
            "x_tokengate_proxy_secret",
            "X-TOKENGATE-X",
        ] {
            assert!(is_identity_header(h), "{h}");
        }
        assert!(!is_identity_header("x-tokengates"));
        assert!(!is_identity_header("x-authorization"));
        assert!(!is_identity_header("authorization"));
        assert!(!is_identity_header("x-request-id"));
    }

    #[test]
    fn every_occurrence_once() {
        let mut h = HeaderMap::new();
        h.append("x-auth-username", "a".parse().unwrap());
        h.append("x-auth-username", "b".parse().unwrap());
        h.append("x_auth_scope", "c".parse().unwrap());
        h.append("accept", "d".parse().unwrap());
        let names = names_to_strip(&h, is_identity_header);
        assert_eq!(names.len(), 2);
        for n in names {
            h.remove(&n);
        }
        assert_eq!(h.len(), 1);
    }
}
