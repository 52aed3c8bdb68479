//! Secrets kept in files (a mounted Kubernetes Secret, a file of mode 0600), read one way by
//! every binary: one bounded read, surrounding whitespace dropped, an empty file refused. The
//! errors say what went wrong, never what the file holds; the caller names the setting.

use std::io::Read;
use std::path::Path;

/// The largest secret file read.
pub const MAX_SECRET_FILE: u64 = 4096;

/// The secret in `path`, trimmed.
pub fn read(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut text = String::new();
    file.take(MAX_SECRET_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read: {e}"))?;
    if text.len() as u64 > MAX_SECRET_FILE {
        return Err(format!("larger than {MAX_SECRET_FILE} bytes"));
    }
    let secret = text.trim();
    if secret.is_empty() {
        return Err("the file is empty".to_owned());
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_is_trimmed_bounded_and_never_empty() {
        let dir = std::env::temp_dir().join(format!("tg-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        std::fs::write(&path, "  s3cret\n").unwrap();
        assert_eq!(read(&path).unwrap(), "s3cret");
        std::fs::write(&path, " \n").unwrap();
        assert_eq!(read(&path).unwrap_err(), "the file is empty");
        std::fs::write(&path, "x".repeat(5000)).unwrap();
        assert_eq!(read(&path).unwrap_err(), "larger than 4096 bytes");
        assert!(
            read(&dir.join("missing"))
                .unwrap_err()
                .starts_with("cannot read: ")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
