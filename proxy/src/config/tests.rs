//! Unit tests of configuration parsing, validation and environment overrides.

use super::*;
use resource_server::{AnswerPolicy, ClientAuth};

const GOOD: &str = r#"
listen: 127.0.0.1:8000
admin_listen: 127.0.0.1:8003
upstreams:
  api: { address: "127.0.0.1:8002" }
  auth: { address: "authserver:8001", pass_authorization: true, host: auth.internal }
introspection:
  url: http://127.0.0.1:8001/o/introspect/
  client_id: proxy
  client_secret: s3cret
  cache: { max_ttl: 30s, negative_ttl: 500ms }
routes:
  - { name: oauth, prefix: /o/, upstream: auth, public: true }
  - { name: users, path: /users/, upstream: api, scopes: [read] }
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(src: &str) -> Result<ProxyConfig, ConfigError> {
    parse_config(src, "proxy.yaml", no_env)
}

fn error(src: &str) -> String {
    parse(src).expect_err("should be refused").to_string()
}

fn auth(c: &ProxyConfig) -> ClientAuth {
    c.gate.introspection.as_ref().unwrap().settings.auth.clone()
}

fn policy(c: &ProxyConfig) -> AnswerPolicy {
    c.gate
        .introspection
        .as_ref()
        .unwrap()
        .settings
        .policy
        .clone()
}

#[test]
fn good_file() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.listen, "127.0.0.1:8000".parse().unwrap());
    assert_eq!(c.threads, 1, "a sidecar defaults to one thread");
    assert_eq!(
        c.work_stealing, None,
        "the runtime follows how the proxy is run"
    );
    assert_eq!(c.grace_period, Duration::from_secs(5));
    let cache = c.gate.introspection.as_ref().unwrap().cache;
    assert_eq!(cache.max_ttl, Duration::from_secs(30));
    assert_eq!(cache.negative_ttl, Duration::from_millis(500));
    assert_eq!(cache.capacity, 100_000);
    assert_eq!(c.gate.rules.routes().len(), 2);
    let auth = &c.upstreams["auth"];
    assert!(auth.pass_authorization);
    assert_eq!(
        auth.addresses,
        [UpstreamAddr::Name {
            host: "authserver".into(),
            port: 8001
        }]
    );
    // A name may stand for several addresses: checked by default; one IP address is not.
    assert_eq!(auth.balance, crate::config::Balance::RoundRobin);
    assert!(auth.health_check.as_ref().is_some_and(|h| h.path.is_none()));
    assert!(c.upstreams["api"].health_check.is_none());
    assert_eq!(auth.host.as_ref().unwrap(), "auth.internal");
    assert!(!c.upstreams["api"].pass_authorization);
    // Debug never shows the secret.
    assert!(!format!("{c:?}").contains("s3cret"));
}

#[test]
fn the_shipped_example_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/proxy.yaml");
    let c = load_config_with_env(path, no_env).unwrap();
    assert_eq!(c.listen.port(), 8000);
    assert_eq!(c.admin_listen.port(), 8003);
    assert_eq!(c.source.as_deref(), Some(Path::new(path)));
}

#[test]
fn threads_and_work_stealing_are_read_and_bounded() {
    let c = parse(&format!("threads: 4\nwork_stealing: true\n{GOOD}")).unwrap();
    assert_eq!((c.threads, c.work_stealing), (4, Some(true)));
    let c = parse(&format!("threads: 2\nwork_stealing: false\n{GOOD}")).unwrap();
    assert_eq!((c.threads, c.work_stealing), (2, Some(false)));
    let e = error(&format!("threads: 0\n{GOOD}"));
    assert!(e.contains("key \"threads\": 0: expected 1 to 256"), "{e}");
    let e = error(&format!("work_stealing: sometimes\n{GOOD}"));
    assert!(e.contains("work_stealing"), "{e}");
}

#[test]
fn unknown_upstream_names_file_rule_field_and_value() {
    let e = error(&GOOD.replace("upstream: api", "upstream: nope"));
    assert!(
        e.starts_with("proxy.yaml: routes[1] (users): key \"upstream\": \"nope\""),
        "{e}"
    );
    assert!(e.contains("declared: api, auth"), "{e}");
}

