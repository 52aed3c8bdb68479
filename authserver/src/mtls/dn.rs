//! Distinguished names for `tls_client_auth` by subject (RFC 8705 §2.1.2): the registered
//! RFC 4514 text and a certificate's subject, compared as RFC 4517 `distinguishedNameMatch`
//! does (attribute types by OID, values ignoring case and insignificant spaces, RFC 4518).

use x509_parser::x509::X509Name;

/// One attribute: its type's dotted OID and its normalized value.
type Ava = (String, String);

/// A distinguished name: its RDNs in order, each a sorted set of attributes (a multi-valued
/// RDN, `CN=a+UID=b`, is one set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dn(Vec<Vec<Ava>>);

/// The attribute type names understood in registrations (RFC 4514 §3 and the usual others),
/// upper-case, with their OIDs; any other type is written as its dotted OID.
const NAMES: [(&str, &str); 16] = [
    ("CN", "2.5.4.3"),
    ("SN", "2.5.4.4"),
    ("SURNAME", "2.5.4.4"),
    ("SERIALNUMBER", "2.5.4.5"),
    ("C", "2.5.4.6"),
    ("L", "2.5.4.7"),
    ("ST", "2.5.4.8"),
    ("STREET", "2.5.4.9"),
    ("O", "2.5.4.10"),
    ("OU", "2.5.4.11"),
    ("TITLE", "2.5.4.12"),
    ("GIVENNAME", "2.5.4.42"),
    ("DC", "0.9.2342.19200300.100.1.25"),
    ("UID", "0.9.2342.19200300.100.1.1"),
    ("EMAILADDRESS", "1.2.840.113549.1.9.1"),
    ("E", "1.2.840.113549.1.9.1"),
];

/// The OID of an attribute type as written: a known name (any case) or a dotted OID.
fn attribute_oid(written: &str) -> Result<String, String> {
    let name = written.trim();
    let numeric = !name.is_empty()
        && name
            .split('.')
            .all(|arc| !arc.is_empty() && arc.bytes().all(|b| b.is_ascii_digit()));
    if numeric && name.contains('.') {
        return Ok(name.to_owned());
    }
    let upper = name.to_ascii_uppercase();
    NAMES
        .iter()
        .find(|(n, _)| *n == upper)
        .map(|(_, oid)| (*oid).to_owned())
        .ok_or_else(|| {
            format!(
                "unknown attribute type {name:?} in the subject DN: use CN, O, OU, C, ST, L, \
                 STREET, DC, UID, SERIALNUMBER, TITLE, SN, GIVENNAME, EMAILADDRESS or a dotted OID"
            )
        })
}

