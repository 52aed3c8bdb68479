//! `GET|POST /o/authorize/`: the authorization endpoint (RFC 6749 §4.1 with RFC 7636 PKCE and
//! RFC 9207 `iss`). The checks are [`crate::protocol::authorize`]'s; this module reads the
//! request, asks who is signed in, shows the consent page, remembers consents and issues codes.

use super::forms::FormData;
use super::session::{SignedIn, current_session, login_url};
use super::templates::{AuthorizeErrorPage, ConsentPage, ConsentScope, Nav};
use super::{WebError, WebResult, allow_form_action, csrf, render};
use crate::AppState;
use crate::oauth::params::Params;
use crate::protocol::Parameters;
use crate::protocol::authorize::{
    self, Authorization, AuthorizeError, Return, Unredirectable, check_client, code_redirect,
    error_redirect,
};
use crate::protocol::scope;
use crate::store::{Application, NewCode, User};
use axum::Router;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/o/authorize/", get(authorize_page).post(decide))
}

impl Parameters for FormData {
    fn get(&self, name: &str) -> Option<&str> {
        FormData::get(self, name).filter(|v| !v.is_empty())
    }
}

/// An error shown to the user, never redirected (§4.1.2.1).
fn error_page(why: Unredirectable) -> Response {
    tracing::info!(?why, "authorization request refused without a redirect");
    render(
        StatusCode::BAD_REQUEST,
        &AuthorizeErrorPage {
            nav: Nav::anonymous(),
            message: why.message(),
        },
    )
}

/// The application a request names, and the redirect URI errors may now go to.
async fn client_of(
    state: &AppState,
    params: &impl Parameters,
) -> Result<Result<(Application, Return), Unredirectable>, WebError> {
    let app = match params.get("client_id") {
        Some(client_id) => state.store.find_application_by_client_id(client_id).await?,
        None => None,
    };
    let back = match check_client(app.as_ref(), params) {
        Ok(back) => back,
        Err(why) => return Ok(Err(why)),
    };
    Ok(app
        .map(|app| (app, back))
        .ok_or(Unredirectable::UnknownClient))
}

fn redirect_error(state: &AppState, back: &Return, error: &AuthorizeError) -> Response {
    Redirect::to(&error_redirect(back, error, &state.settings.issuer)).into_response()
}

/// A new code for `authorization`, granted by `user`, and the redirect that carries it.
async fn grant_code(
    state: &AppState,
    app: &Application,
    user: &User,
    authorization: &Authorization,
) -> WebResult {
    let code = state
        .store
        .issue_code(&NewCode {
            application_id: app.id,
            user_id: user.id,
            redirect_uri: authorization.redirect_uri.clone(),
            scope: authorization.scope.clone(),
            code_challenge: authorization.code_challenge.clone(),
            lifetime: state.settings.authorization_code_lifetime,
        })
        .await?;
    tracing::info!(user_id = user.id, client_id = %app.client_id, "authorization code issued");
    Ok(Redirect::to(&code_redirect(authorization, &code, &state.settings.issuer)).into_response())
}

/// The request checked in full: the error page, the error redirect, or the authorization.
enum Checked {
    Answer(Response),
    Valid(Box<(Application, Authorization)>),
}

async fn check(state: &AppState, params: &impl Parameters) -> Result<Checked, WebError> {
    let (app, back) = match client_of(state, params).await? {
        Ok(found) => found,
        Err(why) => return Ok(Checked::Answer(error_page(why))),
    };
    let declared = crate::oauth::declared_scopes(state);
    match authorize::validate(declared, &app, &back, params) {
        Ok(authorization) => Ok(Checked::Valid(Box::new((app, authorization)))),
        Err(error) => {
            tracing::info!(client_id = %app.client_id, error = error.error, "authorization request refused");
            Ok(Checked::Answer(redirect_error(state, &back, &error)))
        }
    }
}

