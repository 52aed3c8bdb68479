//! Where the verification keys come from, and keeping them fresh: a JWKS URL fetched at start and
//! refreshed in the background as its `Cache-Control: max-age` says (within
//! [`JwksSettings::refresh_min`]..[`JwksSettings::refresh_max`]), or a static JWKS file. A token
//! with an unknown `kid` may trigger one refetch, at most once per `refresh_min`: forged kids
//! cannot cause a fetch storm. A failed fetch keeps the keys already known.

use std::path::PathBuf;
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use http::header::{ACCEPT, CACHE_CONTROL};

use super::keys::KeySet;
use super::metrics::JwtMetrics;

/// The largest JWKS document read.
pub const MAX_JWKS: usize = 512 * 1024;

/// Where the JWKS is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JwksSource {
    /// Fetched over HTTP(S), e.g. the `jwks_uri` of the issuer's RFC 8414 metadata.
    Url(String),
    /// Read from a file (re-read, rate-limited, when a token names an unknown `kid`).
    File(PathBuf),
}

/// How the keys are kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JwksSettings {
    pub source: JwksSource,
    /// Shortest time between two fetches: floor of `max-age`, retry delay after a failure, and
    /// the interval within which an unknown `kid` triggers at most one refetch.
    pub refresh_min: Duration,
    /// Longest time between two fetches: ceiling of `max-age`, and the refresh period when the
    /// answer has none.
    pub refresh_max: Duration,
    /// Bound on one fetch.
    pub timeout: Duration,
}

impl JwksSettings {
    pub const DEFAULT_REFRESH_MIN: Duration = Duration::from_secs(30);
    pub const DEFAULT_REFRESH_MAX: Duration = Duration::from_secs(3600);
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

