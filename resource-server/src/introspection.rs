//! RFC 7662 introspection client: one pooled reqwest client that POSTs `token=…` to any
//! introspection endpoint, authenticated by a bearer token or HTTP Basic client credentials.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::HeaderValue;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};

use crate::bounded_body::BodyError;
use crate::claims::{Claims, Malformed};
use crate::policy::AnswerPolicy;

/// Invalid settings for a [`crate::TokenChecker`] (its HTTP client).
#[derive(Debug, thiserror::Error)]
pub enum CheckerError {
    #[error("{0}")]
    Settings(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// How the resource server authenticates to the introspection endpoint.
#[derive(Clone, PartialEq, Eq)]
pub enum ClientAuth {
    /// `Authorization: Bearer <token>` (a token carrying the `introspection` scope).
    Bearer(String),
    /// HTTP Basic with the client id and secret, each form-URL-encoded first (RFC 6749 §2.3.1).
    ClientSecret {
        client_id: String,
        client_secret: String,
        /// The file the secret was read from (`introspection.client_secret_file`): read again,
        /// and the call retried once, when the endpoint refuses the secret (a rotation).
        secret_file: Option<std::path::PathBuf>,
    },
}

// Secrets never reach a log line through `{:?}`.
impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            ClientAuth::ClientSecret {
                client_id,
                secret_file,
                ..
            } => f
                .debug_struct("ClientSecret")
                .field("client_id", client_id)
                .field("client_secret", &"<redacted>")
                .field("secret_file", secret_file)
                .finish(),
        }
    }
}

/// Where and how to introspect, and which answers to accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntrospectionSettings {
    /// The endpoint, e.g. `http://authserver:8000/o/introspect/` (`http` or `https`).
    pub url: String,
    pub auth: ClientAuth,
    /// Bound on establishing a connection.
    pub connect_timeout: Duration,
    /// Bound on the whole exchange, connection to the end of the answer.
    pub request_timeout: Duration,
    /// Issuer, audience and clock leeway.
    pub policy: AnswerPolicy,
}

impl IntrospectionSettings {
    /// Default bound on establishing a connection (both binaries; see
    /// [`crate::settings::RawIntrospection::resolve`]).
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default bound on one introspection call.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

    /// Settings with the default timeouts and policy.
    pub fn new(url: impl Into<String>, auth: ClientAuth) -> Self {
        IntrospectionSettings {
            url: url.into(),
            auth,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            policy: AnswerPolicy::default(),
        }
    }
}

/// Why one introspection call gave no answer. Never contains the token.
#[derive(Debug, thiserror::Error)]
pub enum IntrospectionError {
    #[error("timed out")]
    Timeout,
    #[error("transport: {0}")]
    Transport(#[source] reqwest::Error),
    #[error("answered HTTP {0}{suffix}", suffix = refused_suffix(*.0))]
    Status(u16),
    #[error("answer is larger than {MAX_ANSWER} bytes")]
    TooLarge,
    /// A 2xx answer that is not a valid RFC 7662 answer (not JSON, wrong types, bad times).
    #[error("answer is not a valid RFC 7662 JSON object: {0}")]
    Malformed(#[from] Malformed),
}

/// What a 401/403 from the introspection endpoint means: our credentials, not the token.
fn refused_suffix(status: u16) -> &'static str {
    match status {
        401 | 403 => ": our introspection credentials were refused",
        _ => "",
    }
}

impl IntrospectionError {
    /// Whether the endpoint refused the caller's own credentials (401/403), which no retry or
    /// token changes: a configuration error, not an outage.
    pub fn credentials_refused(&self) -> bool {
        matches!(self, IntrospectionError::Status(401 | 403))
    }

