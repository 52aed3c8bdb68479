//! `POST /o/token/`: extracts the request, lets [`crate::protocol`] type and check it and
//! [`super::grants`] carry it out, and answers (RFC 6749 §4.1.3, §4.3, §4.4, §5.1, §6).

use super::access_jwt::{Subject, jwt_for};
use super::grants::{Client, Granted, grant};
use super::id_token;
use super::params::{Params, authenticate_client};
use super::{OAuthError, no_store};
use crate::AppState;
use crate::client_ip::ClientAddress;
use crate::config::AccessTokenFormat;
use crate::protocol::{GrantKind, GrantRequest, Parameters};
use crate::request_log::with_caller;
use crate::store::now;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;

pub async fn token(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let params = Params::from_form(&headers, &body)?;
    let kind = GrantKind::parse(params.get("grant_type"))?;
    // The certificate the client came with (verified by the proxy): it may authenticate the
    // client, and the tokens are bound to it (RFC 8705 §3) whoever the client is.
    let cert = crate::mtls::presented(&headers, state.settings.proxy_secret.as_ref());
    let app = authenticate_client(&state.store, &headers, &params, cert.as_ref()).await?;
    kind.check_registered(&app)?;
    let request = GrantRequest::parse(kind, &params)?;
    // The key the client proved (RFC 9449): the tokens are bound to it.
    let dpop_jkt = super::dpop::proven_key(&state, &headers).await?;
    if app.dpop_required && dpop_jkt.is_none() {
        return Err(OAuthError::InvalidDpopProof(
            "This client must send a DPoP proof with every token request.",
        ));
    }
    let resources = params.get_all("resource");
    let issued_at = now();
    let client = Client {
        app: &app,
        cert_x5t_s256: cert.as_ref().map(|c| c.thumbprint.x5t_s256()),
        dpop_jkt,
    };
    let Granted {
        mut issued,
        user,
        openid,
        token_format,
        signed_in,
    } = grant(&state, &client, request, &resources, address).await?;
    let format =
        token_format.unwrap_or_else(|| app.access_token_format(state.settings.access_token_format));
    if format == AccessTokenFormat::Jwt {
        let subject = match &user {
            Some((id, username)) => Subject::User { id: *id, username },
            None => Subject::Client,
        };
        issued.access_token = jwt_for(
            &state,
            &app.client_id,
            subject,
            &issued,
            issued_at,
            crate::jwt::access_token::Confirmation::of(
                client.cert_x5t_s256.as_deref(),
                client.dpop_jkt.as_deref(),
            ),
            signed_in.as_ref(),
        )
        .await?;
    }
    crate::metrics::METRICS.token_issued(kind);
    let id_token = match &openid {
        Some(openid) => Some(id_token::issue(&state, &app, openid, &issued.access_token).await?),
        None => None,
    };
    let body = TokenResponse {
        access_token: &issued.access_token,
        expires_in: issued.expires_in,
        id_token: id_token.as_deref(),
        refresh_token: issued.refresh_token.as_deref(),
        scope: &issued.scope,
        // RFC 9449 §5: a DPoP-bound token is of type DPoP.
        token_type: if client.dpop_jkt.is_some() {
            "DPoP"
        } else {
            "Bearer"
        },
    };
    // The user by id: this server's logs never name a username (one typed into the wrong
    // field may be a password).
    let user_id = user.as_ref().map(|(id, _)| id.to_string());
    let mut response = with_caller(super::json(&body), &app.client_id, user_id.as_deref());
    if let Some(nonce) = super::dpop::next_nonce(&state)
        && let Ok(value) = axum::http::HeaderValue::from_str(&nonce)
    {
        response
            .headers_mut()
            .insert(resource_server::dpop::NONCE_HEADER, value);
    }
    Ok(no_store(response))
}

/// A successful token response (RFC 6749 §5.1), its members in alphabetical order.
#[derive(Serialize)]
struct TokenResponse<'a> {
    access_token: &'a str,
    expires_in: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    id_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refresh_token: Option<&'a str>,
    scope: &'a str,
    token_type: &'static str,
}
