//! The Kubernetes sidecar topology, simulated with network namespaces (`ip netns`, veth pairs on a
//! bridge): a client namespace, a "pod" namespace where the example API listens on loopback and
//! the proxy on the pod address, and an authorization-server namespace. Shows that the client
//! reaches the API only through the proxy, that the application's probes as `proxy inject` rewrote
//! them answer from outside the pod through the admin listener (and open nothing else), that
//! readiness follows the authorization server, and that SIGTERM drains in-flight requests. Needs
//! root, `ip` and the workspace's debug binaries (`cargo test --workspace` builds them); skips
//! with a notice otherwise, and fails when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Skips (or fails under CI) with `why`.
fn unavailable(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("the pod test must run under CI: {why}");
    }
    eprintln!("skipped: {why}");
}

fn run(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().unwrap()
}

fn must(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The workspace binary `name` next to this test's own build directory.
fn binary(name: &str) -> Option<PathBuf> {
    let deps = std::env::current_exe().ok()?;
    let path = deps.parent()?.parent()?.join(name);
    path.exists().then_some(path)
}

/// Three namespaces on a bridge (in a fourth); everything is removed on drop.
struct Pod {
    id: String,
    subnet: String,
    children: Vec<Child>,
}

impl Pod {
    fn ns(&self, role: char) -> String {
        format!("tg{}{role}", self.id)
    }
    fn ip(&self, role: char) -> String {
        let host = match role {
            'c' => 1,
            'p' => 2,
            _ => 3,
        };
        format!("{}.{host}", self.subnet)
    }

    fn create() -> Result<Pod, String> {
        let id = format!("{:06x}", rand_u32() & 0xff_ffff);
        let pod = Pod {
            subnet: format!("10.213.{}", 10 + rand_u32() % 240),
            id,
            children: Vec::new(),
        };
        let switch = pod.ns('s');
        let add = run(&["ip", "netns", "add", &switch]);
        if !add.status.success() {
            return Err(format!(
                "ip netns add failed: {}",
                String::from_utf8_lossy(&add.stderr).trim()
            ));
        }
        must(&[
            "ip", "netns", "exec", &switch, "ip", "link", "add", "br0", "type", "bridge",
        ]);
        must(&[
            "ip", "netns", "exec", &switch, "ip", "link", "set", "br0", "up",
        ]);
        for role in ['c', 'p', 'a'] {
            let ns = pod.ns(role);
            let (inner, outer) = (format!("v{}{role}", pod.id), format!("e{}{role}", pod.id));
            must(&["ip", "netns", "add", &ns]);
            must(&[
                "ip", "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ]);
            must(&["ip", "link", "set", &inner, "netns", &ns]);
            must(&["ip", "link", "set", &outer, "netns", &switch]);
            let cidr = format!("{}/24", pod.ip(role));
            must(&[
                "ip", "netns", "exec", &ns, "ip", "addr", "add", &cidr, "dev", &inner,
            ]);
            must(&[
                "ip", "netns", "exec", &ns, "ip", "link", "set", &inner, "up",
            ]);
            must(&["ip", "netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            must(&[
                "ip", "netns", "exec", &switch, "ip", "link", "set", &outer, "master", "br0",
            ]);
            must(&[
                "ip", "netns", "exec", &switch, "ip", "link", "set", &outer, "up",
            ]);
        }
        Ok(pod)
    }

    /// Starts `program` in namespace `role` (`ip netns exec` execs it: the child's pid is the
    /// program's).
    fn spawn(&mut self, role: char, program: &Path, args: &[&str], env: &[(&str, &str)]) -> u32 {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(role)])
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// `curl` from namespace `role`: (HTTP status, or `curl:<exit code>` when no answer; body).
    fn curl(&self, role: char, args: &[&str]) -> (String, String) {
        let ns = self.ns(role);
        let mut cmd = vec!["ip", "netns", "exec", &ns, "curl", "-s", "-m", "3"];
        cmd.extend(["-w", "\n%{http_code}"]);
        cmd.extend(args);
        let out = run(&cmd);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
        match out.status.code() {
            Some(0) => (code.to_owned(), body.to_owned()),
            other => (format!("curl:{}", other.unwrap_or(-1)), body.to_owned()),
        }
    }

    fn wait_for(&self, role: char, url: &str, want: &str, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let (status, _) = self.curl(role, &[url]);
            if status == want {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{url} from {role}: {status}, waited {within:?} for {want}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for role in ['c', 'p', 'a', 's'] {
            let _ = run(&["ip", "netns", "del", &self.ns(role)]);
        }
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish() as u32
}

fn json_field(text: &str, field: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    value[field].as_str().unwrap_or_default().to_owned()
}

/// A keep-alive client in the client namespace: 4 threads for `seconds`, each leaving when told
/// `Connection: close` (as a client behind a Service goes to another pod). Prints
/// `sent ok failed`.
const DRAIN_CLIENT: &str = r#"
import http.client, sys, threading, time
host, token, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
counts, lock = [0, 0, 0], threading.Lock()
def client():
    conn = http.client.HTTPConnection(host, 8000, timeout=5)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            conn.request("GET", "/users/", headers={"Authorization": "Bearer " + token})
            r = conn.getresponse(); r.read()
            ok, closing = r.status == 200, (r.getheader("connection") or "").lower() == "close"
        except Exception:
            ok, closing = False, True
        with lock:
            counts[0] += 1; counts[1 if ok else 2] += 1
        if closing:
            return
threads = [threading.Thread(target=client) for _ in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
print(*counts)
"#;

/// `PROXY_APP_PROBES` as `proxy inject` writes it for the example API's Deployment: a tcpSocket
/// liveness probe and an httpGet readiness probe on a protected path, both on the named port.
fn injected_probes(proxy: &Path) -> String {
    use std::io::Write;
    let deployment = "apiVersion: apps/v1
kind: Deployment
metadata: { name: api }
spec:
  selector: { matchLabels: { app: api } }
  template:
    metadata: { labels: { app: api } }
    spec:
      containers:
        - name: api
          image: example-api
          ports: [{ name: http, containerPort: 8002 }]
          livenessProbe: { tcpSocket: { port: http } }
          readinessProbe: { httpGet: { path: /users/, port: http } }
";
    let mut child = Command::new(proxy)
        .args(["inject", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(deployment.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = resource_server::yaml::documents(&text, &Default::default()).unwrap();
    let env = docs[0]["spec"]["template"]["spec"]["initContainers"][0]["env"]
        .as_sequence()
        .unwrap();
    let probes = env
        .iter()
        .find(|e| e["name"] == "PROXY_APP_PROBES")
        .unwrap();
    probes["value"].as_str().unwrap().to_owned()
}

#[test]
fn the_sidecar_pod_in_network_namespaces() {
    let binaries: Option<Vec<PathBuf>> = ["authserver", "example-api", "proxy"]
        .iter()
        .map(|b| binary(b))
        .collect();
    let Some(binaries) = binaries else {
        return unavailable(
            "authserver, example-api and proxy binaries not built (cargo test --workspace builds them)",
        );
    };
    let [auth, api, proxy] = [&binaries[0], &binaries[1], &binaries[2]];
    let mut pod = match Pod::create() {
        Ok(pod) => pod,
        Err(why) => return unavailable(&why),
    };
    let dir = std::env::temp_dir().join(format!("tg-pod-{}", pod.id));
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite://{}/authserver.db", dir.display());
    let cli = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut child = Command::new(auth)
            .args(args)
            .args(["--database-url", &db])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Only serve, migrate and createsuperuser make a database.
    cli(&["migrate"], "");
    cli(
        &["user", "create", "--username", "alice"],
        "alice-password\n",
    );
    let app = cli(
        &[
            "app", "create", "--name", "web", "--scopes", "read", "--json",
        ],
        "",
    );
    let introspector = cli(
        &[
            "app",
            "create",
            "--name",
            "sidecar",
            "--grant-type",
            "client-credentials",
            "--introspect",
            "--ssf",
            "--json",
        ],
        "",
    );
    let (auth_ip, pod_ip) = (pod.ip('a'), pod.ip('p'));
    let auth_listen = format!("{auth_ip}:8001");
    let start_auth = |pod: &mut Pod| {
        pod.spawn(
            'a',
            auth,
            &["serve", "--database-url", &db],
            &[("AUTHSERVER_LISTEN", &auth_listen)],
        )
    };
    let auth_pid = start_auth(&mut pod);
    // The secret by which the proxy proves itself to the app (a Secret mounted in both).
    let proof = "pod-test-proxy-secret-0123456789abcdef";
    let start_api = |pod: &mut Pod| {
        pod.spawn(
            'p',
            api,
            &[],
            &[
                ("EXAMPLE_API_LISTEN", "127.0.0.1:8002"),
                ("EXAMPLE_API_DATABASE_URL", &db),
                ("EXAMPLE_API_PROXY_SECRET", proof),
            ],
        )
    };
    let api_pid = start_api(&mut pod);
    let config = dir.join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: {pod_ip}:8000
admin_listen: {pod_ip}:8003
grace_period: 5s
upstreams:
  api: {{ address: 127.0.0.1:8002 }}
introspection:
  url: http://{auth_ip}:8001/o/introspect/
  client_id: {}
  client_secret: {}
routes:
  - {{ name: users, path: /users/, methods: [GET], upstream: api, scopes: [read] }}
",
            json_field(&introspector, "client_id"),
            json_field(&introspector, "client_secret"),
        ),
    )
    .unwrap();
    let probes = injected_probes(proxy);
    let proxy_pid = pod.spawn(
        'p',
        proxy,
        &["--config", config.to_str().unwrap()],
        &[
            ("PROXY_UPSTREAM_API_PROXY_SECRET", proof),
            ("PROXY_APP_PROBES", &probes),
        ],
    );
    let readyz = format!("http://{pod_ip}:8003/readyz");
    pod.wait_for('c', &readyz, "200", Duration::from_secs(15));

    // A token from the authorization server's namespace, used from the client's.
    let basic = format!(
        "{}:{}",
        json_field(&app, "client_id"),
        json_field(&app, "client_secret")
    );
    let token_url = format!("http://{auth_ip}:8001/o/token/");
    let (status, body) = pod.curl(
        'c',
        &[
            "-u",
            &basic,
            "-d",
            "grant_type=password",
            "-d",
            "username=alice",
            "-d",
            "password=alice-password",
            "-d",
            "scope=read",
            &token_url,
        ],
    );
    assert_eq!(status, "200", "{body}");
    let token = json_field(&body, "access_token");
    let bearer = format!("Authorization: Bearer {token}");

    // Through the proxy: checked and served. Around it: nothing listens.
    let users = format!("http://{pod_ip}:8000/users/");
    let (status, body) = pod.curl('c', &["-H", &bearer, &users]);
    assert_eq!(status, "200", "{body}");
    assert!(body.contains("alice"), "{body}");
    assert_eq!(pod.curl('c', &[&users]).0, "401");
    let direct = format!("http://{pod_ip}:8002/users/");
    assert_eq!(
        pod.curl('c', &["-H", &bearer, &direct]).0,
        "curl:7",
        "the API answered the client directly"
    );
    assert_eq!(pod.curl('a', &["-H", &bearer, &direct]).0, "curl:7");

    // The application's probes, as inject rewrote them, from outside the pod (where the kubelet
    // is): the tcpSocket probe follows the API, the httpGet one on a protected path gets the
    // API's own 401 (no identity reaches it that way, the prober's token neither), and no
    // other path under /app-health/ reaches the API.
    let probe = |path: &str| format!("http://{pod_ip}:8003/app-health/api/{path}");
    assert_eq!(pod.curl('c', &[&probe("livez")]).0, "200");
    let (status, body) = pod.curl('c', &["-H", &bearer, &probe("readyz")]);
    assert_eq!(status, "401", "{body}");
    assert!(!body.contains("alice"), "{body}");
    for path in [
        "readyz/../../../users/",
        "readyz/",
        "readyz?x",
        "../../users/",
        "users/",
    ] {
        let (status, body) = pod.curl('c', &["--path-as-is", "-H", &bearer, &probe(path)]);
        assert_eq!(status, "404", "{path}: {body}");
    }
    must(&["kill", "-KILL", &api_pid.to_string()]);
    let failing = pod.wait_for('c', &probe("livez"), "503", Duration::from_secs(5));
    start_api(&mut pod);
    let healthy = pod.wait_for('c', &probe("livez"), "200", Duration::from_secs(15));
    eprintln!(
        "application probe: 503 {failing:?} after the API died, 200 {healthy:?} after its restart"
    );

    // Readiness follows the authorization server.
    must(&["kill", "-KILL", &auth_pid.to_string()]);
    let down = pod.wait_for('c', &readyz, "503", Duration::from_secs(15));
    start_auth(&mut pod);
    let up = pod.wait_for('c', &readyz, "200", Duration::from_secs(15));
    eprintln!(
        "readiness: 503 {down:?} after the authorization server died, 200 {up:?} after its restart"
    );

    // SIGTERM while keep-alive clients send: every request answered, exit 0.
    let ns = pod.ns('c');
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "python3",
            "-c",
            DRAIN_CLIENT,
            &pod_ip,
            &token,
            "3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    must(&["kill", "-TERM", &proxy_pid.to_string()]);
    let out = client.wait_with_output().unwrap();
    let counts: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 3, "{out:?}");
    assert!(
        counts[1] > 0,
        "no request served before the signal: {counts:?}"
    );
    assert_eq!(counts[2], 0, "requests failed across SIGTERM: {counts:?}");
    let proxy_child = pod
        .children
        .iter_mut()
        .find(|c| c.id() == proxy_pid)
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = proxy_child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the proxy did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "proxy exit: {status}");
    drop(pod);
    let _ = std::fs::remove_dir_all(dir);
}
