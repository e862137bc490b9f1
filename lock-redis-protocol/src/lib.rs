//! The Redis lock protocol of distlock, shared by its Redis adapters
//! (`lock-redis` over the `redis` crate, `lock-fred` over `fred`).
//!
//! Everything about locks on Redis that does not depend on a driver lives here once:
//!
//! - the Lua scripts ([`script`]), also as one Redis Functions library
//!   ([`script::library`]), and Redisson's key layout ([`layout`]), so that a Java
//!   service using Redisson and a Rust service share locks on one Redis;
//! - [`RedisBackend`]: lock-core's [`Backend`](lock_core::Backend) over any
//!   [`Transport`], with reply decoding, renewal batching per cluster slot, the restart
//!   quarantine, replica acknowledgement, and the form of the calls ([`ServerCode`]:
//!   functions, loaded where missing, or scripts, reloaded on `NOSCRIPT`);
//! - what every adapter's connector shares: the URL forms ([`url`]), the settings
//!   ([`ConnectorSettings`]), the check that a single-server URL is not a cluster node
//!   and the classification of connect errors ([`connect`]).
//!
//! An adapter implements [`Transport`] (send a call, load the library, subscribe a
//! channel) and nothing else. This crate follows the facade's version and is not a stable API of its own:
//! depend on it only to write a Redis adapter.

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

mod backend;
pub mod calls;
pub mod connect;
mod decimals;
mod error;
mod events;
pub mod layout;
pub mod script;
pub mod settings;
pub mod slot;
mod transport;
pub mod url;

pub use backend::{ProtocolOptions, PublishMode, RedisBackend, ServerCode};
pub use error::{NotReplicated, WrongType};
pub use script::Script;
pub use settings::ConnectorSettings;
pub use transport::{
    NotificationSink, Refused, ReplicaWait, Reply, ServerError, Topology, Transport, TransportError,
};
