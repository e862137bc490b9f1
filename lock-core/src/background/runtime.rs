//! The runtime a client's parts were made in, and whether it still runs.
//!
//! A client may be built in one tokio runtime and used in another, after the first shut
//! down (a test's runtime, a `block_on` at start-up). Tasks spawned in the first died
//! with it: a connection's driver, a reader. Whoever owns such a task keeps a
//! [`RuntimeWatch`] beside it and makes the task again, on the caller's runtime, once
//! the watch says its runtime is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

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
