//! `GET /.well-known/oauth-authorization-server` (RFC 8414).

use crate::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

pub async fn metadata(State(state): State<AppState>) -> Json<Value> {
    let issuer = &state.settings.issuer;
    let auth_methods = ["client_secret_basic", "client_secret_post", "none"];
    Json(json!({
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
        "scopes_supported": state.settings.scopes.keys().collect::<Vec<_>>(),
        "token_endpoint_auth_methods_supported": auth_methods,
        "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "bearer"],
        "revocation_endpoint_auth_methods_supported": auth_methods,
    }))
}
