//! The one registration service of applications: create, update, rotate a secret, delete. The
//! command line, the views, the stack's first start and dynamic client registration (RFC 7591,
//! [`dynamic`]) all register through it. Each call is one transaction; the rules are
//! [`crate::validation`]'s; every signing key a registration needs is stored with it and in this
//! process's JWKS before the call returns (other processes' within [`crate::jwt::KEY_CACHE_TTL`]);
//! a failure stores nothing.

pub mod dynamic;

use crate::config::{AccessTokenFormat, Settings};
use crate::domain::{Permissions, TlsClientAuth, permits};
use crate::jwt::{Alg, KeyRing, keys};
use crate::protocol::oidc::OPENID;
use crate::store::signing_keys::StoredSigningKey;
use crate::store::{
    Application, ApplicationInput, ClientType, DynamicRecord, GrantType, NewRegistration,
    OidcClient, RegistrationUpdate, Store, StoreError, now,
};
use crate::validation::{self, ApplicationDraft, OidcDraft, Refusals};

/// Most characters in a client id an operator chooses.
const MAX_CLIENT_ID: usize = 100;

/// How often a registration is tried again when another process took the generation of the
/// signing key it was adding.
const KEY_RACE_ATTEMPTS: usize = 3;

/// An application's settings, checked: what every registration stores.
#[derive(Debug, Clone)]
pub struct Registration {
    pub input: ApplicationInput,
    /// Authentication by client certificate (RFC 8705) instead of a secret.
    pub tls_client_auth: Option<TlsClientAuth>,
    /// Every token request with a DPoP proof (RFC 9449).
    pub dpop_required: bool,
    pub oidc: OidcClient,
}

impl Registration {
    /// Checks the application's fields and its OpenID Connect fields by the shared rules; on
    /// refusal, every message of either, by form field.
    pub fn check(
        settings: &Settings,
        resource_scopes: &[String],
        app: &ApplicationDraft,
        oidc: &OidcDraft,
    ) -> Result<Registration, Refusals> {
        match (
            validation::application(settings, resource_scopes, app),
            validation::oidc_registration(oidc),
        ) {
            (Ok(input), Ok(oidc)) => Ok(Registration {
                input,
                tls_client_auth: app.tls_client_auth(),
                dpop_required: app.dpop_required,
                oidc,
            }),
            (input, oidc) => {
                let mut refusals = input.err().unwrap_or_default();
                for (field, message) in oidc.err().unwrap_or_default().iter() {
                    refusals.add(field, message.to_owned());
                }
                Err(refusals)
            }
        }
    }

    /// The signing-key types its tokens need: Ed25519 for JWT access tokens, the ID-token
    /// algorithm for a client of the authorization code grant that may ask for `openid` (an
    /// empty scope list allows every scope, `openid` included).
    pub fn needed_keys(&self, settings: &Settings) -> Vec<Alg> {
        let mut algs = Vec::new();
        let format = self
            .input
            .token_format
            .unwrap_or(settings.access_token_format);
        if format == AccessTokenFormat::Jwt {
            algs.push(Alg::EdDSA);
        }
        let permissions = Permissions {
            introspect: self.input.may_introspect,
            ssf: self.input.may_use_ssf,
        };
        if self.input.grant_type == GrantType::AuthorizationCode
            && permits(&self.input.allowed_scopes, permissions, OPENID)
        {
            let alg = Alg::parse(&self.oidc.id_token_alg).unwrap_or(Alg::RS256);
            if !algs.contains(&alg) {
                algs.push(alg);
            }
        }
        algs
    }
}

/// A new application.
#[derive(Debug, Clone)]
pub struct Create {
    pub registration: Registration,
    pub owner_id: Option<i64>,
    /// Chosen by an operator (None: random).
    pub client_id: Option<String>,
    /// Chosen by an operator (None: random, for a confidential client without a certificate).
    pub client_secret: Option<String>,
    /// The record of a client registering itself.
    pub dynamic: Option<DynamicRecord>,
}

/// A stored application, and its secret, shown this once.
#[derive(Debug, Clone)]
pub struct Registered {
    pub app: Application,
    pub secret: Option<String>,
}

