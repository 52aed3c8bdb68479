//! What an ingress in front of the forward-auth endpoint says about the request it asks about
//! (nginx, Traefik and Envoy header shapes), and which peers may say it.

use std::net::IpAddr;

use http::{HeaderMap, Method, Uri};

/// The `forward_auth:` section, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardAuthConfig {
    pub listen: std::net::SocketAddr,
    /// Which ingress asks, so which one header family names the original request.
    pub ingress: Ingress,
    /// Peers whose original-request headers (and client certificate) are believed.
    pub trusted_peers: Vec<Cidr>,
    /// Envoy: the original path follows this prefix in the check request's path.
    pub path_prefix: Option<String>,
    /// Whether `X-Tokengate-Client-Cert` from a trusted peer is the client's certificate (the
    /// ingress then sets it on every check, or clears it).
    pub client_cert_header: bool,
    /// TLS with the proxy listener's certificate.
    pub tls: bool,
}

/// The ingress in front of the forward-auth endpoint: each names the original request its own
/// way, and only that way is read (a client's look-alike headers of another family, which
/// Traefik copies to the check, are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// nginx `auth_request`: `X-Original-Method` and `X-Original-URI` (set by the documented
    /// block; the check itself is a GET subrequest).
    Nginx,
    /// Traefik `forwardAuth`: `X-Forwarded-Method` and `X-Forwarded-Uri`, which Traefik sets
    /// over whatever the client sent (unless `trustForwardHeader`).
    Traefik,
    /// Envoy `ext_authz` (HTTP service): the check request's own method, and its path under
    /// `path_prefix`.
    Envoy,
}

impl Ingress {
    pub const NAMES: &'static str = "nginx, traefik or envoy";

    pub fn parse(name: &str) -> Option<Ingress> {
        match name {
            "nginx" => Some(Ingress::Nginx),
            "traefik" => Some(Ingress::Traefik),
            "envoy" => Some(Ingress::Envoy),
            _ => None,
        }
    }

    /// The headers that carry the original method and target, if this ingress uses headers.
    fn headers(self) -> Option<(&'static str, &'static str)> {
        match self {
            Ingress::Nginx => Some(("x-original-method", "x-original-uri")),
            Ingress::Traefik => Some(("x-forwarded-method", "x-forwarded-uri")),
            Ingress::Envoy => None,
        }
    }
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
    /// Whether `peer` is in one of `blocks` (a peer whose headers are believed).
    pub fn any_contains(blocks: &[Cidr], peer: Option<IpAddr>) -> bool {
        peer.is_some_and(|ip| blocks.iter().any(|c| c.contains(ip)))
    }

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

/// The request the ingress asks about. From a trusted peer of nginx or Traefik, the method and
/// target in that ingress's two headers, both required, each exactly once; otherwise (Envoy, or
/// a peer that is not trusted, whose such headers are ignored) the check request's own method,
/// and its target (`raw_target`, as received) with `path_prefix` removed. A target must be in
/// origin form (`/path?query`) and carry no `#`: what follows a `#` would be dropped by the
/// parser and decided as another path than the one the ingress hands to the app.
pub fn original(
    method: &Method,
    raw_target: &[u8],
    headers: &HeaderMap,
    trusted: bool,
    config: &ForwardAuthConfig,
) -> Result<(Method, Uri), String> {
    if trusted && let Some((method_header, target_header)) = config.ingress.headers() {
        let method = one(headers, method_header)?
            .parse()
            .map_err(|_| format!("{method_header} is not a method"))?;
        let uri = origin_form(one(headers, target_header)?.as_bytes())
            .map_err(|why| format!("{target_header} {why}"))?;
        return Ok((method, uri));
    }
    let target = match &config.path_prefix {
        Some(prefix) => match raw_target.strip_prefix(prefix.as_bytes()) {
            Some(rest) if rest.starts_with(b"/") => rest,
            _ => return Err("the path does not start with forward_auth.path_prefix".into()),
        },
        None => raw_target,
    };
    let uri = origin_form(target).map_err(|why| format!("the request target {why}"))?;
    Ok((method.clone(), uri))
}

/// The one value of `name`: missing, repeated or not visible ASCII is refused.
fn one<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, String> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => v
            .to_str()
            .map_err(|_| format!("{name} is not visible ASCII")),
        (None, _) => Err(format!("{name} is missing")),
        (Some(_), Some(_)) => Err(format!("{name} is repeated")),
    }
}

