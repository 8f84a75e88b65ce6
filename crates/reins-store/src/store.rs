//! The store: one SQLite file in WAL mode holding every session's append-only log and an index of
//! sessions kept current with it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::schema::{self, Check, SCHEMA_VERSION};
use crate::session::Session;

/// How durable each flush is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// `synchronous = NORMAL` in WAL mode: a flushed step survives the process being killed; a power
    /// loss may lose the last steps before a checkpoint. The default (no fsync per step).
    #[default]
    Process,
    /// `synchronous = FULL`: every flush is fsynced, so a flushed step also survives a power loss.
    Power,
}

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// How durable each flush is.
    pub durability: Durability,
    /// The most pages the database may grow to (a size cap); writing past it is a "store is full"
    /// error, exactly as a full disk. `None`: no cap.
    pub max_pages: Option<u64>,
    /// How long to wait for another process's write lock before giving up.
    pub busy_timeout: Duration,
    /// How many recorded items may wait before the background writer takes them (four times as many
    /// make the run wait: backpressure, never loss).
    pub queue: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            durability: Durability::Process,
            max_pages: None,
            busy_timeout: Duration::from_secs(30),
            queue: 4096,
        }
    }
}

/// A session store on disk. Cheap to clone (clones share one pool of write connections); reading
/// opens what it needs.
#[derive(Clone, Debug)]
pub struct Store {
    path: PathBuf,
    options: StoreOptions,
    /// Write connections runs have finished with, kept open for the next runs (opening one costs a
    /// millisecond or more), and the runs still writing.
    pool: Arc<Pool>,
    /// Flushes since the write-ahead log was last checkpointed.
    flushes: Arc<std::sync::atomic::AtomicU32>,
    /// Background threads waiting for a run to serve (a thread costs tens of microseconds to start).
    threads: Arc<Mutex<Vec<Arc<Waiting>>>>,
}

/// The write connections of a store's clones. When the last clone goes (or [`Store::close`]), the
/// write-ahead log is checkpointed into the database file and truncated before the connections close, so
/// that the file alone holds every session this process wrote.
#[derive(Debug, Default)]
struct Pool {
    idle: Mutex<Vec<Connection>>,
    /// Runs whose writer still holds a connection.
    runs: Mutex<usize>,
    runs_ended: std::sync::Condvar,
}

impl Pool {
    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checkpoints the write-ahead log into the database (TRUNCATE) through one of the idle connections,
    /// then closes them all. Waits at most [`CLOSE_WAIT`] for other processes' readers and writers: what
    /// a busy store keeps in its log is still safe there, and the next checkpoint moves it.
    fn checkpoint_and_close(&self) -> rusqlite::Result<()> {
        let idle = std::mem::take(&mut *self.lock_idle());
        let mut result = Ok(());
        if let Some(conn) = idle.first() {
            result = conn
                .busy_timeout(CLOSE_WAIT)
                .and_then(|()| conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())));
        }
        for conn in idle {
            if let Err((_, e)) = conn.close() {
                result = result.and(Err(e));
            }
        }
        result
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = self.checkpoint_and_close();
    }
}

/// How long closing a store waits for other processes to let its checkpoint through.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// A run that writes through the store: while one exists, [`Store::close`] waits for it to end.
pub(crate) struct RunTicket(Arc<Pool>);

impl Drop for RunTicket {
    fn drop(&mut self) {
        let mut runs = self.0.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *runs = runs.saturating_sub(1);
        self.0.runs_ended.notify_all();
    }
}

/// Work for a background thread of the store.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// A background thread waiting for its next job. Handing it one and its giving up happen under the same
/// lock, so a job is never handed to a thread that has ended.
#[derive(Default)]
struct Waiting {
    slot: Mutex<Slot>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct Slot {
    job: Option<Job>,
    ended: bool,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waiting")
    }
}

