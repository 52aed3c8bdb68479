//! The caller's identity as forwarded upstream in `X-Auth-*` headers, and the lossless encoding
//! of its values: UTF-8, percent-encoded ([`encode`]), read back by [`Identity::from_header_values`].
//!
//! `X-Auth-Username` and `X-Auth-Client-Id` carry [`encode`]d text; `X-Auth-Scope` the granted
//! scopes, each [`encode`]d, separated by one space; `X-Auth-Expires` unix seconds in decimal;
//! `X-Auth-Groups` (only when the token names groups) the user's groups as the scopes are.
//! Plain ASCII names without `%` or spaces are sent as they are.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};

/// The latest time accepted in `exp`, `iat` and `nbf` (of a token, and in `X-Auth-Expires`):
/// 9999-12-31T23:59:59Z, unix seconds.
pub const MAX_TIME: i64 = 253_402_300_799;

/// The request headers that carry the caller's identity upstream (lower case). A proxy removes
/// any the client sent before setting its own.
pub const IDENTITY_HEADERS: [&str; 5] = [
    "x-auth-username",
    "x-auth-client-id",
    "x-auth-scope",
    "x-auth-expires",
    "x-auth-groups",
];

/// The caller, as forwarded upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub username: Option<String>,
    pub client_id: Option<String>,
    /// Granted scopes, separated by one space (empty when the token has none).
    pub scope: String,
    /// Expiry, unix seconds.
    pub exp: Option<i64>,
    /// The user's groups (the token's `groups`), in its order; empty: none named.
    pub groups: Vec<String>,
}

/// An [`Identity`] with its headers encoded once, as [`HeaderValue`]s (cloned by reference
/// count): what a token's [`crate::claims::Claims`] keep
/// ([`crate::claims::Claims::identity`]), so that a cached token costs
/// each request it allows no encoding.
#[derive(Debug, PartialEq, Eq)]
pub struct EncodedIdentity {
    pub identity: Identity,
    /// [`Identity::headers`], in its order: each name as written (lower case) and made into a
    /// [`HeaderName`] once (a clone is a copy: no parse, no allocation per request), its value.
    pub headers: Vec<(&'static str, HeaderName, HeaderValue)>,
}

impl std::ops::Deref for EncodedIdentity {
    type Target = Identity;

    fn deref(&self) -> &Identity {
        &self.identity
    }
}

/// Identity headers that [`Identity::headers`] would never have written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("an identity header is not percent-encoded UTF-8")]
    Encoding,
    #[error("X-Auth-Expires is not a number of seconds")]
    Expires,
}

impl Identity {
    /// The `X-Auth-*` pairs (names from [`IDENTITY_HEADERS`]) for the values that are known, each
    /// a valid header value; `x-auth-scope` is always present (possibly empty).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let [username, client_id, scope, expires, groups] = IDENTITY_HEADERS;
        let mut out = Vec::with_capacity(5);
        out.extend(self.username.as_deref().map(|u| (username, encode(u))));
        out.extend(self.client_id.as_deref().map(|c| (client_id, encode(c))));
        out.push((
            scope,
            join_scopes(self.scope.split_whitespace(), encode_into),
        ));
        out.extend(self.exp.map(|e| (expires, e.to_string())));
        if !self.groups.is_empty() {
            let names = self.groups.iter().map(String::as_str);
            out.push((groups, join_scopes(names, encode_into)));
        }
        out
    }

    /// This identity with its [`Identity::headers`] encoded as header values.
    pub fn encoded(self) -> Arc<EncodedIdentity> {
        let headers = self
            .headers()
            .into_iter()
            .map(|(name, value)| {
                // `encode` writes visible ASCII, joined by spaces; `exp` is decimal digits.
                let value = HeaderValue::try_from(value).expect("identity headers are valid");
                (name, HeaderName::from_static(name), value)
            })
            .collect();
        Arc::new(EncodedIdentity {
            identity: self,
            headers,
        })
    }

    /// Reads back what [`Identity::headers`] wrote: `values` in the order of
    /// [`IDENTITY_HEADERS`], `None` for an absent header.
    pub fn from_header_values(values: [Option<&[u8]>; 5]) -> Result<Identity, IdentityError> {
        let [username, client_id, scope, expires, groups] = values;
        let text = |v: Option<&[u8]>| v.map(|v| decode(v).ok_or(IdentityError::Encoding));
        Ok(Identity {
            username: text(username).transpose()?,
            client_id: text(client_id).transpose()?,
            scope: scope.map_or(Ok(String::new()), decode_scope)?,
            exp: expires.map(decode_expires).transpose()?,
            groups: groups.map_or(Ok(Vec::new()), decode_groups)?,
        })
    }
}

