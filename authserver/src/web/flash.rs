//! Post/redirect/get for the views: a successful POST leaves a one-time message (a "saved"
//! notice, and a new client secret to show once) in a server-side slot, then redirects to
//! `<page>?flash=<random id>`; the GET of that page, by the same session, takes the slot and
//! shows it. A reload finds the slot gone: it repeats no POST and shows no secret.
//!
//! The slots live in this process for [`SLOT_LIFETIME`]; behind a load balancer without sticky
//! sessions the GET may reach another replica and show no secret (regenerate it there).

use super::session::{Operator, SignedIn};
use crate::secrets::random_token;
use axum::response::{IntoResponse, Redirect, Response};
use moka::future::Cache;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a slot waits for its GET.
pub(crate) const SLOT_LIFETIME: Duration = Duration::from_secs(300);
/// The query parameter that names a slot.
pub(crate) const PARAMETER: &str = "flash";

/// What one redirect carries to the page it lands on. No `Debug`: it may hold a secret.
#[derive(Clone)]
pub(crate) struct Flash {
    pub notice: String,
    /// A client secret to show this once.
    pub secret: Option<String>,
}

/// A slot and whom it is for: the session (by its CSRF token) and the page.
#[derive(Clone)]
struct Slot {
    user_id: i64,
    session: String,
    path: String,
    flash: Flash,
}

static SLOTS: LazyLock<Cache<String, Slot>> = LazyLock::new(|| {
    Cache::builder()
        .max_capacity(10_000)
        .time_to_live(SLOT_LIFETIME)
        .build()
});

/// Whose session a slot is for: an operator's, or any signed-in user's.
pub(crate) trait Session {
    fn user_id(&self) -> i64;
    /// The random value naming the session ([`SignedIn::csrf_token`]).
    fn session(&self) -> &str;
}

impl Session for Operator {
    fn user_id(&self) -> i64 {
        self.user.id
    }
    fn session(&self) -> &str {
        &self.csrf_token
    }
}

impl Session for SignedIn {
    fn user_id(&self) -> i64 {
        self.user.id
    }
    fn session(&self) -> &str {
        &self.csrf_token
    }
}

/// `303 See Other` to `path` (a local path without a query) carrying `flash` to its GET.
pub(crate) async fn redirect(operator: &impl Session, path: &str, flash: Flash) -> Response {
    let id = random_token();
    let slot = Slot {
        user_id: operator.user_id(),
        session: operator.session().to_owned(),
        path: path.to_owned(),
        flash,
    };
    SLOTS.insert(id.clone(), slot).await;
    Redirect::to(&format!("{path}?{PARAMETER}={id}")).into_response()
}

/// The flash left for this session on `path` under `id`, taken: the next call gets nothing.
pub(crate) async fn take(operator: &impl Session, path: &str, id: Option<&str>) -> Option<Flash> {
    let id = id?;
    let slot = SLOTS.get(id).await?;
    let ours = slot.user_id == operator.user_id()
        && slot.session == operator.session()
        && slot.path == path;
    if !ours {
        return None;
    }
    SLOTS.remove(id).await.map(|slot| slot.flash)
}

/// A notice alone.
pub(crate) fn notice(text: impl Into<String>) -> Flash {
    Flash {
        notice: text.into(),
        secret: None,
    }
}

/// The `?flash=` of a page that may receive one.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct FlashQuery {
    pub flash: Option<String>,
}
