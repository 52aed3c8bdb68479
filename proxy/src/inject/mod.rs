//! `proxy inject`: adds the tokengate sidecar to Kubernetes workloads, the way `linkerd inject`
//! does, and `proxy inject --remove` takes it out again.
//!
//! Reads YAML documents, multi-document streams and `kind: List` included, within the limits of
//! [`resource_server::yaml`]. For every workload (Deployment, StatefulSet, DaemonSet, ReplicaSet,
//! Job, CronJob, Pod) it:
//! - adds the `tokengate-proxy` container, a native sidecar (an init container with
//!   `restartPolicy: Always`, Kubernetes 1.29+) unless `--legacy-sidecar`;
//! - moves the application's httpGet and tcpSocket probes onto the proxy's admin listener
//!   ([`probes`]), since the application listens on loopback only;
//! - points the `targetPort` of every Service in the input that selects the pods and aimed at the
//!   application's port (by number, or by name: then the proxy's port name) at the proxy; other
//!   ports stay;
//! - emits a starter rules ConfigMap (unless `--config-map`) that follows the revocation stream
//!   (introspection), and a NetworkPolicy admitting ingress only on the proxy's port, and on its
//!   admin port from the metrics namespace only (unless `--no-network-policy`), see
//!   [`generated`].
//!
//! What it changed is kept in the `tokengate.io/injected` annotation (the original probes and
//! target ports), which is how `--remove` restores the input. Other kinds pass through as they
//! are, a workload that already has the sidecar is left alone, and running it again changes
//! nothing. YAML comments are not kept (documents are re-serialised); key order is.

mod generated;
mod probes;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use resource_server::yaml::{self, Limits};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

pub use generated::MANAGED_BY;

/// The namespace allowed to scrape the admin port by default (kube-prometheus's, and the
/// Prometheus Operator's usual one).
pub const DEFAULT_METRICS_NAMESPACE: &str = "monitoring";
/// The SSF configuration's path at the authorization server's origin.
const SSF_CONFIGURATION_PATH: &str = "/.well-known/ssf-configuration";

/// Name of the sidecar container, and of the ports it adds.
pub const CONTAINER: &str = "tokengate-proxy";
const PORT_NAME: &str = "tokengate";
const ADMIN_PORT_NAME: &str = "tokengate-admin";
const VOLUME: &str = "tokengate-config";
const MOUNT: &str = "/etc/tokengate";
/// The annotation holding what inject changed (JSON), on pod templates and Services.
pub const RECORD: &str = "tokengate.io/injected";
/// Kinds whose pod template is at `spec.template` (CronJob's is a level down, Pod is one).
const WORKLOADS: [&str; 5] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
];

/// `--app-port`: a port number, or the name of a container port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppPort {
    Number(u16),
    Name(String),
}

impl std::str::FromStr for AppPort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return s
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .map(AppPort::Number)
                .ok_or_else(|| format!("{s:?}: a port is 1 to 65535"));
        }
        if s.is_empty()
            || s.len() > 15
            || !s
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "{s:?}: expected a port number or a container port name (a-z, 0-9, -; 15 at most)"
            ));
        }
        Ok(AppPort::Name(s.to_owned()))
    }
}

impl fmt::Display for AppPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppPort::Number(n) => write!(f, "{n}"),
            AppPort::Name(name) => f.write_str(name),
        }
    }
}

/// How the starter rules file checks tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenCheck {
    /// RFC 7662 introspection; the client secret comes from the Secret, through the environment.
    Introspection { url: String, client_id: String },
    /// Local validation of JWT access tokens.
    Jwt {
        jwks_url: String,
        issuer: String,
        audience: String,
    },
}

/// What the injected sidecar looks like.
#[derive(Debug, Clone)]
pub struct InjectOptions {
    pub image: String,
    /// An existing ConfigMap holding `proxy.yaml`; `None`: a starter one, `<workload>-tokengate`.
    pub config_map: Option<String>,
    /// The Secret whose `proxy-client-secret` key becomes `PROXY_CLIENT_SECRET`.
    pub secret: String,
    /// The application's port; default: the first `containerPort` of the first container.
    pub app_port: Option<AppPort>,
    pub proxy_port: u16,
    pub admin_port: u16,
    /// The proxy as an ordinary container (clusters before 1.29; Jobs then never complete).
    pub legacy_sidecar: bool,
    /// Emit a NetworkPolicy admitting ingress only on the proxy's ports.
    pub network_policy: bool,
    /// The namespace whose pods (Prometheus) may reach the admin port (`/metrics`), by its
    /// `kubernetes.io/metadata.name` label; `None`: none may (the kubelet's probes come from
    /// the node, which a NetworkPolicy never blocks).
    pub metrics_namespace: Option<String>,
    /// The starter rules follow this revocation stream (`revocation.configuration_url`);
    /// `None`: no `revocation:` section.
    pub revocation_url: Option<String>,
    /// The scope the starter rules file requires on every path.
    pub scope: String,
    pub token_check: TokenCheck,
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
            legacy_sidecar: false,
            network_policy: true,
            metrics_namespace: Some(DEFAULT_METRICS_NAMESPACE.into()),
            revocation_url: Some("http://authserver:8001/.well-known/ssf-configuration".into()),
            scope: "read".into(),
            token_check: TokenCheck::Introspection {
                url: "http://authserver:8001/o/introspect/".into(),
                client_id: "tokengate-proxy".into(),
            },
        }
    }
}

