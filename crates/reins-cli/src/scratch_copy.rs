//! The scratch copy of a workspace for `reins replay`: bounded, sparse files kept sparse, every entry opened
//! beneath its directory's handle.
//!
//! - **Bounded**: the files' sizes (their apparent sizes, holes included) may come to at most `max_bytes` in all
//!   ([`DEFAULT_MAX_COPY_BYTES`] unless `--max-copy` says otherwise); the file that would pass the bound is
//!   refused before a byte of it is written, and each file is copied up to the size it had when opened (one that
//!   grows meanwhile cannot pass the bound).
//! - **Holes kept**: a file with fewer blocks than its size (`st_blocks * 512 < st_size`) is copied region by
//!   region (`SEEK_DATA`/`SEEK_HOLE`), its holes left as holes; it still counts at its size.
//! - **Beneath handles**: the tree is walked through directory handles; each entry is opened relative to its
//!   directory's handle without following a symlink (`openat` with `O_NOFOLLOW`) and checked to be what was
//!   listed (the same inode). A directory or file swapped for a symlink during the copy is refused, never
//!   followed; symlinks themselves are copied as links. FIFOs, sockets and devices are left out, never opened.
//!   Directories are made private (0700); files keep their permission bits (without set-id bits).

use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom};
use tokio_util::sync::CancellationToken;

/// The default bound of a replay's copy: 1 GiB of file content.
pub const DEFAULT_MAX_COPY_BYTES: u64 = 1 << 30;
/// The deepest directory level copied (each level holds three descriptors while it is copied).
pub const MAX_COPY_DEPTH: usize = 128;

/// Why the copy stopped.
#[derive(Debug)]
pub enum CopyError {
    /// The files come to more than the bound.
    TooLarge {
        /// The file that would pass it, relative to the workspace.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// An entry changed between being listed and being opened (for example a directory swapped for a symlink).
    Changed(PathBuf),
    /// Deeper than [`MAX_COPY_DEPTH`].
    TooDeep(PathBuf),
    /// A signal stopped it.
    Cancelled,
    /// The system refused something.
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::TooLarge { path, size, max } => write!(
                f,
                "the workspace's files come to more than {} (at {}, a file of {}): raise the bound with --max-copy \
                 SIZE, or pass --no-tools to replay the recorded results",
                shown_size(*max),
                path.display(),
                shown_size(*size)
            ),
            CopyError::Changed(p) => {
                write!(
                    f,
                    "{} changed during the copy (it is not what was listed; a symlink is never followed)",
                    p.display()
                )
            }
            CopyError::TooDeep(p) => write!(f, "{} is more than {MAX_COPY_DEPTH} directory levels deep", p.display()),
            CopyError::Cancelled => f.write_str("cancelled"),
            CopyError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for CopyError {}

/// `n` bytes for people: `1 GiB`, `512 MiB`, `3000 bytes`.
pub fn shown_size(n: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// A size: plain bytes, or a number with `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024) or `KB`/`MB`/`GB`/`TB`
/// (powers of 1000), `B` for bytes; any case, a space allowed. At least 1.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size (e.g. 1GiB, 500MB, 1048576)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(format!("{s:?} is not a size (e.g. 1GiB, 500MB, 1048576)")),
    };
    match n.checked_mul(mult) {
        Some(0) => Err(format!("{s:?}: the size must be at least 1 byte")),
        Some(v) => Ok(v),
        None => Err(format!("{s:?} is too large")),
    }
}

/// Copies the tree of `from` into the existing, empty directory `to` (see the module's text) and returns the
/// bytes counted. Stops with [`CopyError::Cancelled`] once `cancel` fires.
pub fn copy_tree(from: &Path, to: &Path, max_bytes: u64, cancel: &CancellationToken) -> Result<u64, CopyError> {
    let dir = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let src = rustix::fs::openat(rustix::fs::CWD, from, dir, Mode::empty())
        .map_err(|e| CopyError::Io(from.to_path_buf(), e.into()))?;
    let dst = rustix::fs::openat(rustix::fs::CWD, to, dir | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| CopyError::Io(to.to_path_buf(), e.into()))?;
    let mut copy = Copy { max_bytes, total: 0, cancel };
    copy.dir(&src, &dst, Path::new("."), 0)?;
    Ok(copy.total)
}

/// What an entry was when its directory was listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listed {
    /// A directory with this inode.
    Dir(u64, u64),
    /// A regular file with this inode.
    File(u64, u64),
    /// A symlink.
    Link,
    /// Anything else (left out).
    Other,
}

struct Copy<'a> {
    max_bytes: u64,
    total: u64,
    cancel: &'a CancellationToken,
}

