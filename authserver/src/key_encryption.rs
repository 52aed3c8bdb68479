//! The key-encryption keys (KEKs) that keep the JWT signing keys encrypted at rest, derived from
//! the secrets of `AUTHSERVER_SECRETS_SYSTEM` or `AUTHSERVER_SECRETS_SYSTEM_FILE` (as Ory
//! Hydra's `SECRETS_SYSTEM`: a list whose first secret encrypts and whose every secret decrypts,
//! so a new secret goes first and `keys reencrypt` moves every key under it).
//!
//! Each secret gives, by HKDF-SHA256, an AES-256-GCM key and a public key id stored beside each
//! ciphertext. A sealed key is base64 of a random 96-bit nonce followed by the ciphertext and its
//! tag, with the key's row id (its `kid`) as associated data, so a ciphertext moved to another
//! row does not open.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA256, KeyType, Salt};
use ring::rand::{SecureRandom, SystemRandom};

/// The environment variable holding the secrets (separated by commas or whitespace).
pub const SECRETS_VAR: &str = "AUTHSERVER_SECRETS_SYSTEM";
/// The environment variable naming a file of secrets, one a line (or the settings key
/// `secrets_system_file`).
pub const SECRETS_FILE_VAR: &str = "AUTHSERVER_SECRETS_SYSTEM_FILE";
/// The shortest secret accepted (characters): `openssl rand -hex 16` gives 32.
pub const MIN_SECRET_LEN: usize = 32;

/// The name of the file, in a data directory (the SQLite database's folder, or the stack's
/// `TOKENGATE_DATA_DIR`), that keeps the secret when neither [`SECRETS_VAR`] nor
/// [`SECRETS_FILE_VAR`] is set.
pub const KEPT_FILE_NAME: &str = "secrets-system";

/// The KEKs of the secret kept in `file`, which is created on first use (a random secret, mode
/// 0600; never replacing a file that is there, also when two processes start at once). `what`
/// names the file in messages ("the stack's secret file").
pub fn kept_in(
    file: &std::path::Path,
    what: &str,
) -> anyhow::Result<std::sync::Arc<KeyEncryption>> {
    let origin = format!("{what} {} (or set {SECRETS_VAR})", file.display());
    if !file.exists() {
        crate::private_files::write_new_secret(file, &crate::secrets::random_token()).map_err(
            |error| {
                anyhow::anyhow!(
                    "cannot keep the key-encryption secret in {}: {error}",
                    file.display()
                )
            },
        )?;
    }
    let kek = KeyEncryption::from_file(file, &origin)
        .map_err(|problem| anyhow::anyhow!("{origin}: {problem}"))?;
    Ok(std::sync::Arc::new(kek))
}

/// Refuses a key-encryption secret file that others may read or its group write, as PostgreSQL
/// refuses such a server key: whoever reads it opens every signing key of the database. The
/// message names the mode and the fix, never the secret. Group read passes (a Kubernetes Secret
/// in a pod with `fsGroup` is 0440).
pub fn not_world_readable(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o777,
        Err(error) => return Err(format!("cannot read: {error}")),
    };
    // Group read is let through, as PostgreSQL does for its key files: Kubernetes makes a
    // Secret mounted in a pod with `fsGroup` 0440 whatever its `defaultMode`.
    if mode & 0o027 != 0 {
        return Err(format!(
            "mode {mode:04o}: others may read it or its group may write it; make it the owner's \
             (chmod 600 {}, or 640 to share it with a group)",
            path.display()
        ));
    }
    Ok(())
}

/// The KEKs of the configured secrets, the first one encrypting.
pub struct KeyEncryption {
    keks: Vec<Kek>,
    /// Where the secrets came from, for messages (never the secrets).
    origin: String,
}

struct Kek {
    id: String,
    key: LessSafeKey,
    /// The key of DPoP nonces (RFC 9449 §8), the same in every process given the secret.
    nonce_key: [u8; 32],
}

impl std::fmt::Debug for KeyEncryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEncryption")
            .field("ids", &self.ids())
            .field("origin", &self.origin)
            .finish()
    }
}

/// A length for HKDF output.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// Why a sealed key did not open.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenError {
    /// No configured secret derives the KEK it was sealed with.
    UnknownKek,
    /// The KEK is known but the ciphertext, its tag or its row id does not match.
    Altered,
}

