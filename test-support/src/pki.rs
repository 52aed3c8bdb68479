//! Test certificates from the openssl CLI: a CA (ECDSA P-256) and server certificates for
//! `localhost` and `127.0.0.1` it signed, in a temporary directory removed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory of test certificates: a CA, and server certificates it signed.
pub struct Pki {
    dir: PathBuf,
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// A fresh directory with `ca.pem`/`ca.key` (ECDSA P-256, as the benches use).
    #[allow(clippy::new_without_default)] // Runs openssl and makes files: no default value.
    pub fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "tokengate-tls-{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        openssl(
            &dir,
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                "ca.key",
            ],
        );
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
                "-subj",
                "/CN=tokengate test CA",
                "-days",
                "2",
                "-out",
                "ca.pem",
            ],
        );
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `NAME.pem` and `NAME.key` (PKCS#8): a server certificate for localhost and 127.0.0.1
    /// with common name `NAME`, signed by the CA.
    pub fn server(&self, name: &str) -> (PathBuf, PathBuf) {
        self.issue(name, "san.ext")
    }

    /// `NAME.pem` and `NAME.key`: a client certificate (extended key usage `clientAuth`) with
    /// common name `NAME` and the DNS name `NAME.clients.test`, signed by the CA.
    #[allow(dead_code)]
    pub fn client(&self, name: &str) -> (PathBuf, PathBuf) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!(
                "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n\
                 subjectAltName=DNS:{name}.clients.test\n"
            ),
        )
        .unwrap();
        self.issue(name, &ext)
    }

    /// `NAME.pem` and `NAME.key`: a client certificate signed by the CA whose subject is
    /// `subject`, in openssl's `-subj` form (`/CN=a,O=x` is one RDN whose value holds a comma;
    /// `/CN=a/O=x` two RDNs; `/CN=a+UID=b` one RDN of two attributes).
    #[allow(dead_code)]
    pub fn client_with_subject(&self, name: &str, subject: &str) -> (PathBuf, PathBuf) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        self.issue_with_subject(name, &ext, subject)
    }

    fn issue(&self, name: &str, ext: &str) -> (PathBuf, PathBuf) {
        self.issue_with_subject(name, ext, &format!("/CN={name}"))
    }

    fn issue_with_subject(&self, name: &str, ext: &str, subject: &str) -> (PathBuf, PathBuf) {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        openssl(
            &self.dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                &key,
            ],
        );
        openssl(
            &self.dir,
            &["req", "-new", "-key", &key, "-subj", subject, "-out", &csr],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                ext,
                "-out",
                &pem,
            ],
        );
        (self.path(&pem), self.path(&key))
    }

    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
