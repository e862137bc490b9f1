//! Backend-agnostic distributed locks for async Rust.
//!
//! `lock-core` holds everything that does not depend on a Redis driver:
//!
//! - the [`Backend`] trait: the atomic operations a lock store provides;
//! - the state machines shared by every backend: waiting for a release through pub/sub
//!   ([`notify`]), lease renewal (the watchdog) and the guard lifecycle;
//! - the public lock API: [`Locks`], [`Mutex`], [`Guard`], [`Holder`];
//! - the in-memory backend ([`memory::MemoryBackend`]);
//! - the Redis protocol ([`redis`]): Lua scripts and Redisson's key layout, shared by the
//!   `lock-redis` and `lock-fred` adapters, which only move bytes.
//!
//! Most users depend on the `lock` facade crate instead, which re-exports this API and
//! picks a backend by feature flag.
//!
//! # Guarantees
//!
//! - A lock is never released by someone who does not hold it: releases name the owner
//!   (`"<client-uuid>:<holder>"`) and the server refuses any other.
//! - A guard's [`Guard::is_held`] turns false, and [`Guard::lost`] resolves, no later
//!   than the server could expire the lock: the local deadline counts from when the last
//!   successful request was *sent*, minus a drift margin.
//! - Dropping a guard, or a pending acquire future, never leaves a hold behind for longer
//!   than its lease; with a runtime, the release is sent at once.

mod acquire;
pub mod backend;
mod client;
mod config;
mod error;
mod events;
mod guard;
mod handle;
mod hold;
mod holder;
pub mod memory;
pub mod metrics;
mod name;
pub mod notify;
pub mod redis;
mod retry;
mod supervisor;
mod watchdog;

pub use backend::{AcquireRequest, Backend, LockKind, LockRef, Owner, ReleaseRequest, RequestId};
pub use client::{Locks, LocksBuilder};
pub use config::{Config, MAX_DURATION};
pub use error::{BoxError, Chain, Error, ErrorKind, LostReason};
pub use guard::Guard;
pub use handle::{Lock, Mutex, RwLock};
pub use holder::Holder;
pub use name::{LockName, MAX_NAME_LEN};
