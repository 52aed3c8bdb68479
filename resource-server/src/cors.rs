//! CORS (the Fetch standard's protocol) for one route or endpoint: which origins may call it, the
//! answer to a preflight, and the headers added to an actual response. Pure: no I/O. The proxy
//! applies a route's policy, the authorization server its endpoints'.

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use serde::{Deserialize, Serialize};

/// A route's `cors:` as written in YAML.
///
/// ```yaml
/// cors:
///   allowed_origins: [https://app.example.com]   # exact scheme://host[:port], no wildcard
///   allowed_methods: [GET, POST]     # default: the route's methods, or GET, HEAD and POST
///   allowed_headers: [authorization, content-type, dpop]   # the default
///   exposed_headers: [x-request-id]  # default none; www-authenticate and dpop-nonce always
///   allow_credentials: false         # default false (cookies are not needed for bearer tokens)
///   max_age: 600                     # seconds a browser may keep a preflight's answer (default 600)
/// ```
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CorsSpec {
    pub allowed_origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_methods: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_headers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposed_headers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_credentials: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u64>,
}

/// Which origins a policy lets read its answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origins {
    /// `*`: any origin, never with credentials (public documents: metadata, JWKS).
    Any,
    /// These origins, each compared exactly with the request's `Origin`.
    List(Vec<String>),
}

/// A validated CORS policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorsPolicy {
    origins: Origins,
    /// `Access-Control-Allow-Methods`, ready to send.
    methods: Vec<Method>,
    /// Lower case.
    headers: Vec<String>,
    exposed: Vec<String>,
    credentials: bool,
    max_age: u64,
}

/// The headers of a preflight's answer, or why there are none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Preflight {
    /// The origin, method and headers asked for are allowed: answer `204` with these.
    Allowed(Vec<(HeaderName, HeaderValue)>),
    /// Not allowed: answered without any CORS header, so the browser blocks the request.
    Refused,
}

/// The default `allowed_headers`: what a bearer-token or DPoP call (RFC 9449: its `DPoP`
/// proof) with a JSON body needs.
pub const DEFAULT_HEADERS: [&str; 3] = ["authorization", "content-type", "dpop"];
/// The response headers every policy exposes besides `exposed_headers`: a refusal's challenge,
/// and DPoP's nonce (RFC 9449 §8), which a browser client must read to retry.
pub const ALWAYS_EXPOSED: [&str; 2] = ["www-authenticate", "dpop-nonce"];
/// The default `max_age`, seconds.
pub const DEFAULT_MAX_AGE: u64 = 600;
/// The longest `max_age` accepted (Chromium caps at 2 hours, Firefox at 24).
pub const MAX_MAX_AGE: u64 = 86_400;

/// The method a real preflight asks about: `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method` (a valid method). Anything else is an ordinary request.
pub fn preflight_method(method: &Method, headers: &HeaderMap) -> Option<Method> {
    if method != Method::OPTIONS || !headers.contains_key(header::ORIGIN) {
        return None;
    }
    let asked = headers.get(header::ACCESS_CONTROL_REQUEST_METHOD)?;
    Method::from_bytes(asked.as_bytes()).ok()
}

/// Whether `name` is a CORS response header (`Access-Control-*`), which a policy owns: an
/// upstream's are dropped on a route with a policy.
pub fn is_cors_response_header(name: &str) -> bool {
    name.len() > 15 && name[..15].eq_ignore_ascii_case("access-control-")
}

impl CorsPolicy {
    /// A policy from its parts: `headers` and `exposed` are header names (any case).
    pub fn new(
        origins: Origins,
        methods: Vec<Method>,
        headers: &[&str],
        credentials: bool,
        max_age: u64,
    ) -> CorsPolicy {
        CorsPolicy {
            origins,
            methods,
            headers: headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            exposed: ALWAYS_EXPOSED.map(str::to_owned).to_vec(),
            credentials,
            max_age,
        }
    }

