//! Reading definitions: files opened as regular files only and read bounded, TOML parsed with errors that
//! name the key's path, agent files, and the user config (`$XDG_CONFIG_HOME/reins/config.toml`, else
//! `~/.config/reins/config.toml`) with its `[profiles.NAME]` tables.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::definition::AgentDef;
use crate::error::DefError;
use crate::layers::{Layer, Origin};

/// The largest agent file or user config read.
pub const MAX_DEFINITION_BYTES: u64 = 1 << 20;
/// The largest instructions file read.
pub const MAX_INSTRUCTIONS_BYTES: u64 = 1 << 20;
/// The largest script file read.
pub const MAX_SCRIPT_BYTES: u64 = 64 << 20;

/// Reads a UTF-8 text file of at most `max` bytes. Only a regular file is read: a directory, FIFO, device
/// or socket is refused without blocking (it is opened non-blocking and checked before any read). The error
/// says why without naming the file (the caller does). The CLI reads the files its flags name with it too.
pub fn read_bounded(path: &Path, max: u64) -> Result<String, String> {
    String::from_utf8(read_bounded_bytes(path, max)?).map_err(|e| format!("not UTF-8 text ({e})"))
}

/// Reads a file of at most `max` bytes, as [`read_bounded`] does (a regular file only, opened non-blocking),
/// without asking for text: an image, for example.
pub fn read_bounded_bytes(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // O_NONBLOCK: opening a FIFO that no one writes returns at once (and is then refused) instead of waiting;
    // O_NOCTTY: a terminal device never becomes the controlling terminal.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > max {
        return Err(too_big(max));
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max {
        return Err(too_big(max));
    }
    Ok(bytes)
}

/// Reads `input` (standard input, an opened file) to its end as UTF-8 text, refusing more than `max` bytes
/// (never more than `max + 1` are read). The error says why.
pub fn read_capped(input: impl Read, max: u64) -> Result<String, String> {
    let mut bytes = Vec::new();
    input.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max {
        return Err(too_big(max));
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text ({e})"))
}

/// "larger than N MiB" for a whole number of MiB, else "larger than N bytes".
fn too_big(max: u64) -> String {
    if max >= 1 << 20 && max % (1 << 20) == 0 {
        format!("larger than {} MiB", max >> 20)
    } else {
        format!("larger than {max} bytes")
    }
}

/// Turns a path-tracking deserialization error into a [`DefError`] naming the key.
pub(crate) fn path_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> DefError {
    let message = e.inner().to_string();
    key_error(&e.path().to_string(), &message)
}

/// A [`DefError`] at `path` (`.` is the root) with serde's `message`, made one line; an unknown key's
/// message says what keys there are.
fn key_error(path: &str, message: &str) -> DefError {
    let path = if path == "." { "" } else { path };
    let message = message.trim().lines().next().unwrap_or_default();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((_, expected)) = rest.split_once('`') {
            let expected = expected.trim_start_matches(", ").trim();
            return DefError::at(path, format!("unknown key ({expected})"));
        }
    }
    DefError::at(path, message)
}

/// Parses TOML text into `T`, with errors that name the key's path (`limits.max_steps: expected a positive
/// integer, not 0`) or the line and column of a syntax error.
pub fn parse_toml<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, DefError> {
    let de = toml::de::Deserializer::parse(text).map_err(|e| DefError::whole(syntax(&e, text)))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." && inner.span().is_some() && !inner.message().starts_with("unknown field") {
            // A syntax error found while deserializing: its line and column say more than a path.
            return DefError::whole(syntax(&inner, text));
        }
        key_error(&path, inner.message())
    })
}

fn syntax(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim();
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start.min(text.len())).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("invalid TOML at line {line}, column {col}: {message}")
        }
        None => format!("invalid TOML: {message}"),
    }
}

/// Reads the agent file at `path` (relative paths in it become relative to its directory).
/// A file that cannot be read is `cannot read config FILE: why`; one that is not valid is `invalid config FILE:
/// key.path: why` (an agent file is what `--config` always named).
pub fn agent_file(path: &Path) -> Result<AgentDef, DefError> {
    let text = read_bounded(path, MAX_DEFINITION_BYTES)
        .map_err(|e| DefError::whole(e).within(format!("cannot read config {}", path.display())))?;
    let base = path.parent().map(absolute).unwrap_or_else(|| absolute(Path::new(".")));
    AgentDef::from_toml(&text, &base).map_err(|e| e.within(format!("invalid config {}", path.display())))
}

/// The agent file at `path` as a layer.
pub fn agent_file_layer(path: &Path) -> Result<Layer, DefError> {
    Ok(Layer::new(Origin::AgentFile { path: absolute(path) }, agent_file(path)?))
}

/// `path` made absolute against the current directory (not resolved: symlinks stay as they are).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Where the user config lives: `$XDG_CONFIG_HOME/reins/config.toml`, else `~/.config/reins/config.toml`
/// (`None` when neither variable is set).
pub fn user_config_path() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = nonempty("XDG_CONFIG_HOME").filter(|d| d.is_absolute()) {
        return Some(dir.join("reins").join("config.toml"));
    }
    nonempty("HOME").map(|h| h.join(".config").join("reins").join("config.toml"))
}