impl KeyEncryption {
    /// The KEKs of `secrets` (first encrypts), read from `origin` (named in messages); refuses
    /// an empty list and secrets shorter than [`MIN_SECRET_LEN`], naming their position only.
    pub fn from_secrets(secrets: &[&str], origin: &str) -> Result<KeyEncryption, String> {
        if secrets.is_empty() {
            return Err("holds no secret".into());
        }
        let keks = secrets
            .iter()
            .enumerate()
            .map(|(at, secret)| {
                if secret.chars().count() < MIN_SECRET_LEN {
                    return Err(format!(
                        "secret {} of {} is shorter than {MIN_SECRET_LEN} characters (make one with `openssl rand -hex 32`)",
                        at + 1,
                        secrets.len()
                    ));
                }
                Ok(Kek::derive(secret))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KeyEncryption {
            keks,
            origin: origin.to_owned(),
        })
    }

    /// The KEKs of the secrets in the file at `path`, one a line (blank lines skipped); a file
    /// others may read or its group write is refused ([`not_world_readable`]).
    pub fn from_file(path: &std::path::Path, origin: &str) -> Result<KeyEncryption, String> {
        not_world_readable(path)?;
        let text = resource_server::secret_file::read(path)?;
        KeyEncryption::from_text(&text, origin)
    }

    /// The KEKs of the secrets in `text` (a file's), one a line (blank lines skipped).
    pub fn from_text(text: &str, origin: &str) -> Result<KeyEncryption, String> {
        let secrets: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        KeyEncryption::from_secrets(&secrets, origin)
    }

    /// The id of the KEK that encrypts (the first secret's).
    pub fn current_id(&self) -> &str {
        &self.keks[0].id
    }

    /// The ids of every KEK, the encrypting one first.
    pub fn ids(&self) -> Vec<&str> {
        self.keks.iter().map(|k| k.id.as_str()).collect()
    }

    /// The key DPoP nonces are made under (derived from the first secret): every replica
    /// given the same secrets issues and accepts the same nonces.
    pub fn dpop_nonce_key(&self) -> &[u8] {
        &self.keks[0].nonce_key
    }

    /// Where the secrets came from (the variable or file), for messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// `plaintext` sealed under the current KEK for the row `row_id`: (KEK id, base64 text).
    pub fn seal(&self, row_id: &str, plaintext: &[u8]) -> anyhow::Result<(String, String)> {
        self.seal_bound(&aad(row_id), plaintext)
    }

    /// `plaintext` sealed under the current KEK, bound to `context` (associated data naming the
    /// row it belongs in, as `tokengate totp user=7`): (KEK id, base64 text).
    pub fn seal_bound(&self, context: &[u8], plaintext: &[u8]) -> anyhow::Result<(String, String)> {
        let kek = &self.keks[0];
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| anyhow::anyhow!("no randomness for a key-encryption nonce"))?;
        let mut sealed = plaintext.to_vec();
        kek.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context),
                &mut sealed,
            )
            .map_err(|_| anyhow::anyhow!("cannot encrypt a secret"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok((kek.id.clone(), STANDARD.encode(out)))
    }

    /// What [`KeyEncryption::seal`] sealed for `row_id` under the KEK `kek_id`.
    pub fn open(&self, row_id: &str, kek_id: &str, sealed: &str) -> Result<Vec<u8>, OpenError> {
        self.open_bound(&aad(row_id), kek_id, sealed)
    }

    /// What [`KeyEncryption::seal_bound`] sealed for `context` under the KEK `kek_id`.
    pub fn open_bound(
        &self,
        context: &[u8],
        kek_id: &str,
        sealed: &str,
    ) -> Result<Vec<u8>, OpenError> {
        let kek = self
            .keks
            .iter()
            .find(|k| k.id == kek_id)
            .ok_or(OpenError::UnknownKek)?;
        let bytes = STANDARD.decode(sealed).map_err(|_| OpenError::Altered)?;
        if bytes.len() <= NONCE_LEN {
            return Err(OpenError::Altered);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| OpenError::Altered)?;
        let mut sealed = sealed.to_vec();
        let plaintext = kek
            .key
            .open_in_place(nonce, Aad::from(context), &mut sealed)
            .map_err(|_| OpenError::Altered)?;
        Ok(plaintext.to_vec())
    }
}

