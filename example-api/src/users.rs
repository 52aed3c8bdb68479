//! `/users/` and `/users/{id}/`: list, retrieve, create, update, partial update and delete the
//! authorization server's users. The password is write-only, hashed by the store, and accepted
//! only at creation; staff and superuser accounts are out of the API's reach (403), and the
//! operator flags are never writable here: those belong to `/admin/` and the CLI.

use authserver::store::{Guarded, NewUser, StoreError, User, UserUpdate};
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
pub const CREATE_ONLY: &str = "This field may only be set when the user is created.";
pub const OPERATOR_ONLY: &str = "This field cannot be set through the API.";

/// Fields that belong to the operators (`/admin/`, the CLI), refused in any body.
const OPERATOR_FIELDS: [&str; 3] = ["is_staff", "is_superuser", "is_active"];

/// The writable fields, validated; `None` = not given.
#[derive(Debug, Default)]
struct Input {
    username: Option<String>,
    email: Option<String>,
    first_name: Option<String>,
    last_name: Option<String>,
    password: Option<String>,
}

/// Validates a body; `current` is the user being updated (its own username is no duplicate, and
/// the password cannot be changed).
async fn validate(
    state: &AppState,
    data: &Map<String, Value>,
    partial: bool,
    current: Option<i64>,
) -> Result<Input, ApiError> {
    let mut f = Fields::new(data, partial);
    for name in OPERATOR_FIELDS {
        if data.contains_key(name) {
            f.error(name, OPERATOR_ONLY);
        }
    }
    if current.is_some() && data.contains_key("password") {
        f.error("password", CREATE_ONLY);
    }
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
    let password = if current.is_none() {
        f.text(
            "password",
            Text {
                required: false,
                allow_blank: false,
                max_length: 128,
                trim: false,
            },
        )
    } else {
        None
    };
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

/// `PUT` and `PATCH` (partial: nothing required). The object permission is checked before the
/// body, as Django REST framework does.
pub async fn update(
    State(state): State<AppState>,
    Id(id): Id,
    request: Request,
) -> Result<Json<UserView>, ApiError> {
    let partial = request.method() == Method::PATCH;
    let user = state.store.get_user(id).await?.ok_or(ApiError::NotFound)?;
    if is_privileged(&user) {
        return Err(refused(id));
    }
    let Payload(data) = Payload::from_request(request, &state).await?;
    let input = validate(&state, &data, partial, Some(id)).await?;
    let update = UserUpdate {
        username: input.username,
        email: input.email,
        first_name: input.first_name,
        last_name: input.last_name,
        ..UserUpdate::default()
    };
    match state
        .store
        .update_ordinary_user(id, &update)
        .await
        .map_err(conflict)?
    {
        Guarded::Done(user) => Ok(Json(user.into())),
        Guarded::Missing => Err(ApiError::NotFound),
        Guarded::Privileged => Err(refused(id)),
    }
}

pub async fn destroy(State(state): State<AppState>, Id(id): Id) -> Result<StatusCode, ApiError> {
    match state.store.delete_ordinary_user(id).await? {
        Guarded::Done(()) => Ok(StatusCode::NO_CONTENT),
        Guarded::Missing => Err(ApiError::NotFound),
        Guarded::Privileged => Err(refused(id)),
    }
}

fn is_privileged(user: &User) -> bool {
    user.is_staff || user.is_superuser
}

/// The `403` for a staff or superuser account, logged: someone tried.
fn refused(id: i64) -> ApiError {
    tracing::warn!(
        user_id = id,
        "API change to a staff or superuser account refused"
    );
    ApiError::Forbidden
}
