//! `GET|POST /o/authorize/`: the authorization endpoint (RFC 6749 §4.1 with RFC 7636 PKCE and
//! RFC 9207 `iss`, and OpenID Connect Core 1.0 §3.1.2: `prompt`, `max_age`, hints, `nonce`).
//! The checks are [`crate::protocol::authorize`]'s and [`crate::protocol::oidc`]'s; this module
//! reads the request, asks who is signed in, shows the consent page, remembers consents and
//! issues codes.

use super::forms::FormData;
use super::session::{current_session, login_url};
use super::templates::{AuthorizeErrorPage, ConsentPage, ConsentScope, Nav};
use super::{WebError, WebResult, allow_form_action, csrf, render};
use crate::AppState;
use crate::oauth::params::Params;
use crate::protocol::Parameters;
use crate::protocol::acr;
use crate::protocol::authorize::{
    self, Authorization, AuthorizeError, Return, Unredirectable, check_client, code_redirect,
    error_redirect,
};
use crate::protocol::oidc::{self, SignIn};
use crate::protocol::scope;
use crate::store::{Application, NewCode, Session, User, now};
use axum::Router;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use std::sync::Arc;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/o/authorize/", get(authorize_page).post(authorize_post))
}

impl Parameters for FormData {
    fn get(&self, name: &str) -> Option<&str> {
        FormData::get(self, name).filter(|v| !v.is_empty())
    }

