//! `self_signed_tls_client_auth` by a registered JWKS (RFC 8705 §2.2): the client's
//! certificates, each the first entry of a key's `x5c` (RFC 7517 §4.7), checked when registered.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use resource_server::CertThumbprint;
use serde_json::Value;

/// The most text a registered JWKS may have (a few certificates fit many times over).
const MAX_LEN: usize = 64 * 1024;
/// The most keys it may hold.
const MAX_KEYS: usize = 20;
/// JWK members that belong to a private or symmetric key (RFC 7518 §6.2.2, §6.3.2, §6.4.1).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// The registered JWKS as stored (compact JSON) and the thumbprint (`x5t#S256`) of each key's
/// certificate; or why the text is not a JWKS of client certificates.
pub fn certificates(text: &str) -> Result<(String, Vec<String>), String> {
    if text.len() > MAX_LEN {
        return Err(format!(
            "the JWKS is longer than {MAX_LEN} bytes: register the client's certificates only"
        ));
    }
    let jwks: Value =
        serde_json::from_str(text).map_err(|e| format!("the JWKS is not JSON ({e})"))?;
    let keys = jwks
        .get("keys")
        .and_then(Value::as_array)
        .filter(|keys| !keys.is_empty())
        .ok_or("the JWKS must be an object with a non-empty \"keys\" array")?;
    if keys.len() > MAX_KEYS {
        return Err(format!("the JWKS holds more than {MAX_KEYS} keys"));
    }
    let mut thumbprints = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let key = key
            .as_object()
            .ok_or_else(|| format!("keys[{i}] is not a JSON object"))?;
        if let Some(member) = PRIVATE_MEMBERS.iter().find(|m| key.contains_key(**m)) {
            return Err(format!(
                "keys[{i}] holds private key material (\"{member}\"): register the public JWKS only"
            ));
        }
        let first = key
            .get("x5c")
            .and_then(Value::as_array)
            .and_then(|chain| chain.first())
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!(
                    "keys[{i}] has no \"x5c\": each key names the client's certificate in x5c \
                     (a list of base64 DER certificates, the client's first)"
                )
            })?;
        let der = STANDARD
            .decode(first)
            .map_err(|_| format!("keys[{i}].x5c[0] is not base64 (RFC 7517 §4.7)"))?;
        match x509_parser::parse_x509_certificate(&der) {
            Ok(([], _)) => {}
            _ => {
                return Err(format!("keys[{i}].x5c[0] is not a DER X.509 certificate"));
            }
        }
        thumbprints.push(CertThumbprint::of_der(&der).x5t_s256());
    }
    Ok((jwks.to_string(), thumbprints))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_jwks_are_refused_with_a_reason() {
        let long = format!("{{\"keys\":[],\"pad\":\"{}\"}}", "a".repeat(MAX_LEN));
        let many = format!("{{\"keys\":[{}]}}", vec!["{}"; MAX_KEYS + 1].join(","));
        for (bad, says) in [
            ("", "not JSON"),
            ("{", "not JSON"),
            ("[]", "non-empty \"keys\""),
            ("{\"keys\":{}}", "non-empty \"keys\""),
            ("{\"keys\":[]}", "non-empty \"keys\""),
            ("{\"keys\":[1]}", "not a JSON object"),
            ("{\"keys\":[{\"kty\":\"EC\"}]}", "no \"x5c\""),
            ("{\"keys\":[{\"x5c\":[]}]}", "no \"x5c\""),
            ("{\"keys\":[{\"x5c\":[7]}]}", "no \"x5c\""),
            ("{\"keys\":[{\"x5c\":[\"***\"]}]}", "not base64"),
            ("{\"keys\":[{\"x5c\":[\"AAAA\"]}]}", "not a DER X.509"),
            (
                "{\"keys\":[{\"kty\":\"EC\",\"d\":\"secret\",\"x5c\":[\"AAAA\"]}]}",
                "private key material",
            ),
            (
                "{\"keys\":[{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"}]}",
                "private key material",
            ),
            (long.as_str(), "longer than"),
            (many.as_str(), "more than"),
        ] {
            let error = certificates(bad).expect_err(bad);
            assert!(error.contains(says), "{bad:.80}: {error}");
        }
    }
}
