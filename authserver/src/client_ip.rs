//! The client's address: the socket peer, or, when the peer is a trusted proxy (and proves it
//! with the shared proxy secret, when one is set), the right-most `X-Forwarded-For` entry that
//! is not a trusted proxy itself.

use crate::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use std::convert::Infallible;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// An IP address or a CIDR range (`10.0.0.0/8`, `::1`, `fd00::/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    /// The first address of the range (host bits cleared).
    network: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Loopback only: `127.0.0.0/8` and `::1` (what the one-process stack trusts: its proxy
    /// reaches the authorization server over loopback).
    pub fn loopback() -> Vec<IpRange> {
        vec![
            IpRange::new(IpAddr::from([127, 0, 0, 0]), 8),
            IpRange::new(IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]), 128),
        ]
    }

    pub(crate) fn new(addr: IpAddr, prefix: u8) -> IpRange {
        let (bits, width) = bits_of(addr);
        let network = masked(bits, prefix, width);
        let network = match addr {
            IpAddr::V4(_) => IpAddr::from((network as u32).to_be_bytes()),
            IpAddr::V6(_) => IpAddr::from(network.to_be_bytes()),
        };
        IpRange { network, prefix }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        if ip.is_ipv4() != self.network.is_ipv4() {
            return false;
        }
        let (bits, width) = bits_of(ip);
        masked(bits, self.prefix, width) == bits_of(self.network).0
    }
}

/// The address as an integer, and its width in bits.
fn bits_of(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

/// `bits` with everything after the first `prefix` of `width` bits cleared.
fn masked(bits: u128, prefix: u8, width: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        bits & (u128::MAX << (width - prefix))
    }
}

impl FromStr for IpRange {
    type Err = ();

    fn from_str(text: &str) -> Result<IpRange, ()> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| ())?;
        let width = bits_of(addr).1;
        let prefix = match prefix {
            None => width,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| ())?
            }
            Some(_) => return Err(()),
        };
        if prefix > width {
            return Err(());
        }
        Ok(IpRange::new(addr, prefix))
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Whether `ip` is in `trusted` (an IPv4-mapped IPv6 address as its IPv4 address).
pub fn is_trusted(ip: IpAddr, trusted: &[IpRange]) -> bool {
    trusted.iter().any(|range| range.contains(ip))
}

/// The client behind `peer`: the peer itself unless it is trusted (a `proven` peer, one that
/// carried the proxy's secret, is trusted whatever its address); then the `X-Forwarded-For`
/// entries (every header line, in order) from right to left, skipping trusted proxies. An entry
/// that is not an address stops the walk at the last trusted hop.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpRange], proven: bool) -> IpAddr {
    let mut client = peer.to_canonical();
    let mut hop_trusted = proven || is_trusted(client, trusted);
    for line in headers.get_all("x-forwarded-for").iter().rev() {
        let Ok(text) = line.to_str() else {
            return client;
        };
        for entry in text.rsplit(',') {
            // `client` is the hop that wrote this entry: believed only if trusted.
            if !hop_trusted {
                return client;
            }
            let Some(ip) = parse_entry(entry) else {
                return client;
            };
            client = ip;
            hop_trusted = is_trusted(client, trusted);
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, also with a port (`1.2.3.4:5`, `[::1]:5`) or brackets.
fn parse_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse::<IpAddr>().ok())
        })?;
    Some(ip.to_canonical())
}

/// The header a proxy in front proves itself with, and its shared secret (one type for every
/// binary).
pub use resource_server::{PROXY_SECRET_HEADER, ProxySecret};

/// Who this request's `X-Forwarded-For` may be believed from: the ranges `trusted`, and
/// whether the peer proved itself the proxy. With a proxy `secret` set, a request without it is
/// believed from nobody, and one with it from its peer whatever the peer's address: an address
/// proves little (every process on a host shares loopback), the secret is the proof.
pub fn trusted_for<'a>(
    trusted: &'a [IpRange],
    secret: Option<&ProxySecret>,
    headers: &HeaderMap,
) -> (&'a [IpRange], bool) {
    match secret {
        Some(secret) if !secret.proven_by(headers) => (&[], false),
        Some(_) => (trusted, true),
        None => (trusted, false),
    }
}

/// The client's address as [`client_ip`] finds it; `None` when the server runs without connect
/// info (the router driven directly, as in router tests).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub Option<IpAddr>);

