//! The one precedence of every binary's settings: the file, then the environment (the binary's
//! prefix), then the overrides of the process that embeds the binary (the one-command stack).
//! Each value keeps where it came from, so that an error names the file's key, the variable or
//! "set by the stack"; and a validated configuration keeps its [`Document`], so that whoever
//! embeds it hands its decisions in as overrides and validates again, instead of editing
//! validated values.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::ConfigError;
use crate::config_error::{env_origin, key_origin};

/// Values decided by the embedding process, by the file's dotted key (`listen`,
/// `upstreams.api.address`, `introspection.url`): they win over the environment and the file.
/// `Debug` shows the keys only (some values are secrets).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Overrides(BTreeMap<String, String>);

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Overrides {
    /// Decides `key` (a dotted key of the file).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.0.insert(key.into(), value.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// `self` with `other`'s decisions on top.
    pub fn merged(&self, other: &Overrides) -> Overrides {
        let mut out = self.clone();
        out.0.extend(other.0.clone());
        out
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Into<String>, V: Into<String>, const N: usize> From<[(K, V); N]> for Overrides {
    fn from(pairs: [(K, V); N]) -> Self {
        Overrides(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// Where a value came from, lowest first: a value from a higher layer replaces a lower one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// Neither file, environment nor override gives it.
    Absent,
    File,
    Env,
    Override,
}

/// `key "<key>" set by the stack`: the origin of an override in messages.
pub fn override_origin(key: &str) -> String {
    format!("key \"{key}\" set by the stack")
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    /// As messages name it: `<file>: key "<key>"`, `environment variable <VAR>`, or
    /// [`override_origin`].
    pub origin: String,
    pub layer: Layer,
    pub value: Option<String>,
}

/// The layers of one binary's settings: the file's name (for messages), the environment, and
/// the overrides (each one read is remembered: [`Layers::check_all_read`]).
pub struct Layers<'a> {
    pub file: &'a str,
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub overrides: &'a Overrides,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Layers<'a> {
    pub fn new(
        file: &'a str,
        env: &'a dyn Fn(&str) -> Option<String>,
        overrides: &'a Overrides,
    ) -> Self {
        Layers {
            file,
            env,
            overrides,
            read: RefCell::default(),
        }
    }

    /// Refuses an override that validation never read: a key the binary does not take from
    /// the stack (a typo in the embedding code would otherwise be silently ignored).
    pub fn check_all_read(&self) -> Result<(), ConfigError> {
        let read = self.read.borrow();
        match self.overrides.0.keys().find(|key| !read.contains(*key)) {
            Some(key) => Err(ConfigError::problem(
                override_origin(key),
                "not a setting read here (no such key, or one the stack cannot decide)",
            )),
            None => Ok(()),
        }
    }

    /// The value of `key` by the one precedence: the override, else the environment variable
    /// `var` (when the key has one, and it is set and not empty), else the file's value.
    pub fn pick(&self, key: &str, var: Option<&str>, from_file: Option<String>) -> Picked {
        if let Some(value) = self.overrides.get(key) {
            self.read.borrow_mut().insert(key.to_owned());
            return Picked {
                origin: override_origin(key),
                layer: Layer::Override,
                value: Some(value.to_owned()),
            };
        }
        if let Some(var) = var
            && let Some(value) = (self.env)(var).filter(|v| !v.is_empty())
        {
            return Picked {
                origin: env_origin(var),
                layer: Layer::Env,
                value: Some(value),
            };
        }
        Picked {
            origin: key_origin(self.file, key),
            layer: if from_file.is_some() {
                Layer::File
            } else {
                Layer::Absent
            },
            value: from_file,
        }
    }

    /// Like [`Layers::pick`] for a key the file need not give: `None` when no layer gives it.
    pub fn given(&self, key: &str, var: Option<&str>) -> Option<(String, String)> {
        let picked = self.pick(key, var, None);
        Some((picked.origin, picked.value?))
    }
}

/// A secret given as text or as a file holding it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// Where it came from (for a file: the key or variable that named it, and the path).
    pub origin: String,
    pub text: String,
    /// The file it was read from, if any (read again when the secret is refused, say).
    pub path: Option<std::path::PathBuf>,
    /// The layer that gave it (or named its file).
    pub layer: Layer,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("origin", &self.origin)
            .field("path", &self.path)
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

/// The one rule for "a secret, or a file holding it" ([`crate::secret_file::read`]): the value
/// of the higher layer wins (an override over the environment over the file); both from the same
/// layer are refused, naming both. The error never shows the secret; `what` names it ("the
/// proxy secret").
pub fn secret_or_file(
    what: &str,
    text: Picked,
    file: Picked,
) -> Result<Option<Secret>, ConfigError> {
    secret_or_checked_file(what, text, file, |_| Ok(()))
}

/// [`secret_or_file`], the file (when it is the one used) given to `check` before it is read:
/// its mode, say, so that a file others may read is refused before its secret is in memory.
pub fn secret_or_checked_file(
    what: &str,
    text: Picked,
    file: Picked,
    check: impl FnOnce(&Path) -> Result<(), ConfigError>,
) -> Result<Option<Secret>, ConfigError> {
    let use_file = match (&text.value, &file.value) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) if text.layer == file.layer => {
            return Err(ConfigError::problem(
                file.origin,
                format!(
                    "{} is set too: give {what} once, as text or as a file",
                    text.origin
                ),
            ));
        }
        (Some(_), Some(_)) => file.layer > text.layer,
        (None, Some(_)) => true,
        (Some(_), None) => false,
    };
    if !use_file {
        return Ok(text.value.map(|text_value| Secret {
            origin: text.origin,
            text: text_value,
            path: None,
            layer: text.layer,
        }));
    }
    let path = file.value.unwrap_or_default();
    check(Path::new(&path))?;
    let secret = crate::secret_file::read(Path::new(&path))
        .map_err(|problem| ConfigError::at(file.origin.clone(), &path, problem))?;
    Ok(Some(Secret {
        origin: format!("{} ({path})", file.origin),
        text: secret,
        path: Some(path.into()),
        layer: file.layer,
    }))
}

/// A configuration as read, before validation: the YAML text, the name messages give it, the
/// environment variables validation read (recorded, so that validating again sees the same
/// environment), and the overrides. Validating the same document gives the same result.
#[derive(Clone, Default)]
pub struct Document {
    /// The file's name in messages.
    pub name: String,
    pub text: Arc<str>,
    /// The variables read, and their values (unset ones are not kept).
    pub env: BTreeMap<String, String>,
    pub overrides: Overrides,
}

impl fmt::Debug for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Document")
            .field("name", &self.name)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl Document {
    pub fn new(name: &str, text: &str) -> Document {
        Document {
            name: name.to_owned(),
            text: text.into(),
            env: BTreeMap::new(),
            overrides: Overrides::default(),
        }
    }

    /// The same document with `overrides` on top of its own.
    pub fn with_overrides(&self, overrides: &Overrides) -> Document {
        Document {
            overrides: self.overrides.merged(overrides),
            ..self.clone()
        }
    }

    /// The same document, with the variables `seen` (by a [`Recorder`]) added to those it
    /// kept: a variable an override hides now is still there if the override goes.
    pub fn having_read(&self, seen: BTreeMap<String, String>) -> Document {
        let mut env = self.env.clone();
        env.extend(seen);
        Document {
            env,
            ..self.clone()
        }
    }

    /// The environment this document was validated with.
    pub fn recorded_env(&self) -> impl Fn(&str) -> Option<String> + '_ {
        |key| self.env.get(key).cloned()
    }
}

/// An environment lookup that remembers what it gave (see [`Document::env`]).
pub struct Recorder<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    seen: RefCell<BTreeMap<String, String>>,
}

