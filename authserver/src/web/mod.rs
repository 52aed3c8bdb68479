//! Browser views: operator sign-in, the applications pages under `/o/applications/`, the
//! administration under `/admin/`, and the one stylesheet they share.

mod admin;
mod applications;
mod auth;
mod authorize;
mod authorized;
mod csrf;
mod extractors;
mod flash;
mod forms;
mod logout;
mod passkeys;
mod resources;
mod second_factor;
mod session;
mod templates;

pub use csrf::CsrfKey;
pub use session::{SESSION_COOKIE, safe_next};

use crate::AppState;
use crate::store::StoreError;
use askama::Template;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::map_response;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use http_serving::with_error;

const STYLESHEET: &str = include_str!("../../static/style.css");
const SCRIPT: &str = include_str!("../../static/app.js");
const PASSKEYS_SCRIPT: &str = include_str!("../../static/passkeys.js");
const FAVICON: &str = include_str!("../../static/favicon.svg");

/// Every browser route, with the security headers all of them carry.
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(auth::router())
        .merge(applications::router())
        .merge(admin::router())
        .merge(resources::router())
        .merge(authorize::router())
        .merge(authorized::router())
        .merge(logout::router())
        .merge(second_factor::router())
        .merge(passkeys::router())
        .route(
            "/static/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLESHEET) }),
        )
        .route(
            "/static/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/static/passkeys.js",
            get(|| async { asset("text/javascript; charset=utf-8", PASSKEYS_SCRIPT) }),
        )
        // The pages name the icon; /favicon.ico is where browsers look without being told.
        .route(
            "/static/favicon.svg",
            get(|| async { asset("image/svg+xml", FAVICON) }),
        )
        .route(
            "/favicon.ico",
            get(|| async { asset("image/svg+xml", FAVICON) }),
        )
        .layer(map_response(security_headers))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

const CSP: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// Lets the forms of `response`'s page lead to `origin` as well as to this site: browsers
/// apply `form-action` to the redirects that follow a submission, and the consent form (or a
/// sign-in on the way to an authorization) ends in a redirect to the client.
pub(crate) fn allow_form_action(response: &mut Response, origin: &str) {
    let policy = CSP.replace(
        "form-action 'self'",
        &format!("form-action 'self' {origin}"),
    );
    if let Ok(value) = HeaderValue::from_str(&policy) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, value);
    }
}

/// Pages may show a client secret once and carry CSRF tokens: never cached, never framed, and
/// only this server's own stylesheet and script.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// A page of the sign-in (the password form, the code form): its CSRF token bound to the
/// pre-session cookie, set with it; on the way to an authorization, the application is named
/// (`page`'s second argument) and its origin may receive the redirect that follows the sign-in.
pub(crate) async fn sign_in_page<T: Template>(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    status: StatusCode,
    next: &str,
    page: impl FnOnce(String, Option<String>) -> T,
) -> Response {
    let (csrf_token, set) = match csrf::login_token(state, headers).await {
        Ok(token) => token,
        Err(error) => return error.into_response(),
    };
    let (application, form_action) = match authorize::form_action_for_next(state, next).await {
        Some((name, origin)) => (Some(name), origin),
        None => (None, None),
    };
    let mut response = render(status, &page(csrf_token, application));
    if let Some(origin) = form_action {
        allow_form_action(&mut response, &origin);
    }
    if let Some(set) = set {
        session::append_cookie(&mut response, &set);
    }
    response
}

/// Renders a template with a status; a template failure becomes a plain 500 carrying its cause
/// (logged by [`crate::request_log`]).
pub(crate) fn render<T: Template>(status: StatusCode, template: &T) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(error) => with_error(
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response(),
            format_args!("template rendering failed: {error}"),
        ),
    }
}

/// `303 See Other` to a local path: where every successful POST goes.
pub(crate) fn see_other(path: &str) -> Response {
    Redirect::to(path).into_response()
}

/// Why a view did not answer with its page; turned into an HTML error page in one place.
#[derive(Debug)]
pub(crate) enum WebError {
    /// The request holds what no page can take (a NUL character PostgreSQL cannot store).
    BadRequest,
    NotFound,
    /// 403 for a signed-in user: the page keeps their header.
    Forbidden(Box<templates::Nav>),
    Csrf,
    /// The database pool stayed full: 503 with `Retry-After`.
    Busy,
    Internal(String),
}

impl From<StoreError> for WebError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnstorableText => WebError::BadRequest,
            StoreError::Busy => WebError::Busy,
            other => WebError::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let mut cause = None;
        let mut nav = templates::Nav::anonymous();
        let (status, title, message) = match self {
            WebError::BadRequest => (
                StatusCode::BAD_REQUEST,
                "Bad request",
                "The request holds a character that is not allowed.",
            ),
            WebError::NotFound => (StatusCode::NOT_FOUND, "Not found", "There is nothing here."),
            WebError::Forbidden(signed_in) => {
                nav = *signed_in;
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    "Your account is not allowed to see or change this.",
                )
            }
            WebError::Csrf => (
                StatusCode::FORBIDDEN,
                "Forbidden",
                "CSRF verification failed: the form was stale or did not come from this site. Reload the page and try again.",
            ),
            WebError::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Busy",
                "The server is busy. Try again in a moment.",
            ),
            WebError::Internal(error) => {
                cause = Some(error);
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Server error",
                    "Something went wrong on our side. Try again later.",
                )
            }
        };
        let mut response = render(
            status,
            &templates::ErrorPage {
                nav,
                title,
                message,
            },
        );
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(StoreError::RETRY_AFTER),
            );
        }
        match cause {
            Some(error) => with_error(response, error),
            None => response,
        }
    }
}

pub(crate) type WebResult = Result<Response, WebError>;

/// A path segment that must be a record id; anything else is a missing record.
pub(crate) fn parse_id(raw: &str) -> Result<i64, WebError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or(WebError::NotFound)
}
