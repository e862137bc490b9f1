//! The Redis lock protocol shared by the Redis adapters: Lua scripts, key layout (the
//! same as Redisson's, so that Java peers share our locks), reply decoding and renewal
//! batching. An adapter implements [`Transport`] and wraps it in a [`RedisBackend`].

mod backend;
pub mod layout;
pub mod script;
pub mod settings;
pub mod slot;
mod transport;
pub mod url;

pub use backend::{ProtocolOptions, PublishMode, RedisBackend};
pub use script::Script;
pub use settings::ConnectorSettings;
pub use transport::{
    NotificationSink, Refused, Reply, ServerError, Topology, Transport, TransportError,
};
