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

pub mod backend;
mod error;
mod holder;
mod name;
pub mod notify;
pub mod redis;

pub use backend::{Backend, LockKind, LockRef, Owner};
pub use error::{BoxError, Error, ErrorKind, LostReason};
pub use holder::Holder;
pub use name::{LockName, MAX_NAME_LEN};