/// The result: the YAML, and notes for the operator (what was left alone and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    pub yaml: String,
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InjectError {
    /// Not YAML, or beyond the limits of [`resource_server::yaml`].
    #[error("{0}")]
    Yaml(String),
    #[error("document {doc} ({kind} {name}): {message}")]
    Workload {
        doc: usize,
        kind: String,
        name: String,
        message: String,
    },
}

/// What inject changed in a pod template or a Service: the annotation [`RECORD`].
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Record {
    /// container → probe field → the probe as it was.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    probes: BTreeMap<String, Mapping>,
    /// Service port index → its `targetPort` as it was (null: it had none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    target_ports: BTreeMap<usize, Value>,
    /// Keys inject added (`metadata`, `annotations`, `initContainers`, `volumes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    created: Vec<String>,
}

/// One resource of the input (a document, or an item of a List), and what follows it.
struct Item {
    doc: usize,
    value: Value,
    /// Generated resources to write right after it.
    after: Vec<Value>,
    dropped: bool,
}

/// How the resources were laid out in documents.
enum Layout {
    Single(usize),
    List { shell: Value, items: Range<usize> },
}

/// An injected workload, as Services see it.
struct Served {
    namespace: Option<String>,
    labels: Mapping,
    /// What selects the pods (the workload's `matchLabels`, else the pod's labels).
    selector: Mapping,
    app_port: u16,
    app_port_names: Vec<String>,
}

/// A Service of the input, as workloads see it.
struct ServiceView {
    namespace: Option<String>,
    name: String,
    selector: Mapping,
    /// Each port's `targetPort` (or `port` when it has none).
    targets: Vec<Value>,
}

