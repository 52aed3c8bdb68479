//! The deployment files, checked with real validators from PyPI (`.ci/run` installs them):
//! `kubernetes-validate --strict` on `deploy/kubernetes/` and on what `proxy inject` writes (the
//! golden outputs, against Kubernetes 1.29 and the newest schema), and the compose file against
//! the Compose Specification schema (`check-jsonschema`); the image named in one place
//! (`deploy/kubernetes/kustomization.yaml`, rendered by `kubectl kustomize`) with the install
//! steps of `docs/kubernetes.md`; and the containers' bootstrap script (`deploy/bootstrap.sh`)
//! run twice against a real database. Without the tools the tests print a skip notice, and fail
//! when `CI` is set. And what the files promise: compose builds one image, publishes on
//! 127.0.0.1 only and keeps PostgreSQL in a volume; the shipped NetworkPolicy admits the admin
//! port from the metrics namespace only; both say how to run the revocation stream over TLS.

use std::process::Command;

/// Runs `tool args`; `None` (after a notice, or a failure under CI) when the tool is missing.
fn validate(tool: &str, args: &[&str]) -> Option<std::process::Output> {
    match Command::new(tool).args(args).output() {
        Ok(output) => Some(output),
        Err(error) if std::env::var_os("CI").is_some() => {
            panic!("{tool} is needed under CI (pip install {tool}): {error}")
        }
        Err(error) => {
            eprintln!("skipped: {tool} not runnable ({error}); pip install {tool}");
            None
        }
    }
}

