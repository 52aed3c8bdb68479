//! `/o/authorized-tokens/`: the applications the signed-in user has authorized, each with a
//! button that withdraws the consent and revokes every token the application holds for them.

use super::flash::{self, FlashQuery};
use super::forms::FormData;
use super::session::{AUTHORIZED_HOME, SignedIn};
use super::templates::{AuthorizedList, AuthorizedRow, Nav, utc};
use super::{WebResult, csrf, parse_id, render, see_other};
use crate::AppState;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route(AUTHORIZED_HOME, get(list))
        .route("/o/authorized-tokens/{id}/delete/", post(revoke))
}

async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<FlashQuery>,
) -> WebResult {
    let flash = flash::take(
        &state.store,
        &signed_in,
        AUTHORIZED_HOME,
        query.flash.as_deref(),
    )
    .await?;
    let mut nav = Nav::signed_in(&signed_in.user, &signed_in.form_token);
    nav.show(flash.as_ref());
    let applications = state
        .store
        .authorized_applications(signed_in.user.id)
        .await?
        .into_iter()
        .map(|a| AuthorizedRow {
            id: a.application_id,
            name: a.name,
            client_id: a.client_id,
            scopes: a.scope.split_whitespace().map(str::to_owned).collect(),
            granted: utc(a.granted_at),
        })
        .collect();
    Ok(render(
        StatusCode::OK,
        &AuthorizedList { nav, applications },
    ))
}

/// Withdraws the consent and revokes the tokens; an application never authorized changes
/// nothing (the same answer: the user's list without it).
async fn revoke(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify_token(&signed_in.form_token, &form)?;
    let application_id = parse_id(&id)?;
    let name = state
        .store
        .authorized_applications(signed_in.user.id)
        .await?
        .into_iter()
        .find(|a| a.application_id == application_id)
        .map(|a| a.name);
    let had = state
        .store
        .revoke_authorization(signed_in.user.id, application_id)
        .await?;
    tracing::info!(
        user_id = signed_in.user.id,
        application_id,
        had,
        "authorization revoked by the user"
    );
    match name {
        Some(name) => {
            let notice = flash::notice(format!(
                "Access revoked: {name} can no longer use your account, and its tokens stopped working."
            ));
            flash::redirect(&state.store, &signed_in, AUTHORIZED_HOME, notice).await
        }
        None => Ok(see_other(AUTHORIZED_HOME)),
    }
}
