//! What an ingress in front of the forward-auth endpoint says about the request it asks about
//! (nginx, Traefik and Envoy header shapes), and which peers may say it.

use std::net::IpAddr;

use http::{HeaderMap, Method, Uri};

/// The `forward_auth:` section, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardAuthConfig {
    pub listen: std::net::SocketAddr,
    /// Peers whose `X-Original-*` / `X-Forwarded-*` headers are believed.
    pub trusted_peers: Vec<Cidr>,
    /// Envoy: the original path follows this prefix in the check request's path.
    pub path_prefix: Option<String>,
    /// TLS with the proxy listener's certificate.
    pub tls: bool,
}

/// An address block: `10.0.0.0/8`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub bits: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| "expected an IP address or a CIDR block".to_owned())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("prefix length must be 0 to {max}"))?,
        };
        Ok(Cidr { addr, bits })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The request the ingress asks about: from a trusted peer, nginx's `X-Original-Method` and
/// `X-Original-URI`, else Traefik's `X-Forwarded-Method` and `X-Forwarded-Uri`; otherwise (and
/// from any other peer, whose such headers are ignored) the check request's own method, and its
/// path with `path_prefix` removed (Envoy).
pub fn original(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    trusted: bool,
    path_prefix: Option<&str>,
) -> Result<(Method, Uri), &'static str> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if trusted {
        for (m, u) in [
            ("x-original-method", "x-original-uri"),
            ("x-forwarded-method", "x-forwarded-uri"),
        ] {
            if let Some(target) = get(u) {
                let method = match get(m) {
                    Some(m) => m.parse().map_err(|_| "bad original method")?,
                    None => method.clone(),
                };
                let uri: Uri = target.parse().map_err(|_| "bad original URI")?;
                return Ok((method, uri));
            }
        }
    }
    let path = uri.path();
    let path = match path_prefix {
        Some(prefix) => match path.strip_prefix(prefix) {
            Some(rest) if rest.starts_with('/') => rest,
            _ => return Err("the path does not start with forward_auth.path_prefix"),
        },
        None => path,
    };
    let target = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let uri = target.parse().map_err(|_| "bad original URI")?;
    Ok((method.clone(), uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| (http::HeaderName::from_static(n), v.parse().unwrap()))
            .collect()
    }

    fn seen(
        method: &str,
        uri: &str,
        pairs: &[(&'static str, &'static str)],
        trusted: bool,
        prefix: Option<&str>,
    ) -> Result<(String, String), &'static str> {
        original(
            &method.parse().unwrap(),
            &uri.parse().unwrap(),
            &headers(pairs),
            trusted,
            prefix,
        )
        .map(|(m, u)| (m.to_string(), u.to_string()))
    }

    fn ok(m: &str, u: &str) -> Result<(String, String), &'static str> {
        Ok((m.to_owned(), u.to_owned()))
    }

    #[test]
    fn nginx_traefik_and_envoy_shapes() {
        let nginx = [
            ("x-original-method", "POST"),
            ("x-original-uri", "/users/?page=2"),
        ];
        assert_eq!(
            seen("GET", "/auth", &nginx, true, None),
            ok("POST", "/users/?page=2")
        );
        let traefik = [
            ("x-forwarded-method", "DELETE"),
            ("x-forwarded-uri", "/users/7/"),
            ("x-forwarded-host", "api.example"),
        ];
        assert_eq!(
            seen("GET", "/", &traefik, true, None),
            ok("DELETE", "/users/7/")
        );
        // Envoy ext_authz (HTTP service): the original method, the path under the prefix.
        assert_eq!(
            seen(
                "PUT",
                "/ext-authz/users/7/?x=1",
                &[],
                true,
                Some("/ext-authz")
            ),
            ok("PUT", "/users/7/?x=1")
        );
        assert!(seen("GET", "/elsewhere/users/", &[], true, Some("/ext-authz")).is_err());
        assert!(seen("GET", "/ext-authzusers/", &[], true, Some("/ext-authz")).is_err());
    }

    #[test]
    fn the_headers_are_believed_only_from_trusted_peers() {
        let nginx = [("x-original-method", "GET"), ("x-original-uri", "/public/")];
        assert_eq!(
            seen("GET", "/groups/", &nginx, false, None),
            ok("GET", "/groups/")
        );
        let bad = [("x-original-uri", "not a uri")];
        assert!(seen("GET", "/", &bad, true, None).is_err());
    }

    #[test]
    fn cidr_blocks() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let any: Cidr = "::/0".parse().unwrap();
        assert!(any.contains("2001:db8::1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("ten".parse::<Cidr>().is_err());
    }
}
