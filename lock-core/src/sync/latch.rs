//! [`CountDownLatch`]: wait until a count reaches zero (Java's `CountDownLatch`, shared
//! between services).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Capabilities, LatchBackend, LatchRequest};
use crate::client::named::Named;
use crate::client::shared::Inner;
use crate::config::check_bound;
use crate::{Error, LockName, metrics, retry};

/// A handle on one count-down latch: services count it down, and every waiter goes on
/// once it reaches zero. Cheap; no I/O. Made by [`Locks::count_down_latch`](crate::Locks::count_down_latch).
///
/// A latch with no count is open: [`wait`](CountDownLatch::wait) returns at once. Setting
/// a count closes it again. Every waiter is woken when it opens, in this client and in
/// every other (Java peers' `await` included, where the backend shares its layout).
///
/// ```no_run
/// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
/// let ready = locks.count_down_latch("services-ready");
/// ready.try_set_count(3).await?; // three services must report
/// // ... in each service, once it is ready:
/// ready.count_down().await?;
/// // ... anywhere that must wait for all three:
/// ready.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    named: Named,
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl CountDownLatch {
    pub(crate) fn new(client: &Arc<Inner>, name: &str) -> Self {
        Self {
            named: Named::new(client, name),
        }
    }

    /// The latch's name as given.
    #[must_use]
    pub fn name(&self) -> &str {
        self.named.as_str()
    }

    /// The store and the checked name, or why not.
    fn parts(&self) -> Result<(&dyn LatchBackend, &LockName), Error> {
        let declared = |caps: &Capabilities| caps.count_down_latch;
        self.named
            .store(declared, |backend| backend.latches(), "count-down latches")
    }

    /// Sets the count to `count` if the latch is open; whether it did (Java's
    /// `trySetCount`). A count of zero is refused: an open latch has none.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in the sense that the count is either set or not; dropping the future
    /// leaves no way to learn which but [`count`](CountDownLatch::count).
    pub async fn try_set_count(&self, count: u64) -> Result<bool, Error> {
        self.named.open()?;
        let (latches, name) = self.parts()?;
        if count == 0 {
            return Err(Error::invalid_argument(
                "count",
                "must be at least 1 (a latch without a count is open)",
            ));
        }
        if i64::try_from(count).is_err() {
            return Err(Error::invalid_argument(
                "count",
                "must fit in a signed 64-bit count",
            ));
        }
        latches.try_set_count(name, count).await
    }

    /// Counts down once; opening the latch (count 0) wakes every waiter. An open latch
    /// stays open. A request whose reply was lost is sent again under its id, so it
    /// never counts twice.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may or may not have counted down.
    pub async fn count_down(&self) -> Result<(), Error> {
        self.named.open()?;
        let (latches, name) = self.parts()?;
        let window = self.named.client.config.retry_window;
        let request = LatchRequest::new(window);
        let until = Instant::now() + window;
        retry::until_answered(until, || latches.count_down(name, request)).await?;
        metrics::counted_down();
        Ok(())
    }

    /// The count left; 0 when the latch is open.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn count(&self) -> Result<u64, Error> {
        let (latches, name) = self.parts()?;
        latches.count(name).await
    }

    /// Deletes the latch, opening it; whether there was one. Waiters of this library are
    /// woken and find it open; Java peers' waiters are told only that it changed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in the sense that the latch is either deleted or not.
    pub async fn delete(&self) -> Result<bool, Error> {
        self.named.open()?;
        let (latches, name) = self.parts()?;
        latches.delete(name).await
    }

    /// Waits until the latch is open (count 0), as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: waiting changes nothing.
    pub async fn wait(&self) -> Result<(), Error> {
        self.wait_until(None).await
    }

    /// Waits at most `timeout` for the latch to open; when it runs out, an
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) error. The latch is read once
    /// whatever the timeout: `wait_for(Duration::ZERO)` answers whether it is open now.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: waiting changes nothing.
    pub async fn wait_for(&self, timeout: Duration) -> Result<(), Error> {
        check_bound("timeout", timeout)?;
        self.wait_until(Some(Instant::now() + timeout)).await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<(), Error> {
        let started = Instant::now();
        let waiting = metrics::latch_waiting();
        let outcome = self.wait_unmeasured(deadline).await;
        drop(waiting);
        let opened = match &outcome {
            Ok(()) => Ok(true),
            Err(err) if err.is_timeout() => Ok(false),
            Err(_) => Err(()),
        };
        metrics::latch_waited(opened, started.elapsed());
        outcome
    }

    async fn wait_unmeasured(&self, deadline: Option<Instant>) -> Result<(), Error> {
        let (latches, name) = self.parts()?;
        let started = Instant::now();
        let timed_out = || Error::Timeout {
            what: "count-down latch",
            name: name.to_string(),
            waited: started.elapsed(),
        };
        let bounded = async {
            // Subscribed before the first read: an opening between the two is heard.
            let listener = latches.listen(name).await?;
            loop {
                let notified = listener.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if latches.count(name).await? == 0 {
                    return Ok(());
                }
                notified.await;
            }
        };
        match deadline {
            None => bounded.await,
            Some(deadline) => {
                // One look whatever the deadline: a wait of zero asks whether the latch is
                // open now, on every backend alike (one that answers before the deadline
                // is polled would otherwise say open where a networked one times out).
                if latches.count(name).await? == 0 {
                    return Ok(());
                }
                tokio::time::timeout_at(deadline, bounded)
                    .await
                    .unwrap_or_else(|_| Err(timed_out()))
            }
        }
    }
}