/// How long a background thread waits for the next run before it ends.
const THREAD_IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The most idle write connections a store keeps: as many as the runs an eval has at once (`--jobs 64`), so that
/// runs beyond the eighth do not each open one anew.
const IDLE_CONNECTIONS: usize = 64;

/// One line of `reins sessions list`: the session index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session's id.
    pub id: String,
    /// When its first run started (RFC 3339).
    pub created_at: String,
    /// When it was last written (RFC 3339).
    pub updated_at: String,
    /// The model it ran with, as the caller named it.
    pub model: Option<String>,
    /// The workspace it ran in.
    pub workspace: Option<String>,
    /// `running` while a run is open, `interrupted` when its process is gone (it never ended), else the last
    /// run's status.
    pub status: String,
    /// Runs recorded (1 + resumptions).
    pub runs: u64,
    /// Model responses received over all runs.
    pub steps: u64,
    /// Tool calls admitted over all runs.
    pub tool_calls: u64,
    /// Input tokens over the calls that reported usage.
    pub input_tokens: u64,
    /// Output tokens over the calls that reported usage.
    pub output_tokens: u64,
    /// Model calls that reported no usage (their tokens are unknown, not zero).
    pub calls_without_usage: u64,
    /// Cost in US dollars, when prices were known.
    pub cost_usd: Option<f64>,
    /// Transcript items recorded.
    pub messages: u64,
}

/// The default location: `$XDG_DATA_HOME/reins/sessions.db`, else `~/.local/share/reins/sessions.db`.
pub fn default_path() -> Result<PathBuf, StoreError> {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("reins").join("sessions.db"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or(StoreError::NoHome)?;
    Ok(PathBuf::from(home).join(".local").join("share").join("reins").join("sessions.db"))
}

/// Creates `dir` (and its missing parents) readable by its owner only (0700), whatever the umask. A directory
/// that exists is left as it is.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The store's file readable by its owner only, whatever the umask: created 0600 before SQLite opens it (SQLite
/// gives its `-wal` and `-shm` files the mode of the database's), or, made by an older Reins, its group and
/// other bits taken away, and its `-wal`/`-shm` files' too. Best effort: a file Reins cannot change (another
/// user's, a read-only file system) is left to SQLite to report.
fn make_private(path: &Path) {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let _ = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_os_string();
        name.push(suffix);
        let p = Path::new(&name);
        if let Ok(meta) = std::fs::symlink_metadata(p) {
            if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(meta.permissions().mode() & 0o700));
            }
        }
    }
}

