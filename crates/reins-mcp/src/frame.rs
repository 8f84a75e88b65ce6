//! The message size limit of the stdio transport, reported instead of silent.
//!
//! rmcp's stdio transport drops a line (one JSON-RPC message) longer than its limit
//! ([`MAX_MESSAGE_BYTES`], 16 MiB) and waits for the next one, so a call whose answer was too large would wait
//! its whole call timeout and then blame the server. [`LineGuard`] sits between the child's stdout and the
//! transport: it passes every line within the limit through unchanged, and replaces a line over it by a JSON-RPC
//! error response for the same request id (found by a bounded streaming scan of the dropped line, wherever the
//! `id` key sits), so the call fails at once with the reason. A line over the limit is never buffered beyond the
//! limit. An oversized message that is not a response (a request or notification from the server, or one
//! without a usable id) is dropped, as before.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The largest message accepted from a stdio server, newline included (rmcp's own limit: a line this long or
/// shorter passes through both).
pub const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The longest request id kept from an oversized message (longer ids are not answered).
const MAX_ID_BYTES: usize = 256;
/// Bytes read from the child at a time.
const CHUNK: usize = 64 * 1024;

/// An [`AsyncRead`] over a stdio server's output that turns an oversized message into an error response.
pub struct LineGuard<R> {
    inner: R,
    limit: usize,
    /// The current line, while it is within the limit.
    line: Vec<u8>,
    /// Bytes of the current line when it is over the limit (being discarded).
    discarded: Option<u64>,
    /// True once the discarded line was answered with an error.
    replied: bool,
    scanner: IdScanner,
    /// Bytes ready for the reader, from `pos`.
    ready: Vec<u8>,
    pos: usize,
    chunk: Box<[u8]>,
    eof: bool,
}

impl<R> LineGuard<R> {
    /// A guard with the transport's limit, [`MAX_MESSAGE_BYTES`].
    pub fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_MESSAGE_BYTES)
    }

    /// A guard that reports lines longer than `limit` bytes (newline included). `limit` must not exceed
    /// [`MAX_MESSAGE_BYTES`], or rmcp drops what passes here.
    pub fn with_limit(inner: R, limit: usize) -> Self {
        LineGuard {
            inner,
            limit: limit.min(MAX_MESSAGE_BYTES),
            line: Vec::new(),
            discarded: None,
            replied: false,
            scanner: IdScanner::default(),
            ready: Vec::new(),
            pos: 0,
            chunk: vec![0u8; CHUNK].into_boxed_slice(),
            eof: false,
        }
    }

    /// Takes in bytes from the child, line by line.
    fn absorb(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|b| *b == b'\n');
            let take = newline.map_or(bytes.len(), |i| i + 1);
            let (segment, rest) = bytes.split_at(take);
            bytes = rest;
            match self.discarded.as_mut() {
                Some(n) => {
                    *n += segment.len() as u64;
                    self.scanner.feed(segment);
                }
                None if self.line.len() + segment.len() > self.limit => {
                    self.scanner = IdScanner::default();
                    self.scanner.feed(&self.line);
                    self.scanner.feed(segment);
                    self.discarded = Some((self.line.len() + segment.len()) as u64);
                    self.line = Vec::new();
                }
                None => self.line.extend_from_slice(segment),
            }
            // A response whose id is known is answered as soon as it is over the limit, not when (if ever) its
            // line ends.
            if let Some(size) = self.discarded
                && !self.replied
                && self.scanner.is_response
                && self.scanner.id_complete()
                && let Some(reply) = self.scanner.error_reply(size, self.limit)
            {
                self.ready.extend_from_slice(&reply);
                self.replied = true;
            }
            if newline.is_some() {
                self.end_line();
            }
        }
    }

    fn end_line(&mut self) {
        match self.discarded.take() {
            Some(size) => {
                if !self.replied
                    && let Some(reply) = self.scanner.error_reply(size, self.limit)
                {
                    self.ready.extend_from_slice(&reply);
                }
                self.replied = false;
                self.scanner = IdScanner::default();
            }
            None if self.ready.is_empty() => self.ready = std::mem::take(&mut self.line),
            None => {
                self.ready.extend_from_slice(&self.line);
                self.line.clear();
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineGuard<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.pos < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.pos);
                buf.put_slice(&this.ready[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.ready.len() {
                    this.ready.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A last line without a newline goes on as it is (the transport ignores an incomplete message).
                if !this.line.is_empty() {
                    this.ready = std::mem::take(&mut this.line);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        this.eof = true;
                    } else {
                        let chunk = std::mem::take(&mut this.chunk);
                        this.absorb(&chunk[..n]);
                        this.chunk = chunk;
                    }
                }
            }
        }
    }
}

