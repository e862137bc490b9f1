//! What the library logs through `tracing`, collected for a test to read.
//!
//! [`Logs::capture`] collects the calling thread's events until its guard drops: those of
//! futures the test polls itself, not of tasks on other worker threads. [`Logs::global`]
//! collects every thread's, for the whole test binary (a binary has one global
//! collector, so its tests tell their events apart by the names they use).

use crate::timing::ms;
use std::fmt::{self, Write};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Event, Level, Metadata, Subscriber};

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// Its level.
    pub level: Level,
    /// Its target (`distlock` for the library's own events).
    pub target: String,
    /// Its message, without the other fields.
    pub message: String,
    /// Every field, the message among them, as `name=value ` pairs.
    pub line: String,
}

/// The events collected so far; clones share them.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<Logged>>>);

impl Logs {
    /// Collects this thread's events until the guard drops.
    #[must_use]
    pub fn capture() -> (Self, DefaultGuard) {
        let logs = Self::default();
        let guard = tracing::subscriber::set_default(Collector(logs.clone()));
        (logs, guard)
    }

    /// The collector of every thread's events, installed as the global one at the first
    /// call (this binary must install no other).
    ///
    /// # Panics
    ///
    /// If another global collector was installed first.
    #[must_use]
    pub fn global() -> Self {
        static GLOBAL: OnceLock<Logs> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let logs = Self::default();
                tracing::subscriber::set_global_default(Collector(logs.clone()))
                    .expect("no other global collector in this test binary");
                logs
            })
            .clone()
    }

    /// The events at `level` whose message contains `text`.
    #[must_use]
    pub fn matching(&self, level: Level, text: &str) -> Vec<Logged> {
        self.all()
            .into_iter()
            .filter(|logged| logged.level == level && logged.message.contains(text))
            .collect()
    }

    /// Every event so far.
    #[must_use]
    pub fn all(&self) -> Vec<Logged> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits up to `within` for a warning or error whose fields mention every one of
    /// `words`.
    pub async fn warned(&self, words: &[&str], within: Duration) -> bool {
        let found = || {
            self.all().iter().any(|logged| {
                logged.level <= Level::WARN && words.iter().all(|word| logged.line.contains(word))
            })
        };
        let deadline = tokio::time::Instant::now() + within;
        while !found() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(ms(10)).await;
        }
        true
    }
}

struct Collector(Logs);

/// An event's fields: its message alone, and every field on one line.
#[derive(Default)]
struct Fields {
    message: String,
    line: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
        // Writing to a String cannot fail.
        write!(self.line, "{}={value:?} ", field.name()).ok();
    }
}

impl Subscriber for Collector {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let logged = Logged {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message: fields.message,
            line: fields.line,
        };
        (self.0)
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(logged);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
