//! The waiter's side of the registry: a [`Listener`] (one waiter's share of a channel's
//! subscription), the [`Handed`] news a hand-over's message brings, and the handles that
//! deliver or wake without keeping the registry alive.

use std::fmt;
use std::sync::{Arc, PoisonError};

use tokio::time::Instant;

use super::{Command, Entry, Shared, Subscriptions};
use crate::backend::RequestId;
use crate::notify::Wake;

/// A hand-over announced to a waiter: a release made the waiting acquisition
/// `acquisition` the holder, with a hold that lasts the waiter's place
/// ([`Waiting::place_kept_for`]) from the time the release ran, which came after the
/// store ran the acquisition's attempt number `after_attempt`
/// ([`Waiting::attempt`]). The waiter may hold the lock from then on, for a place's time
/// counted from when it sent that attempt, while it takes the hold up with its next
/// attempt.
///
/// [`Waiting::place_kept_for`]: crate::backend::Waiting::place_kept_for
/// [`Waiting::attempt`]: crate::backend::Waiting::attempt
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handed {
    /// The acquisition (the id its attempts carry).
    pub acquisition: RequestId,
    /// The attempt of the acquisition the store ran last before the hand-over.
    pub after_attempt: u32,
    /// The hold's fencing token, when the acquisition asked for one.
    pub token: Option<u64>,
}

impl Handed {
    /// What comes before a hand-over in a message that may carry other news on the same
    /// channel.
    pub const PREFIX: &'static str = "handed:";

    /// A hand-over to `acquisition`, made after its attempt `after_attempt`.
    #[must_use]
    pub fn new(acquisition: RequestId, after_attempt: u32, token: Option<u64>) -> Self {
        Self {
            acquisition,
            after_attempt,
            token,
        }
    }

    /// A hand-over as stores tell it in a message, `<request id>:<token>:<attempt>`
    /// (the id as 32 hex digits, a token of 0 for none: no acquisition that asked for a
    /// token gets 0), and what follows it after a `:` (empty when nothing does). `None`
    /// for anything else. Every store that hands over writes this one form.
    #[must_use]
    pub fn from_message(text: &str) -> Option<(Self, &str)> {
        let (request, rest) = text.split_once(':')?;
        let (token, rest) = rest.split_once(':')?;
        let (attempt, after) = rest.split_once(':').unwrap_or((rest, ""));
        let request = RequestId::from_hex(request)?;
        let token: u64 = token.parse().ok()?;
        let attempt: u32 = attempt.parse().ok()?;
        Some((
            Self::new(request, attempt, (token != 0).then_some(token)),
            after,
        ))
    }
}

/// A [`Subscriptions`] handle that does not keep the registry alive.
#[derive(Clone)]
pub struct WeakSubscriptions(pub(super) std::sync::Weak<Shared>);

impl fmt::Debug for WeakSubscriptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakSubscriptions")
            .field("alive", &(self.0.strong_count() > 0))
            .finish()
    }
}

impl WeakSubscriptions {
    /// Whether `channel` currently has listeners.
    #[must_use]
    pub fn is_listened(&self, channel: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|shared| shared.channels().contains_key(channel))
    }

    /// Delivers a hand-over on `channel` (see [`Subscriptions::deliver_handed`]); false
    /// once the registry is gone.
    #[must_use = "a false return means nobody will ever listen again"]
    pub fn deliver_handed(&self, channel: &str, handed: Handed, wake: Wake) -> bool {
        match self.0.upgrade() {
            Some(shared) => {
                Subscriptions { shared }.deliver_handed(channel, handed, wake);
                true
            }
            None => false,
        }
    }

    /// Delivers a message on `channel`; false once the registry is gone.
    #[must_use = "a false return means nobody will ever listen again"]
    pub fn deliver(&self, channel: &str, wake: Wake) -> bool {
        match self.0.upgrade() {
            Some(shared) => {
                Subscriptions { shared }.deliver(channel, wake);
                true
            }
            None => false,
        }
    }
}

