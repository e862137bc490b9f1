//! A client of another library sharing the mutexes: it speaks Redisson's protocol, so it
//! waits on the lock's channel and never registers. Each acquisition tries (an attempt
//! that does not wait), listens on the channel once the lock is busy, and sleeps until a
//! message comes or the holder's lease could end, then tries again, until its wait runs
//! out. It holds for less than the lease it set (it has no watchdog) and releases.
//!
//! Our releases hand a mutex to our registered waiters; without the offer to other
//! libraries (the protocol's rules) this client lost every such release, and the
//! starvation invariant sees it wait while the lock changes hands again and again.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Acquire;
use lock_core::{AcquireRequest, Backend, LockKind, LockName, LockRef, Owner};
use lock_core::{ReleaseRequest, notify::Listener};
use tokio::time::{Instant, timeout};

use super::ledger::{Held, Ledger};
use super::workload::{Op, Workload};
use super::{LEASE, OPERATIONS, SHARED_NAME, STARVATION_TURNS, WINDOW};
use crate::faults::{FaultyLink, Network};

/// How long it waits for a lock: long enough that a waiter passed over at every release
/// would see the lock change hands many times.
const WAIT: Duration = Duration::from_secs(2);

/// The longest it holds: well within its lease, since nothing renews it.
const LONGEST_HOLD_MS: u64 = 150;

pub(super) struct Foreign {
    pub(super) index: usize,
    pub(super) link: FaultyLink,
    pub(super) network: Arc<Network>,
    pub(super) ledger: Arc<Ledger>,
}

impl Foreign {
    /// Whether a run has one: where its tasks lock mutexes.
    pub(super) fn joins(workload: &Workload) -> bool {
        workload.ops.contains(&Op::Mutex)
    }

    fn note(&self, event: &str) {
        self.network.trace.note(&format!(
            "task {} (another library's client {}): {event}",
            self.index, self.link.client
        ));
    }

    pub(super) async fn run(self) {
        let owner = Owner::new("redisson-0000", &format!("thread-{}", self.index));
        for _ in 0..OPERATIONS {
            let name = SHARED_NAME;
            let Ok(lock_name) = LockName::new(name) else {
                return;
            };
            let lock = LockRef::new(LockKind::Mutex, lock_name, owner.clone());
            self.ledger.wait(self.index, name);
            let acquired = self.acquire(&lock, name).await;
            self.ledger.waited(self.index);
            match acquired {
                Some((request, token, believed_until)) => {
                    self.note(&format!("{name}: taken (token {token:?})"));
                    let held = Held::Foreign {
                        owner: owner.as_str().to_owned(),
                        token,
                        until: believed_until,
                    };
                    let id = self.ledger.insert(name, held);
                    if let Err(violation) = self.ledger.safety() {
                        self.ledger.fail(violation);
                    }
                    let held_for = self.network.draw(|rng| rng.millis_below(LONGEST_HOLD_MS));
                    crate::nap(held_for).await;
                    self.ledger.take(id);
                    let released = self.release(&lock, request).await;
                    self.note(&format!("{name}: released ({released})"));
                }
                None => self.note(&format!("{name}: not taken")),
            }
            let pause = self.network.draw(|rng| rng.millis_below(60));
            crate::nap(pause).await;
        }
    }

    /// Tries until the wait runs out, listening once busy: the request, its token, and
    /// until when it may believe it holds (its lease, counted from the attempt's send).
    async fn acquire(
        &self,
        lock: &LockRef,
        name: &'static str,
    ) -> Option<(AcquireRequest, Option<u64>, Instant)> {
        let deadline = Instant::now() + WAIT;
        let mut request = AcquireRequest::new(LEASE)
            .fencing(true)
            .retry_window(WINDOW);
        let mut listener: Option<Listener> = None;
        // How many times the lock changed hands while this client listened (not while
        // its own request was on its way: a network's delay is no store's doing).
        let mut passed_over = 0;
        while Instant::now() < deadline {
            let notified = listener.as_ref().map(|listener| {
                let mut notified = Box::pin(listener.notified());
                notified.as_mut().enable();
                notified
            });
            let sent = Instant::now();
            let ttl = match self.link.acquire(lock, request).await {
                Ok(Acquire::Acquired { token, .. }) => return Some((request, token, sent + LEASE)),
                Ok(Acquire::Busy { ttl, .. }) => ttl.unwrap_or(LEASE),
                // The grant of a lost reply ended before it asked again: a new attempt.
                Ok(_) => {
                    request = request.fresh_id();
                    Duration::from_millis(10)
                }
                // The reply was lost: ask again soon.
                Err(_) => Duration::from_millis(10),
            };
            let Some(notified) = notified else {
                // Busy: listen, then try again at once (a release may have come between).
                // The empty `notified` borrows the slot until it is dropped.
                drop(notified);
                listener = self.link.listen(lock).await.ok();
                continue;
            };
            let sleep = ttl.min(deadline.saturating_duration_since(Instant::now()));
            let turns = self.ledger.turns(name);
            if timeout(sleep, notified).await.is_ok() {
                self.note("woken on the lock's channel");
            }
            passed_over += self.ledger.turns(name) - turns;
            if passed_over > STARVATION_TURNS {
                let waited =
                    WAIT.saturating_sub(deadline.saturating_duration_since(Instant::now()));
                let what = format!(
                    "STARVED WAITER: another library's client listened for {name} while it \
                     changed hands {passed_over} times (within {waited:?})"
                );
                self.note(&what);
                self.ledger.fail(what);
            }
        }
        None
    }

    /// Releases the grant of `request`, asking again while the answers are lost.
    async fn release(&self, lock: &LockRef, request: AcquireRequest) -> &'static str {
        let release = ReleaseRequest::new(LEASE, request.id).retry_window(WINDOW);
        let give_up = Instant::now() + WINDOW;
        while Instant::now() < give_up {
            if self.link.release(lock, release).await.is_ok() {
                return "ok";
            }
            crate::nap(Duration::from_millis(5)).await;
        }
        "error"
    }
}
