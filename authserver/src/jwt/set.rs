//! RFC 8417 Security Event Tokens: a logged revocation event as the SET a stream delivers,
//! with the CAEP event types and the SSF 1.0 subject formats, signed with the current key.
//!
//! | change | event type | `sub_id` |
//! |---|---|---|
//! | one token family (RFC 7009, refresh or code reuse) | CAEP `session-revoked` | `jwt_id`: `iss`, `jti` of the family |
//! | user deactivated or deleted | CAEP `session-revoked` | `iss_sub`: `iss`, `sub` (the user's id) |
//! | password changed | CAEP `credential-change` (`password`, `update`) | `iss_sub` |
//! | application deleted, lost a scope or introspection | CAEP `session-revoked` | `opaque`: the client id |
//! | consent withdrawn | CAEP `session-revoked` | `complex`: `user` (`iss_sub`) and `application` (`opaque`) |
//! | signing key withdrawn | [`SIGNING_KEY_WITHDRAWN`] (private) | `opaque`: the kid, and `kid` in the event |
//! | a verification the receiver asked for (its stream only) | SSF [`VERIFICATION`], with its `state` | `opaque`: the stream id |

use super::keys::SigningKey;
use crate::store::{LoggedEvent, Revocation};
use jsonwebtoken::{Algorithm, Header};
use serde_json::{Value, json};

/// The `typ` header of a SET (RFC 8417 §2.3).
pub const TYP: &str = "secevent+jwt";

pub const SESSION_REVOKED: &str =
    "https://schemas.openid.net/secevent/caep/event-type/session-revoked";
pub const CREDENTIAL_CHANGE: &str =
    "https://schemas.openid.net/secevent/caep/event-type/credential-change";
/// No CAEP, RISC or SSF event says that the keys an issuer signs its access tokens with were
/// withdrawn (RISC's are about a subject's credentials, not the issuer's), so this one is ours:
/// every token signed by `kid` is no longer good.
pub const SIGNING_KEY_WITHDRAWN: &str = "urn:tokengate:secevent:signing-key-withdrawn";

/// SSF 1.0 §8.1.4.1: the event a receiver asks for to check its stream end to end.
pub const VERIFICATION: &str = "https://schemas.openid.net/secevent/ssf/event-type/verification";

/// The event types a stream can deliver (its `events_supported`). A verification is delivered
/// to the stream that asked for it, whatever it requested.
pub const SUPPORTED: [&str; 4] = [
    SESSION_REVOKED,
    CREDENTIAL_CHANGE,
    SIGNING_KEY_WITHDRAWN,
    VERIFICATION,
];

/// The event type URI of a revocation.
pub fn event_type(revocation: &Revocation) -> &'static str {
    match revocation {
        Revocation::Password { .. } => CREDENTIAL_CHANGE,
        Revocation::SigningKey { .. } => SIGNING_KEY_WITHDRAWN,
        Revocation::Verification { .. } => VERIFICATION,
        _ => SESSION_REVOKED,
    }
}

/// The SSF subject of a revocation issued by `iss`.
pub fn subject(iss: &str, revocation: &Revocation) -> Value {
    match revocation {
        Revocation::Family { jti } => json!({"format": "jwt_id", "iss": iss, "jti": jti}),
        Revocation::User { sub } | Revocation::Password { sub } => {
            json!({"format": "iss_sub", "iss": iss, "sub": sub})
        }
        Revocation::Client { client_id } => json!({"format": "opaque", "id": client_id}),
        Revocation::Consent { sub, client_id } => json!({
            "format": "complex",
            "user": {"format": "iss_sub", "iss": iss, "sub": sub},
            "application": {"format": "opaque", "id": client_id},
        }),
        Revocation::SigningKey { kid } => json!({"format": "opaque", "id": kid}),
        // SSF 1.0 §8.1.4.1: the subject of a verification is its stream.
        Revocation::Verification { stream_id, .. } => json!({"format": "opaque", "id": stream_id}),
    }
}

/// The claims of the SET of `event` for the receiver `aud`, issued at `iat` with id `jti`.
pub fn claims(iss: &str, aud: &str, jti: &str, iat: i64, event: &LoggedEvent) -> Value {
    let mut body = json!({"event_timestamp": event.occurred_at});
    match &event.revocation {
        Revocation::Password { .. } => {
            body["credential_type"] = "password".into();
            body["change_type"] = "update".into();
        }
        Revocation::SigningKey { kid } => body["kid"] = kid.clone().into(),
        Revocation::Verification { state, .. } => {
            body = match state {
                Some(state) => json!({"state": state}),
                None => json!({}),
            }
        }
        _ => {}
    }
    json!({
        "iss": iss,
        "aud": aud,
        "iat": iat,
        "jti": jti,
        "txn": event.id.to_string(),
        "sub_id": subject(iss, &event.revocation),
        "events": { event_type(&event.revocation): body },
    })
}

/// Signs `claims` with `key`: `{"alg":…,"typ":"secevent+jwt","kid":…}`.
pub fn sign(key: &SigningKey, claims: &Value) -> jsonwebtoken::errors::Result<String> {
    let mut header = Header::new(Algorithm::EdDSA);
    header.typ = Some(TYP.to_owned());
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::keys::{KeySet, generate};
    use jsonwebtoken::Validation;

    #[test]
    fn a_set_verifies_against_its_key_with_its_type_and_subject() {
        let keys = KeySet::from_stored(&[generate(1, 0, 0).unwrap()]).unwrap();
        let key = keys.signer(crate::jwt::Alg::EdDSA, 0).unwrap();
        let event = LoggedEvent {
            id: 7,
            revocation: Revocation::Password { sub: "42".into() },
            occurred_at: 1000,
        };
        let token = sign(key, &claims("https://as", "rp", "7.s", 1001, &event)).unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.typ.as_deref(), Some("secevent+jwt"));
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&["rp"]);
        validation.set_required_spec_claims(&["iss", "aud"]);
        let decoded = jsonwebtoken::decode::<Value>(&token, &key.decoding, &validation).unwrap();
        let c = decoded.claims;
        assert_eq!(
            c["sub_id"],
            json!({"format":"iss_sub","iss":"https://as","sub":"42"})
        );
        let body = &c["events"][CREDENTIAL_CHANGE];
        assert_eq!(body["event_timestamp"], 1000);
        assert_eq!(body["credential_type"], "password");
        assert_eq!(c["jti"], "7.s");
    }
}
