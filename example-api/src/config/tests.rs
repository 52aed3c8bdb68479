//! Loading and validating the settings: defaults, modes, environment overrides, and messages that
//! name the file, the key and the value.

use super::*;
use std::time::Duration;

use resource_server::{Access, ClientAuth, TokenSource};

const MINIMAL_ROUTES: &str = "routes:\n  - { name: users, path: /users/, scopes: [read] }\n";

fn yaml(extra: &str) -> String {
    format!("{extra}\n{MINIMAL_ROUTES}")
}

fn err(text: &str) -> String {
    Config::from_yaml(text, "c.yaml").unwrap_err().to_string()
}

#[test]
fn the_shipped_file_is_valid_and_matches_spec_3() {
    let c = Config::from_yaml(EXAMPLE_CONFIG, "config/example-api.yaml").unwrap();
    assert_eq!(c.gate.token_source, TokenSource::BehindProxy);
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(c.database_url, DEFAULT_DATABASE_URL);
    let needs = |method: &str, path: &str| match &c
        .gate
        .rules
        .find(&method.parse().unwrap(), path)
        .unwrap()
        .access
    {
        Access::Authenticated { all_of, any_of } if any_of.is_empty() => all_of.join(" "),
        other => panic!("{other:?}"),
    };
    for (method, path, scope) in [
        ("GET", "/users/", "read"),
        ("HEAD", "/users/", "read"),
        ("GET", "/users/7/", "read"),
        ("POST", "/users/", "write"),
        ("PUT", "/users/7/", "write"),
        ("PATCH", "/users/7/", "write"),
        ("DELETE", "/users/7/", "write"),
        ("GET", "/groups/", "groups"),
        ("POST", "/groups/", "groups"),
        ("DELETE", "/groups/7/", "groups"),
    ] {
        assert_eq!(needs(method, path), scope, "{method} {path}");
    }
    assert!(c.gate.rules.routes().iter().all(|r| r.upstream.is_none()));
}

#[test]
fn defaults_and_introspect_mode() {
    let c = Config::from_yaml(&yaml(""), "c.yaml").unwrap();
    assert_eq!(
        (
            c.gate.token_source,
            c.allow_non_loopback,
            c.gate.introspection
        ),
        (TokenSource::BehindProxy, false, None)
    );
    let c = Config::from_yaml(
        &yaml("mode: introspect\nintrospection: { url: 'http://a:1/o/introspect/', client_id: id, client_secret: s, cache: { max_ttl: 1s, negative_ttl: 0 } }"),
        "c.yaml",
    )
    .unwrap();
    let i = c.gate.introspection.unwrap();
    assert_eq!(
        i.settings.auth,
        ClientAuth::ClientSecret {
            client_id: "id".into(),
            client_secret: "s".into(),
            secret_file: None,
        }
    );
    assert_eq!(i.settings.connect_timeout, Duration::from_secs(1));
    assert_eq!(i.settings.request_timeout, Duration::from_secs(3));
    assert_eq!(
        (i.cache.max_ttl, i.cache.negative_ttl),
        (Duration::from_secs(1), Duration::ZERO)
    );
    // introspect mode may listen anywhere: it trusts nothing it did not check.
    let c = Config::from_yaml(
        &yaml("mode: introspect\nlisten: 0.0.0.0:9\nintrospection: { url: 'https://a/', auth_token: t, cache: { max_ttl: 0s, capacity: 0 } }"),
        "c.yaml",
    )
    .unwrap();
    assert_eq!(
        c.gate.introspection.unwrap().settings.auth,
        ClientAuth::Bearer("t".into())
    );
}

