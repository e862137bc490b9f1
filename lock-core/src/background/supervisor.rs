//! The supervisor: where a client's background work runs, and how it is drained.
//!
//! A client starts two kinds of background work. *Services* run for as long as there is
//! something to do (the watchdog); they are restarted when found dead, for example after
//! the runtime they ran on shut down while the client lived on in another one. *Jobs* are
//! one-shot requests that must finish even when nobody awaits them (the release of a
//! dropped guard, the undo of a grant nobody learnt of, the cancellation of an abandoned
//! wait, an attempt whose caller went away); [`Supervisor::drain`] waits for all of them.
//!
//! Work runs on the runtime of the caller when there is one: that runtime is being driven
//! right now, while the one the client was built in may be idle (a current-thread runtime
//! outside `block_on`) or gone. Without a current runtime (a guard dropped on a plain
//! thread) it runs on the runtime the client was built in, as long as that one lives.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::JoinHandle;

use crate::Error;
use crate::background::runtime::{BackgroundJobs, Rest, ToTheEnd};

/// Owns where and how a client's background work runs.
#[derive(Debug)]
pub(crate) struct Supervisor {
    jobs: Arc<BackgroundJobs>,
    closed: AtomicBool,
}

impl Supervisor {
    /// A supervisor whose home is the current runtime, if any.
    pub(crate) fn new() -> Self {
        Self {
            jobs: Arc::new(BackgroundJobs::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Starts a long-running service. The caller keeps the handle to notice its end.
    pub(crate) fn spawn_service<F>(&self, service: F) -> Result<JoinHandle<()>, Error>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Ok(self.jobs.runtime()?.spawn(service))
    }

    /// Starts a job that [`Supervisor::drain`] waits for.
    pub(crate) fn spawn_job<F>(&self, job: F) -> Result<JoinHandle<F::Output>, Error>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.jobs.spawn(job)
    }

    /// A job its caller polls while it awaits the outcome: no task is spawned unless the
    /// caller goes away first, and then what is left of the job goes on in a job of its
    /// own. [`Supervisor::drain`] waits for it from now on, wherever it runs.
    pub(crate) fn awaited_job<F>(self: &Arc<Self>, job: F) -> AwaitedJob<F>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let rest = Rest::Counted(self.jobs.ticket(), Arc::clone(&self.jobs));
        ToTheEnd::going_on(job, rest)
    }

    /// Refuses new acquisitions from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether [`Supervisor::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// How many jobs are running.
    pub(crate) fn running_jobs(&self) -> usize {
        self.jobs.running()
    }

    /// Waits until no job is running, including jobs started while waiting.
    pub(crate) async fn drain(&self) {
        self.jobs.drained().await;
    }
}

/// A job its caller polls (see [`Supervisor::awaited_job`]).
pub(crate) type AwaitedJob<F> = ToTheEnd<F>;
