//! The receiver's conversation with one SSF transmitter ([`run`]): the SSF configuration
//! (SSF 1.0 §7.1), an access token by client credentials (scopes `ssf.read ssf.manage`), a
//! poll stream created (§8.1.1), then RFC 8936 long polls for ever, acknowledging each SET once
//! it is verified and applied (and refusing the others in `setErrs`). A failed call is retried
//! with backoff on the same stream, so the transmitter redelivers what was not acknowledged; a
//! stream answered 404 is gone (events may have been lost): caches are flushed and a new stream
//! is created.
//!
//! Once a stream is created the receiver asks for a verification event (SSF 1.0 §8.1.4, when
//! the transmitter offers a `verification_endpoint`) and counts it when it arrives. A stream
//! that is not `enabled` delivers nothing: the receiver reads its status (`status_endpoint`)
//! after every poll that ended with nothing, and takes a stream-updated event's status, and the
//! stream is unhealthy (short cache lifetimes) until it is enabled again.
//!
//! The transmitter is reached where its configuration was fetched: URLs it names at its
//! issuer's origin (stream, JWKS, metadata, token endpoint) are taken at the configuration URL's
//! origin instead, when the two differ (a sidecar reaches the authorization server at an
//! internal address, while its issuer is the public front door).
//!
//! With `replica_urls`, a call that finds the current replica unreachable (a transport failure,
//! a 5xx) turns to the next one: the same stream (the replicas share its log) polled there, with
//! the acknowledgements not yet delivered, so the receiver resumes where it was and loses nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Map, Value, json};

use super::config::RevocationSettings;
use super::set::{SetVerifier, events_requested};
use crate::bounded_body::BodyError;
use crate::checker::TokenChecker;
use crate::jwt::JwtValidator;
use crate::outage::{Backoff, FAILURE_LOG_INTERVAL, LogLimiter};
use crate::revoked::Revoked;

/// RFC 8936 poll delivery.
pub const POLL_METHOD: &str = "urn:ietf:rfc:8936";
/// SETs asked for in one poll.
const MAX_EVENTS: usize = 100;
/// Retries of a failed call: 100 ms doubling to 5 s.
const RETRY: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(5),
};

/// The largest answer read from the transmitter but a poll's (configuration, metadata, token,
/// stream): as introspection's.
const MAX_ANSWER: usize = crate::introspection::MAX_ANSWER;
/// The largest poll answer: [`MAX_EVENTS`] SETs of up to 16 KiB each. A transmitter that sends
/// more is answered as one that failed (retried with backoff); nothing past it is buffered.
const MAX_POLL_ANSWER: usize = MAX_EVENTS * 16 * 1024;

/// The JSON of an answer, read up to `max` bytes ([`crate::bounded_body`]).
async fn json_of(mut r: reqwest::Response, what: &str, max: usize) -> Result<Value, Failure> {
    let body = crate::bounded_body::read(&mut r, max)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => {
                Failure::Retry(format!("{what}: the answer is larger than {max} bytes"))
            }
            BodyError::Transport(e) => transport(what, &e),
        })?;
    serde_json::from_slice(&body).map_err(|e| Failure::Retry(format!("{what}: not JSON: {e}")))
}

/// What events act on besides the deny-list: the gate's introspection cache (evicted from) and
/// JWT validator (keys refetched when one is withdrawn), set when the gate is built.
#[derive(Clone, Default)]
pub struct Target {
    pub checker: Option<TokenChecker>,
    pub jwt: Option<JwtValidator>,
}

pub type Targets = Arc<Mutex<Target>>;

/// Why a step failed.
#[derive(Debug)]
enum Failure {
    /// Worth a retry after the backoff; logged (rate-limited).
    Retry(String),
    /// As `Retry`, and the replica may be down: the next one is tried.
    Unreachable(String),
    /// The stream is gone: flush, then create another at once.
    StreamLost,
}

fn transport(what: &str, e: &reqwest::Error) -> Failure {
    let why = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        format!("transport: {e}")
    };
    Failure::Unreachable(format!("{what}: {why}"))
}

