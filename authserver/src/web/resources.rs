//! `/admin/resources/`: superusers register the APIs (RFC 8707 resources) tokens may be
//! requested for, with the rules the command line checks, and delete them.

use super::forms::FormData;
use super::session::Superuser;
use super::templates::{Nav, ResourceList};
use super::{WebError, WebResult, csrf, render, see_other};
use crate::AppState;
use crate::store::StoreError;
use crate::validation::{self, Refusals, ResourceDraft};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/admin/resources/", get(resources).post(create_resource))
        .route("/admin/resources/delete/", post(delete_resource))
}

async fn page(
    state: &AppState,
    nav: Nav,
    draft: ResourceDraft,
    errors: Refusals,
) -> Result<ResourceList, WebError> {
    Ok(ResourceList {
        nav,
        resources: state.store.list_resources().await?,
        draft,
        errors,
    })
}

async fn resources(State(state): State<AppState>, Superuser(operator): Superuser) -> WebResult {
    let page = page(
        &state,
        Nav::of(&operator),
        ResourceDraft::default(),
        Refusals::default(),
    );
    Ok(render(StatusCode::OK, &page.await?))
}

async fn create_resource(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let draft = ResourceDraft {
        identifier: form.text("identifier"),
        name: form.text("name"),
        scopes: form.text("scopes"),
        token_format: form.text("token_format"),
        access_token_lifetime: form.text("access_token_lifetime"),
    };
    let mut errors = match validation::resource(&state.settings, &draft) {
        Ok(input) => match state.store.create_resource(&input).await {
            Ok(created) => {
                tracing::info!(
                    by = operator.user.id,
                    resource_id = created.id,
                    "resource created"
                );
                return Ok(see_other("/admin/resources/"));
            }
            Err(StoreError::Conflict(_)) => Refusals::default(),
            Err(error) => return Err(error.into()),
        },
        Err(refusals) => refusals,
    };
    if errors.is_empty() {
        errors.add(
            "identifier",
            "A resource with that identifier already exists.",
        );
    }
    let page = page(&state, Nav::of(&operator), draft, errors).await?;
    Ok(render(StatusCode::BAD_REQUEST, &page))
}

async fn delete_resource(
    State(state): State<AppState>,
    Superuser(operator): Superuser,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    if !state
        .store
        .delete_resource(&form.text("identifier"))
        .await?
    {
        return Err(WebError::NotFound);
    }
    tracing::info!(by = operator.user.id, "resource deleted");
    Ok(see_other("/admin/resources/"))
}
