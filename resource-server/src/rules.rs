//! Route rules read from YAML: which paths and methods need which scopes. First match wins.
//!
//! The YAML mirrors [`RouteSpec`] (serde, `deny_unknown_fields`); [`Rules::from_routes`] validates
//! specs into [`Route`]s, and every error names the file, the rule (index and name), the field and
//! the bad value.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use http::Method;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// One route as written in YAML. Exactly one of `path` (exact), `prefix` or `pattern` is set.
///
/// ```yaml
/// - name: users-write
///   pattern: /users/{id}/      # {param} = one non-empty segment, * (last) = rest of the path
///   methods: [PUT, PATCH, DELETE]
///   upstream: api
///   scopes: { all_of: [write] }   # or { any_of: [...] }, or [write] (= all_of)
/// ```
///
/// `public: true` needs no token (and takes no scopes); otherwise the route is authenticated and
/// needs an active token with the scopes given (no `scopes` = any active token).
/// `authenticated: true` may be written for clarity; it is the default.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<ScopesSpec>,
}

/// `scopes:` as written: `{ all_of: [...], any_of: [...] }` (either or both), or a plain list
/// meaning `all_of`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ScopesSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_of: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_of: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for ScopesSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const FIELDS: &[&str] = &["all_of", "any_of"];
        impl<'de> Visitor<'de> for V {
            type Value = ScopesSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of scopes, or a map with all_of and/or any_of")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ScopesSpec, A::Error> {
                let mut all = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    all.push(s);
                }
                Ok(ScopesSpec {
                    all_of: Some(all),
                    any_of: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ScopesSpec, A::Error> {
                let mut spec = ScopesSpec::default();
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "all_of" => &mut spec.all_of,
                        "any_of" => &mut spec.any_of,
                        other => return Err(de::Error::unknown_field(other, FIELDS)),
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
                    }
                    *slot = Some(map.next_value()?);
                }
                Ok(spec)
            }
        }
        d.deserialize_any(V)
    }
}

/// The whole rules file: `routes:` and nothing else.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    routes: Vec<RouteSpec>,
}

/// What a route needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// No token needed; a token, good or bad, is ignored.
    Public,
    /// An active token with every scope of `all_of` and, if `any_of` is not empty, at least one
    /// of `any_of`. Both empty: any active token.
    Authenticated {
        all_of: Vec<String>,
        any_of: Vec<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Matcher {
    Exact(String),
    Prefix(String),
    Pattern(Vec<Segment>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
    Rest,
}

/// A validated route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    pub upstream: Option<String>,
    pub access: Access,
    matcher: Matcher,
    methods: Option<Vec<Method>>,
    index: usize,
}

impl Route {
    /// Position of the rule in its file (`routes[index]`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The methods this route is limited to; `None` = every method.
    pub fn methods(&self) -> Option<&[Method]> {
        self.methods.as_deref()
    }

    /// Whether this route matches (no path normalisation; see [`Rules::find`]).
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        if let Some(methods) = &self.methods
            && !methods.contains(method)
        {
            return false;
        }
        match &self.matcher {
            Matcher::Exact(p) => path == p,
            Matcher::Prefix(p) => path.starts_with(p.as_str()),
            Matcher::Pattern(segments) => pattern_matches(segments, path),
        }
    }
}

fn pattern_matches(pattern: &[Segment], path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let mut parts = rest.split('/');
    for seg in pattern {
        let Some(part) = parts.next() else {
            return false;
        };
        match seg {
            Segment::Rest => return true,
            Segment::Param if part.is_empty() => return false,
            Segment::Param => {}
            Segment::Literal(l) if l != part => return false,
            Segment::Literal(_) => {}
        }
    }
    parts.next().is_none()
}

/// A rules file that failed to load. `Display` names the file, the rule, the field and the value.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// YAML syntax, unknown field, wrong type (serde's message, which gives the location).
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: routes[{index}] ({name}): field \"{field}\": {message}")]
    Invalid {
        file: String,
        index: usize,
        name: String,
        field: String,
        message: String,
    },
}