impl FromRequestParts<AppState> for ClientAddress {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        let peer = ConnectInfo::<SocketAddr>::from_request_parts(parts, state)
            .await
            .ok()
            .map(|ConnectInfo(peer)| peer.ip());
        let (trusted, proven) = trusted_for(
            &state.settings.trusted_proxies,
            state.settings.proxy_secret.as_ref(),
            &parts.headers,
        );
        Ok(ClientAddress(peer.map(|peer| {
            client_ip(peer, &parts.headers, trusted, proven)
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn ranges(list: &[&str]) -> Vec<IpRange> {
        list.iter().map(|r| r.parse().unwrap()).collect()
    }

    #[test]
    fn ranges_parse_and_match() {
        let r: IpRange = "10.1.2.3/8".parse().unwrap();
        assert_eq!(r.to_string(), "10.0.0.0/8");
        assert!(r.contains(ip("10.255.0.1")) && !r.contains(ip("11.0.0.1")));
        assert!(
            r.contains(ip("::ffff:10.0.0.9")),
            "v4-mapped peers count as v4"
        );
        assert!(!r.contains(ip("::1")));
        let host: IpRange = "192.0.2.7".parse().unwrap();
        assert!(host.contains(ip("192.0.2.7")) && !host.contains(ip("192.0.2.8")));
        let v6: IpRange = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all: IpRange = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.1")) && !all.contains(ip("::2")));
        let all6: IpRange = "::/0".parse().unwrap();
        assert!(all6.contains(ip("2001:db8::1")));
        assert!(ranges(&["::1/128"])[0].contains(ip("::1")));
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0/8",
            "localhost",
            "10.0.0.0/8/8",
            " 10.0.0.1",
            "[::1]",
            "10.0.0.0/0008",
        ] {
            assert!(bad.parse::<IpRange>().is_err(), "{bad:?}");
        }
        let loopback = IpRange::loopback();
        assert!(loopback.iter().any(|r| r.contains(ip("127.8.9.1"))));
        assert!(loopback.iter().any(|r| r.contains(ip("::1"))));
        assert!(!loopback.iter().any(|r| r.contains(ip("::2"))));
    }

    fn forwarded(lines: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append("x-forwarded-for", HeaderValue::from_static(line));
        }
        headers
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let trusted = IpRange::loopback();
        let headers = forwarded(&["198.51.100.1"]);
        assert_eq!(
            client_ip(ip("203.0.113.9"), &headers, &trusted, false),
            ip("203.0.113.9")
        );
        assert_eq!(
            client_ip(ip("127.0.0.1"), &headers, &[], false),
            ip("127.0.0.1"),
            "nothing trusted: the peer"
        );
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_entry_counts() {
        let trusted = ranges(&["127.0.0.0/8", "10.0.0.0/8"]);
        let peer = ip("127.0.0.1");
        let cases: &[(&[&'static str], &str)] = &[
            (&[], "127.0.0.1"),
            (&["203.0.113.5"], "203.0.113.5"),
            (&["1.1.1.1, 203.0.113.5"], "203.0.113.5"),
            (&["1.1.1.1, 203.0.113.5, 10.0.0.2"], "203.0.113.5"),
            // Every line, in order: a client-written first line cannot win.
            (&["1.1.1.1", "203.0.113.5"], "203.0.113.5"),
            (
                &["1.1.1.1, 203.0.113.5", "10.0.0.2,10.0.0.3"],
                "203.0.113.5",
            ),
            // All trusted: the left-most.
            (&["10.0.0.7, 10.0.0.2"], "10.0.0.7"),
            // Garbage stops the walk at the last trusted hop.
            (&["203.0.113.5, unknown, 10.0.0.2"], "10.0.0.2"),
            (&["203.0.113.5, nonsense"], "127.0.0.1"),
            (&["203.0.113.5,"], "127.0.0.1"),
            // Ports and brackets are tolerated; v4-mapped addresses read as v4.
            (&["203.0.113.5:4711"], "203.0.113.5"),
            (&["[2001:db8::5]:4711"], "2001:db8::5"),
            (&["[2001:db8::5]"], "2001:db8::5"),
            (&["::ffff:203.0.113.5"], "203.0.113.5"),
        ];
        for (lines, expected) in cases {
            assert_eq!(
                client_ip(peer, &forwarded(lines), &trusted, false),
                ip(expected),
                "{lines:?}"
            );
        }
        let mut headers = forwarded(&["203.0.113.5"]);
        headers.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"10.0.0.2, \xff").unwrap(),
        );
        assert_eq!(
            client_ip(peer, &headers, &trusted, false),
            peer,
            "non-UTF-8 line"
        );
        assert_eq!(
            client_ip(
                ip("::ffff:127.0.0.1"),
                &forwarded(&["203.0.113.5"]),
                &trusted,
                false
            ),
            ip("203.0.113.5"),
            "a v4-mapped loopback peer is trusted"
        );
    }

    /// A peer that proved itself the proxy is believed whatever its address (a container
    /// network's, which no range names); the entry it wrote is the client unless that is a
    /// trusted hop too. Proof never makes the client's own entries believed.
    #[test]
    fn a_proven_peer_is_believed_for_its_own_entry_only() {
        let peer = ip("172.18.0.5");
        let headers = forwarded(&["1.1.1.1, 203.0.113.5"]);
        assert_eq!(client_ip(peer, &headers, &[], true), ip("203.0.113.5"));
        assert_eq!(client_ip(peer, &headers, &[], false), peer);
        let ingress = ranges(&["203.0.113.0/24"]);
        assert_eq!(client_ip(peer, &headers, &ingress, true), ip("1.1.1.1"));
        let secret = ProxySecret::new("proxy-secret-0123456789abcdef").unwrap();
        let mut proven = headers.clone();
        proven.insert(
            PROXY_SECRET_HEADER,
            HeaderValue::from_static("proxy-secret-0123456789abcdef"),
        );
        assert_eq!(
            trusted_for(&ingress, Some(&secret), &proven),
            (&ingress[..], true)
        );
        let none: &[IpRange] = &[];
        assert_eq!(
            trusted_for(&ingress, Some(&secret), &headers),
            (none, false)
        );
        assert_eq!(trusted_for(&ingress, None, &proven), (&ingress[..], false));
    }
}
