//! Who holds a lock: the unit of reentrancy.
//!
//! A lock is owned by `"<client-uuid>:<holder>"`. Acquisitions by the same holder through
//! the same client re-enter; any other holder is excluded. The holder of an operation is,
//! in order: one given explicitly ([`crate::Lock::with_holder`]); else the holder of the
//! innermost [`Holder::scope`]; else a holder of its own, never used before.
//!
//! So reentrancy is opt-in, as with `tokio::sync::Mutex` by default. Java locks re-enter
//! per thread, but tasks interleave on threads and one task runs many futures at once
//! (`join!`), so neither a thread nor a task can stand for "the same caller"; a task's id
//! may moreover be given to a new task once it ended, while a guard it took lives on.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;
use crate::backend::{Owner, SOLE_PREFIX, concat};

tokio::task_local! {
    static AMBIENT: Holder;
}

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// How the id of a holder made by [`Holder::unique`] starts; its number follows.
const UNIQUE_PREFIX: &str = "scope-";

/// The number of the next unique holder.
fn next_unique() -> u64 {
    NEXT_SCOPE.fetch_add(1, Ordering::Relaxed)
}

/// The owner of a holder of its own, never used before, on the client `client_id`:
/// [`Holder::current`] outside any scope, without making the holder itself (every
/// unscoped operation asks for one).
pub(crate) fn unique_owner(client_id: &str) -> Owner {
    let mut digits = itoa::Buffer::new();
    Owner::from_pieces(&[client_id, ":", UNIQUE_PREFIX, digits.format(next_unique())])
}

/// The identity that may re-enter a lock. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder(Arc<str>);

impl Holder {
    /// A holder with an explicit id, for re-entering across tasks on purpose.
    ///
    /// The id must be non-empty, contain no whitespace and no `:`, and not start with
    /// `once-`. The owner string is `"<client-uuid>:<holder>"`, and a writer's field is
    /// `"<owner>:write"`: a holder `a:write` would be read as the writer of holder `a`;
    /// a holder `once-...` as the owner of one request alone
    /// ([`Owner::of_request`](crate::Owner::of_request)), which never re-enters.
    pub fn new(id: &str) -> Result<Self, Error> {
        if id.is_empty() || id.chars().any(|c| c.is_whitespace() || c == ':') {
            return Err(Error::invalid_argument(
                "holder",
                "a holder id must be non-empty and contain no whitespace and no `:`",
            ));
        }
        if id.starts_with(SOLE_PREFIX) {
            return Err(Error::invalid_argument(
                "holder",
                format!(
                    "a holder id must not start with `{SOLE_PREFIX}`: the library names the \
                     owners of single requests so"
                ),
            ));
        }
        Ok(Self(Arc::from(id)))
    }

    /// A holder never handed out before in this process.
    #[must_use]
    pub fn unique() -> Self {
        let mut digits = itoa::Buffer::new();
        Self(Arc::from(concat(&[
            UNIQUE_PREFIX,
            digits.format(next_unique()),
        ])))
    }

    /// The holder in effect here: the innermost scope's, else a new one (outside a
    /// scope every operation is its own holder: it re-enters nothing and holds nothing).
    #[must_use]
    pub fn current() -> Self {
        Self::ambient().unwrap_or_else(Self::unique)
    }

    /// The holder of the innermost [`Holder::scope`] around this code, if any.
    #[must_use]
    pub fn ambient() -> Option<Self> {
        AMBIENT.try_with(Clone::clone).ok()
    }

    /// Runs `fut` as a fresh holder: locks taken inside re-enter each other, and exclude
    /// everything outside, including a concurrent scope in the same task
    /// (`tokio::join!(Holder::scope(a), Holder::scope(b))`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe exactly when `fut` is: dropping it drops `fut`.
    pub async fn scope<F: Future>(fut: F) -> F::Output {
        Self::unique().run(fut).await
    }

    /// Runs `fut` with this holder as the ambient holder.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe exactly when `fut` is: dropping it drops `fut`.
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
        let (a, b) = tokio::join!(
            Holder::scope(async { (Holder::current(), Holder::current()) }),
            Holder::scope(async { Holder::current() })
        );
        assert_eq!(a.0, a.1, "one scope is one holder");
        assert_ne!(a.0, b, "sibling scopes are different holders");
        let outer = Holder::unique();
        let inner = outer.clone().run(async { Holder::current() }).await;
        assert_eq!(inner, outer);
    }

    /// Outside a scope no two operations share a holder: not two in one task, nor a
    /// task that reuses an ended task's id (code review, high 2).
    #[tokio::test]
    async fn outside_a_scope_every_operation_is_its_own_holder() {
        assert_ne!(Holder::current(), Holder::current());
        let (a, b) = tokio::join!(async { Holder::current() }, async { Holder::current() });
        assert_ne!(a, b);
        let spawned = tokio::spawn(async { Holder::current() })
            .await
            .expect("task");
        assert_ne!(spawned, a);
    }

    #[test]
    fn rejects_bad_ids() {
        assert!(Holder::new("").is_err_and(|err| err.is_invalid_input()));
        assert!(Holder::new("a b").is_err_and(|err| err.is_invalid_input()));
        let colon = Holder::new("a:write").expect_err("`:` would alias a writer's field");
        assert!(colon.is_invalid_input(), "{colon}");
        assert!(Holder::new("worker-1").is_ok());
    }
}