/// Validated route rules, in file order; the first match wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    routes: Vec<Route>,
}

impl Rules {
    /// Reads and validates a rules file (`routes:` at the top level).
    pub fn load(path: &Path) -> Result<Rules, RulesError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
            file: file.clone(),
            source,
        })?;
        Self::from_yaml(&src, &file)
    }

    /// Parses and validates YAML text; `file` is used only in messages.
    pub fn from_yaml(src: &str, file: &str) -> Result<Rules, RulesError> {
        let parsed: RulesFile = serde_yaml_ng::from_str(src).map_err(|e| RulesError::Syntax {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        Self::from_routes(parsed.routes, file)
    }

    /// Validates routes already deserialized (e.g. from a bigger YAML file).
    pub fn from_routes(routes: Vec<RouteSpec>, file: &str) -> Result<Rules, RulesError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (index, spec) in routes.iter().enumerate() {
            if let Some(first) = seen.insert(spec.name.as_str(), index) {
                return Err(RulesError::Invalid {
                    file: file.to_owned(),
                    index,
                    name: spec.name.clone(),
                    field: "name".into(),
                    message: format!("duplicate name {:?} (also routes[{first}])", spec.name),
                });
            }
        }
        let routes = routes
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                validate(index, spec).map_err(|(name, field, message)| RulesError::Invalid {
                    file: file.to_owned(),
                    index,
                    name,
                    field: field.to_owned(),
                    message,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rules { routes })
    }

    /// The first route matching `method` and `path`, or `None` (deny).
    ///
    /// `path` is the request path; anything from `?` or `#` on is ignored. Paths that do not start
    /// with `/` or that contain a `.` or `..` segment (also percent-encoded) match nothing, so that
    /// an upstream normalising them cannot be reached through a more permissive rule.
    pub fn find(&self, method: &Method, path: &str) -> Option<&Route> {
        let path = path.split(['?', '#']).next().unwrap_or("");
        if !path.starts_with('/') || has_dot_segment(path) {
            return None;
        }
        self.routes.iter().find(|r| r.matches(method, path))
    }

    /// All routes, in file order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }
}

fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| {
        let lower = seg.to_ascii_lowercase();
        let decoded = lower.replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

type Invalid = (String, &'static str, String);

/// The methods a route's `methods:` may name (any case).
pub const KNOWN_METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
    Method::TRACE,
    Method::CONNECT,
];

fn validate(index: usize, spec: RouteSpec) -> Result<Route, Invalid> {
    let RouteSpec {
        name,
        path,
        prefix,
        pattern,
        methods,
        upstream,
        public,
        authenticated,
        scopes,
    } = spec;
    let err = |field: &'static str, message: String| Err((name.clone(), field, message));

    if name.trim().is_empty() {
        return err("name", "empty name".into());
    }

    // Path: exactly one kind.
    let given: Vec<(&'static str, &String)> =
        [("path", &path), ("prefix", &prefix), ("pattern", &pattern)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .collect();
    let matcher = match given.as_slice() {
        [] => {
            return err(
                "path",
                "no path given: set one of path, prefix or pattern".into(),
            );
        }
        [(kind, value)] => {
            if !value.starts_with('/') {
                return err(kind, format!("{value:?} does not start with \"/\""));
            }
            if value.contains(['?', '#'])
                || value.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return err(
                    kind,
                    format!("{value:?}: a path has no query, fragment or spaces"),
                );
            }
            match *kind {
                "path" => Matcher::Exact((*value).clone()),
                "prefix" => Matcher::Prefix((*value).clone()),
                _ => match parse_pattern(value) {
                    Ok(segs) => Matcher::Pattern(segs),
                    Err(message) => return err("pattern", message),
                },
            }
        }
        [(first, _), (second, value), ..] => {
            return err(
                second,
                format!(
                    "{value:?}: only one of path, prefix and pattern may be set (also {first})"
                ),
            );
        }
    };

    let methods = match methods {
        None => None,
        Some(list) if list.is_empty() => {
            return err(
                "methods",
                "empty list (omit methods to allow every method)".into(),
            );
        }
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for m in &list {
                let upper = m.to_ascii_uppercase();
                match KNOWN_METHODS.iter().find(|k| k.as_str() == upper) {
                    Some(k) if !out.contains(k) => out.push(k.clone()),
                    Some(_) => {}
                    None => return err("methods", format!("unknown method {m:?}")),
                }
            }
            Some(out)
        }
    };

    if let Some(u) = &upstream
        && u.trim().is_empty()
    {
        return err("upstream", format!("{u:?}: empty upstream name"));
    }

    let access = match (public, authenticated) {
        (Some(true), Some(true)) => {
            return err("authenticated", "true together with public: true".into());
        }
        (Some(true), _) => {
            if let Some(s) = &scopes {
                return err(
                    "scopes",
                    format!("{}: a public route takes no scopes", describe_scopes(s)),
                );
            }
            Access::Public
        }
        (_, Some(false)) => {
            return err(
                "authenticated",
                "false is not allowed: write public: true for a route without a token".into(),
            );
        }
        _ => {
            let (all_of, any_of) = match scopes {
                None => (Vec::new(), Vec::new()),
                Some(ScopesSpec {
                    all_of: None,
                    any_of: None,
                }) => {
                    return err("scopes", "{}: set all_of or any_of, or omit scopes".into());
                }
                Some(ScopesSpec { all_of, any_of }) => {
                    let all_of = match check_scopes(all_of) {
                        Ok(v) => v,
                        Err(m) => return err("scopes.all_of", m),
                    };
                    let any_of = match check_scopes(any_of) {
                        Ok(v) => v,
                        Err(m) => return err("scopes.any_of", m),
                    };
                    (all_of, any_of)
                }
            };
            Access::Authenticated { all_of, any_of }
        }
    };

    Ok(Route {
        name,
        upstream,
        access,
        matcher,
        methods,
        index,
    })
}

fn describe_scopes(s: &ScopesSpec) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn check_scopes(list: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    if list.is_empty() {
        return Err("[]: empty list".into());
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for s in list {
        // RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
        let valid = !s.is_empty()
            && s.bytes()
                .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b));
        if !valid {
            return Err(format!("invalid scope {s:?}"));
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

fn parse_pattern(p: &str) -> Result<Vec<Segment>, String> {
    let parts: Vec<&str> = p[1..].split('/').collect();
    let last = parts.len() - 1;
    let mut segs = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let seg = if *part == "*" {
            if i != last {
                return Err(format!("{p:?}: \"*\" may only be the last segment"));
            }
            Segment::Rest
        } else if let Some(inner) = part.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            if inner.is_empty() || !inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("{p:?}: bad parameter name {part:?}"));
            }
            Segment::Param
        } else if part.contains(['{', '}', '*']) {
            return Err(format!(
                "{p:?}: segment {part:?}: {{param}} and * must be whole segments"
            ));
        } else {
            Segment::Literal((*part).to_owned())
        };
        segs.push(seg);
    }
    Ok(segs)
}

