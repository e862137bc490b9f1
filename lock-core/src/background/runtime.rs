//! The runtime a client's parts were made in, and whether it still runs.
//!
//! A client may be built in one tokio runtime and used in another, after the first shut
//! down (a test's runtime, a `block_on` at start-up). Tasks spawned in the first died
//! with it: a connection's driver, a reader. Whoever owns such a task keeps a
//! [`RuntimeWatch`] beside it and makes the task again, on the caller's runtime, once
//! the watch says its runtime is gone. [`BackgroundJobs`] does both for one-shot work that
//! must finish before its owner shuts down.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::Error;

/// Watches one runtime: [`RuntimeWatch::is_running`] turns false once it shut down.
#[derive(Debug)]
pub struct RuntimeWatch {
    handle: Handle,
    alive: Arc<AtomicBool>,
    /// A task that never ends on its own: the runtime drops it when it shuts down, which
    /// clears `alive`. (Spawning on a runtime that shut down silently drops the task.)
    sentinel: JoinHandle<()>,
}

/// Clears a flag when dropped.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl RuntimeWatch {
    /// Watches the current runtime; `None` outside one.
    #[must_use]
    pub fn current() -> Option<Self> {
        let handle = Handle::try_current().ok()?;
        let alive = Arc::new(AtomicBool::new(true));
        let flag = ClearOnDrop(Arc::clone(&alive));
        let sentinel = handle.spawn(async move {
            let _flag = flag;
            std::future::pending::<()>().await;
        });
        Some(Self {
            handle,
            alive,
            sentinel,
        })
    }

    /// Whether the runtime still runs.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// The watched runtime's handle.
    #[must_use]
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for RuntimeWatch {
    fn drop(&mut self) {
        self.sentinel.abort();
    }
}

/// Runs and counts background jobs; [`BackgroundJobs::drained`] waits for them.
///
/// A client keeps one for its releases; a backend that starts work of its own in the
/// background (a composite lock giving a late grant back) keeps one too, and waits for it
/// in [`Backend::settle`](crate::backend::Backend::settle), which
/// [`Locks::shutdown`](crate::Locks::shutdown) awaits.
#[derive(Debug)]
pub struct BackgroundJobs {
    /// The runtime the owner was built in.
    home: Option<RuntimeWatch>,
    count: Arc<Count>,
}

#[derive(Debug, Default)]
struct Count {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one running job; dropped when the job ends, however it ends.
pub(crate) struct JobTicket(Arc<Count>);

impl Drop for JobTicket {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Default for BackgroundJobs {
    fn default() -> Self {
        Self::new()
    }
}

impl BackgroundJobs {
    /// Jobs whose home is the current runtime, if any.
    #[must_use]
    pub fn new() -> Self {
        Self {
            home: RuntimeWatch::current(),
            count: Arc::default(),
        }
    }

    /// The runtime work goes to now.
    pub(crate) fn runtime(&self) -> Result<Handle, Error> {
        if let Ok(current) = Handle::try_current() {
            return Ok(current);
        }
        match &self.home {
            Some(home) if home.is_running() => Ok(home.handle().clone()),
            _ => Err(Error::NoRuntime),
        }
    }

    /// Starts a job that [`BackgroundJobs::drained`] waits for.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoRuntime`](crate::ErrorKind::NoRuntime) when called outside a
    /// runtime after the owner's home runtime shut down; the job is dropped.
    pub fn spawn<F>(&self, job: F) -> Result<JoinHandle<F::Output>, Error>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Ok(spawn_counted(&self.runtime()?, self.ticket(), job))
    }

    /// Counts one job as running until the ticket is dropped.
    pub(crate) fn ticket(&self) -> JobTicket {
        self.count.running.fetch_add(1, Ordering::AcqRel);
        JobTicket(Arc::clone(&self.count))
    }

    /// How many jobs are running.
    #[must_use]
    pub fn running(&self) -> usize {
        self.count.running.load(Ordering::Acquire)
    }

