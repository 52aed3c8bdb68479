//! Client authentication by certificate (RFC 8705 §2): how an application is registered to
//! authenticate with one, and whether a presented certificate is that application's. The
//! certificate reaches this server from the proxy, which verified it in the TLS handshake, in
//! [`resource_server::CLIENT_CERT_HEADER`], believed only with the proxy secret
//! ([`presented`]).

mod dn;
mod jwks;

use std::fmt;

pub use dn::Dn;

use axum::http::HeaderMap;
use resource_server::client_cert::forwarded_cert;
use resource_server::{CertThumbprint, ProxySecret};
use x509_parser::extensions::GeneralName;

/// The client certificate this request came with, as the proxy forwarded it (DER, its
/// thumbprint); `None` without a proxy secret, or on a request that does not prove it.
pub fn presented(headers: &HeaderMap, secret: Option<&ProxySecret>) -> Option<ClientCertificate> {
    let der = forwarded_cert(headers, secret?)?;
    Some(ClientCertificate {
        thumbprint: CertThumbprint::of_der(&der),
        der,
    })
}

/// A client certificate the proxy verified.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    pub der: Vec<u8>,
    pub thumbprint: CertThumbprint,
}

/// How an application authenticates with a certificate instead of a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsClientAuth {
    /// `tls_client_auth`, by the certificate's subject distinguished name (a certificate from
    /// the CAs the proxy's listener trusts).
    SubjectDn(String),
    /// `tls_client_auth`, by a DNS name in the certificate's subject alternative names.
    SanDns(String),
    /// `self_signed_tls_client_auth`: this certificate, named by its thumbprint (`x5t#S256`).
    SelfSigned(String),
    /// `self_signed_tls_client_auth` by a registered JWKS (RFC 8705 §2.2): any of the
    /// certificates in its keys' `x5c` (the JWKS as stored, and their thumbprints).
    SelfSignedJwks { jwks: String, x5t: Vec<String> },
}

impl TlsClientAuth {
    /// The RFC 8705 `token_endpoint_auth_method`.
    pub fn method(&self) -> &'static str {
        match self {
            TlsClientAuth::SubjectDn(_) | TlsClientAuth::SanDns(_) => "tls_client_auth",
            TlsClientAuth::SelfSigned(_) | TlsClientAuth::SelfSignedJwks { .. } => {
                "self_signed_tls_client_auth"
            }
        }
    }

    /// Reads a registration (the command line, the forms): `subject_dn:<RFC 4514 DN>`,
    /// `san_dns:app.example.com`, `self_signed:<x5t#S256>` or `self_signed_jwks:<JWKS JSON>`.
    pub fn parse(text: &str) -> Result<TlsClientAuth, String> {
        let auth = Self::read_stored(text)?;
        if let TlsClientAuth::SubjectDn(dn) = &auth {
            Dn::parse(dn)?;
        }
        Ok(auth)
    }

    /// Reads the stored form. A subject DN stored before DNs were checked is kept as written
    /// (one that does not parse matches no certificate) so that its application still loads.
    pub fn read_stored(text: &str) -> Result<TlsClientAuth, String> {
        let (kind, value) = text.split_once(':').unwrap_or((text, ""));
        let value = value.trim();
        if value.is_empty() {
            return Err(format!(
                "{text:?}: expected subject_dn:<DN>, san_dns:<name>, self_signed:<x5t#S256> or \
                 self_signed_jwks:<JWKS>"
            ));
        }
        match kind {
            "subject_dn" => Ok(TlsClientAuth::SubjectDn(value.to_owned())),
            "san_dns" => Ok(TlsClientAuth::SanDns(value.to_ascii_lowercase())),
            "self_signed" => {
                // Checked for shape: 32 bytes, base64url without padding.
                if value.len() != 43
                    || !value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    return Err(format!(
                        "{value:?}: expected the certificate's SHA-256 thumbprint, base64url \
                         (43 characters, as `x5t#S256`)"
                    ));
                }
                Ok(TlsClientAuth::SelfSigned(value.to_owned()))
            }
            "self_signed_jwks" => {
                let (jwks, x5t) = jwks::certificates(value)?;
                Ok(TlsClientAuth::SelfSignedJwks { jwks, x5t })
            }
            other => Err(format!(
                "{other:?}: expected subject_dn, san_dns, self_signed or self_signed_jwks"
            )),
        }
    }

    /// Whether `cert` is this application's: the thumbprint for a self-signed registration
    /// (constant time); for `tls_client_auth`, a certificate that is not self-issued (issued by
    /// one of the proxy's CAs) with this subject or SAN DNS name.
    pub fn matches(&self, cert: &ClientCertificate) -> bool {
        match self {
            TlsClientAuth::SelfSigned(x5t) => return cert.thumbprint.matches(x5t),
            TlsClientAuth::SelfSignedJwks { x5t, .. } => {
                // Every entry is compared (constant time each), not only up to a match.
                return x5t
                    .iter()
                    .fold(false, |found, x5t| cert.thumbprint.matches(x5t) | found);
            }
            _ => {}
        }
        let Ok((_, parsed)) = x509_parser::parse_x509_certificate(&cert.der) else {
            return false;
        };
        if parsed.subject() == parsed.issuer() {
            return false;
        }
        match self {
            TlsClientAuth::SubjectDn(dn) => match (Dn::parse(dn), Dn::of_name(parsed.subject())) {
                (Ok(registered), Some(subject)) => subject.matches(&registered),
                _ => false,
            },
            TlsClientAuth::SanDns(name) => parsed
                .subject_alternative_name()
                .ok()
                .flatten()
                .is_some_and(|san| {
                    san.value.general_names.iter().any(
                        |g| matches!(g, GeneralName::DNSName(d) if d.eq_ignore_ascii_case(name)),
                    )
                }),
            TlsClientAuth::SelfSigned(_) | TlsClientAuth::SelfSignedJwks { .. } => false,
        }
    }
}

impl fmt::Display for TlsClientAuth {
    /// The stored form ([`TlsClientAuth::parse`] reads it back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsClientAuth::SubjectDn(dn) => write!(f, "subject_dn:{dn}"),
            TlsClientAuth::SanDns(name) => write!(f, "san_dns:{name}"),
            TlsClientAuth::SelfSigned(x5t) => write!(f, "self_signed:{x5t}"),
            TlsClientAuth::SelfSignedJwks { jwks, .. } => write!(f, "self_signed_jwks:{jwks}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_read_back_and_bad_ones_are_named() {
        for text in [
            "subject_dn:CN=app,O=Example",
            "san_dns:app.example.com",
            "self_signed:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(TlsClientAuth::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "subject_dn:",
            "cn:x",
            "self_signed:abc",
            "self_signed:+/",
            "subject_dn:FOO=bar",
            "self_signed_jwks:",
            "self_signed_jwks:{\"keys\":[]}",
        ] {
            assert!(TlsClientAuth::parse(bad).is_err(), "{bad}");
        }
        // A DN is checked when registered, and kept as stored when read back.
        let bad_dn = "subject_dn:CN=a;O=b";
        assert!(TlsClientAuth::parse(bad_dn).is_err());
        assert!(TlsClientAuth::read_stored(bad_dn).is_ok());
    }
}
