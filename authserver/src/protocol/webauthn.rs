//! Passkeys (WebAuthn Level 2): the checks of §7.1 (registering a credential) and §7.2 (an
//! assertion), for attestation `none` and the algorithms ES256, EdDSA and RS256, verified with
//! `ring`. No I/O: the caller takes the challenge named by the client data from the store (single
//! use, bound to a session, expiring) and keeps the credentials.

use super::cbor::{self, Value};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, UnparsedPublicKey};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Bytes of a challenge: 32 random ones, sent base64url.
pub const CHALLENGE_BYTES: usize = 32;
/// The longest credential id accepted (WebAuthn L2 §5.1: at most 1023 bytes).
pub const MAX_CREDENTIAL_ID: usize = 1023;
/// The largest `clientDataJSON` accepted.
pub const MAX_CLIENT_DATA: usize = 2048;
/// The largest attestation object (or authenticator data) accepted: a COSE RSA key of 4096 bits
/// and a credential id of 1023 bytes fit.
pub const MAX_ATTESTATION_OBJECT: usize = 4096;
/// The largest signature accepted (RSA 4096 bits: 512 bytes).
pub const MAX_SIGNATURE: usize = 600;

/// COSE algorithm identifiers offered in `pubKeyCredParams`, in order of preference.
pub const ALGORITHMS: [i64; 3] = [ES256, EDDSA, RS256];
const ES256: i64 = -7;
const EDDSA: i64 = -8;
const RS256: i64 = -257;

/// Authenticator data flags (WebAuthn L2 §6.1).
const USER_PRESENT: u8 = 0x01;
const USER_VERIFIED: u8 = 0x04;
const ATTESTED_CREDENTIAL: u8 = 0x40;
const EXTENSIONS: u8 = 0x80;

/// Who the credentials are for: the relying-party id (a host) and the one origin whose client
/// data is accepted, both from the issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelyingParty {
    pub id: String,
    pub origin: String,
}

impl RelyingParty {
    /// The relying party of issuer `issuer` (`https://login.example.com/auth` gives the id
    /// `login.example.com` and the origin `https://login.example.com`); `None` for an issuer
    /// that is not an http(s) URL with a host.
    pub fn from_issuer(issuer: &str) -> Option<RelyingParty> {
        let (scheme, rest) = issuer.split_once("://")?;
        if scheme != "https" && scheme != "http" {
            return None;
        }
        let authority = rest.split(['/', '?', '#']).next()?;
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        let host = match authority.strip_prefix('[') {
            Some(v6) => format!("[{}]", v6.split(']').next()?),
            None => authority.split(':').next()?.to_owned(),
        };
        if host.is_empty() {
            return None;
        }
        // A browser's origin leaves out the scheme's default port (RFC 6454 §6.1), so an issuer
        // written `https://h:443` must too, or no assertion would ever match it.
        let default_port = if scheme == "https" { ":443" } else { ":80" };
        let authority = authority.to_ascii_lowercase();
        let authority = authority.strip_suffix(default_port).unwrap_or(&authority);
        Some(RelyingParty {
            id: host.to_ascii_lowercase(),
            origin: format!("{scheme}://{authority}"),
        })
    }

    fn id_hash(&self) -> [u8; 32] {
        Sha256::digest(self.id.as_bytes()).into()
    }
}

/// Why a registration or an assertion was refused: each has a message for the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebauthnError {
    Malformed,
    TooLarge,
    WrongType,
    WrongOrigin,
    CrossOrigin,
    UnknownChallenge,
    WrongRelyingParty,
    UserNotPresent,
    UserNotVerified,
    NoCredentialData,
    CredentialIdMismatch,
    UnsupportedAttestation,
    UnsupportedAlgorithm,
    BadSignature,
    CounterWentBack,
    UnknownCredential,
}

