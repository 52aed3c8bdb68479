//! Files only this user may read, for what holds secrets (the SQLite database, the stack's
//! proxy secret): folders created 0700, files created 0600 and exclusively, so a file or a
//! symlink planted at the path is never written through.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates the folder and its missing parents, 0700; an existing folder is left as it is.
pub fn create_folder(folder: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(folder)
}

/// Creates a new file, 0600, for writing; fails with `AlreadyExists` when anything, a symlink
/// included, is at `path` already (`O_CREAT | O_EXCL`, which does not follow symlinks).
pub fn create_new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Writes `secret` to a new file of a random name beside `path` (created exclusively, 0600:
/// never through a file or symlink planted there), then renames it over `path`.
pub fn write_secret(path: &Path, secret: &str) -> io::Result<()> {
    let tmp = write_tmp_beside(path, secret)?;
    std::fs::rename(&tmp, path)
}

/// Like [`write_secret`], but leaves a file already at `path` as it is (linked into place, not
/// renamed over it): two processes starting at once keep one secret.
pub fn write_new_secret(path: &Path, secret: &str) -> io::Result<()> {
    let tmp = write_tmp_beside(path, secret)?;
    let linked = std::fs::hard_link(&tmp, path);
    std::fs::remove_file(&tmp)?;
    match linked {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// A new file of a random name beside `path` (created exclusively, 0600, its folder 0700 when
/// missing) holding `secret`.
fn write_tmp_beside(path: &Path, secret: &str) -> io::Result<std::path::PathBuf> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_folder(dir)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", crate::secrets::random_client_id()));
    let mut file = create_new_file(&tmp)?;
    file.write_all(secret.as_bytes())?;
    file.sync_all()?;
    Ok(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn new_files_are_private_and_never_written_through_what_is_there() {
        let dir =
            std::env::temp_dir().join(format!("tg-private-{}", crate::secrets::random_client_id()));
        create_folder(&dir.join("inner")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("inner")), 0o700);
        let file = dir.join("inner/secret");
        create_new_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        // A second creation, or one at a planted symlink, is refused; the target stays empty.
        assert_eq!(
            create_new_file(&file).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let target = dir.join("attackers-file");
        std::fs::write(&target, "").unwrap();
        let link = dir.join("inner/planted");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            create_new_file(&link).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
