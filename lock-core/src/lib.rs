//! Backend-agnostic distributed locks for async Rust.
//!
//! `lock-core` holds everything that does not depend on where locks are stored:
//!
//! - the [`Backend`] trait: the atomic operations a lock store provides, and the
//!   capabilities it declares;
//! - the state machines shared by every backend: waiting for a release by notification
//!   ([`notify`]), lease renewal (the watchdog) and the guard lifecycle;
//! - the public lock API: [`Locks`], [`Lock`], [`Guard`], [`Holder`]; and the other
//!   synchronizers: [`Semaphore`], [`ExpirableSemaphore`] (permits with ids and leases,
//!   renewed by the same watchdog), [`CountDownLatch`];
//! - the in-memory backend ([`memory::MemoryBackend`]), also the worked example for
//!   anyone writing a backend.
//!
//! Backends live in their own crates and implement [`Backend`] only. Most users depend
//! on the facade crate instead, which re-exports this API and picks backends by feature
//! flag. This crate follows the facade's version and is not a stable API of its own:
//! depend on the facade unless you write a backend.
//!
//! # Guarantees
//!
//! - A lock is never released by someone who does not hold it: releases name the owner
//!   (`"<client-uuid>:<holder>"`) and the backend refuses any other.
//! - A guard's [`Guard::is_held`] turns false, and [`Guard::lost`] resolves, no later
//!   than the backend could expire the lock: the local deadline counts from when the last
//!   successful request was *sent*, minus a drift margin.
//! - Dropping a guard, or a pending acquire future, never leaves a hold behind for longer
//!   than its lease; with a runtime, the release is sent at once.
//!
//! # One identity per grant
//!
//! Every path that takes or gives back a hold follows five rules; a reviewer can check
//! each path against them.
//!
//! 1. A grant is named by the id of the acquire request that made it ([`RequestId`]).
//!    The request sent again after a lost reply carries the same id and gets the same
//!    grant, never a second one.
//! 2. The store keeps each hold (a name, an owner, and the kind as the store counts it:
//!    a mutex and a fair lock of one owner are one hold) as the set of its live grants
//!    and its origin, the grant that began it. A grant is alive while it is in its
//!    hold's set and the hold has not expired (a read grant: while its own lease runs).
//! 3. A release names one grant and ends it only while it is alive; otherwise it changes
//!    nothing. The undo of a grant whose answer never arrived is the same release.
//! 4. The client never infers from counts which grants it owns. Each guard holds one
//!    grant and releases it, lost or not; guards share a local hold only while the store
//!    reports the same origin for their grants (a different origin: the earlier hold
//!    ended in the store, and its guards are lost).
//! 5. A request sent again within its retry window gets its first answer. A late copy
//!    of an acquire request whose grant already ended grants nothing while the store
//!    remembers the end (twice the retry window, in the memory backend).
//!
//! Composite locks keep the rules part by part: every part holds a composite grant under
//! the composite request's id, a part kept from an earlier attempt is taken again under
//! the new id (and its earlier grant ended), and a part that lost its hold is given each
//! live grant back under that grant's id.

mod acquire;
pub mod backend;
mod client;
mod config;
mod error;
mod events;
mod expirable;
mod guard;
mod handle;
mod hold;
mod holder;
mod latch;
mod lease;
pub mod memory;
pub mod metrics;
mod name;
mod named;
pub mod notify;
mod retry;
pub mod runtime;
mod semaphore;
mod supervisor;
mod turns;
mod watchdog;

pub use backend::{
    AcquireRequest, Backend, Capabilities, HoldModel, LockKind, LockRef, Owner, ReleaseRequest,
    RequestId, Waiting,
};
pub use backend::{
    ExpirableSemaphoreBackend, Issue, IssueRequest, LatchBackend, LatchRequest, PermitAnswer,
    PermitId, PermitRequest, PermitReservation, ReturnRequest, SemaphoreBackend,
};
pub use client::{Locks, LocksBuilder};
pub use config::{Config, MAX_DURATION};
pub use error::{BoxError, Cause, Chain, Error, ErrorKind, LostReason};
pub use expirable::{
    ExpirableSemaphore, LeasedPermits, MAX_PERMITS_PER_ACQUISITION, PermitAcquisition,
};
pub use guard::Guard;
pub use handle::{Acquisition, Lock, RwLock};
pub use holder::Holder;
pub use latch::CountDownLatch;
pub use name::{LockName, MAX_NAME_LEN};
pub use semaphore::{Permits, Semaphore};
