//! One timing scale for the scenarios: every lease, wait, pause and bound they use is a
//! number of milliseconds or seconds times the scale, so that a slow machine or a slow
//! store changes one number, not hundreds.
//!
//! The scale is the fixture's ([`Fixture::time_scale`](crate::Fixture::time_scale), 1 by
//! default) times `DISTLOCK_TEST_TIME_SCALE` when that is set (for example `2` on a
//! loaded machine). Each test sets it before its scenario runs; tests of one process
//! share it, so fixtures run side by side in one process (nextest runs each test in a
//! process of its own) take the largest.
//!
//! Durations the stores answer, and the bounds of arguments a scenario checks, are not
//! times of the machine: they stay plain `Duration`s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The scale's bits (an `f64`); 0 until a test sets it.
static SCALE: AtomicU64 = AtomicU64::new(0);

/// The environment variable that multiplies every fixture's scale.
pub const SCALE_VARIABLE: &str = "DISTLOCK_TEST_TIME_SCALE";

/// The scale from the environment, 1 when unset or unreadable.
fn from_environment() -> f64 {
    std::env::var(SCALE_VARIABLE)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .filter(|scale| scale.is_finite() && *scale > 0.0)
        .unwrap_or(1.0)
}

/// Sets the scale for a fixture whose own is `fixture_scale`: the largest set in this
/// process wins.
pub fn set_scale(fixture_scale: f64) {
    let scale = fixture_scale.max(f64::MIN_POSITIVE) * from_environment();
    SCALE.fetch_max(scale.to_bits(), Ordering::Relaxed);
}

/// The scale in force: set by the test, else the environment's.
#[must_use]
pub fn scale() -> f64 {
    match SCALE.load(Ordering::Relaxed) {
        0 => from_environment(),
        bits => f64::from_bits(bits),
    }
}

/// `n` milliseconds, scaled.
#[must_use]
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n).mul_f64(scale())
}

/// `n` seconds, scaled.
#[must_use]
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n).mul_f64(scale())
}