impl ServiceView {
    fn of(value: &Value) -> Option<ServiceView> {
        let selector = value
            .get("spec")?
            .get("selector")?
            .as_mapping()
            .filter(|s| !s.is_empty())?
            .clone();
        let targets = value["spec"]
            .get("ports")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("targetPort").or_else(|| p.get("port")).cloned())
            .collect();
        Some(ServiceView {
            namespace: str_at(value, &["metadata", "namespace"]).map(str::to_owned),
            name: str_at(value, &["metadata", "name"])
                .unwrap_or("<unnamed>")
                .to_owned(),
            selector,
            targets,
        })
    }

    fn selects(&self, namespace: &Option<String>, labels: &Mapping) -> bool {
        &self.namespace == namespace && self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// A ConfigMap of the input: where it is, and whether the proxy configuration it holds
/// (`proxy.yaml`) serves the admin listener over TLS (`admin_tls: true`), so that the kubelet's
/// probes of the sidecar must use `scheme: HTTPS`.
struct ConfigMapView {
    namespace: Option<String>,
    name: String,
    admin_tls: bool,
}

impl ConfigMapView {
    fn of(value: &Value) -> ConfigMapView {
        let admin_tls = str_at(value, &["data", "proxy.yaml"])
            // Read within the same limits as the input: the text is the user's.
            .and_then(|text| yaml::from_str::<Value>(text).ok())
            .and_then(|config| config.get("admin_tls").and_then(Value::as_bool))
            .unwrap_or(false);
        ConfigMapView {
            namespace: str_at(value, &["metadata", "namespace"]).map(str::to_owned),
            name: str_at(value, &["metadata", "name"])
                .unwrap_or_default()
                .to_owned(),
            admin_tls,
        }
    }

    fn is(&self, namespace: &Option<String>, name: &str) -> bool {
        &self.namespace == namespace && self.name == name
    }
}

/// `input` with the sidecar added to every workload.
pub fn inject(input: &str, options: &InjectOptions) -> Result<Injection, InjectError> {
    let (mut items, layout) = read(input)?;
    let services: Vec<ServiceView> = items
        .iter()
        .filter(|i| kind(&i.value) == "Service")
        .filter_map(|i| ServiceView::of(&i.value))
        .collect();
    let config_maps: Vec<ConfigMapView> = items
        .iter()
        .filter(|i| kind(&i.value) == "ConfigMap")
        .map(|i| ConfigMapView::of(&i.value))
        .collect();
    let mut notes = Vec::new();
    let mut served = Vec::new();
    for item in &mut items {
        let mut workload = Workload {
            kind: kind(&item.value).to_owned(),
            name: name(&item.value).to_owned(),
            item,
            services: &services,
            config_maps: &config_maps,
            options,
            notes: &mut notes,
        };
        if let Some(done) = workload.inject()? {
            served.push(done);
        }
    }
    for item in items.iter_mut().filter(|i| kind(&i.value) == "Service") {
        retarget_service(&mut item.value, &served, options.proxy_port);
    }
    Ok(Injection {
        yaml: write(items, layout),
        notes,
    })
}

/// `input` as it was before [`inject`]: the sidecar, its volume, the rewritten probes and
/// target ports and the generated resources taken out, by the [`RECORD`] annotations.
pub fn remove(input: &str) -> Result<Injection, InjectError> {
    let (mut items, layout) = read(input)?;
    let mut notes = Vec::new();
    for item in &mut items {
        let value = &mut item.value;
        let labels = value.get("metadata").and_then(|m| m.get("labels"));
        if labels
            .and_then(|l| l.get(MANAGED_BY.0))
            .and_then(Value::as_str)
            == Some(MANAGED_BY.1)
        {
            item.dropped = true;
            continue;
        }
        let what = format!("{} {}", kind(value), name(value));
        let is_service = kind(value) == "Service";
        let object = if is_service {
            value.as_mapping_mut()
        } else {
            match template_mut(value) {
                Some(template) => template,
                None => continue,
            }
        };
        let Some(object) = object else { continue };
        let record = match take_record(object) {
            Ok(Some(record)) => record,
            Ok(None) => {
                if has_sidecar(object) {
                    notes.push(format!(
                        "{what}: has the sidecar but no {RECORD} annotation; left as it is"
                    ));
                }
                continue;
            }
            Err(message) => {
                return Err(InjectError::Workload {
                    doc: item.doc,
                    kind: kind(value).to_owned(),
                    name: name(value).to_owned(),
                    message,
                });
            }
        };
        if is_service {
            restore_service(object, &record);
        } else {
            restore_workload(object, &record);
        }
        drop_created(object, &record.created);
    }
    Ok(Injection {
        yaml: write(items, layout),
        notes,
    })
}

/// The resources of `input`, List items taken out of their List.
fn read(input: &str) -> Result<(Vec<Item>, Vec<Layout>), InjectError> {
    let docs =
        yaml::documents(input, &Limits::DEFAULT).map_err(|e| InjectError::Yaml(e.to_string()))?;
    let mut items = Vec::new();
    let mut layout = Vec::new();
    for (index, mut value) in docs.into_iter().enumerate() {
        let doc = index + 1;
        let item = |value| Item {
            doc,
            value,
            after: Vec::new(),
            dropped: false,
        };
        if value.is_null() {
            continue;
        }
        let listed =
            kind(&value).ends_with("List") && value.get("items").is_some_and(Value::is_sequence);
        if listed {
            let list = std::mem::take(&mut value["items"]);
            let start = items.len();
            items.extend(list.as_sequence().into_iter().flatten().cloned().map(item));
            layout.push(Layout::List {
                shell: value,
                items: start..items.len(),
            });
        } else {
            layout.push(Layout::Single(items.len()));
            items.push(item(value));
        }
    }
    Ok((items, layout))
}

/// The resources as multi-document YAML, List items back in their List.
fn write(items: Vec<Item>, layout: Vec<Layout>) -> String {
    let mut items: Vec<Option<Item>> = items.into_iter().map(Some).collect();
    let mut docs = Vec::new();
    let mut take = |index: usize| -> Vec<Value> {
        let item = items[index].take().expect("each item is laid out once");
        let mut out = Vec::new();
        if !item.dropped {
            out.push(item.value);
        }
        out.extend(item.after);
        out
    };
    for place in layout {
        match place {
            Layout::Single(index) => docs.extend(take(index)),
            Layout::List { mut shell, items } => {
                let list: Vec<Value> = items.flat_map(&mut take).collect();
                shell["items"] = Value::Sequence(list);
                docs.push(shell);
            }
        }
    }
    let mut out = String::new();
    for (i, value) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(value).expect("a parsed document serialises"));
    }
    out
}

fn kind(value: &Value) -> &str {
    str_at(value, &["kind"]).unwrap_or_default()
}

fn name(value: &Value) -> &str {
    str_at(value, &["metadata", "name"]).unwrap_or("<unnamed>")
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .and_then(Value::as_str)
}

/// A workload's pod template (`None`: not a workload; `Some(None)`: a workload without one).
fn template_mut(value: &mut Value) -> Option<Option<&mut Mapping>> {
    let path: &[&str] = match kind(value) {
        "Pod" => &[],
        "CronJob" => &["spec", "jobTemplate", "spec", "template"],
        k if WORKLOADS.contains(&k) => &["spec", "template"],
        _ => return None,
    };
    Some(
        path.iter()
            .try_fold(value, |v, key| v.get_mut(*key))
            .and_then(Value::as_mapping_mut),
    )
}

/// Whether a pod template has the sidecar, as a container or an init container.
fn has_sidecar(template: &Mapping) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        template
            .get("spec")
            .and_then(|s| s.get(*list))
            .and_then(Value::as_sequence)
            .is_some_and(|c| c.iter().any(|c| str_at(c, &["name"]) == Some(CONTAINER)))
    })
}

