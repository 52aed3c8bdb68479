//! Form parameters (each at most once, RFC 6749 §3.2, but RFC 8707's `resource`) and client
//! authentication (Basic or post).

use super::OAuthError;
use crate::mtls::ClientCertificate;
use crate::store::{Application, ClientType, Store};
use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::sync::Arc;

/// The parameters of a form body or query string, refused when one is repeated (but those of
/// [`REPEATABLE`]).
#[derive(Debug, Default)]
pub struct Params(Vec<(String, String)>);

/// The parameters a request may repeat: RFC 8707 §2 names one resource per `resource`.
pub const REPEATABLE: [&str; 1] = ["resource"];

impl Params {
    pub fn parse(bytes: &[u8]) -> Result<Params, OAuthError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (key, value) in form_urlencoded::parse(bytes) {
            if !REPEATABLE.contains(&key.as_ref()) && pairs.iter().any(|(k, _)| *k == key) {
                return Err(OAuthError::InvalidRequest(format!(
                    "The parameter \"{key}\" is repeated."
                )));
            }
            pairs.push((key.into_owned(), value.into_owned()));
        }
        Ok(Params(pairs))
    }

    /// A form body: the Content-Type must say so when present.
    pub fn from_form(headers: &HeaderMap, body: &[u8]) -> Result<Params, OAuthError> {
        if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
            let is_form = content_type
                .to_str()
                .map(|v| {
                    v.split(';')
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .eq_ignore_ascii_case("application/x-www-form-urlencoded")
                })
                .unwrap_or(false);
            if !is_form && !body.is_empty() {
                return Err(OAuthError::InvalidRequest(
                    "The body must be application/x-www-form-urlencoded.".into(),
                ));
            }
        }
        Params::parse(body)
    }

    /// The value, with empty treated as absent (RFC 6749 §3.1).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every pair, in the order sent.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    pub fn require(&self, name: &str) -> Result<&str, OAuthError> {
        self.get(name).ok_or_else(|| {
            OAuthError::InvalidRequest(format!("The parameter \"{name}\" is missing."))
        })
    }
}

impl crate::protocol::Parameters for Params {
    fn get(&self, name: &str) -> Option<&str> {
        Params::get(self, name)
    }

    fn get_all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Credentials a client presented, before they are checked.
struct Presented {
    client_id: String,
    client_secret: Option<String>,
}

/// HTTP Basic (values form-URL-decoded, RFC 6749 §2.3.1) or `client_id`/`client_secret` in the form.
/// None when the request carries neither. Beside Basic, a `client_id` in the form naming the
/// same client is allowed (RFC 6749 §3.2.1; django-oauth-toolkit, Keycloak and requests-oauthlib's
/// `include_client_id` send it); one naming another client is `invalid_client`; a
/// `client_secret` in the form beside Basic is two methods at once, `invalid_request`.
fn presented(headers: &HeaderMap, params: &Params) -> Result<Option<Presented>, OAuthError> {
    let basic = match headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        Some(value) if value.len() > 6 && value[..6].eq_ignore_ascii_case("basic ") => {
            let decoded = STANDARD
                .decode(value[6..].trim())
                .map_err(|_| OAuthError::InvalidClient)?;
            let text = String::from_utf8(decoded).map_err(|_| OAuthError::InvalidClient)?;
            let (id, secret) = text.split_once(':').ok_or(OAuthError::InvalidClient)?;
            Some(Presented {
                client_id: form_decode(id),
                client_secret: Some(form_decode(secret)),
            })
        }
        _ => None,
    };
    let posted = params.get("client_id").map(|id| Presented {
        client_id: id.to_owned(),
        client_secret: params.get("client_secret").map(str::to_owned),
    });
    match (basic, posted) {
        (Some(basic), Some(posted)) if posted.client_id != basic.client_id => {
            tracing::info!(
                client_id = %basic.client_id,
                "client authentication failed: client_id in the body names another client"
            );
            Err(OAuthError::InvalidClient)
        }
        (Some(_), Some(posted)) if posted.client_secret.is_some() => Err(
            OAuthError::InvalidRequest("Use one client authentication method, not two.".into()),
        ),
        (basic, posted) => Ok(basic.or(posted)),
    }
}

