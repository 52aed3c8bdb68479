//! `/o/applications/`: operators register, read, change and delete their client applications;
//! a secret is shown in full once, after registration or regeneration. Superusers see them all,
//! and only they may let an application introspect tokens.

use super::flash::{self, Flash, FlashQuery};
use super::forms::FormData;
use super::session::Operator;
use super::templates::{
    ApplicationDelete, ApplicationDetail, ApplicationForm, ApplicationList, ApplicationRegenerate,
    ApplicationRow, ApplicationValues, Choice, Nav, utc,
};
use super::{WebError, WebResult, csrf, parse_id, render, see_other};
use crate::AppState;
use crate::config::{AccessTokenFormat, Settings};
use crate::domain::EVERY_SCOPE;
use crate::domain::Permissions;
use crate::jwt::Alg;
use crate::protocol::oidc;
use crate::registration::{self, Registration, RegistrationError};
use crate::store::{
    Application, ApplicationInput, ClientType, DEFAULT_ID_TOKEN_ALG, GrantType, OidcClient,
};
use crate::validation::{self, OidcDraft, Refusals};
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use std::collections::HashMap;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/applications/", get(list))
        .route(
            "/o/applications/register/",
            get(register_page).post(register),
        )
        .route("/o/applications/{id}/", get(detail))
        .route(
            "/o/applications/{id}/update/",
            get(update_page).post(update),
        )
        .route(
            "/o/applications/{id}/delete/",
            get(delete_page).post(delete),
        )
        .route(
            "/o/applications/{id}/regenerate-secret/",
            get(regenerate_page).post(regenerate),
        )
}

