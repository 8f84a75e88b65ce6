//! Bounded capture of a command's output: head and tail kept, the middle counted and dropped.

use std::collections::VecDeque;

/// The default cap per stream, in bytes.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;

/// A byte sink that never holds more than `cap` bytes: the first half is kept as the head, the newest bytes
/// (up to the other half) as the tail, and everything between is counted as dropped.
#[derive(Clone, Debug)]
pub struct CappedBuffer {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    dropped: u64,
    total: u64,
}

impl CappedBuffer {
    /// A buffer holding at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self { head: Vec::new(), tail: VecDeque::new(), head_cap, tail_cap: cap - head_cap, dropped: 0, total: 0 }
    }

    /// Appends bytes, dropping from the middle beyond the cap.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let n = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + bytes.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.dropped += overflow as u64;
        self.tail.extend(bytes);
    }

    /// Bytes held now (never more than the cap).
    pub fn held(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Bytes dropped from the middle.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Bytes seen in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The bytes kept, head then tail (all the stream while nothing was dropped).
    pub fn kept_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.held());
        out.extend_from_slice(&self.head);
        out.extend(self.tail.iter().copied());
        out
    }

    /// The kept text, lossily decoded, with a marker where bytes were dropped.
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        if self.dropped > 0 {
            out.push_str(&format!("\n[... {} bytes dropped ...]\n", self.dropped));
        }
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keeps_head_and_tail() {
        let mut b = CappedBuffer::new(8);
        b.push(b"0123456789abcdef");
        assert_eq!(b.held(), 8);
        assert_eq!(b.dropped(), 8);
        assert_eq!(b.render(), "0123\n[... 8 bytes dropped ...]\ncdef");
        let mut b = CappedBuffer::new(8);
        b.push(b"abc");
        assert_eq!(b.render(), "abc");
    }

    proptest! {
        #[test]
        fn never_exceeds_cap_and_accounts_for_every_byte(
            cap in 0usize..64, chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20)
        ) {
            let mut b = CappedBuffer::new(cap);
            let mut all = Vec::new();
            for c in &chunks {
                b.push(c);
                all.extend_from_slice(c);
                prop_assert!(b.held() <= cap);
            }
            prop_assert_eq!(b.held() as u64 + b.dropped(), all.len() as u64);
            let head_len = b.head.len();
            prop_assert_eq!(&b.head[..], &all[..head_len]);
            let tail: Vec<u8> = b.tail.iter().copied().collect();
            prop_assert_eq!(&tail[..], &all[all.len() - tail.len()..]);
        }
    }
}
