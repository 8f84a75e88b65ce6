//! The schema of a session store and its migrations. `PRAGMA user_version` holds the schema version;
//! `PRAGMA application_id` marks the file as a Reins store.

use rusqlite::Connection;

/// Marks a SQLite file as a Reins session store ("REIN").
pub const APPLICATION_ID: i64 = 0x5245_494E;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 2;

/// Migration `i` takes a store from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: sessions (an index kept current with the log) and the append-only log itself.
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        model TEXT,
        workspace TEXT,
        status TEXT NOT NULL,
        runs INTEGER NOT NULL DEFAULT 0,
        steps INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        calls_without_usage INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL,
        messages INTEGER NOT NULL DEFAULT 0,
        next_seq INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_created ON sessions(created_at);
    CREATE TABLE entries (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        run INTEGER NOT NULL,
        kind TEXT NOT NULL,
        msg_index INTEGER,
        ts TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX entries_message ON entries(session_id, msg_index) WHERE msg_index IS NOT NULL;",
    // 1 -> 2: the log in chunks, one row per flush, keyed by (session key << 32) | seq of the chunk's first
    // entry in a plain rowid table: a flush appends one row and touches no index, so a commit writes one or
    // two pages instead of six. The session index keeps the counters of every run but the open one (a run
    // still `running`, or one whose process died), whose chunks carry their own counters. Keys are given in
    // creation order, so the newest sessions are listed by key (no index on the creation time to update).
    "ALTER TABLE sessions RENAME TO sessions_v1;
    DROP INDEX sessions_created;
    CREATE TABLE sessions (
        key INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        model TEXT,
        workspace TEXT,
        status TEXT NOT NULL,
        runs INTEGER NOT NULL DEFAULT 0,
        steps INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        calls_without_usage INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL,
        messages INTEGER NOT NULL DEFAULT 0,
        next_seq INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO sessions (id, created_at, updated_at, model, workspace, status, runs, steps, tool_calls,
        input_tokens, output_tokens, calls_without_usage, cost_usd, messages, next_seq)
        SELECT id, created_at, updated_at, model, workspace, status, runs, steps, tool_calls, input_tokens,
            output_tokens, calls_without_usage, cost_usd, messages, next_seq
        FROM sessions_v1 ORDER BY created_at, id;
    CREATE TABLE log (
        id INTEGER PRIMARY KEY,
        run INTEGER NOT NULL,
        entries INTEGER NOT NULL,
        messages INTEGER NOT NULL,
        ts TEXT NOT NULL,
        steps INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        calls_without_usage INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL NOT NULL DEFAULT 0,
        data TEXT NOT NULL
    );
    INSERT INTO log (id, run, entries, messages, ts, data)
        SELECT (s.key << 32) | e.seq, e.run, 1,
            coalesce(max(e.msg_index) OVER (PARTITION BY e.session_id ORDER BY e.seq) + 1, 0),
            e.ts,
            json_object('kind', e.kind, 'msg_index', e.msg_index,
                'data', CASE WHEN json_valid(e.data) THEN json(e.data) ELSE e.data END)
        FROM entries e JOIN sessions s ON s.id = e.session_id ORDER BY e.session_id, e.seq;
    DROP TABLE entries;
    DROP TABLE sessions_v1;",
];

/// Bits of a log row's id that hold the seq of its first entry; the session's key is above them.
pub(crate) const SEQ_BITS: u32 = 32;

/// The id of the log row whose first entry is `seq` of the session `key`.
pub(crate) fn chunk_id(key: i64, seq: i64) -> i64 {
    (key << SEQ_BITS) | seq
}

/// The first and last possible ids of the session `key`'s log rows.
pub(crate) fn chunk_range(key: i64) -> (i64, i64) {
    (key << SEQ_BITS, (key << SEQ_BITS) | ((1i64 << SEQ_BITS) - 1))
}

/// The seq of the first entry of the log row `id`.
pub(crate) fn chunk_seq(id: i64) -> i64 {
    id & ((1i64 << SEQ_BITS) - 1)
}

/// What opening found.
pub(crate) enum Check {
    /// The file is an up-to-date store.
    Current,
    /// Migrations are due (the file is new or older).
    Migrate,
    /// Written by a newer Reins.
    TooNew(i64),
    /// Another application's database.
    Foreign(String),
}

pub(crate) fn check(conn: &Connection) -> rusqlite::Result<Check> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    if app != APPLICATION_ID {
        let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
        if app != 0 || version != 0 || tables != 0 {
            return Ok(Check::Foreign(format!(
                "application id {app:#x}, schema version {version}, {tables} schema objects"
            )));
        }
    }
    Ok(if version > SCHEMA_VERSION {
        Check::TooNew(version)
    } else if version < SCHEMA_VERSION {
        Check::Migrate
    } else {
        Check::Current
    })
}

/// Applies the migrations from `from` to [`SCHEMA_VERSION`], each in its own transaction, re-checking
/// the version under the write lock (another process may have migrated meanwhile).
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(sql) = usize::try_from(version).ok().and_then(|v| MIGRATIONS.get(v)) else {
            return Ok(());
        };
        tx.execute_batch(sql)?;
        tx.execute_batch(&format!("PRAGMA user_version = {}; PRAGMA application_id = {APPLICATION_ID};", version + 1))?;
        tx.commit()?;
    }
}
