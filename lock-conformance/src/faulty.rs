//! [`FaultyBackend`]: a wrapper that fails, delays or loses the replies of another
//! backend's acquisitions, for races no real network produces on demand (composite
//! locks, cancellation, replies of one owner answered out of order).

use crate::timing::secs;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::faults::{Answer, Fate, FateSource, FaultLayer, Operation};

/// What the wrapper does to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AcquireFault {
    /// Forward it untouched.
    #[default]
    None,
    /// Fail without reaching the wrapped backend, as a request lost before it was sent.
    FailBeforeSending,
    /// Run the next acquisition on the wrapped backend, then report a connection error:
    /// its reply was lost after the backend acted. Later ones are forwarded again.
    LoseReply,
    /// Wait this long before forwarding it.
    DelayRequest(Duration),
    /// Wait this long, then fail without reaching the wrapped backend: a node that
    /// cannot be reached and takes its time to say so.
    FailAfter(Duration),
    /// Forward it at once, then hold back a reply that is a fresh grant (a hold count
    /// of 1) for this long, so that a later grant's reply arrives first.
    DelayFreshGrant(Duration),
}

/// A backend whose operations misbehave as its [`Script`] is told: a
/// [`FaultLayer`] driven by switches a test turns on the
/// layer itself. Clones share the switches.
pub type FaultyBackend = FaultLayer<Script>;

/// The switches of a [`FaultyBackend`]: every operation is passed on untouched until one
/// is set.
#[derive(Default)]
pub struct Script {
    fault: Mutex<AcquireFault>,
    failing_releases: AtomicBool,
    failing_renewals: AtomicBool,
    losing_renewal_replies: AtomicBool,
    losing_release_reply: AtomicBool,
    listen_delay: Mutex<Duration>,
    failing_listens: AtomicUsize,
    permit_grant_delay: Mutex<Duration>,
    /// How long the next expirable-permit renewal waits before it is forwarded.
    permit_renewal_delay: Mutex<Duration>,
    /// How long plain permit requests wait before they are forwarded.
    permit_request_delay: Mutex<Duration>,
    release_delay: Mutex<Duration>,
    force_release_delay: Mutex<Duration>,
    /// While `true`, release answers wait for it to turn `false`.
    release_answers_held: tokio::sync::watch::Sender<bool>,
    /// How many lock acquisitions were asked so far; watched by [`Script::asked`].
    acquisitions: tokio::sync::watch::Sender<usize>,
    /// While set, listeners subscribe where no message ever arrives.
    deaf: AtomicBool,
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("fault", &self.fault())
            .field("failing_releases", &self.failing_releases)
            .field("failing_renewals", &self.failing_renewals)
            .field("losing_renewal_replies", &self.losing_renewal_replies)
            .field("losing_release_reply", &self.losing_release_reply)
            .field("listen_delay", &self.listen_delay)
            .field("failing_listens", &self.failing_listens)
            .field("permit_grant_delay", &self.permit_grant_delay)
            .field("permit_renewal_delay", &self.permit_renewal_delay)
            .field("permit_request_delay", &self.permit_request_delay)
            .field("release_delay", &self.release_delay)
            .field("force_release_delay", &self.force_release_delay)
            .field("release_answers_held", &*self.release_answers_held.borrow())
            .field("acquisitions", &*self.acquisitions.borrow())
            .field("deaf", &self.deaf)
            .finish()
    }
}

impl Script {
    /// Makes new listeners hear nothing from the wrapped backend (or hear it again): a
    /// waiter then learns of a release only from its own client, or by its lease.
    pub fn deafen_listens(&self, deaf: bool) {
        self.deaf.store(deaf, Ordering::SeqCst);
    }

    /// How many lock acquisitions were asked of this wrapper so far.
    #[must_use]
    pub fn acquisitions(&self) -> usize {
        *self.acquisitions.borrow()
    }

    /// Returns once `count` lock acquisitions were asked of this wrapper (at once if they
    /// were): a test orders its steps by this event, not by a pause.
    pub async fn asked(&self, count: usize) {
        let mut asked = self.acquisitions.subscribe();
        // The sender lives as long as `self`: the wait ends only by the count.
        drop(
            asked
                .wait_for(|asked| *asked >= count)
                .await
                .expect("the wrapper keeps its own count"),
        );
    }

    /// Returns once a waiter of this wrapper's only client listens for releases: it has
    /// asked twice, and a waiter asks a second time only once it listens (which closes
    /// the race with a release in between), so a release from now on reaches it. Fails
    /// the test after 10 s.
    pub async fn listening(&self) {
        let listening = tokio::time::timeout(secs(10), self.asked(2)).await;
        assert!(listening.is_ok(), "the waiter never asked a second time");
    }

