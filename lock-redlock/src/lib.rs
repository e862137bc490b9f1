//! MultiLock and RedLock over any lock backends.
//!
//! Both are [`Backend`](lock_core::Backend)s made of other backends, so a [`Locks`]
//! client over them has every lock kind, reentrancy, the watchdog, fencing tokens, guards
//! and cancel safety, exactly as over one node. They talk to their parts concurrently.
//!
//! - [`RedLock`]: one lock name on N independent nodes, held while a majority holds it.
//! - [`MultiLock`]: several locks (different names, possibly different backends) taken
//!   as one: all or nothing.
//!
//! # What RedLock guarantees, and what it does not
//!
//! RedLock keeps a lock through the loss of a minority of nodes: with 5 nodes, two may
//! crash or be unreachable. Its safety rests on timing assumptions that a single lease
//! lock shares but that RedLock makes harder to check:
//!
//! - **Clocks.** Each node expires the lock on its own clock. A node whose clock jumps
//!   forward expires it early; if that node was part of the majority, a second client can
//!   assemble a majority while the first still believes it holds the lock. Run nodes with
//!   a monotonic, slewed clock (no manual time steps).
//! - **Pauses.** A holder that pauses (GC, swapping, SIGSTOP) past its validity keeps
//!   running believing it holds the lock. This library makes the *guard* notice
//!   ([`Guard::is_held`](lock_core::Guard::is_held) turns false at the validity deadline,
//!   counted from when the request was sent), but code already past its check cannot be
//!   stopped: protect the resource with fencing tokens.
//! - **Restarts without persistence.** A node restarted with no data forgets the locks it
//!   held; if a majority of holders' nodes restart within a lease, two clients can both
//!   win. Run nodes with `appendonly yes` and `appendfsync always`, or keep a restarted
//!   node out of service for one maximum lease (Redis's "delayed restart").
//!
//! When a single Redis with replicas is available, prefer one lock with replica
//! acknowledgement plus fencing tokens: it is simpler, faster, and the fencing token,
//! not the lock, is what makes a late writer harmless.

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

mod error;
mod introspect;
mod lazy;
mod multi;
mod origin;
mod redlock;
mod relay;

pub use error::NodeErrors;
pub use lazy::LazyNode;
pub use multi::{MultiLock, MultiLockBuilder};
pub use redlock::{NodeRelease, RedLock, RedLockBuilder};

use lock_core::Locks;

/// A client over a RedLock of `nodes` with default settings.
pub fn redlock(
    nodes: Vec<std::sync::Arc<dyn lock_core::Backend>>,
) -> Result<Locks, lock_core::Error> {
    Ok(RedLock::builder(nodes).build()?.locks())
}
