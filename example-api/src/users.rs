//! `/users/` and `/users/{id}/`: list, retrieve, create, update, partial update and delete the
//! authorization server's users. The password is write-only and hashed by the store.

use authserver::store::{NewUser, StoreError, User, UserUpdate};
use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::AppState;
use crate::error::ApiError;
use crate::fields::{self, Fields, Text};
use crate::id::Id;
use crate::payload::Payload;

/// What the API shows of a user: never the password, nor the operator flags.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct UserView {
    pub id: i64,
    pub username: String,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
}

impl From<User> for UserView {
    fn from(u: User) -> Self {
        UserView {
            id: u.id,
            username: u.username,
            email: u.email,
            first_name: u.first_name,
            last_name: u.last_name,
        }
    }
}

pub const DUPLICATE: &str = "A user with that username already exists.";

/// The writable fields, validated; `None` = not given.
#[derive(Debug, Default)]
struct Input {
    username: Option<String>,
    email: Option<String>,
    first_name: Option<String>,
    last_name: Option<String>,
    password: Option<String>,
}

/// Validates a body; `current` is the user being updated (its own username is no duplicate).
async fn validate(
    state: &AppState,
    data: &Map<String, Value>,
    partial: bool,
    current: Option<i64>,
) -> Result<Input, ApiError> {
    let mut f = Fields::new(data, partial);
    let username = f.text("username", Text::required(150));
    if let Some(name) = &username {
        if !fields::valid_username(name) {
            f.error("username", fields::BAD_USERNAME);
        } else if let Some(other) = state.store.find_user_by_username(name).await?
            && Some(other.id) != current
        {
            f.error("username", DUPLICATE);
        }
    }
    let email = f.text("email", Text::optional(254));
    if let Some(email) = &email
        && !email.is_empty()
        && !fields::valid_email(email)
    {
        f.error("email", fields::BAD_EMAIL);
    }
    let first_name = f.text("first_name", Text::optional(150));
    let last_name = f.text("last_name", Text::optional(150));
    let password = f.text(
        "password",
        Text {
            required: false,
            allow_blank: false,
            max_length: 128,
            trim: false,
        },
    );
    f.finish()?;
    Ok(Input {
        username,
        email,
        first_name,
        last_name,
        password,
    })
}

/// A race lost on the unique username is the same `400` as the check before it.
fn conflict(error: StoreError) -> ApiError {
    match error {
        StoreError::Conflict(_) => ApiError::field("username", DUPLICATE),
        other => other.into(),
    }
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<UserView>>, ApiError> {
    Ok(Json(
        state
            .store
            .list_users()
            .await?
            .into_iter()
            .map(UserView::from)
            .collect(),
    ))
}

pub async fn create(
    State(state): State<AppState>,
    Payload(data): Payload,
) -> Result<Response, ApiError> {
    let input = validate(&state, &data, false, None).await?;
    let new = NewUser {
        username: input.username.unwrap_or_default(),
        email: input.email.unwrap_or_default(),
        first_name: input.first_name.unwrap_or_default(),
        last_name: input.last_name.unwrap_or_default(),
        password: input.password,
        is_active: true,
        ..NewUser::default()
    };
    let user = state.store.create_user(&new).await.map_err(conflict)?;
    tracing::info!(user_id = user.id, "user created");
    Ok((StatusCode::CREATED, Json(UserView::from(user))).into_response())
}

pub async fn retrieve(
    State(state): State<AppState>,
    Id(id): Id,
) -> Result<Json<UserView>, ApiError> {
    let user = state.store.get_user(id).await?.ok_or(ApiError::NotFound)?;
    Ok(Json(user.into()))
}

/// `PUT` and `PATCH` (partial: nothing required).
pub async fn update(
    State(state): State<AppState>,
    Id(id): Id,
    request: Request,
) -> Result<Json<UserView>, ApiError> {
    let partial = request.method() == Method::PATCH;
    state.store.get_user(id).await?.ok_or(ApiError::NotFound)?;
    let Payload(data) = Payload::from_request(request, &state).await?;
    let input = validate(&state, &data, partial, Some(id)).await?;
    let update = UserUpdate {
        username: input.username,
        email: input.email,
        first_name: input.first_name,
        last_name: input.last_name,
        password: input.password,
        ..UserUpdate::default()
    };
    let user = state
        .store
        .update_user(id, &update)
        .await
        .map_err(conflict)?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(user.into()))
}

pub async fn destroy(State(state): State<AppState>, Id(id): Id) -> Result<StatusCode, ApiError> {
    state
        .store
        .delete_user(id)
        .await?
        .then_some(StatusCode::NO_CONTENT)
        .ok_or(ApiError::NotFound)
}