/// A failure for an HTTP status other than success: the replica is unwell on a 5xx.
fn answered(what: &str, status: StatusCode) -> Failure {
    let why = format!("{what}: answered HTTP {}", status.as_u16());
    if status.is_server_error() {
        Failure::Unreachable(why)
    } else {
        Failure::Retry(why)
    }
}

struct Discovered {
    configuration_endpoint: String,
    /// SSF 1.0 §7.1's optional endpoints, when offered.
    status_endpoint: Option<String>,
    verification_endpoint: Option<String>,
    token_url: String,
    verifier: SetVerifier,
}

struct Token {
    value: String,
    renew_at: Instant,
}

struct Link {
    http: reqwest::Client,
    s: RevocationSettings,
    revoked: Arc<Revoked>,
    targets: Targets,
    /// Which of `configuration_url` and `replica_urls` is talked to.
    replica: usize,
    /// Replicas turned away from since the last success.
    failed_over: usize,
    discovered: Option<Discovered>,
    token: Option<Token>,
    /// The stream's id and poll endpoint.
    stream: Option<(String, String)>,
    acks: Vec<String>,
    errs: Map<String, Value>,
    /// The `state` of the verification asked for on the current stream, until it arrives.
    verification: Option<String>,
}

/// Runs the receiver for ever (the task is aborted when the gate goes).
pub async fn run(s: RevocationSettings, revoked: Arc<Revoked>, targets: Targets) {
    let http = match reqwest::Client::builder()
        .connect_timeout(s.timeout)
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "revocation receiver: cannot build the HTTP client");
            return;
        }
    };
    let mut link = Link {
        http,
        s,
        revoked,
        targets,
        replica: 0,
        failed_over: 0,
        discovered: None,
        token: None,
        stream: None,
        acks: Vec::new(),
        errs: Map::new(),
        verification: None,
    };
    let log = LogLimiter::new(FAILURE_LOG_INTERVAL);
    let mut failures = 0u32;
    loop {
        match link.step().await {
            Ok(()) => {
                failures = 0;
                link.failed_over = 0;
                if let Some(unreported) = log.success() {
                    tracing::info!(unreported, "revocation stream answering again");
                }
            }
            Err(Failure::StreamLost) => {
                tracing::warn!("revocation stream gone (404): caches flushed, creating another");
            }
            Err(Failure::Unreachable(why)) if link.fail_over() => {
                link.revoked
                    .metrics
                    .poll_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    "revocation stream call failed: {why}; turning to {}",
                    link.configuration_url()
                );
            }
            Err(Failure::Retry(why) | Failure::Unreachable(why)) => {
                link.revoked
                    .metrics
                    .poll_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(summary) = log.failure(Instant::now()) {
                    tracing::warn!(
                        failures = summary.failures,
                        "revocation stream call failed: {why}; retrying with backoff"
                    );
                }
                tokio::time::sleep(RETRY.delay(failures)).await;
                failures = failures.saturating_add(1);
            }
        }
    }
}

impl Link {
    /// The configuration URL of the replica talked to.
    fn configuration_url(&self) -> &str {
        match self.replica {
            0 => &self.s.configuration_url,
            n => &self.s.replica_urls[n - 1],
        }
    }

    /// After `Unreachable`, moves to the next replica, if there is another: it is discovered
    /// again, the token is kept, and the stream is polled at the new replica's origin. Whether
    /// the call should be retried at once: not when every replica has failed in a row (then
    /// after the backoff, at the next).
    fn fail_over(&mut self) -> bool {
        let count = self.s.replica_urls.len() + 1;
        if count == 1 {
            return false;
        }
        self.failed_over += 1;
        let from = self.configuration_url().to_owned();
        self.replica = (self.replica + 1) % count;
        let to = self.configuration_url().to_owned();
        self.discovered = None;
        if let Some((_, url)) = &mut self.stream {
            *url = rebase(std::mem::take(url), &from, &to);
        }
        if self.failed_over >= count {
            self.failed_over = 0;
            return false;
        }
        true
    }

