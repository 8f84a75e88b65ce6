//! Files named on the command line (the prompt file, standard input; the script and the agent file are read by
//! `reins-agent` the same way): regular files only, opened without blocking on a
//! FIFO, and read up to a cap, so that `/dev/zero`, a FIFO or a huge file is refused at once instead of growing
//! the process or hanging it.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The largest script file (`--model script:FILE`): 64 MiB (the script and the agent file are read by
/// `reins-agent` with the same caps; these stay for the tests of `read_text`).
#[cfg(test)]
pub const MAX_SCRIPT_BYTES: u64 = 64 << 20;
/// The largest config file (`--config FILE`): 1 MiB.
#[cfg(test)]
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The largest prompt (`--prompt-file FILE`, or `-` for standard input) and instructions file
/// (`--instructions-file FILE`): 1 MiB.
pub const MAX_PROMPT_BYTES: u64 = 1 << 20;

/// Reads the UTF-8 text of the regular file `path`, refusing anything else and anything over `cap` bytes.
/// The error says why, without the path (the caller names the file).
pub fn read_text(path: &Path, cap: u64) -> Result<String, String> {
    // O_NONBLOCK: opening a FIFO that no one writes returns at once (and is then refused) instead of waiting;
    // O_NOCTTY: a terminal device never becomes the controlling terminal.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let too_big = || format!("larger than {} MiB", cap >> 20);
    if meta.len() > cap {
        return Err(too_big());
    }
    read_capped(file, cap)
}

/// Reads `input` (standard input, a file) to its end as UTF-8 text, refusing more than `cap` bytes.
pub fn read_capped(input: impl std::io::Read, cap: u64) -> Result<String, String> {
    let mut bytes = Vec::new();
    input.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Err(format!("larger than {} MiB", cap >> 20));
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_and_oversized_files_are_refused() {
        assert_eq!(read_text(Path::new("/dev/zero"), MAX_SCRIPT_BYTES), Err("not a regular file".into()));
        assert_eq!(read_text(Path::new("/dev/null"), MAX_SCRIPT_BYTES), Err("not a regular file".into()));
        assert_eq!(read_text(Path::new("/"), MAX_SCRIPT_BYTES), Err("not a regular file".into()));
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2 << 20]).expect("write");
        assert_eq!(read_text(&big, MAX_CONFIG_BYTES), Err("larger than 1 MiB".into()));
        assert_eq!(read_text(&big, MAX_SCRIPT_BYTES).map(|t| t.len()), Ok(2 << 20));
        std::fs::write(&big, [0xff, 0xfe]).expect("write");
        assert!(read_text(&big, MAX_CONFIG_BYTES).is_err_and(|e| e.contains("UTF-8")));
    }

    proptest::proptest! {
        /// Standard input (or any reader) gives its text whole when it is UTF-8 within the cap, else a clear
        /// error; never more than the cap is kept.
        #[test]
        fn capped_reads_take_all_or_refuse(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), cap in 0u64..80) {
            match read_capped(&bytes[..], cap) {
                Ok(text) => {
                    proptest::prop_assert!(bytes.len() as u64 <= cap);
                    proptest::prop_assert_eq!(text.as_bytes(), &bytes[..]);
                }
                Err(e) => proptest::prop_assert!(
                    (bytes.len() as u64 > cap && e.starts_with("larger than")) || std::str::from_utf8(&bytes).is_err(),
                    "{}", e
                ),
            }
        }
    }
}