fn form_decode(value: &str) -> String {
    if !value.bytes().any(|b| b == b'%' || b == b'+') {
        return value.to_owned();
    }
    form_urlencoded::parse(format!("v={value}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// The application that authenticated: a confidential client by its secret (constant-time
/// digest comparison), a public client by its id alone. Every failure is `InvalidClient`.
pub async fn authenticate_client(
    store: &Store,
    headers: &HeaderMap,
    params: &Params,
    cert: Option<&ClientCertificate>,
) -> Result<Arc<Application>, OAuthError> {
    authenticate_client_if_presented(store, headers, params, cert)
        .await?
        .ok_or(OAuthError::InvalidClient)
}

/// Like [`authenticate_client`], but `Ok(None)` when the request carries no client credentials
/// at all (for endpoints that also accept other callers).
///
/// An application registered for certificate authentication (RFC 8705 §2) authenticates with
/// its `client_id` and the client certificate the request came with (`cert`, which the proxy
/// verified), and with nothing else: a secret it may still have is refused.
pub async fn authenticate_client_if_presented(
    store: &Store,
    headers: &HeaderMap,
    params: &Params,
    cert: Option<&ClientCertificate>,
) -> Result<Option<Arc<Application>>, OAuthError> {
    let Some(presented) = presented(headers, params)? else {
        return Ok(None);
    };
    let application = store
        .find_application_by_client_id(&presented.client_id)
        .await?;
    match (application, presented.client_secret) {
        (Some(app), None)
            if app
                .tls_client_auth
                .as_ref()
                .is_some_and(|auth| cert.is_some_and(|c| auth.matches(c))) =>
        {
            Ok(Some(app))
        }
        (Some(app), _) if app.tls_client_auth.is_some() => {
            tracing::info!(client_id = %app.client_id, with_certificate = cert.is_some(), "client certificate authentication failed");
            Err(OAuthError::InvalidClient)
        }
        (Some(app), Some(secret))
            if app.client_type == ClientType::Confidential && app.secret_matches(&secret) =>
        {
            Ok(Some(app))
        }
        (Some(app), None) if app.client_type == ClientType::Public => Ok(Some(app)),
        (app, secret) => {
            if app.is_some() {
                tracing::info!(client_id = %presented.client_id, with_secret = secret.is_some(), "client authentication failed");
            }
            Err(OAuthError::InvalidClient)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_parameters_are_refused() {
        assert!(matches!(
            Params::parse(b"a=1&a=2"),
            Err(OAuthError::InvalidRequest(_))
        ));
        let p = Params::parse(b"a=1&b=&c=x+y").unwrap();
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get("b"), None);
        assert_eq!(p.get("c"), Some("x y"));
    }

    #[test]
    fn basic_values_are_form_decoded() {
        let mut headers = HeaderMap::new();
        let value = format!("Basic {}", STANDARD.encode("my%20id:p%3Ass+word"));
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        let p = presented(&headers, &Params::default()).unwrap().unwrap();
        assert_eq!(p.client_id, "my id");
        assert_eq!(p.client_secret.as_deref(), Some("p:ss word"));
        let same = Params::parse(b"client_id=my+id").unwrap();
        let p = presented(&headers, &same).unwrap().unwrap();
        assert_eq!(p.client_secret.as_deref(), Some("p:ss word"));
        let other = Params::parse(b"client_id=x").unwrap();
        assert!(matches!(
            presented(&headers, &other),
            Err(OAuthError::InvalidClient)
        ));
        let two_methods = Params::parse(b"client_id=my+id&client_secret=p%3Ass+word").unwrap();
        assert!(matches!(
            presented(&headers, &two_methods),
            Err(OAuthError::InvalidRequest(_))
        ));
    }

    /// Property tests (proptest): arbitrary bytes never panic and end in parameters or
    /// `invalid_request`; a repeated parameter, however encoded, is always `invalid_request`;
    /// well-formed pairs read back as sent.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                ..ProptestConfig::default()
            }
        }

        /// Names and values that make trouble in a form: `&`, `=`, `%`, `+`, spaces, non-ASCII.
        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => "[a-z_]{1,12}",
                1 => "[a-z&=%+ ;\u{e9}\u{65e5}\u{1f980}\u{0}]{0,8}",
                1 => any::<String>(),
            ]
        }

        /// Pairs with distinct names, in any order.
        fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
            prop::collection::vec((text(), text()), 0..8).prop_map(|mut v| {
                let mut seen = std::collections::HashSet::new();
                v.retain(|(k, _)| seen.insert(k.clone()));
                v
            })
        }

        fn encode(pairs: &[(String, String)]) -> String {
            let mut s = form_urlencoded::Serializer::new(String::new());
            for (k, v) in pairs {
                s.append_pair(k, v);
            }
            s.finish()
        }

        /// Every byte as `%XX`: the same name to a form decoder, other bytes on the wire.
        fn escape_all(s: &str) -> String {
            s.bytes().map(|b| format!("%{b:02X}")).collect()
        }

        fn form_headers(content_type: &[u8]) -> Option<HeaderMap> {
            let mut headers = HeaderMap::new();
            let value = axum::http::HeaderValue::from_bytes(content_type).ok()?;
            headers.insert(header::CONTENT_TYPE, value);
            Some(headers)
        }

        proptest! {
            #![proptest_config(config())]

            /// Never a panic: the decoded pairs when no name repeats, else `invalid_request`.
            #[test]
            fn any_bytes_are_params_or_invalid_request(
                bytes in prop_oneof![
                    prop::collection::vec(any::<u8>(), 0..96),
                    "[a-c=&%+0-9A-F]{0,32}".prop_map(String::into_bytes),
                ]
            ) {
                let decoded: Vec<(String, String)> = form_urlencoded::parse(&bytes)
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect();
                let mut names: Vec<&String> = decoded.iter().map(|(k, _)| k).collect();
                names.sort();
                names.dedup();
                match Params::parse(&bytes) {
                    Ok(p) => {
                        prop_assert_eq!(names.len(), decoded.len());
                        prop_assert_eq!(p.0, decoded);
                    }
                    Err(OAuthError::InvalidRequest(d)) => {
                        prop_assert!(names.len() < decoded.len(), "{}", d);
                        prop_assert!(d.ends_with("\" is repeated."), "{}", d);
                    }
                    Err(other) => prop_assert!(false, "{:?}", other),
                }
            }

            /// A name sent twice is `invalid_request`, whatever the values (empty too), the
            /// positions and the encoding of the second copy, through `from_form` as well.
            #[test]
            fn repeated_parameters_are_always_invalid_request(
                mut pairs in pairs(),
                name in text(),
                values in (text(), text()),
                positions in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
                escaped in any::<bool>(),
            ) {
                pairs.retain(|(k, _)| *k != name);
                let first = positions.0.index(pairs.len() + 1);
                pairs.insert(first, (name.clone(), values.0));
                let mut parts: Vec<String> =
                    pairs.iter().map(|p| encode(std::slice::from_ref(p))).collect();
                let second = if escaped {
                    format!("{}={}", escape_all(&name), escape_all(&values.1))
                } else {
                    encode(&[(name.clone(), values.1)])
                };
                parts.insert(positions.1.index(parts.len() + 1), second);
                let body = parts.join("&");
                let refused = |r: Result<Params, OAuthError>| match r {
                    Err(OAuthError::InvalidRequest(d)) => d.ends_with("\" is repeated."),
                    _ => false,
                };
                prop_assert!(refused(Params::parse(body.as_bytes())), "{}", body);
                let headers = form_headers(b"application/x-www-form-urlencoded").unwrap();
                prop_assert!(refused(Params::from_form(&headers, body.as_bytes())), "{}", body);
                prop_assert!(refused(Params::from_form(&HeaderMap::new(), body.as_bytes())));
            }

            /// Distinct names read back in order with their values; `get` treats empty as absent.
            #[test]
            fn well_formed_pairs_read_back(pairs in pairs()) {
                let body = encode(&pairs);
                let p = Params::parse(body.as_bytes()).unwrap();
                for (k, v) in &pairs {
                    let want = Some(v.as_str()).filter(|v| !v.is_empty());
                    prop_assert_eq!(p.get(k), want);
                    prop_assert_eq!(p.require(k).ok(), want);
                }
                prop_assert_eq!(&p.0, &pairs);
                let again = Params::from_form(&HeaderMap::new(), body.as_bytes()).unwrap();
                prop_assert_eq!(again.0, pairs);
            }

            /// A body under any other content type is `invalid_request`; the form type is read
            /// in any case and with parameters.
            #[test]
            fn from_form_reads_only_forms(
                content_type in prop_oneof![
                    prop::sample::select(vec![
                        "application/x-www-form-urlencoded",
                        "Application/X-WWW-FORM-urlencoded; charset=utf-8",
                        " application/x-www-form-urlencoded ;",
                        "application/json",
                        "application/x-www-form-urlencoded-x",
                        "multipart/form-data; boundary=x",
                        "",
                    ]).prop_map(|s| s.as_bytes().to_vec()),
                    prop::collection::vec(any::<u8>(), 0..32),
                ],
                pairs in pairs(),
            ) {
                let Some(headers) = form_headers(&content_type) else {
                    return Ok(()); // not a header value: cannot arrive
                };
                let body = encode(&pairs);
                // `to_str` reads visible ASCII only: a form type with other bytes is refused.
                let ascii = content_type.iter().all(|b| (32..127).contains(b) || *b == b'\t');
                let is_form = ascii && std::str::from_utf8(&content_type).is_ok_and(|ct| {
                    ct.split(';').next().unwrap_or_default().trim()
                        .eq_ignore_ascii_case("application/x-www-form-urlencoded")
                });
                match Params::from_form(&headers, body.as_bytes()) {
                    Ok(p) => {
                        prop_assert!(is_form || body.is_empty());
                        prop_assert_eq!(p.0, pairs);
                    }
                    Err(OAuthError::InvalidRequest(d)) => {
                        prop_assert!(!is_form && !body.is_empty());
                        prop_assert_eq!(d, "The body must be application/x-www-form-urlencoded.");
                    }
                    Err(other) => prop_assert!(false, "{:?}", other),
                }
            }
        }
    }
}
