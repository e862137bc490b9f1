//! The wait engine: how every synchronizer waits for what it asks the store for, as
//! tokio's `batch_semaphore` waits for tokio's mutex, read-write lock and semaphore.
//!
//! Try once; if busy and the caller may wait, subscribe to the name's notifications and
//! try again (a release between the first try and the subscription would otherwise be
//! missed); then sleep until a notification arrives, the store's hint runs out or the
//! caller's wait does, and try again. A waiter that listens already when it starts (its
//! line passed a listener on, or its backend has one at hand: [`Driver::at_hand`]) skips
//! the first try: it asks once, listening. The notification future is armed before every
//! attempt, so a release that lands during the attempt still wakes the waiter. Every
//! attempt and the subscription end with the caller's wait.
//!
//! A synchronizer is a [`Driver`]: it makes each attempt (what it asks, what it keeps
//! between attempts), subscribes, and may take what a wake-up brings (a hand-over). Each
//! attempt is an [`InFlight`] request: cancel-safe, and settled in the background when
//! its caller goes away (see [`in_flight`]).

mod in_flight;

use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::backend::RequestId;
use crate::notify::Listener;

pub(crate) use in_flight::{InFlight, Settle};

/// How long a caller is prepared to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// One attempt.
    Never,
    /// Until this instant.
    Until(Instant),
    /// Until served.
    Forever,
}

impl Wait {
    /// A wait of at most `wait` from now. A zero wait is one attempt whose answer is
    /// awaited, however long the store takes (within its response timeout): a wait for
    /// nothing must not turn a slow answer into "busy", nor register a waiter.
    pub(crate) fn at_most(wait: Duration) -> Self {
        if wait.is_zero() {
            Self::Never
        } else {
            Self::Until(Instant::now() + wait)
        }
    }

    /// The deadline, if any.
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Self::Until(deadline) => Some(deadline),
            Self::Never | Self::Forever => None,
        }
    }

    /// Whether the wait is over (a wait that never waits is over after its attempt).
    pub(crate) fn is_over(self) -> bool {
        match self {
            Self::Never => true,
            Self::Until(deadline) => Instant::now() >= deadline,
            Self::Forever => false,
        }
    }

    /// How long is left; `None` for ever, zero when over.
    fn left(self) -> Option<Duration> {
        match self {
            Self::Never => Some(Duration::ZERO),
            Self::Until(deadline) => Some(deadline.saturating_duration_since(Instant::now())),
            Self::Forever => None,
        }
    }
}

/// What one attempt came to.
#[derive(Debug)]
pub(crate) enum Step<H> {
    /// The caller is served.
    Held(H),
    /// Not this time. A notification wakes the waiter; without one it asks again after
    /// `retry_in` (the store's hint: the holder's lease, the next expiry), or when the
    /// caller's wait is over (`None`). With `wake_others` the wake-up that led here was
    /// meant for another waiter of this client too (the thing is reserved for a
    /// starving one): every local waiter is woken, and this one listens afresh.
    Busy {
        retry_in: Option<Duration>,
        wake_others: bool,
    },
    /// Ask again at once (the attempt's identity is over and the next one has a fresh
    /// one). After the first attempt, the waiter subscribes first.
    Again,
}

impl<H> Step<H> {
    /// Busy, asking again after `retry_in` at the latest.
    pub(crate) fn busy(retry_in: Option<Duration>) -> Self {
        Self::Busy {
            retry_in,
            wake_others: false,
        }
    }
}

/// What a wait that ended served came to: what is held, and whether the caller waited
/// for it (more than its first attempt).
#[derive(Debug)]
pub(crate) struct Served<H> {
    pub(crate) held: H,
    pub(crate) waited: bool,
}

/// One synchronizer's part in waiting: see the [module](self).
pub(crate) trait Driver: Send {
    /// What a served caller holds.
    type Held: Send;

    /// One attempt. Cancel-safe: dropped, it leaves nothing held (see [`InFlight`]).
    fn attempt(&mut self) -> impl Future<Output = Result<Step<Self::Held>, Error>> + Send;

    /// A subscription to the name's notifications, subscribed when it resolves.
    /// Cancel-safe.
    fn subscribe(&self) -> impl Future<Output = Result<Listener, Error>> + Send + 'static;

    /// A subscription to the name's notifications that needs no request (see
    /// [`Backend::listener_at_hand`](crate::backend::Backend::listener_at_hand)); `None` by default.
    fn at_hand(&self) -> Option<Listener> {
        None
    }