/// `target` parsed, if it is in origin form (RFC 9112 section 3.2.1) and has no fragment.
fn origin_form(target: &[u8]) -> Result<Uri, &'static str> {
    if !target.starts_with(b"/") {
        return Err("is not in origin form (/path?query)");
    }
    if target.contains(&b'#') {
        return Err("carries a fragment (#)");
    }
    Uri::try_from(target).map_err(|_| "is not a valid request target")
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

    fn config(ingress: Ingress, prefix: Option<&str>) -> ForwardAuthConfig {
        ForwardAuthConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ingress,
            trusted_peers: Vec::new(),
            path_prefix: prefix.map(str::to_owned),
            client_cert_header: false,
            tls: false,
        }
    }

    fn seen(
        ingress: Ingress,
        method: &str,
        target: &str,
        pairs: &[(&'static str, &'static str)],
        trusted: bool,
        prefix: Option<&str>,
    ) -> Result<(String, String), String> {
        original(
            &method.parse().unwrap(),
            target.as_bytes(),
            &headers(pairs),
            trusted,
            &config(ingress, prefix),
        )
        .map(|(m, u)| (m.to_string(), u.to_string()))
    }

    fn ok(m: &str, u: &str) -> Result<(String, String), String> {
        Ok((m.to_owned(), u.to_owned()))
    }

    const NGINX: [(&str, &str); 2] = [
        ("x-original-method", "POST"),
        ("x-original-uri", "/users/?page=2"),
    ];
    const TRAEFIK: [(&str, &str); 3] = [
        ("x-forwarded-method", "DELETE"),
        ("x-forwarded-uri", "/users/7/"),
        ("x-forwarded-host", "api.example"),
    ];

    #[test]
    fn nginx_traefik_and_envoy_shapes() {
        use Ingress::*;
        // nginx's auth_request subrequest is a GET to its own location.
        assert_eq!(
            seen(Nginx, "GET", "/_auth", &NGINX, true, None),
            ok("POST", "/users/?page=2")
        );
        assert_eq!(
            seen(Traefik, "GET", "/", &TRAEFIK, true, None),
            ok("DELETE", "/users/7/")
        );
        // Envoy ext_authz (HTTP service): the original method, the path under the prefix.
        let envoy = |target| seen(Envoy, "PUT", target, &[], true, Some("/ext-authz"));
        assert_eq!(envoy("/ext-authz/users/7/?x=1"), ok("PUT", "/users/7/?x=1"));
        assert!(envoy("/elsewhere/users/").is_err());
        assert!(envoy("/ext-authzusers/").is_err());
    }

    #[test]
    fn one_family_per_ingress_and_no_fallback() {
        use Ingress::*;
        // Traefik copies the client's headers to the check: a client's nginx-shaped headers
        // are not read behind Traefik, Traefik's own are.
        let mut behind_traefik = TRAEFIK.to_vec();
        behind_traefik.extend([("x-original-uri", "/health"), ("x-original-method", "GET")]);
        assert_eq!(
            seen(Traefik, "GET", "/", &behind_traefik, true, None),
            ok("DELETE", "/users/7/")
        );
        // And the other way round.
        let mut behind_nginx = NGINX.to_vec();
        behind_nginx.extend([
            ("x-forwarded-uri", "/health"),
            ("x-forwarded-method", "GET"),
        ]);
        assert_eq!(
            seen(Nginx, "GET", "/_auth", &behind_nginx, true, None),
            ok("POST", "/users/?page=2")
        );
        // The family's headers missing: refused, not decided on the check's own /_auth.
        let only_other = [
            ("x-forwarded-uri", "/health"),
            ("x-forwarded-method", "GET"),
        ];
        let err = seen(Nginx, "GET", "/_auth", &only_other, true, None).unwrap_err();
        assert_eq!(err, "x-original-method is missing");
        let err = seen(Nginx, "GET", "/_auth", &NGINX[1..], true, None).unwrap_err();
        assert_eq!(err, "x-original-method is missing");
        let err = seen(Traefik, "GET", "/", &NGINX, true, None).unwrap_err();
        assert_eq!(err, "x-forwarded-method is missing");
        // Envoy reads no header at all: its check carries the original method and path.
        let nginx_like = [("x-original-uri", "/health"), ("x-original-method", "GET")];
        assert_eq!(
            seen(Envoy, "DELETE", "/api/7", &nginx_like, true, None),
            ok("DELETE", "/api/7")
        );
        let mut twice = NGINX.to_vec();
        twice.push(("x-original-uri", "/health"));
        let err = seen(Nginx, "GET", "/_auth", &twice, true, None).unwrap_err();
        assert_eq!(err, "x-original-uri is repeated");
    }

    #[test]
    fn targets_in_origin_form_without_fragment_only() {
        use Ingress::*;
        let with_target = |t: &'static str| {
            let h = [("x-original-method", "GET"), ("x-original-uri", t)];
            seen(Nginx, "GET", "/_auth", &h, true, None)
        };
        assert_eq!(
            with_target("/health#/../admin-area/x").unwrap_err(),
            "x-original-uri carries a fragment (#)"
        );
        assert!(with_target("/a?b#c").is_err());
        for bad in ["http://app/admin-area/x", "*", "admin-area/x", "", "/a b"] {
            let err = with_target(bad).unwrap_err();
            assert!(err.starts_with("x-original-uri "), "{bad:?}: {err}");
        }
        assert_eq!(with_target("/a/b?c=d%20e"), ok("GET", "/a/b?c=d%20e"));
        // The check request's own target too (Envoy, untrusted peers).
        assert!(seen(Envoy, "GET", "/health#/../admin", &[], false, None).is_err());
        assert!(seen(Envoy, "GET", "/x/health#", &[], false, Some("/x")).is_err());
    }

    #[test]
    fn the_headers_are_believed_only_from_trusted_peers() {
        let nginx = [("x-original-method", "GET"), ("x-original-uri", "/public/")];
        assert_eq!(
            seen(Ingress::Nginx, "GET", "/groups/", &nginx, false, None),
            ok("GET", "/groups/")
        );
        let bad = [
            ("x-original-method", "GET"),
            ("x-original-uri", "not a uri"),
        ];
        assert!(seen(Ingress::Nginx, "GET", "/", &bad, true, None).is_err());
        let bad_method = [("x-original-method", "G ET"), ("x-original-uri", "/")];
        assert!(seen(Ingress::Nginx, "GET", "/", &bad_method, true, None).is_err());
    }

    #[test]
    fn peers_in_a_block_are_trusted() {
        let peers: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap()];
        assert!(Cidr::any_contains(
            &peers,
            Some("10.1.2.3".parse().unwrap())
        ));
        assert!(!Cidr::any_contains(
            &peers,
            Some("192.0.2.1".parse().unwrap())
        ));
        assert!(!Cidr::any_contains(&peers, None));
        assert!(!Cidr::any_contains(&[], Some("10.1.2.3".parse().unwrap())));
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
