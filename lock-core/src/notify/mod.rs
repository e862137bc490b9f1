//! Release notifications: one subscription per channel per client, shared by its waiters.
//!
//! [`Subscriptions`] is the reference-counted registry a backend keeps: the first
//! [`Listener`] of a channel subscribes, the last one to go unsubscribes. Subscribe and
//! unsubscribe requests are sent to the transport in the order the registry changed, by one
//! background task, so a late unsubscribe can never cancel a newer subscription.
//!
//! A message wakes one local listener ([`Wake::One`], a mutex release: only one waiter can
//! win) or all of them ([`Wake::All`]). When the transport reconnects, every channel is
//! subscribed again and every listener is woken, so that waiters re-poll at once instead of
//! sleeping through a release whose message was lost with the old connection.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::Error;

mod reader;
mod report;
mod subscriptions;

pub use reader::ReaderTask;
pub(crate) use subscriptions::WakeHandle;
pub use subscriptions::{Handed, Listener, Subscriptions, WeakSubscriptions};

/// How long a channel stays subscribed after its last listener left, in the registries
/// of stores that never count subscribers as waiters (see [`Subscriptions::lingering`]):
/// a client whose waiters come back to a contended name within it subscribes once, not
/// once per wait, and its waiters make their first attempt listening (one request per
/// wait instead of two). Long beside a contended lock's cycle, short beside a client's
/// life: a second of a subscription nobody uses costs a store nothing, as no release
/// sends to a waiter that left.
pub const LINGER: Duration = Duration::from_secs(1);

/// How many local listeners a notification wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// One listener: the lock can be taken by one waiter only.
    One,
    /// Every listener: several waiters may proceed, or everybody must re-check.
    All,
}

/// The transport side of notifications: how a backend (un)subscribes a channel.
#[async_trait]
pub trait PubSub: fmt::Debug + Send + Sync + 'static {
    /// Subscribes `channel`; returns once the server confirmed it.
    async fn subscribe(&self, channel: &str) -> Result<(), Error>;
    /// Unsubscribes `channel`.
    async fn unsubscribe(&self, channel: &str) -> Result<(), Error>;
}

/// A transport with nothing to subscribe: notifications are delivered in process.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess;

#[async_trait]
impl PubSub for InProcess {
    async fn subscribe(&self, _channel: &str) -> Result<(), Error> {
        Ok(())
    }
    async fn unsubscribe(&self, _channel: &str) -> Result<(), Error> {
        Ok(())
    }
}