/// Mutable list at `key` of `map`, created empty (and named in `created`) when missing.
fn sequence<'a>(
    map: &'a mut Mapping,
    key: &str,
    created: &mut Vec<String>,
) -> Option<&'a mut Vec<Value>> {
    if !map.contains_key(key) {
        created.push(key.to_owned());
    }
    map.entry(Value::from(key))
        .or_insert_with(|| Value::Sequence(Vec::new()))
        .as_sequence_mut()
}

/// Writes `record` into `object`'s `metadata.annotations`, creating either when missing (and
/// saying so in the record).
fn put_record(object: &mut Mapping, mut record: Record) -> Result<(), String> {
    if !object.contains_key("metadata") {
        record.created.push("metadata".into());
    }
    let metadata = object
        .entry("metadata".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or("metadata is not a mapping")?;
    if !metadata.contains_key("annotations") {
        record.created.push("annotations".into());
    }
    let json = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    metadata
        .entry("annotations".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or("metadata.annotations is not a mapping")?
        .insert(RECORD.into(), Value::String(json));
    Ok(())
}

/// Takes the [`RECORD`] annotation out of `object`, if it has one.
fn take_record(object: &mut Mapping) -> Result<Option<Record>, String> {
    let Some(annotations) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_mapping_mut)
    else {
        return Ok(None);
    };
    let Some(json) = annotations.shift_remove(RECORD) else {
        return Ok(None);
    };
    let json = json.as_str().unwrap_or_default();
    serde_json::from_str(json)
        .map(Some)
        .map_err(|e| format!("annotation {RECORD}: not what inject writes: {e}"))
}

/// Removes the keys inject created, when they are empty again.
fn drop_created(object: &mut Mapping, created: &[String]) {
    let empty = |v: Option<&Value>| match v {
        Some(Value::Mapping(m)) => m.is_empty(),
        Some(Value::Sequence(s)) => s.is_empty(),
        _ => false,
    };
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_mapping_mut) {
        for key in ["initContainers", "volumes"] {
            if created.iter().any(|c| c == key) && empty(spec.get(key)) {
                spec.shift_remove(key);
            }
        }
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_mapping_mut)
        && created.iter().any(|c| c == "annotations")
        && empty(metadata.get("annotations"))
    {
        metadata.shift_remove("annotations");
    }
    if created.iter().any(|c| c == "metadata") && empty(object.get("metadata")) {
        object.shift_remove("metadata");
    }
}

fn restore_workload(template: &mut Mapping, record: &Record) {
    let Some(spec) = template.get_mut("spec").and_then(Value::as_mapping_mut) else {
        return;
    };
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_sequence_mut) {
            containers.retain(|c| str_at(c, &["name"]) != Some(CONTAINER));
            for container in containers.iter_mut() {
                let name = str_at(container, &["name"]).unwrap_or_default().to_owned();
                let (Some(originals), Some(container)) =
                    (record.probes.get(&name), container.as_mapping_mut())
                else {
                    continue;
                };
                for (field, probe) in originals {
                    container.insert(field.clone(), probe.clone());
                }
            }
        }
    }
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_sequence_mut) {
        volumes.retain(|v| str_at(v, &["name"]) != Some(VOLUME));
    }
}

fn restore_service(service: &mut Mapping, record: &Record) {
    let Some(ports) = service
        .get_mut("spec")
        .and_then(|s| s.get_mut("ports"))
        .and_then(Value::as_sequence_mut)
    else {
        return;
    };
    for (index, original) in &record.target_ports {
        let Some(port) = ports.get_mut(*index).and_then(Value::as_mapping_mut) else {
            continue;
        };
        if original.is_null() {
            port.shift_remove("targetPort");
        } else {
            port.insert("targetPort".into(), original.clone());
        }
    }
}

/// One resource of the input, seen as a workload to inject.
struct Workload<'a> {
    kind: String,
    name: String,
    item: &'a mut Item,
    services: &'a [ServiceView],
    config_maps: &'a [ConfigMapView],
    options: &'a InjectOptions,
    notes: &'a mut Vec<String>,
}

