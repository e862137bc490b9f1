//! [`ReaderTask`]: an adapter's notification reader, started again on a live runtime
//! when the runtime it ran on shut down.

use std::fmt;
use std::future::Future;
use std::sync::{Mutex, PoisonError};

use tokio::task::JoinHandle;

use super::report;
use crate::Error;

/// How a [`ReaderTask`] starts again: a future that opens a new connection and reads it.
type Revive = Box<dyn Fn() -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

/// A transport's notification reader: the task that reads its subscription connection
/// into a [`Subscriptions`](super::Subscriptions) registry.
///
/// The task runs on the runtime it was started in and dies with it, while the client may
/// live on in another runtime. [`ReaderTask::ensure_running`], called before each wait,
/// finds it dead and starts `revive` on the caller's runtime, as the registry's own
/// worker is started again. The backend owns the `ReaderTask`, never the registry: the
/// reader feeds the registry, which must not keep its reader alive in return.
pub struct ReaderTask {
    task: Mutex<JoinHandle<()>>,
    revive: Revive,
}

impl fmt::Debug for ReaderTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running = !self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_finished();
        f.debug_struct("ReaderTask")
            .field("running", &running)
            .finish_non_exhaustive()
    }
}

impl ReaderTask {
    /// Runs `first` on the current runtime; `revive` makes the reader that replaces it
    /// once it died with its runtime (it must open a new connection, and tell the
    /// registry when it is up: [`Subscriptions::reconnected`](super::Subscriptions::reconnected)).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as [`tokio::spawn`].
    pub fn spawn<F, R, G>(first: F, revive: R) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
        R: Fn() -> G + Send + Sync + 'static,
        G: Future<Output = ()> + Send + 'static,
    {
        Self {
            task: Mutex::new(tokio::spawn(first)),
            revive: Box::new(move || Box::pin(revive())),
        }
    }

    /// Starts the reader again on the current runtime if its task has ended, and says
    /// whether it did. A reader ends of its own accord only once its backend is gone,
    /// so an ended task means its runtime shut down.
    ///
    /// # Errors
    ///
    /// [`Error::NoRuntime`] outside a tokio runtime, when the reader needs starting.
    pub fn ensure_running(&self) -> Result<bool, Error> {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if !task.is_finished() {
            return Ok(false);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        report::notification_reader_restarted();
        *task = runtime.spawn((self.revive)());
        Ok(true)
    }
}
