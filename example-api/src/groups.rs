//! `/groups/` and `/groups/{id}/`: list, retrieve, create, rename (PUT, PATCH) and delete the
//! authorization server's groups.

use authserver::store::{Group, StoreError};
use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::AppState;
use crate::error::ApiError;
use crate::fields::{Fields, Text};
use crate::id::Id;
use crate::payload::Payload;

pub const DUPLICATE: &str = "group with this name already exists.";

fn validate(data: &Map<String, Value>, partial: bool) -> Result<Option<String>, ApiError> {
    let mut f = Fields::new(data, partial);
    let name = f.text("name", Text::required(150));
    f.finish()?;
    Ok(name)
}

fn conflict(error: StoreError) -> ApiError {
    match error {
        StoreError::Conflict(_) => ApiError::field("name", DUPLICATE),
        other => other.into(),
    }
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<Group>>, ApiError> {
    Ok(Json(state.store.list_groups().await?))
}

pub async fn create(
    State(state): State<AppState>,
    Payload(data): Payload,
) -> Result<Response, ApiError> {
    let name = validate(&data, false)?.unwrap_or_default();
    let group = state.store.create_group(&name).await.map_err(conflict)?;
    Ok((StatusCode::CREATED, Json(group)).into_response())
}

pub async fn retrieve(State(state): State<AppState>, Id(id): Id) -> Result<Json<Group>, ApiError> {
    Ok(Json(
        state.store.get_group(id).await?.ok_or(ApiError::NotFound)?,
    ))
}

/// `PUT` and `PATCH` (partial: nothing required).
pub async fn update(
    State(state): State<AppState>,
    Id(id): Id,
    request: Request,
) -> Result<Json<Group>, ApiError> {
    let partial = request.method() == Method::PATCH;
    let current = state.store.get_group(id).await?.ok_or(ApiError::NotFound)?;
    let Payload(data) = Payload::from_request(request, &state).await?;
    let Some(name) = validate(&data, partial)? else {
        return Ok(Json(current));
    };
    if name == current.name {
        return Ok(Json(current));
    }
    Ok(Json(
        state
            .store
            .rename_group(id, &name)
            .await
            .map_err(conflict)?
            .ok_or(ApiError::NotFound)?,
    ))
}

pub async fn destroy(State(state): State<AppState>, Id(id): Id) -> Result<StatusCode, ApiError> {
    state
        .store
        .delete_group(id)
        .await?
        .then_some(StatusCode::NO_CONTENT)
        .ok_or(ApiError::NotFound)
}