impl Workload<'_> {
    fn fail(&self, message: String) -> InjectError {
        InjectError::Workload {
            doc: self.item.doc,
            kind: self.kind.clone(),
            name: self.name.clone(),
            message,
        }
    }

    fn inject(&mut self) -> Result<Option<Served>, InjectError> {
        let value = &self.item.value;
        let (kind, name) = (self.kind.clone(), self.name.clone());
        let what = format!("{kind} {name}");
        let namespace = str_at(value, &["metadata", "namespace"]).map(str::to_owned);
        let matched = value
            .get("spec")
            .and_then(|s| s.get("selector"))
            .and_then(|s| s.get("matchLabels"))
            .and_then(Value::as_mapping)
            .filter(|_| kind != "Pod")
            .cloned();
        let options = self.options;
        let mut value = std::mem::take(&mut self.item.value);
        let result = self.inject_template(&mut value, &name, &what, matched);
        self.item.value = value;
        let Some(served) = result? else {
            return Ok(None);
        };
        if options.legacy_sidecar && matches!(kind.as_str(), "Job" | "CronJob") {
            self.notes.push(format!(
                "{what}: with --legacy-sidecar the proxy is an ordinary container that keeps \
                 running after the work is done, so the Job never completes; use native \
                 sidecars (Kubernetes 1.29+, the default)"
            ));
        }
        let generated = format!("{name}-tokengate");
        if options.config_map.is_none()
            && !self
                .config_maps
                .iter()
                .any(|c| c.is(&namespace, &generated))
        {
            self.item.after.push(generated::config_map(
                &generated,
                namespace.as_deref(),
                served.app_port,
                options,
            ));
        }
        if options.network_policy {
            if served.selector.is_empty() {
                self.notes.push(format!(
                    "{what}: no labels to select its pods by, so no NetworkPolicy: give it labels"
                ));
            } else {
                self.item.after.push(generated::network_policy(
                    &generated,
                    namespace.as_deref(),
                    &served.selector,
                    options,
                ));
            }
        }
        Ok(Some(served))
    }

    /// Adds the sidecar to `value`'s pod template; `None` when `value` is no workload or
    /// already has the sidecar.
    fn inject_template(
        &mut self,
        value: &mut Value,
        workload: &str,
        what: &str,
        matched: Option<Mapping>,
    ) -> Result<Option<Served>, InjectError> {
        let options = self.options;
        let namespace = str_at(value, &["metadata", "namespace"]).map(str::to_owned);
        let Some(template) = template_mut(value) else {
            return Ok(None);
        };
        let template = template.ok_or_else(|| self.fail("no pod template".into()))?;
        if has_sidecar(template) {
            self.notes
                .push(format!("{what}: already has the sidecar; left as it is"));
            return Ok(None);
        }
        let labels = template
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_mapping)
            .cloned()
            .unwrap_or_default();
        let selector = matched.unwrap_or_else(|| labels.clone());
        let spec = template
            .get_mut("spec")
            .and_then(Value::as_mapping_mut)
            .ok_or_else(|| self.fail("no pod spec".into()))?;
        if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
            self.notes.push(format!(
                "{what}: hostNetwork: the pod shares the node's network, so its loopback is the \
                 node's and NetworkPolicies do not apply: the proxy cannot fence the application"
            ));
        }
        let containers = spec
            .get_mut("containers")
            .and_then(Value::as_sequence_mut)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| self.fail("no containers".into()))?;
        let container_ports: Vec<(u16, Option<String>)> = containers
            .iter()
            .flat_map(|c| {
                c.get("ports")
                    .and_then(Value::as_sequence)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|p| {
                let number = u16::try_from(p.get("containerPort")?.as_u64()?).ok()?;
                Some((number, str_at(&p, &["name"]).map(str::to_owned)))
            })
            .collect();
        let services: Vec<&ServiceView> = self
            .services
            .iter()
            .filter(|s| s.selects(&namespace, &labels))
            .collect();
        let app_port = self.app_port(&container_ports, &services)?;
        if [options.proxy_port, options.admin_port].contains(&app_port) {
            return Err(self.fail(format!(
                "the application's port {app_port} is the proxy's: give other --proxy-port/--admin-port"
            )));
        }
        let app_port_names = container_ports
            .iter()
            .filter(|(port, _)| *port == app_port)
            .filter_map(|(_, name)| name.clone())
            .collect();
        let config_map = options
            .config_map
            .clone()
            .unwrap_or_else(|| format!("{workload}-tokengate"));
        // The admin listener speaks TLS when the proxy configuration in the input says so.
        let admin_tls = self
            .config_maps
            .iter()
            .any(|c| c.is(&namespace, &config_map) && c.admin_tls);
        if admin_tls {
            self.notes.push(format!(
                "{what}: ConfigMap {config_map} sets admin_tls: true, so the probes on the \
                 admin port use scheme HTTPS"
            ));
        }
        let admin = probes::Admin {
            port: options.admin_port,
            tls: admin_tls,
        };
        let rewritten = probes::rewrite(containers, admin, what, self.notes)
            .map_err(|message| self.fail(message))?;
        let mut created = Vec::new();
        let sidecar = generated::sidecar(options, &rewritten.probes, admin_tls);
        if options.legacy_sidecar {
            containers.push(sidecar);
        } else {
            sequence(spec, "initContainers", &mut created)
                .ok_or_else(|| self.fail("spec.initContainers is not a list".into()))?
                .insert(0, sidecar);
        }
        let volume =
            from_json(serde_json::json!({"name": VOLUME, "configMap": {"name": config_map}}));
        sequence(spec, "volumes", &mut created)
            .ok_or_else(|| self.fail("spec.volumes is not a list".into()))?
            .push(volume);
        let record = Record {
            probes: rewritten.originals,
            target_ports: BTreeMap::new(),
            created,
        };
        put_record(template, record).map_err(|message| self.fail(message))?;
        Ok(Some(Served {
            namespace,
            labels,
            selector,
            app_port,
            app_port_names,
        }))
    }

    /// The application's port: `--app-port` if it matches a container port or a targetPort of
    /// a Service selecting the pods, else the first container port.
    fn app_port(
        &self,
        container_ports: &[(u16, Option<String>)],
        services: &[&ServiceView],
    ) -> Result<u16, InjectError> {
        let targets = || services.iter().flat_map(|s| s.targets.iter());
        let found = match &self.options.app_port {
            None => container_ports
                .first()
                .map(|(port, _)| *port)
                .or_else(|| targets().find_map(|t| t.as_u64().and_then(|n| u16::try_from(n).ok()))),
            Some(AppPort::Number(n)) => (container_ports.iter().any(|(port, _)| port == n)
                || targets().any(|t| t.as_u64() == Some(u64::from(*n))))
            .then_some(*n),
            Some(AppPort::Name(name)) => container_ports
                .iter()
                .find(|(_, named)| named.as_deref() == Some(name.as_str()))
                .map(|(port, _)| *port),
        };
        found.ok_or_else(|| {
            let mut known: Vec<String> = container_ports
                .iter()
                .map(|(port, name)| match name {
                    Some(name) => format!("{name}={port}"),
                    None => port.to_string(),
                })
                .collect();
            for service in services {
                for target in &service.targets {
                    let target = match target {
                        Value::String(s) => s.clone(),
                        other => serde_json::to_string(other).unwrap_or_default(),
                    };
                    known.push(format!("Service {} targetPort {target}", service.name));
                }
            }
            let known = if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            };
            self.fail(match &self.options.app_port {
                None => {
                    "no containerPort says where the application listens: give --app-port".into()
                }
                Some(port) => format!(
                    "--app-port {port} matches no port of the workload nor a targetPort of a \
                     Service selecting it (ports: {known})"
                ),
            })
        })
    }
}

