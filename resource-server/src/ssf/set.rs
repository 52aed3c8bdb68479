//! Verifying one Security Event Token (RFC 8417) before anything is done with it
//! ([`SetVerifier::verify`]): a JWS compact token whose header reads strictly with `typ:
//! secevent+jwt` and a public-key `alg`, signed by a key of the transmitter's JWKS (refetched,
//! rate-limited, for an unknown `kid`: the key store of [`crate::jwt`]), whose `iss` is the
//! transmitter's, whose `aud` names this receiver, whose `iat` is not in the future, with a
//! `jti` and an `events` object. Then its events are read into what they end ([`Revocation`]).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use crate::jwt::ASYMMETRIC;
use crate::jwt::header::Header;
use crate::jwt::jwks::{JwksSettings, JwksSource, KeyStore};
use crate::jwt::metrics::JwtMetrics;
use crate::revoked::Subject;

/// CAEP: the sessions of a subject ended.
pub const SESSION_REVOKED: &str =
    "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
/// CAEP: a credential of a subject changed.
pub const CREDENTIAL_CHANGE: &str =
    "https://schemas.openid.net/secevent/caep/event-type/credential-change";
/// RISC events that end a subject's tokens as well.
pub const RISC_ENDING: [&str; 4] = [
    "https://schemas.openid.net/secevent/risc/event-type/account-disabled",
    "https://schemas.openid.net/secevent/risc/event-type/account-purged",
    "https://schemas.openid.net/secevent/risc/event-type/sessions-revoked",
    "https://schemas.openid.net/secevent/risc/event-type/credential-compromise",
];

/// Our authorization server's private event (no CAEP, RISC or SSF type says it): a JWT signing
/// key withdrawn, its `kid` in the event (its `opaque` subject is the kid, not a client). The
/// receiver refuses JWTs of that key from then on and refetches the JWKS.
pub const SIGNING_KEY_WITHDRAWN: &str = "urn:tokengate:secevent:signing-key-withdrawn";

/// SSF 1.0 §8.1.4.1: the event a receiver asks for to check its stream end to end (delivered
/// whatever was requested); its `state` is the receiver's.
pub const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";
/// SSF 1.0 §8.1.5: the transmitter changed the stream's status (`status`, `reason`).
pub const STREAM_UPDATED: &str =
    "https://schemas.openid.net/secevent/ssf/event-type/stream-updated";

/// The event types the receiver asks for and acts on.
pub fn events_requested() -> Vec<&'static str> {
    let mut all = vec![SESSION_REVOKED, CREDENTIAL_CHANGE, SIGNING_KEY_WITHDRAWN];
    all.extend(RISC_ENDING);
    all
}

/// Why a SET is refused, with its RFC 8935 §2.3 error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    #[error("not a JWS compact token with a readable header and payload")]
    Malformed,
    #[error("typ is not secevent+jwt")]
    Type,
    #[error("alg is not a public-key algorithm")]
    Algorithm,
    #[error("no key of the transmitter's JWKS for its kid and alg")]
    UnknownKey,
    #[error("the signature does not verify")]
    Signature,
    #[error("iss is not the transmitter's issuer")]
    Issuer,
    #[error("aud does not name this receiver")]
    Audience,
    #[error("iat missing or in the future")]
    IssuedAt,
    #[error("jti missing, or not the key it was delivered under")]
    Jti,
    #[error("events missing or not an object")]
    Events,
}

impl SetError {
    /// The `err` of RFC 8935 §2.3 sent back in `setErrs`.
    pub fn code(self) -> &'static str {
        match self {
            SetError::Issuer => "invalid_issuer",
            SetError::Audience => "invalid_audience",
            SetError::UnknownKey => "invalid_key",
            SetError::Signature | SetError::Algorithm => "authentication_failed",
            _ => "invalid_request",
        }
    }
}

