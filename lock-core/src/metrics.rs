//! The metrics of locks, semaphores, latches and connections, recorded through the
//! `metrics` facade (install any recorder, a Prometheus exporter say; without one they
//! cost next to nothing).
//!
//! Labels are kinds and outcomes, never a lock's name: names are unbounded and would
//! explode the cardinality of every series. The README's Telemetry section has the same
//! table as the constants below.

use std::time::Duration;

use metrics::Gauge;
use tokio::time::Instant;

use crate::{LockKind, LostReason};

/// Histogram: seconds from the start of an acquire call to its result.
/// Labels: `kind`, `outcome` (`acquired`, `busy`, `timeout`, `error`).
pub const ACQUIRE_SECONDS: &str = "lock_acquire_seconds";
/// Histogram: seconds an acquire call spent waiting after its first attempt found the
/// lock busy. Label: `kind`.
pub const WAIT_SECONDS: &str = "lock_wait_seconds";
/// Histogram: seconds a guard was held. Label: `kind`.
pub const HOLD_SECONDS: &str = "lock_hold_seconds";
/// Counter: watchdog renewals. Label: `outcome` (`renewed`, `gone`, `failed`).
pub const RENEWALS_TOTAL: &str = "lock_renewals_total";
/// Counter: holds lost before release. Labels: `kind`, `reason` (`expired`, `owner_gone`).
pub const LOST_TOTAL: &str = "lock_lost_total";
/// Gauge: guards alive. Label: `kind`.
pub const HELD: &str = "lock_held";
/// Gauge: lock acquisitions that may wait and have not ended (in line in their client,
/// or asking the store); a try is not counted. Label: `kind`.
pub const WAITERS: &str = "lock_waiters";
/// Histogram: seconds from the start of a permit acquisition to its result. Labels:
/// `kind` (`plain`, `expirable`), `outcome` (`acquired`, `busy`, `timeout`, `error`).
pub const PERMIT_ACQUIRE_SECONDS: &str = "semaphore_acquire_seconds";
/// Gauge: permit acquisitions that may wait and have not ended. Label: `kind`.
pub const PERMIT_WAITERS: &str = "semaphore_waiters";
/// Gauge: permits held by this process's `Permits` and `LeasedPermits`. Label: `kind`.
pub const PERMITS_HELD: &str = "semaphore_permits_held";
/// Histogram: seconds a wait for a latch took. Label: `outcome` (`opened`, `timeout`,
/// `error`).
pub const LATCH_WAIT_SECONDS: &str = "latch_wait_seconds";
/// Gauge: waits for a latch that have not ended.
pub const LATCH_WAITERS: &str = "latch_waiters";
/// Counter: count-downs of latches answered by the store.
pub const COUNT_DOWNS_TOTAL: &str = "latch_count_downs_total";
/// Counter: connections to the store that broke. Label: `connection` (`notifications`:
/// the one waiters are woken through; `commands`: one that lock operations use, where
/// the adapter keeps its own).
pub const CONNECTIONS_LOST_TOTAL: &str = "lock_connections_lost_total";
/// Counter: connections made again after one broke. Label: `connection`.
pub const RECONNECTS_TOTAL: &str = "lock_reconnects_total";

/// Which semaphore, as the `kind` label of the semaphore metrics says.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PermitKind {
    Plain,
    Expirable,
}

/// A connection to the store, as the `connection` label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Connection {
    /// The connection waiters are woken through (pub/sub, LISTEN).
    Notifications,
    /// A connection lock operations use, where an adapter keeps its own.
    Commands,
}

/// The outcome label of an acquire call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AcquireOutcome {
    Acquired,
    Busy,
    Timeout,
    Error,
}

/// Runs a `metrics` macro with the lock kind as its first label, spelt out literally in
/// each arm so that every key is a static one, hashed once: a label computed at run time
/// makes the macro allocate its key on every call, and a name that is not a literal (a
/// `const` included) makes it hash the key on every call, recorder or not. These run for
/// every acquisition and release. The names repeat the constants above; the test below
/// checks that they agree.
macro_rules! with_kind {
    ($kind:expr, $macro:ident!($name:literal $(, $label:literal => $value:literal)*)) => {
        match $kind {
            LockKind::Mutex => metrics::$macro!($name, "kind" => "mutex" $(, $label => $value)*),
            LockKind::Fair => metrics::$macro!($name, "kind" => "fair" $(, $label => $value)*),
            LockKind::Read => metrics::$macro!($name, "kind" => "read" $(, $label => $value)*),
            LockKind::Write => metrics::$macro!($name, "kind" => "write" $(, $label => $value)*),
        }
    };
}