    /// Validates a route's `cors:`; `route_methods` (the route's `methods:`) are the default
    /// methods. Errors are `(field, message)`, the field under `cors.`.
    pub fn from_spec(
        spec: CorsSpec,
        route_methods: Option<&[Method]>,
    ) -> Result<CorsPolicy, (&'static str, String)> {
        if spec.allowed_origins.is_empty() {
            return Err((
                "cors.allowed_origins",
                "[]: list the origins that may call this route, like https://app.example.com"
                    .into(),
            ));
        }
        let mut origins = Vec::with_capacity(spec.allowed_origins.len());
        for origin in spec.allowed_origins {
            check_origin(&origin).map_err(|m| ("cors.allowed_origins", m))?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        let methods = match spec.allowed_methods {
            Some(list) => methods(&list).map_err(|m| ("cors.allowed_methods", m))?,
            None => route_methods.map_or_else(
                || vec![Method::GET, Method::HEAD, Method::POST],
                <[Method]>::to_vec,
            ),
        };
        let headers = match spec.allowed_headers {
            Some(list) => header_names(list).map_err(|m| ("cors.allowed_headers", m))?,
            None => DEFAULT_HEADERS.map(str::to_owned).to_vec(),
        };
        let mut exposed = header_names(spec.exposed_headers.unwrap_or_default())
            .map_err(|m| ("cors.exposed_headers", m))?;
        for name in ALWAYS_EXPOSED {
            if !exposed.iter().any(|e| e == name) {
                exposed.push(name.to_owned());
            }
        }
        let max_age = spec.max_age.unwrap_or(DEFAULT_MAX_AGE);
        if max_age > MAX_MAX_AGE {
            return Err((
                "cors.max_age",
                format!("{max_age}: at most {MAX_MAX_AGE} seconds"),
            ));
        }
        Ok(CorsPolicy {
            origins: Origins::List(origins),
            methods,
            headers,
            exposed,
            credentials: spec.allow_credentials,
            max_age,
        })
    }

    /// The request's `Origin`, when this policy lets it read the answer.
    fn allowed_origin<'h>(&self, request: &'h HeaderMap) -> Option<&'h HeaderValue> {
        let origin = request.get(header::ORIGIN)?;
        match &self.origins {
            Origins::Any => Some(origin),
            Origins::List(list) => list
                .iter()
                .any(|o| o.as_bytes() == origin.as_bytes())
                .then_some(origin),
        }
    }

    /// `Access-Control-Allow-Origin` (and `-Credentials`), and `Vary: Origin` when the answer
    /// depends on it.
    fn origin_headers(&self, origin: &HeaderValue, out: &mut Vec<(HeaderName, HeaderValue)>) {
        match self.origins {
            Origins::Any if !self.credentials => out.push((
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            )),
            _ => {
                out.push((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone()));
                if self.credentials {
                    out.push((
                        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                        HeaderValue::from_static("true"),
                    ));
                }
            }
        }
    }

    /// Whether answers depend on the request's `Origin` (then every answer says `Vary: Origin`,
    /// so a shared cache keeps them apart).
    pub fn varies(&self) -> bool {
        !matches!(self.origins, Origins::Any) || self.credentials
    }

    /// The answer to a preflight (see [`preflight_method`]) asking for `method`.
    pub fn preflight(&self, method: &Method, request: &HeaderMap) -> Preflight {
        let Some(origin) = self.allowed_origin(request) else {
            return Preflight::Refused;
        };
        if !self.methods.contains(method) {
            return Preflight::Refused;
        }
        let asked = request
            .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("\u{0}").split(','))
            .map(str::trim)
            .filter(|h| !h.is_empty());
        for h in asked {
            if !self.headers.iter().any(|a| a.eq_ignore_ascii_case(h)) {
                return Preflight::Refused;
            }
        }
        let mut out = Vec::with_capacity(6);
        self.origin_headers(origin, &mut out);
        let mut methods = String::new();
        for m in &self.methods {
            if !methods.is_empty() {
                methods.push_str(", ");
            }
            methods.push_str(m.as_str());
        }
        out.extend(value(header::ACCESS_CONTROL_ALLOW_METHODS, &methods));
        if !self.headers.is_empty() {
            out.extend(value(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                &self.headers.join(", "),
            ));
        }
        let mut age = String::new();
        let _ = write!(age, "{}", self.max_age);
        out.extend(value(header::ACCESS_CONTROL_MAX_AGE, &age));
        Preflight::Allowed(out)
    }

    /// The headers for an actual response to `request` (empty when it has no `Origin` or one
    /// not allowed); `Vary` is not among them (see [`CorsPolicy::varies`]).
    pub fn response_headers(&self, request: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
        let Some(origin) = self.allowed_origin(request) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(3);
        self.origin_headers(origin, &mut out);
        if !self.exposed.is_empty() {
            out.extend(value(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                &self.exposed.join(", "),
            ));
        }
        out
    }
}