/// The scopes, each written by `write`, separated by one space.
pub(crate) fn join_scopes<'a>(
    scopes: impl Iterator<Item = &'a str>,
    write: impl Fn(&mut String, &'a str),
) -> String {
    let mut out = String::new();
    for s in scopes {
        if !out.is_empty() {
            out.push(' ');
        }
        write(&mut out, s);
    }
    out
}

/// Whether `b` is sent as it is by [`encode`].
fn is_plain(b: u8) -> bool {
    (0x21..=0x7E).contains(&b) && b != b'%'
}

/// Percent-encodes (UTF-8, upper-case hex) every byte outside `0x21..=0x7E`, and `%` itself.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    encode_into(&mut out, value);
    out
}

/// [`encode`], appended to `out`.
fn encode_into(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    // The usual case (plain ASCII names) in one copy.
    if value.bytes().all(is_plain) {
        out.push_str(value);
        return;
    }
    for &b in value.as_bytes() {
        if is_plain(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

/// The text [`encode`] made: visible ASCII where `%` starts two hex digits (either case), UTF-8
/// once decoded. `None` for anything else (a space, a control or non-ASCII byte, a bad escape).
pub fn decode(value: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(value.len());
    let mut rest = value;
    while let [b, tail @ ..] = rest {
        rest = tail;
        match b {
            b'%' => {
                let [hi, lo, tail @ ..] = rest else {
                    return None;
                };
                let digit = |c: &u8| char::from(*c).to_digit(16);
                out.push(u8::try_from(digit(hi)? * 16 + digit(lo)?).ok()?);
                rest = tail;
            }
            0x21..=0x7E => out.push(*b),
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// Scopes separated by single spaces, each [`decode`]d into a non-empty scope without whitespace.
fn decode_scope(value: &[u8]) -> Result<String, IdentityError> {
    if value.is_empty() {
        return Ok(String::new());
    }
    let scopes = value
        .split(|&b| b == b' ')
        .map(|part| {
            decode(part)
                .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
                .ok_or(IdentityError::Encoding)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(scopes.join(" "))
}

/// Group names separated by single spaces, each [`decode`]d into a non-empty name (which may
/// hold spaces).
fn decode_groups(value: &[u8]) -> Result<Vec<String>, IdentityError> {
    value
        .split(|&b| b == b' ')
        .map(|part| {
            decode(part)
                .filter(|s| !s.is_empty())
                .ok_or(IdentityError::Encoding)
        })
        .collect()
}

/// Decimal digits only, from 0 to [`MAX_TIME`].
fn decode_expires(value: &[u8]) -> Result<i64, IdentityError> {
    std::str::from_utf8(value)
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|e| *e <= MAX_TIME)
        .ok_or(IdentityError::Expires)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn round_trip(id: &Identity) -> Identity {
        let headers = id.headers();
        for (name, value) in &headers {
            assert!(IDENTITY_HEADERS.contains(name));
            assert!(
                http::HeaderValue::from_str(value).is_ok(),
                "{name}: {value:?}"
            );
        }
        let get = |n: &str| {
            headers
                .iter()
                .find(|(name, _)| *name == n)
                .map(|(_, v)| v.as_bytes())
        };
        Identity::from_header_values(IDENTITY_HEADERS.map(get)).expect("reads back")
    }

    #[test]
    fn ascii_names_are_unchanged() {
        let id = Identity {
            username: Some("alice".into()),
            client_id: Some("app-1_x.y~z".into()),
            scope: "read write".into(),
            exp: Some(NOW),
            groups: Vec::new(),
        };
        assert_eq!(
            id.headers(),
            vec![
                ("x-auth-username", "alice".to_owned()),
                ("x-auth-client-id", "app-1_x.y~z".to_owned()),
                ("x-auth-scope", "read write".to_owned()),
                ("x-auth-expires", NOW.to_string()),
            ]
        );
        assert_eq!(
            Identity::default().headers(),
            vec![("x-auth-scope", String::new())]
        );
        assert_eq!(round_trip(&id), id);
        assert_eq!(round_trip(&Identity::default()), Identity::default());
    }

    #[test]
    fn encoding() {
        assert_eq!(encode("josé"), "jos%C3%A9");
        assert_eq!(encode("日本"), "%E6%97%A5%E6%9C%AC");
        assert_eq!(encode("🦀"), "%F0%9F%A6%80");
        assert_eq!(encode("100%"), "100%25");
        assert_eq!(encode("a b"), "a%20b");
        assert_eq!(encode("a\r\nX-Evil: 1"), "a%0D%0AX-Evil:%201");
        assert_eq!(encode("\u{7f}\0\t"), "%7F%00%09");
        assert_eq!(encode(""), "");
    }

    #[test]
    fn non_ascii_names_round_trip() {
        for name in [
            "josé",
            "日本",
            "🦀 crab",
            "100%",
            "%25",
            "a b  c ",
            "a\r\nX-Evil: 1",
            "\u{0}\u{7f}\u{85}",
            "",
        ] {
            let id = Identity {
                username: Some(name.into()),
                client_id: Some(format!("client {name}")),
                scope: "read".into(),
                exp: Some(NOW),
                groups: vec![name.to_owned()]
                    .into_iter()
                    .filter(|g| !g.is_empty())
                    .collect(),
            };
            assert_eq!(round_trip(&id), id, "{name:?}");
            assert_eq!(decode(encode(name).as_bytes()).as_deref(), Some(name));
        }
    }

    #[test]
    fn groups_are_sent_when_named_and_encoded_one_by_one() {
        let id = Identity {
            groups: vec!["admins".into(), "ops team".into(), "é".into()],
            ..Identity::default()
        };
        assert_eq!(
            id.headers(),
            vec![
                ("x-auth-scope", String::new()),
                ("x-auth-groups", "admins ops%20team %C3%A9".to_owned())
            ]
        );
        assert_eq!(round_trip(&id), id);
        let read =
            |groups: &[u8]| Identity::from_header_values([None, None, None, None, Some(groups)]);
        assert_eq!(read(b"a  b"), Err(IdentityError::Encoding));
        assert_eq!(
            read(b"a b c"),
            Ok(Identity {
                groups: vec!["a".into(), "b".into(), "c".into()],
                ..Identity::default()
            })
        );
    }

    #[test]
    fn scopes_are_encoded_one_by_one() {
        let id = Identity {
            scope: "read é 100% x\u{1}".into(),
            ..Identity::default()
        };
        assert_eq!(
            id.headers(),
            vec![("x-auth-scope", "read %C3%A9 100%25 x%01".to_owned())]
        );
        assert_eq!(round_trip(&id), id);
    }

    #[test]
    fn decoding_refuses_what_encode_never_writes() {
        assert_eq!(decode(b"jos%c3%a9").as_deref(), Some("josé"));
        for bad in [
            &b"a b"[..],
            b"caf\xc3\xa9",
            b"%",
            b"%4",
            b"%zz",
            b"%C3",
            b"%FF",
            b"a\tb",
            b"\x7f",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        let read = |scope: &[u8], exp: &[u8]| {
            Identity::from_header_values([None, None, Some(scope), Some(exp), None])
        };
        assert_eq!(read(b"a  b", b"1"), Err(IdentityError::Encoding));
        assert_eq!(read(b" a", b"1"), Err(IdentityError::Encoding));
        assert_eq!(read(b"a%20b", b"1"), Err(IdentityError::Encoding));
        assert_eq!(read(b"a", b"-1"), Err(IdentityError::Expires));
        assert_eq!(read(b"a", b" 1"), Err(IdentityError::Expires));
        assert_eq!(read(b"a", b"253402300800"), Err(IdentityError::Expires));
        assert_eq!(
            read(b"a", b"99999999999999999999"),
            Err(IdentityError::Expires)
        );
        assert_eq!(read(b"a", b""), Err(IdentityError::Expires));
        assert_eq!(
            read(b"a", b"253402300799").map(|i| i.exp),
            Ok(Some(MAX_TIME))
        );
    }
}
