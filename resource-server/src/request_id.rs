//! The request id, as Envoy keeps it: a client's `X-Request-Id` is kept when its peer is trusted
//! (the proxy's `trusted_peers:`, the authorization server's trusted proxies: an ingress or a
//! proxy that sets or checks it) and well formed; otherwise a random one (a UUID v4) is made. It
//! is written in the request's access line, and the proxy sends it upstream in `X-Request-Id`,
//! replacing whatever the client sent.

use http::{HeaderMap, HeaderValue};
use rand::RngCore;

/// The header that carries the id, to the proxy and to the upstream.
pub const X_REQUEST_ID: &str = "x-request-id";

/// The longest id kept from a trusted peer (Envoy's UUIDs are 36; some gateways use 64).
const MAX_LEN: usize = 128;

/// The request's id: the one `X-Request-Id` of `headers` when `trusted` and it is 1 to
/// [`MAX_LEN`] visible ASCII characters, else a new one.
pub fn of(headers: &HeaderMap, trusted: bool) -> HeaderValue {
    let mut sent = headers.get_all(X_REQUEST_ID).iter();
    match (trusted, sent.next(), sent.next()) {
        (true, Some(id), None) if well_formed(id) => id.clone(),
        _ => generate(),
    }
}

fn well_formed(id: &HeaderValue) -> bool {
    let bytes = id.as_bytes();
    (1..=MAX_LEN).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// A random UUID v4 (`8-4-4-4-12` hex digits), written into one buffer: every request without a
/// trusted id makes one.
pub fn generate() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut id = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        id[at] = HEX[usize::from(byte >> 4)];
        id[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(ids: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for id in ids {
            h.append(X_REQUEST_ID, HeaderValue::from_str(id).unwrap());
        }
        h
    }

    fn is_uuid(v: &HeaderValue) -> bool {
        let s = v.to_str().unwrap();
        let parts: Vec<usize> = s.split('-').map(str::len).collect();
        parts == [8, 4, 4, 4, 12] && s.as_bytes()[14] == b'4'
    }

    #[test]
    fn kept_from_a_trusted_peer_only_and_only_when_well_formed() {
        assert_eq!(of(&headers(&["abc-123"]), true), "abc-123");
        assert!(is_uuid(&of(&headers(&["abc-123"]), false)));
        assert!(is_uuid(&of(&headers(&[]), true)));
        assert!(is_uuid(&of(&headers(&["a", "b"]), true)));
        assert!(is_uuid(&of(&headers(&["has space"]), true)));
        assert!(is_uuid(&of(&headers(&[&"x".repeat(129)]), true)));
        assert_ne!(generate(), generate());
    }
}