/// A SET verified: its `jti`, and what its events end.
#[derive(Debug, PartialEq, Eq)]
pub struct VerifiedSet {
    pub jti: String,
    /// Each thing ended, with the time of the change (unix seconds): tokens issued then or
    /// before are refused.
    pub revocations: Vec<Revocation>,
    /// Events the receiver does not act on (other types, subject formats).
    pub ignored: usize,
    /// `kid`s of signing keys withdrawn.
    pub keys_withdrawn: Vec<String>,
    /// The `state` of each verification event (empty without one).
    pub verifications: Vec<String>,
    /// The stream's status a stream-updated event gives.
    pub stream_status: Option<String>,
}

/// One thing an event ended, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    pub subject: Subject,
    pub at: i64,
}

/// Verifies the SETs of one transmitter.
pub struct SetVerifier {
    keys: Arc<KeyStore>,
    issuer: String,
    audience: String,
    /// Clock leeway for `iat`, seconds.
    leeway: i64,
}

impl SetVerifier {
    /// A verifier with the transmitter's JWKS at `jwks_uri` (fetched on first use).
    pub fn new(jwks_uri: &str, issuer: &str, audience: &str) -> Result<SetVerifier, String> {
        let mut settings = JwksSettings::new(JwksSource::Url(jwks_uri.to_owned()));
        // A SET signed with a key just published is seen within a second or two.
        settings.refresh_min = std::time::Duration::from_secs(2);
        let keys = KeyStore::new(settings, Arc::new(JwtMetrics::default()))?;
        Ok(SetVerifier {
            keys: Arc::new(keys),
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            leeway: 60,
        })
    }

    /// Verifies `set`, delivered under `delivered_as` (the key of the poll answer's `sets`).
    pub async fn verify(&self, set: &str, delivered_as: &str) -> Result<VerifiedSet, SetError> {
        let header = Header::parse(set).map_err(|_| SetError::Malformed)?;
        if !header.typ_is_one_of(&["secevent+jwt".to_owned()]) {
            return Err(SetError::Type);
        }
        let alg = Algorithm::from_str(&header.alg)
            .ok()
            .filter(|a| ASYMMETRIC.contains(a))
            .ok_or(SetError::Algorithm)?;
        let since = Instant::now();
        self.keys.start().await;
        let kid = header.kid.as_deref();
        let mut keys = self.keys.keys();
        if keys.find(kid, alg, &header.alg).is_none() {
            self.keys.refetch_for(since).await;
            keys = self.keys.keys();
        }
        let key = keys
            .find(kid, alg, &header.alg)
            .ok_or(SetError::UnknownKey)?;
        let (message, signature) = set.rsplit_once('.').ok_or(SetError::Malformed)?;
        match key.check_signature(message.as_bytes(), signature, alg) {
            Ok(true) => {}
            Ok(false) => return Err(SetError::Signature),
            Err(_) => return Err(SetError::Malformed),
        }
        let payload = message
            .split_once('.')
            .and_then(|(_, p)| URL_SAFE_NO_PAD.decode(p).ok())
            .and_then(|json| serde_json::from_slice::<Value>(&json).ok());
        let Some(Value::Object(claims)) = payload else {
            return Err(SetError::Malformed);
        };
        self.read(claims, delivered_as, now())
    }

