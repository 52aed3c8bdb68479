//! RFC 9728 protected resource metadata: the gate's `resource` (this API's identifier),
//! `authorization_servers` and `resource_name` ([`ResourceSettings`]), and the document built
//! from them and the routes' scopes ([`ProtectedResource`]), served at
//! `/.well-known/oauth-protected-resource` and at its path-suffixed form (§3.1) for a resource
//! identifier with a path, and named by `resource_metadata` in every challenge (§5.1).

use std::collections::BTreeSet;
use std::net::IpAddr;

use http::{HeaderName, HeaderValue, Method, Uri, header};

use crate::rules::{Access, Rules};

/// The well-known path of the metadata (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// How long clients and caches may keep the document: it changes only with the configuration.
pub const CACHE_CONTROL: &str = "public, max-age=3600";

/// The gate's RFC 9728 settings, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSettings {
    /// This API's resource identifier: an absolute `https` URI (or `http` on a loopback host),
    /// without query or fragment.
    pub resource: String,
    /// The issuers of the tokens this API accepts, each exactly as its RFC 8414 metadata's
    /// `issuer`.
    pub authorization_servers: Vec<String>,
    /// A name for people (`resource_name`).
    pub resource_name: Option<String>,
}

/// Checks a resource identifier: an absolute `https` URI, or `http` on a loopback host
/// (`localhost`, `127.0.0.0/8`, `[::1]`), with a host, and without query, fragment or user
/// information. The problem is worded for a configuration message.
pub fn check_resource(value: &str) -> Result<(), &'static str> {
    const EXPECTED: &str = "expected an absolute https:// URI (http:// only on a loopback host) \
                            without query or fragment, e.g. https://api.example.com/orders";
    if value.contains(['#', '?']) || value.contains(char::is_whitespace) {
        return Err(EXPECTED);
    }
    let uri: Uri = value.parse().map_err(|_| EXPECTED)?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(EXPECTED);
    };
    if authority.as_str().contains('@') || authority.host().is_empty() {
        return Err(EXPECTED);
    }
    match scheme {
        "https" => Ok(()),
        "http" if is_loopback(authority.host()) => Ok(()),
        _ => Err(EXPECTED),
    }
}

/// Checks an authorization server's issuer identifier (RFC 8414 §2): `https`, or `http` on a
/// loopback host, without query or fragment.
pub fn check_issuer(value: &str) -> Result<(), &'static str> {
    check_resource(value).map_err(|_| {
        "expected the issuer exactly as its metadata's issuer says: an https:// URL (http:// \
         only on a loopback host) without query or fragment"
    })
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The metadata of one resource, built once per gate: the document, where it is served, and
/// the challenge parameter naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedResource {
    /// `/.well-known/oauth-protected-resource` followed by the resource identifier's path
    /// (§3.1); `None` when that path is empty or `/` (then only [`WELL_KNOWN`]).
    suffixed: Option<String>,
    /// The metadata URL: the resource's origin and the well-known path with its suffix.
    url: String,
    /// The JSON document.
    document: String,
}

/// The answer to a request for the metadata, for each binary to write as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataAnswer {
    pub status: u16,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Empty for `HEAD`, `OPTIONS`.
    pub body: String,
}