/// Points the Service's ports that reached an injected application at the proxy instead.
fn retarget_service(service: &mut Value, served: &[Served], proxy_port: u16) {
    let Some(view) = ServiceView::of(service) else {
        return;
    };
    let Some(target) = served
        .iter()
        .find(|s| view.selects(&s.namespace, &s.labels))
    else {
        return;
    };
    let Some(object) = service.as_mapping_mut() else {
        return;
    };
    let Some(ports) = object
        .get_mut("spec")
        .and_then(|s| s.get_mut("ports"))
        .and_then(Value::as_sequence_mut)
    else {
        return;
    };
    let mut record = Record::default();
    for (index, port) in ports.iter_mut().enumerate() {
        let Some(port) = port.as_mapping_mut() else {
            continue;
        };
        let aimed = port.get("targetPort").or_else(|| port.get("port"));
        let at_app = match aimed {
            Some(Value::Number(n)) => n.as_u64() == Some(u64::from(target.app_port)),
            Some(Value::String(name)) => target.app_port_names.contains(name),
            _ => false,
        };
        if at_app {
            // A named target stays named: the proxy's container port has a name of its own.
            let proxy = match aimed {
                Some(Value::String(_)) => Value::from(PORT_NAME),
                _ => Value::from(proxy_port),
            };
            let original = port
                .insert("targetPort".into(), proxy)
                .unwrap_or(Value::Null);
            record.target_ports.insert(index, original);
        }
    }
    if !record.target_ports.is_empty() {
        // A Service always has metadata (its name): nothing else can fail here.
        let _ = put_record(object, record);
    }
}

/// A document built from JSON: values taken from the input or the command line are data, never
/// YAML text to parse (a name with `}` or `#` in it cannot change the structure).
fn from_json(json: serde_json::Value) -> Value {
    serde_yaml_ng::to_value(json).expect("JSON always converts to YAML")
}

