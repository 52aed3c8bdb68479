//! CORS for the endpoints a browser application calls from its own origin: the token and
//! revocation endpoints for the configured `cors_origins`, the metadata (RFC 8414 and OpenID
//! Connect discovery) and the JWKS for
//! `cors_metadata_origins` (default `*`). Introspection is for resource servers, never browsers:
//! no CORS there. The policy itself is `resource_server::cors`, as the proxy's routes use it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use resource_server::cors::{CorsPolicy, DEFAULT_MAX_AGE, Origins, Preflight, preflight_method};

use crate::AppState;
use crate::config::Settings;
use axum::Router;

/// Where the RFC 8414 metadata is served.
pub const METADATA_PATH: &str = "/.well-known/oauth-authorization-server";
/// Where the OpenID Connect discovery document is served.
pub const OIDC_DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// The policy of the token and revocation endpoints: the configured `cors_origins` (none: no
/// CORS there).
pub fn token_policy(settings: &Settings) -> Option<CorsPolicy> {
    (!settings.cors_origins.is_empty()).then(|| {
        CorsPolicy::new(
            Origins::List(settings.cors_origins.clone()),
            vec![Method::POST],
            // RFC 9449: a browser client sends its proof in `DPoP` (and reads `DPoP-Nonce`,
            // which every policy exposes).
            &["authorization", "content-type", "dpop"],
            false,
            DEFAULT_MAX_AGE,
        )
    })
}

/// The policy of the public documents (metadata, discovery, JWKS): `cors_metadata_origins`.
pub fn documents_policy(settings: &Settings) -> Option<CorsPolicy> {
    settings.cors_metadata_origins.clone().map(|origins| {
        CorsPolicy::new(
            origins,
            vec![Method::GET, Method::HEAD],
            &[],
            false,
            DEFAULT_MAX_AGE,
        )
    })
}

/// `routes` behind the middleware with `policy` (their routes only, not the fallback), or as
/// they are without one.
pub fn with_policy(routes: Router<AppState>, policy: Option<CorsPolicy>) -> Router<AppState> {
    match policy {
        Some(policy) => {
            routes.route_layer(axum::middleware::from_fn_with_state(Arc::new(policy), cors))
        }
        None => routes,
    }
}

/// The middleware: answers a preflight for an endpoint with a policy (`204` with its headers,
/// or `403` with none), and adds the headers to its other answers for an allowed origin.
async fn cors(State(policy): State<Arc<CorsPolicy>>, request: Request, next: Next) -> Response {
    if let Some(asked) = preflight_method(request.method(), request.headers()) {
        let mut response = match policy.preflight(&asked, request.headers()) {
            Preflight::Allowed(headers) => {
                let mut response = StatusCode::NO_CONTENT.into_response();
                response.headers_mut().extend(headers);
                response
            }
            Preflight::Refused => (
                StatusCode::FORBIDDEN,
                [(header::CONTENT_TYPE, "application/json")],
                Body::from(r#"{"error":"access_denied","error_description":"CORS preflight refused: origin, method or headers not allowed."}"#),
            )
                .into_response(),
        };
        if policy.varies() {
            response.headers_mut().insert(
                header::VARY,
                HeaderValue::from_static(
                    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
                ),
            );
        }
        return response;
    }
    let extra = policy.response_headers(request.headers());
    let varies = policy.varies();
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.extend(extra);
    if varies {
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}
