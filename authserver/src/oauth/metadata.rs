//! `GET /.well-known/oauth-authorization-server` (RFC 8414).

use super::OAuthError;
use crate::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

/// Certificate authentication and certificate-bound tokens (RFC 8705 §2.3, §3.3) are announced
/// when the server can learn client certificates: from the proxy, proven by the proxy secret.
/// With `mtls_endpoint_base`, the endpoints a client authenticates at or presents a bound token
/// to are also announced there, in `mtls_endpoint_aliases` (RFC 8705 §5): a proxy listener
/// that requires a client certificate (`client_auth: required`) in front of this server.
///
/// `scopes_supported` lists the declared scopes and those of the registered resources (RFC
/// 8707); the resources themselves are not listed (each API's sidecar publishes its own
/// metadata, RFC 9728), only that `resource` is understood.
pub async fn metadata(State(state): State<AppState>) -> Result<Json<Value>, OAuthError> {
    let issuer = &state.settings.issuer;
    let mtls = state.settings.proxy_secret.is_some();
    let mut auth_methods = vec!["client_secret_basic", "client_secret_post", "none"];
    if mtls {
        auth_methods.extend(["tls_client_auth", "self_signed_tls_client_auth"]);
    }
    let mut introspection_methods = vec!["client_secret_basic", "client_secret_post", "bearer"];
    if mtls {
        introspection_methods.extend(["tls_client_auth", "self_signed_tls_client_auth"]);
    }
    let mut metadata = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/o/authorize/"),
        "token_endpoint": format!("{issuer}/o/token/"),
        "introspection_endpoint": format!("{issuer}/o/introspect/"),
        "revocation_endpoint": format!("{issuer}/o/revoke_token/"),
        "jwks_uri": format!("{issuer}{}", super::JWKS_PATH),
        "grant_types_supported": ["authorization_code", "password", "refresh_token", "client_credentials"],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "code_challenge_methods_supported": [crate::protocol::pkce::S256],
        "authorization_response_iss_parameter_supported": true,
        "scopes_supported": scopes_supported(&state).await?,
        "resource_indicators_supported": true,
        "token_endpoint_auth_methods_supported": auth_methods,
        "introspection_endpoint_auth_methods_supported": introspection_methods,
        "revocation_endpoint_auth_methods_supported": auth_methods,
        // RFC 9449 §5.1: the token endpoint takes DPoP proofs of these algorithms.
        "dpop_signing_alg_values_supported": resource_server::dpop::ALGORITHMS,
    });
    if mtls {
        metadata["tls_client_certificate_bound_access_tokens"] = true.into();
    }
    if state.settings.dynamic_registration != crate::config::DynamicRegistration::Off {
        metadata["registration_endpoint"] = format!("{issuer}{}", super::REGISTER_PATH).into();
    }
    if let Some(base) = &state.settings.mtls_endpoint_base {
        metadata["mtls_endpoint_aliases"] = json!({
            "token_endpoint": format!("{base}/o/token/"),
            "introspection_endpoint": format!("{base}/o/introspect/"),
            "revocation_endpoint": format!("{base}/o/revoke_token/"),
        });
    }
    Ok(Json(metadata))
}

/// The declared scopes, then each registered resource's not declared already.
async fn scopes_supported(state: &AppState) -> Result<Vec<String>, OAuthError> {
    let mut scopes: Vec<String> = state.settings.scopes.keys().cloned().collect();
    for scope in state.store.resource_scopes().await? {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    Ok(scopes)
}