    /// One poll (and whatever must come before it).
    async fn step(&mut self) -> Result<(), Failure> {
        if self.discovered.is_none() {
            self.discovered = Some(self.discover().await?);
        }
        if self
            .token
            .as_ref()
            .is_none_or(|t| Instant::now() >= t.renew_at)
        {
            self.token = Some(self.fetch_token().await?);
        }
        if self.stream.is_none() {
            self.stream = Some(self.create_stream().await?);
            // Whatever happened before this stream existed is not in it; from now on every
            // event is kept for it: as good as a poll answered.
            self.flush();
            self.revoked.poll_succeeded();
            self.revoked.stream_enabled(true);
            self.ask_verification().await;
        }
        self.poll().await
    }

    fn target(&self) -> Target {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn flush(&self) {
        self.revoked.flush();
        if let Some(c) = self.target().checker {
            c.flush();
        }
    }

    async fn get_json(&self, url: &str, what: &str) -> Result<Value, Failure> {
        let r = self
            .http
            .get(url)
            .timeout(self.s.timeout)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| transport(what, &e))?;
        if !r.status().is_success() {
            return Err(answered(what, r.status()));
        }
        json_of(r, what, MAX_ANSWER).await
    }

    async fn discover(&self) -> Result<Discovered, Failure> {
        let what = "SSF configuration";
        let configuration_url = self.configuration_url();
        let c = self.get_json(configuration_url, what).await?;
        let text = |k: &str| c.get(k).and_then(Value::as_str).map(str::to_owned);
        let missing = |k: &str| Failure::Retry(format!("{what}: no {k}"));
        let issuer = text("issuer").ok_or_else(|| missing("issuer"))?;
        let configuration_endpoint =
            text("configuration_endpoint").ok_or_else(|| missing("configuration_endpoint"))?;
        if let Some(Value::Array(methods)) = c.get("delivery_methods_supported")
            && !methods.iter().any(|m| m.as_str() == Some(POLL_METHOD))
        {
            return Err(Failure::Retry(format!(
                "{what}: poll delivery ({POLL_METHOD}) not offered"
            )));
        }
        let here = |url: String| rebase(url, &issuer, configuration_url);
        let configuration_endpoint = here(configuration_endpoint);
        let jwks_uri = match &self.s.jwks_uri {
            Some(u) => u.clone(),
            None => here(text("jwks_uri").ok_or_else(|| missing("jwks_uri"))?),
        };
        let optional = |k: &str| text(k).map(&here);
        let status_endpoint = optional("status_endpoint");
        let verification_endpoint = optional("verification_endpoint");
        let token_url = match &self.s.token_url {
            Some(u) => u.clone(),
            None => here(self.token_endpoint(&here(issuer.clone())).await?),
        };
        let verifier = SetVerifier::new(&jwks_uri, &issuer, &self.s.audience)
            .map_err(|e| Failure::Retry(format!("{what}: jwks_uri {e}")))?;
        tracing::info!(%issuer, %configuration_endpoint, "revocation stream transmitter found");
        Ok(Discovered {
            configuration_endpoint,
            status_endpoint,
            verification_endpoint,
            token_url,
            verifier,
        })
    }