    /// Whether the failure says the server is down or struggling: no complete answer (refused,
    /// reset, cut short, timed out) or `5xx`/`429`. Any other answer, even a refusal or an
    /// unreadable body, came from a server that is up; it may also depend on the token sent (a
    /// huge token gets `413`), so it never starts an [outage](crate::outage::ProbeGate).
    pub fn is_outage(&self) -> bool {
        match self {
            IntrospectionError::Timeout | IntrospectionError::Transport(_) => true,
            IntrospectionError::Status(s) => *s >= 500 || *s == 429,
            IntrospectionError::TooLarge | IntrospectionError::Malformed(_) => false,
        }
    }
}

/// The largest introspection answer read.
pub const MAX_ANSWER: usize = 64 * 1024;

/// A pooled, keep-alive HTTP client for one introspection endpoint.
#[derive(Clone, Debug)]
pub struct Introspector {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The `Authorization` header sent: read without a lock on every call, replaced only when
    /// a secret file's new secret is accepted ([`Self::reread_secret`]).
    authorization: Arc<ArcSwap<HeaderValue>>,
    /// The client id and secret file, when the secret came from a file.
    secret_file: Option<Arc<SecretFile>>,
}

/// Where a rotated client secret is read again.
#[derive(Debug)]
struct SecretFile {
    client_id: String,
    path: PathBuf,
    /// One re-read at a time (the others wait for it and use what it found), and when the last
    /// one found nothing new: refusals are not answered by more than one read per
    /// [`REREAD_INTERVAL`] while the file has not changed.
    reading: tokio::sync::Mutex<Option<std::time::Instant>>,
}

/// The least time between two reads of a secret file that held nothing new.
pub const REREAD_INTERVAL: Duration = Duration::from_millis(250);

/// The client secret in `path` ([`crate::secret_file::read`]); the error names the file.
pub fn read_secret_file(path: &Path) -> Result<String, String> {
    crate::secret_file::read(path)
        .map_err(|problem| format!("client secret file {}: {problem}", path.display()))
}

/// The HTTP Basic header of a client id and secret, each form-URL-encoded first.
fn basic_header(client_id: &str, client_secret: &str) -> Result<HeaderValue, CheckerError> {
    use base64::Engine as _;
    let pair = format!("{}:{}", form_encode(client_id), form_encode(client_secret));
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).map_err(|_| {
        CheckerError::Settings("cannot build the Basic authorization header".into())
    })?;
    value.set_sensitive(true);
    Ok(value)
}