    fn get_all(&self, name: &str) -> Vec<&str> {
        FormData::all_str(self, name)
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
        Some(client_id) => state
            .store
            .find_application_by_client_id(client_id)
            .await?
            .map(Arc::unwrap_or_clone),
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

/// Who grants a code: the user, when they signed in, and the session they did it in.
struct Grantor<'a> {
    user: &'a User,
    auth_time: i64,
    session_key: &'a str,
    /// How they signed in (RFC 8176 values, space-separated).
    amr: &'a str,
}

impl<'a> Grantor<'a> {
    fn of(session: &'a Session) -> Grantor<'a> {
        Grantor {
            user: &session.user,
            auth_time: session.signed_in_at,
            session_key: &session.key,
            amr: &session.amr,
        }
    }
}

/// What `session` lacks for `authorization` of `app`: nothing; a sign-in again with its second
/// factor (the request's `acr_values` or the application ask for one, and the user has one the
/// session did not use); or, for an application that requires one, a factor the user has yet to
/// set up.
#[derive(Debug, PartialEq, Eq)]
enum SecondFactor {
    Enough,
    StepUp,
    Missing,
}

async fn second_factor(
    state: &AppState,
    app: &Application,
    authorization: &Authorization,
    session: &Session,
) -> Result<SecondFactor, WebError> {
    if acr::is_multi_factor(&session.amr) {
        return Ok(SecondFactor::Enough);
    }
    let required = state.store.oidc_client(app.id).await?.require_mfa;
    let wanted = required || acr::asks_for_mfa(authorization.oidc.acr_values.as_deref());
    if !wanted {
        return Ok(SecondFactor::Enough);
    }
    let has_factor = state.store.has_second_factor(session.user.id).await?;
    Ok(if acr::needs_step_up(wanted, &session.amr, has_factor) {
        SecondFactor::StepUp
    } else if required {
        SecondFactor::Missing
    } else {
        SecondFactor::Enough
    })
}

/// `access_denied` for a user without the second factor an application requires.
fn factor_missing() -> AuthorizeError {
    AuthorizeError {
        error: "access_denied",
        description: "This application requires a sign-in with a second factor: set one up at /accounts/two-factor/ and try again.".into(),
    }
}

/// A new code for `authorization`, granted by `by`, and the redirect that carries it.
async fn grant_code(
    state: &AppState,
    app: &Application,
    by: Grantor<'_>,
    authorization: &Authorization,
) -> WebResult {
    let user = by.user;
    let code = state
        .store
        .issue_code(&NewCode {
            application_id: app.id,
            user_id: user.id,
            redirect_uri: authorization.redirect_uri.clone(),
            scope: authorization.scope.clone(),
            code_challenge: authorization.code_challenge.clone(),
            lifetime: state.settings.authorization_code_lifetime,
            nonce: authorization.nonce.clone(),
            auth_time: Some(by.auth_time),
            amr: Some(by.amr.to_owned()),
            resource: (!authorization.resources.is_empty())
                .then(|| authorization.resources.join(" ")),
            session_key: Some(by.session_key.to_owned()),
            dpop_jkt: authorization.dpop_jkt.clone(),
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
    let known = crate::oauth::known_resources(state, &params.get_all("resource")).await?;
    match authorize::validate(declared, &known, &app, &back, params) {
        Ok(authorization) => Ok(Checked::Valid(Box::new((app, authorization)))),
        Err(error) => {
            tracing::info!(client_id = %app.client_id, error = error.error, "authorization request refused");
            Ok(Checked::Answer(redirect_error(state, &back, &error)))
        }
    }
}

/// `GET /o/authorize/`: [`authorization_request`] from the query.
async fn authorize_page(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> WebResult {
    let params = match Params::parse(uri.query().unwrap_or_default().as_bytes()) {
        Ok(params) => params,
        Err(_) => return Ok(error_page(Unredirectable::RepeatedParameter)),
    };
    authorization_request(&state, &params, &headers).await
}

/// `POST /o/authorize/`: the consent form's answer (it carries `decision`), or else an
/// authorization request sent by POST (OpenID Connect Core 1.0 §3.1.2.1: GET and POST), handled
/// as its GET. The session cookie is `SameSite=Lax`: a relying party's cross-site POST arrives
/// without it, so the user signs in (again) and the request goes on as a GET.
async fn authorize_post(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> WebResult {
    let params = match Params::parse(&body) {
        Ok(params) => params,
        Err(_) => return Ok(error_page(Unredirectable::RepeatedParameter)),
    };
    if params.get("decision").is_none() {
        return authorization_request(&state, &params, &headers).await;
    }
    match current_session(&state, &headers).await? {
        Some(session) => decide(&state, session, &params).await,
        None => Ok(Redirect::to(&login_url(None)).into_response()),
    }
}

/// Checks the request, then (signed in) skips straight to the code when a remembered consent
/// covers the scope, or shows the consent page.
async fn authorization_request(
    state: &AppState,
    params: &Params,
    headers: &HeaderMap,
) -> WebResult {
    let state = state.clone();
    let (app, authorization) = match check(&state, params).await? {
        Checked::Answer(response) => return Ok(response),
        Checked::Valid(valid) => *valid,
    };
    let back = Return {
        redirect_uri: authorization.redirect_uri.clone(),
        state: authorization.state.clone(),
    };
    let refuse = |error: &'static str, description: &str| {
        tracing::info!(client_id = %app.client_id, error, "authorization request refused");
        Ok(redirect_error(
            &state,
            &back,
            &AuthorizeError {
                error,
                description: description.to_owned(),
            },
        ))
    };
    let session = current_session(&state, headers).await?;
    // An id_token_hint must be an ID token of ours, for this client; it then names a user.
    let hint_is_user = match &authorization.oidc.id_token_hint {
        None => None,
        Some(hint) => match crate::oauth::read_id_token_hint(&state, hint).await? {
            Some(claims) if claims.aud == app.client_id => {
                Some(session.as_ref().map(|s| s.user.id.to_string()) == Some(claims.sub))
            }
            _ => {
                return refuse(
                    "invalid_request",
                    "id_token_hint is not an ID token this server issued to this client.",
                );
            }
        },
    };
    let auth_time = session.as_ref().map(|s| s.signed_in_at);
    let mut sign_in = oidc::sign_in(&authorization.oidc, auth_time, hint_is_user, now());
    if sign_in == SignIn::Current
        && let Some(session) = &session
    {
        match second_factor(&state, &app, &authorization, session).await? {
            SecondFactor::Enough => {}
            // A stronger sign-in than the session's: the sign-in again, with the second factor.
            SecondFactor::StepUp if authorization.oidc.prompt.none => {
                sign_in = SignIn::LoginRequired;
            }
            SecondFactor::StepUp => sign_in = SignIn::Required,
            SecondFactor::Missing => {
                tracing::info!(user_id = session.user.id, client_id = %app.client_id, "authorization refused: the application requires a second factor");
                return Ok(redirect_error(&state, &back, &factor_missing()));
            }
        }
    }
    match sign_in {
        SignIn::Current => {}
        SignIn::LoginRequired => return refuse("login_required", "The user must sign in."),
        SignIn::Required => {
            let back_here = format!("/o/authorize/?{}", oidc::after_sign_in(params.pairs()));
            let forced = session.is_some();
            let hint = authorization.oidc.login_hint.as_deref();
            return Ok(Redirect::to(&sign_in_url(&back_here, forced, hint)).into_response());
        }
    }
    let Some(session) = session else {
        return Ok(Redirect::to(&login_url(None)).into_response());
    };
    let consented = state.store.consent(session.user.id, app.id).await?;
    if consented.is_some_and(|c| scope::covers(&c, &authorization.scope))
        && authorize::remembered_consent_applies(&app, &authorization.redirect_uri)
        && !authorization.oidc.prompt.consent
    {
        return grant_code(&state, &app, Grantor::of(&session), &authorization).await;
    }
    if authorization.oidc.prompt.none {
        return refuse(
            "consent_required",
            "The user has not consented to this request.",
        );
    }
    let resources: Vec<&str> = authorization.resources.iter().map(String::as_str).collect();
    let apis = crate::oauth::known_resources(&state, &resources).await?;
    let scopes = authorization
        .scope
        .split_whitespace()
        .map(|name| ConsentScope {
            name: name.to_owned(),
            description: state
                .settings
                .scopes
                .get(name)
                .cloned()
                .or_else(|| oidc::scope_description(name).map(str::to_owned))
                .or_else(|| {
                    let of: Vec<&str> = apis
                        .iter()
                        .filter(|r| r.scopes.iter().any(|s| s == name))
                        .map(|r| r.name.as_str())
                        .collect();
                    (!of.is_empty()).then(|| format!("At {}", of.join(", ")))
                })
                .unwrap_or_default(),
            claims: oidc::released_claims(name).join(", "),
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

/// The consent form's answer (CSRF-checked), checked again in full.
async fn decide(state: &AppState, signed_in: Session, form: &Params) -> WebResult {
    let form_token = csrf::session_token(state, &signed_in.csrf_token).await?;
    csrf::verify_token(&form_token, form)?;
    let (app, authorization) = match check(state, form).await? {
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
            state,
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
    let refusal = match second_factor(state, &app, &authorization, &signed_in).await? {
        SecondFactor::Enough => None,
        // The consent page is shown only after the step-up: a form posted without it.
        SecondFactor::StepUp => Some(AuthorizeError {
            error: "access_denied",
            description: "A sign-in with a second factor is required.".into(),
        }),
        SecondFactor::Missing => Some(factor_missing()),
    };
    if let Some(refusal) = refusal {
        let back = Return {
            redirect_uri: authorization.redirect_uri,
            state: authorization.state,
        };
        return Ok(redirect_error(state, &back, &refusal));
    }
    grant_code(state, &app, Grantor::of(&signed_in), &authorization).await
}

/// The sign-in page, coming back to `next`; `forced` shows the form to a signed-in user too
/// (`prompt=login`, `max_age`), `login_hint` prefills the username.
fn sign_in_url(next: &str, forced: bool, login_hint: Option<&str>) -> String {
    let mut url = login_url(Some(next));
    let separator = |url: &String| if url.contains('?') { '&' } else { '?' };
    if forced {
        url.push(separator(&url));
        url.push_str("prompt=login");
    }
    if let Some(hint) = login_hint {
        url.push(separator(&url));
        url.push_str("login_hint=");
        url.extend(form_urlencoded::byte_serialize(hint.as_bytes()));
    }
    url
}

/// `scheme://host[:port]` of a redirect URI, if it is plain enough to go into a CSP header.
pub(super) fn origin(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once("://")?;
    let authority = rest.split(['/', '?']).next()?;
    let plain = !authority.is_empty()
        && authority
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    (matches!(scheme, "http" | "https") && plain).then(|| format!("{scheme}://{authority}"))
}

/// For a sign-in page whose `next` is an authorization request of a known client with a
/// registered redirect URI: the application's name, to show, and that URI's origin, for the
/// page's `form-action` (the sign-in may end, through `/o/authorize/`, in a redirect to the
/// client).
pub(super) async fn form_action_for_next(
    state: &AppState,
    next: &str,
) -> Option<(String, Option<String>)> {
    let query = next.strip_prefix("/o/authorize/?")?;
    let params = Params::parse(query.as_bytes()).ok()?;
    let (app, back) = client_of(state, &params).await.ok()?.ok()?;
    Some((app.name, origin(&back.redirect_uri)))
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
