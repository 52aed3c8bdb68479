//! Certificate-bound access tokens (RFC 8705 §3): the SHA-256 thumbprint of the client
//! certificate a request came with, how the certificate travels from the proxy (which terminates
//! mutual TLS) to what stands behind it, and the binding check the gate applies to every token.
//!
//! The proxy sends the verified client certificate upstream in [`CLIENT_CERT_HEADER`]: its PEM,
//! percent-encoded as nginx's `$ssl_client_escaped_cert` is (nginx's form is read too). It is in
//! the `X-Tokengate-*` namespace, which the proxy strips from clients, and is believed only
//! together with the proxy's secret ([`forwarded_cert`]).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::decision::Credential;
use crate::forwarded::ProxySecret;
use crate::identity::{decode, encode};

/// The header in which the proxy forwards the client certificate it verified (URL-encoded PEM).
pub const CLIENT_CERT_HEADER: &str = "x-tokengate-client-cert";

/// `error_description` for a certificate-bound token that came without its certificate.
pub const UNBOUND: &str =
    "The access token is bound to a client certificate that the request did not present.";
/// `error_description` for a token bound by a confirmation method other than `x5t#S256`.
pub const UNSUPPORTED_BINDING: &str =
    "The access token is bound by a confirmation method this API cannot check.";

/// The SHA-256 of a certificate (DER): what `cnf.x5t#S256` names, base64url-encoded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CertThumbprint(pub [u8; 32]);

impl CertThumbprint {
    /// The thumbprint of a certificate in DER.
    pub fn of_der(der: &[u8]) -> CertThumbprint {
        CertThumbprint(Sha256::digest(der).into())
    }

    /// A SHA-256 digest already computed (32 bytes), e.g. by the TLS library.
    pub fn from_digest(digest: &[u8]) -> Option<CertThumbprint> {
        digest.try_into().ok().map(CertThumbprint)
    }

    /// The `x5t#S256` value: base64url without padding.
    pub fn x5t_s256(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// Whether `x5t` (a token's `cnf.x5t#S256`) names this certificate; compared in constant
    /// time. A value that is not base64url of 32 bytes names none.
    pub fn matches(&self, x5t: &str) -> bool {
        let Ok(named) = URL_SAFE_NO_PAD.decode(x5t.trim_end_matches('=')) else {
            return false;
        };
        named.len() == 32 && bool::from(named.as_slice().ct_eq(&self.0))
    }
}

impl std::fmt::Debug for CertThumbprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CertThumbprint({})", self.x5t_s256())
    }
}

/// Applies the token's binding (RFC 8705 §3): a token whose claims carry `cnf.x5t#S256` stands
/// only with the certificate it names (`presented`); without it, or with another, it is invalid
/// (401 `invalid_token`). A `cnf` of another kind is refused too ([`UNSUPPORTED_BINDING`]).
/// Inactive tokens and every other credential pass unchanged.
pub fn bind(credential: Credential, presented: Option<&CertThumbprint>) -> Credential {
    let Credential::Checked(claims) = &credential else {
        return credential;
    };
    let Some(cnf) = claims.cnf.as_ref().filter(|_| claims.active) else {
        return credential;
    };
    match (&cnf.x5t_s256, presented) {
        // Bound to a DPoP key only: the gate's DPoP check holds it to its key.
        (None, _) if cnf.jkt.is_some() => credential,
        (None, _) => Credential::Invalid(UNSUPPORTED_BINDING),
        (Some(x5t), Some(cert)) if cert.matches(x5t) => credential,
        (Some(_), _) => Credential::Invalid(UNBOUND),
    }
}

/// A certificate (DER) as [`CLIENT_CERT_HEADER`] carries it: its PEM, percent-encoded.
pub fn escaped_pem(der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut pem = String::with_capacity(body.len() + 80);
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    encode(&pem)
}

/// The certificate (DER) in a percent-encoded PEM header value (ours or nginx's
/// `$ssl_client_escaped_cert`): the first `CERTIFICATE` block. `None` for anything else.
pub fn der_from_escaped_pem(value: &[u8]) -> Option<Vec<u8>> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let pem = decode(value)?;
    let start = pem.find(BEGIN)? + BEGIN.len();
    let len = pem[start..].find(END)?;
    let body: String = pem[start..start + len]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    STANDARD.decode(body).ok().filter(|der| !der.is_empty())
}

