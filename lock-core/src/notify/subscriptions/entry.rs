//! One channel's entry in the registry: the listeners' wake-ups, the subscription's
//! state with the server, and the hand-overs announced on the channel, each for the
//! waiter it names.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::Handed;
use crate::Error;
use crate::backend::RequestId;
use crate::notify::Wake;

/// Where a channel's subscription stands with the server.
#[derive(Debug, Clone)]
pub(super) enum SubState {
    Pending,
    Ready,
    Failed(Error),
}

/// One channel's share of the registry: its listeners' wake-ups, its subscription's
/// state, and the hand-overs announced on it.
pub(super) struct Entry {
    pub(super) channel: Arc<str>,
    pub(super) notify: Notify,
    /// Whether the server confirmed the subscription. A mutex and a `Notify` rather than
    /// a `watch` channel, which wakes its waiters in an order it picks at random:
    /// listeners confirmed together go on in the order they came, so that a simulated
    /// run replays exactly.
    pub(super) state: Mutex<SubState>,
    pub(super) settled: Notify,
    /// The latest hand-over announced on the channel, until its waiter takes it.
    pub(super) handed: Mutex<Option<Handed>>,
    /// The waiting acquisitions listening here, each with its own bell: a hand-over to
    /// one of them wakes that one (see `Listener::expect_hand_over`). A few at most, in
    /// the order they came.
    pub(super) expected: Mutex<Vec<(RequestId, Arc<Notify>)>>,
}

impl Entry {
    pub(super) fn new(channel: Arc<str>) -> Self {
        Self {
            channel,
            notify: Notify::new(),
            state: Mutex::new(SubState::Pending),
            settled: Notify::new(),
            handed: Mutex::new(None),
            expected: Mutex::new(Vec::new()),
        }
    }

    /// The bell of `acquisition`, when it waits listening here.
    pub(super) fn bell_of(&self, acquisition: RequestId) -> Option<Arc<Notify>> {
        self.expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(expected, _)| *expected == acquisition)
            .map(|(_, bell)| Arc::clone(bell))
    }

    /// Wakes one listener, or every one.
    pub(super) fn wake(&self, wake: Wake) {
        match wake {
            Wake::One => self.notify.notify_one(),
            Wake::All => self.notify.notify_waiters(),
        }
    }

    /// Records the subscription's outcome and wakes those waiting for it.
    pub(super) fn settle(&self, state: SubState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.settled.notify_waiters();
    }

    /// The subscription's state now.
    pub(super) fn state(&self) -> SubState {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The subscription's outcome, once it is known.
    pub(super) async fn settled(&self) -> SubState {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let state = self.state();
            if !matches!(state, SubState::Pending) {
                return state;
            }
            settled.await;
        }
    }
}