impl WebauthnError {
    pub fn message(self) -> &'static str {
        match self {
            WebauthnError::Malformed => "The passkey's answer is malformed.",
            WebauthnError::TooLarge => "The passkey's answer is too large.",
            WebauthnError::WrongType => "The passkey's answer is for another ceremony.",
            WebauthnError::WrongOrigin => "The passkey's answer was made for another site.",
            WebauthnError::CrossOrigin => "The passkey's answer was made inside another site.",
            WebauthnError::UnknownChallenge => {
                "That passkey request is unknown, used already or expired. Try again."
            }
            WebauthnError::WrongRelyingParty => "The passkey's answer names another relying party.",
            WebauthnError::UserNotPresent => "The passkey did not confirm your presence.",
            WebauthnError::UserNotVerified => {
                "The passkey did not verify you (a PIN or biometric is needed for a sign-in without password)."
            }
            WebauthnError::NoCredentialData => "The passkey's answer holds no new credential.",
            WebauthnError::CredentialIdMismatch => "The passkey's answer names another credential.",
            WebauthnError::UnsupportedAttestation => {
                "The passkey sent an attestation this server does not take (only \"none\")."
            }
            WebauthnError::UnsupportedAlgorithm => {
                "The passkey uses an algorithm this server does not take (ES256, EdDSA or RS256)."
            }
            WebauthnError::BadSignature => "The passkey's signature is not right.",
            WebauthnError::CounterWentBack => {
                "The passkey's signature counter went back: it may have been copied. Ask an operator."
            }
            WebauthnError::UnknownCredential => "That passkey is not registered here.",
        }
    }
}

/// The two ceremonies, and the `type` their client data must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceremony {
    Create,
    Get,
}

impl Ceremony {
    fn client_data_type(self) -> &'static str {
        match self {
            Ceremony::Create => "webauthn.create",
            Ceremony::Get => "webauthn.get",
        }
    }
}

/// Checked client data: its challenge (as sent, base64url: the caller takes it from the store)
/// and the SHA-256 of its bytes (what the signature covers).
#[derive(Debug)]
pub struct ClientData {
    pub challenge: String,
    pub hash: [u8; 32],
}

#[derive(Deserialize)]
struct RawClientData {
    #[serde(rename = "type")]
    kind: String,
    challenge: String,
    origin: String,
    #[serde(rename = "crossOrigin", default)]
    cross_origin: Option<bool>,
}

/// Steps 5–10 of §7.1 and 10–14 of §7.2: `clientDataJSON` is JSON of the ceremony's type, made
/// at the relying party's origin (not inside a frame of another), with a challenge of the right
/// shape.
pub fn client_data(
    rp: &RelyingParty,
    ceremony: Ceremony,
    json: &[u8],
) -> Result<ClientData, WebauthnError> {
    if json.len() > MAX_CLIENT_DATA {
        return Err(WebauthnError::TooLarge);
    }
    let raw: RawClientData = serde_json::from_slice(json).map_err(|_| WebauthnError::Malformed)?;
    if raw.kind != ceremony.client_data_type() {
        return Err(WebauthnError::WrongType);
    }
    if raw.origin != rp.origin {
        return Err(WebauthnError::WrongOrigin);
    }
    if raw.cross_origin == Some(true) {
        return Err(WebauthnError::CrossOrigin);
    }
    let challenge_ok = URL_SAFE_NO_PAD
        .decode(&raw.challenge)
        .is_ok_and(|bytes| bytes.len() == CHALLENGE_BYTES);
    if !challenge_ok {
        return Err(WebauthnError::UnknownChallenge);
    }
    Ok(ClientData {
        challenge: raw.challenge,
        hash: Sha256::digest(json).into(),
    })
}

/// Parsed authenticator data (§6.1).
struct AuthenticatorData<'a> {
    rp_id_hash: &'a [u8],
    flags: u8,
    sign_count: u32,
    /// The attested credential: its id and its COSE public key's bytes.
    credential: Option<(&'a [u8], &'a [u8])>,
}

fn authenticator_data(data: &[u8]) -> Result<AuthenticatorData<'_>, WebauthnError> {
    if data.len() > MAX_ATTESTATION_OBJECT {
        return Err(WebauthnError::TooLarge);
    }
    if data.len() < 37 {
        return Err(WebauthnError::Malformed);
    }
    let (rp_id_hash, flags) = (&data[..32], data[32]);
    let sign_count = u32::from_be_bytes([data[33], data[34], data[35], data[36]]);
    let mut rest = &data[37..];
    let mut credential = None;
    if flags & ATTESTED_CREDENTIAL != 0 {
        // AAGUID (16), credential id length (2), credential id, COSE key.
        if rest.len() < 18 {
            return Err(WebauthnError::Malformed);
        }
        let id_len = usize::from(u16::from_be_bytes([rest[16], rest[17]]));
        if id_len == 0 || id_len > MAX_CREDENTIAL_ID || rest.len() < 18 + id_len {
            return Err(WebauthnError::Malformed);
        }
        let id = &rest[18..18 + id_len];
        rest = &rest[18 + id_len..];
        let (_, used) = cbor::decode_prefix(rest).map_err(|_| WebauthnError::Malformed)?;
        credential = Some((id, &rest[..used]));
        rest = &rest[used..];
    }
    if flags & EXTENSIONS != 0 {
        let (_, used) = cbor::decode_prefix(rest).map_err(|_| WebauthnError::Malformed)?;
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        return Err(WebauthnError::Malformed);
    }
    Ok(AuthenticatorData {
        rp_id_hash,
        flags,
        sign_count,
        credential,
    })
}

