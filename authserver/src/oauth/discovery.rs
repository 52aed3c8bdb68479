//! `GET /.well-known/openid-configuration` (OpenID Connect Discovery 1.0 §3): the RFC 8414
//! metadata of [`super::metadata`] (whatever it grows to) plus what OpenID Connect adds.

use crate::AppState;
use crate::jwt::Alg;
use crate::protocol::oidc;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

/// Where the UserInfo endpoint is served (under the issuer).
pub const USERINFO_PATH: &str = "/o/userinfo/";
/// Where RP-initiated logout is served (under the issuer).
pub const END_SESSION_PATH: &str = "/o/logout/";

/// The claims an ID token or the UserInfo endpoint may carry.
const CLAIMS: [&str; 11] = [
    "sub",
    "iss",
    "aud",
    "exp",
    "iat",
    "auth_time",
    "acr",
    "amr",
    "nonce",
    "at_hash",
    "azp",
];

pub async fn openid_configuration(
    State(state): State<AppState>,
) -> Result<Json<Value>, super::OAuthError> {
    let Json(mut document) = super::metadata::metadata(State(state.clone())).await?;
    let issuer = &state.settings.issuer;
    let mut scopes: Vec<String> = serde_json::from_value(document["scopes_supported"].take())
        .map_err(|e| super::OAuthError::Server(e.into()))?;
    for (name, _) in oidc::SCOPES {
        if !scopes.iter().any(|s| s == name) {
            scopes.push(name.to_owned());
        }
    }
    let claims: Vec<&str> = CLAIMS
        .into_iter()
        .chain(oidc::CLAIMS.iter().flat_map(|(_, c)| c.iter().copied()))
        .collect();
    let added = json!({
        "userinfo_endpoint": format!("{issuer}{USERINFO_PATH}"),
        "end_session_endpoint": format!("{issuer}{END_SESSION_PATH}"),
        "scopes_supported": scopes,
        // Implicit and hybrid flows are left out (OAuth 2.1, RFC 9700 §2.1.2).
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": Alg::ALL.map(Alg::as_str),
        "claims_supported": claims,
        "acr_values_supported": crate::protocol::acr::SUPPORTED,
        "claim_types_supported": ["normal"],
        "claims_parameter_supported": false,
        "request_parameter_supported": false,
        "request_uri_parameter_supported": false,
        "require_request_uri_registration": false,
        "prompt_values_supported": ["none", "login", "consent", "select_account"],
        "frontchannel_logout_supported": false,
        "backchannel_logout_supported": false,
    });
    if let (Some(document), Value::Object(added)) = (document.as_object_mut(), added) {
        document.extend(added);
    }
    // A certificate-bound token is presented at the UserInfo endpoint too (RFC 8705 §5).
    if let (Some(base), Some(aliases)) = (
        &state.settings.mtls_endpoint_base,
        document
            .get_mut("mtls_endpoint_aliases")
            .and_then(Value::as_object_mut),
    ) {
        aliases.insert(
            "userinfo_endpoint".into(),
            format!("{base}{USERINFO_PATH}").into(),
        );
    }
    Ok(Json(document))
}
