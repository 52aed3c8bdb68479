//! Reading, validating and matching rules files.

use super::*;

const FILE: &str = "config/proxy.yaml";

const GOOD: &str = r#"
routes:
  - name: oauth
    prefix: /o/
    upstream: authserver
    public: true
  - name: users-read
    pattern: /users/{id}/
    methods: [GET, head]
    upstream: api
    scopes: [read]
  - name: users-list
    path: /users/
    methods: [GET]
    upstream: api
    scopes: { all_of: [read] }
  - name: users-write
    pattern: /users/*
    methods: [POST, PUT, PATCH, DELETE]
    upstream: api
    scopes: { all_of: [write] }
  - name: groups
    pattern: /groups/*
    scopes: { any_of: [groups, admin], all_of: [read] }
  - name: me
    path: /me
    authenticated: true
"#;

fn good() -> Rules {
    Rules::from_yaml(GOOD, FILE).expect("valid rules")
}

fn found(rules: &Rules, method: Method, path: &str) -> Option<String> {
    rules.find(&method, path).map(|r| r.name.clone())
}

fn error(src: &str) -> String {
    Rules::from_yaml(src, FILE)
        .expect_err("invalid rules")
        .to_string()
}

fn one_rule(body: &str) -> String {
    error(&format!(
        "routes:\n  - name: ok\n    path: /ok\n  - name: bad\n{body}"
    ))
}

#[test]
fn parses_all_kinds() {
    let rules = good();
    assert_eq!(rules.routes().len(), 6);
    let r = &rules.routes()[1];
    assert_eq!(r.name, "users-read");
    assert_eq!(r.index(), 1);
    assert_eq!(r.upstream.as_deref(), Some("api"));
    assert_eq!(r.methods(), Some(&[Method::GET, Method::HEAD][..]));
    assert_eq!(
        r.access,
        Access::Authenticated {
            all_of: vec!["read".into()],
            any_of: vec![]
        }
    );
    assert_eq!(rules.routes()[0].access, Access::Public);
    assert_eq!(
        rules.routes()[4].access,
        Access::Authenticated {
            all_of: vec!["read".into()],
            any_of: vec!["groups".into(), "admin".into()]
        }
    );
    assert_eq!(
        rules.routes()[5].access,
        Access::Authenticated {
            all_of: vec![],
            any_of: vec![]
        }
    );
    assert_eq!(rules.routes()[5].methods(), None);
}

#[test]
fn matching_and_first_match_wins() {
    let rules = good();
    assert_eq!(
        found(&rules, Method::POST, "/o/token/").as_deref(),
        Some("oauth")
    );
    assert_eq!(found(&rules, Method::GET, "/o/").as_deref(), Some("oauth"));
    assert_eq!(found(&rules, Method::GET, "/o"), None);
    assert_eq!(
        found(&rules, Method::GET, "/users/42/").as_deref(),
        Some("users-read")
    );
    assert_eq!(
        found(&rules, Method::HEAD, "/users/42/").as_deref(),
        Some("users-read")
    );
    assert_eq!(
        found(&rules, Method::GET, "/users/").as_deref(),
        Some("users-list")
    );
    // {id} needs a non-empty segment; exact path is exact.
    assert_eq!(found(&rules, Method::GET, "/users//"), None);
    assert_eq!(found(&rules, Method::GET, "/users"), None);
    assert_eq!(found(&rules, Method::GET, "/users/42"), None);
    assert_eq!(found(&rules, Method::GET, "/users/42/x/"), None);
    // Method filters; * matches the rest (also empty) but needs its segment.
    assert_eq!(
        found(&rules, Method::PUT, "/users/42/").as_deref(),
        Some("users-write")
    );
    assert_eq!(
        found(&rules, Method::POST, "/users/").as_deref(),
        Some("users-write")
    );
    assert_eq!(
        found(&rules, Method::DELETE, "/users/1/2/3").as_deref(),
        Some("users-write")
    );
    assert_eq!(found(&rules, Method::POST, "/users"), None);
    assert_eq!(found(&rules, Method::OPTIONS, "/users/42/"), None);
    assert_eq!(
        found(&rules, Method::GET, "/groups/").as_deref(),
        Some("groups")
    );
    assert_eq!(
        found(&rules, Method::PATCH, "/groups/7/").as_deref(),
        Some("groups")
    );
    assert_eq!(found(&rules, Method::GET, "/me").as_deref(), Some("me"));
    assert_eq!(found(&rules, Method::GET, "/me/"), None);
    assert_eq!(found(&rules, Method::GET, "/nothing"), None);
    // Query and fragment are ignored.
    assert_eq!(
        found(&rules, Method::GET, "/users/?page=2").as_deref(),
        Some("users-list")
    );
    assert_eq!(found(&rules, Method::GET, "/me#x").as_deref(), Some("me"));
}

#[test]
fn dot_segments_and_odd_paths_match_nothing() {
    let rules = good();
    for p in [
        "/o/../users/",
        "/o/./token/",
        "/o/%2e%2E/users/",
        "/o/%2E/x",
        "/o/.%2e/x",
        "/o/%2e./x",
        "/o/..",
        "o/token/",
        "",
        "*",
    ] {
        assert_eq!(found(&rules, Method::GET, p), None, "{p}");
    }
    for p in ["/o/..x/", "/o/.../", "/o/%2e%2e%2e/", "/o/%2/", "/o/%2e%/"] {
        assert_eq!(
            found(&rules, Method::GET, p).as_deref(),
            Some("oauth"),
            "{p}"
        );
    }
}

#[test]
fn pattern_edges() {
    let src = "routes:\n  - name: root\n    pattern: /\n  - name: any\n    pattern: /*\n";
    let rules = Rules::from_yaml(src, FILE).unwrap();
    assert_eq!(found(&rules, Method::GET, "/").as_deref(), Some("root"));
    assert_eq!(found(&rules, Method::GET, "/a/b").as_deref(), Some("any"));
}

#[test]
fn empty_rules_deny_everything() {
    let rules = Rules::from_yaml("routes: []", FILE).unwrap();
    assert_eq!(found(&rules, Method::GET, "/"), None);
}

#[test]
fn unknown_method_names_file_rule_field_value() {
    let e = error(
        "routes:\n  - {name: a, path: /a}\n  - {name: b, path: /b}\n  - name: users-write\n    path: /users/\n    methods: [GET, GTE]\n",
    );
    assert_eq!(
        e,
        r#"config/proxy.yaml: routes[2] (users-write): key "methods": unknown method "GTE""#
    );
}

#[test]
fn path_kind_errors() {
    let e = one_rule("    methods: [GET]\n");
    assert!(
        e.starts_with(r#"config/proxy.yaml: routes[1] (bad): key "path": no path given"#),
        "{e}"
    );
    let e = one_rule("    path: /a\n    prefix: /b\n");
    assert!(
        e.starts_with(r#"config/proxy.yaml: routes[1] (bad): key "prefix": "/b": only one of"#),
        "{e}"
    );
    let e = one_rule("    prefix: /a\n    pattern: /b\n    path: /c\n");
    assert!(e.contains(r#"routes[1] (bad): key "prefix""#), "{e}");
    let e = one_rule("    path: users/\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "path": "users/" does not start with"#),
        "{e}"
    );
    let e = one_rule("    prefix: /a?b=1\n");
    assert!(e.contains(r#"key "prefix": "/a?b=1""#), "{e}");
    let e = one_rule("    pattern: /a/*/b\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "pattern": "/a/*/b": "*" may only be the last"#),
        "{e}"
    );
    let e = one_rule("    pattern: /a/{}/\n");
    assert!(
        e.contains(r#"key "pattern": "/a/{}/": bad parameter name "{}""#),
        "{e}"
    );
    let e = one_rule("    pattern: /a/x{id}/\n");
    assert!(
        e.contains(r#"key "pattern": "/a/x{id}/": segment "x{id}""#),
        "{e}"
    );
    let e = one_rule("    pattern: /a/b*\n");
    assert!(e.contains(r#"key "pattern""#), "{e}");
}

#[test]
fn scope_errors() {
    let e = one_rule("    path: /x\n    scopes: { all_of: [] }\n");
    assert_eq!(
        e,
        r#"config/proxy.yaml: routes[1] (bad): key "scopes.all_of": []: empty list"#
    );
    let e = one_rule("    path: /x\n    scopes: { any_of: [] }\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "scopes.any_of": []: empty list"#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    scopes: []\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "scopes.all_of": []: empty list"#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    scopes: {}\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "scopes": {}: set all_of or any_of"#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    scopes: [\"re ad\"]\n");
    assert!(
        e.contains(r#"key "scopes.all_of": invalid scope "re ad""#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    scopes: { any_of: [ok, 'a\"b'] }\n");
    assert!(
        e.contains(r#"key "scopes.any_of": invalid scope "a\"b""#),
        "{e}"
    );
}

#[test]
fn access_errors() {
    let e = one_rule("    path: /x\n    public: true\n    scopes: [read]\n");
    assert_eq!(
        e,
        r#"config/proxy.yaml: routes[1] (bad): key "scopes": {"all_of":["read"]}: a public route takes no scopes"#
    );
    let e = one_rule("    path: /x\n    public: true\n    authenticated: true\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "authenticated": true together with public"#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    authenticated: false\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "authenticated": false is not allowed"#),
        "{e}"
    );
    // public: false is simply an authenticated route.
    let r = Rules::from_yaml("routes:\n  - {name: a, path: /a, public: false}\n", FILE).unwrap();
    assert_eq!(
        r.routes()[0].access,
        Access::Authenticated {
            all_of: vec![],
            any_of: vec![]
        }
    );
}

#[test]
fn other_field_errors() {
    let e = one_rule("    path: /x\n    methods: []\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "methods": empty list"#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    upstream: ''\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "upstream": "": empty upstream"#),
        "{e}"
    );
    let e = error("routes:\n  - name: ''\n    path: /x\n");
    assert!(e.contains(r#"routes[0] (): key "name": empty name"#), "{e}");
}

#[test]
fn duplicate_names() {
    let e = error(
        "routes:\n  - {name: a, path: /a}\n  - {name: b, path: /b}\n  - {name: a, path: /c}\n",
    );
    assert_eq!(
        e,
        r#"config/proxy.yaml: routes[2] (a): key "name": duplicate name "a" (also routes[0])"#
    );
}

#[test]
fn unknown_fields_give_serde_message_and_file() {
    let e = one_rule("    path: /x\n    scope: [read]\n");
    assert!(e.starts_with("config/proxy.yaml: "), "{e}");
    assert!(e.contains("unknown field `scope`"), "{e}");
    assert!(e.contains("routes[1]"), "{e}");
    let e = one_rule("    path: /x\n    scopes: { one_of: [read] }\n");
    assert!(e.starts_with("config/proxy.yaml: "), "{e}");
    assert!(e.contains("unknown field `one_of`"), "{e}");
    let e = error("routes: []\nextra: 1\n");
    assert!(
        e.starts_with("config/proxy.yaml: ") && e.contains("unknown field `extra`"),
        "{e}"
    );
    let e = error("routes:\n  - path: /x\n");
    assert!(
        e.starts_with("config/proxy.yaml: ") && e.contains("missing field `name`"),
        "{e}"
    );
    let e = error("routes: [");
    assert!(e.starts_with("config/proxy.yaml: "), "{e}");
    let e = one_rule("    path: /x\n    scopes: { all_of: [a], all_of: [b] }\n");
    assert!(e.starts_with("config/proxy.yaml: "), "{e}");
}

#[test]
fn load_from_disk() {
    let dir = std::env::temp_dir().join(format!("rs-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, GOOD).unwrap();
    assert_eq!(Rules::load(&path).unwrap(), good());
    let missing = dir.join("missing.yaml");
    let e = Rules::load(&missing).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: cannot read", missing.display())),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn from_routes_embedding() {
    let specs: Vec<RouteSpec> =
        serde_yaml_ng::from_str("- {name: a, prefix: /, public: true}").unwrap();
    let rules = Rules::from_routes(specs, "proxy.yaml").unwrap();
    assert_eq!(
        found(&rules, Method::GET, "/anything").as_deref(),
        Some("a")
    );
}

#[test]
fn hostile_yaml_is_refused_before_it_is_parsed() {
    let deep = format!("routes: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let error = Rules::from_yaml(&deep, "rules.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("rules.yaml: line 1 column ")
            && error.ends_with(": nested deeper than 128 levels"),
        "{error}"
    );
}

#[test]
fn dpop_per_route() {
    let rules = Rules::from_yaml(
        "routes:\n  - {name: a, path: /a, dpop: required}\n  - {name: b, path: /b, dpop: allowed}\n  - {name: c, path: /c}\n",
        FILE,
    )
    .unwrap();
    let policy = |path| rules.find(&Method::GET, path).unwrap().dpop;
    assert_eq!(policy("/a"), crate::dpop::DpopPolicy::Required);
    assert_eq!(policy("/b"), crate::dpop::DpopPolicy::Allowed);
    assert_eq!(policy("/c"), crate::dpop::DpopPolicy::Allowed);
    let e = one_rule("    path: /x\n    dpop: sometimes\n");
    assert!(
        e.contains(r#"routes[1] (bad): key "dpop": "sometimes": expected required or allowed"#),
        "{e}"
    );
    let e = one_rule("    path: /x\n    public: true\n    dpop: required\n");
    assert!(
        e.contains(r#"key "dpop": a public route takes no token"#),
        "{e}"
    );
}
