//! The JOSE header of a JWS compact token, read strictly before any key is looked up: `alg` a
//! string, `typ` and `kid` strings when present, no `crit` (no extension is understood), and
//! exactly three base64url parts.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

/// The header fields the validator uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub alg: String,
    pub typ: Option<String>,
    pub kid: Option<String>,
}

/// Why a token is not a JWS compact serialization the validator reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not three dot-separated base64url parts with a JSON object first.
    NotAJwt,
    /// A header field of the wrong type, or `alg` missing.
    Field(&'static str),
    /// A `crit` header: an extension that must be understood, and none is.
    Critical,
}

impl Header {
    /// Reads the header of `token` (the signature is not checked here).
    pub fn parse(token: &str) -> Result<Header, HeaderError> {
        let mut parts = token.split('.');
        let (Some(head), Some(_payload), Some(_signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(HeaderError::NotAJwt);
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(head)
            .map_err(|_| HeaderError::NotAJwt)?;
        let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(&bytes) else {
            return Err(HeaderError::NotAJwt);
        };
        if map.contains_key("crit") {
            return Err(HeaderError::Critical);
        }
        let mut string = |name: &'static str| match map.remove(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(HeaderError::Field(name)),
        };
        let alg = string("alg")?.ok_or(HeaderError::Field("alg"))?;
        Ok(Header {
            alg,
            typ: string("typ")?,
            kid: string("kid")?,
        })
    }

    /// Whether `typ` is one of `accepted` (case-insensitive; an `application/` prefix is
    /// ignored, RFC 7515 §4.1.9). A missing `typ` is accepted by nothing.
    pub fn typ_is_one_of(&self, accepted: &[String]) -> bool {
        let Some(typ) = self.typ.as_deref() else {
            return false;
        };
        let bare = |t: &str| {
            let lower = t.to_ascii_lowercase();
            lower
                .strip_prefix("application/")
                .map(str::to_owned)
                .unwrap_or(lower)
        };
        let typ = bare(typ);
        accepted.iter().any(|a| bare(a) == typ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(header: &str) -> String {
        format!("{}.e30.c2ln", URL_SAFE_NO_PAD.encode(header))
    }

    #[test]
    fn reads_alg_typ_kid() {
        let h = Header::parse(&token(r#"{"alg":"RS256","typ":"at+jwt","kid":"k1","x":1}"#));
        assert_eq!(
            h,
            Ok(Header {
                alg: "RS256".into(),
                typ: Some("at+jwt".into()),
                kid: Some("k1".into()),
            })
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert_eq!(
            Header::parse(&token(r#"{"typ":"JWT"}"#)),
            Err(HeaderError::Field("alg"))
        );
        assert_eq!(
            Header::parse(&token(r#"{"alg":1}"#)),
            Err(HeaderError::Field("alg"))
        );
        assert_eq!(
            Header::parse(&token(r#"{"alg":"RS256","kid":7}"#)),
            Err(HeaderError::Field("kid"))
        );
        assert_eq!(
            Header::parse(&token(r#"{"alg":"RS256","typ":["JWT"]}"#)),
            Err(HeaderError::Field("typ"))
        );
        assert_eq!(
            Header::parse(&token(r#"{"alg":"RS256","crit":["exp"]}"#)),
            Err(HeaderError::Critical)
        );
        for bad in ["", "a.b", "a.b.c.d", "!!!.e30.c2ln", "W10.e30.c2ln"] {
            assert_eq!(Header::parse(bad), Err(HeaderError::NotAJwt), "{bad}");
        }
    }

    #[test]
    fn typ_comparison() {
        let h = |t: Option<&str>| Header {
            alg: "RS256".into(),
            typ: t.map(Into::into),
            kid: None,
        };
        let at = vec!["at+jwt".to_owned()];
        assert!(h(Some("at+jwt")).typ_is_one_of(&at));
        assert!(h(Some("application/AT+JWT")).typ_is_one_of(&at));
        assert!(!h(Some("JWT")).typ_is_one_of(&at));
        assert!(!h(None).typ_is_one_of(&at));
        assert!(h(Some("jwt")).typ_is_one_of(&["JWT".to_owned()]));
    }
}
