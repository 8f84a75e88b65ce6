//! A Server-Sent Events parser, fed with arbitrary chunks of bytes as they arrive.
//!
//! Follows the WHATWG rules: lines end with CRLF, LF or CR (a CRLF split across two chunks is one end);
//! `data` lines accumulate, joined with `\n`; a blank line dispatches the event (none without data);
//! lines starting with `:` are comments; one space after the colon is dropped; a leading UTF-8 byte-order
//! mark is skipped; invalid UTF-8 is replaced, never an error. One event (its pending line plus its
//! accumulated data) may hold at most a configured number of bytes, so a hostile stream cannot grow memory
//! without bound.

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, empty when the stream gave none (the default type, `message`).
    pub event: String,
    /// The `data` lines joined with `\n`.
    pub data: String,
}

/// Why a stream could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event is larger than the parser admits.
    #[error("a stream event exceeds {limit} bytes")]
    EventTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// An incremental SSE parser.
///
/// ```
/// use reins_providers::sse::SseParser;
/// let mut p = SseParser::new(1 << 20);
/// let mut out = Vec::new();
/// p.push(b"event: a\ndata: {\"x\"", &mut out).unwrap();
/// assert!(out.is_empty());
/// p.push(b":1}\r\n\r\n", &mut out).unwrap();
/// assert_eq!(out[0].event, "a");
/// assert_eq!(out[0].data, "{\"x\":1}");
/// ```
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    after_cr: bool,
    at_start: bool,
    limit: usize,
}

