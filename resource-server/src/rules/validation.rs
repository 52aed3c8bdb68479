//! From [`RouteSpec`] to [`Route`]: one kind of path, known methods, scopes as RFC 6749 §3.3
//! scope-tokens, and public routes without scopes. Errors are `(rule name, field, message)`.

use http::Method;

use super::matcher::{Matcher, parse_pattern};
use super::schema::{RouteSpec, ScopesSpec};
use super::{Access, Route};

pub(super) type Invalid = (String, &'static str, String);

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

/// Validates the spec at `index`.
pub(super) fn validate(index: usize, spec: RouteSpec) -> Result<Route, Invalid> {
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
