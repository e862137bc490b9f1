//! Background failures are visible: a release nobody awaits that fails, a renewal that
//! fails and the loss of the lock that follows each emit a `warn` event (they used to
//! vanish in `let _ =`). A recording subscriber is this test binary's global one.

use std::fmt::{self, Write};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use lock_conformance::faulty::FaultyBackend;
use lock_core::Locks;
use lock_core::memory::MemoryBackend;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber, span};

/// Every warn and error event, one line of its fields each.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn lines() -> std::sync::MutexGuard<'static, Vec<String>> {
    LINES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The global subscriber: records into [`LINES`].
struct Recorder;

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Writing to a String cannot fail.
        write!(self.0, "{}={value:?} ", field.name()).ok();
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() <= Level::WARN {
            let mut line = Line(String::new());
            event.record(&mut line);
            lines().push(line.0);
        }
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

fn record() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(Recorder).expect("one global subscriber");
    });
}

/// Waits up to 2 s for a recorded event mentioning every one of `words`.
async fn logged(words: &[&str]) -> bool {
    for _ in 0..200 {
        let found = lines()
            .iter()
            .any(|line| words.iter().all(|word| line.contains(word)));
        if found {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_whose_release_fails_is_reported() {
    record();
    let faulty = FaultyBackend::new(Arc::new(MemoryBackend::new()));
    // A failed release is sent again for the retry window before it is reported.
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .retry_window(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = locks.mutex("visible:dropped").lock().await.unwrap();
    faulty.fail_releases(true);
    drop(guard);
    assert!(
        logged(&["visible:dropped", "a dropped guard", "release not sent"]).await,
        "no warning for a dropped guard's failed release: {:?}",
        lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_renewals_and_the_loss_that_follows_are_reported() {
    record();
    let faulty = FaultyBackend::new(Arc::new(MemoryBackend::new()));
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = locks.mutex("visible:renewal").lock().await.unwrap();
    faulty.fail_renewals(true);
    let lost = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    assert!(
        lost.is_ok(),
        "renewals kept failing, yet the guard was not lost"
    );
    assert!(
        logged(&["visible:renewal", "renewal not sent"]).await,
        "no warning for a failed renewal"
    );
    assert!(
        logged(&["visible:renewal", "lock lost"]).await,
        "no warning for the lost lock"
    );
}

/// Grants held back by the restart quarantine are reported, distinctly from a lock that
/// is merely busy: a fresh server (no epoch yet) waits one quarantine before its first
/// grant, as after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_restart_quarantine_is_reported() {
    record();
    let server = lock_testkit::RedisServer::start().await;
    let backend = lock_redis::Connector::new(server.url())
        .settings(
            lock_redis::ConnectorSettings::default().restart_quarantine(Duration::from_secs(2)),
        )
        .connect()
        .await
        .expect("connect");
    let locks = Locks::new(Arc::new(backend));
    let got = locks
        .mutex("quarantined")
        .try_lock()
        .await
        .expect("a busy answer");
    assert!(got.is_none(), "a lock granted within the quarantine");
    assert!(
        logged(&["restart quarantine active", "quarantined"]).await,
        "no event: {:?}",
        lines()
    );
}
