//! Who holds a lock: the unit of reentrancy.
//!
//! A lock is owned by `"<client-uuid>:<holder>"`. Acquisitions by the same holder through
//! the same client re-enter; any other holder is excluded. The holder of an operation is,
//! in order: one given explicitly ([`crate::Mutex::with_holder`]); else the holder of the
//! innermost [`Holder::scope`]; else the current tokio task; else the current thread.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

tokio::task_local! {
    static AMBIENT: Holder;
}

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_HOLDER: Holder = Holder(Arc::from(format!(
        "thread-{}",
        NEXT_THREAD.fetch_add(1, Ordering::Relaxed)
    )));
}

/// The identity that may re-enter a lock. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder(Arc<str>);

impl Holder {
    /// A holder with an explicit id, for re-entering across tasks on purpose.
    ///
    /// The id must be non-empty and contain no whitespace and no `:`. The owner string
    /// is `"<client-uuid>:<holder>"`, and a writer's field is `"<owner>:write"`: a holder
    /// `a:write` would be read as the writer of holder `a`.
    pub fn new(id: &str) -> Result<Self, Error> {
        if id.is_empty() || id.chars().any(|c| c.is_whitespace() || c == ':') {
            return Err(Error::invalid_argument(
                "holder",
                "a holder id must be non-empty and contain no whitespace and no `:`",
            ));
        }
        Ok(Self(Arc::from(id)))
    }

    /// A holder never handed out before in this process.
    #[must_use]
    pub fn unique() -> Self {
        Self(Arc::from(format!(
            "scope-{}",
            NEXT_SCOPE.fetch_add(1, Ordering::Relaxed)
        )))
    }

    /// The holder in effect here: the innermost scope's, else the tokio task's, else the
    /// thread's.
    #[must_use]
    pub fn current() -> Self {
        if let Some(holder) = Self::ambient() {
            return holder;
        }
        if let Some(id) = tokio::task::try_id() {
            return Self(Arc::from(format!("task-{id}")));
        }
        THREAD_HOLDER.with(Clone::clone)
    }

    /// The holder of the innermost [`Holder::scope`] around this code, if any.
    #[must_use]
    pub fn ambient() -> Option<Self> {
        AMBIENT.try_with(Clone::clone).ok()
    }

    /// Runs `fut` as a fresh holder: locks taken inside re-enter each other, and exclude
    /// everything outside, including a concurrent scope in the same task
    /// (`tokio::join!(Holder::scope(a), Holder::scope(b))`).
    pub async fn scope<F: Future>(fut: F) -> F::Output {
        Self::unique().run(fut).await
    }

    /// Runs `fut` with this holder as the ambient holder.
    pub async fn run<F: Future>(self, fut: F) -> F::Output {
        AMBIENT.scope(self, fut).await
    }

    /// The id, as stored after the client UUID in the owner string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Holder({})", self.0)
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scopes_nest_and_differ() {
        // The test body runs in `block_on`, not in a task; a spawned task has its own id.
        let task = tokio::spawn(async { Holder::current() })
            .await
            .expect("task");
        assert!(task.as_str().starts_with("task-"), "{task}");
        let (a, b) = tokio::join!(
            Holder::scope(async { (Holder::current(), Holder::current()) }),
            Holder::scope(async { Holder::current() })
        );
        assert_eq!(a.0, a.1, "one scope is one holder");
        assert_ne!(a.0, b, "sibling scopes are different holders");
        assert_ne!(a.0, task);
        let outer = Holder::unique();
        let inner = outer.clone().run(async { Holder::current() }).await;
        assert_eq!(inner, outer);
    }

    #[test]
    fn outside_a_runtime_the_thread_is_the_holder() {
        let here = Holder::current();
        assert!(here.as_str().starts_with("thread-"));
        assert_eq!(here, Holder::current());
        let other = std::thread::spawn(Holder::current).join().ok();
        assert!(other.is_some_and(|o| o != here));
    }

    #[test]
    fn rejects_bad_ids() {
        assert!(Holder::new("").is_err());
        assert!(Holder::new("a b").is_err());
        let colon = Holder::new("a:write").expect_err("`:` would alias a writer's field");
        assert!(colon.is_invalid_input(), "{colon}");
        assert!(Holder::new("worker-1").is_ok());
    }
}
