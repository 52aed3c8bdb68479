//! RFC 6750 bearer token extraction from the `Authorization` header (and refusal of query tokens).

use http::HeaderMap;
use http::header::AUTHORIZATION;

/// What a request says about its bearer token.
#[derive(Clone, PartialEq, Eq)]
pub enum Bearer {
    /// No `Authorization` header, or one with another scheme (e.g. `Basic`).
    Missing,
    /// `Authorization: Bearer <token>` with a syntactically valid token (RFC 6750 §2.1 `b64token`).
    Token(String),
    /// A bearer credential that cannot be used; the text is safe to show to the client.
    Malformed(&'static str),
}

// Never print the token itself.
impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bearer::Missing => f.write_str("Missing"),
            Bearer::Token(t) => {
                let id = crate::token_log_id(t);
                write!(f, "Token(sha256:{id}…)")
            }
            Bearer::Malformed(r) => f.debug_tuple("Malformed").field(r).finish(),
        }
    }
}

/// Reason given when the request carries more than one `Authorization` header.
pub const MULTIPLE_HEADERS: &str = "More than one Authorization header.";
/// Reason given for `Authorization: Bearer` with nothing after it.
pub const EMPTY_TOKEN: &str = "Empty bearer token.";
/// Reason given for a token with characters outside RFC 6750's `b64token`, or a non-ASCII header.
pub const MALFORMED_TOKEN: &str = "Malformed bearer token.";
/// Reason given for `access_token` in the query string (RFC 6750 §2.3 is not supported).
pub const QUERY_TOKEN: &str = "Access tokens in the query string are not accepted.";
/// Reason given for a token longer than [`MAX_TOKEN_LEN`].
pub const TOO_LONG_TOKEN: &str = "Bearer token too long.";

/// The longest token read (bytes): far beyond any access token, it keeps absurd ones from being
/// hashed or sent to the authorization server.
pub const MAX_TOKEN_LEN: usize = 4096;

/// `Authorization: Bearer <t>` (scheme case-insensitive). Two Authorization headers, an empty
/// token, one over [`MAX_TOKEN_LEN`] bytes, or an `access_token` in the query string => Malformed. Another scheme (e.g. Basic) =>
/// Missing. `query` is the raw query string without the `?`.
pub fn bearer_token(headers: &HeaderMap, query: Option<&str>) -> Bearer {
    if query.is_some_and(query_has_access_token) {
        return Bearer::Malformed(QUERY_TOKEN);
    }
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Bearer::Missing;
    };
    if values.next().is_some() {
        return Bearer::Malformed(MULTIPLE_HEADERS);
    }
    let bytes = trim_spaces(value.as_bytes());
    let (scheme, rest) = match bytes.iter().position(|&b| b == b' ') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &b""[..]),
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Bearer::Missing;
    }
    let token = trim_spaces(rest);
    if token.is_empty() {
        return Bearer::Malformed(EMPTY_TOKEN);
    }
    if token.len() > MAX_TOKEN_LEN {
        return Bearer::Malformed(TOO_LONG_TOKEN);
    }
    if !is_b64token(token) {
        return Bearer::Malformed(MALFORMED_TOKEN);
    }
    // `is_b64token` admits ASCII only, so this conversion cannot fail.
    match std::str::from_utf8(token) {
        Ok(t) => Bearer::Token(t.to_owned()),
        Err(_) => Bearer::Malformed(MALFORMED_TOKEN),
    }
}

fn trim_spaces(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

/// RFC 6750 §2.1: `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`
fn is_b64token(t: &[u8]) -> bool {
    let body_len = t.len() - t.iter().rev().take_while(|&&b| b == b'=').count();
    body_len > 0 && t[..body_len].iter().all(|&b| B64TOKEN[usize::from(b)])
}

/// The `b64token` body characters, as a table: one load per byte of every token read.
static B64TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] =
            c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b'+' | b'/');
        b += 1;
    }
    table
};

