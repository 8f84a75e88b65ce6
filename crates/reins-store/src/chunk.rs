//! The log's rows. Each flush appends one row — a *chunk* — holding the entries recorded since the
//! previous one as JSON lines (`{"kind", "msg_index"?, "data"}`; they share the chunk's time, when it was
//! written, unless a line carries its own `ts`), with the counters they move. A chunk's id is
//! `(session key << 32) | seq of its first entry`: the rows of one session are one range of the table's
//! own key, so appending needs no index and reading a session is one range scan.

use std::io::Write as _;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Deserialize;

use crate::schema::{chunk_id, chunk_range, chunk_seq};
use crate::session::Entry;

/// How much entries move a session's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Delta {
    pub steps: i64,
    pub tool_calls: i64,
    pub input: i64,
    pub output: i64,
    pub no_usage: i64,
    pub cost: f64,
}

impl Delta {
    pub fn add(&mut self, o: Delta) {
        self.steps = self.steps.saturating_add(o.steps);
        self.tool_calls = self.tool_calls.saturating_add(o.tool_calls);
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.no_usage = self.no_usage.saturating_add(o.no_usage);
        self.cost += o.cost;
    }
}

/// Entries waiting to be written as one chunk.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    /// JSON lines, one per entry (always UTF-8: only `str`s and serde_json output are written).
    data: Vec<u8>,
    /// How many entries `data` holds.
    pub entries: i64,
    /// The counters they move.
    pub delta: Delta,
    /// A run's final status, when the chunk ends the run.
    pub status: Option<String>,
    /// Whether a flush must write it: it holds an entry other than progress events (see
    /// [`Chunk::push_progress`]).
    pub must_write: bool,
}

impl Chunk {
    /// Appends one entry whose data `write` serializes; on an error nothing of the entry stays.
    ///
    /// `kind` must be one of [`crate::kind`] (written without escaping).
    pub fn push<E: std::fmt::Display>(
        &mut self,
        kind: &str,
        msg_index: Option<usize>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), String> {
        self.push_progress(kind, msg_index, write)?;
        self.must_write = true;
        Ok(())
    }