#[test]
fn errors_name_file_key_and_value() {
    assert_eq!(
        err(&yaml("mode: sidecar")),
        r#"c.yaml: key "mode": "sidecar": expected introspection, jwt, jwt_or_introspection, behind_proxy or none"#
    );
    assert_eq!(
        err(&yaml("listen: here")),
        r#"c.yaml: key "listen": "here": not an address like 127.0.0.1:8002"#
    );
    assert!(err(&yaml("listen: 0.0.0.0:8002")).starts_with(
        r#"c.yaml: key "listen": "0.0.0.0:8002": not a loopback address: with token_source behind_proxy"#
    ));
    assert!(err(&yaml("mode: none\nlisten: 10.0.0.1:80")).contains("with token_source none"));
    assert!(
        Config::from_yaml(
            &yaml("listen: 0.0.0.0:8002\nallow_non_loopback: true"),
            "c.yaml"
        )
        .is_ok()
    );
    assert_eq!(
        err(&yaml("database_url: mysql://u:pw@h/db")),
        r#"c.yaml: key "database_url": "mysql://u:***@h/db": must start with sqlite: or postgres://"#
    );
    assert!(err(&yaml("colour: blue")).starts_with("c.yaml: unknown field `colour`"));
    assert!(
        err(&yaml(
            "mode: introspect\nintrospection: { url: x, auth_token: t, tls: yes }"
        ))
        .contains("unknown field `tls`")
    );
    assert_eq!(
        err("mode: introspect"),
        r#"c.yaml: key "introspection": (missing): required with token_source introspection (only token_source jwt does without)"#
    );
    assert_eq!(
        err(&yaml("mode: introspect\nintrospection: { url: 'ftp://x' }")),
        r#"c.yaml: key "introspection.url": "ftp://x": expected an http:// or https:// URL"#
    );
    assert!(err(&yaml("mode: introspect\nintrospection: { url: 'http://x/' }")).starts_with(r#"c.yaml: key "introspection": (no credentials): set auth_token (env EXAMPLE_API_AUTH_TOKEN)"#));
    let both = err(&yaml(
        "mode: introspect\nintrospection: { url: 'http://x/', auth_token: sekrit, client_id: a, client_secret: b }",
    ));
    assert!(
        both.contains("not both") && !both.contains("sekrit"),
        "{both}"
    );
    assert!(
        err(&yaml(
            "mode: introspect\nintrospection: { url: 'http://x/', client_id: a }"
        ))
        .starts_with(r#"c.yaml: key "introspection.client_secret": (missing)"#)
    );
    assert_eq!(
        err(&yaml(
            "mode: introspect\nintrospection: { url: 'http://x/', auth_token: t, request_timeout: 0s }"
        )),
        r#"c.yaml: key "introspection.request_timeout": "0s": must be greater than zero"#
    );
    assert_eq!(
        err(&yaml(
            "mode: introspect\nintrospection: { url: 'http://x/', auth_token: t, cache: { max_ttl: 5 days } }"
        )),
        r#"c.yaml: key "introspection.cache.max_ttl": "5 days": unknown unit "days": use ms, s, m, h or d"#
    );
    assert!(err(&yaml("mode: introspect\nintrospection: { url: 'http://x/', auth_token: t, cache: { capacity: 0 } }")).contains(r#"key "introspection.cache.capacity": "0""#));
    assert_eq!(
        err("mode: behind-proxy"),
        r#"c.yaml: key "routes": (missing): the access rules are required (see config/example-api.yaml)"#
    );
    let bad_rule = err("routes:\n  - { name: users, path: users/ }");
    assert!(
        bad_rule.starts_with("c.yaml: routes[0] (users): key \"path\""),
        "{bad_rule}"
    );
}

#[test]
fn environment_overrides_name_the_variable() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        }
    };
    let text = yaml(
        "mode: introspect\nintrospection: { url: 'http://x/', client_id: a, client_secret: b }",
    );
    let c = Config::from_yaml_with_env(
        &yaml("introspection: { url: 'http://x/' }"),
        "c.yaml",
        env(&[
            ("EXAMPLE_API_MODE", "introspect"),
            ("EXAMPLE_API_AUTH_TOKEN", "tok"),
            ("EXAMPLE_API_LISTEN", "127.0.0.1:9999"),
            ("EXAMPLE_API_DATABASE_URL", "sqlite::memory:"),
        ]),
    )
    .unwrap();
    assert_eq!(
        (
            c.gate.token_source,
            c.listen.port(),
            c.database_url.as_str()
        ),
        (TokenSource::Introspection, 9999, "sqlite::memory:")
    );
    assert_eq!(
        c.gate.introspection.unwrap().settings.auth,
        ClientAuth::Bearer("tok".into())
    );
    let e = Config::from_yaml_with_env(&text, "c.yaml", env(&[("EXAMPLE_API_LISTEN", "nowhere")]))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"environment variable EXAMPLE_API_LISTEN: "nowhere": not an address like 127.0.0.1:8002"#
    );
    // The environment's token replaces the credentials written in the file.
    let c = Config::from_yaml_with_env(&text, "c.yaml", env(&[("EXAMPLE_API_AUTH_TOKEN", "tok")]))
        .unwrap();
    assert_eq!(
        c.gate.introspection.unwrap().settings.auth,
        ClientAuth::Bearer("tok".into())
    );
    // ... and any client credentials of the environment too, as the proxy's does.
    let c = Config::from_yaml_with_env(
        &text,
        "c.yaml",
        env(&[
            ("EXAMPLE_API_AUTH_TOKEN", "tok"),
            ("EXAMPLE_API_CLIENT_ID", "x"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.gate.introspection.unwrap().settings.auth,
        ClientAuth::Bearer("tok".into())
    );
    let e = Config::from_yaml_with_env(
        &text,
        "c.yaml",
        env(&[("EXAMPLE_API_INTROSPECTION_URL", "gopher://x")]),
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "environment variable EXAMPLE_API_INTROSPECTION_URL: \"gopher://x\": expected"
        ),
        "{e}"
    );
}

#[test]
fn files_missing_or_present() {
    let none = |_: &str| None;
    let e = Config::load_with_env(Some(Path::new("/nonexistent/e.yaml")), none).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/e.yaml: cannot read"),
        "{e}"
    );
    let e = Config::load_with_env(None, |k: &str| {
        (k == "EXAMPLE_API_CONFIG").then(|| "/nonexistent/f.yaml".to_owned())
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("EXAMPLE_API_CONFIG=/nonexistent/f.yaml: cannot read"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("example-api-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("e.yaml");
    std::fs::write(&file, yaml("listen: 127.0.0.1:1234")).unwrap();
    let c = Config::load_with_env(Some(&file), none).unwrap();
    assert_eq!(
        (c.listen.port(), c.file),
        (1234, file.display().to_string())
    );
}

#[test]
fn introspection_leeway_issuer_and_audience() {
    let introspect = |extra: &str| {
        yaml(&format!(
            "mode: introspect\nintrospection: {{ url: 'http://a:1/', auth_token: t{extra} }}"
        ))
    };
    let c = Config::from_yaml(&introspect(""), "c.yaml").unwrap();
    assert_eq!(
        c.gate.introspection.unwrap().settings.policy,
        resource_server::AnswerPolicy::default()
    );
    let c = Config::from_yaml(
        &introspect(", leeway: 0s, issuer: 'https://auth.example', audience: api"),
        "c.yaml",
    )
    .unwrap();
    // The audience (written the old way) is the gate's, for every token source.
    let audience = c.gate.audience.as_ref().map(|a| a.accepted().to_vec());
    assert_eq!(audience, Some(vec!["api".to_owned()]));
    assert_eq!(
        c.gate.introspection.unwrap().settings.policy,
        resource_server::AnswerPolicy {
            issuer: Some("https://auth.example".into()),
            leeway: Duration::ZERO,
        }
    );
    assert_eq!(
        err(&introspect(", leeway: 6m")),
        "c.yaml: key \"introspection.leeway\": \"6m\": at most 300s"
    );
    assert!(
        err(&introspect(", issuer: ''")).starts_with("c.yaml: key \"introspection.issuer\": \"\""),
        "{}",
        err(&introspect(", issuer: ''"))
    );
}

#[test]
fn behind_proxy_mode_reads_the_leeway_too() {
    let c = Config::from_yaml(EXAMPLE_CONFIG, "config/example-api.yaml").unwrap();
    assert_eq!(c.gate.leeway, resource_server::AnswerPolicy::DEFAULT_LEEWAY);
    let c = Config::from_yaml(&yaml("introspection: { leeway: 30s }"), "c.yaml").unwrap();
    assert_eq!(
        (c.gate.token_source, c.gate.leeway, c.gate.introspection),
        (TokenSource::BehindProxy, Duration::from_secs(30), None)
    );
    assert_eq!(
        err(&yaml("introspection: { leeway: 6m }")),
        "c.yaml: key \"introspection.leeway\": \"6m\": at most 300s"
    );
}

#[test]
fn jwt_modes_need_the_jwt_section() {
    const JWT: &str = "jwt: { jwks_url: 'https://idp/jwks', issuer: 'https://idp', audience: api }";
    let c = Config::from_yaml(
        &yaml(&format!(
            "mode: jwt
listen: 0.0.0.0:9
{JWT}"
        )),
        "c.yaml",
    )
    .unwrap();
    assert_eq!(
        (c.gate.token_source, c.gate.introspection.is_none()),
        (TokenSource::Jwt, true)
    );
    let audience = c.gate.audience.as_ref().map(|a| a.accepted().to_vec());
    assert_eq!(audience, Some(vec!["api".to_owned()]));
    let jwt = c.gate.jwt.unwrap();
    assert_eq!(jwt.claims.issuer, "https://idp");
    assert!(
        err(&yaml("mode: jwt"))
            .starts_with(r#"c.yaml: key "jwt": (missing): token_source jwt needs"#),
        "{}",
        err(&yaml("mode: jwt"))
    );
    // Both: the introspection endpoint is needed too.
    assert!(
        err(&yaml(&format!("mode: jwt-or-introspect\n{JWT}"))).contains(r#"key "introspection""#)
    );
    let c = Config::from_yaml(
        &yaml(&format!(
            "mode: jwt-or-introspect\nintrospection: {{ url: 'http://a/', auth_token: t }}\n{JWT}"
        )),
        "c.yaml",
    )
    .unwrap();
    assert!(c.gate.introspection.is_some() && c.gate.jwt.is_some());
    // The section is checked in every mode; HMAC is never accepted.
    let e = err(&yaml(
        "jwt: { jwks_url: 'https://idp/jwks', issuer: i, audience: a, algorithms: [HS256] }",
    ));
    assert!(
        e.starts_with(r#"c.yaml: key "jwt.algorithms": "HS256""#),
        "{e}"
    );
    let e = err(&yaml(
        "mode: jwt\njwt: { jwks_url: 'https://idp/jwks', issuer: i }",
    ));
    assert!(e.contains(r#"key "audience": (missing)"#), "{e}");
}
