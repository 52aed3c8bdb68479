//! Route rules read from YAML: which paths and methods need which scopes. First match wins.
//!
//! The YAML mirrors [`RouteSpec`] (serde, `deny_unknown_fields`); [`Rules::from_routes`] validates
//! specs into [`Route`]s, and every error names the file, the rule (index and name), the field and
//! the bad value.
//!
//! [`schema`] is the YAML, [`validation`] turns it into [`Route`]s, [`matcher`] matches paths.

mod matcher;
pub mod schema;
mod validation;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use http::Method;

use crate::cors::CorsPolicy;
use matcher::{Matcher, has_dot_segment};
use schema::RulesFile;
pub use schema::{CorsSpec, RouteSpec, ScopesSpec};
pub use validation::KNOWN_METHODS;
use validation::validate;

use crate::config_error::ConfigError;

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

/// A validated route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    pub upstream: Option<String>,
    pub access: Access,
    /// The groups of which the caller must be in one (`groups_any`); empty: no group needed.
    pub groups_any: Vec<String>,
    /// The `acr` values of which the token's must be one (`acr_values`); empty: any.
    pub acr_values: Vec<String>,
    /// The most seconds since the user signed in (`max_age`, against `auth_time`).
    pub max_age: Option<i64>,
    /// How browsers of other origins may call this route (`cors`); `None`: the proxy adds no
    /// CORS header and forwards preflights as any request.
    pub cors: Option<Arc<CorsPolicy>>,
    /// `dpop:`: whether only DPoP-bound tokens pass (a bound one is held to its key anyway).
    pub dpop: crate::dpop::DpopPolicy,
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
        self.matcher.matches(path)
    }
}

/// Validated route rules, in file order; the first match wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    routes: Vec<Route>,
}

impl Rules {
    /// Reads and validates a rules file (`routes:` at the top level).
    pub fn load(path: &Path) -> Result<Rules, ConfigError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            file: file.clone(),
            error,
        })?;
        Self::from_yaml(&src, &file)
    }

    /// Parses and validates YAML text; `file` is used only in messages.
    pub fn from_yaml(src: &str, file: &str) -> Result<Rules, ConfigError> {
        let parsed: RulesFile = crate::yaml::from_str(src).map_err(|e| ConfigError::Syntax {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        Self::from_routes(parsed.routes, file)
    }

    /// Validates routes already deserialized (e.g. from a bigger YAML file).
    pub fn from_routes(routes: Vec<RouteSpec>, file: &str) -> Result<Rules, ConfigError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (index, spec) in routes.iter().enumerate() {
            if let Some(first) = seen.insert(spec.name.as_str(), index) {
                return Err(ConfigError::route(
                    file,
                    index,
                    &spec.name,
                    "name",
                    None,
                    format!("duplicate name {:?} (also routes[{first}])", spec.name),
                ));
            }
        }
        let routes = routes
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                validate(index, spec).map_err(|(name, field, message)| {
                    ConfigError::route(file, index, &name, field, None, message)
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

    /// Each `(route name, scope)` of a rule needing a scope that is not in `issued` (an
    /// authorization server's `scopes_supported`): a typo no token can ever satisfy.
    pub fn scopes_not_in<'a>(&'a self, issued: &[String]) -> Vec<(&'a str, &'a str)> {
        let mut out = Vec::new();
        for route in &self.routes {
            if let Access::Authenticated { all_of, any_of } = &route.access {
                for scope in all_of.iter().chain(any_of) {
                    if !issued.contains(scope) {
                        out.push((route.name.as_str(), scope.as_str()));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