    /// Defaults for `source`.
    pub fn new(source: JwksSource) -> Self {
        JwksSettings {
            source,
            refresh_min: Self::DEFAULT_REFRESH_MIN,
            refresh_max: Self::DEFAULT_REFRESH_MAX,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

struct FetchState {
    last_attempt: Option<Instant>,
    /// The last fetch made for an unknown `kid` (the background refresh does not count: a key
    /// published just after it must still be found at once).
    last_kid_refetch: Option<Instant>,
    next_refresh: Instant,
}

/// The current key set and the one fetch at a time that replaces it.
pub(crate) struct KeyStore {
    settings: JwksSettings,
    client: Option<reqwest::Client>,
    current: RwLock<Arc<KeySet>>,
    /// Bumped (under `current`'s write lock) whenever a set is installed whose keys differ from
    /// the set before it: a cached token verified at the current generation still has its key,
    /// without a look at the set.
    generation: AtomicU64,
    state: tokio::sync::Mutex<FetchState>,
    refresher_started: AtomicBool,
    /// Set once a first fetch has been tried (and is over): the request path then skips
    /// [`KeyStore::start`]'s lock.
    first_fetch_tried: AtomicBool,
    metrics: Arc<JwtMetrics>,
}

impl KeyStore {
    pub(crate) fn new(
        settings: JwksSettings,
        metrics: Arc<JwtMetrics>,
    ) -> Result<KeyStore, String> {
        let client = match &settings.source {
            JwksSource::Url(url) => {
                let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("{url:?}: scheme must be http or https"));
                }
                Some(
                    reqwest::Client::builder()
                        .connect_timeout(settings.timeout)
                        .timeout(settings.timeout)
                        .redirect(reqwest::redirect::Policy::limited(3))
                        .build()
                        .map_err(|e| format!("cannot build the HTTP client: {e}"))?,
                )
            }
            JwksSource::File(_) => None,
        };
        let store = KeyStore {
            settings,
            client,
            current: RwLock::default(),
            generation: AtomicU64::new(0),
            state: tokio::sync::Mutex::new(FetchState {
                last_attempt: None,
                last_kid_refetch: None,
                next_refresh: Instant::now(),
            }),
            refresher_started: AtomicBool::new(false),
            first_fetch_tried: AtomicBool::new(false),
            metrics,
        };
        if let JwksSource::File(path) = &store.settings.source {
            let set = read_file(path)?;
            store.install(set);
            store.first_fetch_tried.store(true, Relaxed);
            if let Ok(mut state) = store.state.try_lock() {
                state.last_attempt = Some(Instant::now());
            }
        }
        Ok(store)
    }

    /// The keys in force.
    pub(crate) fn keys(&self) -> Arc<KeySet> {
        match self.current.read() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// See `generation`; read before [`KeyStore::keys`] by a check that caches its result.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    fn install(&self, set: KeySet) {
        self.metrics.keys.store(set.len() as u64, Relaxed);
        let set = Arc::new(set);
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if !current.same_keys(&set) {
            self.generation.fetch_add(1, Release);
        }
        *current = set;
    }

    /// Starts the background refresh (URL sources; once; needs a tokio runtime) and makes sure
    /// a first fetch has been tried before returning.
    pub(crate) async fn start(self: &Arc<Self>) {
        if self.first_fetch_tried.load(Relaxed) {
            return;
        }
        if self.client.is_some() && !self.refresher_started.swap(true, Relaxed) {
            let weak = Arc::downgrade(self);
            tokio::spawn(refresh_loop(weak));
        }
        let mut state = self.state.lock().await;
        if state.last_attempt.is_none() {
            self.fetch(&mut state).await;
        }
    }

    /// A token whose check began at `since` names a key not in the set: refetch, unless a
    /// fetch was made since (the set it got is as fresh as can be) or an unknown `kid` already
    /// caused one within `refresh_min`.
    pub(crate) async fn refetch_for(&self, since: Instant) {
        let mut state = self.state.lock().await;
        if state.last_attempt.is_some_and(|t| t >= since) {
            return;
        }
        if state
            .last_kid_refetch
            .is_some_and(|t| t.elapsed() < self.settings.refresh_min)
        {
            self.metrics.jwks_refetches_suppressed.fetch_add(1, Relaxed);
            return;
        }
        state.last_kid_refetch = Some(Instant::now());
        self.fetch(&mut state).await;
    }

    /// Fetches now, whenever the last fetch was (a key was withdrawn: its tokens must go at once).
    pub(crate) async fn refresh(&self) {
        let mut state = self.state.lock().await;
        self.fetch(&mut state).await;
    }

    /// One fetch; on success the set is replaced, on failure the old one stays. Sets the next
    /// refresh time either way.
    async fn fetch(&self, state: &mut FetchState) {
        let now = Instant::now();
        state.last_attempt = Some(now);
        self.metrics.jwks_fetches.fetch_add(1, Relaxed);
        let s = &self.settings;
        let result = match (&s.source, &self.client) {
            (JwksSource::Url(url), Some(client)) => fetch_url(client, url).await,
            (JwksSource::File(path), _) => read_file(path).map(|set| (set, None)),
            (JwksSource::Url(_), None) => Err("no HTTP client".to_owned()),
        };
        match result {
            Ok((set, max_age)) => {
                let before = self.keys().len();
                if set.len() != before {
                    tracing::info!(keys = set.len(), before, "JWKS keys loaded");
                }
                self.install(set);
                let every = max_age
                    .unwrap_or(s.refresh_max)
                    .clamp(s.refresh_min, s.refresh_max);
                state.next_refresh = now + every;
            }
            Err(error) => {
                self.metrics.jwks_failures.fetch_add(1, Relaxed);
                tracing::warn!(
                    %error,
                    keys_kept = self.keys().len(),
                    retry_in_s = s.refresh_min.as_secs_f64(),
                    "JWKS fetch failed"
                );
                state.next_refresh = now + s.refresh_min;
            }
        }
        // Only now: until the first fetch is over, checks wait for it in `start` rather than
        // finding no key and asking for a refetch of their own.
        self.first_fetch_tried.store(true, Relaxed);
    }
}

/// Refreshes when due, as long as the store lives.
async fn refresh_loop(store: Weak<KeyStore>) {
    loop {
        let wait = {
            let Some(s) = store.upgrade() else { return };
            let state = s.state.lock().await;
            match state.last_attempt {
                None => Duration::ZERO,
                Some(_) => state.next_refresh.saturating_duration_since(Instant::now()),
            }
        };
        tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
        let Some(s) = store.upgrade() else { return };
        let mut state = s.state.lock().await;
        if state.last_attempt.is_none() || Instant::now() >= state.next_refresh {
            s.fetch(&mut state).await;
        }
    }
}

async fn fetch_url(
    client: &reqwest::Client,
    url: &str,
) -> Result<(KeySet, Option<Duration>), String> {
    let mut response = client
        .get(url)
        .header(ACCEPT, "application/json, application/jwk-set+json")
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                "timed out".to_owned()
            } else {
                format!("transport: {e}")
            }
        })?;
    if !response.status().is_success() {
        return Err(format!("answered HTTP {}", response.status().as_u16()));
    }
    let max_age = response
        .headers()
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(max_age);
    let body = crate::bounded_body::read(&mut response, MAX_JWKS)
        .await
        .map_err(|e| match e {
            crate::bounded_body::BodyError::TooLarge => {
                format!("answer is larger than {MAX_JWKS} bytes")
            }
            crate::bounded_body::BodyError::Transport(e) => format!("transport: {e}"),
        })?;
    let set = KeySet::from_json(&body).map_err(|e| format!("not a JWKS: {e}"))?;
    Ok((set, max_age))
}

fn read_file(path: &PathBuf) -> Result<KeySet, String> {
    let body = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    KeySet::from_json(&body).map_err(|e| format!("{}: not a JWKS: {e}", path.display()))
}

/// `max-age=N` of one `Cache-Control` line; `no-cache`/`no-store` count as 0.
fn max_age(line: &str) -> Option<Duration> {
    line.split(',').find_map(|directive| {
        let d = directive.trim().to_ascii_lowercase();
        if d == "no-cache" || d == "no-store" {
            return Some(Duration::ZERO);
        }
        let secs = d.strip_prefix("max-age=")?.trim_matches('"');
        secs.parse::<u64>().ok().map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control() {
        assert_eq!(max_age("max-age=300"), Some(Duration::from_secs(300)));
        assert_eq!(
            max_age("public, MAX-AGE=\"60\", must-revalidate"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(max_age("no-store"), Some(Duration::ZERO));
        assert_eq!(max_age("public"), None);
        assert_eq!(max_age("max-age=soon"), None);
    }
}