impl ProtectedResource {
    /// The metadata of `settings`, its `scopes_supported` the union of the routes' scopes.
    pub fn new(settings: &ResourceSettings, rules: &Rules) -> ProtectedResource {
        let resource = &settings.resource;
        // check_resource made sure of the scheme and authority.
        let (origin, path) = match resource.find("://").map(|i| i + 3) {
            Some(start) => match resource[start..].find('/') {
                Some(slash) => resource.split_at(start + slash),
                None => (resource.as_str(), ""),
            },
            None => (resource.as_str(), ""),
        };
        let suffix = if path == "/" { "" } else { path };
        let suffixed = (!suffix.is_empty()).then(|| format!("{WELL_KNOWN}{suffix}"));
        let url = format!("{origin}{WELL_KNOWN}{suffix}");
        let mut scopes = BTreeSet::new();
        for route in rules.routes() {
            if let Access::Authenticated { all_of, any_of } = &route.access {
                scopes.extend(all_of.iter().chain(any_of).map(String::as_str));
            }
        }
        let mut doc = serde_json::Map::new();
        doc.insert("resource".into(), resource.as_str().into());
        if !settings.authorization_servers.is_empty() {
            doc.insert(
                "authorization_servers".into(),
                settings.authorization_servers.clone().into(),
            );
        }
        if !scopes.is_empty() {
            doc.insert(
                "scopes_supported".into(),
                scopes.into_iter().collect::<Vec<_>>().into(),
            );
        }
        doc.insert("bearer_methods_supported".into(), vec!["header"].into());
        if let Some(name) = &settings.resource_name {
            doc.insert("resource_name".into(), name.as_str().into());
        }
        ProtectedResource {
            suffixed,
            url,
            document: serde_json::Value::Object(doc).to_string(),
        }
    }

    /// The metadata URL (RFC 9728 §3.1), as `resource_metadata` names it in challenges.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The JSON document.
    pub fn document(&self) -> &str {
        &self.document
    }

    /// Whether `path` is one this metadata is served at.
    pub fn serves(&self, path: &str) -> bool {
        path == WELL_KNOWN || self.suffixed.as_deref() == Some(path)
    }

    /// The answer to `method` on `path`, when `path` is under [`WELL_KNOWN`] (`None`
    /// otherwise): the document to `GET` and `HEAD` (readable from any origin), a CORS
    /// preflight's answer to `OPTIONS`, 405 to other methods, and 404 for another resource's
    /// metadata.
    pub fn answer(&self, method: &Method, path: &str) -> Option<MetadataAnswer> {
        if !is_metadata_path(path) {
            return None;
        }
        Some(if self.serves(path) {
            self.document_answer(method)
        } else {
            not_found()
        })
    }

    fn document_answer(&self, method: &Method) -> MetadataAnswer {
        let any_origin = (
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        match *method {
            Method::GET | Method::HEAD => MetadataAnswer {
                status: 200,
                headers: vec![
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    ),
                    (
                        header::CACHE_CONTROL,
                        HeaderValue::from_static(CACHE_CONTROL),
                    ),
                    any_origin,
                ],
                body: match *method {
                    Method::GET => self.document.clone(),
                    _ => String::new(),
                },
            },
            Method::OPTIONS => MetadataAnswer {
                status: 204,
                headers: vec![
                    any_origin,
                    (
                        header::ACCESS_CONTROL_ALLOW_METHODS,
                        HeaderValue::from_static("GET, HEAD"),
                    ),
                    (
                        header::ACCESS_CONTROL_ALLOW_HEADERS,
                        HeaderValue::from_static("*"),
                    ),
                    (
                        header::ACCESS_CONTROL_MAX_AGE,
                        HeaderValue::from_static("86400"),
                    ),
                ],
                body: String::new(),
            },
            _ => MetadataAnswer {
                status: 405,
                headers: vec![
                    (
                        header::ALLOW,
                        HeaderValue::from_static("GET, HEAD, OPTIONS"),
                    ),
                    json_type(),
                ],
                body: r#"{"detail":"Method not allowed."}"#.into(),
            },
        }
    }
}

