//! What can go wrong with a session store.

use std::path::PathBuf;

/// Why a store operation failed. Every variant says which file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file is not a SQLite database, or its pages are damaged or cut short.
    #[error(
        "the session store {path} is corrupt or truncated ({detail}); move it aside (a new store is created on the next run) or restore a backup"
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// A SQLite database that is not a Reins session store.
    #[error("{path} is a SQLite database but not a Reins session store ({detail})")]
    Foreign {
        /// The database file.
        path: PathBuf,
        /// What did not match.
        detail: String,
    },
    /// The store was written by a newer Reins.
    #[error(
        "the session store {path} has schema version {found}; this Reins knows versions up to {known}: upgrade Reins"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// The disk (or the store's size cap) is full.
    #[error("the session store {path} is full: {detail}")]
    Full {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// The file or its directory cannot be written.
    #[error("the session store {path} is read-only: {detail}")]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// Another process held the database locked for too long.
    #[error("the session store {path} stayed locked by another process: {detail}")]
    Busy {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// No session has this id (or id prefix).
    #[error("no session {0:?} in the store")]
    NotFound(String),
    /// An id prefix matches several sessions.
    #[error("the id prefix {prefix:?} matches {count} sessions; give more characters")]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// How many sessions match.
        count: usize,
    },
    /// A recorded entry cannot be read back (a store damaged in place, or written by a buggy client).
    #[error("session {session}: entry {seq} cannot be read: {detail}")]
    BadEntry {
        /// The session.
        session: String,
        /// The entry's sequence number.
        seq: i64,
        /// What is wrong.
        detail: String,
    },
    /// A recorded session cannot be continued as asked.
    #[error("session {session} cannot be resumed: {detail}")]
    Resume {
        /// The session.
        session: String,
        /// Why.
        detail: String,
    },
    /// The directory of the store cannot be created.
    #[error("cannot create the directory {path} for the session store: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file a backup was to be written to exists already (a backup never overwrites a file).
    #[error("{path} already exists; a backup never overwrites a file: remove it or name another")]
    Exists {
        /// The backup file asked for.
        path: PathBuf,
    },
    /// The backup file cannot be created or written.
    #[error("cannot write the backup {path}: {detail}")]
    Backup {
        /// The backup file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// The store path names a directory, not a database file.
    #[error("the session store {path} is a directory: give the database file (for example {path}/sessions.db)")]
    IsDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// The store path names a FIFO, a device or a socket, not a database file (opening one could block or read
    /// without end).
    #[error("the session store {path} is not a regular file (it is a {kind}): give the database file")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is (`FIFO`, `character device`, ...).
        kind: &'static str,
    },
    /// No default location: neither `XDG_DATA_HOME` nor `HOME` is set.
    #[error("no default session store location: set HOME or XDG_DATA_HOME, or pass --store PATH")]
    NoHome,
    /// Any other SQLite failure.
    #[error("the session store {path}: {detail}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
}

impl StoreError {
    /// Classifies a SQLite error on the store at `path`.
    pub(crate) fn sqlite(path: &std::path::Path, e: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode as C;
        let path = path.to_path_buf();
        let detail = e.to_string();
        match e.sqlite_error_code() {
            Some(C::NotADatabase | C::DatabaseCorrupt) => StoreError::Corrupt { path, detail },
            Some(C::DiskFull) => StoreError::Full { path, detail },
            Some(C::ReadOnly | C::PermissionDenied) => StoreError::ReadOnly { path, detail },
            Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::Busy { path, detail },
            _ => StoreError::Sqlite { path, detail },
        }
    }
}
