//! Introspection: who holds a lock, since when, for how long still, and how many wait.
//!
//! An operator's questions at 3 a.m., answered from the store. A store that can answer
//! them offers [`Introspect`] through [`Backend::introspection`](super::Backend::introspection).
//! Each client describes itself ([`ClientInfo`]: a name, the host and the process) in the
//! store when it first acquires, so that a holder's owner string
//! (`<client-uuid>:<holder>`) leads to a process; a hold of a client that did not (a
//! peer that follows only the data layout) shows without one.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::{Error, LockName};

/// What a client says about itself, for introspection: a name (configurable with
/// [`LocksBuilder::client_name`](crate::LocksBuilder::client_name); by default the host
/// and the process id), the host and the process id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The client's name.
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
}

impl ClientInfo {
    /// This process's description, under `name` (`None`: `<host>:<pid>`).
    #[must_use]
    pub fn of_this_process(name: Option<&str>) -> Self {
        let host = host_name();
        let pid = std::process::id();
        let name = name.map_or_else(|| format!("{host}:{pid}"), str::to_owned);
        Self { name, host, pid }
    }

    /// Builds a description.
    #[must_use]
    pub fn new(name: impl Into<String>, host: impl Into<String>, pid: u32) -> Self {
        Self {
            name: name.into(),
            host: host.into(),
            pid,
        }
    }
}

/// The machine's host name, as the kernel knows it; `unknown` where it cannot be read.
fn host_name() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    read("/proc/sys/kernel/hostname")
        .or_else(|| read("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// How a name is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldAs {
    /// Nobody holds it.
    Free,
    /// A mutex or a fair lock: one owner, reentrant.
    Exclusive,
    /// The read side of a read-write lock: any number of owners.
    Read,
    /// The write side of a read-write lock.
    Write,
}

impl HeldAs {
    /// A short, stable label: `free`, `exclusive`, `read`, `write`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::Exclusive => "exclusive",
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// One owner's hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The owner as stored: `<client-uuid>:<holder>` (a Java peer's: `<uuid>:<thread id>`).
    pub owner: String,
    /// How many holds (reentries) it has.
    pub holds: u32,
    /// Its client's description, when the client gave one (this library's clients do).
    pub client: Option<ClientInfo>,
    /// When the hold began, where the store recorded it.
    pub since: Option<SystemTime>,
    /// Its own lease left, for a read hold (each has one); `None` for others, whose lease
    /// is the lock's.
    pub lease_left: Option<Duration>,
}

impl HolderInfo {
    /// A holder with `holds` holds and nothing else known.
    #[must_use]
    pub fn new(owner: impl Into<String>, holds: u32) -> Self {
        Self {
            owner: owner.into(),
            holds,
            client: None,
            since: None,
            lease_left: None,
        }
    }

    /// The client id in the owner string (before its last `:`).
    #[must_use]
    pub fn client_id(&self) -> &str {
        client_id_of(&self.owner)
    }
}

/// The client id of an owner string `<client-uuid>:<holder>`.
#[must_use]
pub fn client_id_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(client, _)| client)
}

/// What a lock name holds now, as the store says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// How it is held.
    pub held_as: HeldAs,
    /// Its holders (one unless read-held).
    pub holders: Vec<HolderInfo>,
    /// The lock's lease left (the longest of a read lock's), when held.
    pub lease_left: Option<Duration>,
    /// How many wait, as far as the store knows them: the queue of a fair lock, and
    /// where the store keeps them, the waiting clients of a mutex.
    pub waiting: usize,
    /// The last fencing token issued for the name, when fencing tokens were used.
    pub fencing_token: Option<u64>,
}

impl LockInfo {
    /// A free lock named `name`.
    #[must_use]
    pub fn free(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            held_as: HeldAs::Free,
            holders: Vec::new(),
            lease_left: None,
            waiting: 0,
            fencing_token: None,
        }
    }
}

/// A store that can say who holds its locks.
#[async_trait]
pub trait Introspect: Send + Sync {
    /// For a layer that takes this family over (see [Layers](super::Backend#layers)):
    /// the wrapped backend's, which answers every operation the layer does not override.
    /// A store that implements the family overrides every operation and keeps the
    /// default, whose operations answer [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn below(&self) -> &dyn Introspect {
        &super::Unsupported
    }

    /// What `name` holds now.
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        self.below().describe(name).await
    }

    /// The names of held locks that start with `prefix`, at most `limit`, in no
    /// particular order. Walks the store in steps; never blocks it.
    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        self.below().held_names(prefix, limit).await
    }

    /// Records `client`'s description under `client_id` for `ttl`, for
    /// [`Introspect::describe`] to show with its holds.
    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        self.below().announce(client_id, client, ttl).await
    }
}