    /// The checks of a payload whose signature verified, at `now`.
    fn read(
        &self,
        claims: Map<String, Value>,
        delivered_as: &str,
        now: i64,
    ) -> Result<VerifiedSet, SetError> {
        if claims.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err(SetError::Issuer);
        }
        let aud_ok = match claims.get("aud") {
            Some(Value::String(a)) => *a == self.audience,
            Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(&self.audience)),
            _ => false,
        };
        if !aud_ok {
            return Err(SetError::Audience);
        }
        let iat = claims
            .get("iat")
            .and_then(Value::as_i64)
            .filter(|&iat| iat >= 0 && iat <= now + self.leeway)
            .ok_or(SetError::IssuedAt)?;
        let jti = claims
            .get("jti")
            .and_then(Value::as_str)
            .filter(|j| !j.is_empty() && *j == delivered_as)
            .ok_or(SetError::Jti)?;
        let Some(Value::Object(events)) = claims.get("events") else {
            return Err(SetError::Events);
        };
        if events.is_empty() {
            return Err(SetError::Events);
        }
        let mut verified = VerifiedSet {
            jti: jti.to_owned(),
            revocations: Vec::new(),
            ignored: 0,
            keys_withdrawn: Vec::new(),
            verifications: Vec::new(),
            stream_status: None,
        };
        for (kind, event) in events {
            let text = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_owned);
            if kind == VERIFICATION {
                verified
                    .verifications
                    .push(text("state").unwrap_or_default());
                continue;
            }
            if kind == STREAM_UPDATED {
                match text("status") {
                    Some(status) => verified.stream_status = Some(status),
                    None => verified.ignored += 1,
                }
                continue;
            }
            if kind == SIGNING_KEY_WITHDRAWN {
                match event.get("kid").and_then(Value::as_str) {
                    Some(kid) => verified.keys_withdrawn.push(kid.to_owned()),
                    None => verified.ignored += 1,
                }
                continue;
            }
            let subject = event.get("subject").or_else(|| claims.get("sub_id"));
            let at = event
                .get("event_timestamp")
                .and_then(Value::as_i64)
                .unwrap_or(iat);
            let ends = match kind.as_str() {
                SESSION_REVOKED => true,
                // A new credential ends nothing; a changed, revoked or deleted one does.
                CREDENTIAL_CHANGE => {
                    event.get("change_type").and_then(Value::as_str) != Some("create")
                }
                k => RISC_ENDING.contains(&k),
            };
            match subject.and_then(read_subject).filter(|_| ends) {
                Some(subject) => verified.revocations.push(Revocation { subject, at }),
                None => verified.ignored += 1,
            }
        }
        Ok(verified)
    }
}