impl Copy<'_> {
    fn dir(&mut self, src: &OwnedFd, dst: &OwnedFd, at: &Path, depth: usize) -> Result<(), CopyError> {
        if depth > MAX_COPY_DEPTH {
            return Err(CopyError::TooDeep(at.to_path_buf()));
        }
        let io = |e: rustix::io::Errno| CopyError::Io(at.to_path_buf(), e.into());
        for entry in rustix::fs::Dir::read_from(src).map_err(io)? {
            if self.cancel.is_cancelled() {
                return Err(CopyError::Cancelled);
            }
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let path = at.join(OsStr::from_bytes(name.to_bytes()));
            let st = rustix::fs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| CopyError::Io(path.clone(), e.into()))?;
            let listed = match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => Listed::Dir(st.st_dev, st.st_ino),
                FileType::RegularFile => Listed::File(st.st_dev, st.st_ino),
                FileType::Symlink => Listed::Link,
                _ => Listed::Other,
            };
            self.entry(src, dst, name, listed, &path, depth)?;
        }
        Ok(())
    }

    /// Copies the entry `name` of `src`, listed as `listed`, into `dst`.
    fn entry(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &CStr,
        listed: Listed,
        path: &Path,
        depth: usize,
    ) -> Result<(), CopyError> {
        let io = |e: rustix::io::Errno| CopyError::Io(path.to_path_buf(), e.into());
        // Opened beneath the directory's handle, never through a symlink; what was listed or an error.
        let open_listed = |flags: OFlags, dev: u64, ino: u64| -> Result<OwnedFd, CopyError> {
            let fd = rustix::fs::openat(src, name, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(
                |e| match e {
                    rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => CopyError::Changed(path.to_path_buf()),
                    e => io(e),
                },
            )?;
            let st = rustix::fs::fstat(&fd).map_err(io)?;
            if (st.st_dev, st.st_ino) != (dev, ino) {
                return Err(CopyError::Changed(path.to_path_buf()));
            }
            Ok(fd)
        };
        match listed {
            Listed::Dir(dev, ino) => {
                let sub = open_listed(OFlags::RDONLY | OFlags::DIRECTORY, dev, ino)?;
                rustix::fs::mkdirat(dst, name, Mode::from_raw_mode(0o700)).map_err(io)?;
                let made = rustix::fs::openat(
                    dst,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io)?;
                self.dir(&sub, &made, path, depth + 1)
            }
            Listed::File(dev, ino) => {
                let file = open_listed(OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY, dev, ino)?;
                let st = rustix::fs::fstat(&file).map_err(io)?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(CopyError::Changed(path.to_path_buf()));
                }
                let size = u64::try_from(st.st_size).unwrap_or(0);
                if self.total.saturating_add(size) > self.max_bytes {
                    return Err(CopyError::TooLarge { path: path.to_path_buf(), size, max: self.max_bytes });
                }
                self.total += size;
                let out = rustix::fs::openat(
                    dst,
                    name,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(io)?;
                let sparse = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512) < size;
                copy_file(&file, &out, size, sparse).map_err(io)?;
                rustix::fs::fchmod(&out, Mode::from_raw_mode(st.st_mode & 0o777)).map_err(io)
            }
            Listed::Link => {
                let target = rustix::fs::readlinkat(src, name, Vec::new()).map_err(io)?;
                rustix::fs::symlinkat(target.as_c_str(), dst, name).map_err(io)
            }
            Listed::Other => Ok(()),
        }
    }
}

/// Copies the first `size` bytes of `from` into the empty file `to`: region by region when `sparse` (the holes
/// stay holes; where the file system cannot tell, the whole of it), else at once.
fn copy_file(from: &OwnedFd, to: &OwnedFd, size: u64, sparse: bool) -> rustix::io::Result<()> {
    let mut offset = 0;
    if sparse {
        while offset < size {
            let data = match rustix::fs::seek(from, SeekFrom::Data(offset)) {
                Ok(d) => d,
                // No data after `offset`: the rest is a hole.
                Err(rustix::io::Errno::NXIO) => break,
                // The file system cannot tell: copy the rest whole.
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => {
                    copy_range(from, to, offset, size)?;
                    break;
                }
                Err(e) => return Err(e),
            };
            if data >= size {
                break;
            }
            let hole = rustix::fs::seek(from, SeekFrom::Hole(data))?.min(size);
            copy_range(from, to, data, hole)?;
            offset = hole;
        }
    } else {
        copy_range(from, to, 0, size)?;
    }
    rustix::fs::ftruncate(to, size)
}