/// Checks the submitted fields into an [`ApplicationInput`] by the shared rules; on refusal,
/// the messages per field. Either way the entered values come back, to show the form again.
pub(crate) fn validate(
    settings: &Settings,
    resource_scopes: &[String],
    form: &FormData,
) -> (ApplicationValues, Result<ApplicationInput, Refusals>) {
    let mut scopes: Vec<String> = Vec::new();
    for scope in form.all("scope") {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    let values = ApplicationValues {
        name: form.text("name"),
        client_type: form.text("client_type"),
        grant_type: form.text("grant_type"),
        redirect_uris: form
            .get("redirect_uris")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        scopes,
        may_introspect: form.checked("may_introspect"),
        may_use_ssf: form.checked("may_use_ssf"),
        pkce_optional: form.checked("pkce_optional"),
        token_format: form.text("token_format"),
        tls_client_auth: form.text("tls_client_auth"),
        dpop_required: form.checked("dpop_required"),
    };
    let result = validation::application(settings, resource_scopes, &values);
    (values, result)
}

/// The OpenID Connect fields of the form, as entered.
fn oidc_draft(form: &FormData) -> OidcDraft {
    OidcDraft {
        post_logout_redirect_uris: form
            .get("post_logout_redirect_uris")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        id_token_alg: form.text("id_token_alg"),
        require_mfa: form.checked("require_mfa"),
    }
}

/// The form values of an OIDC registration.
fn oidc_values(registration: &OidcClient) -> OidcDraft {
    OidcDraft {
        post_logout_redirect_uris: registration
            .post_logout_redirect_uris
            .split_whitespace()
            .collect::<Vec<_>>()
            .join("\n"),
        id_token_alg: registration.id_token_alg.clone(),
        require_mfa: registration.require_mfa,
    }
}

/// The registration form (no `app`) or the edit form of `app`.
fn form_page(
    state: &AppState,
    operator: &Operator,
    app: Option<&Application>,
    values: ApplicationValues,
    oidc: OidcDraft,
    errors: Refusals,
) -> ApplicationForm {
    let (title, action, cancel) = match app {
        None => (
            "Register a new application".into(),
            "/o/applications/register/".into(),
            "/o/applications/".into(),
        ),
        Some(app) => (
            format!("Edit {}", app.name),
            format!("/o/applications/{}/update/", app.id),
            format!("/o/applications/{}/", app.id),
        ),
    };
    let choice = |value: &str, label: &str, current: &str| Choice {
        value: value.into(),
        label: label.into(),
        selected: value == current,
    };
    let code_grant = values.grant_type == GrantType::AuthorizationCode.as_str();
    ApplicationForm {
        code_grant,
        nav: Nav::of(operator),
        may_set_introspect: operator.user.is_superuser,
        title,
        action,
        cancel,
        client_types: ClientType::ALL
            .iter()
            .map(|t| choice(t.as_str(), t.as_str(), &values.client_type))
            .collect(),
        grant_types: GrantType::ALL
            .iter()
            .map(|g| choice(g.as_str(), g.label(), &values.grant_type))
            .collect(),
        scopes: std::iter::once(Choice {
            selected: values.scopes.iter().any(|s| s == EVERY_SCOPE),
            value: EVERY_SCOPE.into(),
            label: "every declared scope, now and later".into(),
        })
        .chain(
            state
                .settings
                .scopes
                .iter()
                .map(|(name, description)| (name.clone(), description.clone()))
                .chain(
                    oidc::SCOPES
                        .iter()
                        .filter(|(name, _)| !state.settings.scopes.contains_key(*name))
                        .map(|(name, description)| (name.to_string(), description.to_string())),
                )
                .map(|(name, description)| Choice {
                    selected: values.scopes.contains(&name),
                    value: name,
                    label: description,
                }),
        )
        .collect(),
        id_token_algs: Alg::ALL
            .iter()
            .map(|alg| {
                let current = if oidc.id_token_alg.is_empty() {
                    DEFAULT_ID_TOKEN_ALG
                } else {
                    &oidc.id_token_alg
                };
                choice(alg.as_str(), alg.as_str(), current)
            })
            .collect(),
        oidc,
        token_formats: std::iter::once(Choice {
            value: String::new(),
            label: format!(
                "Server default (now {})",
                state.settings.access_token_format.as_str()
            ),
            selected: values.token_format.is_empty(),
        })
        .chain(
            AccessTokenFormat::ALL
                .iter()
                .map(|f| choice(f.as_str(), f.label(), &values.token_format)),
        )
        .collect(),
        values,
        errors,
    }
}

/// Sets the permission flags to store (may introspect, may use the revocation stream) from
/// those of `current` (`Permissions::default()` for a new application): never for a public
/// client; otherwise what a superuser ticked, and for anyone else the current values, whatever
/// the form said. The scopes the kept permissions bring are added to the allowed ones.
fn permission_flags(operator: &Operator, input: &mut ApplicationInput, current: Permissions) {
    let submitted = Permissions {
        introspect: input.may_introspect,
        ssf: input.may_use_ssf,
    };
    let kept = if input.client_type == ClientType::Public {
        // Never for a public client (see the introspection endpoint), whoever asks.
        Permissions::default()
    } else if operator.user.is_superuser {
        submitted
    } else {
        if submitted != current {
            tracing::info!(
                user_id = operator.user.id,
                "permission change ignored: not a superuser"
            );
        }
        current
    };
    input.may_introspect = kept.introspect;
    input.may_use_ssf = kept.ssf;
    input.allowed_scopes = crate::domain::with_permission_scopes(&input.allowed_scopes, kept);
}

/// The application with this id, if it exists and this operator may see it.
async fn load_owned(
    state: &AppState,
    operator: &Operator,
    raw_id: &str,
) -> Result<Application, WebError> {
    let app = state
        .store
        .get_application(parse_id(raw_id)?)
        .await?
        .ok_or(WebError::NotFound)?;
    if operator.owns(app.owner_id) {
        Ok(app)
    } else {
        tracing::info!(
            user_id = operator.user.id,
            application_id = app.id,
            "application refused to a non-owner"
        );
        Err(WebError::Forbidden(Box::new(Nav::of(operator))))
    }
}

async fn detail_page(
    state: &AppState,
    operator: &Operator,
    app: Application,
    flash: Option<Flash>,
) -> Result<ApplicationDetail, WebError> {
    let mut nav = Nav::of(operator);
    nav.show(flash.as_ref());
    let secret = flash.and_then(|flash| flash.secret);
    let owner = match app.owner_id {
        Some(id) => state
            .store
            .get_user(id)
            .await?
            .map(|u| u.username)
            .unwrap_or_else(|| "—".into()),
        None => "—".into(),
    };
    let scopes = if crate::domain::every_scope(&app.allowed_scopes) {
        "every declared scope".to_owned()
    } else if app.allowed_scopes.is_empty() {
        "none".to_owned()
    } else {
        app.allowed_scopes.join(" ")
    };
    let registration = state.store.oidc_client(app.id).await?;
    let dynamic = state
        .store
        .dynamic_client(app.id)
        .await?
        .map(|record| utc(record.issued_at));
    Ok(ApplicationDetail {
        dynamic,
        nav,
        id_token_alg: registration.id_token_alg,
        require_mfa: registration.require_mfa,
        post_logout_redirect_uris: registration
            .post_logout_redirect_uris
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        fingerprint: app.secret_fingerprint().map(str::to_owned),
        code_grant: app.grant_type == GrantType::AuthorizationCode,
        redirect_uris: app
            .redirect_uris
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        scopes,
        owner,
        created: utc(app.created_at),
        secret,
        pkce: if app.client_type == ClientType::Public || app.pkce_required {
            "required (S256)"
        } else {
            "optional (this confidential client opted out)"
        },
        client_auth: match &app.tls_client_auth {
            Some(auth) => format!("{} ({auth})", auth.method()),
            None if app.client_type == ClientType::Public => "none (public client)".to_owned(),
            None => "client secret (HTTP Basic or form)".to_owned(),
        },
        token_format: match app.token_format {
            Some(format) => format.label().to_owned(),
            None => format!(
                "{} (the server's default)",
                state.settings.access_token_format.label()
            ),
        },
        app,
    })
}

async fn list(State(state): State<AppState>, operator: Operator) -> WebResult {
    let superuser = operator.user.is_superuser;
    let apps = state
        .store
        .list_applications(if superuser {
            None
        } else {
            Some(operator.user.id)
        })
        .await?;
    let owners: HashMap<i64, String> = if superuser {
        state
            .store
            .list_users()
            .await?
            .into_iter()
            .map(|u| (u.id, u.username))
            .collect()
    } else {
        HashMap::new()
    };
    let dynamic = state.store.dynamic_client_ids().await?;
    let applications = apps
        .into_iter()
        .map(|app| ApplicationRow {
            dynamic: dynamic.contains(&app.id),
            id: app.id,
            owner: app
                .owner_id
                .and_then(|id| owners.get(&id).cloned())
                .unwrap_or_else(|| "—".into()),
            name: app.name,
            client_id: app.client_id,
            client_type: app.client_type.as_str(),
            grant_label: app.grant_type.label(),
        })
        .collect();
    Ok(render(
        StatusCode::OK,
        &ApplicationList {
            nav: Nav::of(&operator),
            applications,
            show_owner: superuser,
        },
    ))
}

async fn register_page(State(state): State<AppState>, operator: Operator) -> WebResult {
    let values = ApplicationValues {
        client_type: ClientType::Confidential.as_str().into(),
        grant_type: GrantType::Password.as_str().into(),
        ..Default::default()
    };
    let page = form_page(
        &state,
        &operator,
        None,
        values,
        OidcDraft::default(),
        Refusals::default(),
    );
    Ok(render(StatusCode::OK, &page))
}

async fn register(State(state): State<AppState>, operator: Operator, form: FormData) -> WebResult {
    csrf::verify(&operator, &form)?;
    let resource_scopes = state.store.resource_scopes().await?;
    let (values, oidc_draft, registration) = checked(&state.settings, &resource_scopes, &form);
    let mut registration = match registration {
        Ok(registration) => registration,
        Err(errors) => {
            let page = form_page(&state, &operator, None, values, oidc_draft, errors);
            return Ok(render(StatusCode::BAD_REQUEST, &page));
        }
    };
    permission_flags(&operator, &mut registration.input, Permissions::default());
    let create = registration::Create {
        registration,
        owner_id: Some(operator.user.id),
        client_id: None,
        client_secret: None,
        dynamic: None,
    };
    let registered = registration::create(&state.store, &state.keys, &state.settings, create)
        .await
        .map_err(registration_failed)?;
    let app = registered.app;
    tracing::info!(user_id = operator.user.id, client_id = %app.client_id, "application registered");
    let flash = Flash {
        notice: "Application registered.".into(),
        secret: registered.secret,
    };
    flash::redirect(&state.store, &operator, &detail_path(app.id), flash).await
}

/// The form's values, its OpenID Connect values, and the registration they make (or every
/// refusal), by the service's shared rules.
fn checked(
    settings: &Settings,
    resource_scopes: &[String],
    form: &FormData,
) -> (ApplicationValues, OidcDraft, Result<Registration, Refusals>) {
    let (values, _) = validate(settings, resource_scopes, form);
    let oidc = oidc_draft(form);
    let registration = Registration::check(settings, resource_scopes, &values, &oidc);
    (values, oidc, registration)
}

/// A registration the service refused after the form's checks passed: a server error (the form
/// was checked by the same rules; what is left is the keys or the database).
fn registration_failed(error: RegistrationError) -> WebError {
    match error {
        RegistrationError::Store(error) => error.into(),
        other => WebError::Internal(other.to_string()),
    }
}

/// Where an application's page is.
fn detail_path(id: i64) -> String {
    format!("/o/applications/{id}/")
}

async fn detail(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    Query(query): Query<FlashQuery>,
) -> WebResult {
    let app = load_owned(&state, &operator, &id).await?;
    let flash = flash::take(
        &state.store,
        &operator,
        &detail_path(app.id),
        query.flash.as_deref(),
    )
    .await?;
    Ok(render(
        StatusCode::OK,
        &detail_page(&state, &operator, app, flash).await?,
    ))
}

fn values_of(app: &Application) -> ApplicationValues {
    ApplicationValues {
        name: app.name.clone(),
        client_type: app.client_type.as_str().into(),
        grant_type: app.grant_type.as_str().into(),
        redirect_uris: app
            .redirect_uris
            .split_whitespace()
            .collect::<Vec<_>>()
            .join("\n"),
        scopes: app.allowed_scopes.clone(),
        may_introspect: app.may_introspect,
        may_use_ssf: app.may_use_ssf,
        pkce_optional: !app.pkce_required,
        token_format: app
            .token_format
            .map(|f| f.as_str().to_owned())
            .unwrap_or_default(),
        tls_client_auth: app
            .tls_client_auth
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        dpop_required: app.dpop_required,
    }
}

async fn update_page(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
) -> WebResult {
    let app = load_owned(&state, &operator, &id).await?;
    let registration = state.store.oidc_client(app.id).await?;
    let page = form_page(
        &state,
        &operator,
        Some(&app),
        values_of(&app),
        oidc_values(&registration),
        Refusals::default(),
    );
    Ok(render(StatusCode::OK, &page))
}

async fn update(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let app = load_owned(&state, &operator, &id).await?;
    let resource_scopes = state.store.resource_scopes().await?;
    let (values, oidc_draft, registration) = checked(&state.settings, &resource_scopes, &form);
    let mut registration = match registration {
        Ok(registration) => registration,
        Err(errors) => {
            let page = form_page(&state, &operator, Some(&app), values, oidc_draft, errors);
            return Ok(render(StatusCode::BAD_REQUEST, &page));
        }
    };
    permission_flags(&operator, &mut registration.input, app.permissions());
    let updated = registration::update(
        &state.store,
        &state.keys,
        &state.settings,
        app.id,
        registration,
        None,
    )
    .await
    .map_err(registration_failed)?
    .ok_or(WebError::NotFound)?;
    tracing::info!(user_id = operator.user.id, client_id = %updated.app.client_id, "application updated");
    // A public client turned confidential has its first secret, shown once like any other.
    let flash = match updated.secret {
        Some(secret) => Flash {
            notice: "Saved. The application is now confidential: here is its first secret.".into(),
            secret: Some(secret),
        },
        None => flash::notice("Saved."),
    };
    flash::redirect(&state.store, &operator, &detail_path(updated.app.id), flash).await
}

/// Asks before regenerating, and for how long the current secret keeps working (default: not
/// at all).
async fn regenerate_page(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
) -> WebResult {
    let app = load_owned(&state, &operator, &id).await?;
    if app.client_type != ClientType::Confidential {
        return Ok(see_other(&detail_path(app.id)));
    }
    Ok(render(
        StatusCode::OK,
        &ApplicationRegenerate {
            nav: Nav::of(&operator),
            app,
        },
    ))
}

async fn regenerate(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let app = load_owned(&state, &operator, &id).await?;
    if app.client_type != ClientType::Confidential {
        return Ok(see_other(&detail_path(app.id)));
    }
    // The grace the form chose (absent: none); anything else is a bad request.
    let grace = match form.get("grace") {
        None => std::time::Duration::ZERO,
        Some(text) => registration::parse_grace(text).map_err(|_| WebError::BadRequest)?,
    };
    let secret = registration::rotate_secret(&state.store, app.id, grace)
        .await
        .map_err(registration_failed)?
        .ok_or(WebError::NotFound)?;
    tracing::info!(user_id = operator.user.id, client_id = %app.client_id, grace_seconds = grace.as_secs(), "client secret regenerated");
    let notice = if grace.is_zero() {
        "New secret generated. The previous secret no longer works.".to_owned()
    } else {
        format!(
            "New secret generated. The previous secret keeps working for {} more seconds.",
            grace.as_secs()
        )
    };
    let flash = Flash {
        notice,
        secret: Some(secret),
    };
    flash::redirect(&state.store, &operator, &detail_path(app.id), flash).await
}

async fn delete_page(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
) -> WebResult {
    let app = load_owned(&state, &operator, &id).await?;
    Ok(render(
        StatusCode::OK,
        &ApplicationDelete {
            nav: Nav::of(&operator),
            app,
        },
    ))
}

async fn delete(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    form: FormData,
) -> WebResult {
    csrf::verify(&operator, &form)?;
    let app = load_owned(&state, &operator, &id).await?;
    registration::delete(&state.store, app.id)
        .await
        .map_err(registration_failed)?;
    tracing::info!(user_id = operator.user.id, client_id = %app.client_id, "application deleted");
    Ok(see_other("/o/applications/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_form_becomes_an_input() {
        let settings = Settings::for_tests("sqlite::memory:");
        let (_, input) = validate(
            &settings,
            &[],
            &FormData::from_pairs(&[
                ("name", " App "),
                ("client_type", "confidential"),
                ("grant_type", "authorization-code"),
                (
                    "redirect_uris",
                    "https://a.example/cb\r\nhttp://localhost:8080/cb",
                ),
                ("scope", "read"),
                ("scope", "read"),
                ("scope", "write"),
                ("may_introspect", "on"),
                ("may_use_ssf", "on"),
            ]),
        );
        let input = input.unwrap();
        assert_eq!(input.name, "App");
        assert_eq!(input.grant_type, GrantType::AuthorizationCode);
        assert_eq!(
            input.redirect_uris,
            "https://a.example/cb http://localhost:8080/cb"
        );
        assert_eq!(input.allowed_scopes, ["read", "write"]);
        assert!(input.may_introspect);
        assert!(input.may_use_ssf);
    }

    #[test]
    fn refusals_name_their_field() {
        let settings = Settings::for_tests("sqlite::memory:");
        let (values, input) = validate(
            &settings,
            &[],
            &FormData::from_pairs(&[
                ("name", ""),
                ("client_type", "public"),
                ("grant_type", "client-credentials"),
                ("redirect_uris", "ftp://x"),
                ("scope", "nope"),
            ]),
        );
        let errors = input.unwrap_err();
        for field in ["name", "grant_type", "redirect_uris", "scope"] {
            assert!(errors.get(field).is_some(), "{field}");
        }
        assert_eq!(values.client_type, "public");
        let (_, input) = validate(
            &settings,
            &[],
            &FormData::from_pairs(&[
                ("name", "x"),
                ("client_type", "secret"),
                ("grant_type", "authorization-code"),
            ]),
        );
        let errors = input.unwrap_err();
        assert!(errors.get("client_type").is_some());
        assert!(errors.get("redirect_uris").is_some());
    }
}
