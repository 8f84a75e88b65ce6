//! Everything the command prints. Text for people goes through [`escape`], so no control character from a model,
//! a tool, a file, a store or a server reaches the terminal (no OSC 52 clipboard write, screen clear or window
//! title); JSON is written as serde made it. A failed write to stdout is remembered and ends the command with
//! exit 1 ([`stdout_failure`]), except a closed pipe (`reins sessions list | head`), which stays quiet.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Writes `bytes` to the file at `path` (created, or truncated) readable by its owner only, whatever the umask:
/// a new file is created 0600, an existing regular file loses its group and other bits (a device or a pipe,
/// `--output /dev/stdout`, is written to as it is; so is another user's file this user may write).
pub fn write_private(path: impl AsRef<std::path::Path>, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path.as_ref())?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        // Best effort: another user's file, which this user may write, keeps its mode.
        let _ = file.set_permissions(std::fs::Permissions::from_mode(meta.permissions().mode() & 0o700));
    }
    file.write_all(bytes)?;
    file.flush()
}

/// How [`escape`] shows line breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// Multi-line text (answers, messages): `\n` and tab kept, `\r\n` shown as `\n`.
    Keep,
    /// One line: `\n` shown as `⏎`, tab as `\t`.
    Join,
}

/// True for a character never printed as is: C0 controls (ESC included), DEL, C1 controls, and the
/// bidirectional and separator format characters that reorder or break what a reader sees.
pub fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// `s` with every character of [`is_escaped`] written out visibly: `\x1b`, `\r`, `\t`, `\u{202e}` (and line
/// breaks as `lines` says). Text without such characters is returned as it is.
pub fn escape(s: &str, lines: Lines) -> Cow<'_, str> {
    if !s.chars().any(is_escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, lines) {
            ('\n' | '\t', Lines::Keep) => out.push(c),
            ('\r', Lines::Keep) if chars.peek() == Some(&'\n') => {}
            ('\n', Lines::Join) => out.push('⏎'),
            ('\t', _) => out.push_str("\\t"),
            ('\r', _) => out.push_str("\\r"),
            (c, _) if c.is_ascii() && is_escaped(c) => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            (c, _) if is_escaped(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            (c, _) => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Set once stdout is closed or failed: later writes are skipped.
static STDOUT_DONE: AtomicBool = AtomicBool::new(false);
/// The first failure to write stdout other than a closed pipe.
static STDOUT_FAILURE: Mutex<Option<String>> = Mutex::new(None);

fn note_stdout_error(e: &std::io::Error) {
    STDOUT_DONE.store(true, Ordering::Relaxed);
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return;
    }
    if let Ok(mut failure) = STDOUT_FAILURE.lock() {
        failure.get_or_insert_with(|| e.to_string());
    }
}

/// Writes `text` to stdout as it is (JSON, which serde has escaped). Use [`stdout_text`] for text for people.
pub fn stdout_raw(text: &str) {
    if STDOUT_DONE.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
        note_stdout_error(&e);
    }
}

/// Writes text for people to stdout, escaped ([`Lines::Keep`]).
pub fn stdout_text(text: &str) {
    stdout_raw(&escape(text, Lines::Keep));
}

/// Flushes stdout (a failure is remembered like a failed write).
pub fn flush_stdout() {
    if STDOUT_DONE.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = std::io::stdout().lock().flush() {
        note_stdout_error(&e);
    }
}

/// Why writing stdout failed, if it did (a closed pipe is not a failure).
pub fn stdout_failure() -> Option<String> {
    STDOUT_FAILURE.lock().ok().and_then(|f| f.clone())
}

/// Writes text for people to stderr, escaped ([`Lines::Keep`]). A failure is ignored: there is nowhere left to
/// report it.
pub fn stderr_text(text: &str) {
    let _ = std::io::stderr().lock().write_all(escape(text, Lines::Keep).as_bytes());
}

/// Writes our own terminal sequences (the dimming of streamed reasoning) to stderr, as they are.
pub fn stderr_raw(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn terminal_sequences_are_shown_not_sent() {
        let hostile = "a\x1b]52;c;SGVsbG8=\x07b\x1b[2J\x1b]0;title\x07\u{9b}31m\u{202e}txt.exe\x7f";
        let shown = escape(hostile, Lines::Join);
        assert_eq!(shown, "a\\x1b]52;c;SGVsbG8=\\x07b\\x1b[2J\\x1b]0;title\\x07\\u{9b}31m\\u{202e}txt.exe\\x7f");
        assert_eq!(escape("one\r\ntwo\tx\rthree", Lines::Keep), "one\ntwo\tx\\rthree");
        assert_eq!(escape("one\ntwo\tx", Lines::Join), "one⏎two\\tx");
        assert!(matches!(escape("plain → ünïcode 👨‍👩‍👧", Lines::Join), Cow::Borrowed(_)));
    }

    proptest! {
        #[test]
        fn escaped_text_holds_no_control_character(s in any::<String>(), bytes in proptest::collection::vec(0u8..0xa0, 0..64)) {
            let s = format!("{s}{}", bytes.iter().map(|&b| char::from(b)).collect::<String>());
            let joined = escape(&s, Lines::Join);
            prop_assert!(!joined.chars().any(is_escaped), "{joined:?}");
            let kept = escape(&s, Lines::Keep);
            prop_assert!(!kept.chars().any(|c| is_escaped(c) && c != '\n' && c != '\t'), "{kept:?}");
            // Nothing is lost: every printable character is still there, in order.
            let mut shown = kept.chars();
            prop_assert!(s.chars().filter(|c| !is_escaped(*c)).all(|c| shown.any(|k| k == c)));
            if !s.chars().any(is_escaped) {
                prop_assert_eq!(&*kept, &*s);
            }
        }
    }
}