impl SseParser {
    /// A parser admitting events of at most `max_event_bytes` bytes.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            event: String::new(),
            data: String::new(),
            has_data: false,
            after_cr: false,
            at_start: true,
            limit: max_event_bytes,
        }
    }

    /// Feeds one chunk; complete events are appended to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.at_start && !chunk.is_empty() {
            // A byte-order mark may only open the stream; it can arrive split over chunks.
            let bom = b"\xEF\xBB\xBF";
            let seen = self.line.len();
            let take = (bom.len() - seen).min(chunk.len());
            if bom[seen..seen + take] == chunk[..take] {
                if seen + take < bom.len() {
                    self.line.extend_from_slice(&chunk[..take]);
                    return Ok(());
                }
                self.line.clear();
                chunk = &chunk[take..];
                self.at_start = false;
            } else {
                self.at_start = false;
                // Bytes held as a possible BOM prefix were ordinary bytes after all.
                let held = std::mem::take(&mut self.line);
                self.consume(&held, out)?;
            }
        }
        self.consume(chunk, out)
    }

    fn consume(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.after_cr {
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
            if !chunk.is_empty() {
                self.after_cr = false;
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.check_size(chunk.len())?;
                    self.line.extend_from_slice(chunk);
                    return Ok(());
                }
                Some(i) => {
                    let end = chunk[i];
                    if self.line.is_empty() {
                        self.check_size(i)?;
                        self.process_line(&chunk[..i], out);
                    } else {
                        self.check_size(i)?;
                        let mut line = std::mem::take(&mut self.line);
                        line.extend_from_slice(&chunk[..i]);
                        self.process_line(&line, out);
                        line.clear();
                        self.line = line;
                    }
                    chunk = &chunk[i + 1..];
                    if end == b'\r' {
                        match chunk.first() {
                            Some(b'\n') => chunk = &chunk[1..],
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn check_size(&self, more: usize) -> Result<(), SseError> {
        let size =
            self.line.len().saturating_add(more).saturating_add(self.data.len()).saturating_add(self.event.len());
        if size > self.limit { Err(SseError::EventTooLarge { limit: self.limit }) } else { Ok(()) }
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent { event: std::mem::take(&mut self.event), data: std::mem::take(&mut self.data) });
            } else {
                self.event.clear();
            }
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&String::from_utf8_lossy(value));
            }
            // `id` and `retry` matter to reconnecting browsers, not to one model response.
            _ => {}
        }
    }

    /// Ends the stream. An event not closed by a blank line is dropped, as the standard says; returns
    /// true when such an unfinished event (or line) was pending, which signals a cut stream.
    pub fn finish(&mut self) -> bool {
        let pending = self.has_data || !self.line.is_empty();
        self.line.clear();
        self.data.clear();
        self.event.clear();
        self.has_data = false;
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out).unwrap();
        }
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into() }
    }

    #[test]
    fn fields_comments_and_multiline_data() {
        let out = parse_all(&[b": comment\nevent: delta\ndata: a\ndata:b\nid: 7\nretry: 5\n\ndata: [DONE]\n\n"]);
        assert_eq!(out, vec![ev("delta", "a\nb"), ev("", "[DONE]")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_its_type_does_not_leak() {
        let out = parse_all(&[b"event: ping\n\ndata: x\n\n"]);
        assert_eq!(out, vec![ev("", "x")]);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        let out = parse_all(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(out, vec![ev("", "a\nb")]);
        let out = parse_all(&[b"data: a\r\r"]);
        assert_eq!(out, vec![ev("", "a")]);
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        assert_eq!(parse_all(&[b"\xEF\xBB", b"\xBFdata: x\n\n"]), vec![ev("", "x")]);
        assert_eq!(parse_all(&[b"\xEF", b"data: x\n\n"]).len(), 0, "a broken BOM corrupts the first field name");
    }

    #[test]
    fn line_without_colon_is_a_field_with_empty_value() {
        assert_eq!(parse_all(&[b"data\n\n"]), vec![ev("", "")]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(parse_all(&[b"data: \xFF\n\n"]), vec![ev("", "\u{FFFD}")]);
    }

    #[test]
    fn oversized_event_is_refused() {
        let mut p = SseParser::new(16);
        let mut out = Vec::new();
        assert_eq!(p.push(b"data: 0123456789abcdef", &mut out), Err(SseError::EventTooLarge { limit: 16 }));
        let mut p = SseParser::new(16);
        p.push(b"data: 0123456789\n", &mut out).unwrap();
        assert!(p.push(b"data: 0123456789\n", &mut out).is_err(), "accumulated data counts");
    }

    #[test]
    fn finish_reports_a_pending_event() {
        let mut p = SseParser::new(1024);
        let mut out = Vec::new();
        p.push(b"data: {\"a\":", &mut out).unwrap();
        assert!(p.finish());
        p.push(b"data: x\n\n", &mut out).unwrap();
        assert!(!p.finish());
    }

    fn serialize(events: &[(String, String)], eol: &str) -> Vec<u8> {
        let mut s = String::new();
        for (e, d) in events {
            if !e.is_empty() {
                s.push_str(&format!("event: {e}{eol}"));
            }
            for line in d.split('\n') {
                s.push_str(&format!("data: {line}{eol}"));
            }
            s.push_str(eol);
        }
        s.into_bytes()
    }

    proptest! {
        #[test]
        fn any_chunking_and_line_ending_gives_the_same_events(
            events in proptest::collection::vec(("[a-z._]{0,12}", "[^\r\n]{0,40}(\n[^\r\n]{0,20}){0,2}"), 0..8),
            eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
            cuts in proptest::collection::vec(0usize..4096, 0..12),
        ) {
            let bytes = serialize(&events, eol);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for c in cuts {
                chunks.push(&bytes[last..c]);
                last = c;
            }
            chunks.push(&bytes[last..]);
            let out = parse_all(&chunks);
            let want: Vec<SseEvent> = events.iter().map(|(e, d)| ev(e, d)).collect();
            prop_assert_eq!(out, want);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_respect_the_limit(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16),
            limit in 1usize..128,
        ) {
            let mut p = SseParser::new(limit);
            let mut out = Vec::new();
            for c in &chunks {
                if p.push(c, &mut out).is_err() {
                    break;
                }
            }
            for e in &out {
                prop_assert!(e.data.len() <= limit * 3, "replacement chars may triple bytes, never more");
            }
            p.finish();
        }
    }
}
