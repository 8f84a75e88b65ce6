//! A client-side rate limiter shared by every run that uses the same provider (or the same limiter).
//!
//! It spaces requests to a rate (a token bucket with a burst), caps how many are in flight, and pauses
//! everyone when the server said to wait (a 429 with `Retry-After`, or rate-limit headers saying that the
//! window is used up), so concurrent runs do not hammer a server that is already refusing them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A shared rate limiter. Clones share their state.
///
/// ```
/// let limiter = reins_providers::RateLimiter::new(Some(600), Some(4));
/// let shared = limiter.clone(); // give it to another provider: both draw from the same budget
/// # drop(shared);
/// ```
#[derive(Clone, Debug)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    bucket: Mutex<Bucket>,
    concurrency: Option<Arc<Semaphore>>,
}

#[derive(Debug)]
struct Bucket {
    /// Requests per second; `None`: unlimited.
    rate: Option<f64>,
    capacity: f64,
    tokens: f64,
    last: Instant,
    paused_until: Option<Instant>,
}

/// Held while a request is in flight.
#[derive(Debug)]
pub struct Permit {
    _concurrency: Option<OwnedSemaphorePermit>,
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self::new(None, None)
    }
}

impl RateLimiter {
    /// At most `requests_per_minute` requests per minute (bursts of up to a tenth of it, at least 1) and
    /// at most `max_concurrent` in flight; `None` leaves that dimension unlimited. Zero counts as 1.
    pub fn new(requests_per_minute: Option<u32>, max_concurrent: Option<usize>) -> Self {
        let rate = requests_per_minute.map(|r| f64::from(r.max(1)) / 60.0);
        let capacity = requests_per_minute.map_or(1.0, |r| (f64::from(r) / 10.0).floor().max(1.0));
        Self {
            inner: Arc::new(Inner {
                bucket: Mutex::new(Bucket {
                    rate,
                    capacity,
                    tokens: capacity,
                    last: Instant::now(),
                    paused_until: None,
                }),
                concurrency: max_concurrent.map(|n| Arc::new(Semaphore::new(n.max(1)))),
            }),
        }
    }

    /// Waits for a slot; `None` when `cancel` fired first.
    pub async fn acquire(&self, cancel: &CancellationToken) -> Option<Permit> {
        loop {
            let wait = match self.inner.bucket.lock() {
                Ok(mut b) => b.take(Instant::now()),
                // A poisoned lock only means another thread panicked mid-update: the numbers are still usable.
                Err(poisoned) => poisoned.into_inner().take(Instant::now()),
            };
            match wait {
                None => break,
                Some(d) => {
                    tokio::select! {
                        _ = cancel.cancelled() => return None,
                        _ = tokio::time::sleep(d) => {}
                    }
                }
            }
        }
        let concurrency = match &self.inner.concurrency {
            None => None,
            Some(sem) => tokio::select! {
                _ = cancel.cancelled() => return None,
                p = sem.clone().acquire_owned() => Some(p.ok()?),
            },
        };
        Some(Permit { _concurrency: concurrency })
    }

    /// Holds every request back for `wait` from now (longer pauses win over shorter ones).
    pub fn pause_for(&self, wait: Duration) {
        let Some(until) = Instant::now().checked_add(wait) else { return };
        let mut b = match self.inner.bucket.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        b.paused_until = Some(b.paused_until.map_or(until, |p| p.max(until)));
    }

    /// How long requests are still held back, if they are.
    pub fn paused_for(&self) -> Option<Duration> {
        let b = match self.inner.bucket.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        b.paused_until.and_then(|p| p.checked_duration_since(Instant::now())).filter(|d| !d.is_zero())
    }
}

impl Bucket {
    /// Takes a token now (`None`) or says how long to wait before trying again.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        if let Some(p) = self.paused_until {
            if p > now {
                return Some(p - now);
            }
            self.paused_until = None;
        }
        let rate = self.rate?;
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64(((1.0 - self.tokens) / rate).max(0.001)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_spaces_requests_after_the_burst() {
        let t0 = Instant::now();
        let mut b = Bucket { rate: Some(1.0), capacity: 2.0, tokens: 2.0, last: t0, paused_until: None };
        assert_eq!(b.take(t0), None);
        assert_eq!(b.take(t0), None);
        let wait = b.take(t0).unwrap();
        assert!(wait > Duration::from_millis(900) && wait <= Duration::from_secs(1), "{wait:?}");
        assert_eq!(b.take(t0 + Duration::from_secs(1)), None);
    }

    #[test]
    fn pause_holds_everyone_until_it_ends() {
        let t0 = Instant::now();
        let mut b = Bucket {
            rate: None,
            capacity: 1.0,
            tokens: 1.0,
            last: t0,
            paused_until: Some(t0 + Duration::from_secs(5)),
        };
        assert_eq!(b.take(t0), Some(Duration::from_secs(5)));
        assert_eq!(b.take(t0 + Duration::from_secs(5)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_waits_out_a_pause_and_honours_cancellation() {
        let l = RateLimiter::new(None, Some(1));
        l.pause_for(Duration::from_secs(30));
        assert!(l.paused_for().is_some());
        let cancel = CancellationToken::new();
        let t0 = Instant::now();
        let p = l.acquire(&cancel).await;
        assert!(p.is_some());
        assert!(t0.elapsed() >= Duration::from_secs(30));
        // The only slot is held: a second acquire waits until cancelled.
        let c2 = CancellationToken::new();
        let c3 = c2.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            c3.cancel();
        });
        assert!(l.acquire(&c2).await.is_none());
        drop(p);
        assert!(l.acquire(&CancellationToken::new()).await.is_some());
    }
}