    /// The acquisition a store may hand the thing to while the waiter waits (the id its
    /// attempts carry now), so that such a hand-over wakes this waiter alone; `None` by
    /// default.
    fn acquisition(&self) -> Option<RequestId> {
        None
    }

    /// The waiter listens on `listener` from now on.
    fn listening(&mut self, listener: &Listener) {
        let _ = listener;
    }

    /// A notification woke the waiter: what it brought, if it serves the caller (a
    /// hand-over); else the waiter asks again.
    fn woken(&mut self, listener: &Listener) -> Option<Self::Held> {
        let _ = listener;
        None
    }

    /// Resolves when the waiter must ask again though nothing was released (to keep a
    /// reservation, say); never by default.
    fn also_wake(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// The caller's wait ran out without the thing: `Ok(None)`, or the error that kept
    /// the waiter from asking (a store it could not reach).
    fn ran_out(&mut self) -> Result<Option<Self::Held>, Error> {
        Ok(None)
    }
}

/// How long past the caller's deadline an attempt begun before it may take.
const ATTEMPT_SLACK: Duration = Duration::from_millis(100);

/// Waits as `wait` allows for what `driver` asks for: see the [module](self). `slot`
/// keeps the subscription: one found there is used (a line of waiters passes theirs on),
/// and a new one is left there.
///
/// Cancel-safe: each attempt is (see [`Driver::attempt`]), and so is subscribing.
pub(crate) async fn run<D: Driver>(
    driver: &mut D,
    wait: Wait,
    slot: &mut Option<Listener>,
) -> Result<Option<Served<D::Held>>, Error> {
    // A waiter that listens already asks once, listening; one that does not asks first,
    // and subscribes only when it must wait.
    if slot.is_none() && !wait.is_over() {
        *slot = driver.at_hand();
    }
    // Whether an attempt was made before this one: a grant then came after a wait.
    let mut asked_before = false;
    let listener = match slot.take() {
        Some(listener) => slot.insert(listener),
        None => {
            // Attempts are boxed: a waiter spends its life between attempts, and its
            // resident state should not reserve room for one (thousands of waiters add
            // up). Bounded by the caller's wait as every later attempt is: a store that
            // does not answer (paused, or a connection being re-established) must not
            // hold a bounded wait past its deadline for a response timeout or two. A try
            // is never cut short.
            let Some(first) = Box::pin(within(wait, ATTEMPT_SLACK, driver.attempt())).await else {
                return ran_out(driver);
            };
            if let Step::Held(held) = first? {
                return Ok(Some(Served {
                    held,
                    waited: false,
                }));
            }
            if wait.is_over() {
                return ran_out(driver);
            }
            asked_before = true;
            let Some(subscribed) = Box::pin(within(wait, Duration::ZERO, driver.subscribe())).await
            else {
                return ran_out(driver);
            };
            slot.insert(subscribed?)
        }
    };
    driver.listening(listener);
    loop {
        if let Some(acquisition) = driver.acquisition() {
            listener.expect_hand_over(acquisition);
        }
        let notified = listener.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // The first attempt here is the first made listening (after a first try, it
        // closes the race with a release before the subscription); later ones follow a
        // notification or a hint's time.
        let Some(step) = Box::pin(within(wait, ATTEMPT_SLACK, driver.attempt())).await else {
            return ran_out(driver);
        };
        let retry_in = match step? {
            Step::Held(held) => {
                return Ok(Some(Served {
                    held,
                    waited: asked_before,
                }));
            }
            Step::Busy {
                retry_in,
                wake_others,
            } => {
                if wake_others {
                    listener.wake_all();
                    notified.set(listener.notified());
                    notified.as_mut().enable();
                }
                retry_in
            }
            Step::Again => continue,
        };
        asked_before = true;
        let Some(sleep) = sleep_for(retry_in, wait.left()) else {
            return ran_out(driver);
        };
        // Biased, the notification first: when it and the timer are both ready, the
        // notification is taken (a notified future dropped unconsumed would pass the
        // wake-up on to another waiter), and the outcome does not rest on the runtime's
        // random choice of branch (a simulated run replays exactly).
        let brought = tokio::select! {
            biased;
            () = &mut notified => driver.woken(listener),
            () = listener.handed_here() => driver.woken(listener),
            () = tokio::time::sleep(sleep) => None,
            () = driver.also_wake() => None,
        };
        if let Some(held) = brought {
            return Ok(Some(Served { held, waited: true }));
        }
    }
}

fn ran_out<D: Driver>(driver: &mut D) -> Result<Option<Served<D::Held>>, Error> {
    Ok(driver.ran_out()?.map(|held| Served { held, waited: true }))
}

/// How long a waiter sleeps without a notification: until the store's hint (`retry_in`)
/// or the caller's wait (`left`) runs out, whichever is first, at least a millisecond;
/// `None` when the wait is over; the longest sleep there is without either.
fn sleep_for(retry_in: Option<Duration>, left: Option<Duration>) -> Option<Duration> {
    if left.is_some_and(|left| left.is_zero()) {
        return None;
    }
    let sleep = match (retry_in, left) {
        (Some(hint), Some(left)) => hint.min(left),
        (Some(hint), None) => hint,
        (None, Some(left)) => left,
        (None, None) => crate::MAX_DURATION,
    };
    Some(sleep.max(Duration::from_millis(1)))
}

/// Runs `step` within the caller's wait plus `slack`; `None` when that ran out first.
pub(crate) async fn within<T>(
    wait: Wait,
    slack: Duration,
    step: impl Future<Output = T>,
) -> Option<T> {
    match wait {
        Wait::Until(deadline) => tokio::time::timeout_at(deadline + slack, step).await.ok(),
        Wait::Never | Wait::Forever => Some(step.await),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::notify::{InProcess, Subscriptions, Wake};

    /// Busy until a notification came, then held; counts its attempts and subscriptions.
    struct Counting {
        subscriptions: Subscriptions,
        at_hand: bool,
        attempts: usize,
        subscribed: Arc<std::sync::atomic::AtomicUsize>,
        released: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Driver for Counting {
        type Held = ();

        async fn attempt(&mut self) -> Result<Step<()>, Error> {
            self.attempts += 1;
            if self.released.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(Step::Held(()));
            }
            Ok(Step::busy(Some(Duration::from_secs(60))))
        }

        fn subscribe(&self) -> impl Future<Output = Result<Listener, Error>> + Send + 'static {
            let (subscriptions, subscribed) =
                (self.subscriptions.clone(), Arc::clone(&self.subscribed));
            async move {
                subscribed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                subscriptions.listen("name").await
            }
        }

        fn at_hand(&self) -> Option<Listener> {
            self.at_hand
                .then(|| self.subscriptions.listening("name"))
                .flatten()
        }
    }

    /// A waiter's attempts and subscriptions until a release 10 ms in, with a listener
    /// at hand (the channel lingers) or not.
    async fn wait_for_a_release(at_hand: bool) -> (usize, usize, bool) {
        let subscriptions = Subscriptions::lingering(Arc::new(InProcess), Duration::from_secs(1));
        drop(subscriptions.listen("name").await.expect("listen"));
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut driver = Counting {
            subscriptions: subscriptions.clone(),
            at_hand,
            attempts: 0,
            subscribed: Arc::default(),
            released: Arc::clone(&released),
        };
        let release = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            released.store(true, std::sync::atomic::Ordering::SeqCst);
            subscriptions.deliver("name", Wake::One);
        };
        let mut slot = None;
        let (served, ()) = tokio::join!(run(&mut driver, Wait::Forever, &mut slot), release);
        let served = served.expect("no error").expect("served");
        let subscribed = driver.subscribed.load(std::sync::atomic::Ordering::SeqCst);
        (driver.attempts, subscribed, served.waited)
    }