/// A value as compared: case folded, leading and trailing spaces dropped, inner runs of
/// whitespace as one space (RFC 4518 §2.6.1, caseIgnoreMatch).
fn normalized(value: &str) -> String {
    value
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

impl Dn {
    /// Reads RFC 4514 text: RDNs separated by `,`, attributes of one RDN by `+`, special
    /// characters in values escaped with `\` (`\,`, `\+`, `\\`, `\"`, `\;`, `\<`, `\>`, `\#`,
    /// `\=`, `\ `) or as `\XX` hex UTF-8 bytes. Spaces around separators are tolerated.
    /// Hex-encoded values (`CN=#04…`) are refused, not guessed at.
    pub fn parse(text: &str) -> Result<Dn, String> {
        let mut rdns = Vec::new();
        let mut rdn: Vec<Ava> = Vec::new();
        let mut chars = text.chars();
        loop {
            let mut written_type = String::new();
            let mut found_equals = false;
            for c in chars.by_ref() {
                if c == '=' {
                    found_equals = true;
                    break;
                }
                written_type.push(c);
            }
            if !found_equals || written_type.contains([',', '+', '\\']) {
                return Err(format!(
                    "the subject DN {text:?} is not RFC 4514 TYPE=value parts separated by `,` \
                     (or `+` within one RDN): a `,` or `+` inside a value is written `\\,` or `\\+`"
                ));
            }
            let oid = attribute_oid(&written_type)?;
            let mut bytes: Vec<u8> = Vec::new();
            let mut end = None;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        match chars.next() {
                            Some(
                                s @ ('"' | '+' | ',' | ';' | '<' | '>' | '\\' | '#' | '=' | ' '),
                            ) => bytes.push(s as u8),
                            Some(h) if h.is_ascii_hexdigit() => {
                                let low = chars.next().filter(char::is_ascii_hexdigit).ok_or_else(
                                    || format!("{text:?}: `\\{h}` must be two hex digits"),
                                )?;
                                let pair: String = [h, low].iter().collect();
                                bytes.push(u8::from_str_radix(&pair, 16).expect("two hex digits"));
                            }
                            _ => {
                                return Err(format!(
                                    "{text:?}: a `\\` in a value escapes one of `\\,+\"#;<>= ` or \
                                 starts two hex digits"
                                ));
                            }
                        }
                    }
                    ',' | '+' => {
                        end = Some(c);
                        break;
                    }
                    '#' if bytes.iter().all(|b| *b == b' ') => {
                        return Err(format!(
                            "{text:?}: hex-encoded values (`#…`) are not supported; write the \
                             value as text (a leading `#` escaped as `\\#`)"
                        ));
                    }
                    '"' | ';' | '<' | '>' | '\0' => {
                        return Err(format!(
                            "{text:?}: `{}` in a value must be escaped (`\\{}`)",
                            c.escape_default(),
                            c.escape_default()
                        ));
                    }
                    c => {
                        let mut buffer = [0; 4];
                        bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                    }
                }
            }
            let value = String::from_utf8(bytes)
                .map_err(|_| format!("{text:?}: an escaped value is not UTF-8"))?;
            let value = normalized(&value);
            if value.is_empty() {
                return Err(format!(
                    "{text:?}: {} has an empty value",
                    written_type.trim()
                ));
            }
            rdn.push((oid, value));
            if end != Some('+') {
                rdn.sort();
                if rdn.windows(2).any(|w| w[0].0 == w[1].0) {
                    return Err(format!(
                        "{text:?}: an RDN names the same attribute type twice"
                    ));
                }
                rdns.push(std::mem::take(&mut rdn));
            }
            if end.is_none() {
                return Ok(Dn(rdns));
            }
        }
    }

    /// A certificate's subject (or issuer); `None` when a value is not a string type this
    /// server reads (such a name never matches).
    pub fn of_name(name: &X509Name<'_>) -> Option<Dn> {
        let mut rdns = Vec::new();
        for rdn in name.iter_rdn() {
            let mut set: Vec<Ava> = rdn
                .iter()
                .map(|ava| {
                    let value = ava.as_str().ok()?;
                    Some((ava.attr_type().to_id_string(), normalized(value)))
                })
                .collect::<Option<_>>()?;
            set.sort();
            rdns.push(set);
        }
        Some(Dn(rdns))
    }

    /// Whether the two name the same entry: the same RDNs, each with the same attributes, in
    /// the certificate's order or in RFC 4514's (the reverse).
    pub fn matches(&self, other: &Dn) -> bool {
        self.0 == other.0 || self.0.iter().eq(other.0.iter().rev())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dn(text: &str) -> Dn {
        Dn::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn equal_names_in_any_spelling_match() {
        for (a, b) in [
            ("CN=app,O=Example", "cn=app, o=Example"),
            ("CN=app,O=Example", "O=Example,CN=app"),
            ("CN=app,O=Example", "CN=APP,O=example"),
            ("CN=my  app ,O=Example", "CN= my app,O=Example"),
            ("2.5.4.3=app", "CN=app"),
            ("CN=a\\,b", "CN=a\\2Cb"),
            ("CN=a+UID=b,O=x", "UID=b+CN=a,O=x"),
            ("CN=caf\\C3\\A9", "CN=café"),
            ("CN=\\#hash", "CN=\\23hash"),
            ("emailAddress=a@b.test", "E=a@b.test"),
        ] {
            assert!(dn(a).matches(&dn(b)), "{a} ~ {b}");
        }
    }

    #[test]
    fn look_alikes_do_not_match() {
        for (a, b) in [
            // A `,` inside a value is not a separator.
            ("CN=a\\,O=evil", "CN=a,O=evil"),
            // Nor is a `+`.
            ("CN=a\\+O=evil", "CN=a+O=evil"),
            // A multi-valued RDN is not two RDNs.
            ("CN=a+O=b", "CN=a,O=b"),
            ("CN=app", "CN=app2"),
            ("CN=app", "CN=app,O=Example"),
            ("CN=app,O=Example", "CN=app,OU=Example"),
            // Order: forward or reverse, not shuffled.
            ("CN=a,OU=b,O=c", "OU=b,CN=a,O=c"),
        ] {
            assert!(!dn(a).matches(&dn(b)), "{a} !~ {b}");
        }
    }

    #[test]
    fn malformed_names_are_refused_with_a_reason() {
        for (bad, says) in [
            ("", "TYPE=value"),
            ("CN", "TYPE=value"),
            ("CN=a,", "TYPE=value"),
            ("CN=a,,O=b", "TYPE=value"),
            ("CN=", "empty value"),
            ("CN=   ", "empty value"),
            ("FOO=bar", "unknown attribute type"),
            ("1.=bar", "unknown attribute type"),
            ("CN=a\\", "escapes"),
            ("CN=a\\q", "escapes"),
            ("CN=a\\4", "two hex digits"),
            ("CN=\\FF", "not UTF-8"),
            ("CN=#0403616263", "hex-encoded"),
            ("CN=a;O=b", "must be escaped"),
            ("CN=a\"b", "must be escaped"),
            ("CN=a+CN=b", "same attribute type twice"),
        ] {
            let error = Dn::parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
