//! From [`RouteSpec`] to [`Route`]: one kind of path, known methods, scopes as RFC 6749 §3.3
//! scope-tokens, and public routes without scopes. Errors are `(rule name, field, message)`.

use std::sync::Arc;

use http::Method;

use crate::cors::CorsPolicy;
use crate::dpop::DpopPolicy;

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

/// A field and what is wrong with it.
type Problem = (&'static str, String);

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
        groups_any,
        acr_values,
        max_age,
        cors,
        dpop,
    } = spec;
    let checked = (|| -> Result<_, Problem> {
        if name.trim().is_empty() {
            return Err(("name", "empty name".into()));
        }
        let matcher = matcher(path, prefix, pattern)?;
        let methods = methods.map(known_methods).transpose()?;
        if let Some(u) = &upstream
            && u.trim().is_empty()
        {
            return Err(("upstream", format!("{u:?}: empty upstream name")));
        }
        let access = access(public, authenticated, scopes)?;
        let groups_any = groups(groups_any, &access)?;
        let (acr_values, max_age) = step_up(acr_values, max_age, &access)?;
        let cors = cors
            .map(|c| CorsPolicy::from_spec(c, methods.as_deref()).map(Arc::new))
            .transpose()?;
        let dpop = match dpop.as_deref() {
            None => DpopPolicy::default(),
            Some(text) => DpopPolicy::parse(text)
                .ok_or(("dpop", format!("{text:?}: expected required or allowed")))?,
        };
        if dpop == DpopPolicy::Required && access == Access::Public {
            return Err(("dpop", "a public route takes no token".into()));
        }
        Ok((
            matcher,
            methods,
            access,
            (groups_any, acr_values, max_age),
            cors,
            dpop,
        ))
    })();
    match checked {
        Ok((matcher, methods, access, (groups_any, acr_values, max_age), cors, dpop)) => {
            Ok(Route {
                name,
                upstream,
                access,
                groups_any,
                acr_values,
                max_age,
                cors,
                dpop,
                matcher,
                methods,
                index,
            })
        }
        Err((field, message)) => Err((name, field, message)),
    }
}

/// Exactly one kind of path: `path` (exact), `prefix` or `pattern`.
fn matcher(
    path: Option<String>,
    prefix: Option<String>,
    pattern: Option<String>,
) -> Result<Matcher, Problem> {
    let given: Vec<(&'static str, String)> =
        [("path", path), ("prefix", prefix), ("pattern", pattern)]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
    let (kind, value) = match given.as_slice() {
        [] => {
            return Err((
                "path",
                "no path given: set one of path, prefix or pattern".into(),
            ));
        }
        [(kind, value)] => (*kind, value.clone()),
        [(first, _), (second, value), ..] => {
            return Err((
                second,
                format!(
                    "{value:?}: only one of path, prefix and pattern may be set (also {first})"
                ),
            ));
        }
    };
    if !value.starts_with('/') {
        return Err((kind, format!("{value:?} does not start with \"/\"")));
    }
    if value.contains(['?', '#']) || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err((
            kind,
            format!("{value:?}: a path has no query, fragment or spaces"),
        ));
    }
    match kind {
        "path" => Ok(Matcher::Exact(value)),
        "prefix" => Ok(Matcher::Prefix(value)),
        _ => parse_pattern(&value)
            .map(Matcher::Pattern)
            .map_err(|m| ("pattern", m)),
    }
}

/// `methods:`, each known (any case), duplicates dropped; never an empty list.
fn known_methods(list: Vec<String>) -> Result<Vec<Method>, Problem> {
    if list.is_empty() {
        return Err((
            "methods",
            "empty list (omit methods to allow every method)".into(),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for m in &list {
        let upper = m.to_ascii_uppercase();
        match KNOWN_METHODS.iter().find(|k| k.as_str() == upper) {
            Some(k) if !out.contains(k) => out.push(k.clone()),
            Some(_) => {}
            None => return Err(("methods", format!("unknown method {m:?}"))),
        }
    }
    Ok(out)
}

/// `public`, `authenticated` and `scopes` together: a public route takes no scopes.
fn access(
    public: Option<bool>,
    authenticated: Option<bool>,
    scopes: Option<ScopesSpec>,
) -> Result<Access, Problem> {
    match (public, authenticated) {
        (Some(true), Some(true)) => {
            Err(("authenticated", "true together with public: true".into()))
        }
        (Some(true), _) => match &scopes {
            Some(s) => Err((
                "scopes",
                format!("{}: a public route takes no scopes", describe_scopes(s)),
            )),
            None => Ok(Access::Public),
        },
        (_, Some(false)) => Err((
            "authenticated",
            "false is not allowed: write public: true for a route without a token".into(),
        )),
        _ => {
            let (all_of, any_of) = match scopes {
                None => (Vec::new(), Vec::new()),
                Some(ScopesSpec {
                    all_of: None,
                    any_of: None,
                }) => return Err(("scopes", "{}: set all_of or any_of, or omit scopes".into())),
                Some(ScopesSpec { all_of, any_of }) => (
                    check_scopes(all_of).map_err(|m| ("scopes.all_of", m))?,
                    check_scopes(any_of).map_err(|m| ("scopes.any_of", m))?,
                ),
            };
            Ok(Access::Authenticated { all_of, any_of })
        }
    }
}

/// `acr_values` (each a non-empty value without whitespace, control characters or quotes) and
/// `max_age` (seconds), on an authenticated route only.
fn step_up(
    acr_values: Option<Vec<String>>,
    max_age: Option<u64>,
    access: &Access,
) -> Result<(Vec<String>, Option<i64>), Problem> {
    if matches!(access, Access::Public) {
        if acr_values.is_some() {
            return Err(("acr_values", "a public route takes no acr_values".into()));
        }
        if max_age.is_some() {
            return Err(("max_age", "a public route takes no max_age".into()));
        }
    }
    let acr_values = acr_values.unwrap_or_default();
    if let Some(bad) = acr_values.iter().find(|v| {
        v.is_empty()
            || v.chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '"')
    }) {
        return Err(("acr_values", format!("invalid acr value {bad:?}")));
    }
    let max_age = max_age
        .map(|m| i64::try_from(m).map_err(|_| ("max_age", format!("{m}: too large"))))
        .transpose()?;
    Ok((acr_values, max_age))
}

/// `groups_any`: group names (any text but empty or with a control character), on an
/// authenticated route only.
fn groups(list: Option<Vec<String>>, access: &Access) -> Result<Vec<String>, Problem> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    if *access == Access::Public {
        return Err(("groups_any", "a public route takes no groups".into()));
    }
    if list.is_empty() {
        return Err(("groups_any", "[]: empty list (omit groups_any)".into()));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for g in list {
        if g.trim().is_empty() || g.chars().any(char::is_control) {
            return Err(("groups_any", format!("invalid group name {g:?}")));
        }
        if !out.contains(&g) {
            out.push(g);
        }
    }
    Ok(out)
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