    /// The token endpoint from the issuer's RFC 8414 metadata (or its OpenID configuration).
    async fn token_endpoint(&self, issuer: &str) -> Result<String, Failure> {
        let issuer = issuer.trim_end_matches('/');
        let rfc8414 = match issuer
            .find("://")
            .and_then(|i| issuer[i + 3..].find('/').map(|j| i + 3 + j))
        {
            Some(path_at) => format!(
                "{}/.well-known/oauth-authorization-server{}",
                &issuer[..path_at],
                &issuer[path_at..]
            ),
            None => format!("{issuer}/.well-known/oauth-authorization-server"),
        };
        let oidc = format!("{issuer}/.well-known/openid-configuration");
        let mut last = Failure::Retry("no metadata".into());
        for url in [rfc8414, oidc] {
            match self.get_json(&url, "authorization server metadata").await {
                Ok(m) => {
                    if let Some(t) = m.get("token_endpoint").and_then(Value::as_str) {
                        return Ok(t.to_owned());
                    }
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The client secret: read from its file when it has one (a rotated secret is used at the
    /// next token request), else, or when the file cannot be read, the one read at start.
    async fn client_secret(&self) -> String {
        let Some(path) = self.s.client_secret_file.clone() else {
            return self.s.client_secret.clone();
        };
        let read =
            tokio::task::spawn_blocking(move || crate::introspection::read_secret_file(&path))
                .await;
        match read {
            Ok(Ok(secret)) => secret,
            Ok(Err(message)) => {
                tracing::warn!(%message, "revocation stream: using the client secret read at start");
                self.s.client_secret.clone()
            }
            Err(_) => self.s.client_secret.clone(),
        }
    }

    async fn fetch_token(&self) -> Result<Token, Failure> {
        let Some(d) = &self.discovered else {
            return Err(Failure::Retry("not discovered".into()));
        };
        let what = "token";
        let secret = self.client_secret().await;
        let r = self
            .http
            .post(&d.token_url)
            .timeout(self.s.timeout)
            .basic_auth(&self.s.client_id, Some(&secret))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "ssf.read ssf.manage"),
            ])
            .send()
            .await
            .map_err(|e| transport(what, &e))?;
        let status = r.status();
        if status.is_server_error() {
            return Err(answered(what, status));
        }
        if !status.is_success() {
            // RFC 6749 §5.2's error code says why (invalid_client, invalid_scope...).
            let body = json_of(r, what, MAX_ANSWER).await.unwrap_or(Value::Null);
            let error = body.get("error").and_then(Value::as_str).unwrap_or("-");
            return Err(Failure::Retry(format!(
                "{what}: the token endpoint answered HTTP {} ({error}) to client {:?} asking for \
                 ssf.read ssf.manage",
                status.as_u16(),
                self.s.client_id
            )));
        }
        let body = json_of(r, what, MAX_ANSWER).await?;
        let value = body
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::Retry(format!("{what}: no access_token")))?;
        let lifetime = body
            .get("expires_in")
            .and_then(Value::as_u64)
            .unwrap_or(300);
        // Renewed at 80 % of its life: never used past it.
        let renew = Duration::from_secs(lifetime.saturating_mul(4) / 5);
        Ok(Token {
            value: value.to_owned(),
            renew_at: Instant::now() + renew,
        })
    }

    fn bearer(&self) -> String {
        self.token
            .as_ref()
            .map_or_else(String::new, |t| format!("Bearer {}", t.value))
    }

    /// A status that means the token is not (or no longer) good: drop it.
    fn refused(&mut self, what: &str, status: StatusCode) -> Failure {
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            self.token = None;
        }
        answered(what, status)
    }