/// The associated data of a sealed signing key: its row.
fn aad(row_id: &str) -> Vec<u8> {
    format!("tokengate signing_keys kid={row_id}").into_bytes()
}

impl Kek {
    fn derive(secret: &str) -> Kek {
        let prk = Salt::new(HKDF_SHA256, b"tokengate secrets_system v1").extract(secret.as_bytes());
        let key = prk
            .expand(&[b"signing-key encryption".as_slice()], &AES_256_GCM)
            .map(UnboundKey::from)
            .expect("HKDF-SHA256 yields an AES-256 key");
        let mut id = [0u8; 8];
        prk.expand(&[b"key id".as_slice()], Len(id.len()))
            .and_then(|okm| okm.fill(&mut id))
            .expect("HKDF-SHA256 yields 8 bytes");
        let mut nonce_key = [0u8; 32];
        prk.expand(&[b"dpop nonces".as_slice()], Len(nonce_key.len()))
            .and_then(|okm| okm.fill(&mut nonce_key))
            .expect("HKDF-SHA256 yields 32 bytes");
        Kek {
            id: hex::encode(id),
            key: LessSafeKey::new(key),
            nonce_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "a-secret-of-at-least-thirty-two-characters";
    const B: &str = "another-secret-of-thirty-two-characters-or-more";

    #[test]
    fn sealed_keys_open_under_any_listed_secret_for_their_row_only() {
        let old = KeyEncryption::from_secrets(&[A], "test").unwrap();
        let (id, sealed) = old.seal("kid-1", b"pkcs8 bytes").unwrap();
        assert_eq!(id, old.current_id());
        assert!(!sealed.contains("pkcs8"));
        assert_eq!(old.open("kid-1", &id, &sealed).unwrap(), b"pkcs8 bytes");
        assert_eq!(old.open("kid-2", &id, &sealed), Err(OpenError::Altered));
        // A rotated list: the new secret encrypts, the old still decrypts.
        let rotated = KeyEncryption::from_secrets(&[B, A], "test").unwrap();
        assert_ne!(rotated.current_id(), id);
        assert_eq!(rotated.open("kid-1", &id, &sealed).unwrap(), b"pkcs8 bytes");
        let wrong = KeyEncryption::from_secrets(&[B], "test").unwrap();
        assert_eq!(
            wrong.open("kid-1", &id, &sealed),
            Err(OpenError::UnknownKek)
        );
        let mut altered = STANDARD.decode(&sealed).unwrap();
        altered[NONCE_LEN] ^= 1;
        assert_eq!(
            old.open("kid-1", &id, &STANDARD.encode(altered)),
            Err(OpenError::Altered)
        );
    }

    /// A secret file others may read (or its group write) is refused, naming its mode (it was
    /// read whatever its mode); the owner's own file, or one its group may read, is read.
    #[test]
    fn a_secret_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tg-kek-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secrets-system");
        std::fs::write(&path, format!("{A}\n{B}\n")).unwrap();
        for mode in [0o644, 0o604, 0o620, 0o660, 0o602, 0o444] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = KeyEncryption::from_file(&path, "test").unwrap_err();
            assert_eq!(
                err,
                format!(
                    "mode {mode:04o}: others may read it or its group may write it; make it the \
                     owner's (chmod 600 {}, or 640 to share it with a group)",
                    path.display()
                )
            );
            assert!(!err.contains(A));
        }
        // 0440 is what Kubernetes makes of a Secret mounted with `fsGroup`.
        for mode in [0o600, 0o400, 0o640, 0o440] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let kek = KeyEncryption::from_file(&path, "test").unwrap();
            assert_eq!(kek.ids().len(), 2);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn short_or_missing_secrets_are_refused_without_showing_them() {
        let err = KeyEncryption::from_secrets(&[A, "short-secret"], "test").unwrap_err();
        assert!(err.starts_with("secret 2 of 2 is shorter than 32"), "{err}");
        assert!(!err.contains("short-secret"));
        assert!(KeyEncryption::from_secrets(&[], "test").is_err());
        let shown = format!("{:?}", KeyEncryption::from_secrets(&[A], "test").unwrap());
        assert!(!shown.contains(A), "{shown}");
    }
}
