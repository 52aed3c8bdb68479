//! Post/redirect/get for the views: a successful POST leaves a one-time message (a "saved"
//! notice, and a new client secret to show once) in the store, then redirects to
//! `<page>?flash=<random id>`; the GET of that page, by the same session, takes the message and
//! shows it. A reload finds it gone: it repeats no POST and shows no secret.
//!
//! Kept in the database, so that behind a load balancer without sticky sessions the GET may
//! reach any replica (docs/scaling.md). It is taken by deleting it (one statement: of two
//! requests only one gets it), lives at most [`LIFETIME`], and is sealed (AES-256-GCM) under a
//! key derived from the session's cookie value and the message's id, neither of which the
//! database holds (it keeps their SHA-256 digests): someone who reads the database, or a backup,
//! cannot open a secret, even within its minute.

use super::WebError;
use super::session::{Operator, SignedIn};
use crate::secrets::{digest, random_token};
use crate::store::{NewFlash, Store};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA256, Salt};
use ring::rand::{SecureRandom, SystemRandom};

/// How long a message waits for its GET (seconds): the browser follows the redirect at once.
pub(crate) const LIFETIME: i64 = 60;
/// The query parameter that names a message.
pub(crate) const PARAMETER: &str = "flash";

/// What one redirect carries to the page it lands on. No `Debug`: it may hold a secret.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Flash {
    pub notice: String,
    /// A client secret to show this once.
    pub secret: Option<String>,
}

/// The session a message is for, by its cookie value (the session's bearer secret, which the
/// store keeps only as a digest).
pub(crate) trait Session {
    fn session_cookie(&self) -> &str;
}

impl Session for Operator {
    fn session_cookie(&self) -> &str {
        &self.session_cookie
    }
}

impl Session for SignedIn {
    fn session_cookie(&self) -> &str {
        &self.session_cookie
    }
}

/// The key of one message: HKDF-SHA256 of the session's cookie value, expanded for its id.
fn key(session_cookie: &str, id: &str) -> LessSafeKey {
    let prk = Salt::new(HKDF_SHA256, b"tokengate flash v1").extract(session_cookie.as_bytes());
    let info = [id.as_bytes()];
    let okm = prk
        .expand(&info, &AES_256_GCM)
        .expect("HKDF-SHA256 yields an AES-256 key");
    LessSafeKey::new(UnboundKey::from(okm))
}

/// `flash` sealed for the page `path`: base64 of a random nonce, the ciphertext and its tag.
fn seal(session_cookie: &str, id: &str, path: &str, flash: &Flash) -> Result<String, WebError> {
    let failed = |what: &str| WebError::Internal(format!("cannot seal a one-time message: {what}"));
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| failed("no randomness"))?;
    let mut sealed = serde_json::to_vec(flash).map_err(|_| failed("serialization"))?;
    key(session_cookie, id)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(path.as_bytes()),
            &mut sealed,
        )
        .map_err(|_| failed("encryption"))?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Ok(STANDARD.encode(out))
}

/// What [`seal`] sealed, or nothing if it does not open for this session, id and page.
fn open(session_cookie: &str, id: &str, path: &str, sealed: &str) -> Option<Flash> {
    let bytes = STANDARD.decode(sealed).ok()?;
    let (nonce, sealed) = bytes.split_at_checked(NONCE_LEN)?;
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut sealed = sealed.to_vec();
    let plain = key(session_cookie, id)
        .open_in_place(nonce, Aad::from(path.as_bytes()), &mut sealed)
        .ok()?;
    serde_json::from_slice(plain).ok()
}

/// `303 See Other` to `path` (a local path without a query) carrying `flash` to its GET.
pub(crate) async fn redirect(
    store: &Store,
    session: &impl Session,
    path: &str,
    flash: Flash,
) -> Result<Response, WebError> {
    let id = random_token();
    let cookie = session.session_cookie();
    let sealed = seal(cookie, &id, path, &flash)?;
    store
        .put_flash(&NewFlash {
            id_digest: &digest(&id),
            session_digest: &digest(cookie),
            path,
            sealed: &sealed,
            lifetime: LIFETIME,
        })
        .await?;
    Ok(Redirect::to(&format!("{path}?{PARAMETER}={id}")).into_response())
}

/// The flash left for this session on `path` under `id`, taken: the next call gets nothing.
pub(crate) async fn take(
    store: &Store,
    session: &impl Session,
    path: &str,
    id: Option<&str>,
) -> Result<Option<Flash>, WebError> {
    let Some(id) = id else { return Ok(None) };
    let cookie = session.session_cookie();
    let sealed = store.take_flash(&digest(id), &digest(cookie), path).await?;
    Ok(sealed.and_then(|sealed| open(cookie, id, path, &sealed)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_message_opens_only_for_its_session_id_and_page() {
        let (cookie, id) = (random_token(), random_token());
        let flash = Flash {
            notice: "Saved.".into(),
            secret: Some("the-secret".into()),
        };
        let sealed = seal(&cookie, &id, "/p/", &flash).unwrap();
        assert!(!sealed.contains("the-secret") && !sealed.contains("Saved"));
        let opened = open(&cookie, &id, "/p/", &sealed).expect("opens");
        assert_eq!(opened.secret.as_deref(), Some("the-secret"));
        assert!(
            open(&random_token(), &id, "/p/", &sealed).is_none(),
            "another session"
        );
        assert!(
            open(&cookie, &random_token(), "/p/", &sealed).is_none(),
            "another id"
        );
        assert!(open(&cookie, &id, "/q/", &sealed).is_none(), "another page");
        assert!(open(&cookie, &id, "/p/", "not base64!").is_none());
        assert!(open(&cookie, &id, "/p/", "AAAA").is_none());
    }
}