    /// Waits until no job is running, including jobs started while waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only waits, and the jobs go on.
    pub async fn drained(&self) {
        loop {
            let idle = self.count.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read: an end in between is not missed.
            idle.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Runs `work` to its end even when its caller goes away: the caller polls it (no task
/// while the caller waits, so no hand-off between threads for each operation), and if
/// the returned future is dropped before `work` ended, the rest of `work` runs in a task
/// of the current runtime, its output dropped. Outside a runtime (one shutting down) the
/// rest is dropped, as the runtime would drop a task of its own.
///
/// A store's operation that takes something the caller's record must show (a session
/// lock taken on the server, then recorded) uses it so that no drop can come between the
/// two.
///
/// # Cancel safety
///
/// Cancel-safe by construction: dropping the future leaves `work` running.
pub fn to_the_end<F>(work: F) -> ToTheEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    ToTheEnd::going_on(work, Rest::OnTheCurrentRuntime)
}

/// The future [`to_the_end`] returns.
#[must_use = "futures do nothing unless polled"]
pub struct ToTheEnd<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    /// The work and where its rest goes; `None` once it ended.
    work: Option<(Pin<Box<F>>, Rest)>,
}

/// Where the rest of a [`ToTheEnd`] goes when its caller goes away.
pub(crate) enum Rest {
    /// A task of the current runtime, if there is one.
    OnTheCurrentRuntime,
    /// A job of `jobs` (a client's supervisor's), counted among them from the start.
    Counted(JobTicket, Arc<BackgroundJobs>),
}

impl<F: Future + Send + 'static> ToTheEnd<F>
where
    F::Output: Send + 'static,
{
    pub(crate) fn going_on(work: F, rest: Rest) -> Self {
        Self {
            work: Some((Box::pin(work), rest)),
        }
    }
}

impl<F: Future + Send + 'static> std::fmt::Debug for ToTheEnd<F>
where
    F::Output: Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToTheEnd")
            .field("finished", &self.work.is_none())
            .finish_non_exhaustive()
    }
}

impl<F: Future + Send + 'static> Future for ToTheEnd<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let Some((work, _)) = this.work.as_mut() else {
            // Polled again after it ended: like a fused future, it has nothing more.
            return Poll::Pending;
        };
        let output = std::task::ready!(work.as_mut().poll(cx));
        this.work = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for ToTheEnd<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some((work, rest)) = self.work.take() else {
            return;
        };
        match rest {
            Rest::OnTheCurrentRuntime => {
                if let Ok(runtime) = Handle::try_current() {
                    drop(runtime.spawn(work));
                }
            }
            Rest::Counted(ticket, jobs) => match jobs.runtime() {
                Ok(runtime) => drop(spawn_counted(&runtime, ticket, work)),
                Err(err) => crate::events::job_dropped(&err),
            },
        }
    }
}

/// Runs `job` on `runtime`, counted as running until it ends.
pub(crate) fn spawn_counted<F>(runtime: &Handle, ticket: JobTicket, job: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime.spawn(async move {
        let _ticket = ticket;
        job.await
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::to_the_end;

    #[tokio::test(start_paused = true)]
    async fn work_polled_to_its_end_gives_its_output() {
        let output = to_the_end(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            7
        })
        .await;
        assert_eq!(output, 7);
    }

    // Would fail if dropping the future dropped the work with it: the second half would
    // never run.
    #[tokio::test(start_paused = true)]
    async fn work_whose_caller_goes_away_still_ends() {
        let ended = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ended);
        let work = to_the_end(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            flag.store(true, Ordering::SeqCst);
        });
        let gave_up = tokio::time::timeout(Duration::from_millis(1), work).await;
        assert!(gave_up.is_err(), "the caller gave up before the end");
        assert!(!ended.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(ended.load(Ordering::SeqCst), "the rest ran in a task");
    }
}
