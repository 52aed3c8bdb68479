//! `proxy inject`: adds the tokengate sidecar to Kubernetes workloads, the way `linkerd inject` does.
//!
//! Reads YAML documents (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, Pod; any other kind
//! passes through as is) and adds to each pod template: the `tokengate-proxy` container (probes,
//! resources, a non-root read-only `securityContext`), the rules ConfigMap volume, and moves the
//! `targetPort` of every Service in the same input that selects those pods and targeted the
//! application's port to the proxy's port. Running it again changes nothing. YAML comments are not
//! kept (documents are re-serialised), key order is.

use serde::Deserialize;
use serde_json::json;
use serde_yaml_ng::{Mapping, Value};

/// Name of the sidecar container, and of the ports it adds.
pub const CONTAINER: &str = "tokengate-proxy";
const PORT_NAME: &str = "tokengate";
const ADMIN_PORT_NAME: &str = "tokengate-admin";
const VOLUME: &str = "tokengate-config";
const MOUNT: &str = "/etc/tokengate";
/// Kinds whose pod template is at `spec.template.spec`.
const WORKLOADS: [&str; 5] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
];

/// What the injected sidecar looks like.
#[derive(Debug, Clone)]
pub struct InjectOptions {
    pub image: String,
    /// The ConfigMap holding `proxy.yaml`; default `<workload name>-tokengate`.
    pub config_map: Option<String>,
    /// The Secret whose `proxy-client-secret` key becomes `PROXY_CLIENT_SECRET`.
    pub secret: String,
    /// The application's port that Services target today; default: the first `containerPort`
    /// of the first container.
    pub app_port: Option<u16>,
    pub proxy_port: u16,
    pub admin_port: u16,
}

impl Default for InjectOptions {
    fn default() -> Self {
        InjectOptions {
            image: "tokengate:latest".into(),
            config_map: None,
            secret: "tokengate".into(),
            app_port: None,
            proxy_port: 8000,
            admin_port: 8003,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InjectError {
    #[error("document {doc}: not YAML: {message}")]
    Yaml { doc: usize, message: String },
    #[error("document {doc} ({kind} {name}): {message}")]
    Workload {
        doc: usize,
        kind: String,
        name: String,
        message: String,
    },
}

/// A pod template that got (or already had) the sidecar: whom it serves, on which port.
struct Injected {
    namespace: Option<String>,
    labels: Mapping,
    app_port: u16,
    app_port_names: Vec<String>,
}

/// `input` with the sidecar added to every workload, as multi-document YAML.
pub fn inject(input: &str, options: &InjectOptions) -> Result<String, InjectError> {
    let mut docs = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(input).enumerate() {
        let doc = index + 1;
        let value = Value::deserialize(document).map_err(|e| InjectError::Yaml {
            doc,
            message: e.to_string(),
        })?;
        if !value.is_null() {
            docs.push((doc, value));
        }
    }
    let mut injected = Vec::new();
    for (doc, value) in &mut docs {
        if let Some(done) = inject_workload(*doc, value, options)? {
            injected.push(done);
        }
    }
    for (_, value) in &mut docs {
        if str_at(value, &["kind"]) == Some("Service") {
            retarget_service(value, &injected);
        }
    }
    let mut out = String::new();
    for (i, (_, value)) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(value).expect("a parsed document serialises"));
    }
    Ok(out)
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .and_then(Value::as_str)
}

/// Mutable list at `key` of `map`, created empty when missing.
fn sequence<'a>(map: &'a mut Mapping, key: &str) -> Option<&'a mut Vec<Value>> {
    map.entry(Value::from(key))
        .or_insert_with(|| Value::Sequence(Vec::new()))
        .as_sequence_mut()
}

