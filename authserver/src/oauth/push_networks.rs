//! Where the revocation stream may push: no loopback, private, link-local or other non-public
//! address unless `ssf_push_networks` allows it, checked on a stream's URL when it is set and
//! again on every address its name resolves to ([`super::ssf_push`]).

use crate::client_ip::IpRange;
use std::net::IpAddr;

/// Why a push URL is refused, as the stream endpoints answer it.
pub const NOT_PUBLIC: &str = "Push delivery to a loopback, private, link-local or other non-public address is not allowed (see ssf_push_networks).";

/// Whether `ip` is an address of the public internet: not loopback, private, shared (CGNAT),
/// link-local, unique-local, unspecified, multicast, broadcast, documentation or reserved,
/// an IPv4 address inside IPv6 judged as the IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0)
                || (a == 198 && (18..20).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped().or_else(|| v6.to_ipv4()) {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0xdb8)
        }
    }
}

/// Whether a push may go to `ip`: a public address, or one inside `allowed`.
pub fn may_push_to(ip: IpAddr, allowed: &[IpRange]) -> bool {
    is_public(ip) || allowed.iter().any(|r| r.contains(ip))
}

/// Whether `url`'s host, when it is an address (the URL parser reads `2130706433` and
/// `0x7f.1` as 127.0.0.1), is one a push may go to. Names are checked when resolved.
pub fn url_allowed(url: &reqwest::Url, allowed: &[IpRange]) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    match literal.unwrap_or(host).parse::<IpAddr>() {
        Ok(ip) => may_push_to(ip, allowed),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_in_every_spelling() {
        for internal in [
            "http://127.0.0.1/e",
            "http://2130706433/e",
            "http://0x7f.1/e",
            "http://0/e",
            "http://[::1]/e",
            "http://[::ffff:127.0.0.1]/e",
            "http://[::ffff:a00:1]/e",
            "http://10.1.2.3/e",
            "http://172.16.0.1/e",
            "http://192.168.1.1/e",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/e",
            "http://[fd00::1]/e",
            "http://[fe80::1]/e",
            "http://255.255.255.255/e",
        ] {
            assert!(!url_allowed(&url(internal), &[]), "{internal}");
        }
        for public in [
            "https://receiver.example/e",
            "http://93.184.215.14/e",
            "http://[2606:4700::1111]/e",
        ] {
            assert!(url_allowed(&url(public), &[]), "{public}");
        }
        let loopback = IpRange::loopback();
        assert!(url_allowed(&url("http://127.0.0.1:9/e"), &loopback));
        assert!(url_allowed(&url("http://[::1]:9/e"), &loopback));
        assert!(!url_allowed(&url("http://10.0.0.1/e"), &loopback));
    }
}
