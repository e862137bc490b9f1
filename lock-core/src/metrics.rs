//! The lock metrics, recorded through the `metrics` facade.
//!
//! Labels are the lock kind and the outcome, never the lock name: names are unbounded and
//! would explode the cardinality of every series.

use std::time::Duration;

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
}
