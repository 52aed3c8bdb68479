//! The resource routes, with Django REST framework's answers to unsupported methods (`405`,
//! `Allow`) and to `OPTIONS`, and `404 {"detail": "Not found."}` for any other path.

use axum::Json;
use axum::Router;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde_json::json;

use crate::error::ApiError;
use crate::{AppState, groups, users};

const LIST_ALLOW: &str = "GET, POST, HEAD, OPTIONS";
const DETAIL_ALLOW: &str = "GET, PUT, PATCH, DELETE, HEAD, OPTIONS";

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/users/",
            finish(
                get(users::list).post(users::create),
                "User List",
                LIST_ALLOW,
            ),
        )
        .route(
            "/users/{id}/",
            finish(
                get(users::retrieve)
                    .put(users::update)
                    .patch(users::update)
                    .delete(users::destroy),
                "User Instance",
                DETAIL_ALLOW,
            ),
        )
        .route(
            "/groups/",
            finish(
                get(groups::list).post(groups::create),
                "Group List",
                LIST_ALLOW,
            ),
        )
        .route(
            "/groups/{id}/",
            finish(
                get(groups::retrieve)
                    .put(groups::update)
                    .patch(groups::update)
                    .delete(groups::destroy),
                "Group Instance",
                DETAIL_ALLOW,
            ),
        )
        .fallback(|| async { ApiError::NotFound })
}

/// Adds `OPTIONS` (a short description, as DRF's metadata) and the `405` for other methods.
fn finish(
    routes: MethodRouter<AppState>,
    name: &'static str,
    allow: &'static str,
) -> MethodRouter<AppState> {
    routes
        .options(move || async move { options(name, allow) })
        .fallback(move |method: Method| async move { ApiError::MethodNotAllowed { method, allow } })
}

fn options(name: &str, allow: &'static str) -> Response {
    let body = json!({
        "name": name,
        "description": "",
        "renders": ["application/json"],
        "parses": ["application/json", "application/x-www-form-urlencoded"],
    });
    let mut response = (StatusCode::OK, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}