impl<'a> Recorder<'a> {
    pub fn new(env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Recorder {
            env,
            seen: RefCell::default(),
        }
    }

    /// The variable `key`, remembered when set.
    pub fn get(&self, key: &str) -> Option<String> {
        let value = (self.env)(key);
        if let Some(v) = &value {
            self.seen.borrow_mut().insert(key.to_owned(), v.clone());
        }
        value
    }

    pub fn into_seen(self) -> BTreeMap<String, String> {
        self.seen.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(key: &str) -> Option<String> {
        match key {
            "P_LISTEN" => Some("127.0.0.1:1".into()),
            "P_EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn overrides_win_over_the_environment_which_wins_over_the_file() {
        let overrides = Overrides::from([("listen", "127.0.0.1:2"), ("lisen", "typo")]);
        let layers = Layers::new("p.yaml", &env, &overrides);
        let file = || Some("127.0.0.1:3".to_owned());
        let p = layers.pick("listen", Some("P_LISTEN"), file());
        assert_eq!(
            (p.origin.as_str(), p.layer, p.value.as_deref()),
            (
                "key \"listen\" set by the stack",
                Layer::Override,
                Some("127.0.0.1:2")
            )
        );
        assert_eq!(
            layers.check_all_read().unwrap_err().to_string(),
            "key \"lisen\" set by the stack: not a setting read here (no such key, or one the \
             stack cannot decide)"
        );
        let none = Overrides::default();
        let layers = Layers::new("p.yaml", &env, &none);
        let p = layers.pick("listen", Some("P_LISTEN"), file());
        assert_eq!(
            (p.origin.as_str(), p.value.as_deref()),
            ("environment variable P_LISTEN", Some("127.0.0.1:1"))
        );
        // An empty variable is not set; a key without a variable reads the file.
        for var in [Some("P_EMPTY"), None] {
            let p = layers.pick("listen", var, file());
            assert_eq!(
                (p.origin.as_str(), p.layer, p.value.as_deref()),
                ("p.yaml: key \"listen\"", Layer::File, Some("127.0.0.1:3"))
            );
        }
        assert_eq!(layers.pick("x", None, None).layer, Layer::Absent);
        assert_eq!(layers.given("x", Some("P_X")), None);
    }

    #[test]
    fn a_secret_from_a_higher_layer_wins_and_two_at_one_layer_are_refused() {
        let dir = std::env::temp_dir().join(format!("tg-layers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        std::fs::write(&path, "from-file\n").unwrap();
        let path = path.display().to_string();
        let at = |layer: Layer, origin: &str, value: Option<&str>| Picked {
            origin: origin.into(),
            layer,
            value: value.map(str::to_owned),
        };
        let text = at(Layer::Env, "environment variable S", Some("from-env"));
        let file = at(Layer::File, "f: key \"s_file\"", Some(&path));
        let s = secret_or_file("the secret", text.clone(), file.clone())
            .unwrap()
            .unwrap();
        assert_eq!((s.text.as_str(), s.path), ("from-env", None));
        let text_in_file = at(Layer::File, "f: key \"s\"", Some("from-text"));
        let e = secret_or_file("the secret", text_in_file, file.clone()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f: key \"s_file\": f: key \"s\" is set too: give the secret once, as text or as a file"
        );
        let file_from_env = at(Layer::Env, "environment variable S_FILE", Some(&path));
        let text_in_file = at(Layer::File, "f: key \"s\"", Some("from-text"));
        let s = secret_or_file("the secret", text_in_file, file_from_env)
            .unwrap()
            .unwrap();
        assert_eq!(s.text, "from-file");
        assert_eq!(s.origin, format!("environment variable S_FILE ({path})"));
        let missing = at(Layer::File, "f: key \"s_file\"", Some("/nonexistent/tg"));
        let e = secret_or_file("the secret", at(Layer::Absent, "", None), missing).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f: key \"s_file\": \"/nonexistent/tg\": cannot read"),
            "{e}"
        );
        assert_eq!(
            secret_or_file(
                "s",
                at(Layer::Absent, "", None),
                at(Layer::Absent, "", None)
            )
            .unwrap(),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_document_remembers_the_environment_it_was_validated_with() {
        let recorder = Recorder::new(&env);
        assert_eq!(recorder.get("P_LISTEN").as_deref(), Some("127.0.0.1:1"));
        assert_eq!(recorder.get("P_NONE"), None);
        let mut doc = Document::new("p.yaml", "listen: x");
        doc.env = recorder.into_seen();
        let again = doc.with_overrides(&Overrides::from([("listen", "y")]));
        assert_eq!(
            again.recorded_env()("P_LISTEN").as_deref(),
            Some("127.0.0.1:1")
        );
        assert_eq!(again.overrides.get("listen"), Some("y"));
        assert!(!format!("{again:?}").contains("127.0.0.1:1"));
    }
}
