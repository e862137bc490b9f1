//! Watchdog renewals counted as the library reports them, through its
//! `lock_renewals_total` metric.
//!
//! The watchdog figure is script calls per 100 renewed locks. Dividing the calls by an
//! assumed number of rounds (the hold over the interval) read 0.92 to 1.03 for the same
//! code: the rounds inside a fixed window vary with their phase and with how long each
//! round takes, which says nothing about how well a round batches its locks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use lock_core::metrics::RENEWALS_TOTAL;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Counts renewals by outcome; every other metric is dropped.
#[derive(Debug, Default)]
struct RenewalCounter {
    counts: Arc<Counts>,
}

/// Renewals the library reported so far, by outcome.
#[derive(Debug, Default)]
struct Counts {
    renewed: AtomicU64,
    /// Renewals that failed (an error or no reply): the watchdog retries them sooner,
    /// and each retry is a script call no renewal counts.
    failed: AtomicU64,
}

/// What [`so_far`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renewals {
    pub(crate) renewed: u64,
    pub(crate) failed: u64,
}

/// A counter that adds to one field of the shared counts.
struct Field {
    counts: Arc<Counts>,
    renewed: bool,
}

impl metrics::CounterFn for Field {
    fn increment(&self, value: u64) {
        self.field().fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.field().fetch_max(value, Ordering::Relaxed);
    }
}

impl Field {
    fn field(&self) -> &AtomicU64 {
        if self.renewed {
            &self.counts.renewed
        } else {
            &self.counts.failed
        }
    }
}

impl Recorder for RenewalCounter {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != RENEWALS_TOTAL {
            return Counter::noop();
        }
        let outcome = key
            .labels()
            .find(|label| label.key() == "outcome")
            .map(|label| label.value().to_owned());
        let renewed = match outcome.as_deref() {
            Some("renewed") => true,
            Some("failed") => false,
            _ => return Counter::noop(),
        };
        Counter::from_arc(Arc::new(Field {
            counts: Arc::clone(&self.counts),
            renewed,
        }))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The renewals reported so far in this process, counted from the first call.
///
/// The first call installs the process's metrics recorder; it returns `None` if another
/// recorder was installed before it.
pub(crate) fn so_far() -> Option<Renewals> {
    static COUNTS: OnceLock<Option<Arc<Counts>>> = OnceLock::new();
    COUNTS
        .get_or_init(|| {
            let recorder = RenewalCounter::default();
            let counts = Arc::clone(&recorder.counts);
            metrics::set_global_recorder(recorder).ok().map(|()| counts)
        })
        .as_ref()
        .map(|counts| Renewals {
            renewed: counts.renewed.load(Ordering::Relaxed),
            failed: counts.failed.load(Ordering::Relaxed),
        })
}