#[test]
fn missing_upstream_on_a_route() {
    let e = error(&GOOD.replace(", upstream: api", ""));
    assert!(e.contains("routes[1] (users): key \"upstream\""), "{e}");
}

#[test]
fn unknown_fields_are_refused() {
    let e = error(&GOOD.replace("admin_listen:", "colour: red\nadmin_listen:"));
    assert!(e.contains("unknown field `colour`"), "{e}");
    let e = error(&GOOD.replace("pass_authorization: true", "pass_authorisation: true"));
    assert!(e.contains("pass_authorisation"), "{e}");
}

#[test]
fn bad_values_name_field_and_value() {
    let e = error(&GOOD.replace("127.0.0.1:8000", "localhost"));
    assert_eq!(
        e,
        "proxy.yaml: key \"listen\": \"localhost\": expected IP:port, e.g. 127.0.0.1:8000"
    );
    let e = error(&GOOD.replace("authserver:8001", "authserver"));
    assert!(
        e.contains("upstreams.auth.address\": \"authserver\""),
        "{e}"
    );
    let e = error(&GOOD.replace("500ms", "5 parsecs"));
    assert!(
        e.contains("introspection.cache.negative_ttl\": \"5 parsecs\""),
        "{e}"
    );
    let e = error(&GOOD.replace("http://127.0.0.1:8001", "ftp://x"));
    assert!(e.contains("introspection.url"), "{e}");
    let e = error(&GOOD.replace("127.0.0.1:8003", "127.0.0.1:8000"));
    assert!(e.contains("admin_listen"), "{e}");
}

#[test]
fn rule_errors_come_from_resource_server() {
    let e = error(&GOOD.replace("path: /users/", "path: users/"));
    assert!(e.contains("routes[1] (users)") && e.contains("path"), "{e}");
}

#[test]
fn forward_auth_names_its_ingress() {
    let with = |section: &str| format!("forward_auth: {section}\n{GOOD}");
    let c = parse(&with("{ listen: 127.0.0.1:8004, ingress: traefik }")).unwrap();
    let f = c.forward_auth.unwrap();
    assert_eq!(f.ingress, Ingress::Traefik);
    assert!(
        !f.client_cert_header,
        "the certificate header is off unless asked for"
    );
    let c = parse(&with(
        "{ listen: 127.0.0.1:8004, ingress: envoy, path_prefix: /ext-authz, client_cert_header: true }",
    ))
    .unwrap();
    let f = c.forward_auth.unwrap();
    assert_eq!((f.ingress, f.client_cert_header), (Ingress::Envoy, true));
    let e = error(&with("{ listen: 127.0.0.1:8004 }"));
    assert!(
        e.contains("forward_auth.ingress") && e.contains("nginx, traefik or envoy"),
        "{e}"
    );
    let e = error(&with("{ listen: 127.0.0.1:8004, ingress: haproxy }"));
    assert!(
        e.contains("forward_auth.ingress") && e.contains("haproxy"),
        "{e}"
    );
    let e = error(&with(
        "{ listen: 127.0.0.1:8004, ingress: nginx, path_prefix: /ext-authz }",
    ));
    assert!(
        e.contains("forward_auth.path_prefix") && e.contains("envoy"),
        "{e}"
    );
}

#[test]
fn credentials_one_way_or_the_other() {
    let e = error(&GOOD.replace("  client_secret: s3cret\n", ""));
    assert!(e.contains("client_secret"), "{e}");
    let both = GOOD.replace("client_id: proxy", "client_id: proxy\n  auth_token: tok");
    let e = error(&both);
    assert!(e.contains("not both") && !e.contains("tok\""), "{e}");
    let none = GOOD
        .replace("  client_id: proxy\n", "")
        .replace("  client_secret: s3cret\n", "");
    assert!(error(&none).contains("auth_token"));
}