fn assert_valid(output: std::process::Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} does not validate:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn kubernetes_manifests_and_injected_workloads_validate_strictly() {
    let mut files: Vec<String> = std::fs::read_dir("deploy/kubernetes")
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".yaml") && !p.ends_with("kustomization.yaml"))
        .collect();
    files.extend(
        std::fs::read_dir("proxy/tests/inject")
            .unwrap()
            .map(|e| e.unwrap().path().display().to_string())
            .filter(|p| p.ends_with(".out.yaml")),
    );
    files.sort();
    // The validator has no schema for `kind: List`: its items are validated one by one.
    let scratch = std::env::temp_dir().join(format!("tokengate-list-items-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for file in files.clone() {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs = resource_server::yaml::documents(&text, &Default::default()).unwrap();
        let items: Vec<String> = docs
            .iter()
            .filter(|d| d["kind"] == "List")
            .flat_map(|d| d["items"].as_sequence().cloned().unwrap_or_default())
            .map(|item| serde_json::to_string(&item).unwrap())
            .collect();
        if !items.is_empty() {
            let name = std::path::Path::new(&file).file_name().unwrap();
            let path = scratch.join(name);
            std::fs::write(&path, items.join("\n---\n")).unwrap();
            files.push(path.display().to_string());
        }
    }
    // 1.29: the first release with native sidecars on by default (what inject writes); and the
    // tool's newest.
    for version in ["1.29.0", "1.37.0"] {
        let mut args = vec!["--strict", "--kubernetes-version", version];
        args.extend(files.iter().map(String::as_str));
        if let Some(output) = validate("kubernetes-validate", &args) {
            assert_valid(
                output,
                &format!("{} (Kubernetes {version})", files.join(", ")),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The "Install on Kubernetes" steps of `docs/kubernetes.md`, as far as they go without a
/// cluster or a registry: the image named in one place (the kustomization) reaches every
/// container, the kustomization lists every manifest, and the rendered manifests validate.
#[test]
fn the_image_is_named_in_one_place_and_the_install_steps_render() {
    let guide = std::fs::read_to_string("docs/kubernetes.md").unwrap();
    let section = guide
        .split("## Install on Kubernetes")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/kubernetes.md has an Install on Kubernetes section");
    for step in [
        "docker build -f deploy/Dockerfile -t \"$IMAGE\" .",
        "docker push \"$IMAGE\"",
        "kustomize edit set image tokengate=\"$IMAGE\"",
        "kubectl apply -k deploy/kubernetes",
        "proxy inject --image \"$IMAGE\"",
        "kubectl rollout status",
        "deploy/kubernetes/check.sh",
    ] {
        assert!(section.contains(step), "the install section lacks {step:?}");
    }
    let dir = std::env::temp_dir().join(format!("tokengate-kustomize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut listed = Vec::new();
    for entry in std::fs::read_dir("deploy/kubernetes").unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = if name == "kustomization.yaml" {
            text.replace(
                "newName: tokengate",
                "newName: registry.example.com/team/tokengate",
            )
            .replace("newTag: latest", "newTag: \"0.1.0\"")
        } else {
            // Every manifest (not check.sh) is listed.
            if name.ends_with(".yaml") {
                listed.push(name.clone());
            }
            text
        };
        std::fs::write(dir.join(&name), text).unwrap();
    }
    let kustomization = std::fs::read_to_string("deploy/kubernetes/kustomization.yaml").unwrap();
    for name in &listed {
        assert!(
            kustomization.contains(&format!("- {name}")),
            "kustomization lacks {name}"
        );
    }
    let Some(rendered) = validate("kubectl", &["kustomize", dir.to_str().unwrap()]) else {
        return;
    };
    assert_valid(rendered.clone(), "kubectl kustomize");
    let text = String::from_utf8(rendered.stdout).unwrap();
    let images: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert!(images.len() >= 4, "{text}");
    assert!(
        images
            .iter()
            .all(|i| *i == "registry.example.com/team/tokengate:0.1.0"),
        "{images:?}"
    );
    // The values "Before you start" says to replace are there to be found by its check.
    for example in [
        "REPLACE-WITH-INGRESS-CONTROLLER-CIDR",
        "value: https://auth.example.com",
        "kubernetes.io/metadata.name: monitoring",
    ] {
        assert!(
            text.contains(example),
            "the rendered manifests lack {example:?}"
        );
    }
    let out = dir.join("rendered.yaml");
    std::fs::write(&out, &text).unwrap();
    if let Some(output) = validate(
        "kubernetes-validate",
        &[
            "--strict",
            "--kubernetes-version",
            "1.29.0",
            out.to_str().unwrap(),
        ],
    ) {
        assert_valid(output, "the rendered manifests");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_compose_file_follows_the_compose_specification() {
    let args = [
        "--builtin-schema",
        "vendor.compose-spec",
        "docker-compose.yml",
    ];
    if let Some(output) = validate("check-jsonschema", &args) {
        assert_valid(output, "docker-compose.yml");
    }
}

#[test]
fn compose_builds_one_image_publishes_on_loopback_and_keeps_the_database() {
    let text = std::fs::read_to_string("docker-compose.yml").unwrap();
    let docs = resource_server::yaml::documents(&text, &Default::default()).unwrap();
    let compose = &docs[0];
    let services = compose["services"].as_mapping().unwrap();
    // One image name, built by one service; the others run it and never pull it.
    let ours: Vec<_> = services
        .iter()
        .filter(|(_, s)| s["image"] == "tokengate:local")
        .collect();
    assert_eq!(ours.len(), 4, "the four tokengate services share one image");
    let builders: Vec<_> = services
        .iter()
        .filter(|(_, s)| s.get("build").is_some())
        .map(|(name, _)| name.as_str().unwrap())
        .collect();
    assert_eq!(builders, ["bootstrap"]);
    for (name, service) in &ours {
        if service.get("build").is_none() {
            assert_eq!(service["pull_policy"], "never", "{name:?}");
        }
    }
    // Published ports on 127.0.0.1 only.
    let mut published = 0;
    for (name, service) in services {
        for port in service["ports"].as_sequence().into_iter().flatten() {
            let port = port.as_str().unwrap();
            assert!(port.starts_with("127.0.0.1:"), "{name:?} publishes {port}");
            published += 1;
        }
    }
    assert_eq!(published, 2);
    // PostgreSQL's data in a named volume.
    let postgres = &compose["services"]["postgres"];
    assert!(
        postgres["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|v| v.as_str() == Some("postgres-data:/var/lib/postgresql/data"))
    );
    assert!(compose["volumes"].get("postgres-data").is_some());
    // The revocation stream over TLS is explained where it is configured.
    assert!(
        text.contains("PROXY_REVOCATION_URL: https://"),
        "compose: TLS"
    );
    let sidecar = std::fs::read_to_string("deploy/kubernetes/sidecar.yaml").unwrap();
    assert!(
        sidecar.contains("configuration_url: https://"),
        "sidecar.yaml: TLS"
    );
}

#[test]
fn the_shipped_network_policy_admits_the_admin_port_from_the_metrics_namespace_only() {
    let text = std::fs::read_to_string("deploy/kubernetes/sidecar.yaml").unwrap();
    let docs = resource_server::yaml::documents(&text, &Default::default()).unwrap();
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .expect("sidecar.yaml has a NetworkPolicy");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app"],
        "example-api"
    );
    let rules = policy["spec"]["ingress"].as_sequence().unwrap();
    let ports: Vec<Vec<u64>> = rules
        .iter()
        .map(|rule| {
            rule["ports"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_u64().unwrap())
                .collect()
        })
        .collect();
    // Whatever admits the admin port names where from: a namespace, never the whole cluster.
    for (rule, ports) in rules.iter().zip(&ports) {
        assert!(
            !ports.contains(&8002),
            "the API's own port is never admitted"
        );
        if ports.contains(&8003) {
            assert_eq!(ports, &[8003]);
            let from = rule["from"]
                .as_sequence()
                .expect("the admin port needs a from");
            assert_eq!(from.len(), 1);
            assert_eq!(
                from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                "monitoring"
            );
        }
    }
    let open = rules
        .iter()
        .zip(&ports)
        .any(|(r, p)| p == &[8000] && r.get("from").is_none());
    assert!(open, "the proxy's port from anywhere");
    assert!(ports.iter().any(|p| p == &[8003]));
}

/// `deploy/kubernetes/check.sh` on a copy of the shipped directory: as shipped it fails,
/// naming each required value still at its example (the image, the issuer, the ingress CIDR)
/// and the Secret it cannot find; with them set, `--offline` says ready; with a cluster whose
/// Secret lacks a key, it names that key. (No cluster here: a stand-in `kubectl` answers
/// `get secret` with the keys of a Secret and hands every other command to the real one.)
#[test]
fn the_kubernetes_check_names_every_required_value_before_apply() {
    let dir = std::env::temp_dir().join(format!("tokengate-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let manifests = dir.join("kubernetes");
    std::fs::create_dir_all(&manifests).unwrap();
    for entry in std::fs::read_dir("deploy/kubernetes").unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, manifests.join(path.file_name().unwrap())).unwrap();
    }
    let check = manifests.join("check.sh");
    let run = |args: &[&str], path: Option<&std::path::Path>| {
        let mut command = Command::new(&check);
        command.args(args);
        if let Some(path) = path {
            let inherited = std::env::var("PATH").unwrap_or_default();
            command.env("PATH", format!("{}:{inherited}", path.display()));
        }
        let out = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = run(&["--offline"], None);
    assert_eq!(code, Some(1), "{text}");
    for named in [
        "missing: the image",
        "missing: AUTHSERVER_ISSUER",
        "missing: AUTHSERVER_TRUSTED_PROXIES",
        "3 value(s) to set",
    ] {
        assert!(text.contains(named), "{named:?} in:\n{text}");
    }
    assert!(text.contains("note: the NetworkPolicy"), "{text}");
    let edit = |file: &str, from: &str, to: &str| {
        let path = manifests.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has {from:?}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
    };
    edit(
        "kustomization.yaml",
        "newName: tokengate",
        "newName: registry.example.org/team/tokengate",
    );
    edit(
        "authserver.yaml",
        "\"https://auth.example.com\"",
        "\"https://auth.example.org\"",
    );
    edit(
        "authserver.yaml",
        "REPLACE-WITH-INGRESS-CONTROLLER-CIDR",
        "10.2.0.0/16",
    );
    let (code, text) = run(&["--offline"], None);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("ready: kubectl apply -k"), "{text}");
    let (code, text) = run(&["--cluster"], None);
    assert_eq!(code, Some(2), "bad usage: {text}");

    // The Secret: a stand-in kubectl whose cluster has the Secret without one key.
    let Some(real) = validate("kubectl", &["version", "--client"]) else {
        return;
    };
    assert_valid(real, "kubectl version --client");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real_kubectl = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v kubectl"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let stand_in = bin.join("kubectl");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\nif [ \"$1 $2 $3\" = \"get secret tokengate\" ]; then printf 'database-url\\nproxy-client-secret\\nsecrets-system\\napi-database-password\\napi-database-url\\n'; exit 0; fi\nexec {} \"$@\"\n",
            real_kubectl.trim()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, text) = run(&[], Some(&bin));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("missing: the key proxy-peer-secret of the Secret tokengate"),
        "{text}"
    );
    assert!(text.contains("1 value(s) to set"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The workspace's `authserver` binary next to this test's build directory.
fn authserver_binary() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("authserver");
    path.exists().then_some(path)
}

#[tokio::test]
async fn the_bootstrap_script_registers_the_proxy_client_once_and_keeps_it_in_step() {
    let Some(authserver) = authserver_binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "the authserver binary is needed under CI (cargo test --workspace builds it)"
        );
        eprintln!("skipped: no authserver binary built yet (cargo test --workspace builds it)");
        return;
    };
    let dir = std::env::temp_dir().join(format!(
        "tg-bootstrap-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite://{}/authserver.db", dir.display());
    let secret_file = dir.join("proxy-client.secret");
    let run = || {
        let out = Command::new("bash")
            .arg("deploy/bootstrap.sh")
            .env("AUTHSERVER", &authserver)
            .env("AUTHSERVER_DATABASE_URL", &db)
            .env("PROXY_CLIENT_SECRET_FILE", &secret_file)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run();
    assert!(first.contains("tokengate-proxy registered"), "{first}");
    assert!(
        first.contains("administrator admin created, password: "),
        "{first}"
    );
    let second = run();
    assert!(
        second.contains("already registered with this secret"),
        "{second}"
    );
    assert!(second.contains("no administrator created"), "{second}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the secret file is the owner's only");
    }
    // A secret that changed (a new volume, a rotated Kubernetes Secret) is put back in step.
    std::fs::write(&secret_file, "x".repeat(20) + "abcdefghijklmnopqrstuvwxyz").unwrap();
    let third = run();
    assert!(third.contains("registered again"), "{third}");

    let store = authserver::store::Store::connect(&db).await.unwrap();
    let app = store
        .find_application_by_client_id("tokengate-proxy")
        .await
        .unwrap()
        .unwrap();
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    assert!(app.secret_matches(secret.trim()) && app.may_introspect);
    let password = first
        .split("password: ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let admin = store.authenticate_user("admin", password).await.unwrap();
    assert!(
        admin.is_some_and(|a| a.is_superuser),
        "the printed password opens admin"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// On PostgreSQL (`DATABASE_URL`), as compose runs it: the bootstrap script makes the signing
/// keys' encryption secret and the example API's database password (both 0600), and the role
/// it creates lists users but cannot read the signing keys. Run twice, it changes nothing.
#[tokio::test]
async fn the_bootstrap_script_gives_the_example_api_a_role_of_its_own() {
    let (Some(authserver), Some(db)) = (
        authserver_binary(),
        authserver::testing::postgres_schema_url().await,
    ) else {
        eprintln!("skipped: needs the authserver binary and DATABASE_URL=postgres://…");
        return;
    };
    let dir = std::env::temp_dir().join(format!(
        "tg-bootstrap-{}",
        authserver::secrets::random_client_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let role = format!(
        "tg_api_{}",
        authserver::secrets::random_client_id()
            .to_lowercase()
            .replace('-', "_")
    );
    let (kek, password_file) = (
        dir.join("secrets-system"),
        dir.join("api-database.password"),
    );
    for _ in 0..2 {
        let out = Command::new("bash")
            .arg("deploy/bootstrap.sh")
            .env("AUTHSERVER", &authserver)
            .env("AUTHSERVER_DATABASE_URL", &db)
            .env("AUTHSERVER_SECRETS_SYSTEM_FILE", &kek)
            .env("PROXY_CLIENT_SECRET_FILE", dir.join("proxy-client.secret"))
            .env("API_DATABASE_PASSWORD_FILE", &password_file)
            .env("API_DATABASE_ROLE", &role)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    {
        use std::os::unix::fs::PermissionsExt;
        for file in [&kek, &password_file] {
            let mode = std::fs::metadata(file).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is the owner's only", file.display());
        }
    }
    let password = std::fs::read_to_string(&password_file).unwrap();
    let (scheme, rest) = db.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    let api_url = format!("{scheme}://{role}:{}@{host}", password.trim());
    let api = authserver::store::Store::connect(&api_url).await.unwrap();
    assert_eq!(api.list_users().await.unwrap()[0].username, "admin");
    let refused = sqlx::query("SELECT private_key FROM signing_keys")
        .execute(api.pool())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    api.pool().close().await;
    let admin = authserver::store::Store::connect(&db).await.unwrap();
    for cleanup in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        let _ = sqlx::query(&cleanup).execute(admin.pool()).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
