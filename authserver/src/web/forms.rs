//! Submitted forms as name/value pairs (repeated names kept, for checkboxes). A refused form is
//! shown again with [`crate::validation::Refusals`], the messages the command line prints too.

use axum::extract::{Form, FromRequest, Request};
use axum::response::{IntoResponse, Response};

/// An `application/x-www-form-urlencoded` body, in order. No `Debug`: it holds passwords and
/// CSRF tokens.
#[derive(Default)]
pub(crate) struct FormData(Vec<(String, String)>);

impl FormData {
    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        FormData(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// The first value of `name`, as sent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name`, trimmed; empty when absent.
    pub fn text(&self, name: &str) -> String {
        self.get(name).unwrap_or_default().trim().to_owned()
    }

    /// Every non-empty value sent under `name` (checkbox groups), owned.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.all_str(name).into_iter().map(str::to_owned).collect()
    }

    /// Every non-empty value sent under `name`, borrowed.
    pub fn all_str(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Whether a checkbox was ticked.
    pub fn checked(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| !v.is_empty() && v != "off" && v != "false")
    }
}

impl<S: Send + Sync> FromRequest<S> for FormData {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let Form(pairs) = Form::<Vec<(String, String)>>::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(FormData(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::{self, Refusals};

    #[test]
    fn values_and_checkboxes() {
        let form = FormData::from_pairs(&[
            ("name", "  x "),
            ("scope", "read"),
            ("scope", "write"),
            ("flag", "on"),
        ]);
        assert_eq!(form.text("name"), "x");
        assert_eq!(form.all("scope"), ["read", "write"]);
        assert!(form.checked("flag"));
        assert!(!form.checked("other"));
        let mut errors = Refusals::default();
        errors.check("name", validation::length("", "Name", true, 5));
        errors.check("long", validation::length("abcdef", "Long", false, 5));
        assert_eq!(errors.get("name"), Some("This field is required."));
        assert_eq!(
            errors.get("long"),
            Some("Long must be at most 5 characters.")
        );
    }
}
