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

/// Counts successful renewals; every other metric is dropped.
#[derive(Debug, Default)]
struct RenewalCounter {
    renewed: Arc<AtomicU64>,
}

impl Recorder for RenewalCounter {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let renewed = key.name() == RENEWALS_TOTAL
            && key
                .labels()
                .any(|label| label.key() == "outcome" && label.value() == "renewed");
        if renewed {
            Counter::from_arc(Arc::clone(&self.renewed))
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The number of locks renewed so far in this process, counted from the first call.
///
/// The first call installs the process's metrics recorder; it returns `None` if another
/// recorder was installed before it.
pub(crate) fn renewed_so_far() -> Option<u64> {
    static RENEWED: OnceLock<Option<Arc<AtomicU64>>> = OnceLock::new();
    RENEWED
        .get_or_init(|| {
            let recorder = RenewalCounter::default();
            let renewed = Arc::clone(&recorder.renewed);
            metrics::set_global_recorder(recorder)
                .ok()
                .map(|()| renewed)
        })
        .as_ref()
        .map(|renewed| renewed.load(Ordering::Relaxed))
}