/// Runs `attempt` until it succeeds, fails otherwise than `busy`, or `timeout` has passed, pausing 2 ms and
/// then twice as long each time (at most 100 ms): for the locks SQLite reports at once instead of waiting for
/// them (another process creating the file or switching it to WAL).
pub(crate) fn wait_out_busy<T, E>(
    timeout: Duration,
    busy: impl Fn(&E) -> bool,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match attempt() {
            Err(e) if busy(&e) && started.elapsed() < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// True while a write-ahead log sits beside the store: another connection may be writing or checkpointing,
/// and during a checkpoint the header on disk can already count pages that are not yet written.
fn wal_present(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0)
}

/// A file cut short: its size is not a whole number of pages, or smaller than its header says. Only checked
/// when no write-ahead log is present (before and after the header is read); otherwise SQLite's own recovery
/// applies.
fn check_size(path: &Path) -> Result<(), StoreError> {
    if wal_present(path) {
        return Ok(());
    }
    check_size_at_rest(path).or_else(|e| if wal_present(path) { Ok(()) } else { Err(e) })
}

/// What `path` is when it exists (through a symlink) and is neither a regular file nor a directory: a FIFO, a
/// device or a socket, which SQLite must not be pointed at (a FIFO blocks the open for good).
fn special_kind(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt as _;
    let t = std::fs::metadata(path).ok()?.file_type();
    if t.is_file() || t.is_dir() {
        None
    } else if t.is_fifo() {
        Some("FIFO")
    } else if t.is_char_device() {
        Some("character device")
    } else if t.is_block_device() {
        Some("block device")
    } else if t.is_socket() {
        Some("socket")
    } else {
        Some("special file")
    }
}

fn check_size_at_rest(path: &Path) -> Result<(), StoreError> {
    use std::io::Read;
    let mut header = [0u8; 100];
    let (len, read) = match std::fs::File::open(path) {
        Ok(mut f) => {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let mut n = 0;
            while n < header.len() {
                match f.read(&mut header[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            (len, n)
        }
        Err(_) => return Ok(()),
    };
    let corrupt = |detail: String| Err(StoreError::Corrupt { path: path.to_path_buf(), detail });
    if len == 0 {
        return Ok(());
    }
    if read < 100 || &header[..16] != b"SQLite format 3\0" {
        return corrupt(format!("the file ({len} bytes) does not start with a SQLite header"));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536u64,
        n => u64::from(n),
    };
    if page_size < 512 || !page_size.is_power_of_two() {
        return corrupt(format!("invalid page size {page_size} in the header"));
    }
    if len % page_size != 0 {
        return corrupt(format!("the file size {len} is not a whole number of {page_size}-byte pages"));
    }
    let pages = u64::from(u32::from_be_bytes([header[28], header[29], header[30], header[31]]));
    let valid = header[24..28] == header[92..96];
    if valid && pages.saturating_mul(page_size) > len {
        return corrupt(format!("the header counts {pages} pages of {page_size} bytes but the file holds {len} bytes"));
    }
    Ok(())
}

pub(crate) fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_with(path, StoreOptions::default())
    }

    /// Opens the store at the default location.
    pub fn open_default() -> Result<Store, StoreError> {
        Store::open(default_path()?)
    }

    /// Opens (creating if needed) the store at `path`: creates its directory, checks that the file is
    /// a Reins store of a known schema version, and applies pending migrations.
    ///
    /// Processes that open one store at the same moment can meet a lock SQLite reports at once instead of
    /// waiting for it (while the file is created and switched to WAL): opening is retried, with growing
    /// pauses, until the busy timeout has passed.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
        wait_out_busy(
            options.busy_timeout,
            |e| matches!(e, StoreError::Busy { .. }),
            || Store::open_once(path.as_ref(), options.clone()),
        )
    }

    fn open_once(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        let path = path.to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_dir(dir).map_err(|source| StoreError::Directory { path: dir.to_path_buf(), source })?;
            // Reins' own directory at the default location (`…/reins`), which an older Reins made readable by
            // others, is made its user's alone; a directory the user named is left as it is.
            if default_path().is_ok_and(|d| d == path) {
                use std::os::unix::fs::PermissionsExt as _;
                if let Ok(meta) = std::fs::symlink_metadata(dir) {
                    if meta.is_dir() && meta.permissions().mode() & 0o077 != 0 {
                        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
                    }
                }
            }
        }
        if path.is_dir() {
            return Err(StoreError::IsDirectory { path });
        }
        if let Some(kind) = special_kind(&path) {
            return Err(StoreError::NotAFile { path, kind });
        }
        make_private(&path);
        check_size(&path)?;
        let store = Store { path, options, pool: Arc::default(), flushes: Arc::default(), threads: Arc::default() };
        let mut conn = store.connect(false)?;
        let err = |e| StoreError::sqlite(&store.path, e);
        match schema::check(&conn).map_err(err)? {
            Check::Current => {}
            Check::Migrate => schema::migrate(&mut conn).map_err(err)?,
            Check::TooNew(found) => {
                return Err(StoreError::TooNew { path: store.path.clone(), found, known: SCHEMA_VERSION });
            }
            Check::Foreign(detail) => return Err(StoreError::Foreign { path: store.path.clone(), detail }),
        }
        // A quick look at every table, so that a damaged file is reported now, not mid-run.
        conn.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0)).map_err(err)?;
        conn.query_row("SELECT count(*) FROM log", [], |r| r.get::<_, i64>(0)).map_err(err)?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// A connection with the store's settings. `read_only`: for reading; it never creates the file.
    pub(crate) fn connect(&self, read_only: bool) -> Result<Connection, StoreError> {
        let err = |e| StoreError::sqlite(&self.path, e);
        // Readers open the file read-write too (never creating it): a read-only connection cannot
        // rebuild the WAL index after a writer died, and fails instead of reading.
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(&self.path, flags).map_err(err)?;
        conn.busy_timeout(self.options.busy_timeout).map_err(err)?;
        if !read_only {
            let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(err)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(StoreError::Sqlite {
                    path: self.path.clone(),
                    detail: format!("cannot switch to WAL mode (journal mode is {mode})"),
                });
            }
            let sync = match self.options.durability {
                Durability::Process => "NORMAL",
                Durability::Power => "FULL",
            };
            conn.execute_batch(&format!("PRAGMA synchronous = {sync};")).map_err(err)?;
            if let Some(max) = self.options.max_pages {
                conn.query_row(&format!("PRAGMA max_page_count = {max}"), [], |r| r.get::<_, i64>(0)).map_err(err)?;
            }
        }
        Ok(conn)
    }

    /// A write connection for a run (an idle one when there is one): it never checkpoints by itself.
    pub(crate) fn writer_connection(&self) -> Result<Connection, StoreError> {
        if let Some(conn) = self.pool.lock_idle().pop() {
            return Ok(conn);
        }
        let conn = self.connect(false)?;
        conn.query_row("PRAGMA wal_autocheckpoint = 0", [], |_| Ok(()))
            .map_err(|e| StoreError::sqlite(&self.path, e))?;
        Ok(conn)
    }

    /// Runs `job` on a background thread: one that finished its last job and waits for another, or a new
    /// one. A thread waits [`THREAD_IDLE`] for its next job, then ends.
    pub(crate) fn in_background(&self, job: Job) -> std::io::Result<()> {
        let mut job = Some(job);
        while let Some(thread) = self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop() {
            let mut slot = thread.slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !slot.ended {
                slot.job = job.take();
                thread.wake.notify_one();
                return Ok(());
            }
        }
        let Some(first) = job else { return Ok(()) };
        let threads = self.threads.clone();
        std::thread::Builder::new().name("reins-store-writer".into()).spawn(move || {
            let mut job = first;
            loop {
                job();
                let waiting = Arc::new(Waiting::default());
                threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(waiting.clone());
                let slot = waiting.slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let (mut slot, _) = waiting
                    .wake
                    .wait_timeout_while(slot, THREAD_IDLE, |s| s.job.is_none())
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match slot.job.take() {
                    Some(next) => job = next,
                    None => {
                        slot.ended = true;
                        return;
                    }
                }
            }
        })?;
        Ok(())
    }

    /// Flushes since the write-ahead log was last checkpointed, counted over the store's runs.
    pub(crate) fn flushes(&self) -> &Arc<std::sync::atomic::AtomicU32> {
        &self.flushes
    }

    /// Keeps a write connection a run has finished with for the next one (unless it is mid-transaction).
    pub(crate) fn give_back(&self, conn: Connection) {
        if conn.is_autocommit() {
            let mut idle = self.pool.lock_idle();
            if idle.len() < IDLE_CONNECTIONS {
                idle.push(conn);
            }
        }
    }

    /// A run begins writing through the store; it has ended when the ticket is dropped.
    pub(crate) fn run_ticket(&self) -> RunTicket {
        *self.pool.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        RunTicket(self.pool.clone())
    }

    /// Closes the store's write connections, once the runs recorded through it (in this process) have
    /// handed theirs back: checkpoints the write-ahead log into the database file and truncates it, so
    /// that the file alone holds every session written (unless another process keeps the store busy for
    /// longer than a second; then the log holds the rest until the next checkpoint, and nothing is lost).
    /// Waits at most the busy timeout for runs still writing. The store stays usable: later work opens
    /// new connections. Dropping the last clone of a store does the same, without waiting.
    ///
    /// Call it before the process exits: a run's writer thread hands its connection back just after the
    /// run ends, and a process that exits first leaves the last sessions in the `-wal` file beside the
    /// store (safe, but not in the one file).
    pub fn close(&self) -> Result<(), StoreError> {
        let runs = self.pool.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (runs, _) = self
            .pool
            .runs_ended
            .wait_timeout_while(runs, self.options.busy_timeout, |n| *n > 0)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(runs);
        self.pool.checkpoint_and_close().map_err(|e| StoreError::sqlite(&self.path, e))
    }

    /// Writes a consistent copy of the whole store to `dest` with SQLite's online backup API (a snapshot
    /// read in one step: runs of other processes go on meanwhile, and the copy holds every session
    /// committed when it began). `dest` must not exist: it is created with mode 0600 (never an
    /// overwrite, never through a symlink) and removed again if the copy fails.
    pub fn backup(&self, dest: &Path) -> Result<(), StoreError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(dest);
        match file {
            Ok(f) => drop(f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(StoreError::Exists { path: dest.to_path_buf() });
            }
            Err(e) => return Err(StoreError::Backup { path: dest.to_path_buf(), detail: e.to_string() }),
        }
        let copied = self.backup_into(dest);
        if copied.is_err() {
            let _ = std::fs::remove_file(dest);
            for suffix in ["-journal", "-wal", "-shm"] {
                let mut side = dest.as_os_str().to_owned();
                side.push(suffix);
                let _ = std::fs::remove_file(side);
            }
        }
        copied
    }

    fn backup_into(&self, dest: &Path) -> Result<(), StoreError> {
        let failed = |e: rusqlite::Error| StoreError::Backup { path: dest.to_path_buf(), detail: e.to_string() };
        let src = self.connect(true)?;
        let mut dst =
            Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(failed)?;
        dst.busy_timeout(self.options.busy_timeout).map_err(failed)?;
        {
            let backup = rusqlite::backup::Backup::new(&src, &mut dst).map_err(failed)?;
            // Every page in one step: one read snapshot of the source, so the copy is consistent (in WAL
            // mode the snapshot does not stop other processes' runs). A lock is waited out.
            let started = std::time::Instant::now();
            loop {
                match backup.step(-1).map_err(failed)? {
                    rusqlite::backup::StepResult::Done => break,
                    rusqlite::backup::StepResult::More => {}
                    _ if started.elapsed() >= self.options.busy_timeout => {
                        return Err(StoreError::Busy {
                            path: self.path.clone(),
                            detail: "the backup could not read the store".into(),
                        });
                    }
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        dst.close().map_err(|(_, e)| failed(e))
    }

    /// Every session, newest first.
    pub fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let conn = self.connect(true)?;
        let err = |e| StoreError::sqlite(&self.path, e);
        let tx = conn.unchecked_transaction().map_err(err)?;
        let rows = {
            let mut stmt =
                tx.prepare(&format!("SELECT {SUMMARY_COLUMNS} FROM sessions ORDER BY key DESC")).map_err(err)?;
            let rows = stmt.query_map([], summary_row).map_err(err)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(err)?
        };
        rows.into_iter()
            .map(|(s, key)| {
                let mut s = with_open_run(&tx, s, key).map_err(err)?;
                if s.status == "running" && crate::owner::liveness(&self.path, &s.id) == crate::Liveness::Interrupted {
                    s.status = crate::INTERRUPTED_STATUS.to_owned();
                }
                Ok(s)
            })
            .collect()
    }

    /// Deletes the session whose id is `id` or starts with `id` — its summary and its whole log — in one
    /// transaction, and gives its full id. The caller makes sure no run of it is still going.
    pub fn delete(&self, id: &str) -> Result<String, StoreError> {
        let id = self.resolve(id)?;
        let mut conn = self.connect(false)?;
        let err = |e| StoreError::sqlite(&self.path, e);
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
        let key: Option<i64> =
            tx.query_row("SELECT key FROM sessions WHERE id = ?1", [&id], |r| r.get(0)).optional().map_err(err)?;
        let Some(key) = key else { return Err(StoreError::NotFound(id)) };
        let (lo, hi) = schema::chunk_range(key);
        tx.execute("DELETE FROM log WHERE id BETWEEN ?1 AND ?2", params![lo, hi]).map_err(err)?;
        tx.execute("DELETE FROM sessions WHERE key = ?1", [key]).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// The full id of the session whose id is `id` or starts with `id`.
    pub fn resolve(&self, id: &str) -> Result<String, StoreError> {
        // Ids are UUIDs: anything longer, or with characters an id never has, names no session (and never
        // reaches SQLite, whose LIKE refuses overlong patterns).
        if id.is_empty() || id.len() > MAX_ID_LEN || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            let shown: String = id.chars().take(MAX_ID_LEN).collect();
            let more = if id.chars().count() > MAX_ID_LEN { "…" } else { "" };
            return Err(StoreError::NotFound(format!("{shown}{more}")));
        }
        let conn = self.connect(true)?;
        let err = |e| StoreError::sqlite(&self.path, e);
        let exact: Option<String> =
            conn.query_row("SELECT id FROM sessions WHERE id = ?1", [id], |r| r.get(0)).optional().map_err(err)?;
        if let Some(id) = exact {
            return Ok(id);
        }
        let escaped: String =
            id.chars().flat_map(|c| if matches!(c, '%' | '_' | '\\') { vec!['\\', c] } else { vec![c] }).collect();
        let mut stmt = conn.prepare("SELECT id FROM sessions WHERE id LIKE ?1 ESCAPE '\\' LIMIT 2").map_err(err)?;
        let ids = stmt
            .query_map([format!("{escaped}%")], |r| r.get::<_, String>(0))
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(StoreError::NotFound(id.to_owned())),
            _ => {
                let count: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM sessions WHERE id LIKE ?1 ESCAPE '\\'",
                        [format!("{escaped}%")],
                        |r| r.get(0),
                    )
                    .map_err(err)?;
                Err(StoreError::Ambiguous {
                    prefix: id.to_owned(),
                    count: usize::try_from(count).unwrap_or(usize::MAX),
                })
            }
        }
    }

    /// The session's summary.
    pub fn summary(&self, id: &str) -> Result<SessionSummary, StoreError> {
        let conn = self.connect(true)?;
        let err = |e| StoreError::sqlite(&self.path, e);
        let tx = conn.unchecked_transaction().map_err(err)?;
        summary_of(&tx, id).map_err(err)?.ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    /// Loads a whole session (`id` exact or a unique prefix): its summary and every entry in order.
    pub fn load(&self, id: &str) -> Result<Session, StoreError> {
        let id = self.resolve(id)?;
        let conn = self.connect(true)?;
        let err = |e| StoreError::sqlite(&self.path, e);
        let tx = conn.unchecked_transaction().map_err(err)?;
        let (summary, key) = tx
            .query_row(&format!("SELECT {SUMMARY_COLUMNS} FROM sessions WHERE id = ?1"), [&id], summary_row)
            .optional()
            .map_err(err)?
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let mut summary = with_open_run(&tx, summary, key).map_err(err)?;
        if summary.status == "running"
            && crate::owner::liveness(&self.path, &summary.id) == crate::Liveness::Interrupted
        {
            summary.status = crate::INTERRUPTED_STATUS.to_owned();
        }
        let (lo, hi) = schema::chunk_range(key);
        let mut stmt = tx
            .prepare("SELECT id, run, entries, ts, data FROM log WHERE id BETWEEN ?1 AND ?2 ORDER BY id")
            .map_err(err)?;
        let rows = stmt
            .query_map(params![lo, hi], |r| {
                Ok(crate::chunk::Row {
                    id: r.get(0)?,
                    run: r.get(1)?,
                    entries: r.get(2)?,
                    ts: r.get(3)?,
                    data: r.get(4)?,
                })
            })
            .map_err(err)?;
        let mut entries = Vec::new();
        for row in rows {
            let row = row.map_err(err)?;
            if let Err((seq, why)) = crate::chunk::decode(&row, &mut entries) {
                return Err(self.damaged(&conn, &id, seq, &why));
            }
        }
        Ok(Session { summary, entries })
    }
}

