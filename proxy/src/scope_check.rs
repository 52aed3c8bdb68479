//! Scope typos: the rules' scopes checked against the authorization server's metadata
//! (`scopes_supported`, RFC 8414), at `--check-config` and after a reload. A scope no one issues
//! is a warning, never an error; metadata that cannot be read is a note, and nothing is checked.

use std::time::Duration;

use resource_server::{GateSettings, Rules};

/// How long the metadata may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Where the authorization server's metadata is: under the JWT issuer when there is one
/// (RFC 8414 §3: `/.well-known/oauth-authorization-server` then the issuer's path), else at the
/// root of the introspection endpoint's server.
pub fn metadata_url(gate: &GateSettings) -> Option<String> {
    const WELL_KNOWN: &str = "/.well-known/oauth-authorization-server";
    let (base, path) = match (&gate.jwt, &gate.introspection) {
        (Some(jwt), _) => split_origin(&jwt.claims.issuer)?,
        (None, Some(introspection)) => (split_origin(&introspection.settings.url)?.0, ""),
        (None, None) => return None,
    };
    Some(format!("{base}{WELL_KNOWN}{}", path.trim_end_matches('/')))
}

/// `(scheme://authority, path)` of an http(s) URL.
fn split_origin(url: &str) -> Option<(&str, &str)> {
    let rest_at = url.find("://")? + 3;
    let path_at = url[rest_at..].find('/').map_or(url.len(), |i| rest_at + i);
    Some((&url[..path_at], &url[path_at..]))
}

/// What checking found: one warning per route and scope no one issues, or a note saying why
/// nothing was checked.
pub enum Checked {
    Warnings(Vec<String>),
    NotChecked(String),
}

/// Fetches the metadata at `url` and compares the rules' scopes with its `scopes_supported`.
pub async fn check(rules: &Rules, url: &str) -> Checked {
    let supported = match fetch_scopes(url).await {
        Ok(scopes) => scopes,
        Err(why) => return Checked::NotChecked(format!("scopes not checked: {url}: {why}")),
    };
    Checked::Warnings(
        rules
            .scopes_not_in(&supported)
            .into_iter()
            .map(|(route, scope)| {
                format!(
                    "route {route:?} needs scope {scope:?}, which the authorization server does not list in scopes_supported ({url}): a typo? no token will have it"
                )
            })
            .collect(),
    )
}

async fn fetch_scopes(url: &str) -> Result<Vec<String>, String> {
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let response = client.get(url).send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status().as_u16()));
    }
    let metadata: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
    let scopes = metadata["scopes_supported"]
        .as_array()
        .ok_or("no scopes_supported in the metadata")?;
    Ok(scopes
        .iter()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect())
}

/// After a reload: checks in the background and logs each warning (or the note, at debug).
pub fn spawn_after_reload(gate: &GateSettings) {
    let (Some(url), Ok(runtime)) = (metadata_url(gate), tokio::runtime::Handle::try_current())
    else {
        return;
    };
    let rules = gate.rules.clone();
    runtime.spawn(async move {
        match check(&rules, &url).await {
            Checked::Warnings(warnings) => {
                for warning in warnings {
                    tracing::warn!("{warning}");
                }
            }
            Checked::NotChecked(note) => tracing::debug!("{note}"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_paths() {
        assert_eq!(
            split_origin("http://127.0.0.1:8001/o/introspect/"),
            Some(("http://127.0.0.1:8001", "/o/introspect/"))
        );
        assert_eq!(
            split_origin("https://auth.example"),
            Some(("https://auth.example", ""))
        );
        assert_eq!(split_origin("auth.example"), None);
    }

    #[test]
    fn scopes_no_one_issues_are_named_with_their_route() {
        let rules = Rules::from_yaml(
            "routes:\n  - { name: r, path: /r, scopes: [raed] }\n  - { name: w, path: /w, scopes: { all_of: [read], any_of: [write, admni] } }\n  - { name: p, path: /p, public: true }\n",
            "t.yaml",
        )
        .unwrap();
        let issued = ["read".to_owned(), "write".to_owned()];
        assert_eq!(
            rules.scopes_not_in(&issued),
            [("r", "raed"), ("w", "admni")]
        );
    }
}