/// Whether `path` asks for protected resource metadata: [`WELL_KNOWN`] or a path under it.
pub fn is_metadata_path(path: &str) -> bool {
    path.strip_prefix(WELL_KNOWN)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn json_type() -> (HeaderName, HeaderValue) {
    (
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )
}

/// 404 for metadata this gate does not have (no `resource`, or another resource's path).
pub fn not_found() -> MetadataAnswer {
    MetadataAnswer {
        status: 404,
        headers: vec![json_type()],
        body: r#"{"detail":"Not found."}"#.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules::from_yaml(
            "routes:\n  - { name: pub, path: /p, public: true }\n  - { name: r, path: /r, scopes: [read] }\n  - { name: w, path: /w, scopes: { all_of: [write], any_of: [admin, read] } }\n",
            "t.yaml",
        )
        .unwrap()
    }

    fn settings(resource: &str) -> ResourceSettings {
        ResourceSettings {
            resource: resource.into(),
            authorization_servers: vec!["https://auth.example".into()],
            resource_name: Some("Orders".into()),
        }
    }

    fn json(answer: &MetadataAnswer) -> serde_json::Value {
        serde_json::from_str(&answer.body).unwrap()
    }

    #[test]
    fn resource_identifiers() {
        for good in [
            "https://api.example.com",
            "https://api.example.com/",
            "https://api.example.com:8443/orders/v1",
            "http://127.0.0.1:8000",
            "http://localhost:9/mcp",
            "http://[::1]:8000/",
        ] {
            assert_eq!(check_resource(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "api",
            "/orders",
            "http://api.example.com",
            "http://10.0.0.1/",
            "ftp://api.example.com",
            "https://api.example.com/a?b=c",
            "https://api.example.com/#f",
            "https://user@api.example.com/",
            "https://api.example.com/a b",
            "urn:example:api",
        ] {
            assert!(check_resource(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_document_and_its_two_paths() {
        let m = ProtectedResource::new(&settings("https://api.example.com/orders"), &rules());
        assert_eq!(
            m.url(),
            "https://api.example.com/.well-known/oauth-protected-resource/orders"
        );
        for path in [WELL_KNOWN, "/.well-known/oauth-protected-resource/orders"] {
            let a = m.answer(&Method::GET, path).unwrap();
            assert_eq!(a.status, 200, "{path}");
            assert_eq!(
                json(&a),
                serde_json::json!({
                    "resource": "https://api.example.com/orders",
                    "authorization_servers": ["https://auth.example"],
                    "scopes_supported": ["admin", "read", "write"],
                    "bearer_methods_supported": ["header"],
                    "resource_name": "Orders",
                })
            );
            let headers: Vec<(&str, &str)> = a
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
                .collect();
            assert!(headers.contains(&("content-type", "application/json")));
            assert!(headers.contains(&("cache-control", CACHE_CONTROL)));
            assert!(headers.contains(&("access-control-allow-origin", "*")));
        }
        // Another resource's metadata on this host, and paths that only look alike.
        for path in [
            "/.well-known/oauth-protected-resource/billing",
            "/.well-known/oauth-protected-resource/orders/",
            "/.well-known/oauth-protected-resource/",
        ] {
            assert_eq!(m.answer(&Method::GET, path).unwrap().status, 404, "{path}");
        }
        for path in [
            "/.well-known/oauth-protected-resourcex",
            "/.well-known/oauth-authorization-server",
            "/orders",
        ] {
            assert_eq!(m.answer(&Method::GET, path), None, "{path}");
        }
    }

    #[test]
    fn a_resource_without_a_path_and_the_methods() {
        let bare = ResourceSettings {
            authorization_servers: vec![],
            resource_name: None,
            ..settings("http://127.0.0.1:8000/")
        };
        let public = Rules::from_yaml(
            "routes:\n  - { name: pub, path: /p, public: true }\n",
            "t.yaml",
        )
        .unwrap();
        let m = ProtectedResource::new(&bare, &public);
        assert_eq!(
            m.url(),
            "http://127.0.0.1:8000/.well-known/oauth-protected-resource"
        );
        // Nothing configured, nothing said (authorization_servers, scopes, name).
        assert_eq!(
            json(&m.answer(&Method::GET, WELL_KNOWN).unwrap()),
            serde_json::json!({
                "resource": "http://127.0.0.1:8000/",
                "bearer_methods_supported": ["header"],
            })
        );
        let head = m.answer(&Method::HEAD, WELL_KNOWN).unwrap();
        assert_eq!((head.status, head.body.as_str()), (200, ""));
        let options = m.answer(&Method::OPTIONS, WELL_KNOWN).unwrap();
        assert_eq!(options.status, 204);
        for method in [Method::POST, Method::DELETE, Method::PUT] {
            let a = m.answer(&method, WELL_KNOWN).unwrap();
            assert_eq!(a.status, 405, "{method}");
            assert!(a.headers.iter().any(|(n, _)| n == header::ALLOW));
        }
    }
}
