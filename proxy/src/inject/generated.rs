//! What `proxy inject` writes from scratch: the sidecar container, the starter rules ConfigMap
//! and the NetworkPolicy that leaves the proxy as the only way in. Values from the input and the
//! command line are data here, never YAML text (see [`from_json`]).

use std::collections::BTreeMap;

use serde_json::json;
use serde_yaml_ng::{Mapping, Value};

use super::from_json;
use super::{ADMIN_PORT_NAME, CONTAINER, InjectOptions, MOUNT, PORT_NAME, TokenCheck, VOLUME};
use crate::app_probes::{self, AppProbe};

/// The label every generated document carries, so that `proxy inject --remove` drops them.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "tokengate-inject");

/// The sidecar container; a native sidecar (an init container that keeps running) unless
/// `--legacy-sidecar`. With `admin_tls` the kubelet probes the admin port over HTTPS (it does
/// not verify the certificate).
pub fn sidecar(
    options: &InjectOptions,
    probes: &BTreeMap<String, AppProbe>,
    admin_tls: bool,
) -> Value {
    let (port, admin) = (options.proxy_port, options.admin_port);
    let mut env = vec![
        json!({"name": "PROXY_LISTEN", "value": format!("0.0.0.0:{port}")}),
        json!({"name": "PROXY_ADMIN_LISTEN", "value": format!("0.0.0.0:{admin}")}),
    ];
    if matches!(options.token_check, TokenCheck::Introspection { .. }) {
        env.push(
            json!({"name": "PROXY_CLIENT_SECRET", "valueFrom": {"secretKeyRef": {
            "name": options.secret, "key": "proxy-client-secret"}}}),
        );
    }
    if !probes.is_empty() {
        let probes = serde_json::to_string(probes).expect("probes serialise");
        env.push(json!({"name": app_probes::ENV, "value": probes}));
    }
    let mut container = json!({
        "name": CONTAINER,
        "image": options.image,
        "command": ["proxy"],
        "args": ["--config", format!("{MOUNT}/proxy.yaml")],
        "ports": [
            {"name": PORT_NAME, "containerPort": port},
            {"name": ADMIN_PORT_NAME, "containerPort": admin},
        ],
        "env": env,
        "readinessProbe": {"httpGet": admin_get("/readyz", admin_tls), "periodSeconds": 5},
        "livenessProbe": {"httpGet": admin_get("/healthz", admin_tls), "periodSeconds": 10},
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 10001,
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT, "readOnly": true}],
    });
    if !options.legacy_sidecar {
        // Kubernetes 1.29+: started before the application containers, which wait for the
        // startup probe; stopped after them, so Jobs complete.
        container["restartPolicy"] = json!("Always");
        container["startupProbe"] = json!({
            "httpGet": admin_get("/readyz", admin_tls),
            "periodSeconds": 1,
            "failureThreshold": 120,
        });
    }
    ordered(
        container,
        &[
            "name",
            "image",
            "restartPolicy",
            "command",
            "args",
            "ports",
            "env",
            "startupProbe",
            "readinessProbe",
            "livenessProbe",
        ],
    )
}

/// A probe's `httpGet` of `path` on the admin port (`scheme: HTTPS` with `admin_tls`).
fn admin_get(path: &str, admin_tls: bool) -> serde_json::Value {
    let mut get = json!({"path": path, "port": ADMIN_PORT_NAME});
    if admin_tls {
        get["scheme"] = json!("HTTPS");
    }
    get
}

/// `json` as YAML with the keys of its top mapping in `order` (the others after them), since
/// serde_json sorts keys: `name` and `kind` first read better.
fn ordered(json: serde_json::Value, order: &[&str]) -> Value {
    let mut value = from_json(json);
    if let Some(map) = value.as_mapping_mut() {
        let mut sorted = Mapping::new();
        for key in order {
            if let Some(v) = map.shift_remove(*key) {
                sorted.insert((*key).into(), v);
            }
        }
        sorted.extend(std::mem::take(map));
        *map = sorted;
    }
    value
}

/// The usual order of a resource's top keys.
const RESOURCE: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "data"];

