//! The application's Kubernetes probes through the admin listener, as Istio's app-health rewrite
//! does: `proxy inject` points each httpGet and tcpSocket probe of the application at
//! `/app-health/<container>/<probe>` on the admin port and hands the original to the sidecar in
//! `PROXY_APP_PROBES`. The admin listener answers those exact paths, and no others, by probing
//! the application on loopback with the original's path, port, scheme and headers. The request's
//! own path suffix, query and headers are never forwarded, so a probe path cannot reach a
//! protected route, and only the application's status goes back (no body, no headers).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use http::StatusCode;
use serde::{Deserialize, Serialize};

/// The environment variable holding the probes, as JSON: `{"/app-health/api/readyz": {...}}`.
pub const ENV: &str = "PROXY_APP_PROBES";
/// Every probe path starts with this.
pub const PREFIX: &str = "/app-health/";

/// One original probe, its port resolved to a number (the Kubernetes probe's own field names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppProbe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocket>,
    /// Kubernetes' default: 1 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpGet {
    pub path: String,
    pub port: u16,
    /// `HTTP` (default) or `HTTPS` (certificate not verified, as the kubelet does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<Header>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSocket {
    pub port: u16,
}

/// The probes the admin listener answers, by path.
#[derive(Debug, Default)]
pub struct AppProbes {
    probes: BTreeMap<String, AppProbe>,
    client: OnceLock<Option<reqwest::Client>>,
}

impl PartialEq for AppProbes {
    fn eq(&self, other: &Self) -> bool {
        self.probes == other.probes
    }
}

impl AppProbes {
    /// Parses and checks [`ENV`]'s JSON; the message names the path and the problem.
    pub fn parse(json: &str) -> Result<AppProbes, String> {
        let probes: BTreeMap<String, AppProbe> =
            serde_json::from_str(json).map_err(|e| format!("not the expected JSON: {e}"))?;
        for (path, probe) in &probes {
            check(path, probe).map_err(|problem| format!("{path:?}: {problem}"))?;
        }
        Ok(AppProbes {
            probes,
            client: OnceLock::new(),
        })
    }

    /// The probe answering `path` exactly, if one is configured.
    pub fn get(&self, path: &str) -> Option<&AppProbe> {
        self.probes.get(path)
    }

    pub fn len(&self) -> usize {
        self.probes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    /// Probes the application as `probe` says: the application's status for httpGet (the
    /// kubelet counts 200–399 as success), 200 when a tcpSocket connects, 503 with the reason
    /// when the application cannot be reached in time.
    pub async fn run(&self, probe: &AppProbe) -> (StatusCode, String) {
        let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1));
        if let Some(tcp) = &probe.tcp_socket {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, tcp.port));
            return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(_)) => (StatusCode::OK, "ok\n".into()),
                Ok(Err(e)) => unavailable(format!("127.0.0.1:{}: {e}", tcp.port)),
                Err(_) => unavailable(format!("127.0.0.1:{}: no answer in {timeout:?}", tcp.port)),
            };
        }
        let Some(get) = &probe.http_get else {
            return unavailable("probe has neither httpGet nor tcpSocket".into());
        };
        let Some(client) = self.client() else {
            return unavailable("cannot build the probe's HTTP client".into());
        };
        let scheme = get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase();
        let url = format!("{scheme}://127.0.0.1:{}{}", get.port, get.path);
        let mut request = client
            .get(&url)
            .timeout(timeout)
            .header(http::header::USER_AGENT, "kube-probe (tokengate)")
            .header(http::header::ACCEPT, "*/*");
        for header in &get.http_headers {
            request = request.header(&header.name, &header.value);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status();
                (
                    status,
                    format!("application answered {}\n", status.as_u16()),
                )
            }
            Err(e) if e.is_timeout() => unavailable(format!("{url}: no answer in {timeout:?}")),
            Err(e) => unavailable(format!("{url}: {}", root_cause(&e))),
        }
    }

    /// One client for every probe: no redirects followed, no proxy from the environment, the
    /// certificate of an HTTPS application not verified (the kubelet does not verify it).
    fn client(&self) -> Option<&reqwest::Client> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .danger_accept_invalid_certs(true)
                    .pool_max_idle_per_host(0)
                    .build()
                    .ok()
            })
            .as_ref()
    }
}