/// The checks both ceremonies make of authenticator data: the relying party's id hash, the user
/// present, and verified when required.
fn check_flags(
    rp: &RelyingParty,
    data: &AuthenticatorData<'_>,
    require_user_verification: bool,
) -> Result<(), WebauthnError> {
    if data.rp_id_hash != rp.id_hash() {
        return Err(WebauthnError::WrongRelyingParty);
    }
    if data.flags & USER_PRESENT == 0 {
        return Err(WebauthnError::UserNotPresent);
    }
    if require_user_verification && data.flags & USER_VERIFIED == 0 {
        return Err(WebauthnError::UserNotVerified);
    }
    Ok(())
}

/// A public key from its COSE encoding (RFC 9053), of an algorithm this server takes.
enum PublicKey<'a> {
    /// The uncompressed P-256 point (0x04 ‖ x ‖ y).
    Es256(Vec<u8>),
    Ed25519(&'a [u8]),
    /// Modulus and exponent, big-endian without leading zeros.
    Rs256 {
        n: &'a [u8],
        e: &'a [u8],
    },
}

fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

fn public_key(cose: &[u8]) -> Result<(i64, PublicKey<'_>), WebauthnError> {
    let key = cbor::decode(cose).map_err(|_| WebauthnError::Malformed)?;
    let int = |k| key.get_int(k).and_then(Value::as_integer);
    let bytes = |k| key.get_int(k).and_then(Value::as_bytes);
    let unsupported = WebauthnError::UnsupportedAlgorithm;
    let alg = int(3).ok_or(WebauthnError::Malformed)?;
    let kty = int(1).ok_or(WebauthnError::Malformed)?;
    let parsed = match (i64::try_from(alg).map_err(|_| unsupported)?, kty) {
        // EC2, curve P-256.
        (ES256, 2) => {
            let (x, y) = (bytes(-2), bytes(-3));
            match (int(-1), x, y) {
                (Some(1), Some(x), Some(y)) if x.len() == 32 && y.len() == 32 => {
                    let mut point = Vec::with_capacity(65);
                    point.push(0x04);
                    point.extend_from_slice(x);
                    point.extend_from_slice(y);
                    (ES256, PublicKey::Es256(point))
                }
                _ => return Err(unsupported),
            }
        }
        // OKP, curve Ed25519.
        (EDDSA, 1) => match (int(-1), bytes(-2)) {
            (Some(6), Some(x)) if x.len() == 32 => (EDDSA, PublicKey::Ed25519(x)),
            _ => return Err(unsupported),
        },
        // RSA, 2048 to 4096 bits.
        (RS256, 3) => match (bytes(-1), bytes(-2)) {
            (Some(n), Some(e)) => {
                let (n, e) = (strip_zeros(n), strip_zeros(e));
                if !(256..=512).contains(&n.len()) || e.is_empty() || e.len() > 4 {
                    return Err(unsupported);
                }
                (RS256, PublicKey::Rs256 { n, e })
            }
            _ => return Err(unsupported),
        },
        _ => return Err(unsupported),
    };
    Ok(parsed)
}

fn verify_signature(cose: &[u8], message: &[u8], signature: &[u8]) -> Result<(), WebauthnError> {
    if signature.len() > MAX_SIGNATURE {
        return Err(WebauthnError::TooLarge);
    }
    let verified = match public_key(cose)?.1 {
        PublicKey::Es256(point) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, point)
                .verify(message, signature)
        }
        PublicKey::Ed25519(x) => {
            UnparsedPublicKey::new(&signature::ED25519, x).verify(message, signature)
        }
        PublicKey::Rs256 { n, e } => signature::RsaPublicKeyComponents { n, e }.verify(
            &signature::RSA_PKCS1_2048_8192_SHA256,
            message,
            signature,
        ),
    };
    verified.map_err(|_| WebauthnError::BadSignature)
}