    // Would fail if a waiter with a listener at hand asked before it listened (three
    // attempts and a subscription, as without one).
    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_listens_already_asks_once_before_it_waits() {
        assert_eq!(
            wait_for_a_release(false).await,
            (3, 1, true),
            "without one: a try, a subscription, an attempt listening, and the one woken"
        );
        assert_eq!(
            wait_for_a_release(true).await,
            (2, 0, true),
            "with one: an attempt listening, and the one woken"
        );
    }

    #[test]
    fn a_waiter_sleeps_until_the_hint_or_its_wait_runs_out() {
        let ms = Duration::from_millis;
        assert_eq!(
            sleep_for(Some(ms(200)), Some(ms(500))),
            Some(ms(200)),
            "the hint first"
        );
        assert_eq!(
            sleep_for(Some(ms(900)), Some(ms(500))),
            Some(ms(500)),
            "the wait first"
        );
        assert_eq!(
            sleep_for(Some(ms(40_000)), None),
            Some(ms(40_000)),
            "a long hint"
        );
        assert_eq!(sleep_for(None, Some(ms(500))), Some(ms(500)), "no hint");
        assert_eq!(sleep_for(None, None), Some(crate::MAX_DURATION), "neither");
        assert_eq!(sleep_for(Some(ms(200)), Some(ms(0))), None, "over");
        assert_eq!(
            sleep_for(Some(ms(0)), None),
            Some(ms(1)),
            "at least a millisecond"
        );
    }
}