fn inject_workload(
    doc: usize,
    value: &mut Value,
    options: &InjectOptions,
) -> Result<Option<Injected>, InjectError> {
    let kind = str_at(value, &["kind"]).unwrap_or_default().to_owned();
    let name = str_at(value, &["metadata", "name"])
        .unwrap_or("<unnamed>")
        .to_owned();
    let namespace = str_at(value, &["metadata", "namespace"]).map(str::to_owned);
    let fail = |message: String| InjectError::Workload {
        doc,
        kind: kind.clone(),
        name: name.clone(),
        message,
    };
    let template = if kind == "Pod" {
        value.as_mapping_mut()
    } else if WORKLOADS.contains(&kind.as_str()) {
        value
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
            .and_then(Value::as_mapping_mut)
    } else {
        return Ok(None);
    };
    let template = template.ok_or_else(|| fail("no pod template".into()))?;
    let labels = template
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_mapping)
        .cloned()
        .unwrap_or_default();
    let spec = template
        .get_mut("spec")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| fail("no pod spec".into()))?;
    let containers = spec
        .get("containers")
        .and_then(Value::as_sequence)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| fail("no containers".into()))?;
    let app_ports: Vec<(u16, Option<String>)> = containers
        .iter()
        .filter(|c| str_at(c, &["name"]) != Some(CONTAINER))
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_sequence)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| {
            let number = p.get("containerPort")?.as_u64()?;
            Some((
                u16::try_from(number).ok()?,
                str_at(&p, &["name"]).map(str::to_owned),
            ))
        })
        .collect();
    let app_port = match options.app_port {
        Some(port) => port,
        None => app_ports.first().map(|(port, _)| *port).ok_or_else(|| {
            fail("no containerPort says where the application listens: give --app-port".into())
        })?,
    };
    if [options.proxy_port, options.admin_port].contains(&app_port) {
        return Err(fail(format!(
            "the application's port {app_port} is the proxy's: give other --proxy-port/--admin-port"
        )));
    }
    let app_port_names = app_ports
        .iter()
        .filter(|(port, _)| *port == app_port)
        .filter_map(|(_, name)| name.clone())
        .collect();
    let already = containers
        .iter()
        .any(|c| str_at(c, &["name"]) == Some(CONTAINER));
    if !already {
        let config_map = options
            .config_map
            .clone()
            .unwrap_or_else(|| format!("{name}-tokengate"));
        sequence(spec, "containers")
            .expect("checked above")
            .push(sidecar(options));
        let volumes =
            sequence(spec, "volumes").ok_or_else(|| fail("spec.volumes is not a list".into()))?;
        volumes.push(from_json(
            json!({"name": VOLUME, "configMap": {"name": config_map}}),
        ));
    }
    Ok(Some(Injected {
        namespace,
        labels,
        app_port,
        app_port_names,
    }))
}

/// A document built from JSON: values taken from the input or the command line are data, never
/// YAML text to parse (a name with `}` or `#` in it cannot change the structure).
fn from_json(json: serde_json::Value) -> Value {
    serde_yaml_ng::to_value(json).expect("JSON always converts to YAML")
}

fn sidecar(options: &InjectOptions) -> Value {
    let (port, admin) = (options.proxy_port, options.admin_port);
    from_json(json!({
        "name": CONTAINER,
        "image": options.image,
        "command": ["proxy"],
        "args": ["--config", format!("{MOUNT}/proxy.yaml")],
        "ports": [
            {"name": PORT_NAME, "containerPort": port},
            {"name": ADMIN_PORT_NAME, "containerPort": admin},
        ],
        "env": [
            {"name": "PROXY_LISTEN", "value": format!("0.0.0.0:{port}")},
            {"name": "PROXY_ADMIN_LISTEN", "value": format!("0.0.0.0:{admin}")},
            {"name": "PROXY_CLIENT_SECRET", "valueFrom": {"secretKeyRef": {
                "name": options.secret, "key": "proxy-client-secret"}}},
        ],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": ADMIN_PORT_NAME}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": ADMIN_PORT_NAME}, "periodSeconds": 10},
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
    }))
}

/// Points the Service's ports that reached an injected application at the proxy instead.
fn retarget_service(service: &mut Value, injected: &[Injected]) {
    let namespace = str_at(service, &["metadata", "namespace"]).map(str::to_owned);
    let Some(selector) = service
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(Value::as_mapping)
        .filter(|s| !s.is_empty())
        .cloned()
    else {
        return;
    };
    let Some(target) = injected.iter().find(|i| {
        i.namespace == namespace && selector.iter().all(|(k, v)| i.labels.get(k) == Some(v))
    }) else {
        return;
    };
    let Some(ports) = service
        .get_mut("spec")
        .and_then(Value::as_mapping_mut)
        .and_then(|spec| spec.get_mut("ports"))
        .and_then(Value::as_sequence_mut)
    else {
        return;
    };
    for port in ports.iter_mut().filter_map(Value::as_mapping_mut) {
        let aimed = port.get("targetPort").or_else(|| port.get("port")).cloned();
        let at_app = match &aimed {
            Some(Value::Number(n)) => n.as_u64() == Some(u64::from(target.app_port)),
            Some(Value::String(name)) => target.app_port_names.contains(name),
            _ => false,
        };
        if at_app {
            port.insert("targetPort".into(), Value::from(PORT_NAME));
        }
    }
}

