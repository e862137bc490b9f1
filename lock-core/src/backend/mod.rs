//! The contract between the lock state machines and a storage backend.
//!
//! A backend executes single, atomic lock operations (acquire, release, renew, inspect,
//! force-release) and delivers release notifications. Everything that spans time (waiting,
//! renewal, guards, reentrancy bookkeeping) lives in lock-core and is the same for every
//! backend. The trait is object-safe so that composite locks can mix backends.

mod capabilities;
mod expirable;
mod identity;
mod introspect;
mod latch;
mod lock;
pub mod machine;
mod semaphore;
pub mod session;
mod unsupported;

pub use capabilities::{Capabilities, HoldModel};
pub use expirable::{ExpirableSemaphoreBackend, Issue, IssueRequest, PermitId, ReturnRequest};
pub use identity::{LockKind, LockRef, Owner, RequestId};
pub(crate) use identity::{SOLE_PREFIX, concat};
pub use introspect::{ClientInfo, HeldAs, HolderInfo, Introspect, LockInfo, client_id_of};
pub use latch::{LatchBackend, LatchRequest};
pub use lock::{
    Acquire, AcquireRequest, Backend, DEFAULT_PLACE_KEPT_FOR, DEFAULT_RETRY_WINDOW, LockState,
    Release, ReleaseRequest, Renewal, Waiting,
};
pub use semaphore::{PermitAnswer, PermitRequest, PermitReservation, SemaphoreBackend};
pub use unsupported::Unsupported;
