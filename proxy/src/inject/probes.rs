//! The application's httpGet and tcpSocket probes, moved onto the sidecar's admin listener
//! (Istio's app-health rewrite, see [`crate::app_probes`]): the kubelet then reaches an
//! application that listens on loopback only. exec probes run inside the container and need no
//! change; grpc probes and probes naming another `host` are left alone, with a note.

use std::collections::BTreeMap;

use serde_json::json;
use serde_yaml_ng::{Mapping, Value};

use super::{from_json, str_at};
use crate::app_probes::{AppProbe, Header, HttpGet, PREFIX, TcpSocket};

/// The probe fields of a container, and the name of each in the admin listener's paths.
pub const KINDS: [(&str, &str); 3] = [
    ("startupProbe", "startupz"),
    ("readinessProbe", "readyz"),
    ("livenessProbe", "livez"),
];

/// What rewriting one pod's probes gave.
#[derive(Default)]
pub struct Rewritten {
    /// container → probe field → the probe as it was (kept in the workload's annotation).
    pub originals: BTreeMap<String, Mapping>,
    /// admin path → what the sidecar probes (its `PROXY_APP_PROBES`).
    pub probes: BTreeMap<String, AppProbe>,
}

/// The sidecar's admin listener, as the kubelet reaches it.
#[derive(Clone, Copy)]
pub struct Admin {
    pub port: u16,
    /// `admin_tls: true` in the proxy's configuration: probes use `scheme: HTTPS`.
    pub tls: bool,
}

/// Rewrites the probes of every container in `containers`; `what` names the workload in notes.
pub fn rewrite(
    containers: &mut [Value],
    admin: Admin,
    what: &str,
    notes: &mut Vec<String>,
) -> Result<Rewritten, String> {
    let mut done = Rewritten::default();
    for container in containers.iter_mut() {
        let name = str_at(container, &["name"]).unwrap_or_default().to_owned();
        let ports = container.get("ports").cloned();
        let Some(container) = container.as_mapping_mut() else {
            continue;
        };
        for (field, short) in KINDS {
            let Some(probe) = container.get(field).and_then(Value::as_mapping) else {
                continue;
            };
            let where_ = format!("{what}: container {name:?} {field}");
            let Some(target) = app_probe(probe, ports.as_ref(), &where_, notes)? else {
                continue;
            };
            let path = format!("{PREFIX}{name}/{short}");
            let mut moved = Mapping::new();
            let mut get = json!({"path": path, "port": admin.port});
            if admin.tls {
                get["scheme"] = json!("HTTPS");
            }
            moved.insert("httpGet".into(), from_json(get));
            for (key, value) in probe {
                if !matches!(key.as_str(), Some("httpGet" | "tcpSocket")) {
                    moved.insert(key.clone(), value.clone());
                }
            }
            let original = container.insert(field.into(), Value::Mapping(moved));
            if let Some(Value::Mapping(original)) = original {
                done.originals
                    .entry(name.clone())
                    .or_default()
                    .insert(field.into(), Value::Mapping(original));
            }
            done.probes.insert(path, target);
        }
    }
    Ok(done)
}

/// What the sidecar must probe for `probe`, or `None` (with a note) when it stays as it is.
fn app_probe(
    probe: &Mapping,
    ports: Option<&Value>,
    where_: &str,
    notes: &mut Vec<String>,
) -> Result<Option<AppProbe>, String> {
    let timeout_seconds = probe.get("timeoutSeconds").and_then(Value::as_u64);
    if let Some(get) = probe.get("httpGet") {
        if get.get("host").is_some() {
            notes.push(format!(
                "{where_} (httpGet) names a host: left as it is, the kubelet probes that host"
            ));
            return Ok(None);
        }
        let port = resolve_port(get.get("port"), ports, where_)?;
        let headers = get
            .get("httpHeaders")
            .and_then(Value::as_sequence)
            .map(|list| {
                list.iter()
                    .map(|h| Header {
                        name: str_at(h, &["name"]).unwrap_or_default().to_owned(),
                        value: str_at(h, &["value"]).unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        return Ok(Some(AppProbe {
            http_get: Some(HttpGet {
                path: str_at(get, &["path"]).unwrap_or("/").to_owned(),
                port,
                scheme: str_at(get, &["scheme"]).map(str::to_owned),
                http_headers: headers,
            }),
            tcp_socket: None,
            timeout_seconds,
        }));
    }
    if let Some(tcp) = probe.get("tcpSocket") {
        if tcp.get("host").is_some() {
            notes.push(format!(
                "{where_} (tcpSocket) names a host: left as it is, the kubelet probes that host"
            ));
            return Ok(None);
        }
        let port = resolve_port(tcp.get("port"), ports, where_)?;
        return Ok(Some(AppProbe {
            http_get: None,
            tcp_socket: Some(TcpSocket { port }),
            timeout_seconds,
        }));
    }
    if probe.get("grpc").is_some() {
        notes.push(format!(
            "{where_} (grpc) is left as it is: the kubelet dials the pod's address, which an \
             application bound to loopback does not answer; use an exec probe such as \
             grpc_health_probe -addr=127.0.0.1:PORT"
        ));
    } else if probe.get("exec").is_some() {
        notes.push(format!(
            "{where_} (exec) is left as it is: it runs inside the container and reaches loopback"
        ));
    }
    Ok(None)
}

/// A probe's `port`: a number, or the name of one of the container's own ports.
fn resolve_port(port: Option<&Value>, ports: Option<&Value>, where_: &str) -> Result<u16, String> {
    let number = match port {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(name)) => ports
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .find(|p| str_at(p, &["name"]) == Some(name))
            .and_then(|p| p.get("containerPort"))
            .and_then(Value::as_u64),
        _ => None,
    };
    number
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!(
                "{where_}: port {} is neither a port number nor the name of one of the \
                 container's ports",
                serde_json::to_string(&port).unwrap_or_default()
            )
        })
}
