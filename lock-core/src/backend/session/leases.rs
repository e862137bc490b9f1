//! The leases this client keeps for its session locks: one task per backend gives back
//! the server locks whose leases ran out unrenewed, whenever the earliest one does.

use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::held::Held;
use super::{SessionServer, Slot, State};
use crate::LockName;

/// How long the task that ends leases waits when no lease is left before it looks
/// again.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Ends the leases that ran out, whenever the earliest one does, until the backend goes.
///
/// With no lease left, it looks again after [`IDLE_LOOK`]: a lease set meanwhile wakes
/// it only if it ends sooner. Told to wait for the next lease instead, it was woken by
/// every grant after a release, and looked through every name, for each uncontended
/// lock and unlock.
pub(super) async fn end_leases<S: SessionServer>(state: Weak<State<S>>, changed: Arc<Notify>) {
    loop {
        let notified = changed.notified();
        let until = {
            let Some(state) = state.upgrade() else { return };
            // While it looks, every lease set rings it again. Judged against the time
            // of this look, a lease set on a name it had passed (or not yet seen) ended
            // only at the look after, up to IDLE_LOOK late.
            *state.next_look() = None;
            let looked = state
                .end_leases()
                .await
                .unwrap_or_else(|| Instant::now() + IDLE_LOOK);
            let mut next = state.next_look();
            let until = next.map_or(looked, |set| set.min(looked));
            *next = Some(until);
            until
        };
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            () = notified => {}
        }
    }
}

impl<S: SessionServer> State<S> {
    /// When the task that ends leases looks next.
    fn next_look(&self) -> MutexGuard<'_, Option<Instant>> {
        self.next_look
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A lease ending at `until` was set: the task that ends leases looks again if it
    /// would look later (most leases end after the earliest one it waits for, and cost
    /// it nothing).
    pub(super) fn lease_set(&self, until: Instant) {
        let mut next = self.next_look();
        if next.is_none_or(|next| until < next) {
            *next = Some(until);
            self.leases_changed.notify_one();
        }
    }

    /// Ends every lease that ran out and answers when the next one does.
    async fn end_leases(&self) -> Option<Instant> {
        let slots: Vec<(LockName, Slot<S::Session>)> = self
            .names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, slot)| (name.clone(), Arc::clone(slot)))
            .collect();
        let mut next: Option<Instant> = None;
        for (name, slot) in slots {
            let end = {
                let mut record = slot.lock().await;
                self.settle(&name, &mut record).await;
                record.as_ref().and_then(Held::next_end)
            };
            self.forget_if_unused(&name, &slot);
            next = match (next, end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        next
    }
}
