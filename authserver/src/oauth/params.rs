//! Form parameters (each at most once, RFC 6749 §3.2) and client authentication (Basic or post).

use super::OAuthError;
use crate::store::{Application, ClientType, Store};
use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The parameters of a form body or query string, refused when one is repeated.
#[derive(Debug, Default)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn parse(bytes: &[u8]) -> Result<Params, OAuthError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (key, value) in form_urlencoded::parse(bytes) {
            if pairs.iter().any(|(k, _)| *k == key) {
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

    pub fn require(&self, name: &str) -> Result<&str, OAuthError> {
        self.get(name).ok_or_else(|| {
            OAuthError::InvalidRequest(format!("The parameter \"{name}\" is missing."))
        })
    }
}

/// Credentials a client presented, before they are checked.
struct Presented {
    client_id: String,
    client_secret: Option<String>,
}

/// HTTP Basic (values form-URL-decoded, RFC 6749 §2.3.1) or `client_id`/`client_secret` in the form.
/// Using both at once is `invalid_request`. None when the request carries neither.
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
        (Some(_), Some(_)) => Err(OAuthError::InvalidRequest(
            "Use one client authentication method, not two.".into(),
        )),
        (basic, posted) => Ok(basic.or(posted)),
    }
}

fn form_decode(value: &str) -> String {
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
) -> Result<Application, OAuthError> {
    authenticate_client_if_presented(store, headers, params)
        .await?
        .ok_or(OAuthError::InvalidClient)
}

/// Like [`authenticate_client`], but `Ok(None)` when the request carries no client credentials
/// at all (for endpoints that also accept other callers).
pub async fn authenticate_client_if_presented(
    store: &Store,
    headers: &HeaderMap,
    params: &Params,
) -> Result<Option<Application>, OAuthError> {
    let Some(presented) = presented(headers, params)? else {
        return Ok(None);
    };
    let application = store
        .find_application_by_client_id(&presented.client_id)
        .await?;
    match (application, presented.client_secret) {
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
        let both = Params::parse(b"client_id=x").unwrap();
        assert!(matches!(
            presented(&headers, &both),
            Err(OAuthError::InvalidRequest(_))
        ));
    }
}
