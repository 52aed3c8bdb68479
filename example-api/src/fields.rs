//! Field validation in the manner of Django REST framework's `CharField`/`EmailField`: required,
//! null, type, blank, length and format checks, collected per field for one `400`.

use serde_json::{Map, Value};

use crate::error::{ApiError, FieldErrors};

pub const REQUIRED: &str = "This field is required.";
pub const NULL: &str = "This field may not be null.";
pub const NOT_A_STRING: &str = "Not a valid string.";
pub const BLANK: &str = "This field may not be blank.";
pub const BAD_EMAIL: &str = "Enter a valid email address.";
pub const BAD_USERNAME: &str = "Enter a valid username. This value may contain only letters, numbers, and @/./+/-/_ characters.";

/// What a text field accepts.
#[derive(Clone, Copy, Debug)]
pub struct Text {
    pub required: bool,
    pub allow_blank: bool,
    pub max_length: usize,
    /// Leading and trailing whitespace removed first (not for passwords).
    pub trim: bool,
}

impl Text {
    pub const fn required(max_length: usize) -> Text {
        Text {
            required: true,
            allow_blank: false,
            max_length,
            trim: true,
        }
    }
    pub const fn optional(max_length: usize) -> Text {
        Text {
            required: false,
            allow_blank: true,
            max_length,
            trim: true,
        }
    }
}

/// Reads fields out of a body, collecting the messages.
pub struct Fields<'a> {
    data: &'a Map<String, Value>,
    /// PATCH: nothing is required.
    partial: bool,
    errors: FieldErrors,
}

impl<'a> Fields<'a> {
    pub fn new(data: &'a Map<String, Value>, partial: bool) -> Self {
        Fields {
            data,
            partial,
            errors: FieldErrors::new(),
        }
    }

    /// The field's value if given and valid; `None` if absent or invalid (then a message is kept).
    pub fn text(&mut self, name: &str, rule: Text) -> Option<String> {
        let value = match self.data.get(name) {
            None => {
                if rule.required && !self.partial {
                    self.error(name, REQUIRED);
                }
                return None;
            }
            Some(Value::Null) => return self.fail(name, NULL),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return self.fail(name, NOT_A_STRING),
        };
        let value = if rule.trim {
            value.trim().to_owned()
        } else {
            value
        };
        if value.is_empty() && !rule.allow_blank {
            return self.fail(name, BLANK);
        }
        if value.chars().count() > rule.max_length {
            return self.fail(
                name,
                &format!(
                    "Ensure this field has no more than {} characters.",
                    rule.max_length
                ),
            );
        }
        if value.chars().any(|c| c == '\0') {
            return self.fail(name, "Null characters are not allowed.");
        }
        Some(value)
    }

    /// Records a message for `name`.
    pub fn error(&mut self, name: &str, message: &str) {
        self.errors
            .entry(name.to_owned())
            .or_default()
            .push(message.to_owned());
    }

    fn fail<T>(&mut self, name: &str, message: &str) -> Option<T> {
        self.error(name, message);
        None
    }

    /// `Ok` if no field was refused, else the `400`.
    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Invalid(self.errors))
        }
    }
}

/// Django's `UnicodeUsernameValidator`: letters, digits and `@.+-_`.
pub fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || "@.+-_".contains(c))
}

/// A pragmatic form of Django's `EmailValidator`: `local@domain`, the domain made of dot-separated
/// labels of letters, digits and hyphens (or `localhost`), no whitespace.
pub fn valid_email(email: &str) -> bool {
    let Some((local, domain)) = email.rsplit_once('@') else {
        return false;
    };
    if local.is_empty()
        || local.contains('@')
        || local.starts_with('.')
        || local.ends_with('.')
        || local.contains("..")
    {
        return false;
    }
    if local
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "()<>[]:;,\\\"".contains(c))
    {
        return false;
    }
    if domain == "localhost" {
        return true;
    }
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_alphanumeric() || c == '-')
    };
    labels.len() >= 2
        && labels.iter().all(label_ok)
        && labels
            .last()
            .is_some_and(|tld| tld.chars().any(char::is_alphabetic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn text_rules() {
        let data = fields(
            json!({"a": "  x  ", "n": 12, "b": true, "z": null, "e": "   ", "long": "é".repeat(151), "nul": "a\u{0}"}),
        );
        let mut f = Fields::new(&data, false);
        assert_eq!(f.text("a", Text::required(150)).as_deref(), Some("x"));
        assert_eq!(f.text("n", Text::required(150)).as_deref(), Some("12"));
        assert_eq!(f.text("b", Text::required(150)), None);
        assert_eq!(f.text("z", Text::optional(150)), None);
        assert_eq!(f.text("e", Text::required(150)), None);
        assert_eq!(f.text("e", Text::optional(150)).as_deref(), Some(""));
        assert_eq!(f.text("long", Text::optional(150)), None);
        assert_eq!(f.text("nul", Text::optional(150)), None);
        assert_eq!(f.text("missing", Text::required(150)), None);
        assert_eq!(f.text("missing-ok", Text::optional(150)), None);
        let Err(ApiError::Invalid(errors)) = f.finish() else {
            panic!()
        };
        assert_eq!(errors["b"], [NOT_A_STRING]);
        assert_eq!(errors["z"], [NULL]);
        assert_eq!(errors["e"], [BLANK]);
        assert_eq!(
            errors["long"],
            ["Ensure this field has no more than 150 characters."]
        );
        assert_eq!(errors["missing"], [REQUIRED]);
        assert!(!errors.contains_key("missing-ok") && !errors.contains_key("a"));

        let mut partial = Fields::new(&data, true);
        assert_eq!(partial.text("missing", Text::required(150)), None);
        assert!(partial.finish().is_ok());
    }

    #[test]
    fn usernames_and_emails() {
        for ok in ["alice", "a.b@c+d-e_f", "Ünïcode", "42"] {
            assert!(valid_username(ok), "{ok}");
        }
        for bad in ["", "a b", "a/b", "a:b", "a\u{7}"] {
            assert!(!valid_username(bad), "{bad:?}");
        }
        for ok in [
            "a@example.com",
            "first.last+tag@mail.example.org",
            "x@localhost",
            "u@xn--bcher-kva.de",
        ] {
            assert!(valid_email(ok), "{ok}");
        }
        for bad in [
            "",
            "a",
            "@example.com",
            "a@",
            "a@b",
            "a b@example.com",
            "a@exa mple.com",
            "a@-x.com",
            "a@x..com",
            "a@b.123",
            "a@@b.com",
        ] {
            assert!(!valid_email(bad), "{bad:?}");
        }
    }
}
