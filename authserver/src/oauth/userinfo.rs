//! `GET|POST /o/userinfo/` (OpenID Connect Core 1.0 §5.3): the signed-in user's claims, by the
//! scopes of the access token presented (RFC 6750: in the `Authorization` header, or in a
//! form body's `access_token` on POST), with RFC 6750 §3 errors.

use super::access_jwt::find_presented;
use super::params::Params;
use super::{OAuthError, no_store};
use crate::AppState;
use crate::protocol::oidc;
use crate::request_log::with_caller;
use crate::store::{Profile, TokenKind};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use resource_server::dpop;
use serde_json::{Map, Value, json};

/// Why no claims were given (RFC 6750 §3.1).
#[derive(Debug)]
enum Refusal {
    /// No token at all: a challenge without an error code.
    NoToken,
    InvalidRequest(&'static str),
    InvalidToken(&'static str),
    /// The token lacks `openid`.
    InsufficientScope,
    /// A DPoP-bound token without a valid proof of its key (RFC 9449 §7.1), or a `DPoP`
    /// request whose proof is invalid: a `DPoP` challenge.
    InvalidDpopProof(&'static str),
    /// A DPoP-bound token sent as a bearer token (§7.2).
    BoundTokenAsBearer,
    Server(OAuthError),
}

impl From<OAuthError> for Refusal {
    fn from(error: OAuthError) -> Self {
        match error {
            OAuthError::InvalidRequest(_) => Refusal::InvalidRequest(
                "The request is malformed (a repeated parameter, or a body that is not a form).",
            ),
            other => Refusal::Server(other),
        }
    }
}

impl From<crate::store::StoreError> for Refusal {
    fn from(error: crate::store::StoreError) -> Self {
        Refusal::Server(error.into())
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, error, description) = match self {
            Refusal::Server(error) => return error.into_response(),
            Refusal::InvalidDpopProof(description) => {
                return dpop_refusal(dpop::INVALID_DPOP_PROOF, description);
            }
            Refusal::BoundTokenAsBearer => {
                return dpop_refusal(
                    "invalid_token",
                    "The access token is bound to a DPoP key: send it with the DPoP scheme and a proof.",
                );
            }
            Refusal::NoToken => (StatusCode::UNAUTHORIZED, None, ""),
            Refusal::InvalidRequest(d) => (StatusCode::BAD_REQUEST, Some("invalid_request"), d),
            Refusal::InvalidToken(d) => (StatusCode::UNAUTHORIZED, Some("invalid_token"), d),
            Refusal::InsufficientScope => (
                StatusCode::FORBIDDEN,
                Some("insufficient_scope"),
                "The access token was not issued with the openid scope.",
            ),
        };
        let mut challenge = String::from("Bearer realm=\"userinfo\"");
        let mut response = match error {
            None => status.into_response(),
            Some(error) => {
                challenge.push_str(&format!(
                    ", error=\"{error}\", error_description=\"{description}\""
                ));
                if error == "insufficient_scope" {
                    challenge.push_str(", scope=\"openid\"");
                }
                let body = json!({ "error": error, "error_description": description });
                (status, Json(body)).into_response()
            }
        };
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        no_store(response)
    }
}

/// A 401 with a `DPoP` challenge (RFC 9449 §7.1) and the JSON error.
fn dpop_refusal(error: &str, description: &'static str) -> Response {
    let body = json!({ "error": error, "error_description": description });
    let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(&dpop::challenge(error, Some(description))) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    no_store(response)
}

/// A token and how it came: under the `DPoP` scheme (RFC 9449 §7.1) or as a bearer token.
struct Presented {
    token: String,
    dpop: bool,
}

/// The token of the request: the `Authorization: Bearer` (or `DPoP`) header, or (POST) the
/// form's `access_token`; both at once is `invalid_request` (RFC 6750 §2).
fn presented(method: &Method, headers: &HeaderMap, body: &[u8]) -> Result<Presented, Refusal> {
    let mut header_tokens = headers.get_all(header::AUTHORIZATION).iter();
    let from_header = match (header_tokens.next(), header_tokens.next()) {
        (None, _) => None,
        (Some(value), None) => {
            let value = value.to_str().unwrap_or_default();
            match value.split_once(' ') {
                Some((scheme, token))
                    if (scheme.eq_ignore_ascii_case("bearer")
                        || scheme.eq_ignore_ascii_case(dpop::SCHEME))
                        && !token.trim().is_empty() =>
                {
                    Some(Presented {
                        token: token.trim().to_owned(),
                        dpop: scheme.eq_ignore_ascii_case(dpop::SCHEME),
                    })
                }
                _ => {
                    return Err(Refusal::InvalidRequest(
                        "The Authorization header is not a bearer token.",
                    ));
                }
            }
        }
        (Some(_), Some(_)) => {
            return Err(Refusal::InvalidRequest(
                "More than one Authorization header.",
            ));
        }
    };
    let from_form = if method == Method::POST && !body.is_empty() {
        Params::from_form(headers, body)?
            .get("access_token")
            .map(|token| Presented {
                token: token.to_owned(),
                dpop: false,
            })
    } else {
        None
    };
    match (from_header, from_form) {
        (Some(_), Some(_)) => Err(Refusal::InvalidRequest(
            "The access token was sent in more than one way.",
        )),
        (Some(token), None) | (None, Some(token)) => Ok(token),
        (None, None) => Err(Refusal::NoToken),
    }
}

pub async fn userinfo(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match claims_of(&state, &method, &headers, &body).await {
        Ok((client_id, user_id, claims)) => no_store(with_caller(
            Json(claims).into_response(),
            &client_id,
            Some(&user_id.to_string()),
        )),
        Err(refusal) => refusal.into_response(),
    }
}

async fn claims_of(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(String, i64, Value), Refusal> {
    const INVALID: Refusal =
        Refusal::InvalidToken("The access token is invalid, expired or revoked.");
    let presented = presented(method, headers, body)?;
    let record = match find_presented(state, &presented.token).await? {
        Some(record) if record.kind == TokenKind::Access && record.is_active() => record,
        _ => return Err(INVALID),
    };
    check_dpop(
        state,
        method,
        headers,
        &presented,
        record.cnf_jkt.as_deref(),
    )
    .await?;
    // A certificate-bound token (RFC 8705 §3) only with its certificate, as at the gate.
    if let Some(x5t) = &record.cnf_x5t_s256 {
        let cert = crate::mtls::presented(headers, state.settings.proxy_secret.as_ref());
        if !cert.is_some_and(|cert| cert.thumbprint.matches(x5t)) {
            return Err(Refusal::InvalidToken(
                "The access token is bound to a client certificate that the request did not present.",
            ));
        }
    }
    // A client's own token (client credentials) has no user: no scope would make it one, so it
    // is invalid_token (401) here, not insufficient_scope (403), whatever its scope.
    let Some(user_id) = record.user_id else {
        return Err(Refusal::InvalidToken("The access token is not a user's."));
    };
    let scope = record.current_scope();
    if !oidc::is_openid(&scope) {
        return Err(Refusal::InsufficientScope);
    }
    let Some(profile) = state.store.profile(user_id).await? else {
        return Err(INVALID);
    };
    Ok((record.client_id, user_id, claims(&profile, &scope)))
}

/// RFC 9449 §7: a token sent under the `DPoP` scheme comes with a valid proof for this request
/// and token; a DPoP-bound one only that way, and with a proof of its key.
async fn check_dpop(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    presented: &Presented,
    bound: Option<&str>,
) -> Result<(), Refusal> {
    if !presented.dpop {
        return match bound {
            Some(_) => Err(Refusal::BoundTokenAsBearer),
            None => Ok(()),
        };
    }
    let mut values = headers.get_all(dpop::DPOP_HEADER).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Refusal::InvalidDpopProof("Send exactly one DPoP proof."));
    };
    let proof = value
        .to_str()
        .map_err(|_| Refusal::InvalidDpopProof("The DPoP proof is not a compact JWS."))?;
    let htu: Vec<String> = dpop::normalize_htu(&format!(
        "{}{}",
        state.settings.issuer,
        super::discovery::USERINFO_PATH
    ))
    .into_iter()
    .collect();
    let expected = dpop::Expected {
        htm: method.as_str(),
        htu: &htu,
        access_token: Some(&presented.token),
        nonces: None,
        now: crate::store::now(),
        window: dpop::DEFAULT_WINDOW,
    };
    let proven = dpop::verify(proof, &expected)
        .map_err(|error| Refusal::InvalidDpopProof(error.description()))?;
    if bound.is_some_and(|jkt| !dpop::thumbprint_matches(jkt, &proven.jkt)) {
        return Err(Refusal::InvalidDpopProof(
            "The DPoP proof is signed by another key than the token is bound to.",
        ));
    }
    if !state.dpop.replay.first_use(&proven.jkt, &proven.jti) {
        return Err(Refusal::InvalidDpopProof(
            "The DPoP proof was used already.",
        ));
    }
    Ok(())
}

/// `sub` and the claims the scope releases ([`oidc::released_claims`]); empty names are left
/// out, as Core 1.0 §5.3.2 asks.
pub fn claims(profile: &Profile, scope: &str) -> Value {
    let user = &profile.user;
    let mut out = Map::new();
    out.insert("sub".into(), user.id.to_string().into());
    let full_name = format!("{} {}", user.first_name, user.last_name);
    for claim in oidc::released_claims(scope) {
        let value: Value = match claim {
            "name" => full_name.trim().into(),
            "given_name" => user.first_name.as_str().into(),
            "family_name" => user.last_name.as_str().into(),
            "preferred_username" => user.username.as_str().into(),
            "updated_at" => profile.updated_at.into(),
            "email" => user.email.as_str().into(),
            "email_verified" => profile.email_verified.into(),
            _ => continue,
        };
        if value.as_str().is_some_and(str::is_empty) {
            continue;
        }
        out.insert(claim.into(), value);
    }
    Value::Object(out)
}