#[test]
fn environment_overrides() {
    let env = |k: &str| match k {
        "PROXY_CLIENT_SECRET" => Some("from-env".to_owned()),
        "PROXY_LISTEN" => Some("127.0.0.1:9000".to_owned()),
        "PROXY_ADMIN_LISTEN" => Some(String::new()), // empty = ignored
        _ => None,
    };
    let c = parse_config(GOOD, "f", env).unwrap();
    assert_eq!(c.listen.port(), 9000);
    assert_eq!(c.admin_listen.port(), 8003);
    assert_eq!(
        auth(&c),
        ClientAuth::ClientSecret {
            client_id: "proxy".into(),
            client_secret: "from-env".into(),
            secret_file: None,
        }
    );
    let token_env = |k: &str| (k == "PROXY_AUTH_TOKEN").then(|| "tok".to_owned());
    let c = parse_config(GOOD, "f", token_env).unwrap();
    assert_eq!(auth(&c), ClientAuth::Bearer("tok".into()));
    let bad_env = |k: &str| (k == "PROXY_LISTEN").then(|| "nope".to_owned());
    let e = parse_config(GOOD, "f", bad_env).unwrap_err().to_string();
    assert!(e.contains("environment variable PROXY_LISTEN"), "{e}");
}

#[test]
fn answer_policy_leeway_issuer_audience() {
    let c = parse(GOOD).unwrap();
    assert_eq!(policy(&c), AnswerPolicy::default());
    assert_eq!(policy(&c).leeway, Duration::from_secs(5));
    let with = |extra: &str| {
        GOOD.replace(
            "  cache: { max_ttl: 30s",
            &format!("{extra}\n  cache: {{ max_ttl: 30s"),
        )
    };
    let c = parse(&with(
        "  leeway: 2s\n  issuer: https://auth.example\n  audience: api",
    ))
    .unwrap();
    let expected = AnswerPolicy {
        issuer: Some("https://auth.example".into()),
        leeway: Duration::from_secs(2),
    };
    // introspection.audience, the old spelling, is the gate's audience (for every source).
    let audience = c.gate.audience.as_ref().map(|a| a.accepted().to_vec());
    assert_eq!(audience, Some(vec!["api".to_owned()]));
    // What the checker is built with.
    assert_eq!(policy(&c), expected);
    let e = error(&with("  leeway: 10m"));
    assert_eq!(
        e,
        "proxy.yaml: key \"introspection.leeway\": \"10m\": at most 300s"
    );
    let e = error(&with("  audience: ''"));
    assert!(e.contains("key \"introspection.audience\": \"\""), "{e}");
    let e = error(&with("  leeway: soon"));
    assert!(e.contains("introspection.leeway"), "{e}");
}

/// Issue 9: a file cut short at `routes:`, or with `routes: []`, would answer every request 404.
#[test]
fn an_empty_rule_set_is_refused_unless_allowed() {
    let head = &GOOD[..GOOD.find("routes:").unwrap()];
    for routes in ["routes: []\n", "routes:\n"] {
        let e = error(&format!("{head}{routes}"));
        assert!(
            e.starts_with("proxy.yaml: ")
                && e.contains("routes")
                && e.contains("allow_empty_routes"),
            "{routes:?}: {e}"
        );
    }
    let c = parse(&format!("{head}routes: []\nallow_empty_routes: true\n")).unwrap();
    assert!(c.gate.rules.routes().is_empty());
}

#[test]
fn token_source_defaults_to_introspection() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        (c.gate.token_source, c.gate.jwt.is_none()),
        (TokenSource::Introspection, true)
    );
}

#[test]
fn the_shipped_jwt_example_is_valid_once_uncommented() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/proxy.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find("# token_source: jwt").expect("the jwt example");
    let end = start + text[start..].find("\n\n").unwrap();
    let uncommented: String = text[start..end]
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let src = format!("{}{uncommented}{}", &text[..start], &text[end..]);
    let c = parse(&src).unwrap();
    assert_eq!(c.gate.token_source, TokenSource::Jwt);
    let jwt = c.gate.jwt.unwrap();
    assert_eq!(jwt.claims.issuer, "http://127.0.0.1:8001");
    let audience = c.gate.audience.as_ref().map(|a| a.accepted().to_vec());
    assert_eq!(audience, Some(vec!["https://api.example.com".to_owned()]));
    assert_eq!(jwt.typ, ["at+jwt"]);
}