impl Store {
    /// An entry that cannot be read: a damaged file (reported as corrupt when SQLite's integrity check
    /// agrees), else a bad entry.
    fn damaged(&self, conn: &Connection, session: &str, seq: i64, detail: &str) -> StoreError {
        let check: Result<Vec<String>, _> = conn
            .prepare("PRAGMA quick_check(3)")
            .and_then(|mut st| st.query_map([], |r| r.get::<_, String>(0))?.collect());
        match check {
            Ok(lines) if lines == ["ok"] => StoreError::BadEntry {
                session: format!("{session} in {}", self.path.display()),
                seq,
                detail: detail.to_owned(),
            },
            Ok(lines) => StoreError::Corrupt {
                path: self.path.clone(),
                detail: format!("entry {seq} of session {session}: {detail}; integrity check: {}", lines.join("; ")),
            },
            Err(e) => StoreError::sqlite(&self.path, e),
        }
    }
}

/// The length of a session id (a UUID in its hyphenated form).
const MAX_ID_LEN: usize = 36;

const SUMMARY_COLUMNS: &str = "id, created_at, updated_at, model, workspace, status, runs, steps, tool_calls, \
     input_tokens, output_tokens, calls_without_usage, cost_usd, messages, key";

/// The summary of session `id`, its open run included.
fn summary_of(conn: &Connection, id: &str) -> rusqlite::Result<Option<SessionSummary>> {
    let row = conn.query_row(&format!("SELECT {SUMMARY_COLUMNS} FROM sessions WHERE id = ?1"), [id], summary_row);
    match row.optional()? {
        Some((s, key)) => with_open_run(conn, s, key).map(Some),
        None => Ok(None),
    }
}