#[cfg(test)]
mod tests {
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
            "/o/..",
            "o/token/",
            "",
            "*",
        ] {
            assert_eq!(found(&rules, Method::GET, p), None, "{p}");
        }
        assert_eq!(
            found(&rules, Method::GET, "/o/..x/").as_deref(),
            Some("oauth")
        );
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
            r#"config/proxy.yaml: routes[2] (users-write): field "methods": unknown method "GTE""#
        );
    }

    #[test]
    fn path_kind_errors() {
        let e = one_rule("    methods: [GET]\n");
        assert!(
            e.starts_with(r#"config/proxy.yaml: routes[1] (bad): field "path": no path given"#),
            "{e}"
        );
        let e = one_rule("    path: /a\n    prefix: /b\n");
        assert!(
            e.starts_with(
                r#"config/proxy.yaml: routes[1] (bad): field "prefix": "/b": only one of"#
            ),
            "{e}"
        );
        let e = one_rule("    prefix: /a\n    pattern: /b\n    path: /c\n");
        assert!(e.contains(r#"routes[1] (bad): field "prefix""#), "{e}");
        let e = one_rule("    path: users/\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "path": "users/" does not start with"#),
            "{e}"
        );
        let e = one_rule("    prefix: /a?b=1\n");
        assert!(e.contains(r#"field "prefix": "/a?b=1""#), "{e}");
        let e = one_rule("    pattern: /a/*/b\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "pattern": "/a/*/b": "*" may only be the last"#),
            "{e}"
        );
        let e = one_rule("    pattern: /a/{}/\n");
        assert!(
            e.contains(r#"field "pattern": "/a/{}/": bad parameter name "{}""#),
            "{e}"
        );
        let e = one_rule("    pattern: /a/x{id}/\n");
        assert!(
            e.contains(r#"field "pattern": "/a/x{id}/": segment "x{id}""#),
            "{e}"
        );
        let e = one_rule("    pattern: /a/b*\n");
        assert!(e.contains(r#"field "pattern""#), "{e}");
    }

    #[test]
    fn scope_errors() {
        let e = one_rule("    path: /x\n    scopes: { all_of: [] }\n");
        assert_eq!(
            e,
            r#"config/proxy.yaml: routes[1] (bad): field "scopes.all_of": []: empty list"#
        );
        let e = one_rule("    path: /x\n    scopes: { any_of: [] }\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "scopes.any_of": []: empty list"#),
            "{e}"
        );
        let e = one_rule("    path: /x\n    scopes: []\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "scopes.all_of": []: empty list"#),
            "{e}"
        );
        let e = one_rule("    path: /x\n    scopes: {}\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "scopes": {}: set all_of or any_of"#),
            "{e}"
        );
        let e = one_rule("    path: /x\n    scopes: [\"re ad\"]\n");
        assert!(
            e.contains(r#"field "scopes.all_of": invalid scope "re ad""#),
            "{e}"
        );
        let e = one_rule("    path: /x\n    scopes: { any_of: [ok, 'a\"b'] }\n");
        assert!(
            e.contains(r#"field "scopes.any_of": invalid scope "a\"b""#),
            "{e}"
        );
    }

    #[test]
    fn access_errors() {
        let e = one_rule("    path: /x\n    public: true\n    scopes: [read]\n");
        assert_eq!(
            e,
            r#"config/proxy.yaml: routes[1] (bad): field "scopes": {"all_of":["read"]}: a public route takes no scopes"#
        );
        let e = one_rule("    path: /x\n    public: true\n    authenticated: true\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "authenticated": true together with public"#),
            "{e}"
        );
        let e = one_rule("    path: /x\n    authenticated: false\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "authenticated": false is not allowed"#),
            "{e}"
        );
        // public: false is simply an authenticated route.
        let r =
            Rules::from_yaml("routes:\n  - {name: a, path: /a, public: false}\n", FILE).unwrap();
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
            e.contains(r#"routes[1] (bad): field "methods": empty list"#),
            "{e}"
        );
        let e = one_rule("    path: /x\n    upstream: ''\n");
        assert!(
            e.contains(r#"routes[1] (bad): field "upstream": "": empty upstream"#),
            "{e}"
        );
        let e = error("routes:\n  - name: ''\n    path: /x\n");
        assert!(
            e.contains(r#"routes[0] (): field "name": empty name"#),
            "{e}"
        );
    }

    #[test]
    fn duplicate_names() {
        let e = error(
            "routes:\n  - {name: a, path: /a}\n  - {name: b, path: /b}\n  - {name: a, path: /c}\n",
        );
        assert_eq!(
            e,
            r#"config/proxy.yaml: routes[2] (a): field "name": duplicate name "a" (also routes[0])"#
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
}
