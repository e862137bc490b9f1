//! What a store supplies to [`SessionLocks`](super::SessionLocks): the statements on one
//! of its sessions ([`LockSession`]) and how keys are made and sessions opened
//! ([`SessionServer`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Capabilities, LockRef};
use crate::{Error, LockName};

/// What a lock statement found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Taken {
    /// Granted, with the fencing token when one was asked for.
    Granted(Option<u64>),
    /// Someone else's session holds it (a try), or the wait ran out.
    Busy,
}

/// One dedicated server session and the lock statements sent on it. Every statement is
/// bounded by the store's response timeout; a statement that fails in a way the session
/// cannot be trusted after (a broken connection, no answer) breaks the session, and
/// [`LockSession::is_broken`] says so from then on.
#[async_trait]
pub trait LockSession: fmt::Debug + Send + Sync + 'static {
    /// The server's name for a lock.
    type Key: fmt::Debug + Send + Sync + 'static;

    /// Whether the session is gone, with every lock it held.
    fn is_broken(&self) -> bool;

    /// Takes `key`'s lock (`shared` for a reader) if it is free, and issues the fencing
    /// token when `fencing` names the lock's name.
    async fn try_lock(
        &self,
        key: &Self::Key,
        shared: bool,
        fencing: Option<&str>,
    ) -> Result<Taken, Error>;

    /// Waits inside the server for `key`'s lock for at most `wait`, then issues the
    /// fencing token when `fencing` names the lock's name. A lock granted whose token
    /// could not be issued is given back (or the session broken) before the error.
    async fn lock(
        &self,
        key: &Self::Key,
        shared: bool,
        fencing: Option<&str>,
        wait: Duration,
    ) -> Result<Taken, Error>;

    /// Issues the next fencing token of the lock named `name`.
    async fn token(&self, name: &str) -> Result<u64, Error>;

    /// Gives back one hold of `key`'s lock (`shared`: the reader's). A server that says
    /// this session did not hold it breaks the session: only a lost session could.
    async fn unlock(&self, key: &Self::Key, shared: bool) -> Result<(), Error>;

    /// Whether any other session holds `key`'s lock, `shared` or exclusive.
    async fn held_elsewhere(&self, key: &Self::Key, shared: bool) -> Result<bool, Error>;

    /// Ends every other session that holds `key`'s lock, `shared` or exclusive, and waits
    /// until the server freed it; answers whether there was one.
    async fn end_holders(&self, key: &Self::Key, shared: bool) -> Result<bool, Error>;

    /// Checks that the session is alive (and still itself).
    async fn ping(&self) -> Result<(), Error>;
}

/// A server whose session locks a [`SessionLocks`](super::SessionLocks) serves: how names become keys, and
/// how a session is opened.
#[async_trait]
pub trait SessionServer: fmt::Debug + Send + Sync + 'static {
    /// The sessions this server opens.
    type Session: LockSession;

    /// What the backend can do: [`Capabilities::new`] with
    /// [`HoldModel::Session`](crate::backend::HoldModel::Session), and what the server's
    /// locks add.
    const CAPABILITIES: Capabilities;

    /// The server's key of the lock named `name`.
    fn key(&self, name: &LockName) -> <Self::Session as LockSession>::Key;

    /// Which carrier session takes `key`'s locks: any number, the same for one key.
    fn slot(&self, key: &<Self::Session as LockSession>::Key) -> u64;

    /// Refuses a lock the server cannot keep (a name or owner it cannot store), with a
    /// typed invalid-argument error.
    fn check(&self, lock: &LockRef) -> Result<(), Error>;

    /// Opens a new session.
    async fn open(&self) -> Result<Arc<Self::Session>, Error>;
}