/// One waiter's share of a channel subscription. Dropping it releases the share; the last
/// one to go unsubscribes the channel (at once, or when its linger ends: see
/// [`Subscriptions::lingering`]).
pub struct Listener {
    pub(super) entry: Arc<Entry>,
    pub(super) shared: Arc<Shared>,
    /// The acquisition waiting on this listener, and its bell (see
    /// [`Listener::expect_hand_over`]).
    pub(super) expecting: Option<(RequestId, Arc<tokio::sync::Notify>)>,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("channel", &self.entry.channel)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// A future that completes at the next notification for this channel.
    ///
    /// To not miss a notification that arrives while the lock is re-tried, create and
    /// [`enable`](tokio::sync::futures::Notified::enable) it *before* the retry.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.entry.notify.notified()
    }

    /// The channel listened to.
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.entry.channel
    }

    /// The hand-over announced on this channel to `acquisition`, if one came and no
    /// waiter took it yet.
    #[must_use]
    pub fn take_handed(&self, acquisition: RequestId) -> Option<Handed> {
        let mut handed = self
            .entry
            .handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if handed.is_some_and(|h| h.acquisition == acquisition) {
            return handed.take();
        }
        None
    }

    /// The waiting acquisition `acquisition` listens here from now on (in place of the
    /// one before, when a line of waiters passes the listener on): a hand-over to it
    /// rings its own bell ([`Listener::handed_here`]), and wakes no other listener.
    pub fn expect_hand_over(&mut self, acquisition: RequestId) {
        if self
            .expecting
            .as_ref()
            .is_some_and(|(expected, _)| *expected == acquisition)
        {
            return;
        }
        self.unexpect();
        let bell = Arc::new(tokio::sync::Notify::new());
        self.entry
            .expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((acquisition, Arc::clone(&bell)));
        self.expecting = Some((acquisition, bell));
    }

    /// Resolves when a hand-over to the acquisition this listener expects is delivered
    /// (also one delivered since it began to expect it, before this was called); never
    /// when it expects none.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a hand-over delivered while it is not polled rings the bell for the
    /// next call.
    pub async fn handed_here(&self) {
        match &self.expecting {
            Some((_, bell)) => bell.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Stops expecting any acquisition.
    fn unexpect(&mut self) {
        if let Some((_, bell)) = self.expecting.take() {
            self.entry
                .expected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(_, other)| !Arc::ptr_eq(other, &bell));
        }
    }

    /// Wakes every listener of this channel in this client that is currently waiting.
    pub fn wake_all(&self) {
        self.entry.notify.notify_waiters();
    }

    /// A handle that wakes this channel's waiting listeners, without keeping the
    /// subscription.
    pub(crate) fn wake_handle(&self) -> WakeHandle {
        WakeHandle(Arc::downgrade(&self.entry))
    }
}

/// Wakes the listeners of one channel that are waiting, while the channel is listened to.
#[derive(Debug, Clone)]
pub(crate) struct WakeHandle(std::sync::Weak<Entry>);

impl WakeHandle {
    /// Wakes every listener of the channel that is currently waiting (none stores the
    /// wake-up for later).
    pub(crate) fn wake_all(&self) {
        if let Some(entry) = self.0.upgrade() {
            entry.notify.notify_waiters();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.unexpect();
        let mut channels = self.shared.channels();
        let Some(known) = channels.get_mut(&*self.entry.channel) else {
            return;
        };
        if !Arc::ptr_eq(&known.entry, &self.entry) {
            return;
        }
        known.listeners -= 1;
        if known.listeners > 0 {
            return;
        }
        let channel = Arc::clone(&self.entry.channel);
        let command = if self.shared.linger.is_zero() {
            channels.remove(&channel);
            Command::Unsubscribe(channel)
        } else {
            let now = Instant::now();
            known.idle_since = Some(now);
            Command::Idle(channel, now)
        };
        // Sent while the map is locked, so commands reach the worker in map order. It
        // cannot fail while the registry lives (see `reconnected`).
        let _ = self.shared.commands.send(command);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_over_is_read_as_stores_tell_it() {
        let id = "0123456789abcdef0123456789abcdef";
        let request = RequestId::from_hex(id).expect("hex");
        let followed = format!("{id}:17:3:the-lock-channel");
        assert_eq!(
            Handed::from_message(&followed),
            Some((Handed::new(request, 3, Some(17)), "the-lock-channel"))
        );
        let alone = format!("{id}:0:12");
        assert_eq!(
            Handed::from_message(&alone),
            Some((Handed::new(request, 12, None), ""))
        );
        for malformed in ["", "xyz:1:2", &format!("{id}:one:2"), &format!("{id}:1")] {
            assert_eq!(Handed::from_message(malformed), None, "{malformed:?}");
        }
    }
}