fn query_has_access_token(query: &str) -> bool {
    query
        .split(['&', ';'])
        .map(|pair| pair.split('=').next().unwrap_or(""))
        .any(|key| percent_decode(key) == b"access_token")
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_auth(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                AUTHORIZATION,
                HeaderValue::from_bytes(v).expect("valid header"),
            );
        }
        h
    }

    fn tok(t: &str) -> Bearer {
        Bearer::Token(t.to_owned())
    }

    #[test]
    fn no_header_is_missing() {
        assert_eq!(bearer_token(&HeaderMap::new(), None), Bearer::Missing);
        assert_eq!(
            bearer_token(&HeaderMap::new(), Some("a=b&c")),
            Bearer::Missing
        );
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            let h = with_auth(&[format!("{scheme} abc.DEF-123_~+/==").as_bytes()]);
            assert_eq!(bearer_token(&h, None), tok("abc.DEF-123_~+/=="), "{scheme}");
        }
    }

    #[test]
    fn extra_spaces_are_tolerated() {
        assert_eq!(
            bearer_token(&with_auth(&[b"Bearer   abc  "]), None),
            tok("abc")
        );
    }

    #[test]
    fn other_schemes_are_missing() {
        for v in [
            &b"Basic dXNlcjpwYXNz"[..],
            b"Token abc",
            b"Bearerabc",
            b"",
            b"Digest x=y",
        ] {
            assert_eq!(
                bearer_token(&with_auth(&[v]), None),
                Bearer::Missing,
                "{v:?}"
            );
        }
    }

    #[test]
    fn empty_token_is_malformed() {
        for v in [&b"Bearer"[..], b"Bearer ", b"bearer    "] {
            assert_eq!(
                bearer_token(&with_auth(&[v]), None),
                Bearer::Malformed(EMPTY_TOKEN)
            );
        }
    }

    #[test]
    fn bad_characters_are_malformed() {
        for v in [
            &b"Bearer a b"[..],
            b"Bearer a,b",
            b"Bearer ===",
            b"Bearer a=b",
            b"Bearer \"x\"",
            b"Bearer \xc3\xa9t\xc3\xa9",
        ] {
            assert_eq!(
                bearer_token(&with_auth(&[v]), None),
                Bearer::Malformed(MALFORMED_TOKEN),
                "{v:?}"
            );
        }
    }

    #[test]
    fn absurdly_long_tokens_are_malformed() {
        let longest = "a".repeat(MAX_TOKEN_LEN);
        let h = with_auth(&[format!("Bearer {longest}").as_bytes()]);
        assert_eq!(bearer_token(&h, None), tok(&longest));
        for len in [MAX_TOKEN_LEN + 1, 1 << 20] {
            let h = with_auth(&[format!("Bearer {}", "a".repeat(len)).as_bytes()]);
            assert_eq!(bearer_token(&h, None), Bearer::Malformed(TOO_LONG_TOKEN));
        }
        // Checked before the characters: a long token of bad characters is still too long.
        let h = with_auth(&[format!("Bearer {}", ",".repeat(MAX_TOKEN_LEN + 1)).as_bytes()]);
        assert_eq!(bearer_token(&h, None), Bearer::Malformed(TOO_LONG_TOKEN));
    }

    #[test]
    fn two_headers_are_malformed() {
        let h = with_auth(&[b"Bearer a", b"Bearer b"]);
        assert_eq!(bearer_token(&h, None), Bearer::Malformed(MULTIPLE_HEADERS));
        let h = with_auth(&[b"Basic x", b"Bearer b"]);
        assert_eq!(bearer_token(&h, None), Bearer::Malformed(MULTIPLE_HEADERS));
    }

    #[test]
    fn query_token_is_malformed() {
        for q in [
            "access_token=abc",
            "a=1&access_token=abc",
            "access_token",
            "x=1;access_token=",
            "access%5Ftoken=x",
            "access%5ftoken",
        ] {
            assert_eq!(
                bearer_token(&HeaderMap::new(), Some(q)),
                Bearer::Malformed(QUERY_TOKEN),
                "{q}"
            );
            assert_eq!(
                bearer_token(&with_auth(&[b"Bearer a"]), Some(q)),
                Bearer::Malformed(QUERY_TOKEN),
                "{q}"
            );
        }
        for q in [
            "",
            "my_access_token=1",
            "x=access_token",
            "access_tokens=1",
            "%",
            "%zz",
            "a%5",
        ] {
            assert_eq!(
                bearer_token(&with_auth(&[b"Bearer a"]), Some(q)),
                tok("a"),
                "{q}"
            );
        }
    }

    #[test]
    fn debug_does_not_print_the_token() {
        let s = format!("{:?}", tok("supersecret"));
        assert!(!s.contains("supersecret"), "{s}");
        assert!(s.starts_with("Token(sha256:"), "{s}");
    }
}