/// The one value of [`CLIENT_CERT_HEADER`] (sent more than once: none).
pub fn cert_header(headers: &HeaderMap) -> Option<Vec<u8>> {
    let mut values = headers.get_all(CLIENT_CERT_HEADER).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => der_from_escaped_pem(v.as_bytes()),
        _ => None,
    }
}

/// The client certificate (DER) the proxy forwarded, believed only from a request that proves it
/// came through the proxy (`secret`); `None` otherwise.
pub fn forwarded_cert(headers: &HeaderMap, secret: &ProxySecret) -> Option<Vec<u8>> {
    if !secret.proven_by(headers) {
        return None;
    }
    cert_header(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::claims::{Claims, Confirmation};
    use crate::forwarded::PROXY_SECRET_HEADER;

    fn bound(x5t: Option<&str>, active: bool) -> Credential {
        Credential::Checked(Arc::new(Claims {
            active,
            cnf: Some(Confirmation {
                x5t_s256: x5t.map(str::to_owned),
                jkt: None,
            }),
            ..Claims::default()
        }))
    }

    #[test]
    fn a_bound_token_stands_only_with_its_certificate() {
        let mine = CertThumbprint::of_der(b"my certificate");
        let other = CertThumbprint::of_der(b"another certificate");
        let token = bound(Some(&mine.x5t_s256()), true);
        assert_eq!(bind(token.clone(), Some(&mine)), token);
        assert_eq!(
            bind(token.clone(), Some(&other)),
            Credential::Invalid(UNBOUND)
        );
        assert_eq!(bind(token, None), Credential::Invalid(UNBOUND));
        // Padded base64url is the same thumbprint; standard base64 or hex is not.
        let padded = format!("{}=", mine.x5t_s256());
        assert_eq!(
            bind(bound(Some(&padded), true), Some(&mine)),
            bound(Some(&padded), true)
        );
        for wrong in [
            hex::encode(mine.0),
            STANDARD.encode([0xffu8; 32]),
            String::new(),
        ] {
            assert_eq!(
                bind(bound(Some(&wrong), true), Some(&mine)),
                Credential::Invalid(UNBOUND),
                "{wrong}"
            );
        }
        assert_eq!(
            bind(bound(None, true), Some(&mine)),
            Credential::Invalid(UNSUPPORTED_BINDING)
        );
        // Unbound tokens, inactive ones and other credentials pass unchanged.
        let plain = Credential::Checked(Arc::new(Claims {
            active: true,
            ..Claims::default()
        }));
        assert_eq!(bind(plain.clone(), None), plain);
        assert_eq!(bind(bound(Some("x"), false), None), bound(Some("x"), false));
        assert_eq!(bind(Credential::Missing, None), Credential::Missing);
    }

    #[test]
    fn the_forwarded_certificate_round_trips_and_needs_the_secret() {
        let der: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        let escaped = escaped_pem(&der);
        assert!(!escaped.contains(' ') && !escaped.contains('\n'));
        assert_eq!(der_from_escaped_pem(escaped.as_bytes()), Some(der.clone()));
        // nginx's $ssl_client_escaped_cert encodes `+`, `/` and `=` too.
        let nginx = escaped
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        assert_eq!(der_from_escaped_pem(nginx.as_bytes()), Some(der.clone()));
        for bad in [
            "",
            "garbage",
            "-----BEGIN%20CERTIFICATE-----%0A!!!%0A-----END%20CERTIFICATE-----",
        ] {
            assert_eq!(der_from_escaped_pem(bad.as_bytes()), None, "{bad}");
        }

        let secret = ProxySecret::new(&"s".repeat(32)).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(CLIENT_CERT_HEADER, escaped.parse().unwrap());
        assert_eq!(forwarded_cert(&headers, &secret), None, "no secret");
        headers.insert(PROXY_SECRET_HEADER, "t".repeat(32).parse().unwrap());
        assert_eq!(forwarded_cert(&headers, &secret), None, "wrong secret");
        headers.insert(PROXY_SECRET_HEADER, "s".repeat(32).parse().unwrap());
        assert_eq!(forwarded_cert(&headers, &secret), Some(der));
        headers.append(CLIENT_CERT_HEADER, escaped.parse().unwrap());
        assert_eq!(forwarded_cert(&headers, &secret), None, "sent twice");
    }
}