    async fn create_stream(&mut self) -> Result<(String, String), Failure> {
        let Some(d) = &self.discovered else {
            return Err(Failure::Retry("not discovered".into()));
        };
        let what = "stream creation";
        let r = self
            .http
            .post(&d.configuration_endpoint)
            .timeout(self.s.timeout)
            .header("authorization", self.bearer())
            .json(&json!({
                "delivery": {"method": POLL_METHOD},
                "events_requested": events_requested(),
            }))
            .send()
            .await
            .map_err(|e| transport(what, &e))?;
        let status = r.status();
        if !status.is_success() {
            return Err(self.refused(what, status));
        }
        let body = json_of(r, what, MAX_ANSWER).await?;
        let id = body.get("stream_id").and_then(Value::as_str);
        let delivery = &body["delivery"];
        let issuer = body.get("iss").and_then(Value::as_str).unwrap_or_default();
        let url = delivery
            .get("endpoint_url")
            .and_then(Value::as_str)
            .map(|u| rebase(u.to_owned(), issuer, self.configuration_url()));
        let (Some(id), Some(url)) = (id, url) else {
            return Err(Failure::Retry(format!(
                "{what}: no stream_id or delivery.endpoint_url"
            )));
        };
        if delivery
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| m != POLL_METHOD)
        {
            return Err(Failure::Retry(format!("{what}: not a poll stream")));
        }
        self.revoked
            .metrics
            .streams_created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Acks and errors of a former stream mean nothing to this one.
        self.acks.clear();
        self.errs.clear();
        tracing::info!(stream_id = id, "revocation stream created");
        Ok((id.to_owned(), url))
    }

    /// Asks for a verification event on the new stream (SSF 1.0 §8.1.4.2). Its failure is
    /// logged, not retried: the stream works without it.
    async fn ask_verification(&mut self) {
        let (Some(d), Some((id, _))) = (&self.discovered, &self.stream) else {
            return;
        };
        let Some(url) = &d.verification_endpoint else {
            return;
        };
        // Told apart from another request's by the time asked (not a secret: the SET is signed).
        let asked = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let state = format!("tokengate-{asked}");
        let answer = self
            .http
            .post(url)
            .timeout(self.s.timeout)
            .header("authorization", self.bearer())
            .json(&json!({"stream_id": id, "state": state}))
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => self.verification = Some(state),
            Ok(r) => tracing::info!(
                status = r.status().as_u16(),
                "revocation stream: verification not requested"
            ),
            Err(e) => tracing::info!(error = %e, "revocation stream: verification not requested"),
        }
    }

    /// Reads the stream's status (SSF 1.0 §8.1.2.1), when the transmitter offers it: anything
    /// but `enabled` makes the stream unhealthy. A failure changes nothing (the poll's own
    /// health rules apply).
    async fn read_status(&mut self) {
        let (Some(d), Some((id, _))) = (&self.discovered, &self.stream) else {
            return;
        };
        let Some(url) = &d.status_endpoint else {
            return;
        };
        let answer = self
            .http
            .get(url)
            .query(&[("stream_id", id)])
            .timeout(self.s.timeout)
            .header("authorization", self.bearer())
            .header("accept", "application/json")
            .send()
            .await;
        let status = match answer {
            Ok(r) if r.status().is_success() => json_of(r, "stream status", MAX_ANSWER).await.ok(),
            _ => None,
        };
        if let Some(status) = status
            .as_ref()
            .and_then(|s| s.get("status"))
            .and_then(Value::as_str)
        {
            self.stream_status(status);
        }
    }

    /// The stream's status, as read or as a stream-updated event gave it.
    fn stream_status(&self, status: &str) {
        if self.revoked.stream_enabled(status == "enabled") {
            if status == "enabled" {
                tracing::info!("revocation stream enabled again");
            } else {
                tracing::warn!(
                    status,
                    "revocation stream not enabled: unhealthy, short cache lifetimes"
                );
            }
        }
    }

    async fn poll(&mut self) -> Result<(), Failure> {
        let Some((_, url)) = self.stream.clone() else {
            return Err(Failure::Retry("no stream".into()));
        };
        let what = "poll";
        let body = json!({
            "maxEvents": MAX_EVENTS,
            "returnImmediately": false,
            "ack": self.acks,
            "setErrs": self.errs,
        });
        // A long poll held past unhealthy_after has made the stream unhealthy anyway.
        let r = self
            .http
            .post(&url)
            .timeout(self.s.lifetimes.unhealthy_after)
            .header("authorization", self.bearer())
            .json(&body)
            .send()
            .await
            .map_err(|e| transport(what, &e))?;
        let status = r.status();
        if status == StatusCode::NOT_FOUND {
            self.stream = None;
            self.revoked.stream_lost();
            self.flush();
            return Err(Failure::StreamLost);
        }
        if !status.is_success() {
            return Err(self.refused(what, status));
        }
        let answer = json_of(r, what, MAX_POLL_ANSWER).await?;
        let sets = match answer.get("sets") {
            Some(Value::Object(sets)) => sets.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => return Err(Failure::Retry(format!("{what}: sets is not an object"))),
        };
        // The transmitter has the acknowledgements now.
        self.acks.clear();
        self.errs.clear();
        self.revoked.poll_succeeded();
        self.revoked
            .metrics
            .polls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nothing = sets.is_empty();
        let mut refused = Vec::new();
        for (jti, set) in sets {
            if let Some(why) = self.receive(&jti, set.as_str().unwrap_or_default()).await {
                refused.push(why);
            }
        }
        // A paused or disabled stream answers nothing, like a quiet one: ask which it is.
        if nothing {
            self.read_status().await;
        }
        self.revoked.purge();
        // Refused events are answered in `setErrs` by the next poll, after the backoff, and
        // logged with the other failures (rate-limited): a transmitter that sends nothing but
        // bad SETs gets neither a busy loop nor a log line per event.
        match refused.first() {
            None => Ok(()),
            Some(first) => Err(Failure::Retry(format!(
                "{} security event token(s) refused (caches flushed, stream unhealthy), the first: {first}",
                refused.len()
            ))),
        }
    }

    /// Verifies and applies one SET, and queues its acknowledgement (or its error); why it was
    /// refused, if it was.
    async fn receive(&mut self, jti: &str, set: &str) -> Option<String> {
        use std::sync::atomic::Ordering::Relaxed;
        let d = self.discovered.as_ref()?;
        match d.verifier.verify(set, jti).await {
            Ok(verified) => {
                let target = self.target();
                for kid in &verified.keys_withdrawn {
                    if let Some(v) = &target.jwt {
                        v.withdraw_key(kid).await;
                    }
                    tracing::info!(set = jti, kid, "signing key withdrawn: its JWTs refused");
                }
                for r in &verified.revocations {
                    self.revoked.deny(r.subject.clone(), r.at);
                    if let Some(c) = &target.checker {
                        c.evict(&r.subject);
                    }
                    tracing::info!(set = jti, subject = ?r.subject, at = r.at, "revocation event applied");
                }
                for state in &verified.verifications {
                    if self.verification.as_ref() == Some(state) {
                        self.verification = None;
                        self.revoked.metrics.verifications.fetch_add(1, Relaxed);
                        tracing::info!(set = jti, "revocation stream verified");
                    }
                }
                if let Some(status) = &verified.stream_status {
                    self.stream_status(status);
                }
                let m = &self.revoked.metrics;
                // A SET of the stream's own events (verification, status) ends nothing.
                let about_the_stream = verified.revocations.is_empty()
                    && verified.keys_withdrawn.is_empty()
                    && verified.ignored == 0;
                if !about_the_stream {
                    m.sets_applied.fetch_add(1, Relaxed);
                }
                m.events_ignored.fetch_add(verified.ignored as u64, Relaxed);
                self.acks.push(jti.to_owned());
                None
            }
            Err(e) => {
                self.revoked.verification_failed();
                if let Some(c) = self.target().checker {
                    c.flush();
                }
                tracing::debug!(set = jti, error = %e, "security event token refused");
                self.errs.insert(
                    jti.to_owned(),
                    json!({"err": e.code(), "description": e.to_string()}),
                );
                Some(e.to_string())
            }
        }
    }
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> Option<&str> {
    let start = url.find("://")? + 3;
    Some(
        url[start..]
            .find('/')
            .map_or(url, |end| &url[..start + end]),
    )
}