/// A credential a registration created, to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCredential {
    pub credential_id: Vec<u8>,
    /// The COSE public key, as the authenticator encoded it.
    pub public_key: Vec<u8>,
    pub algorithm: i64,
    pub sign_count: u32,
    pub user_verified: bool,
}

/// §7.1 steps 11–22 for attestation `none`, after [`client_data`] and the challenge's check:
/// the attestation object's authenticator data names this relying party, the user was present
/// (and verified when required), it carries the new credential (whose id must be
/// `credential_id`, the one the browser reported) with a public key of an algorithm this server
/// offered. Whether the id is registered already is the store's question.
pub fn registration(
    rp: &RelyingParty,
    credential_id: &[u8],
    attestation_object: &[u8],
    require_user_verification: bool,
) -> Result<NewCredential, WebauthnError> {
    if attestation_object.len() > MAX_ATTESTATION_OBJECT {
        return Err(WebauthnError::TooLarge);
    }
    let object = cbor::decode(attestation_object).map_err(|_| WebauthnError::Malformed)?;
    let fmt = object
        .get_text("fmt")
        .and_then(Value::as_text)
        .ok_or(WebauthnError::Malformed)?;
    let statement = object.get_text("attStmt").ok_or(WebauthnError::Malformed)?;
    if fmt != "none" || *statement != Value::Map(Vec::new()) {
        return Err(WebauthnError::UnsupportedAttestation);
    }
    let data = object
        .get_text("authData")
        .and_then(Value::as_bytes)
        .ok_or(WebauthnError::Malformed)?;
    let data = authenticator_data(data)?;
    check_flags(rp, &data, require_user_verification)?;
    let Some((id, key)) = data.credential else {
        return Err(WebauthnError::NoCredentialData);
    };
    if id != credential_id {
        return Err(WebauthnError::CredentialIdMismatch);
    }
    let (algorithm, _) = public_key(key)?;
    Ok(NewCredential {
        credential_id: id.to_vec(),
        public_key: key.to_vec(),
        algorithm,
        sign_count: data.sign_count,
        user_verified: data.flags & USER_VERIFIED != 0,
    })
}

/// What a verified assertion tells: the authenticator's counter now, and whether the user was
/// verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assertion {
    pub sign_count: u32,
    pub user_verified: bool,
}

/// §7.2 steps 15–21, after [`client_data`], the challenge's check and the lookup of the stored
/// credential (`public_key`, its COSE bytes, and `stored_count`): the authenticator data names
/// this relying party, the user was present (and verified when required), the signature over
/// `authenticator_data ‖ SHA-256(clientDataJSON)` is right, and the counter moved on
/// ([`counter_moved_on`]).
pub fn assertion(
    rp: &RelyingParty,
    client: &ClientData,
    authenticator_data_bytes: &[u8],
    signature: &[u8],
    public_key: &[u8],
    stored_count: u32,
    require_user_verification: bool,
) -> Result<Assertion, WebauthnError> {
    let data = authenticator_data(authenticator_data_bytes)?;
    check_flags(rp, &data, require_user_verification)?;
    let mut message = Vec::with_capacity(authenticator_data_bytes.len() + 32);
    message.extend_from_slice(authenticator_data_bytes);
    message.extend_from_slice(&client.hash);
    verify_signature(public_key, &message, signature)?;
    if !counter_moved_on(stored_count, data.sign_count) {
        return Err(WebauthnError::CounterWentBack);
    }
    Ok(Assertion {
        sign_count: data.sign_count,
        user_verified: data.flags & USER_VERIFIED != 0,
    })
}

/// §7.2 step 21: an authenticator that counts (either counter non-zero) must show a counter
/// greater than the one stored; one that never counts (both zero, as synced passkeys do) passes.
pub fn counter_moved_on(stored: u32, presented: u32) -> bool {
    (stored == 0 && presented == 0) || presented > stored
}