#[test]
fn jwt_section_errors_name_the_field() {
    let jwt = "jwt: { jwks_url: 'http://127.0.0.1:9/', issuer: 'https://i', audience: a }\n";
    let c = parse(&format!("token_source: jwt_or_introspection\n{jwt}{GOOD}")).unwrap();
    assert_eq!(c.gate.token_source, TokenSource::JwtOrIntrospection);
    let e = error(&format!("token_source: jwt\n{GOOD}"));
    assert!(e.starts_with("proxy.yaml: key \"jwt\": (missing)"), "{e}");
    let e = error(&format!("token_source: local\n{GOOD}"));
    assert!(e.contains("key \"token_source\": \"local\""), "{e}");
    let e = error(&format!(
        "jwt: {{ jwks_url: 'http://x/', issuer: i, audience: a, algorithms: [none] }}\n{GOOD}"
    ));
    assert!(e.contains("key \"jwt.algorithms\": \"none\""), "{e}");
    // Local validation needs an audience (the gate's, or its old spelling jwt.audience).
    assert!(
        parse(&format!(
            "jwt: {{ jwks_url: 'http://x/', issuer: i }}\n{GOOD}"
        ))
        .is_ok()
    );
    let e = error(&format!(
        "token_source: jwt\njwt: {{ jwks_url: 'http://x/', issuer: i }}\n{GOOD}"
    ));
    assert!(e.contains("key \"audience\": (missing)"), "{e}");
}

#[test]
fn connection_limits_default_and_are_read() {
    assert_eq!(
        parse(GOOD).unwrap().connections,
        ConnectionLimits::default()
    );
    let d = ConnectionLimits::default();
    assert_eq!(
        (d.head_timeout, d.body_idle_timeout, d.keepalive_timeout),
        (
            Duration::from_secs(10),
            Duration::from_secs(10),
            Duration::from_secs(60)
        )
    );
    let c = parse(&format!(
        "{GOOD}connections:\n  head_timeout: 1500ms\n  body_idle_timeout: 3s\n  keepalive_timeout: 5s\n  max: 100\n  admin_max: 8\n"
    ))
    .unwrap();
    assert_eq!(
        c.connections,
        ConnectionLimits {
            head_timeout: Duration::from_millis(1500),
            body_idle_timeout: Duration::from_secs(3),
            keepalive_timeout: Duration::from_secs(5),
            max: 100,
            admin_max: 8,
        }
    );
    for (line, message) in [
        (
            "head_timeout: 0s",
            "key \"connections.head_timeout\": 0: must be positive",
        ),
        (
            "body_idle_timeout: soon",
            "key \"connections.body_idle_timeout\": \"soon\"",
        ),
        (
            "max: 0",
            "key \"connections.max\": 0: expected 1 to 1000000",
        ),
        ("maximum: 5", "unknown field `maximum`"),
    ] {
        let e = error(&format!("{GOOD}connections:\n  {line}\n"));
        assert!(e.contains(message), "{line}: {e}");
    }
}

#[test]
fn application_probes_come_from_the_environment_and_are_checked() {
    assert!(parse(GOOD).unwrap().app_probes.is_empty());
    let probes = r#"{"/app-health/api/readyz": {"httpGet": {"path": "/ready", "port": 8080}}}"#;
    let env = |k: &str| (k == "PROXY_APP_PROBES").then(|| probes.to_owned());
    let c = parse_config(GOOD, "proxy.yaml", env).unwrap();
    assert!(c.app_probes.get("/app-health/api/readyz").is_some());
    let bad = |k: &str| (k == "PROXY_APP_PROBES").then(|| r#"{"/users/": {}}"#.to_owned());
    let error = parse_config(GOOD, "proxy.yaml", bad)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("environment variable PROXY_APP_PROBES: \"/users/\": a probe path is"),
        "{error}"
    );
}

