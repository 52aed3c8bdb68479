//! `GET|POST /o/logout/`: OpenID Connect RP-Initiated Logout 1.0. A relying party sends the
//! browser here (with `id_token_hint`, `client_id`, `post_logout_redirect_uri`, `state`); the
//! session ends at once when the hint names the signed-in user, after a confirmation page
//! otherwise; the browser goes back only to a post-logout redirect URI registered for that
//! client, matched exactly, else stays on our "signed out" page.

use super::session::{SESSION_COOKIE, append_cookie, cookie, current_session, set_cookie};
use super::templates::{LogoutPage, Nav};
use super::{WebResult, allow_form_action, csrf, render};
use crate::AppState;
use crate::oauth::params::Params;
use crate::protocol::authorize::redirect_with;
use crate::protocol::oidc;
use axum::Router;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

pub(super) fn router() -> Router<AppState> {
    Router::new().route(
        crate::oauth::END_SESSION_PATH,
        get(end_session).post(end_session),
    )
}

/// Why the request was refused: shown, never redirected.
fn refused(message: &'static str) -> Response {
    tracing::info!(why = message, "logout request refused");
    render(
        StatusCode::BAD_REQUEST,
        &LogoutPage {
            nav: Nav::anonymous(),
            stage: "refused",
            message,
            fields: Vec::new(),
            csrf_token: String::new(),
            application: String::new(),
        },
    )
}

/// The checked request: the relying party (if named), where to go back to, and whether the
/// hint names a user (its `sub`).
struct Checked {
    application: Option<String>,
    back_to: Option<String>,
    hint_sub: Option<String>,
    fields: Vec<(String, String)>,
}

async fn check(
    state: &AppState,
    params: &Params,
) -> Result<Result<Checked, &'static str>, super::WebError> {
    let hint = match params.get("id_token_hint") {
        None => None,
        Some(hint) if hint.len() > oidc::MAX_PARAMETER => {
            return Ok(Err("The id_token_hint is too long."));
        }
        Some(hint) => match crate::oauth::read_id_token_hint(state, hint).await? {
            Some(claims) => Some(claims),
            None => {
                return Ok(Err(
                    "The id_token_hint is not an ID token this server issued.",
                ));
            }
        },
    };
    let client_id = match (params.get("client_id"), &hint) {
        (Some(id), Some(claims)) if id != claims.aud => {
            return Ok(Err(
                "The client_id is not the one the id_token_hint was issued to.",
            ));
        }
        (Some(id), _) => Some(id.to_owned()),
        (None, Some(claims)) => Some(claims.aud.clone()),
        (None, None) => None,
    };
    let app = match &client_id {
        Some(id) => match state.store.find_application_by_client_id(id).await? {
            Some(app) => Some(app),
            None => return Ok(Err("The application is unknown.")),
        },
        None => None,
    };
    let back_to = match (params.get("post_logout_redirect_uri"), &app) {
        (None, _) => None,
        (Some(_), None) => {
            return Ok(Err(
                "A post_logout_redirect_uri needs the client_id or an id_token_hint that names the application.",
            ));
        }
        (Some(uri), Some(app)) => {
            let registered = state.store.oidc_client(app.id).await?;
            if !oidc::is_post_logout_uri(&registered.post_logout_redirect_uris, uri) {
                return Ok(Err(
                    "The post_logout_redirect_uri is not one registered for this application.",
                ));
            }
            Some(uri.to_owned())
        }
    };
    let mut fields = Vec::new();
    for name in ["client_id", "post_logout_redirect_uri", "state"] {
        let value = match name {
            "client_id" => client_id.clone(),
            _ => params.get(name).map(str::to_owned),
        };
        if let Some(value) = value {
            fields.push((name.to_owned(), value));
        }
    }
    Ok(Ok(Checked {
        application: app.map(|a| a.name.clone()),
        back_to,
        hint_sub: hint.map(|c| c.sub),
        fields,
    }))
}

async fn end_session(
    State(state): State<AppState>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> WebResult {
    let raw: &[u8] = if method == Method::POST {
        &body
    } else {
        uri.query().unwrap_or_default().as_bytes()
    };
    let Ok(params) = Params::parse(raw) else {
        return Ok(refused("The request repeats a parameter."));
    };
    let checked = match check(&state, &params).await? {
        Ok(checked) => checked,
        Err(message) => return Ok(refused(message)),
    };
    let session = current_session(&state, &headers).await?;
    let Some(session) = session else {
        // Nobody is signed in here: nothing to end.
        return Ok(done(&checked, &params));
    };
    let form_token = csrf::session_token(&state, &session.csrf_token).await?;
    let confirmed = method == Method::POST && params.get("confirm") == Some("yes");
    if confirmed {
        let presented = params.get("csrf_token").unwrap_or_default();
        if !crate::secrets::constant_time_eq(presented, &form_token) {
            return Err(super::WebError::Csrf);
        }
    }
    let hint_is_user = checked.hint_sub.as_deref() == Some(session.user.id.to_string().as_str());
    if !confirmed && !hint_is_user {
        // No hint, or one naming someone else: ask.
        let mut page = render(
            StatusCode::OK,
            &LogoutPage {
                nav: Nav::signed_in(&session.user, &form_token),
                stage: "confirm",
                message: "",
                fields: checked.fields.clone(),
                csrf_token: form_token,
                application: checked.application.clone().unwrap_or_default(),
            },
        );
        if let Some(origin) = checked
            .back_to
            .as_deref()
            .and_then(super::authorize::origin)
        {
            allow_form_action(&mut page, &origin);
        }
        return Ok(page);
    }
    let mut families_revoked = 0;
    if let Some(session_id) = cookie(&headers, SESSION_COOKIE) {
        families_revoked = state.store.sign_out(session_id).await?;
    }
    tracing::info!(
        user_id = session.user.id,
        families_revoked,
        "user signed out by RP-initiated logout"
    );
    let mut response = done(&checked, &params);
    append_cookie(
        &mut response,
        &set_cookie(&state, SESSION_COOKIE, "", "/", Some(0)),
    );
    Ok(response)
}

/// Back to the relying party (with its `state`), or our "signed out" page.
fn done(checked: &Checked, params: &Params) -> Response {
    match &checked.back_to {
        Some(uri) => {
            let to = match params.get("state") {
                Some(state) => redirect_with(uri, &[("state", state)]),
                None => uri.clone(),
            };
            Redirect::to(&to).into_response()
        }
        None => render(
            StatusCode::OK,
            &LogoutPage {
                nav: Nav::anonymous(),
                stage: "done",
                message: "",
                fields: Vec::new(),
                csrf_token: String::new(),
                application: checked.application.clone().unwrap_or_default(),
            },
        ),
    }
}