/// Copies bytes `start..end` of `from` to the same place in `to` (less when `from` is shorter now).
fn copy_range(from: &OwnedFd, to: &OwnedFd, start: u64, end: u64) -> rustix::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    let mut at = start;
    while at < end {
        let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(buf.len());
        let n = rustix::io::pread(from.as_fd(), &mut buf[..want], at)?;
        if n == 0 {
            break;
        }
        let mut written = 0;
        while written < n {
            written += rustix::io::pwrite(to.as_fd(), &buf[written..n], at + written as u64)?;
        }
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("reins-copy-{name}-")).tempdir().unwrap()
    }

    fn copy(from: &Path, max: u64) -> (tempfile::TempDir, Result<u64, CopyError>) {
        let to = tree("to");
        let r = copy_tree(from, to.path(), max, &CancellationToken::new());
        (to, r)
    }

    #[test]
    fn files_dirs_and_links_are_copied_and_links_not_followed() {
        let from = tree("from");
        let outside = tree("outside");
        std::fs::write(outside.path().join("secret"), "outside").unwrap();
        std::fs::create_dir_all(from.path().join("a/b")).unwrap();
        std::fs::write(from.path().join("a/b/f.txt"), "hello").unwrap();
        std::os::unix::fs::symlink(outside.path(), from.path().join("a/out")).unwrap();
        std::os::unix::fs::symlink("b/f.txt", from.path().join("a/rel")).unwrap();
        let script = from.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let (to, r) = copy(from.path(), DEFAULT_MAX_COPY_BYTES);
        assert_eq!(r.unwrap(), 5 + 10);
        assert_eq!(std::fs::read_to_string(to.path().join("a/b/f.txt")).unwrap(), "hello");
        // The links are links, with their targets as they were; nothing of the outside was copied.
        let out = to.path().join("a/out");
        assert!(std::fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_link(&out).unwrap(), outside.path());
        assert_eq!(std::fs::read_link(to.path().join("a/rel")).unwrap(), Path::new("b/f.txt"));
        let mode = |p: &Path| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions());
        assert_eq!(mode(&to.path().join("run.sh")) & 0o777, 0o755);
        assert_eq!(mode(&to.path().join("a")) & 0o777, 0o700);
    }

    /// A directory listed as one and swapped for a symlink before it is opened (the race, made certain here)
    /// is refused; what the symlink points to is never read.
    #[test]
    fn a_directory_swapped_for_a_symlink_is_refused_not_followed() {
        let from = tree("from");
        let outside = tree("outside");
        std::fs::write(outside.path().join("secret"), "outside").unwrap();
        std::fs::create_dir(from.path().join("sub")).unwrap();
        let listed = std::fs::symlink_metadata(from.path().join("sub")).unwrap();
        let ids = (std::os::unix::fs::MetadataExt::dev(&listed), std::os::unix::fs::MetadataExt::ino(&listed));
        std::fs::remove_dir(from.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), from.path().join("sub")).unwrap();
        let to = tree("to");
        let open = |p: &Path| {
            rustix::fs::openat(rustix::fs::CWD, p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
        };
        let (src, dst) = (open(from.path()), open(to.path()));
        let cancel = CancellationToken::new();
        let mut copy = Copy { max_bytes: DEFAULT_MAX_COPY_BYTES, total: 0, cancel: &cancel };
        for listed in [Listed::Dir(ids.0, ids.1), Listed::File(ids.0, ids.1)] {
            let r = copy.entry(&src, &dst, c"sub", listed, Path::new("./sub"), 0);
            assert!(matches!(r, Err(CopyError::Changed(_))), "{listed:?}: {r:?}");
        }
        assert_eq!(std::fs::read_dir(to.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_bound_counts_apparent_sizes_and_sparse_files_keep_their_holes() {
        let from = tree("from");
        // 64 MiB apparent, two small regions of data.
        let f = std::fs::File::create(from.path().join("sparse")).unwrap();
        f.set_len(64 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"head", 0).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"middle", 32 << 20).unwrap();
        drop(f);
        let (_to, r) = copy(from.path(), (64 << 20) - 1);
        match r {
            Err(CopyError::TooLarge { size, max, .. }) => assert_eq!((size, max), (64 << 20, (64 << 20) - 1)),
            other => panic!("{other:?}"),
        }
        let (to, r) = copy(from.path(), 64 << 20);
        assert_eq!(r.unwrap(), 64 << 20);
        let copied = to.path().join("sparse");
        let meta = std::fs::metadata(&copied).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        let allocated = std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
        assert!(allocated < 4 << 20, "the holes were filled: {allocated} bytes allocated");
        let bytes = std::fs::read(&copied).unwrap();
        assert_eq!(&bytes[..4], b"head");
        assert_eq!(&bytes[32 << 20..(32 << 20) + 6], b"middle");
        assert!(bytes[4..32 << 20].iter().all(|b| *b == 0));
    }

    #[test]
    fn sizes_parse_and_show() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("500 MB"), Ok(500_000_000));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        for bad in ["", "0", "1.5GiB", "lots", "-1", "99999999999TiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(shown_size(1 << 30), "1 GiB");
        assert_eq!(shown_size(3000), "3000 bytes");
    }
}