    /// Appends an entry that no flush needs to write (a progress event: written with the next entry that
    /// does, by the background writer when the run is quiet, or when the run ends).
    pub fn push_progress<E: std::fmt::Display>(
        &mut self,
        kind: &str,
        msg_index: Option<usize>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), String> {
        let start = self.data.len();
        let head = match msg_index {
            Some(i) => write!(self.data, "{{\"kind\":\"{kind}\",\"msg_index\":{i},\"data\":"),
            None => write!(self.data, "{{\"kind\":\"{kind}\",\"data\":"),
        };
        let body = head.map_err(|e| e.to_string()).and_then(|()| write(&mut self.data).map_err(|e| e.to_string()));
        match body {
            Ok(()) => {
                self.data.extend_from_slice(b"}\n");
                self.entries += 1;
                Ok(())
            }
            Err(e) => {
                self.data.truncate(start);
                Err(e)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Takes the entries, leaving an empty chunk.
    pub fn take(&mut self) -> Chunk {
        std::mem::take(self)
    }

    /// Gives this (empty) chunk the buffer of a written one, so that recording does not grow a new one.
    pub fn reuse(&mut self, mut written: Chunk) {
        if self.data.capacity() == 0 {
            written.data.clear();
            self.data = written.data;
        }
    }

    fn text(&self) -> Result<&str, String> {
        std::str::from_utf8(&self.data).map_err(|e| format!("a recorded entry is not UTF-8: {e}"))
    }
}

/// Runs `f` in a write transaction (`BEGIN IMMEDIATE`), committing on success and rolling back on an
/// error. The statements are prepared once per connection (a flush is one transaction; parsing `BEGIN`
/// and `COMMIT` again each time would cost as much as the insert).
pub(crate) fn write_transaction<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let done = f(conn).and_then(|v| conn.prepare_cached("COMMIT")?.execute([]).map(|_| v));
    if done.is_err() && !conn.is_autocommit() {
        let _ = conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
    }
    done
}

/// Where a chunk goes and what the session holds after it.
pub(crate) struct Placement {
    pub key: i64,
    pub run: i64,
    /// The seq of the chunk's first entry.
    pub seq: i64,
    /// Transcript items the session holds once the chunk is written.
    pub messages: i64,
}

/// Appends `chunk` inside the caller's transaction, provided run `at.run` still owns the session (no later
/// run started meanwhile). `Ok(false)`: it does not; nothing was written.
pub(crate) fn append(conn: &Connection, at: &Placement, chunk: &Chunk) -> rusqlite::Result<Result<bool, String>> {
    let data = match chunk.text() {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    if at.seq.saturating_add(chunk.entries) >= 1i64 << crate::schema::SEQ_BITS {
        return Ok(Err(format!("the session's log is full ({} entries)", 1i64 << crate::schema::SEQ_BITS)));
    }
    let d = chunk.delta;
    let n = conn
        .prepare_cached(
            "INSERT INTO log (id, run, entries, messages, ts, steps, tool_calls, input_tokens, output_tokens,
                calls_without_usage, cost_usd, data)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12
             WHERE EXISTS (SELECT 1 FROM sessions WHERE key = ?13 AND runs = ?2)",
        )?
        .execute(params![
            chunk_id(at.key, at.seq),
            at.run,
            chunk.entries,
            at.messages,
            crate::store::now(),
            d.steps,
            d.tool_calls,
            d.input,
            d.output,
            d.no_usage,
            d.cost,
            data,
            at.key
        ])?;
    Ok(Ok(n == 1))
}

/// The end of a session's log: the seq its next entry takes, the transcript items it holds and when it
/// was last written. `None`: no chunk yet.
pub(crate) fn tail(conn: &Connection, key: i64) -> rusqlite::Result<Option<(i64, i64, String)>> {
    let (lo, hi) = chunk_range(key);
    conn.prepare_cached(
        "SELECT id, entries, messages, ts FROM log WHERE id BETWEEN ?1 AND ?2 ORDER BY id DESC LIMIT 1",
    )?
    .query_row(params![lo, hi], |r| Ok((chunk_seq(r.get(0)?) + r.get::<_, i64>(1)?, r.get(2)?, r.get(3)?)))
    .optional()
}

/// What the chunks of run `run` of session `key` add up to.
pub(crate) fn run_totals(conn: &Connection, key: i64, run: i64) -> rusqlite::Result<Delta> {
    let (lo, hi) = chunk_range(key);
    conn.prepare_cached(
        "SELECT coalesce(sum(steps), 0), coalesce(sum(tool_calls), 0), coalesce(sum(input_tokens), 0),
            coalesce(sum(output_tokens), 0), coalesce(sum(calls_without_usage), 0), coalesce(sum(cost_usd), 0)
         FROM log WHERE id BETWEEN ?1 AND ?2 AND run = ?3",
    )?
    .query_row(params![lo, hi, run], |r| {
        Ok(Delta {
            steps: r.get(0)?,
            tool_calls: r.get(1)?,
            input: r.get(2)?,
            output: r.get(3)?,
            no_usage: r.get(4)?,
            cost: r.get(5)?,
        })
    })
}

/// Adds `d` (a run's totals) to the session's counters and records how the session stands after it.
pub(crate) fn fold(
    conn: &Connection,
    key: i64,
    d: Delta,
    status: Option<&str>,
    messages: i64,
    next_seq: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET updated_at = ?2, steps = steps + ?3, tool_calls = tool_calls + ?4,
            input_tokens = input_tokens + ?5, output_tokens = output_tokens + ?6,
            calls_without_usage = calls_without_usage + ?7, cost_usd = cost_usd + ?8,
            status = coalesce(?9, status), messages = ?10, next_seq = ?11
         WHERE key = ?1",
    )?
    .execute(params![
        key,
        crate::store::now(),
        d.steps,
        d.tool_calls,
        d.input,
        d.output,
        d.no_usage,
        d.cost,
        status,
        messages,
        next_seq
    ])?;
    Ok(())
}

#[derive(Deserialize)]
struct Line {
    kind: String,
    #[serde(default)]
    msg_index: Option<u64>,
    #[serde(default)]
    ts: Option<String>,
    data: serde_json::Value,
}

/// A log row as read back.
pub(crate) struct Row {
    pub id: i64,
    pub run: i64,
    pub entries: i64,
    pub ts: String,
    pub data: String,
}

/// The entries of a log row. `Err((seq, why))`: the entry at `seq` cannot be read.
pub(crate) fn decode(row: &Row, out: &mut Vec<Entry>) -> Result<(), (i64, String)> {
    let Row { id, run, entries, ts, data } = row;
    let (id, run, entries) = (*id, *run, *entries);
    let first = chunk_seq(id);
    let mut n = 0i64;
    for line in data.split('\n').filter(|l| !l.is_empty()) {
        let seq = first + n;
        let l: Line = serde_json::from_str(line).map_err(|e| (seq, format!("it is not a log entry: {e}")))?;
        out.push(Entry {
            seq: u64::try_from(seq).unwrap_or(0),
            run: u64::try_from(run).unwrap_or(0),
            kind: l.kind,
            msg_index: l.msg_index,
            ts: l.ts.unwrap_or_else(|| ts.clone()),
            data: l.data,
        });
        n += 1;
    }
    if n != entries {
        return Err((first + n, format!("the row holds {n} entries where {entries} were written")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::schema::chunk_id;

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            ".{0,40}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map(".{0,8}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever is recorded reads back entry for entry, in order, with dense seqs.
        #[test]
        fn entries_round_trip(
            entries in prop::collection::vec((0usize..5, prop::option::of(0usize..1000), json()), 0..12),
            key in 1i64..1000,
            seq in 0i64..1_000_000,
        ) {
            let kinds = [crate::kind::RUN_START, crate::kind::MESSAGE, crate::kind::RESPONSE, crate::kind::EVENT, crate::kind::RUN_END];
            let mut chunk = Chunk::default();
            for (k, m, v) in &entries {
                chunk.push(kinds[*k], *m, |out| serde_json::to_writer(out, v)).unwrap();
            }
            prop_assert_eq!(chunk.entries, entries.len() as i64);
            let row = Row { id: chunk_id(key, seq), run: 3, entries: chunk.entries, ts: "t".into(), data: chunk.text().unwrap().to_owned() };
            let mut out = Vec::new();
            decode(&row, &mut out).unwrap();
            prop_assert_eq!(out.len(), entries.len());
            for (i, (e, (k, m, v))) in out.iter().zip(&entries).enumerate() {
                prop_assert_eq!(e.seq, (seq + i as i64) as u64);
                prop_assert_eq!(e.run, 3);
                prop_assert_eq!(e.kind.as_str(), kinds[*k]);
                prop_assert_eq!(e.msg_index, m.map(|m| m as u64));
                prop_assert_eq!(&e.ts, "t");
                prop_assert_eq!(&e.data, v);
            }
        }

        /// Any stored text either decodes or names the entry it cannot read; it never panics.
        #[test]
        fn arbitrary_rows_never_panic(data in ".{0,300}", entries in -2i64..6, id in any::<i64>()) {
            let row = Row { id, run: 1, entries, ts: String::new(), data };
            let mut out = Vec::new();
            if let Err((seq, why)) = decode(&row, &mut out) {
                prop_assert!(seq >= chunk_seq(id));
                prop_assert!(!why.is_empty());
            }
        }
    }

    /// An entry whose data cannot be serialized leaves nothing behind.
    #[test]
    fn a_failed_entry_leaves_nothing() {
        let mut chunk = Chunk::default();
        chunk.push(crate::kind::EVENT, None, |out| serde_json::to_writer(out, &1)).unwrap();
        let before = chunk.text().unwrap().to_owned();
        let mut bad = std::collections::HashMap::new();
        bad.insert(vec![1u8], 2); // a map with non-string keys cannot be JSON
        assert!(chunk.push(crate::kind::EVENT, None, |out| serde_json::to_writer(out, &bad)).is_err());
        assert_eq!(chunk.text().unwrap(), before);
        assert_eq!(chunk.entries, 1);
    }

    #[test]
    fn only_an_entry_other_than_progress_makes_a_flush_write() {
        let mut chunk = Chunk::default();
        chunk.push_progress(crate::kind::EVENT, None, |out| serde_json::to_writer(out, &1)).unwrap();
        assert!(!chunk.must_write && chunk.entries == 1);
        chunk.push(crate::kind::MESSAGE, Some(0), |out| serde_json::to_writer(out, &2)).unwrap();
        assert!(chunk.must_write);
        // What is written takes the flag with it.
        let taken = chunk.take();
        assert!(taken.must_write && !chunk.must_write && taken.entries == 2);
    }
}