/// The index counts the runs that ended; a session still `running` (or whose process died) also counts
/// what its open run's chunks add up to, and is as recent as its last chunk.
fn with_open_run(conn: &Connection, mut s: SessionSummary, key: i64) -> rusqlite::Result<SessionSummary> {
    if s.status != "running" {
        return Ok(s);
    }
    let run = i64::try_from(s.runs).unwrap_or(i64::MAX);
    let d = crate::chunk::run_totals(conn, key, run)?;
    s.steps = s.steps.saturating_add(to_u64(d.steps));
    s.tool_calls = s.tool_calls.saturating_add(to_u64(d.tool_calls));
    s.input_tokens = s.input_tokens.saturating_add(to_u64(d.input));
    s.output_tokens = s.output_tokens.saturating_add(to_u64(d.output));
    s.calls_without_usage = s.calls_without_usage.saturating_add(to_u64(d.no_usage));
    s.cost_usd = s.cost_usd.map(|c| c + d.cost);
    if let Some((_, messages, ts)) = crate::chunk::tail(conn, key)? {
        s.messages = to_u64(messages);
        s.updated_at = ts;
    }
    Ok(s)
}

fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(SessionSummary, i64)> {
    Ok((
        SessionSummary {
            id: r.get(0)?,
            created_at: r.get(1)?,
            updated_at: r.get(2)?,
            model: r.get(3)?,
            workspace: r.get(4)?,
            status: r.get(5)?,
            runs: to_u64(r.get(6)?),
            steps: to_u64(r.get(7)?),
            tool_calls: to_u64(r.get(8)?),
            input_tokens: to_u64(r.get(9)?),
            output_tokens: to_u64(r.get(10)?),
            calls_without_usage: to_u64(r.get(11)?),
            cost_usd: r.get(12)?,
            messages: to_u64(r.get(13)?),
        },
        r.get(14)?,
    ))
}