pub(crate) fn acquire(kind: LockKind, outcome: AcquireOutcome, elapsed: Duration) {
    let histogram = match outcome {
        AcquireOutcome::Acquired => {
            with_kind!(
                kind,
                histogram!("lock_acquire_seconds", "outcome" => "acquired")
            )
        }
        AcquireOutcome::Busy => with_kind!(
            kind,
            histogram!("lock_acquire_seconds", "outcome" => "busy")
        ),
        AcquireOutcome::Timeout => {
            with_kind!(
                kind,
                histogram!("lock_acquire_seconds", "outcome" => "timeout")
            )
        }
        AcquireOutcome::Error => {
            with_kind!(
                kind,
                histogram!("lock_acquire_seconds", "outcome" => "error")
            )
        }
    };
    histogram.record(elapsed.as_secs_f64());
}

pub(crate) fn waited(kind: LockKind, waited: Duration) {
    with_kind!(kind, histogram!("lock_wait_seconds")).record(waited.as_secs_f64());
}

pub(crate) fn held(kind: LockKind, delta: f64) {
    with_kind!(kind, gauge!("lock_held")).increment(delta);
}

pub(crate) fn released(kind: LockKind, held_for: Duration) {
    with_kind!(kind, histogram!("lock_hold_seconds")).record(held_for.as_secs_f64());
}

/// Counts one in a gauge while alive: a waiter, from its start to its end however it
/// ends (a dropped future included).
pub(crate) struct Counted(Gauge);

