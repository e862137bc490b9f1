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

pub(crate) fn acquire(kind: LockKind, outcome: AcquireOutcome, elapsed: Duration) {
    let outcome = match outcome {
        AcquireOutcome::Acquired => "acquired",
        AcquireOutcome::Busy => "busy",
        AcquireOutcome::Timeout => "timeout",
        AcquireOutcome::Error => "error",
    };
    metrics::histogram!(ACQUIRE_SECONDS, "kind" => kind.as_str(), "outcome" => outcome)
        .record(elapsed.as_secs_f64());
}

pub(crate) fn waited(kind: LockKind, waited: Duration) {
    metrics::histogram!(WAIT_SECONDS, "kind" => kind.as_str()).record(waited.as_secs_f64());
}

pub(crate) fn held(kind: LockKind, delta: f64) {
    metrics::gauge!(HELD, "kind" => kind.as_str()).increment(delta);
}

pub(crate) fn released(kind: LockKind, held_for: Duration) {
    metrics::histogram!(HOLD_SECONDS, "kind" => kind.as_str()).record(held_for.as_secs_f64());
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
