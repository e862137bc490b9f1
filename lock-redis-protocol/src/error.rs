//! The Redis protocol's own failures, carried as the typed source of a lock-core
//! [`Error`](lock_core::Error): callers who need the details downcast
//! [`source()`](std::error::Error::source) to these.

/// A key holds another kind of object than the operation expects: another Redis type
/// (a string where Redisson keeps a hash, say), or a semaphore's count where a latch's is
/// asked for. Source of an [`ErrorKind::Incompatible`](lock_core::ErrorKind) error; the
/// key was left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key `{key}`: {found}")]
#[non_exhaustive]
pub struct WrongType {
    /// The offending key.
    pub key: String,
    /// What the server said it holds ("the lock key holds a hash", "orders holds a
    /// semaphore, not a latch", or Redis's own words for another type).
    pub found: String,
}

/// Replica acknowledgement was required, and fewer replicas than asked confirmed the
/// write in time (`WAIT`). Source of an [`ErrorKind::Backend`](lock_core::ErrorKind)
/// error; an acquisition that was not confirmed was released again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{acknowledged} of {wanted} replicas confirmed the write in time")]
pub struct NotReplicated {
    /// How many replicas were required.
    pub wanted: u32,
    /// How many confirmed.
    pub acknowledged: u32,
}