    /// Makes plain permit requests wait this long before they reach the wrapped backend
    /// (a slow request: its caller may give up while it is on its way).
    pub fn delay_permit_requests(&self, delay: Duration) {
        *self
            .permit_request_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes the next renewal of expirable permits (the watchdog's; not a lease set by
    /// `update_lease`) wait this long before it reaches the wrapped backend: a renewal
    /// that lands late.
    pub fn delay_next_permit_renewal(&self, delay: Duration) {
        *self
            .permit_renewal_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes semaphore acquisitions answer this long after the wrapped backend granted
    /// them (a slow reply), so that a caller may give up while its permits are granted.
    pub fn delay_permit_grants(&self, delay: Duration) {
        *self
            .permit_grant_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes releases fail without reaching the wrapped backend (or forward again).
    pub fn fail_releases(&self, failing: bool) {
        self.failing_releases.store(failing, Ordering::SeqCst);
    }

    /// Makes releases reach the wrapped backend this long after they were sent (a slow
    /// connection), so that a caller may give up while its release is on its way. A
    /// request sent after a delayed release may then overtake it, whatever the wrapped
    /// backend's
    /// [`Capabilities::ordered_requests`](lock_core::backend::Capabilities::ordered_requests)
    /// says.
    pub fn delay_releases(&self, delay: Duration) {
        *self
            .release_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes force releases reach the wrapped backend this long after they were sent, so
    /// that a caller may stop waiting while one is on its way.
    pub fn delay_force_releases(&self, delay: Duration) {
        *self
            .force_release_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Holds back the answers of releases, which the wrapped backend has run, until
    /// called again with `false` (a slow reply).
    pub fn hold_release_answers(&self, held: bool) {
        self.release_answers_held.send_replace(held);
    }

    /// Runs the next release on the wrapped backend, then reports a connection error:
    /// its reply was lost after the backend acted.
    pub fn lose_next_release_reply(&self) {
        self.losing_release_reply.store(true, Ordering::SeqCst);
    }

    /// Makes subscribing to release notifications take this long (a slow connection).
    pub fn delay_listens(&self, delay: Duration) {
        *self
            .listen_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes the next `count` subscriptions fail unconfirmed (a connection error).
    pub fn fail_listens(&self, count: usize) {
        self.failing_listens.store(count, Ordering::SeqCst);
    }

    /// Makes renewals fail without reaching the wrapped backend (or forward again).
    pub fn fail_renewals(&self, failing: bool) {
        self.failing_renewals.store(failing, Ordering::SeqCst);
    }

    /// Makes renewals run on the wrapped backend but report failure, as when their
    /// replies are lost (or forward their answers again).
    pub fn lose_renewal_replies(&self, losing: bool) {
        self.losing_renewal_replies.store(losing, Ordering::SeqCst);
    }

    /// What acquisitions do from now on.
    pub fn set(&self, fault: AcquireFault) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
    }

    fn fault(&self) -> AcquireFault {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn delay(switch: &Mutex<Duration>) -> Duration {
    *switch.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait]
impl FateSource for Script {
    fn fate(&self, operation: Operation) -> Fate {
        let (failing_releases, failing_renewals) = (
            self.failing_releases.load(Ordering::SeqCst),
            self.failing_renewals.load(Ordering::SeqCst),
        );
        match operation {
            Operation::Acquire => {
                self.acquisitions.send_modify(|asked| *asked += 1);
                match self.fault() {
                    AcquireFault::FailBeforeSending => Fate::none().failed(),
                    AcquireFault::LoseReply => {
                        self.set(AcquireFault::None);
                        Fate::none().reply_lost()
                    }
                    AcquireFault::DelayRequest(delay) => Fate::none().delayed(delay),
                    AcquireFault::FailAfter(delay) => Fate::none().delayed(delay).failed(),
                    AcquireFault::None | AcquireFault::DelayFreshGrant(_) => Fate::none(),
                }
            }
            Operation::Release | Operation::ReturnPermits if failing_releases => {
                Fate::none().failed()
            }
            Operation::Release => {
                let lost = self.losing_release_reply.swap(false, Ordering::SeqCst);
                let fate = Fate::none().delayed(delay(&self.release_delay));
                if lost { fate.reply_lost() } else { fate }
            }
            Operation::Renew if failing_renewals => Fate::none().failed(),
            Operation::Renew if self.losing_renewal_replies.load(Ordering::SeqCst) => {
                Fate::none().reply_lost()
            }
            Operation::ForceRelease => Fate::none().delayed(delay(&self.force_release_delay)),
            Operation::Listen => {
                let fate = Fate::none().delayed(delay(&self.listen_delay));
                let failing =
                    self.failing_listens
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
                if failing.is_ok() {
                    fate.failed()
                } else if self.deaf.load(Ordering::SeqCst) {
                    fate.deaf()
                } else {
                    fate
                }
            }
            Operation::TakePermits => Fate::none()
                .delayed(delay(&self.permit_request_delay))
                .reply_delayed(delay(&self.permit_grant_delay)),
            Operation::RenewPermits | Operation::SetPermitLease if failing_renewals => {
                Fate::none().failed()
            }
            Operation::RenewPermits => {
                let once = std::mem::take(
                    &mut *self
                        .permit_renewal_delay
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                );
                Fate::none().delayed(once)
            }
            _ => Fate::none(),
        }
    }

    async fn answered(&self, operation: Operation, answer: Answer) {
        match operation {
            Operation::Acquire => {
                if let (AcquireFault::DelayFreshGrant(delay), Answer::Granted { fresh: true }) =
                    (self.fault(), answer)
                {
                    tokio::time::sleep(delay).await;
                }
            }
            Operation::Release => {
                // The sender lives as long as this script: the wait ends only when the
                // answers are let go.
                let mut answers = self.release_answers_held.subscribe();
                if answers.wait_for(|held| !held).await.is_err() {
                    tracing::warn!("a held release answer's switch is gone");
                }
            }
            _ => {}
        }
    }
}