/// An SSF subject identifier: `jwt_id` (a token family), `iss_sub` (a user), `opaque` or
/// `client_id` (an application), or `complex` with a `user` and an `application`/`client`
/// (a user's tokens at one application). Other formats: `None`.
fn read_subject(v: &Value) -> Option<Subject> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match v.get("format").and_then(Value::as_str)? {
        "jwt_id" => text(v, "jti").map(Subject::Jti),
        "iss_sub" => text(v, "sub").map(Subject::User),
        "opaque" => text(v, "id").map(Subject::Client),
        "client_id" => text(v, "client_id").map(Subject::Client),
        "complex" => {
            let user = v.get("user").and_then(read_subject);
            let app = v
                .get("application")
                .or_else(|| v.get("client"))
                .and_then(read_subject);
            match (user, app) {
                (Some(Subject::User(user)), Some(Subject::Client(client))) => {
                    Some(Subject::UserAtClient { user, client })
                }
                (Some(Subject::User(user)), None) => Some(Subject::User(user)),
                (None, Some(Subject::Client(client))) => Some(Subject::Client(client)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn verifier() -> SetVerifier {
        SetVerifier::new("http://127.0.0.1:9/jwks", "https://as", "rx").unwrap()
    }

    fn read(claims: Value) -> Result<VerifiedSet, SetError> {
        let Value::Object(map) = claims else { panic!() };
        verifier().read(map, "s1", 1_000_000)
    }

    fn set(events: Value, sub_id: Value) -> Value {
        json!({"iss": "https://as", "aud": "rx", "iat": 1_000_000, "jti": "s1",
               "sub_id": sub_id, "events": events})
    }

    #[test]
    fn verification_and_stream_updated_events_are_read_not_ignored() {
        let stream = json!({"format": "opaque", "id": "stream-1"});
        let v = read(set(json!({VERIFICATION: {"state": "st"}}), stream.clone())).unwrap();
        assert_eq!((v.verifications, v.ignored), (vec!["st".to_owned()], 0));
        assert!(v.revocations.is_empty());
        let v = read(set(
            json!({STREAM_UPDATED: {"status": "paused", "reason": "maintenance"}}),
            stream,
        ))
        .unwrap();
        assert_eq!(v.stream_status.as_deref(), Some("paused"));
        assert_eq!((v.revocations.len(), v.ignored), (0, 0));
    }

    #[test]
    fn claims_are_checked() {
        let ok = set(
            json!({SESSION_REVOKED: {}}),
            json!({"format": "jwt_id", "iss": "https://as", "jti": "f"}),
        );
        assert_eq!(
            read(ok.clone()).unwrap().revocations,
            vec![Revocation {
                subject: Subject::Jti("f".into()),
                at: 1_000_000
            }]
        );
        let with = |k: &str, v: Value| {
            let mut c = ok.clone();
            c[k] = v;
            read(c).unwrap_err()
        };
        assert_eq!(with("iss", json!("https://evil")), SetError::Issuer);
        assert_eq!(with("aud", json!(["other"])), SetError::Audience);
        assert!(
            read({
                let mut c = ok.clone();
                c["aud"] = json!(["x", "rx"]);
                c
            })
            .is_ok()
        );
        assert_eq!(with("iat", json!(1_000_061)), SetError::IssuedAt);
        assert_eq!(with("iat", json!("1")), SetError::IssuedAt);
        assert_eq!(with("jti", json!("s2")), SetError::Jti);
        assert_eq!(with("events", json!({})), SetError::Events);
        assert_eq!(with("events", json!([])), SetError::Events);
    }

    #[test]
    fn subjects_and_event_types() {
        let user = json!({"format": "iss_sub", "iss": "https://as", "sub": "42"});
        let v = read(set(
            json!({CREDENTIAL_CHANGE: {"change_type": "update", "credential_type": "password", "event_timestamp": 999}}),
            user.clone(),
        ))
        .unwrap();
        assert_eq!(
            v.revocations,
            vec![Revocation {
                subject: Subject::User("42".into()),
                at: 999
            }]
        );
        let v = read(set(
            json!({CREDENTIAL_CHANGE: {"change_type": "create"}}),
            user.clone(),
        ))
        .unwrap();
        assert_eq!((v.revocations.len(), v.ignored), (0, 1));
        let v = read(set(json!({"https://example/unknown": {}}), user.clone())).unwrap();
        assert_eq!((v.revocations.len(), v.ignored), (0, 1));
        let v = read(set(
            json!({SESSION_REVOKED: {}}),
            json!({"format": "opaque", "id": "app"}),
        ))
        .unwrap();
        assert_eq!(v.revocations[0].subject, Subject::Client("app".into()));
        let v = read(set(
            json!({SESSION_REVOKED: {}}),
            json!({"format": "email", "email": "a@b"}),
        ))
        .unwrap();
        assert_eq!(v.ignored, 1);
        let complex = json!({"format": "complex", "user": user, "application": {"format": "opaque", "id": "app"}});
        let v = read(set(json!({SESSION_REVOKED: {}}), complex)).unwrap();
        assert_eq!(
            v.revocations[0].subject,
            Subject::UserAtClient {
                user: "42".into(),
                client: "app".into()
            }
        );
        let v = read(set(
            json!({SIGNING_KEY_WITHDRAWN: {"kid": "k1"}}),
            json!({"format": "opaque", "id": "k1"}),
        ))
        .unwrap();
        assert_eq!(
            (v.revocations.len(), v.keys_withdrawn),
            (0, vec!["k1".to_owned()])
        );
        // CAEP's older shape: the subject inside the event.
        let v = read(set(
            json!({SESSION_REVOKED: {"subject": {"format": "opaque", "id": "c"}}}),
            Value::Null,
        ))
        .unwrap();
        assert_eq!(v.revocations[0].subject, Subject::Client("c".into()));
    }
}