/// `url` at `configuration_url`'s origin when it is at `issuer`'s and the two differ.
fn rebase(url: String, issuer: &str, configuration_url: &str) -> String {
    match (origin(issuer), origin(configuration_url)) {
        (Some(from), Some(to))
            if from != to
                && url.starts_with(from)
                && (url.len() == from.len() || url[from.len()..].starts_with('/')) =>
        {
            format!("{to}{}", &url[from.len()..])
        }
        _ => url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_at_the_issuers_origin_are_taken_where_the_configuration_was() {
        let config = "http://authserver:8001/.well-known/ssf-configuration";
        let r = |u: &str, iss: &str| rebase(u.to_owned(), iss, config);
        assert_eq!(
            r(
                "https://auth.example.com/ssf/poll/1",
                "https://auth.example.com"
            ),
            "http://authserver:8001/ssf/poll/1"
        );
        assert_eq!(
            r(
                "https://auth.example.com/ssf/poll/1",
                "https://auth.example.com/tenant"
            ),
            "http://authserver:8001/ssf/poll/1"
        );
        assert_eq!(
            r("https://other/jwks", "https://auth.example.com"),
            "https://other/jwks"
        );
        assert_eq!(
            r(
                "https://auth.example.com.evil/x",
                "https://auth.example.com"
            ),
            "https://auth.example.com.evil/x"
        );
        assert_eq!(
            r("http://authserver:8001/x", "http://authserver:8001"),
            "http://authserver:8001/x"
        );
    }
}