/// `proxy inject [FILE]`: the command line of [`inject`].
#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// Kubernetes YAML to read (`-` = standard input); the result goes to standard output.
    #[arg(default_value = "-")]
    pub file: String,
    /// Image of the sidecar container.
    #[arg(long, default_value = "tokengate:latest")]
    pub image: String,
    /// ConfigMap holding the sidecar's `proxy.yaml` (default: `<workload>-tokengate`).
    #[arg(long)]
    pub config_map: Option<String>,
    /// Secret whose `proxy-client-secret` key becomes PROXY_CLIENT_SECRET.
    #[arg(long, default_value = "tokengate")]
    pub secret: String,
    /// The application's port that Services target today (default: its first containerPort).
    #[arg(long)]
    pub app_port: Option<u16>,
    #[arg(long, default_value_t = 8000)]
    pub proxy_port: u16,
    #[arg(long, default_value_t = 8003)]
    pub admin_port: u16,
}

/// Runs `proxy inject`: 0 with the injected YAML on stdout, 1 with a message naming the input.
pub fn run(args: InjectArgs) -> std::process::ExitCode {
    use std::io::Read;
    let (label, input) = if args.file == "-" {
        let mut text = String::new();
        (
            "<stdin>".to_owned(),
            std::io::stdin().read_to_string(&mut text).map(|_| text),
        )
    } else {
        (args.file.clone(), std::fs::read_to_string(&args.file))
    };
    let options = InjectOptions {
        image: args.image,
        config_map: args.config_map,
        secret: args.secret,
        app_port: args.app_port,
        proxy_port: args.proxy_port,
        admin_port: args.admin_port,
    };
    let result = input
        .map_err(|e| e.to_string())
        .and_then(|text| inject(&text, &options).map_err(|e| e.to_string()));
    match result {
        Ok(out) => {
            print!("{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {label}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata: { name: api }
spec:
  selector: { matchLabels: { app: api } }
  template:
    metadata: { labels: { app: api } }
    spec:
      containers:
        - { name: api, image: api:1, ports: [{ name: http, containerPort: 8080 }] }
";

    #[test]
    fn injecting_twice_changes_nothing_more() {
        let once = inject(DEPLOYMENT, &InjectOptions::default()).unwrap();
        assert!(once.contains("tokengate-proxy"));
        assert_eq!(inject(&once, &InjectOptions::default()).unwrap(), once);
    }

    #[test]
    fn errors_name_the_document_and_the_workload() {
        let no_port = DEPLOYMENT.replace(", ports: [{ name: http, containerPort: 8080 }]", "");
        let input = format!("kind: ConfigMap\nmetadata: {{ name: x }}\n---\n{no_port}");
        let error = inject(&input, &InjectOptions::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "document 2 (Deployment api): no containerPort says where the application listens: give --app-port"
        );
        let bad = inject("kind: [", &InjectOptions::default()).unwrap_err();
        assert!(matches!(bad, InjectError::Yaml { doc: 1, .. }), "{bad}");
        let clash = InjectOptions {
            app_port: Some(8000),
            ..InjectOptions::default()
        };
        assert!(inject(DEPLOYMENT, &clash).is_err());
    }

    #[test]
    fn other_kinds_pass_through() {
        let input = "kind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n";
        assert_eq!(inject(input, &InjectOptions::default()).unwrap(), input);
    }

    #[test]
    fn names_and_flags_are_data_not_yaml() {
        // Names a validating API server would refuse, but inject must not panic on or be steered
        // by: `}` and `,` used to close the flow mapping the volume was built from, `#` to cut it.
        let hostile = DEPLOYMENT.replace("name: api }", "name: \"a}, evil: 1 # x\" }");
        let options = InjectOptions {
            image: "img:1 # comment".into(),
            secret: "s}, x: {".into(),
            ..InjectOptions::default()
        };
        let out = inject(&hostile, &options).unwrap();
        let doc: Value = serde_yaml_ng::from_str(&out).unwrap();
        let spec = &doc["spec"]["template"]["spec"];
        assert_eq!(
            spec["volumes"][0]["configMap"]["name"],
            "a}, evil: 1 # x-tokengate"
        );
        assert_eq!(
            spec["volumes"][0].as_mapping().unwrap().len(),
            2,
            "no key smuggled in"
        );
        assert_eq!(spec["containers"][1]["image"], "img:1 # comment");
        assert_eq!(
            spec["containers"][1]["env"][2]["valueFrom"]["secretKeyRef"]["name"],
            "s}, x: {"
        );
    }
}
