//! `/admin/`: superusers manage users (create with a password, edit, permissions, password reset,
//! delete) and groups (create, rename, delete, members). Everyone else signed in gets 403.

use super::flash::{self, FlashQuery};
use super::forms::FormData;
use super::session::{Operator, Superuser, may_sign_in};
use super::templates::{
    AdminIndex, GroupDelete, GroupDetail, GroupList, GroupRow, Nav, PasswordForm, UserDelete,
    UserForm, UserList, UserValues,
};
use super::{WebError, WebResult, csrf, parse_id, render, see_other};
use crate::AppState;
use crate::store::{Group, NewUser, StoreError, User, UserUpdate};
use crate::validation::{self, Refusals};
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/admin/", get(index))
        .route("/admin/users/", get(users))
        .route("/admin/users/add/", get(add_user_page).post(add_user))
        .route("/admin/users/{id}/", get(edit_user_page).post(edit_user))
        .route(
            "/admin/users/{id}/password/",
            get(password_page).post(set_password),
        )
        .route(
            "/admin/users/{id}/delete/",
            get(delete_user_page).post(delete_user),
        )
        .route(
            "/admin/users/{id}/two-factor/reset/",
            post(reset_second_factor),
        )
        .route("/admin/groups/", get(groups).post(create_group))
        .route("/admin/groups/{id}/", get(group).post(rename_group))
        .route("/admin/groups/{id}/members/add/", post(add_member))
        .route(
            "/admin/groups/{id}/members/{user_id}/remove/",
            post(remove_member),
        )
        .route(
            "/admin/groups/{id}/delete/",
            get(delete_group_page).post(delete_group),
        )
}

fn user_values(form: &FormData) -> UserValues {
    UserValues {
        username: form.text("username"),
        email: form.text("email"),
        email_verified: form.checked("email_verified"),
        first_name: form.text("first_name"),
        last_name: form.text("last_name"),
        is_active: form.checked("is_active"),
        is_staff: form.checked("is_staff"),
        is_superuser: form.checked("is_superuser"),
    }
}

fn values_of(user: &User, email_verified: bool) -> UserValues {
    UserValues {
        username: user.username.clone(),
        email: user.email.clone(),
        email_verified,
        first_name: user.first_name.clone(),
        last_name: user.last_name.clone(),
        is_active: user.is_active,
        is_staff: user.is_staff,
        is_superuser: user.is_superuser,
    }
}

/// Username, email and names, checked by the shared rules; the messages go beside their fields.
fn check_user(values: &UserValues, errors: &mut Refusals) {
    errors.check("username", validation::username(&values.username));
    errors.check("email", validation::email(&values.email));
    errors.check("first_name", validation::first_name(&values.first_name));
    errors.check("last_name", validation::last_name(&values.last_name));
}

/// The new password from `password1`/`password2`, if the shared rule takes it and it was typed
/// twice alike.
fn check_password(form: &FormData, errors: &mut Refusals) -> Option<String> {
    let password = form.get("password1").unwrap_or_default();
    let again = form.get("password2").unwrap_or_default();
    if let Err(message) = validation::password(password) {
        errors.add("password1", message);
    } else if password != again {
        errors.add("password2", "The two passwords differ.");
    } else {
        return Some(password.to_owned());
    }
    None
}

async fn load_user(state: &AppState, raw_id: &str) -> Result<User, WebError> {
    state
        .store
        .get_user(parse_id(raw_id)?)
        .await?
        .ok_or(WebError::NotFound)
}

async fn load_group(state: &AppState, raw_id: &str) -> Result<Group, WebError> {
    state
        .store
        .get_group(parse_id(raw_id)?)
        .await?
        .ok_or(WebError::NotFound)
}

async fn index(State(state): State<AppState>, Superuser(operator): Superuser) -> WebResult {
    let page = AdminIndex {
        nav: Nav::of(&operator),
        user_count: usize::try_from(state.store.count_users().await?).unwrap_or_default(),
        group_count: state.store.list_groups().await?.len(),
    };
    Ok(render(StatusCode::OK, &page))
}

#[derive(Deserialize)]
struct Search {
    q: Option<String>,
}

async fn users(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Query(search): Query<Search>,
) -> WebResult {
    let q = search
        .q
        .unwrap_or_default()
        .trim()
        .chars()
        .take(150)
        .collect::<String>();
    let users = if q.is_empty() {
        state.store.list_users().await?
    } else {
        state.store.search_users(&q).await?
    };
    Ok(render(
        StatusCode::OK,
        &UserList {
            nav: Nav::of(&operator),
            users,
            q,
        },
    ))
}

