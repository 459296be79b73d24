//! Files this process writes and reads for itself: whole and atomic, private to this user,
//! and bounded when read, so a huge or endless file is refused rather than cut.

use std::io::Write;
use std::path::Path;

/// Writes a file so that a reader sees the old content or the new, never a torn one:
/// temp file in the same directory, fsync, rename. `mode` applies on Unix.
pub fn write_atomic(path: &Path, data: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        crate::random::random_hex(4)
    ));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(m) = mode {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(m);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let result = (|| {
        let mut f = opts.open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The permission bits a private file or directory may not have: any for group or others.
#[cfg(unix)]
const NOT_THE_OWNERS: u32 = 0o077;

/// Makes `dir` and any missing parent, readable by this user alone (anchor: private_dir): what
/// it creates is 0700, and an existing `dir` open to group or others is tightened to its owner's
/// bits, with one warning naming it and its old mode. Parents that already exist are left as
/// they are.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    tighten(dir)
}

/// Makes sure `path` is a file readable by this user alone (anchor: private_file): created
/// empty with mode 0600 when missing (its directory must exist), an existing one open to group
/// or others tightened as [`private_dir`] tightens. A file another program creates next to it
/// with its mode (SQLite's `-wal` and `-shm`) is then private too.
pub fn private_file(path: &Path) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    drop(opts.open(path)?);
    tighten_if_present(path)
}

/// [`private_file`]'s tightening alone, for a file that may not exist yet (SQLite's `-wal` and
/// `-shm`, made by SQLite itself): a missing one is fine.
pub fn tighten_if_present(path: &Path) -> std::io::Result<()> {
    match tighten(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Takes group's and others' bits off `path` when it has any, and says so once: after this it
/// has none, so the next start finds nothing to say.
#[cfg(not(unix))]
fn tighten(path: &Path) -> std::io::Result<()> {
    std::fs::metadata(path).map(drop)
}

/// Takes group's and others' bits off `path` when it has any, and says so once: after this it
/// has none, so the next start finds nothing to say. A path this user may not change (one that
/// another user owns) is left as it is with a warning: it worked before, and a mode is no reason
/// to stop.
#[cfg(unix)]
fn tighten(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let old = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if old & NOT_THE_OWNERS == 0 {
        return Ok(());
    }
    let new = old & !NOT_THE_OWNERS;
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(new)) {
        Ok(()) => tracing::warn!(
            "{} was readable beyond its owner (mode {old:04o}); made it {new:04o}",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => tracing::warn!(
            "{} is readable beyond its owner (mode {old:04o}) and could not be made {new:04o} \
             ({e}); its owner can",
            path.display()
        ),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// Reads a file of at most `max` bytes; a larger one (or an endless one such as `/dev/zero`)
/// is refused whole, never cut, after reading one byte past the bound.
pub fn read_bounded_bytes(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    // Sized once from the metadata (the read still stops at max + 1, whatever it says), so a
    // file is read in one call rather than a doubling buffer's dozen.
    let hint = file.metadata().map_or(0, |m| m.len().min(max + 1));
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// Reads a UTF-8 text file of at most `max` bytes, as `read_bounded_bytes` does.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded_bytes(path, max)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}