/// `GET /o/authorize/`: checks the request, then (signed in) skips straight to the code when a
/// remembered consent covers the scope, or shows the consent page.
async fn authorize_page(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> WebResult {
    let params = match Params::parse(uri.query().unwrap_or_default().as_bytes()) {
        Ok(params) => params,
        Err(_) => return Ok(error_page(Unredirectable::RepeatedParameter)),
    };
    let (app, authorization) = match check(&state, &params).await? {
        Checked::Answer(response) => return Ok(response),
        Checked::Valid(valid) => *valid,
    };
    let Some(session) = current_session(&state, &headers).await? else {
        let here = uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/o/authorize/");
        return Ok(Redirect::to(&login_url(Some(here))).into_response());
    };
    let consented = state.store.consent(session.user.id, app.id).await?;
    if consented.is_some_and(|c| scope::covers(&c, &authorization.scope))
        && authorize::remembered_consent_applies(&app, &authorization.redirect_uri)
    {
        return grant_code(&state, &app, &session.user, &authorization).await;
    }
    let scopes = authorization
        .scope
        .split_whitespace()
        .map(|name| ConsentScope {
            name: name.to_owned(),
            description: state.settings.scopes.get(name).cloned().unwrap_or_default(),
        })
        .collect();
    let form_token = csrf::session_token(&state, &session.csrf_token).await?;
    let page = ConsentPage {
        nav: Nav::signed_in(&session.user, &form_token),
        application: app.name.clone(),
        scopes,
        fields: authorization
            .parameters()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
        csrf_token: form_token,
    };
    let mut response = render(StatusCode::OK, &page);
    if let Some(origin) = origin(&authorization.redirect_uri) {
        allow_form_action(&mut response, &origin);
    }
    Ok(response)
}

/// `POST /o/authorize/`: the consent form's answer (CSRF-checked), checked again in full.
async fn decide(State(state): State<AppState>, signed_in: SignedIn, form: FormData) -> WebResult {
    csrf::verify_token(&signed_in.form_token, &form)?;
    let (app, authorization) = match check(&state, &form).await? {
        Checked::Answer(response) => return Ok(response),
        Checked::Valid(valid) => *valid,
    };
    if form.get("decision") != Some("allow") {
        tracing::info!(user_id = signed_in.user.id, client_id = %app.client_id, "authorization denied");
        let back = Return {
            redirect_uri: authorization.redirect_uri,
            state: authorization.state,
        };
        return Ok(redirect_error(
            &state,
            &back,
            &AuthorizeError::access_denied(),
        ));
    }
    let remembered = state
        .store
        .consent(signed_in.user.id, app.id)
        .await?
        .map(|c| scope::union(&c, &authorization.scope))
        .unwrap_or_else(|| authorization.scope.clone());
    state
        .store
        .remember_consent(signed_in.user.id, app.id, &remembered)
        .await?;
    grant_code(&state, &app, &signed_in.user, &authorization).await
}

/// `scheme://host[:port]` of a redirect URI, if it is plain enough to go into a CSP header.
fn origin(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once("://")?;
    let authority = rest.split(['/', '?']).next()?;
    let plain = !authority.is_empty()
        && authority
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    (matches!(scheme, "http" | "https") && plain).then(|| format!("{scheme}://{authority}"))
}

/// For a sign-in page whose `next` is an authorization request of a known client with a
/// registered redirect URI: that URI's origin, for the page's `form-action` (the sign-in may
/// end, through `/o/authorize/`, in a redirect to the client).
pub(super) async fn form_action_for_next(state: &AppState, next: &str) -> Option<String> {
    let query = next.strip_prefix("/o/authorize/?")?;
    let params = Params::parse(query.as_bytes()).ok()?;
    let found = client_of(state, &params).await.ok()?.ok()?;
    origin(&found.1.redirect_uri)
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn origins_of_redirect_uris() {
        assert_eq!(
            origin("https://a.example:8443/cb?x=1").as_deref(),
            Some("https://a.example:8443")
        );
        assert_eq!(
            origin("http://[::1]:9/cb").as_deref(),
            Some("http://[::1]:9")
        );
        assert_eq!(origin("https://a;b/cb"), None);
        assert_eq!(origin("javascript:x"), None);
    }
}