/// A user config: defaults for every agent, and named profiles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserConfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its top-level keys: defaults beneath every agent file.
    pub defaults: AgentDef,
    /// Its `[profiles.NAME]` tables, picked with `--profile NAME`.
    pub profiles: BTreeMap<String, AgentDef>,
}

impl UserConfig {
    /// Reads the user config at `path`; a file that does not exist is an empty config.
    pub fn read(path: &Path) -> Result<UserConfig, DefError> {
        let text = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(UserConfig { path: path.to_path_buf(), ..UserConfig::default() });
            }
            _ => read_bounded(path, MAX_DEFINITION_BYTES)
                .map_err(|e| DefError::whole(e).within(format!("cannot read the user config {}", path.display())))?,
        };
        UserConfig::parse(&text, path).map_err(|e| e.within(format!("invalid user config {}", path.display())))
    }

    /// Parses a user config's text (`path` names it and anchors its relative paths).
    pub fn parse(text: &str, path: &Path) -> Result<UserConfig, DefError> {
        let base = path.parent().map(absolute).unwrap_or_else(|| absolute(Path::new(".")));
        // The whole file first, for syntax errors; then the defaults and each profile, for key paths.
        let _: toml::Table = parse_toml(text)?;
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| DefError::whole(e.message().to_owned()))?;
        let profiles = match doc.remove("profiles") {
            None => toml::Table::new(),
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(DefError::at("profiles", "expected a table of [profiles.NAME] tables")),
        };
        let mut defaults = table_def(doc, "")?;
        defaults.resolve_paths(&base);
        let mut out = BTreeMap::new();
        for (name, value) in profiles {
            let toml::Value::Table(t) = value else {
                return Err(DefError::at(format!("profiles.{name}"), "expected a table"));
            };
            let mut def = table_def(t, &format!("profiles.{name}"))?;
            def.resolve_paths(&base);
            out.insert(name, def);
        }
        Ok(UserConfig { path: path.to_path_buf(), defaults, profiles: out })
    }

    /// The layers for `profile` (`None`: the defaults only): the defaults, then the profile.
    pub fn layers(&self, profile: Option<&str>) -> Result<Vec<Layer>, DefError> {
        let mut out = vec![Layer::new(Origin::UserConfig { path: self.path.clone() }, self.defaults.clone())];
        if let Some(name) = profile {
            let Some(def) = self.profiles.get(name) else {
                let known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
                return Err(DefError::whole(format!(
                    "no profile {name:?} in the user config {} ({})",
                    self.path.display(),
                    if known.is_empty() { "it has none".to_owned() } else { format!("profiles: {}", known.join(", ")) }
                )));
            };
            out.push(Layer::new(Origin::Profile { name: name.to_owned(), path: self.path.clone() }, def.clone()));
        }
        Ok(out)
    }
}

fn table_def(table: toml::Table, prefix: &str) -> Result<AgentDef, DefError> {
    let value = toml::Value::Table(table);
    let def: AgentDef = serde_path_to_error::deserialize(value).map_err(|e| {
        let mut d = path_error(e);
        if !prefix.is_empty() {
            d.path = Some(match d.path {
                Some(p) => format!("{prefix}.{p}"),
                None => prefix.to_owned(),
            });
        }
        d
    })?;
    def.validate().map_err(|mut d| {
        if !prefix.is_empty() {
            d.path = Some(d.path.map_or_else(|| prefix.to_owned(), |p| format!("{prefix}.{p}")));
        }
        d
    })?;
    Ok(def)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_and_oversized_files_are_refused() {
        assert_eq!(read_bounded(Path::new("/dev/zero"), MAX_SCRIPT_BYTES), Err("not a regular file".into()));
        assert_eq!(read_bounded(Path::new("/dev/null"), MAX_SCRIPT_BYTES), Err("not a regular file".into()));
        assert_eq!(read_bounded(Path::new("/"), MAX_SCRIPT_BYTES), Err("not a regular file".into()));
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2 << 20]).expect("write");
        assert_eq!(read_bounded(&big, MAX_DEFINITION_BYTES), Err("larger than 1 MiB".into()));
        assert_eq!(read_bounded(&big, 1000), Err("larger than 1000 bytes".into()));
        assert_eq!(read_bounded(&big, MAX_SCRIPT_BYTES).map(|t| t.len()), Ok(2 << 20));
        std::fs::write(&big, [0xff, 0xfe]).expect("write");
        assert!(read_bounded(&big, MAX_DEFINITION_BYTES).is_err_and(|e| e.contains("UTF-8")));
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
                    (bytes.len() as u64 > cap && e == format!("larger than {cap} bytes")) || std::str::from_utf8(&bytes).is_err(),
                    "{}", e
                ),
            }
        }
    }
}
