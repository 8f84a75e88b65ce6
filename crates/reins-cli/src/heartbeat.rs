//! The heartbeat of `reins run` on a terminal: while a model call runs longer than a second, one line on stderr,
//! rewritten each second, says how long it has run and about how many tokens have streamed in so far
//! (`  … model call · 12 s · ~340 tokens streamed`); it is erased when the call returns, before its progress line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reins::{Delta, DeltaSink, Model, ModelError, ModelRequest, ModelResponse, Price};
use tokio_util::sync::CancellationToken;

/// How long a call runs before the heartbeat shows, and how often it is rewritten.
const EVERY: Duration = Duration::from_secs(1);

/// `model` with a heartbeat on stderr while each of its calls runs.
pub fn wrap(model: Arc<dyn Model>) -> Arc<dyn Model> {
    Arc::new(Heartbeat { inner: model })
}

struct Heartbeat {
    inner: Arc<dyn Model>,
}

/// The line the heartbeat shows after `elapsed`, `chars` characters having streamed in (about four a token).
pub fn beat_line(elapsed: Duration, chars: u64) -> String {
    let time = crate::render::human_ms(elapsed.as_secs_f64() * 1000.0);
    let time = if elapsed < Duration::from_secs(60) { format!("{} s", elapsed.as_secs()) } else { time };
    if chars == 0 {
        format!("  … model call · {time}")
    } else {
        format!("  … model call · {time} · ~{} tokens streamed", chars.div_ceil(4))
    }
}

#[async_trait]
impl Model for Heartbeat {
    fn price(&self) -> Option<Price> {
        self.inner.price()
    }

    fn identity(&self) -> reins::ModelIdentity {
        self.inner.identity()
    }

    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        let chars = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&chars);
        // Deltas still reach a sink set further out (none in `reins run` today).
        let outer = DeltaSink::current();
        let sink = DeltaSink::new(move |d| {
            match d {
                Delta::Text { text } | Delta::Reasoning { text } => {
                    counted.fetch_add(text.chars().count() as u64, Ordering::Relaxed);
                }
                Delta::ToolArguments { fragment, .. } => {
                    counted.fetch_add(fragment.chars().count() as u64, Ordering::Relaxed);
                }
                Delta::Restart { .. } => counted.store(0, Ordering::Relaxed),
                _ => {}
            }
            if let Some(outer) = &outer {
                outer.send(d);
            }
        });
        let started = Instant::now();
        let shown = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ticker = {
            let (chars, shown) = (Arc::clone(&chars), Arc::clone(&shown));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + EVERY, EVERY);
                loop {
                    tick.tick().await;
                    let line = beat_line(started.elapsed(), chars.load(Ordering::Relaxed));
                    crate::output::stderr_raw(&format!("\r\x1b[2K{line}"));
                    shown.store(true, Ordering::Relaxed);
                }
            })
        };
        let result = sink.scope(self.inner.generate(request, cancel)).await;
        ticker.abort();
        // The abort lands at the ticker's next await: wait for it, so that no beat is written after the erase.
        let _ = ticker.await;
        if shown.load(Ordering::Relaxed) {
            crate::output::stderr_raw("\r\x1b[2K");
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_beat_says_the_time_and_the_tokens_streamed() {
        assert_eq!(beat_line(Duration::from_millis(12_400), 0), "  … model call · 12 s");
        assert_eq!(beat_line(Duration::from_secs(335), 1357), "  … model call · 5m 35s · ~340 tokens streamed");
    }
}