/// Why a registration stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// A value the rules refuse, by field (the form's field names, and `client_id`,
    /// `client_secret`).
    #[error("{}", describe(.0))]
    Refused(Refusals),
    /// The signing keys its tokens need cannot be made or read (no key-encryption key).
    #[error("its tokens need a {alg} signing key, and {problem}; nothing was stored")]
    Keys { alg: &'static str, problem: String },
    /// A secret asked of a client that has none.
    #[error("a public client has no secret")]
    PublicClient,
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn describe(refusals: &Refusals) -> String {
    let lines: Vec<String> = refusals
        .iter()
        .map(|(field, message)| format!("{field}: {message}"))
        .collect();
    lines.join("\n")
}

fn refused(field: &'static str, message: &str) -> RegistrationError {
    let mut refusals = Refusals::default();
    refusals.add(field, message);
    RegistrationError::Refused(refusals)
}

/// A client id an operator chose: 1–100 characters, no control characters, not all digits
/// (a client's tokens carry its client id as `sub`, a user's the user's numeric id: an
/// all-digit client id could pass for a user, RFC 9068 §5).
pub fn client_id_problem(id: &str) -> Option<String> {
    if let Err(message) = validation::length(id, "The client id", true, MAX_CLIENT_ID) {
        return Some(message);
    }
    if id.bytes().all(|b| b.is_ascii_digit()) {
        return Some("may not be all digits (users' ids are)".into());
    }
    None
}

/// The secret to keep for `create`: the operator's (checked), a random one, or none (public,
/// or authenticating by certificate).
fn secret_of(create: &Create) -> Result<Option<String>, RegistrationError> {
    let registration = &create.registration;
    let confidential = registration.input.client_type == ClientType::Confidential;
    let certificate = registration.tls_client_auth.is_some();
    match (&create.client_secret, confidential, certificate) {
        (Some(_), _, true) => Err(refused(
            "client_secret",
            "A client authenticating with a certificate has no secret.",
        )),
        (Some(_), false, _) => Err(refused("client_secret", "A public client has no secret.")),
        (Some(secret), true, false) => {
            validation::client_secret(secret).map_err(|m| refused("client_secret", &m))?;
            Ok(Some(secret.clone()))
        }
        (None, true, false) => Ok(Some(crate::secrets::random_token())),
        (None, _, _) => Ok(None),
    }
}

/// The first keys of the types in `algs` that no stored key has yet, made now; an error when
/// one must be made (or the keys read) and the store cannot.
async fn keys_to_add(
    store: &Store,
    ring: &KeyRing,
    algs: &[Alg],
) -> Result<Vec<StoredSigningKey>, RegistrationError> {
    let Some(first) = algs.first() else {
        return Ok(Vec::new());
    };
    let keys_error = |alg: Alg, problem: String| RegistrationError::Keys {
        alg: alg.as_str(),
        problem,
    };
    let current = ring
        .reload(store)
        .await
        .map_err(|e| keys_error(*first, e.to_string()))?;
    let mut generation = current.next_generation();
    let mut added = Vec::new();
    for &alg in algs {
        if current.has(alg) {
            continue;
        }
        store
            .can_store_signing_keys()
            .map_err(|e| keys_error(alg, e.to_string()))?;
        let at = now();
        let key = keys::generate_for(alg, generation, at, at)
            .map_err(|e| keys_error(alg, e.to_string()))?;
        generation += 1;
        added.push(key);
    }
    Ok(added)
}

/// Whether a store error is another process taking the generation of a key being added.
fn key_race(error: &StoreError) -> bool {
    matches!(error, StoreError::Conflict(what) if what.contains("signing key"))
}

/// Registers a new application, with the signing keys its tokens need, in one transaction.
pub async fn create(
    store: &Store,
    ring: &KeyRing,
    settings: &Settings,
    create: Create,
) -> Result<Registered, RegistrationError> {
    if let Some(problem) = create.client_id.as_deref().and_then(client_id_problem) {
        return Err(refused("client_id", &problem));
    }
    let secret = secret_of(&create)?;
    let Create {
        registration,
        owner_id,
        client_id,
        dynamic,
        ..
    } = create;
    let algs = registration.needed_keys(settings);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let new = NewRegistration {
            input: registration.input.clone(),
            tls_client_auth: registration.tls_client_auth.clone(),
            dpop_required: registration.dpop_required,
            oidc: Some(registration.oidc.clone()),
            owner_id,
            client_id: client_id.clone(),
            secret: secret.clone(),
            keys: keys_to_add(store, ring, &algs).await?,
            dynamic: dynamic.clone(),
        };
        match store.register(&new).await {
            Ok(app) => {
                if !new.keys.is_empty() {
                    ring.reload(store).await?;
                }
                return Ok(Registered { app, secret });
            }
            Err(error) if key_race(&error) => {
                if attempt < KEY_RACE_ATTEMPTS {
                    continue;
                }
                return Err(error.into());
            }
            Err(StoreError::Conflict(_)) => {
                return Err(refused(
                    "client_id",
                    "An application with that client id already exists.",
                ));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// A changed application.
#[derive(Debug, Clone)]
pub struct Updated {
    pub app: Application,
    /// Its first secret, shown this once, when a public client became confidential.
    pub secret: Option<String>,
}

/// Stores the changed registration of application `id` (and, for a client that registered
/// itself, its metadata as now registered) with the keys it needs, in one transaction; None when
/// there is no such application. A client that became confidential without a certificate or a
/// secret gets its first secret.
pub async fn update(
    store: &Store,
    ring: &KeyRing,
    settings: &Settings,
    id: i64,
    registration: Registration,
    metadata: Option<String>,
) -> Result<Option<Updated>, RegistrationError> {
    let Some(current) = store.get_application(id).await? else {
        return Ok(None);
    };
    let secret = (registration.input.client_type == ClientType::Confidential
        && registration.tls_client_auth.is_none()
        && current.client_secret_digest.is_none())
    .then(crate::secrets::random_token);
    let algs = registration.needed_keys(settings);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let update = RegistrationUpdate {
            input: registration.input.clone(),
            tls_client_auth: registration.tls_client_auth.clone(),
            dpop_required: registration.dpop_required,
            oidc: registration.oidc.clone(),
            keys: keys_to_add(store, ring, &algs).await?,
            secret: secret.clone(),
            metadata: metadata.clone(),
        };
        match store.save_registration(id, &update).await {
            Ok(Some(app)) => {
                if !update.keys.is_empty() {
                    ring.reload(store).await?;
                }
                return Ok(Some(Updated {
                    app,
                    secret: secret.clone(),
                }));
            }
            Ok(None) => return Ok(None),
            Err(error) if key_race(&error) && attempt < KEY_RACE_ATTEMPTS => continue,
            Err(error) => return Err(error.into()),
        }
    }
}

/// A rotation's grace period as an operator writes it (`0`, `3600`, `15m`, `1h`, `7d`; at most
/// ten years), for the command line and the views alike; the refusal says what is expected.
pub fn parse_grace(text: &str) -> Result<std::time::Duration, String> {
    resource_server::settings::parse_duration(text)
        .ok()
        .filter(|d| d.as_secs() <= crate::config::MAX_SECONDS as u64)
        .ok_or_else(|| "a duration up to ten years, like 0, 3600, 15m, 1h or 7d".to_owned())
}

/// Gives confidential application `id` a new random secret, returned this once; None when there
/// is no such application. The secret it replaces stays accepted for `grace` (zero: it stops
/// working at once), so the clients holding it can be given the new one without an outage; a
/// later rotation replaces it.
pub async fn rotate_secret(
    store: &Store,
    id: i64,
    grace: std::time::Duration,
) -> Result<Option<String>, RegistrationError> {
    let Some(app) = store.get_application(id).await? else {
        return Ok(None);
    };
    if app.client_type != ClientType::Confidential {
        return Err(RegistrationError::PublicClient);
    }
    Ok(store.regenerate_secret(id, grace).await?)
}

/// Deletes application `id` and every token issued to it (their events go to the revocation
/// stream); whether it existed.
pub async fn delete(store: &Store, id: i64) -> Result<bool, RegistrationError> {
    Ok(store.delete_application(id).await?)
}
