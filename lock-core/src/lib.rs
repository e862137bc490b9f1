//! Backend-agnostic distributed locks for async Rust.
//!
//! `lock-core` holds everything that does not depend on where locks are stored:
//!
//! - the [`Backend`] trait: the atomic operations a lock store provides, and the
//!   capabilities it declares;
//! - the state machines shared by every backend: the grant rules ([`protocol`]), one
//!   wait engine for every synchronizer (`wait/`: try, listen, re-arm, deadlines,
//!   requests in flight and their undo), release notifications ([`notify`]), lease
//!   renewal (the watchdog) and the guard lifecycle;
//! - the public lock API: [`Locks`], [`Lock`], [`Guard`], [`Holder`]; and the other
//!   synchronizers: [`Semaphore`], [`ExpirableSemaphore`] (permits with ids and leases,
//!   renewed by the same watchdog), [`CountDownLatch`];
//! - the in-memory backend ([`memory::MemoryBackend`]), also the worked example for
//!   anyone writing a backend.
//!
//! The source tree follows that split: `backend/` (the contract), `memory/`,
//! `background/` (the supervisor that runs a client's background work, the watch on its
//! runtime, the watchdog), `client/` (the state a client shares, and [`Locks`]),
//! `wait/` (the wait engine), `locks/` and `sync/` (the semaphores and the latch, each a
//! driver of the wait engine, as the lock is). Its modules form layers, none using one
//! above it:
//!
//! 1. the contract and its plain types: `backend`, `notify`, `name`, `error`, `config`;
//! 2. what a client keeps and runs: lease clocks, holds, waiting lines, leased permits,
//!    the supervisor and the watchdog (lent what it needs of its client at each call,
//!    never holding the client that owns it), and the wait engine;
//! 3. the client's shared state (`client::shared`);
//! 4. what works through it: acquisitions, guards, the lock handles, the semaphores and
//!    the latch;
//! 5. [`Locks`], which makes the handles.
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

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

pub mod backend;
mod background;
mod client;
mod config;
mod connect;
mod error;
mod events;
#[cfg(feature = "faults")]
pub mod faults;
mod locks;
pub mod memory;
pub mod metrics;
mod name;
pub mod notify;
pub mod protocol;
mod retry;
mod sync;
pub mod throttle;
#[cfg(feature = "tls")]
pub mod tls;
mod wait;

pub use backend::{
    AcquireRequest, Backend, Capabilities, HoldModel, LockKind, LockRef, Owner, ReleaseRequest,
    RequestId, Waiting,
};
pub use backend::{ClientInfo, HeldAs, HolderInfo, Introspect, LockInfo};
pub use backend::{
    ExpirableSemaphoreBackend, Issue, IssueRequest, LatchBackend, LatchRequest, PermitAnswer,
    PermitId, PermitRequest, PermitReservation, ReturnRequest, SemaphoreBackend,
};
pub use background::runtime;

/// The `tracing` target of every event of the workspace's crates, so that one directive
/// (`distlock=debug`) covers them all.
pub const TRACING_TARGET: &str = "distlock";
pub use client::{Locks, LocksBuilder};
pub use config::{Config, MAX_DURATION, MAX_RETRY_WINDOW};
pub use connect::{Connect, check_pool_settings};
pub use error::{BoxError, Cause, Chain, Error, ErrorKind, LostReason};
pub use locks::guard::Guard;
pub use locks::handle::{Acquisition, Lock, RwLock};
pub use locks::holder::Holder;
pub use name::{LockName, MAX_NAME_LEN};
pub use retry::Pauses;
pub use sync::expirable::{ExpirableSemaphore, MAX_PERMITS_PER_ACQUISITION, PermitAcquisition};
pub use sync::latch::CountDownLatch;
pub use sync::leased_permits::LeasedPermits;
pub use sync::semaphore::{Permits, Semaphore};