/// A streaming scan of one JSON text for its top-level `"id"` value and whether it has a top-level `"method"`
/// (a request or notification, not a response). Memory is bounded whatever the input.
#[derive(Default)]
struct IdScanner {
    depth: u32,
    top_is_object: bool,
    in_string: bool,
    escape: bool,
    expect_key: bool,
    reading_key: bool,
    key: Vec<u8>,
    key_done: bool,
    await_id: bool,
    capture: Option<Vec<u8>>,
    capture_string: bool,
    id: Option<Vec<u8>>,
    has_method: bool,
    /// A top-level `result` or `error` key was seen: the message is a response.
    is_response: bool,
}

impl IdScanner {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if let Some(cap) = self.capture.as_mut() {
            if self.capture_string {
                cap.push(b);
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.id = self.capture.take();
                    return;
                }
                if cap.len() > MAX_ID_BYTES {
                    // Too long to answer; the rest of the string is skipped as a value.
                    self.capture = None;
                    self.in_string = true;
                }
                return;
            }
            if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                self.id = self.capture.take().filter(|c| !c.is_empty());
            } else {
                cap.push(b);
                if cap.len() > MAX_ID_BYTES {
                    self.capture = None;
                }
                return;
            }
        }
        if self.in_string {
            if self.reading_key && self.key.len() <= 8 {
                self.key.push(b);
            }
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                    self.key.pop(); // the closing quote
                    self.key_done = true;
                }
            }
            return;
        }
        let top = self.depth == 1 && self.top_is_object;
        if top && self.await_id && !b.is_ascii_whitespace() && b != b':' {
            self.await_id = false;
            if self.id.is_none() && b != b'{' && b != b'[' {
                self.capture = Some(vec![b]);
                self.capture_string = b == b'"';
                return;
            }
        }
        match b {
            b'"' => {
                self.in_string = true;
                if top && self.expect_key {
                    self.expect_key = false;
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && b == b'{' {
                    self.top_is_object = true;
                    self.expect_key = true;
                }
                self.depth = self.depth.saturating_add(1);
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b':' if top && self.key_done => {
                self.key_done = false;
                self.await_id = self.key == b"id";
                if self.key == b"method" {
                    self.has_method = true;
                }
                if self.key == b"result" || self.key == b"error" {
                    self.is_response = true;
                }
            }
            b',' if top => self.expect_key = true,
            _ => {}
        }
    }

    /// True when the id's value was read to its end.
    fn id_complete(&self) -> bool {
        self.id.is_some() && self.capture.is_none()
    }

    /// The JSON-RPC error response that stands in for a dropped response of `size` bytes, if the message was a
    /// response with a usable id.
    fn error_reply(&self, size: u64, limit: usize) -> Option<Vec<u8>> {
        if self.has_method {
            return None;
        }
        let id: serde_json::Value = serde_json::from_slice(self.id.as_ref()?).ok()?;
        if !(id.is_number() || id.is_string()) {
            return None;
        }
        let message = format!(
            "the server's answer was dropped: {size} bytes and more, over the {} MiB limit of one MCP message",
            limit / (1024 * 1024)
        );
        let reply = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32603, "message": message},
        });
        let mut line = serde_json::to_vec(&reply).ok()?;
        line.push(b'\n');
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::AsyncReadExt;

    fn scan(text: &str) -> (Option<String>, bool) {
        let mut s = IdScanner::default();
        s.feed(text.as_bytes());
        // A number ends at the end of the text too.
        if s.capture.is_some() && !s.capture_string {
            s.step(b'}');
        }
        (s.id.map(|i| String::from_utf8_lossy(&i).into_owned()), s.has_method)
    }

    #[test]
    fn finds_the_top_level_id_wherever_it_is() {
        assert_eq!(scan(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), (Some("7".into()), false));
        assert_eq!(scan(r#"{"result":{"id":1,"x":[{"id":2}]},"id":"a\"b"}"#), (Some(r#""a\"b""#.into()), false));
        assert_eq!(scan(r#"{ "id" : 12 , "result": "id"}"#), (Some("12".into()), false));
        assert_eq!(scan(r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"id":3}}"#), (None, true));
        assert_eq!(scan(r#"{"method":"ping","id":4}"#), (Some("4".into()), true));
        assert_eq!(scan(r#"{"idx":5,"result":{}}"#), (None, false));
        assert_eq!(scan(r#"{"\"id":5}"#), (None, false));
        assert_eq!(scan(r#"[{"id":5}]"#), (None, false));
        assert_eq!(scan(r#"{"id":{"x":1}}"#), (None, false));
    }

    async fn through(input: Vec<u8>, limit: usize) -> Vec<u8> {
        let mut out = Vec::new();
        LineGuard::with_limit(&input[..], limit).read_to_end(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_and_an_oversized_response_becomes_an_error() {
        let small = b"{\"id\":1,\"result\":{}}\n".to_vec();
        assert_eq!(through(small.clone(), 64).await, small);
        let mut input = small.clone();
        input.extend_from_slice(format!("{{\"result\":\"{}\",\"id\":2}}\n", "x".repeat(500)).as_bytes());
        input.extend_from_slice(&small);
        let out = String::from_utf8(through(input, 64).await).expect("utf-8");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let reply: serde_json::Value = serde_json::from_str(lines[1]).expect("json");
        assert_eq!(reply["id"], 2);
        assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains("limit")), "{reply}");
        // A response with its id first is answered once it is over the limit, even if its line never ends.
        let input = format!("{{\"id\":3,\"result\":\"{}", "w".repeat(500)).into_bytes();
        let out = through(input, 64).await;
        let reply: serde_json::Value = serde_json::from_slice(&out).expect("one json line");
        assert_eq!(reply["id"], 3);
        // A notification over the limit is only dropped.
        let input = format!("{{\"method\":\"n\",\"params\":\"{}\"}}\n", "y".repeat(500)).into_bytes();
        assert_eq!(through(input, 64).await, b"");
    }

    proptest! {
        #[test]
        fn any_input_keeps_lines_within_the_limit_and_never_panics(
            input in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'"'), Just(b'{'), any::<u8>()], 0..400),
            limit in 1usize..64,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
            let out = rt.block_on(through(input.clone(), limit));
            for line in out.split_inclusive(|b| *b == b'\n') {
                let ok = line.len() <= limit || serde_json::from_slice::<serde_json::Value>(line).is_ok();
                prop_assert!(ok, "a line over the limit passed: {:?}", String::from_utf8_lossy(line));
            }
        }

        #[test]
        fn an_oversized_response_is_answered_with_its_id(id in 0u64..1_000_000, pad in 100usize..300, first in any::<bool>()) {
            let body = "z".repeat(pad);
            let line = if first {
                format!("{{\"id\":{id},\"result\":{{\"t\":\"{body}\"}}}}\n")
            } else {
                format!("{{\"result\":{{\"t\":\"{body}\"}},\"id\":{id}}}\n")
            };
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
            let out = rt.block_on(through(line.into_bytes(), 64));
            let reply: serde_json::Value = serde_json::from_slice(&out).expect("one json line");
            prop_assert_eq!(&reply["id"], &serde_json::json!(id));
        }
    }
}