/// `proxy inject [FILE]`: the command line of [`inject`] and [`remove`].
#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// Kubernetes YAML to read (`-` = standard input); the result goes to standard output.
    #[arg(default_value = "-")]
    pub file: String,
    /// Take the sidecar out again: the input of an earlier `proxy inject`, as it was.
    #[arg(long)]
    pub remove: bool,
    /// Image of the sidecar container.
    #[arg(long, default_value = "tokengate:latest")]
    pub image: String,
    /// An existing ConfigMap holding the sidecar's `proxy.yaml` (default: a starter
    /// `<workload>-tokengate` is written with the workloads).
    #[arg(long)]
    pub config_map: Option<String>,
    /// Secret whose `proxy-client-secret` key becomes PROXY_CLIENT_SECRET.
    #[arg(long, default_value = "tokengate")]
    pub secret: String,
    /// The application's port, a number or a container port name; it must be a port of the
    /// workload or a targetPort of a Service selecting it (default: its first containerPort).
    #[arg(long)]
    pub app_port: Option<AppPort>,
    #[arg(long, default_value_t = 8000)]
    pub proxy_port: u16,
    #[arg(long, default_value_t = 8003)]
    pub admin_port: u16,
    /// The proxy as an ordinary container, for clusters before Kubernetes 1.29 (a Job then
    /// never completes: the proxy keeps running).
    #[arg(long)]
    pub legacy_sidecar: bool,
    /// Write no NetworkPolicy (by default one admits ingress only on the proxy's port, and on
    /// its admin port from --metrics-namespace).
    #[arg(long)]
    pub no_network_policy: bool,
    /// The namespace whose pods (Prometheus) may reach the admin port's /metrics, matched by its
    /// `kubernetes.io/metadata.name` label; `none`: no pod may (the kubelet's probes come from
    /// the node, which a NetworkPolicy does not block).
    #[arg(long, default_value = DEFAULT_METRICS_NAMESPACE)]
    pub metrics_namespace: String,
    /// Starter rules: the revocation stream's SSF configuration URL (default: at the
    /// introspection URL's origin; `none`: no revocation section, cached answers then live up
    /// to 60 s after a revocation). Not with --jwks-url: the stream needs a client of its own
    /// there (add a revocation section with one).
    #[arg(long, conflicts_with = "jwks_url")]
    pub revocation_url: Option<String>,
    /// The scope the starter rules file requires on every path.
    #[arg(long, default_value = "read")]
    pub scope: String,
    /// Starter rules: the introspection endpoint.
    #[arg(long, default_value = "http://authserver:8001/o/introspect/")]
    pub introspection_url: String,
    /// Starter rules: the proxy's client id at the introspection endpoint.
    #[arg(long, default_value = "tokengate-proxy")]
    pub client_id: String,
    /// Starter rules: validate JWT access tokens locally with this JWKS instead of
    /// introspecting (needs --issuer and --audience).
    #[arg(long, requires_all = ["issuer", "audience"])]
    pub jwks_url: Option<String>,
    /// Starter rules: the JWTs' exact `iss`.
    #[arg(long, requires = "jwks_url")]
    pub issuer: Option<String>,
    /// Starter rules: this API's audience in the JWTs.
    #[arg(long, requires = "jwks_url")]
    pub audience: Option<String>,
}

impl InjectArgs {
    /// The options these flags give.
    pub fn options(self) -> InjectOptions {
        let token_check = match (self.jwks_url, self.issuer, self.audience) {
            (Some(jwks_url), Some(issuer), Some(audience)) => TokenCheck::Jwt {
                jwks_url,
                issuer,
                audience,
            },
            _ => TokenCheck::Introspection {
                url: self.introspection_url,
                client_id: self.client_id,
            },
        };
        let revocation_url = match self.revocation_url.as_deref() {
            Some("none") => None,
            Some(url) => Some(url.to_owned()),
            None => match &token_check {
                TokenCheck::Introspection { url, .. } => {
                    origin(url).map(|o| format!("{o}{SSF_CONFIGURATION_PATH}"))
                }
                TokenCheck::Jwt { .. } => None,
            },
        };
        let metrics_namespace = Some(self.metrics_namespace).filter(|n| n != "none");
        InjectOptions {
            image: self.image,
            config_map: self.config_map,
            secret: self.secret,
            app_port: self.app_port,
            proxy_port: self.proxy_port,
            admin_port: self.admin_port,
            legacy_sidecar: self.legacy_sidecar,
            network_policy: !self.no_network_policy,
            metrics_namespace,
            revocation_url,
            scope: self.scope,
            token_check,
        }
    }
}

/// `scheme://authority` of an absolute http(s) URL; `None` for anything else.
fn origin(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| &url[..url.len() - rest.len() + authority.len()])
}