fn value(name: HeaderName, text: &str) -> Option<(HeaderName, HeaderValue)> {
    HeaderValue::from_str(text).ok().map(|v| (name, v))
}

/// An origin as a browser sends it: `http` or `https`, `://`, a lower-case host, an optional
/// port, and nothing else (no path, no trailing `/`, no `*`).
pub fn check_origin(origin: &str) -> Result<(), String> {
    let shape = "an origin is scheme://host[:port] in lower case, like https://app.example.com, \
                 with no path and no wildcard";
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or_else(|| format!("{origin:?}: {shape}"))?;
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, _)) if !host.ends_with(']') && host.contains(':') => (rest, None),
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.[]:".contains(&b));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0) && !p.starts_with('0'));
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(format!("{origin:?}: {shape}"))
    }
}

/// The methods a page's `fetch()` may send (the Fetch standard forbids CONNECT and TRACE).
const FETCH_METHODS: [Method; 7] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
];

fn methods(list: &[String]) -> Result<Vec<Method>, String> {
    if list.is_empty() {
        return Err("[]: empty list (omit it for the route's methods)".into());
    }
    let mut out = Vec::with_capacity(list.len());
    for m in list {
        let upper = m.to_ascii_uppercase();
        match FETCH_METHODS.iter().find(|k| k.as_str() == upper) {
            Some(k) if !out.contains(k) => out.push(k.clone()),
            Some(_) => {}
            None => return Err(format!("unknown method {m:?}")),
        }
    }
    Ok(out)
}