fn unavailable(why: String) -> (StatusCode, String) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("application probe failed: {why}\n"),
    )
}

/// The innermost error's message (`connection refused`, not reqwest's wrapping).
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

fn check(path: &str, probe: &AppProbe) -> Result<(), String> {
    let name = path.strip_prefix(PREFIX).unwrap_or_default();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        || name.contains("..")
    {
        return Err(format!(
            "a probe path is {PREFIX}<container>/<probe> (letters, digits, - _ . /)"
        ));
    }
    if !(1..=3600).contains(&probe.timeout_seconds.unwrap_or(1)) {
        return Err("timeoutSeconds: expected 1 to 3600".into());
    }
    match (&probe.http_get, &probe.tcp_socket) {
        (Some(get), None) => {
            if !get.path.starts_with('/')
                || get
                    .path
                    .bytes()
                    .any(|b| b.is_ascii_control() || b == b' ' || b == b'#')
            {
                return Err(format!(
                    "httpGet.path {:?}: expected a path starting with /",
                    get.path
                ));
            }
            if !matches!(get.scheme.as_deref(), None | Some("HTTP" | "HTTPS")) {
                return Err(format!(
                    "httpGet.scheme {:?}: expected HTTP or HTTPS",
                    get.scheme
                ));
            }
            for header in &get.http_headers {
                if http::HeaderName::from_bytes(header.name.as_bytes()).is_err()
                    || http::HeaderValue::from_str(&header.value).is_err()
                {
                    return Err(format!(
                        "httpGet.httpHeaders: {:?} is not a valid header",
                        header.name
                    ));
                }
            }
            Ok(())
        }
        (None, Some(_)) => Ok(()),
        _ => Err("expected exactly one of httpGet and tcpSocket".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_checked_when_read() {
        let good = r#"{"/app-health/api/readyz": {"httpGet": {"path": "/health?full=1", "port": 8080,
            "scheme": "HTTP", "httpHeaders": [{"name": "X-Probe", "value": "1"}]}, "timeoutSeconds": 2},
            "/app-health/api/livez": {"tcpSocket": {"port": 8080}}}"#;
        let probes = AppProbes::parse(good).unwrap();
        assert_eq!(probes.len(), 2);
        assert_eq!(
            probes.get("/app-health/api/livez").unwrap().tcp_socket,
            Some(TcpSocket { port: 8080 })
        );
        assert!(
            probes.get("/app-health/api/livez/").is_none(),
            "exact paths only"
        );
        for (bad, why) in [
            (
                r#"{"/users/": {"tcpSocket": {"port": 1}}}"#,
                "a probe path is",
            ),
            (
                r#"{"/app-health/../x": {"tcpSocket": {"port": 1}}}"#,
                "a probe path is",
            ),
            (r#"{"/app-health/a/livez": {}}"#, "exactly one"),
            (
                r#"{"/app-health/a/livez": {"httpGet": {"path": "x", "port": 1}}}"#,
                "starting with /",
            ),
            (
                r#"{"/app-health/a/livez": {"httpGet": {"path": "/", "port": 1, "scheme": "FTP"}}}"#,
                "HTTP or HTTPS",
            ),
            (
                r#"{"/app-health/a/livez": {"httpGet": {"path": "/", "port": 1, "host": "evil"}}}"#,
                "unknown field",
            ),
            (
                r#"{"/app-health/a/livez": {"httpGet": {"path": "/", "port": 1, "httpHeaders": [{"name": "a b", "value": ""}]}}}"#,
                "not a valid header",
            ),
            (
                r#"{"/app-health/a/livez": {"tcpSocket": {"port": 70000}}}"#,
                "JSON",
            ),
        ] {
            let error = AppProbes::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}
