//! Requests whose outcome is unknown are sent again.
//!
//! A connection error does not say whether the request ran. Every backend remembers the
//! answer to each request, by its id, for the request's retry window, so the same
//! request can be sent again until it is answered: one that already ran gets its first
//! answer back and changes nothing. A grant whose caller never learnt of it (the caller
//! went away, or stopped waiting) is undone by an undo release, which releases it only
//! if the backend remembers granting it.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

use crate::{Error, ErrorKind};

/// The first pause before a request is sent again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// Pauses between attempts that double from a first one up to a longest one, without
/// end: the schedule every retry and reconnect loop of the workspace follows (the
/// adapters' notification connections, RedLock's lazy nodes, lock-core's resends).
/// Without jitter: each loop is one client's, and clients start at different times.
#[derive(Debug)]
pub struct Pauses(ExponentialBackoff);

impl Pauses {
    /// Pauses from `first`, doubling up to `longest`.
    #[must_use]
    pub fn doubling(first: Duration, longest: Duration) -> Self {
        let schedule = ExponentialBuilder::new()
            .with_min_delay(first)
            .with_max_delay(longest.max(first))
            .without_max_times();
        Self(schedule.build())
    }
}

impl Iterator for Pauses {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.next()
    }
}

/// Whether `result` leaves it unknown whether the request ran.
pub(crate) fn unanswered<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(err) if is_unanswered(err))
}

/// Whether a request that failed with `err` may have run: a connection error says
/// nothing of what the store did.
pub(crate) fn is_unanswered(err: &Error) -> bool {
    err.kind() == ErrorKind::Connection
}

/// Sends a request (`send` makes the same one each time) until it is answered or no
/// pause fits before `until`; returns the last outcome.
pub(crate) async fn until_answered<T, F, Fut>(until: Instant, mut send: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut pauses = Pauses::doubling(FIRST_PAUSE, LONGEST_PAUSE);
    loop {
        let outcome = send().await;
        let pause = pauses.next().unwrap_or(LONGEST_PAUSE);
        if !unanswered(&outcome) || Instant::now() + pause >= until {
            return outcome;
        }
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Pauses;

    #[test]
    fn pauses_double_up_to_the_longest_and_never_end() {
        let ms = |n| Duration::from_millis(n);
        let pauses: Vec<u128> = Pauses::doubling(ms(10), ms(50))
            .take(6)
            .map(|pause| pause.as_micros())
            .collect();
        // backon computes in f32 seconds: within a microsecond of the exact doubling.
        for (pause, exact) in pauses
            .iter()
            .zip([10_000, 20_000, 40_000, 50_000, 50_000, 50_000])
        {
            assert!(pause.abs_diff(exact) <= 1, "{pauses:?}");
        }
    }
}