/// `metadata` of a generated document: name, the workload's namespace, the managed-by label.
fn metadata(name: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut meta = json!({"name": name, "labels": {MANAGED_BY.0: MANAGED_BY.1}});
    if let Some(namespace) = namespace {
        meta["namespace"] = json!(namespace);
    }
    meta
}

/// A ConfigMap with a rules file that works as it is: every path of the application needs
/// `--scope`; the token check from the flags; the client secret from the environment (the
/// Secret reference in the sidecar), never in the file.
pub fn config_map(
    name: &str,
    namespace: Option<&str>,
    app_port: u16,
    options: &InjectOptions,
) -> Value {
    let mut rules = json!({
        "listen": format!("0.0.0.0:{}", options.proxy_port),
        "admin_listen": format!("0.0.0.0:{}", options.admin_port),
        "upstreams": {"app": {"address": format!("127.0.0.1:{app_port}")}},
    });
    match &options.token_check {
        TokenCheck::Introspection { url, client_id } => {
            rules["introspection"] = json!({"url": url, "client_id": client_id});
        }
        TokenCheck::Jwt {
            jwks_url,
            issuer,
            audience,
        } => {
            rules["token_source"] = json!("jwt");
            rules["audience"] = json!(audience);
            rules["jwt"] = json!({"jwks_url": jwks_url, "issuer": issuer});
        }
    }
    if let Some(url) = &options.revocation_url {
        // The stream's client defaults to the introspection client (registered with --ssf).
        rules["revocation"] = json!({"configuration_url": url});
    }
    rules["routes"] = json!([
        {"name": "app", "prefix": "/", "upstream": "app", "scopes": [options.scope]},
    ]);
    let mut text = String::from(
        "# Written by `proxy inject`: every path needs a token with this scope. Add public and\n\
         # per-path routes (docs/proxy.md: Route rules).\n",
    );
    if matches!(options.token_check, TokenCheck::Introspection { .. }) {
        text.push_str(
            "# The client secret comes from PROXY_CLIENT_SECRET (the Secret), never this file.\n",
        );
    }
    if options.revocation_url.is_some() {
        text.push_str(
            "# revocation: the authorization server's revocation stream, so a revoked token is\n\
             # refused within a second (its client registered with --ssf); over TLS, an https://\n\
             # configuration_url whose certificate chains to a public root (docs/kubernetes.md).\n",
        );
    }
    let rules = ordered(
        rules,
        &[
            "listen",
            "admin_listen",
            "upstreams",
            "token_source",
            "introspection",
            "jwt",
            "revocation",
        ],
    );
    text.push_str(&serde_yaml_ng::to_string(&rules).expect("rules serialise"));
    ordered(
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(name, namespace),
            "data": {"proxy.yaml": text},
        }),
        &RESOURCE,
    )
}

/// A NetworkPolicy admitting ingress to the pods only on the proxy's port, from anywhere, and on
/// its admin port from the pods of the metrics namespace only (Prometheus: `/metrics`; the
/// admin port also serves the probes and the application's moved probes, which the kubelet
/// sends from the node, and a NetworkPolicy never blocks a pod's own node). Nothing in the
/// cluster reaches the application past the proxy, even one listening on every address.
pub fn network_policy(
    name: &str,
    namespace: Option<&str>,
    selector: &Mapping,
    options: &InjectOptions,
) -> Value {
    ordered(
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(name, namespace),
            "spec": {
                "podSelector": {"matchLabels": selector},
                "policyTypes": ["Ingress"],
                "ingress": ingress_rules(options),
            },
        }),
        &RESOURCE,
    )
}

/// The proxy's port from anywhere; the admin port from the metrics namespace, if any.
fn ingress_rules(options: &InjectOptions) -> serde_json::Value {
    let mut rules = vec![json!({"ports": [{"protocol": "TCP", "port": options.proxy_port}]})];
    if let Some(namespace) = &options.metrics_namespace {
        rules.push(json!({
            "from": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": namespace,
            }}}],
            "ports": [{"protocol": "TCP", "port": options.admin_port}],
        }));
    }
    json!(rules)
}