impl Counted {
    fn new(gauge: Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

pub(crate) fn lock_waiting(kind: LockKind) -> Counted {
    Counted::new(with_kind!(kind, gauge!("lock_waiters")))
}

/// One permit acquisition, measured from its start: a waiter (unless it is a try) until
/// it ends, and its outcome once it has one.
pub(crate) struct PermitAcquisition {
    kind: PermitKind,
    started: Instant,
    is_try: bool,
    _waiting: Option<Counted>,
}

impl PermitAcquisition {
    /// An acquisition that waits, or a try (`is_try`).
    pub(crate) fn start(kind: PermitKind, is_try: bool) -> Self {
        let started = Instant::now();
        let waiting = (!is_try).then(|| {
            Counted::new(match kind {
                PermitKind::Plain => metrics::gauge!("semaphore_waiters", "kind" => "plain"),
                PermitKind::Expirable => {
                    metrics::gauge!("semaphore_waiters", "kind" => "expirable")
                }
            })
        });
        Self {
            kind,
            started,
            is_try,
            _waiting: waiting,
        }
    }

    /// Records the outcome: `Ok(true)` acquired, `Ok(false)` not within the wait.
    pub(crate) fn end(self, outcome: Result<bool, ()>) {
        let outcome = match outcome {
            Ok(true) => "acquired",
            Ok(false) if self.is_try => "busy",
            Ok(false) => "timeout",
            Err(()) => "error",
        };
        let elapsed = self.started.elapsed().as_secs_f64();
        match self.kind {
            PermitKind::Plain => metrics::histogram!(
                "semaphore_acquire_seconds", "kind" => "plain", "outcome" => outcome
            ),
            PermitKind::Expirable => metrics::histogram!(
                "semaphore_acquire_seconds", "kind" => "expirable", "outcome" => outcome
            ),
        }
        .record(elapsed);
    }
}

/// Runs a permit acquisition that waits, or a try (`is_try`), measured (see
/// [`PermitAcquisition`]).
pub(crate) async fn measured_permits<T, E>(
    kind: PermitKind,
    is_try: bool,
    acquiring: impl Future<Output = Result<Option<T>, E>>,
) -> Result<Option<T>, E> {
    let measured = PermitAcquisition::start(kind, is_try);
    let outcome = acquiring.await;
    measured.end(outcome.as_ref().map(Option::is_some).map_err(drop));
    outcome
}

pub(crate) fn permits_held(kind: PermitKind, delta: f64) {
    match kind {
        PermitKind::Plain => metrics::gauge!("semaphore_permits_held", "kind" => "plain"),
        PermitKind::Expirable => {
            metrics::gauge!("semaphore_permits_held", "kind" => "expirable")
        }
    }
    .increment(delta);
}

pub(crate) fn latch_waiting() -> Counted {
    Counted::new(metrics::gauge!("latch_waiters"))
}

/// `Ok(true)` opened, `Ok(false)` timed out.
pub(crate) fn latch_waited(outcome: Result<bool, ()>, waited: Duration) {
    let outcome = match outcome {
        Ok(true) => "opened",
        Ok(false) => "timeout",
        Err(()) => "error",
    };
    metrics::histogram!("latch_wait_seconds", "outcome" => outcome).record(waited.as_secs_f64());
}

pub(crate) fn counted_down() {
    metrics::counter!("latch_count_downs_total").increment(1);
}

/// Counts a broken connection of the store; for backends that keep their own.
pub fn connection_lost(connection: Connection) {
    match connection {
        Connection::Notifications => {
            metrics::counter!("lock_connections_lost_total", "connection" => "notifications")
        }
        Connection::Commands => {
            metrics::counter!("lock_connections_lost_total", "connection" => "commands")
        }
    }
    .increment(1);
}

/// Counts a connection made again after it broke; for backends that keep their own.
pub fn reconnected(connection: Connection) {
    match connection {
        Connection::Notifications => {
            metrics::counter!("lock_reconnects_total", "connection" => "notifications")
        }
        Connection::Commands => {
            metrics::counter!("lock_reconnects_total", "connection" => "commands")
        }
    }
    .increment(1);
}

pub(crate) fn renewals(outcome: &'static str, count: usize) {
    if count > 0 {
        metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome).increment(count as u64);
    }
}

pub(crate) fn lost(kind: LockKind, reason: LostReason) {
    let reason = match reason {
        LostReason::LeaseExpired => "expired",
        LostReason::OwnerGone => "owner_gone",
    };
    metrics::counter!(LOST_TOTAL, "kind" => kind.as_str(), "reason" => reason).increment(1);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::*;

    /// Writes down every key registered, as `name{label=value,...}`.
    #[derive(Default)]
    struct Keys(Mutex<Vec<String>>);

    impl Keys {
        fn note(&self, key: &Key) {
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let mut keys = self.0.lock().unwrap();
            keys.push(format!("{}{{{}}}", key.name(), labels.join(",")));
        }
    }

    impl Recorder for Keys {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.note(key);
            Counter::noop()
        }

        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.note(key);
            Gauge::noop()
        }

        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            self.note(key);
            Histogram::noop()
        }
    }

    #[test]
    fn every_kind_and_outcome_is_labelled_by_name() {
        let keys = Keys::default();
        let kinds = [
            LockKind::Mutex,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
        ];
        let outcomes = [
            (AcquireOutcome::Acquired, "acquired"),
            (AcquireOutcome::Busy, "busy"),
            (AcquireOutcome::Timeout, "timeout"),
            (AcquireOutcome::Error, "error"),
        ];
        let mut expected = Vec::new();
        metrics::with_local_recorder(&keys, || {
            for kind in kinds {
                let k = kind.as_str();
                for (outcome, label) in outcomes {
                    acquire(kind, outcome, Duration::ZERO);
                    expected.push(format!("{ACQUIRE_SECONDS}{{kind={k},outcome={label}}}"));
                }
                waited(kind, Duration::ZERO);
                held(kind, 1.0);
                released(kind, Duration::ZERO);
                lost(kind, LostReason::LeaseExpired);
                expected.extend([
                    format!("{WAIT_SECONDS}{{kind={k}}}"),
                    format!("{HELD}{{kind={k}}}"),
                    format!("{HOLD_SECONDS}{{kind={k}}}"),
                    format!("{LOST_TOTAL}{{kind={k},reason=expired}}"),
                ]);
            }
        });
        assert_eq!(*keys.0.lock().unwrap(), expected);
    }

    #[test]
    fn waiters_permits_latches_and_connections_use_their_names() {
        let keys = Keys::default();
        metrics::with_local_recorder(&keys, || {
            drop(lock_waiting(LockKind::Fair));
            for kind in [PermitKind::Plain, PermitKind::Expirable] {
                // A try is no waiter.
                PermitAcquisition::start(kind, true).end(Ok(false));
                PermitAcquisition::start(kind, false).end(Err(()));
                permits_held(kind, 1.0);
            }
            drop(latch_waiting());
            latch_waited(Ok(true), Duration::ZERO);
            counted_down();
            connection_lost(Connection::Notifications);
            reconnected(Connection::Commands);
        });
        let expected = [
            format!("{WAITERS}{{kind=fair}}"),
            format!("{PERMIT_ACQUIRE_SECONDS}{{kind=plain,outcome=busy}}"),
            format!("{PERMIT_WAITERS}{{kind=plain}}"),
            format!("{PERMIT_ACQUIRE_SECONDS}{{kind=plain,outcome=error}}"),
            format!("{PERMITS_HELD}{{kind=plain}}"),
            format!("{PERMIT_ACQUIRE_SECONDS}{{kind=expirable,outcome=busy}}"),
            format!("{PERMIT_WAITERS}{{kind=expirable}}"),
            format!("{PERMIT_ACQUIRE_SECONDS}{{kind=expirable,outcome=error}}"),
            format!("{PERMITS_HELD}{{kind=expirable}}"),
            format!("{LATCH_WAITERS}{{}}"),
            format!("{LATCH_WAIT_SECONDS}{{outcome=opened}}"),
            format!("{COUNT_DOWNS_TOTAL}{{}}"),
            format!("{CONNECTIONS_LOST_TOTAL}{{connection=notifications}}"),
            format!("{RECONNECTS_TOTAL}{{connection=commands}}"),
        ];
        assert_eq!(*keys.0.lock().unwrap(), expected);
    }
}
