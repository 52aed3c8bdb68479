//! The revocation stream's receiver: an OpenID Shared Signals Framework (SSF 1.0) receiver that
//! polls a transmitter (RFC 8936) for Security Event Tokens (RFC 8417) and applies their CAEP
//! events to the gate: the introspection cache evicted by `jti`, subject or client, and the
//! deny-list of [`crate::revoked`] that every checked token (introspected or a JWT, cached or
//! not) is screened against.
//!
//! [`config`] is the `revocation:` section, [`set`] the verification of one SET, [`link`] the
//! conversation with the transmitter. A [`Receiver`] is built with its gate and carried over on a
//! reload, as the introspection client is; its task ends when the last gate holding it goes.

pub mod config;
pub mod link;
pub mod set;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::checker::TokenChecker;
use crate::jwt::JwtValidator;
use crate::revoked::Revoked;
pub use config::{RawRevocation, RevocationSettings};
use link::Targets;

struct Inner {
    settings: RevocationSettings,
    revoked: Arc<Revoked>,
    targets: Targets,
    started: AtomicBool,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

/// One revocation stream receiver. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("settings", &self.inner.settings)
            .field("health", &self.inner.revoked.health())
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// A receiver for `settings`; its task starts at once inside a tokio runtime, else on
    /// [`Receiver::start`] (the gate calls it on its first request).
    pub fn new(settings: RevocationSettings) -> Receiver {
        let receiver = Receiver {
            inner: Arc::new(Inner {
                revoked: Arc::new(Revoked::new(settings.lifetimes)),
                settings,
                targets: Arc::default(),
                started: AtomicBool::new(false),
                task: Mutex::new(None),
            }),
        };
        receiver.start();
        receiver
    }

    /// Starts the task if it has not started and a tokio runtime is at hand.
    pub fn start(&self) {
        let inner = &*self.inner;
        if inner.started.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let task = runtime.spawn(link::run(
            inner.settings.clone(),
            inner.revoked.clone(),
            inner.targets.clone(),
        ));
        *inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// The state the checker and the gate read.
    pub fn revoked(&self) -> &Arc<Revoked> {
        &self.inner.revoked
    }

    pub fn settings(&self) -> &RevocationSettings {
        &self.inner.settings
    }

    /// The introspection client whose cache events evict from.
    pub fn evict_from(&self, checker: &TokenChecker) {
        self.inner
            .targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .checker = Some(checker.clone());
    }

    /// The JWT validator told when a signing key is withdrawn.
    pub fn refresh_keys_of(&self, jwt: &JwtValidator) {
        self.inner
            .targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .jwt = Some(jwt.clone());
    }
}