/// Base64url without padding, as WebAuthn's JSON carries bytes.
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Bytes from base64url (padding tolerated), refused beyond `max` bytes.
pub fn decode(text: &str, max: usize) -> Result<Vec<u8>, WebauthnError> {
    if text.len() > max.div_ceil(3) * 4 + 4 {
        return Err(WebauthnError::TooLarge);
    }
    URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|_| WebauthnError::Malformed)
        .and_then(|bytes| {
            if bytes.len() > max {
                Err(WebauthnError::TooLarge)
            } else {
                Ok(bytes)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};

    fn rp() -> RelyingParty {
        RelyingParty::from_issuer("https://login.example.com/auth").unwrap()
    }

    fn client_json(kind: &str, challenge: &str, origin: &str) -> Vec<u8> {
        format!(r#"{{"type":"{kind}","challenge":"{challenge}","origin":"{origin}","crossOrigin":false}}"#)
            .into_bytes()
    }

    fn challenge() -> String {
        encode(&[7u8; CHALLENGE_BYTES])
    }

    /// An authenticator holding one key: makes authenticator data and signs as a real one does.
    enum Authenticator {
        P256(EcdsaKeyPair),
        Ed25519(Ed25519KeyPair),
    }

    impl Authenticator {
        fn p256() -> Self {
            let rng = SystemRandom::new();
            let alg = &signature::ECDSA_P256_SHA256_ASN1_SIGNING;
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
            Authenticator::P256(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap())
        }

        fn ed25519() -> Self {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
            Authenticator::Ed25519(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap())
        }

        /// The COSE key, hand-encoded.
        fn cose(&self) -> Vec<u8> {
            match self {
                Authenticator::P256(pair) => {
                    let point = pair.public_key().as_ref();
                    let mut key = vec![0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20];
                    key.extend_from_slice(&point[1..33]);
                    key.extend_from_slice(&[0x22, 0x58, 0x20]);
                    key.extend_from_slice(&point[33..65]);
                    key
                }
                Authenticator::Ed25519(pair) => {
                    let mut key = vec![0xa4, 0x01, 0x01, 0x03, 0x27, 0x20, 0x06, 0x21, 0x58, 0x20];
                    key.extend_from_slice(pair.public_key().as_ref());
                    key
                }
            }
        }

        fn sign(&self, message: &[u8]) -> Vec<u8> {
            match self {
                Authenticator::P256(pair) => pair
                    .sign(&SystemRandom::new(), message)
                    .unwrap()
                    .as_ref()
                    .to_vec(),
                Authenticator::Ed25519(pair) => pair.sign(message).as_ref().to_vec(),
            }
        }
    }

    fn auth_data(
        rp_id: &str,
        flags: u8,
        count: u32,
        credential: Option<(&[u8], &[u8])>,
    ) -> Vec<u8> {
        let mut data = Sha256::digest(rp_id.as_bytes()).to_vec();
        data.push(flags);
        data.extend_from_slice(&count.to_be_bytes());
        if let Some((id, key)) = credential {
            data.extend_from_slice(&[0u8; 16]);
            data.extend_from_slice(&(id.len() as u16).to_be_bytes());
            data.extend_from_slice(id);
            data.extend_from_slice(key);
        }
        data
    }

    /// `{"fmt": fmt, "attStmt": {}, "authData": data}`, hand-encoded.
    fn attestation_object(fmt: &str, data: &[u8]) -> Vec<u8> {
        let mut object = vec![0xa3, 0x63];
        object.extend_from_slice(b"fmt");
        object.push(0x60 + fmt.len() as u8);
        object.extend_from_slice(fmt.as_bytes());
        object.push(0x67);
        object.extend_from_slice(b"attStmt");
        object.push(0xa0);
        object.push(0x68);
        object.extend_from_slice(b"authData");
        object.push(0x59);
        object.extend_from_slice(&(data.len() as u16).to_be_bytes());
        object.extend_from_slice(data);
        object
    }

    #[test]
    fn the_relying_party_comes_from_the_issuer() {
        assert_eq!(
            rp(),
            RelyingParty {
                id: "login.example.com".into(),
                origin: "https://login.example.com".into()
            }
        );
        let local = RelyingParty::from_issuer("http://localhost:8001").unwrap();
        assert_eq!(
            (local.id.as_str(), local.origin.as_str()),
            ("localhost", "http://localhost:8001")
        );
        for (issuer, origin) in [
            (
                "https://Login.Example.com:443/auth",
                "https://login.example.com",
            ),
            ("http://localhost:80", "http://localhost"),
            (
                "https://login.example.com:8443",
                "https://login.example.com:8443",
            ),
            ("http://[::1]:80/x", "http://[::1]"),
        ] {
            let rp = RelyingParty::from_issuer(issuer).unwrap();
            assert_eq!(rp.origin, origin, "{issuer}");
        }
        for bad in ["ftp://x", "https://", "no scheme", "https://user@host/"] {
            assert_eq!(RelyingParty::from_issuer(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_registration_and_assertions_with_p256_and_ed25519() {
        let rp = rp();
        for authenticator in [Authenticator::p256(), Authenticator::ed25519()] {
            let id = b"credential-one";
            let cose = authenticator.cose();
            let data = auth_data(&rp.id, 0x45, 0, Some((id, &cose)));
            let json = client_json("webauthn.create", &challenge(), &rp.origin);
            let client = client_data(&rp, Ceremony::Create, &json).unwrap();
            assert_eq!(client.challenge, challenge());
            let object = attestation_object("none", &data);
            let created = registration(&rp, id, &object, true).unwrap();
            assert_eq!(created.public_key, cose);
            assert!(created.user_verified);
            // The browser reported another id than the authenticator data holds.
            assert_eq!(
                registration(&rp, b"other", &object, true),
                Err(WebauthnError::CredentialIdMismatch)
            );

            let json = client_json("webauthn.get", &challenge(), &rp.origin);
            let client = client_data(&rp, Ceremony::Get, &json).unwrap();
            let data = auth_data(&rp.id, 0x05, 5, None);
            let mut signed = data.clone();
            signed.extend_from_slice(&Sha256::digest(&json));
            let signature = authenticator.sign(&signed);
            let verified = assertion(&rp, &client, &data, &signature, &cose, 4, true).unwrap();
            assert_eq!(
                verified,
                Assertion {
                    sign_count: 5,
                    user_verified: true
                }
            );
            // Tampered signature, tampered data, tampered client data.
            let mut bad = signature.clone();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            assert_eq!(
                assertion(&rp, &client, &data, &bad, &cose, 4, true),
                Err(WebauthnError::BadSignature)
            );
            let mut later = data.clone();
            later[36] = 9;
            assert_eq!(
                assertion(&rp, &client, &later, &signature, &cose, 4, true),
                Err(WebauthnError::BadSignature)
            );
            let other_json = client_json("webauthn.get", &encode(&[8u8; 32]), &rp.origin);
            let other = client_data(&rp, Ceremony::Get, &other_json).unwrap();
            assert_eq!(
                assertion(&rp, &other, &data, &signature, &cose, 4, true),
                Err(WebauthnError::BadSignature)
            );
            // The counter did not move on: 5 stored, 5 presented.
            assert_eq!(
                assertion(&rp, &client, &data, &signature, &cose, 5, true),
                Err(WebauthnError::CounterWentBack)
            );
            // Present but not verified: enough for a second factor, not without password.
            let data = auth_data(&rp.id, 0x01, 6, None);
            let mut signed = data.clone();
            signed.extend_from_slice(&Sha256::digest(&json));
            let signature = authenticator.sign(&signed);
            assert!(assertion(&rp, &client, &data, &signature, &cose, 5, false).is_ok());
            assert_eq!(
                assertion(&rp, &client, &data, &signature, &cose, 5, true),
                Err(WebauthnError::UserNotVerified)
            );
        }
    }

    #[test]
    fn client_data_of_another_site_or_ceremony_is_refused() {
        let rp = rp();
        let check = |json: &[u8], ceremony| client_data(&rp, ceremony, json).map(|_| ());
        let good = client_json("webauthn.get", &challenge(), &rp.origin);
        assert_eq!(check(&good, Ceremony::Get), Ok(()));
        assert_eq!(
            check(&good, Ceremony::Create),
            Err(WebauthnError::WrongType)
        );
        for origin in [
            "https://evil.example",
            "http://login.example.com",
            "https://login.example.com:8443",
            "https://sub.login.example.com",
        ] {
            let json = client_json("webauthn.get", &challenge(), origin);
            assert_eq!(
                check(&json, Ceremony::Get),
                Err(WebauthnError::WrongOrigin),
                "{origin}"
            );
        }
        let framed = format!(
            r#"{{"type":"webauthn.get","challenge":"{}","origin":"{}","crossOrigin":true}}"#,
            challenge(),
            rp.origin
        );
        assert_eq!(
            check(framed.as_bytes(), Ceremony::Get),
            Err(WebauthnError::CrossOrigin)
        );
        for short in ["", "AAAA", "not base64!"] {
            let json = client_json("webauthn.get", short, &rp.origin);
            assert_eq!(
                check(&json, Ceremony::Get),
                Err(WebauthnError::UnknownChallenge)
            );
        }
        assert_eq!(
            check(b"{not json", Ceremony::Get),
            Err(WebauthnError::Malformed)
        );
        assert_eq!(check(b"[]", Ceremony::Get), Err(WebauthnError::Malformed));
        let huge = vec![b' '; MAX_CLIENT_DATA + 1];
        assert_eq!(check(&huge, Ceremony::Get), Err(WebauthnError::TooLarge));
    }

    #[test]
    fn registrations_for_another_relying_party_or_malformed_are_refused() {
        let rp = rp();
        let authenticator = Authenticator::p256();
        let cose = authenticator.cose();
        let id = b"id";
        let object = |rp_id: &str, flags: u8| {
            attestation_object("none", &auth_data(rp_id, flags, 0, Some((id, &cose))))
        };
        assert!(registration(&rp, id, &object(&rp.id, 0x41), false).is_ok());
        assert_eq!(
            registration(&rp, id, &object("evil.example", 0x45), false),
            Err(WebauthnError::WrongRelyingParty)
        );
        assert_eq!(
            registration(&rp, id, &object(&rp.id, 0x44), false),
            Err(WebauthnError::UserNotPresent)
        );
        assert_eq!(
            registration(&rp, id, &object(&rp.id, 0x41), true),
            Err(WebauthnError::UserNotVerified)
        );
        // No attested credential data.
        let bare = attestation_object("none", &auth_data(&rp.id, 0x05, 0, None));
        assert_eq!(
            registration(&rp, id, &bare, false),
            Err(WebauthnError::NoCredentialData)
        );
        // Another attestation format.
        let packed = attestation_object("packed", &auth_data(&rp.id, 0x45, 0, Some((id, &cose))));
        assert_eq!(
            registration(&rp, id, &packed, false),
            Err(WebauthnError::UnsupportedAttestation)
        );
        // A key of an algorithm not offered (ES384, alg -35).
        let mut es384 = cose.clone();
        es384[4] = 0x38;
        es384.insert(5, 0x22);
        let object_384 =
            attestation_object("none", &auth_data(&rp.id, 0x45, 0, Some((id, &es384))));
        assert_eq!(
            registration(&rp, id, &object_384, false),
            Err(WebauthnError::UnsupportedAlgorithm)
        );
        // Trailing bytes after the key; truncated at every length; oversized; garbage.
        let mut trailing = auth_data(&rp.id, 0x45, 0, Some((id, &cose)));
        trailing.push(0);
        assert_eq!(
            registration(&rp, id, &attestation_object("none", &trailing), false),
            Err(WebauthnError::Malformed)
        );
        let good = object(&rp.id, 0x45);
        for end in 0..good.len() {
            assert!(registration(&rp, id, &good[..end], false).is_err(), "{end}");
        }
        let huge = vec![0u8; MAX_ATTESTATION_OBJECT + 1];
        assert_eq!(
            registration(&rp, id, &huge, false),
            Err(WebauthnError::TooLarge)
        );
        for garbage in [
            &[0xffu8][..],
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            b"{}",
        ] {
            assert!(registration(&rp, id, garbage, false).is_err());
        }
        // A credential id length beyond the data.
        let mut lying = auth_data(&rp.id, 0x45, 0, None);
        lying.extend_from_slice(&[0u8; 16]);
        lying.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(
            registration(&rp, id, &attestation_object("none", &lying), false),
            Err(WebauthnError::Malformed)
        );
    }

    #[test]
    fn counters_must_move_on_unless_the_authenticator_never_counts() {
        assert!(counter_moved_on(0, 0));
        assert!(counter_moved_on(0, 1));
        assert!(counter_moved_on(7, 8));
        assert!(!counter_moved_on(7, 7));
        assert!(!counter_moved_on(7, 3));
        assert!(!counter_moved_on(7, 0));
    }

    #[test]
    fn base64url_input_is_bounded() {
        assert_eq!(decode("AQID", 3), Ok(vec![1, 2, 3]));
        assert_eq!(decode("AQID", 2), Err(WebauthnError::TooLarge));
        assert_eq!(
            decode(&"A".repeat(10_000), 100),
            Err(WebauthnError::TooLarge)
        );
        assert_eq!(decode("***", 100), Err(WebauthnError::Malformed));
    }
}