/// Runs `proxy inject`: 0 with the YAML on stdout and notes on stderr, 1 with a message naming
/// the input.
pub fn run(args: InjectArgs) -> std::process::ExitCode {
    let limits = Limits::DEFAULT;
    let (label, input) = if args.file == "-" {
        (
            "<stdin>".to_owned(),
            yaml::read(std::io::stdin().lock(), &limits),
        )
    } else {
        (
            args.file.clone(),
            yaml::read_file(std::path::Path::new(&args.file), &limits),
        )
    };
    let removing = args.remove;
    let options = args.options();
    let result = input.map_err(|e| e.to_string()).and_then(|text| {
        if removing {
            remove(&text)
        } else {
            inject(&text, &options)
        }
        .map_err(|e| e.to_string())
    });
    match result {
        Ok(done) => {
            for note in &done.notes {
                eprintln!("note: {label}: {note}");
            }
            print!("{}", done.yaml);
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
    fn the_origin_of_a_url() {
        assert_eq!(
            origin("http://authserver:8001/o/introspect/"),
            Some("http://authserver:8001")
        );
        assert_eq!(origin("https://a.example?x"), Some("https://a.example"));
        for bad in ["authserver:8001/o/", "http:///x", "ftp://a/"] {
            assert_eq!(origin(bad), None, "{bad}");
        }
    }

    fn injected(input: &str, options: &InjectOptions) -> String {
        inject(input, options).unwrap().yaml
    }

    #[test]
    fn injecting_twice_changes_nothing_more() {
        let once = injected(DEPLOYMENT, &InjectOptions::default());
        assert!(once.contains("tokengate-proxy"));
        let twice = inject(&once, &InjectOptions::default()).unwrap();
        assert_eq!(twice.yaml, once);
        assert_eq!(
            twice.notes,
            ["Deployment api: already has the sidecar; left as it is"]
        );
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
        assert!(matches!(bad, InjectError::Yaml(_)), "{bad}");
        let clash = InjectOptions {
            app_port: Some(AppPort::Number(8000)),
            ..InjectOptions::default()
        };
        assert!(inject(&DEPLOYMENT.replace("8080", "8000"), &clash).is_err());
        let probe = DEPLOYMENT.replace(
            "containerPort: 8080 }]",
            "containerPort: 8080 }], livenessProbe: { tcpSocket: { port: web } }",
        );
        let error = inject(&probe, &InjectOptions::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "document 1 (Deployment api): Deployment api: container \"api\" livenessProbe: port \
             \"web\" is neither a port number nor the name of one of the container's ports"
        );
    }

    #[test]
    fn app_ports_are_numbers_or_port_names() {
        assert_eq!("8080".parse(), Ok(AppPort::Number(8080)));
        assert_eq!("http".parse(), Ok(AppPort::Name("http".into())));
        for bad in ["0", "70000", "", "Http", "a_b", "a-very-long-port-name"] {
            assert!(bad.parse::<AppPort>().is_err(), "{bad}");
        }
    }

    #[test]
    fn other_kinds_pass_through() {
        let input = "kind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n";
        assert_eq!(injected(input, &InjectOptions::default()), input);
        assert_eq!(remove(input).unwrap().yaml, input);
    }

    #[test]
    fn legacy_sidecars_in_jobs_get_a_warning() {
        let job = DEPLOYMENT
            .replace("apps/v1", "batch/v1")
            .replace("Deployment", "Job")
            .replace("  selector: { matchLabels: { app: api } }\n", "");
        let options = InjectOptions {
            legacy_sidecar: true,
            ..InjectOptions::default()
        };
        let out = inject(&job, &options).unwrap();
        assert!(
            out.notes[0].contains("the Job never completes"),
            "{:?}",
            out.notes
        );
        let doc: Value = serde_yaml_ng::from_str(out.yaml.split("---\n").next().unwrap()).unwrap();
        let spec = &doc["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][1]["name"], CONTAINER);
        assert!(spec.get("initContainers").is_none());
        assert!(
            inject(&job, &InjectOptions::default())
                .unwrap()
                .notes
                .is_empty()
        );
    }

    #[test]
    fn names_and_flags_are_data_not_yaml() {
        // Names a validating API server would refuse, but inject must not panic on or be steered
        // by: `}` and `,` used to close the flow mapping the volume was built from, `#` to cut it.
        let hostile = DEPLOYMENT.replace("name: api }", "name: \"a}, evil: 1 # x\" }");
        let options = InjectOptions {
            image: "img:1 # comment".into(),
            secret: "s}, x: {".into(),
            scope: "read\nlisten: 0.0.0.0:1".into(),
            ..InjectOptions::default()
        };
        let out = injected(&hostile, &options);
        let docs = yaml::documents(&out, &Limits::DEFAULT).unwrap();
        let spec = &docs[0]["spec"]["template"]["spec"];
        assert_eq!(
            spec["volumes"][0]["configMap"]["name"],
            "a}, evil: 1 # x-tokengate"
        );
        assert_eq!(
            spec["volumes"][0].as_mapping().unwrap().len(),
            2,
            "no key smuggled in"
        );
        let sidecar = &spec["initContainers"][0];
        assert_eq!(sidecar["image"], "img:1 # comment");
        assert_eq!(
            sidecar["env"][2]["valueFrom"]["secretKeyRef"]["name"],
            "s}, x: {"
        );
        let rules: Value =
            serde_yaml_ng::from_str(docs[1]["data"]["proxy.yaml"].as_str().unwrap()).unwrap();
        assert_eq!(rules["listen"], "0.0.0.0:8000");
        assert_eq!(rules["routes"][0]["scopes"][0], "read\nlisten: 0.0.0.0:1");
    }

    #[test]
    fn host_network_pods_get_a_warning() {
        let host = DEPLOYMENT.replace(
            "    spec:\n      containers:",
            "    spec:\n      hostNetwork: true\n      containers:",
        );
        let notes = inject(&host, &InjectOptions::default()).unwrap().notes;
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("hostNetwork"), "{notes:?}");
    }

    #[test]
    fn remove_leaves_workloads_it_did_not_inject() {
        let by_hand = DEPLOYMENT.replace(
            "containers:\n",
            "containers:\n        - { name: tokengate-proxy, image: x }\n",
        );
        let out = remove(&by_hand).unwrap();
        assert!(out.yaml.contains("tokengate-proxy"));
        assert_eq!(
            out.notes,
            [
                "Deployment api: has the sidecar but no tokengate.io/injected annotation; left as it is"
            ]
        );
    }
}
