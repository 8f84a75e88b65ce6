//! The errors of an eval.

/// What stops an eval (an attempt's own failures are results, never these).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A suite, case or agent file is wrong: the file and, when one key is at fault, the key.
    #[error("{file}: {}{message}", key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Suite {
        /// The file (or `FILE cases[i]`).
        file: String,
        /// The key's path.
        key: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// No recorded eval of that id, or it is unusable.
    #[error("eval {id}: {message}")]
    Record {
        /// The eval id (or reference) given.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// The eval's records could not be written or read.
    #[error("{0}")]
    Io(String),
}
