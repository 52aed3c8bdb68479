//! The one configuration error of every binary: where the bad value came from (a file's key, a
//! route's field or an environment variable), the value, and what is wrong with it.

use std::fmt;

/// A value the file gives that does not do, before it is placed: the shared checks return it
/// and [`ConfigError::setting`] names the file or variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    /// The dotted key, e.g. `introspection.cache.max_ttl`.
    pub field: String,
    /// The value as written, unquoted.
    pub value: String,
    pub problem: String,
}

/// A configuration that failed to load. `Display` is the whole message for the operator, e.g.
/// `proxy.yaml: key "listen": "localhost": expected IP:port` or
/// `environment variable PROXY_LISTEN: "x": expected IP:port`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cause is in the message, not a `source()`, so that a chain printer (anyhow's `{:#}`)
    /// does not say it twice.
    #[error("{file}: cannot read: {error}")]
    Read { file: String, error: std::io::Error },
    /// YAML syntax, an unknown key or a wrong type (the parser's message, with the location).
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    /// A value that does not do. `value` is as shown: quoted, or a placeholder such as
    /// `(missing)`; `None` when the problem names no single value.
    #[error("{origin}: {}{problem}", ValuePrefix(value))]
    Invalid {
        origin: String,
        value: Option<String>,
        problem: String,
    },
}

struct ValuePrefix<'a>(&'a Option<String>);

impl fmt::Display for ValuePrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => write!(f, "{value}: "),
            None => Ok(()),
        }
    }
}

impl ConfigError {
    /// A bad value of `key` (dotted, e.g. `introspection.leeway`) in `file`.
    pub fn key(
        file: &str,
        key: &str,
        value: impl fmt::Display,
        problem: impl Into<String>,
    ) -> Self {
        Self::at(key_origin(file, key), value, problem)
    }

    /// A bad value of the environment variable `var`.
    pub fn env(var: &str, value: impl fmt::Display, problem: impl Into<String>) -> Self {
        Self::at(env_origin(var), value, problem)
    }

    /// A bad value at `origin` (see [`key_origin`], [`env_origin`]); the value is quoted unless
    /// it is a placeholder such as `(missing)` or `(hidden)`.
    pub fn at(origin: String, value: impl fmt::Display, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            origin,
            value: Some(quoted(&value.to_string())),
            problem: problem.into(),
        }
    }

    /// A problem at `origin` that names no single value.
    pub fn problem(origin: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            origin: origin.into(),
            value: None,
            problem: problem.into(),
        }
    }

    /// A route's field: `<file>: routes[<index>] (<name>): key "<field>"`.
    pub fn route(
        file: &str,
        index: usize,
        name: &str,
        field: &str,
        value: Option<&str>,
        problem: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            origin: format!("{file}: routes[{index}] ({name}): key \"{field}\""),
            value: value.map(quoted),
            problem: problem.into(),
        }
    }

    /// A shared check's error ([`SettingError`]) about `file`'s key, or about the `origin` the
    /// value came from when it was not the file (an environment variable, an override: see
    /// [`crate::layers::Layers::pick`]).
    pub fn setting(file: &str, error: SettingError, origin: Option<&str>) -> Self {
        let origin = match origin {
            Some(origin) => origin.to_owned(),
            None => key_origin(file, &error.field),
        };
        Self::at(origin, error.value, error.problem)
    }
}

/// `<file>: key "<key>"`.
pub fn key_origin(file: &str, key: &str) -> String {
    format!("{file}: key \"{key}\"")
}

/// `environment variable <VAR>`.
pub fn env_origin(var: &str) -> String {
    format!("environment variable {var}")
}

/// A value as messages show it: quoted, unless it is a placeholder such as `(missing)`.
pub fn quoted(value: &str) -> String {
    if value.starts_with('(') && value.ends_with(')') {
        value.to_owned()
    } else {
        format!("{value:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_origin_the_value_and_the_problem() {
        assert_eq!(
            ConfigError::key("p.yaml", "listen", "localhost", "expected IP:port").to_string(),
            "p.yaml: key \"listen\": \"localhost\": expected IP:port"
        );
        assert_eq!(
            ConfigError::env("PROXY_LISTEN", "(missing)", "required").to_string(),
            "environment variable PROXY_LISTEN: (missing): required"
        );
        assert_eq!(
            ConfigError::route("p.yaml", 1, "users", "path", None, "must start with /").to_string(),
            "p.yaml: routes[1] (users): key \"path\": must start with /"
        );
        let setting = SettingError {
            field: "introspection.leeway".into(),
            value: "6m".into(),
            problem: "at most 300s".into(),
        };
        assert_eq!(
            ConfigError::setting("c.yaml", setting, None).to_string(),
            "c.yaml: key \"introspection.leeway\": \"6m\": at most 300s"
        );
    }
}