fn user_form(
    operator: &Operator,
    user: Option<&User>,
    values: UserValues,
    errors: Refusals,
    groups: Vec<Group>,
) -> UserForm {
    let (title, action, user_id) = match user {
        None => ("Add a user".into(), "/admin/users/add/".into(), 0),
        Some(user) => (
            format!("User {}", user.username),
            format!("/admin/users/{}/", user.id),
            user.id,
        ),
    };
    UserForm {
        nav: Nav::of(operator),
        title,
        action,
        creating: user.is_none(),
        user_id,
        values,
        errors,
        groups,
        updated_at: None,
        two_factor: false,
    }
}

async fn add_user_page(Superuser(operator): Superuser) -> WebResult {
    let values = UserValues {
        is_active: true,
        ..Default::default()
    };
    Ok(render(
        StatusCode::OK,
        &user_form(&operator, None, values, Refusals::default(), Vec::new()),
    ))
}

async fn add_user(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let values = user_values(&form);
    let mut errors = Refusals::default();
    check_user(&values, &mut errors);
    let password = check_password(&form, &mut errors);
    if let (Some(password), true) = (password, errors.is_empty()) {
        let new = NewUser {
            username: values.username.clone(),
            email: values.email.clone(),
            first_name: values.first_name.clone(),
            last_name: values.last_name.clone(),
            password: Some(password),
            is_active: values.is_active,
            is_staff: values.is_staff,
            is_superuser: values.is_superuser,
        };
        match state.store.create_user(&new).await {
            Ok(user) => {
                if values.email_verified {
                    state.store.set_email_verified(user.id, true).await?;
                }
                tracing::info!(by = operator.user.id, user_id = user.id, username = %user.username, "user created");
                let notice = flash::notice("User created.");
                return flash::redirect(&state.store, &operator, &user_path(user.id), notice).await;
            }
            Err(StoreError::Conflict(_)) => {
                errors.add("username", "A user with that username already exists.")
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(render(
        StatusCode::BAD_REQUEST,
        &user_form(&operator, None, values, errors, Vec::new()),
    ))
}

/// Where a user's page is.
fn user_path(id: i64) -> String {
    format!("/admin/users/{id}/")
}

/// Where a group's page is.
fn group_path(id: i64) -> String {
    format!("/admin/groups/{id}/")
}

async fn edit_user_page(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    Query(query): Query<FlashQuery>,
) -> WebResult {
    let user = load_user(&state, &id).await?;
    let groups = state.store.user_groups(user.id).await?;
    let flash = flash::take(
        &state.store,
        &operator,
        &user_path(user.id),
        query.flash.as_deref(),
    )
    .await?;
    let profile = state
        .store
        .profile(user.id)
        .await?
        .ok_or(WebError::NotFound)?;
    let mut page = user_form(
        &operator,
        Some(&user),
        values_of(&user, profile.email_verified),
        Refusals::default(),
        groups,
    );
    page.updated_at = Some(super::templates::utc(profile.updated_at));
    page.two_factor = state.store.has_second_factor(user.id).await?;
    page.nav.show(flash.as_ref());
    Ok(render(StatusCode::OK, &page))
}

async fn edit_user(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let user = load_user(&state, &id).await?;
    let values = user_values(&form);
    let mut errors = Refusals::default();
    check_user(&values, &mut errors);
    if user.id == operator.user.id {
        if !values.is_superuser {
            errors.add(
                "is_superuser",
                "You cannot take away your own superuser status.",
            );
        }
        if !values.is_active {
            errors.add("is_active", "You cannot deactivate your own account.");
        }
    }
    if errors.is_empty() {
        let update = UserUpdate {
            username: Some(values.username.clone()),
            email: Some(values.email.clone()),
            first_name: Some(values.first_name.clone()),
            last_name: Some(values.last_name.clone()),
            password: None,
            is_active: Some(values.is_active),
            is_staff: Some(values.is_staff),
            is_superuser: Some(values.is_superuser),
        };
        match state.store.update_user(user.id, &update).await {
            Ok(Some(updated)) => {
                // After the update, which unverifies a changed address: the box says last.
                state
                    .store
                    .set_email_verified(updated.id, values.email_verified)
                    .await?;
                tracing::info!(by = operator.user.id, user_id = updated.id, "user updated");
                if !may_sign_in(&updated) {
                    state.store.delete_user_sessions(updated.id).await?;
                }
                let notice = flash::notice("Saved.");
                return flash::redirect(&state.store, &operator, &user_path(updated.id), notice)
                    .await;
            }
            Ok(None) => return Err(WebError::NotFound),
            Err(StoreError::Conflict(_)) => {
                errors.add("username", "A user with that username already exists.")
            }
            Err(error) => return Err(error.into()),
        }
    }
    let groups = state.store.user_groups(user.id).await?;
    Ok(render(
        StatusCode::BAD_REQUEST,
        &user_form(&operator, Some(&user), values, errors, groups),
    ))
}

async fn password_page(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
) -> WebResult {
    let user = load_user(&state, &id).await?;
    Ok(render(
        StatusCode::OK,
        &PasswordForm {
            nav: Nav::of(&operator),
            user,
            errors: Refusals::default(),
        },
    ))
}

async fn set_password(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let user = load_user(&state, &id).await?;
    let mut errors = Refusals::default();
    let Some(password) = check_password(&form, &mut errors) else {
        return Ok(render(
            StatusCode::BAD_REQUEST,
            &PasswordForm {
                nav: Nav::of(&operator),
                user,
                errors,
            },
        ));
    };
    state.store.set_password(user.id, &password).await?;
    // Every other session of the account ends, also when operators change their own password:
    // the one making the change stays signed in.
    state
        .store
        .delete_user_sessions_but(user.id, &operator.csrf_token)
        .await?;
    tracing::info!(by = operator.user.id, user_id = user.id, "password reset");
    let notice = flash::notice("Password changed.");
    flash::redirect(&state.store, &operator, &user_path(user.id), notice).await
}

/// Removes a user's second factors (a lost phone, or an exposed secret) and ends their sessions
/// and tokens, announced on the revocation stream; they sign in with their password and may
/// enrol again.
async fn reset_second_factor(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let user = load_user(&state, &id).await?;
    let had = state
        .store
        .reset_second_factors_and_sign_out(user.id)
        .await?;
    tracing::info!(
        by = operator.user.id,
        user_id = user.id,
        had,
        "second factors reset"
    );
    let notice = flash::notice(if had {
        "Second factor removed; the user's sessions and tokens ended."
    } else {
        "The user had no second factor; their sessions and tokens ended."
    });
    flash::redirect(&state.store, &operator, &user_path(user.id), notice).await
}

async fn delete_user_page(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
) -> WebResult {
    let user = load_user(&state, &id).await?;
    Ok(render(
        StatusCode::OK,
        &UserDelete {
            nav: Nav::of(&operator),
            user,
            errors: Refusals::default(),
        },
    ))
}

async fn delete_user(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let user = load_user(&state, &id).await?;
    if user.id == operator.user.id {
        let mut errors = Refusals::default();
        errors.add(Refusals::ALL, "You cannot delete your own account.");
        return Ok(render(
            StatusCode::BAD_REQUEST,
            &UserDelete {
                nav: Nav::of(&operator),
                user,
                errors,
            },
        ));
    }
    state.store.delete_user(user.id).await?;
    tracing::info!(by = operator.user.id, user_id = user.id, "user deleted");
    Ok(see_other("/admin/users/"))
}

fn check_group_name(name: &str, errors: &mut Refusals) {
    errors.check("name", validation::group_name(name));
}

async fn group_rows(state: &AppState) -> Result<Vec<GroupRow>, WebError> {
    let mut rows = Vec::new();
    for group in state.store.list_groups().await? {
        let members = state.store.group_members(group.id).await?.len();
        rows.push(GroupRow {
            id: group.id,
            name: group.name,
            members,
        });
    }
    Ok(rows)
}

async fn groups(State(state): State<AppState>, Superuser(operator): Superuser) -> WebResult {
    let page = GroupList {
        nav: Nav::of(&operator),
        groups: group_rows(&state).await?,
        name: String::new(),
        errors: Refusals::default(),
    };
    Ok(render(StatusCode::OK, &page))
}

async fn create_group(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let name = form.text("name");
    let mut errors = Refusals::default();
    check_group_name(&name, &mut errors);
    if errors.is_empty() {
        match state.store.create_group(&name).await {
            Ok(group) => {
                tracing::info!(by = operator.user.id, group_id = group.id, "group created");
                let notice = flash::notice("Group created.");
                return flash::redirect(&state.store, &operator, &group_path(group.id), notice)
                    .await;
            }
            Err(StoreError::Conflict(_)) => {
                errors.add("name", "A group with that name already exists.")
            }
            Err(error) => return Err(error.into()),
        }
    }
    let page = GroupList {
        nav: Nav::of(&operator),
        groups: group_rows(&state).await?,
        name,
        errors,
    };
    Ok(render(StatusCode::BAD_REQUEST, &page))
}

async fn group_page(
    state: &AppState,
    operator: &Operator,
    group: Group,
    name: Option<String>,
    member_username: String,
    errors: Refusals,
) -> Result<GroupDetail, WebError> {
    Ok(GroupDetail {
        nav: Nav::of(operator),
        members: state.store.group_members(group.id).await?,
        name: name.unwrap_or_else(|| group.name.clone()),
        group,
        member_username,
        errors,
    })
}

async fn group(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    Query(query): Query<FlashQuery>,
) -> WebResult {
    let group = load_group(&state, &id).await?;
    let flash = flash::take(
        &state.store,
        &operator,
        &group_path(group.id),
        query.flash.as_deref(),
    )
    .await?;
    let mut page = group_page(
        &state,
        &operator,
        group,
        None,
        String::new(),
        Refusals::default(),
    )
    .await?;
    page.nav.show(flash.as_ref());
    Ok(render(StatusCode::OK, &page))
}

async fn rename_group(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let group = load_group(&state, &id).await?;
    let name = form.text("name");
    let mut errors = Refusals::default();
    check_group_name(&name, &mut errors);
    if errors.is_empty() {
        match state.store.rename_group(group.id, &name).await {
            Ok(Some(_)) => {
                let notice = flash::notice("Saved.");
                return flash::redirect(&state.store, &operator, &group_path(group.id), notice)
                    .await;
            }
            Ok(None) => return Err(WebError::NotFound),
            Err(StoreError::Conflict(_)) => {
                errors.add("name", "A group with that name already exists.")
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(render(
        StatusCode::BAD_REQUEST,
        &group_page(&state, &operator, group, Some(name), String::new(), errors).await?,
    ))
}

async fn add_member(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let group = load_group(&state, &id).await?;
    let username = form.text("username");
    let mut errors = Refusals::default();
    if username.is_empty() {
        errors.add("username", "This field is required.");
    } else if let Some(user) = state.store.find_user_by_username(&username).await? {
        state.store.add_member(group.id, user.id).await?;
        tracing::info!(
            by = operator.user.id,
            group_id = group.id,
            user_id = user.id,
            "member added"
        );
        return Ok(see_other(&format!("/admin/groups/{}/", group.id)));
    } else {
        errors.add("username", "There is no user with that username.");
    }
    Ok(render(
        StatusCode::BAD_REQUEST,
        &group_page(&state, &operator, group, None, username, errors).await?,
    ))
}

async fn remove_member(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path((id, user_id)): Path<(String, String)>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let group = load_group(&state, &id).await?;
    let user = load_user(&state, &user_id).await?;
    state.store.remove_member(group.id, user.id).await?;
    tracing::info!(
        by = operator.user.id,
        group_id = group.id,
        user_id = user.id,
        "member removed"
    );
    Ok(see_other(&format!("/admin/groups/{}/", group.id)))
}

async fn delete_group_page(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
) -> WebResult {
    let group = load_group(&state, &id).await?;
    Ok(render(
        StatusCode::OK,
        &GroupDelete {
            nav: Nav::of(&operator),
            group,
        },
    ))
}

async fn delete_group(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let group = load_group(&state, &id).await?;
    state.store.delete_group(group.id).await?;
    tracing::info!(by = operator.user.id, group_id = group.id, "group deleted");
    Ok(see_other("/admin/groups/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_fields_and_passwords_are_checked() {
        let mut errors = Refusals::default();
        check_user(
            &user_values(&FormData::from_pairs(&[
                ("username", "bad name"),
                ("email", "nope"),
            ])),
            &mut errors,
        );
        assert!(errors.get("username").is_some());
        assert!(errors.get("email").is_some());
        let mut errors = Refusals::default();
        check_user(
            &user_values(&FormData::from_pairs(&[
                ("username", "alice.b+1@x"),
                ("email", "a@b.example"),
            ])),
            &mut errors,
        );
        assert!(errors.is_empty());
        let mut errors = Refusals::default();
        assert_eq!(
            check_password(
                &FormData::from_pairs(&[("password1", "short"), ("password2", "short")]),
                &mut errors
            ),
            None
        );
        assert!(errors.get("password1").is_some());
        let mut errors = Refusals::default();
        assert_eq!(
            check_password(
                &FormData::from_pairs(&[
                    ("password1", "long enough"),
                    ("password2", "long enougH")
                ]),
                &mut errors
            ),
            None
        );
        assert!(errors.get("password2").is_some());
        let mut errors = Refusals::default();
        assert_eq!(
            check_password(
                &FormData::from_pairs(&[
                    ("password1", "long enough"),
                    ("password2", "long enough")
                ]),
                &mut errors
            )
            .as_deref(),
            Some("long enough")
        );
    }
}