fn header_names(list: Vec<String>) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for h in list {
        if HeaderName::from_bytes(h.as_bytes()).is_err() || h == "*" {
            return Err(format!("{h:?} is not a header name"));
        }
        let h = h.to_ascii_lowercase();
        if !out.contains(&h) {
            out.push(h);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = "https://app.example.com";

    fn policy() -> CorsPolicy {
        CorsPolicy::from_spec(
            CorsSpec {
                allowed_origins: vec![APP.into(), "http://localhost:5173".into()],
                exposed_headers: Some(vec!["X-Request-Id".into()]),
                ..CorsSpec::default()
            },
            Some(&[Method::GET, Method::PUT]),
        )
        .unwrap()
    }

    fn request(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn names(headers: &[(HeaderName, HeaderValue)]) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn only_a_real_preflight_is_one() {
        let asked = request(&[("origin", APP), ("access-control-request-method", "PUT")]);
        assert_eq!(
            preflight_method(&Method::OPTIONS, &asked),
            Some(Method::PUT)
        );
        assert_eq!(preflight_method(&Method::GET, &asked), None);
        let no_origin = request(&[("access-control-request-method", "PUT")]);
        assert_eq!(preflight_method(&Method::OPTIONS, &no_origin), None);
        let no_method = request(&[("origin", APP)]);
        assert_eq!(preflight_method(&Method::OPTIONS, &no_method), None);
        let bad = request(&[("origin", APP), ("access-control-request-method", "P T")]);
        assert_eq!(preflight_method(&Method::OPTIONS, &bad), None);
    }

    #[test]
    fn a_listed_origin_gets_its_answer_and_no_other_does() {
        let p = policy();
        let asked = request(&[
            ("origin", APP),
            ("access-control-request-method", "PUT"),
            (
                "access-control-request-headers",
                "Authorization, content-type",
            ),
        ]);
        let Preflight::Allowed(headers) = p.preflight(&Method::PUT, &asked) else {
            panic!("refused")
        };
        assert_eq!(
            names(&headers),
            [
                ("access-control-allow-origin", APP),
                ("access-control-allow-methods", "GET, PUT"),
                (
                    "access-control-allow-headers",
                    "authorization, content-type, dpop"
                ),
                ("access-control-max-age", "600"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert!(p.varies());
        for (origin, method, extra) in [
            ("https://evil.example.com", "PUT", ""),
            ("https://app.example.com.evil.com", "PUT", ""),
            ("https://APP.example.com", "PUT", ""),
            ("http://app.example.com", "PUT", ""),
            ("null", "PUT", ""),
            (APP, "DELETE", ""),
            (APP, "PUT", "x-custom"),
        ] {
            let mut asked = request(&[("origin", origin)]);
            if !extra.is_empty() {
                asked.insert("access-control-request-headers", extra.parse().unwrap());
            }
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            assert_eq!(
                p.preflight(&method, &asked),
                Preflight::Refused,
                "{origin} {extra}"
            );
            assert!(p.response_headers(&asked).is_empty() || origin == APP);
        }
        assert_eq!(
            names(&p.response_headers(&request(&[("origin", APP)]))),
            [
                ("access-control-allow-origin", APP),
                (
                    "access-control-expose-headers",
                    "x-request-id, www-authenticate, dpop-nonce"
                ),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert!(p.response_headers(&HeaderMap::new()).is_empty());
    }

    #[test]
    fn any_origin_is_a_star_and_credentials_echo_the_origin() {
        let any = CorsPolicy::new(Origins::Any, vec![Method::GET], &[], false, 60);
        let asked = request(&[("origin", "https://anyone.example")]);
        assert_eq!(
            names(&any.response_headers(&asked)),
            [
                ("access-control-allow-origin", "*"),
                (
                    "access-control-expose-headers",
                    "www-authenticate, dpop-nonce"
                ),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert!(!any.varies());
        let with_cookies = CorsPolicy::from_spec(
            CorsSpec {
                allowed_origins: vec![APP.into()],
                allow_credentials: true,
                ..CorsSpec::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(
            names(&with_cookies.response_headers(&request(&[("origin", APP)]))),
            [
                ("access-control-allow-origin", APP),
                ("access-control-allow-credentials", "true"),
                (
                    "access-control-expose-headers",
                    "www-authenticate, dpop-nonce"
                ),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn origins_are_exact() {
        for good in [
            APP,
            "http://localhost:5173",
            "http://127.0.0.1:8080",
            "http://[::1]:3000",
        ] {
            assert_eq!(check_origin(good), Ok(()), "{good}");
        }
        for bad in [
            "*",
            "https://app.example.com/",
            "https://app.example.com/x",
            "https://*.example.com",
            "HTTPS://app.example.com",
            "https://App.example.com",
            "app.example.com",
            "https://",
            "https://a:0",
            "https://a:99999",
            "null",
            "ftp://a",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
        let spec = |origins: &[&str]| CorsSpec {
            allowed_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            ..CorsSpec::default()
        };
        assert_eq!(
            CorsPolicy::from_spec(spec(&[]), None).unwrap_err().0,
            "cors.allowed_origins"
        );
        let (field, message) = CorsPolicy::from_spec(spec(&["*"]), None).unwrap_err();
        assert_eq!(field, "cors.allowed_origins");
        assert!(message.starts_with("\"*\": an origin is"), "{message}");
        let bad_header = CorsSpec {
            allowed_headers: Some(vec!["bad header".into()]),
            ..spec(&[APP])
        };
        assert_eq!(
            CorsPolicy::from_spec(bad_header, None).unwrap_err().0,
            "cors.allowed_headers"
        );
        let too_long = CorsSpec {
            max_age: Some(MAX_MAX_AGE + 1),
            ..spec(&[APP])
        };
        assert_eq!(
            CorsPolicy::from_spec(too_long, None).unwrap_err().0,
            "cors.max_age"
        );
    }

    #[test]
    fn cors_response_headers_are_recognised() {
        assert!(is_cors_response_header("Access-Control-Allow-Origin"));
        assert!(is_cors_response_header("access-control-max-age"));
        assert!(!is_cors_response_header("access-control-"));
        assert!(!is_cors_response_header("vary"));
    }
}