impl Introspector {
    /// Builds the client; checks the URL, the timeouts and the credentials.
    pub fn new(settings: &IntrospectionSettings) -> Result<Self, CheckerError> {
        let url = reqwest::Url::parse(&settings.url).map_err(|e| {
            CheckerError::Settings(format!("introspection url {:?}: {e}", settings.url))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(CheckerError::Settings(format!(
                "introspection url {:?}: scheme must be http or https",
                settings.url
            )));
        }
        if settings.connect_timeout.is_zero() || settings.request_timeout.is_zero() {
            return Err(CheckerError::Settings(
                "introspection timeouts must be greater than zero".into(),
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.request_timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(64)
            .tcp_keepalive(Duration::from_secs(60))
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!(
                "tokengate-resource-server/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(CheckerError::Client)?;
        let mut authorization = match &settings.auth {
            ClientAuth::Bearer(token) => HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| {
                    CheckerError::Settings(
                        "introspection auth token is not a valid header value".into(),
                    )
                })?,
            ClientAuth::ClientSecret {
                client_id,
                client_secret,
                ..
            } => basic_header(client_id, client_secret)?,
        };
        authorization.set_sensitive(true);
        let secret_file = match &settings.auth {
            ClientAuth::ClientSecret {
                client_id,
                secret_file: Some(path),
                ..
            } => Some(Arc::new(SecretFile {
                client_id: client_id.clone(),
                path: path.clone(),
                reading: tokio::sync::Mutex::new(None),
            })),
            _ => None,
        };
        Ok(Introspector {
            client,
            url,
            authorization: Arc::new(ArcSwap::from_pointee(authorization)),
            secret_file,
        })
    }

    /// One RFC 7662 call: `POST token=<t>&token_type_hint=access_token`. Any 2xx with a valid
    /// answer ([`Claims::from_json`]) is an answer (active or not); everything else is an error.
    ///
    /// When the endpoint refuses our credentials (401/403) and the secret came from a file, the
    /// file is read again and, if it holds another secret, the call is retried once with it (a
    /// rotated secret reaches the proxy without a restart).
    pub async fn introspect(&self, token: &str) -> Result<Claims, IntrospectionError> {
        let sent = self.authorization.load_full();
        match self.introspect_with(token, &sent).await {
            Err(error) if error.credentials_refused() => match self.reread_secret(&sent).await {
                Some(newer) => self.introspect_with(token, &newer).await,
                None => Err(error),
            },
            answer => answer,
        }
    }

    /// After `refused` was refused: the header to retry with, if the secret file now holds
    /// another secret (or another call already replaced it); None otherwise.
    async fn reread_secret(&self, refused: &Arc<HeaderValue>) -> Option<Arc<HeaderValue>> {
        let file = self.secret_file.as_ref()?;
        let mut nothing_new_at = file.reading.lock().await;
        let current = self.authorization.load_full();
        if !Arc::ptr_eq(&current, refused) {
            return Some(current);
        }
        if nothing_new_at.is_some_and(|at| at.elapsed() < REREAD_INTERVAL) {
            return None;
        }
        *nothing_new_at = Some(std::time::Instant::now());
        let path = file.path.clone();
        let read = tokio::task::spawn_blocking(move || read_secret_file(&path)).await;
        let secret = match read {
            Ok(Ok(secret)) => secret,
            Ok(Err(message)) => {
                tracing::warn!(%message, "introspection credentials refused; cannot read the secret again");
                return None;
            }
            Err(_) => return None,
        };
        let header = basic_header(&file.client_id, &secret).ok()?;
        if header == *current {
            tracing::warn!(file = %file.path.display(), "introspection credentials refused and the secret file holds the same secret");
            return None;
        }
        *nothing_new_at = None;
        tracing::info!(file = %file.path.display(), "introspection credentials refused: using the secret the file now holds");
        let header = Arc::new(header);
        self.authorization.store(header.clone());
        Some(header)
    }

    async fn introspect_with(
        &self,
        token: &str,
        authorization: &HeaderValue,
    ) -> Result<Claims, IntrospectionError> {
        let body = format!("token={}&token_type_hint=access_token", form_encode(token));
        let mut resp = self
            .client
            .post(self.url.clone())
            .header(AUTHORIZATION, authorization.clone())
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(IntrospectionError::Status(status.as_u16()));
        }
        let buf = crate::bounded_body::read(&mut resp, MAX_ANSWER)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge => IntrospectionError::TooLarge,
                BodyError::Transport(e) => transport(e),
            })?;
        Ok(Claims::from_json(&buf)?)
    }
}

fn transport(e: reqwest::Error) -> IntrospectionError {
    if e.is_timeout() {
        IntrospectionError::Timeout
    } else {
        IntrospectionError::Transport(e.without_url())
    }
}

/// `application/x-www-form-urlencoded` encoding of one value (RFC 6749 Appendix B).
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 15)] as char);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding() {
        assert_eq!(form_encode("abc-._*XYZ09"), "abc-._*XYZ09");
        assert_eq!(form_encode("a b+c/d:e=f&g%"), "a+b%2Bc%2Fd%3Ae%3Df%26g%25");
        assert_eq!(form_encode("é"), "%C3%A9");
    }

    #[test]
    fn only_failures_of_the_server_are_outages() {
        use crate::claims::Malformed;
        assert!(IntrospectionError::Timeout.is_outage());
        for s in [500, 502, 503, 504, 429] {
            assert!(IntrospectionError::Status(s).is_outage(), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 302] {
            assert!(!IntrospectionError::Status(s).is_outage(), "{s}");
        }
        assert!(!IntrospectionError::TooLarge.is_outage());
        assert!(!IntrospectionError::Malformed(Malformed::NotAnObject).is_outage());
    }

    #[test]
    fn debug_redacts_secrets() {
        let s = format!(
            "{:?} {:?}",
            ClientAuth::Bearer("tok123".into()),
            ClientAuth::ClientSecret {
                client_id: "id".into(),
                client_secret: "sec456".into(),
                secret_file: None,
            }
        );
        assert!(!s.contains("tok123") && !s.contains("sec456"), "{s}");
    }

    #[test]
    fn settings_are_checked() {
        let ok = IntrospectionSettings::new(
            "http://127.0.0.1:1/o/introspect/",
            ClientAuth::Bearer("t".into()),
        );
        assert!(Introspector::new(&ok).is_ok());
        for url in ["not a url", "ftp://x/", ""] {
            let s = IntrospectionSettings {
                url: url.into(),
                ..ok.clone()
            };
            assert!(
                matches!(Introspector::new(&s), Err(CheckerError::Settings(_))),
                "{url}"
            );
        }
        let s = IntrospectionSettings {
            auth: ClientAuth::Bearer("a\nb".into()),
            ..ok.clone()
        };
        assert!(matches!(
            Introspector::new(&s),
            Err(CheckerError::Settings(_))
        ));
        let s = IntrospectionSettings {
            request_timeout: Duration::ZERO,
            ..ok
        };
        assert!(matches!(
            Introspector::new(&s),
            Err(CheckerError::Settings(_))
        ));
    }
}