#[test]
fn hostile_yaml_is_refused_before_libyaml_reads_it() {
    // 100,000 levels took 34 s in `proxy --check-config` (issue 21, item 7).
    let deep = format!("routes: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let started = std::time::Instant::now();
    let message = error(&deep);
    assert!(
        message.starts_with("proxy.yaml: line 1 column ")
            && message.ends_with(": nested deeper than 128 levels"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn access_log_and_log_format_keys() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.access_log, Default::default(), "on, every request");
    assert_eq!(c.log_format, None);
    let src = format!("{GOOD}access_log: {{ enabled: true, sample: 0.25 }}\nlog_format: json\n");
    let c = parse(&src).unwrap();
    assert_eq!((c.access_log.enabled, c.access_log.sample), (true, 0.25));
    assert_eq!(c.log_format, Some(LogFormat::Json));
    let e = error(&format!("{GOOD}access_log: {{ sample: 1.5 }}\n"));
    assert!(e.contains("access_log.sample") && e.contains("1.5"), "{e}");
    let e = error(&format!("{GOOD}log_format: yaml\n"));
    assert!(e.contains("\"yaml\": expected text or json"), "{e}");
    let env = |k: &str| (k == "PROXY_ACCESS_LOG").then(|| "off".to_owned());
    let c = parse_config(GOOD, "proxy.yaml", env).unwrap();
    assert!(!c.access_log.enabled);
}

/// The secret the proxy proves itself with to an upstream: from the environment or a file, at
/// least 16 visible characters, never echoed in an error nor in `Debug`.
#[test]
fn an_upstreams_proxy_secret_is_checked_and_never_shown() {
    let secret = "upstream-proof-0123456789abcdef";
    let env = |k: &str| (k == "PROXY_UPSTREAM_API_PROXY_SECRET").then(|| secret.to_owned());
    let c = parse_config(GOOD, "proxy.yaml", env).unwrap();
    assert_eq!(c.upstreams["api"].proxy_secret.as_ref().unwrap(), secret);
    assert!(c.upstreams["auth"].proxy_secret.is_none());
    assert!(!format!("{c:?}").contains(secret), "Debug shows no secret");
    for bad in ["short-secret", "a secret with spaces in it, long enough"] {
        let env = |k: &str| (k == "PROXY_UPSTREAM_API_PROXY_SECRET").then(|| bad.to_owned());
        let e = parse_config(GOOD, "proxy.yaml", env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("environment variable PROXY_UPSTREAM_API_PROXY_SECRET"),
            "{e}"
        );
        assert!(!e.contains(bad), "the value is never echoed: {e}");
    }
    let missing = GOOD.replace(
        "api: { address: \"127.0.0.1:8002\" }",
        "api: { address: \"127.0.0.1:8002\", proxy_secret_file: /nonexistent/proof }",
    );
    let e = error(&missing);
    assert!(
        e.contains("upstreams.api.proxy_secret_file") && e.contains("cannot read"),
        "{e}"
    );
}

#[test]
fn several_addresses_a_policy_and_health_checks() {
    let c = parse_config(
        &GOOD.replace(
            "api: { address: \"127.0.0.1:8002\" }",
            "api:\n    addresses: [127.0.0.1:8002, \"[::1]:8002\"]\n    balance: least_connections\n    \
             health_check: { path: /healthz, interval: 2s, unhealthy_after: 3 }\n    \
             eject: { after_failures: 2, duration: 30s }",
        ),
        "proxy.yaml",
        no_env,
    )
    .unwrap();
    let api = &c.upstreams["api"];
    assert_eq!(api.addresses.len(), 2);
    assert_eq!(api.balance, crate::config::Balance::LeastConnections);
    let hc = api.health_check.as_ref().unwrap();
    assert_eq!(
        (
            hc.path.as_deref(),
            hc.interval,
            hc.unhealthy_after,
            hc.healthy_after
        ),
        (Some("/healthz"), Duration::from_secs(2), 3, 1)
    );
    assert_eq!(api.eject.after_failures, 2);
    assert_eq!(api.eject.duration, Duration::from_secs(30));
    // The environment's list wins, comma-separated.
    let c = parse_config(GOOD, "proxy.yaml", |k| {
        (k == "PROXY_UPSTREAM_API_ADDRESS").then(|| "10.0.0.1:80, 10.0.0.2:80".to_owned())
    })
    .unwrap();
    assert_eq!(c.upstreams["api"].addresses.len(), 2);
}

#[test]
fn weights_and_ejection_statuses() {
    let c = parse_config(
        &GOOD.replace(
            "api: { address: \"127.0.0.1:8002\" }",
            "api:\n    addresses: [127.0.0.1:8002, { address: \"127.0.0.2:8002\", weight: 3 }, \
             { address: localhost:8002 }]\n    \
             eject: { after_failures: 3, statuses: [502, 503] }",
        ),
        "proxy.yaml",
        no_env,
    )
    .unwrap();
    let api = &c.upstreams["api"];
    assert_eq!(api.addresses.len(), 3);
    assert_eq!(api.weights, [1, 3, 1]);
    assert_eq!(api.eject.statuses, [502, 503]);
    assert_eq!(api.eject.after_failures, 3);
    // The single-address form and the default: weight 1, no status counts.
    let c = parse_config(GOOD, "proxy.yaml", no_env).unwrap();
    assert_eq!(c.upstreams["api"].weights, [1]);
    assert!(c.upstreams["api"].eject.statuses.is_empty());
}

#[test]
fn bad_balancing_settings_are_named() {
    let with = |api: &str| error(&GOOD.replace("api: { address: \"127.0.0.1:8002\" }", api));
    for (api, says) in [
        (
            "api: { address: 127.0.0.1:1, addresses: [127.0.0.1:2] }",
            "key \"upstreams.api.addresses\": (both): give address or addresses, not both",
        ),
        (
            "api: { addresses: [] }",
            "key \"upstreams.api.address\": (missing)",
        ),
        (
            "api: { addresses: [127.0.0.1:1, nope] }",
            "key \"upstreams.api.addresses[1]\": \"nope\"",
        ),
        (
            "api: { addresses: [127.0.0.1:1, 127.0.0.1:1] }",
            "listed twice",
        ),
        (
            "api: { address: 127.0.0.1:1, balance: fastest }",
            "key \"upstreams.api.balance\": \"fastest\": expected round_robin or least_connections",
        ),
        (
            "api: { address: 127.0.0.1:1, health_check: { path: healthz } }",
            "key \"upstreams.api.health_check.path\": \"healthz\"",
        ),
        (
            "api: { address: 127.0.0.1:1, health_check: { interval: 0s } }",
            "key \"upstreams.api.health_check.interval\": 0: must be positive",
        ),
        (
            "api: { address: 127.0.0.1:1, eject: { after_failures: 0 } }",
            "key \"upstreams.api.eject.after_failures\": 0",
        ),
        (
            "api: { addresses: [{ address: 127.0.0.1:1, weight: 0 }] }",
            "key \"upstreams.api.addresses[0].weight\": 0: expected a whole number from 1 to 100",
        ),
        (
            "api: { addresses: [127.0.0.1:2, { address: 127.0.0.1:1, weight: -2 }] }",
            "key \"upstreams.api.addresses[1].weight\": -2: expected a whole number",
        ),
        (
            "api: { addresses: [{ address: 127.0.0.1:1, weight: 1.5 }] }",
            "key \"upstreams.api.addresses[0].weight\": 1.5: expected a whole number",
        ),
        (
            "api: { addresses: [{ address: 127.0.0.1:1, weight: 101 }] }",
            "upstreams.api.addresses[0].weight\": 101",
        ),
        (
            "api: { addresses: [{ address: 127.0.0.1:1, weight: 1e300 }] }",
            "upstreams.api.addresses[0].weight",
        ),
        (
            "api: { addresses: [{ address: 127.0.0.1:1, weight: 99999999999999999999999 }] }",
            "upstreams.api.addresses[0].weight",
        ),
        (
            "api: { addresses: [{ address: nope, weight: 2 }] }",
            "key \"upstreams.api.addresses\": \"nope\": expected host:port",
        ),
        (
            "api: { address: 127.0.0.1:1, eject: { statuses: [404] } }",
            "key \"upstreams.api.eject.statuses[0]\": 404: expected a status from 500 to 599",
        ),
        (
            "api: { address: 127.0.0.1:1, eject: { statuses: [-502] } }",
            "key \"upstreams.api.eject.statuses[0]\": -502",
        ),
        (
            "api: { address: 127.0.0.1:1, eject: { statuses: [502, 502] } }",
            "key \"upstreams.api.eject.statuses[1]\": 502: listed twice",
        ),
        (
            "api: { addresses: [127.0.0.1:1, 127.0.0.2:1], tls: {} }",
            "key \"upstreams.api.tls.sni\": (missing): the addresses name different hosts",
        ),
    ] {
        let e = with(api);
        assert!(e.contains(says), "{api}: {e}");
    }
}

#[test]
fn a_reload_changes_routes_and_upstreams_and_a_restart_the_rest() {
    let started = parse(GOOD).unwrap();
    let rules_changed = parse(&GOOD.replace("path: /users/", "path: /people/")).unwrap();
    let upstream_moved = parse(&GOOD.replace("127.0.0.1:8002", "127.0.0.1:9002")).unwrap();
    for reloadable in [&rules_changed, &upstream_moved] {
        assert_eq!(reloadable.restart_settings(), started.restart_settings());
    }
    // Restart-only, though the hand-written comparison missed them.
    for (from, to) in [
        ("listen: 127.0.0.1:8000", "listen: 127.0.0.1:9000"),
        (
            "admin_listen: 127.0.0.1:8003",
            "admin_listen: 127.0.0.1:8003\ngrace_period: 1s",
        ),
        (
            "admin_listen: 127.0.0.1:8003",
            "admin_listen: 127.0.0.1:8003\ntrusted_peers: [10.0.0.0/8]",
        ),
        ("max_ttl: 30s", "max_ttl: 10s"),
    ] {
        let changed = parse(&GOOD.replace(from, to)).unwrap();
        assert_ne!(
            changed.restart_settings(),
            started.restart_settings(),
            "{to}"
        );
    }
}

#[test]
fn the_stacks_overrides_win_over_the_environment_and_hold_in_the_document() {
    let env = |k: &str| (k == "PROXY_LISTEN").then(|| "127.0.0.1:7000".to_owned());
    let from_env = parse_config(GOOD, "proxy.yaml", env).unwrap();
    assert_eq!(from_env.listen.to_string(), "127.0.0.1:7000");
    let decided = Overrides::from([("listen", "127.0.0.1:7001"), ("grace_period", "0s")]);
    let config = from_env.with_overrides(&decided).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:7001");
    assert_eq!(config.grace_period, Duration::ZERO);
    // Validated again, the document keeps both the environment it read and the overrides.
    let again = config.with_overrides(&Overrides::default()).unwrap();
    assert_eq!(again.listen.to_string(), "127.0.0.1:7001");
    assert_eq!(
        again.document.env.get("PROXY_LISTEN").map(String::as_str),
        Some("127.0.0.1:7000")
    );
    let bad = Overrides::from([("grace_period", "soon")]);
    let e = from_env.with_overrides(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("key \"grace_period\" set by the stack: \"soon\": "),
        "{e}"
    );
}

/// Issue 43: identity headers sent to an upstream without a proxy secret are named at start
/// (one line, each such upstream once); an upstream given its secret, or reached only by public
/// routes, is not.
#[test]
fn identity_headers_without_a_proxy_secret_are_warned_about() {
    let c = parse(GOOD).unwrap();
    assert_eq!(identity_without_proxy_secret(&c), ["api"]);
    let warning = identity_warning(&c).unwrap();
    assert!(!warning.contains('\n'), "{warning}");
    assert!(warning.contains("X-Auth-*"), "{warning}");
    assert!(
        warning.contains("upstreams.api.proxy_secret_file"),
        "{warning}"
    );
    assert!(!warning.contains("auth,"), "public routes only: {warning}");
    let secret = "upstream-proof-0123456789abcdef";
    let env = |k: &str| (k == "PROXY_UPSTREAM_API_PROXY_SECRET").then(|| secret.to_owned());
    let with_secret = parse_config(GOOD, "proxy.yaml", env).unwrap();
    assert_eq!(identity_warning(&with_secret), None);
    let two = format!(
        "{GOOD}  - {{ name: staff, path: /staff/, upstream: auth, scopes: [read] }}\n  - {{ name: more, path: /more/, upstream: api, scopes: [read] }}\n"
    );
    assert_eq!(
        identity_without_proxy_secret(&parse(&two).unwrap()),
        ["api", "auth"]
    );
}
