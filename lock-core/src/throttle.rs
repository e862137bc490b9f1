//! [`Throttle`]: at most one warning of a kind per interval while a failure repeats.
//!
//! During an outage every renewal round, every reconnection attempt and every waiter's
//! retry fails again, and a warning for each buries the first one (an outage of a few
//! seconds made several a second). A warning site keeps a `static` throttle: the first
//! event of an interval goes out, carrying how many were held back before it; the others
//! only count.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lets one event through per interval and counts the ones it holds back.
#[derive(Debug)]
pub struct Throttle {
    every_ms: u64,
    /// When the next event may go out, in milliseconds since the process's first look.
    next_ms: AtomicU64,
    held_back: AtomicU64,
}

impl Throttle {
    /// One event per `every`.
    #[must_use]
    pub const fn new(every: Duration) -> Self {
        // At most u64::MAX ms: a const fn cannot call `min` on u128 through traits.
        let every_ms = every.as_millis();
        let every_ms = if every_ms > u64::MAX as u128 {
            u64::MAX
        } else {
            every_ms as u64
        };
        Self {
            every_ms,
            next_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(held back)` when this event may go out (with how many were held back since
    /// the last one that did); `None` when it only counts.
    pub fn admit(&self) -> Option<u64> {
        let now = now_ms();
        let next = self.next_ms.load(Ordering::Acquire);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(self.every_ms),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Some(self.held_back.swap(0, Ordering::AcqRel));
        }
        self.held_back.fetch_add(1, Ordering::AcqRel);
        None
    }
}

/// Milliseconds since the first call in this process, on the monotonic clock.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let since = EPOCH.get_or_init(Instant::now).elapsed().as_millis();
    u64::try_from(since).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_interval_and_the_rest_counted() {
        let throttle = Throttle::new(Duration::from_millis(200));
        assert_eq!(throttle.admit(), Some(0), "the first goes out");
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.admit(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(throttle.admit(), Some(2), "with the two held back");
        assert_eq!(throttle.admit(), None);
        let never_twice = Throttle::new(Duration::MAX);
        assert_eq!(never_twice.admit(), Some(0));
        assert_eq!(never_twice.admit(), None);
    }
}
