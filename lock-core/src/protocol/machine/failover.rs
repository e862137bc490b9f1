//! A failover on the machine: the replica takes over with the state it last caught up
//! with, and grants nothing for the quarantine (third review, R4).

use super::{Defect, Name};

impl<I, O, A> Name<I, O, A>
where
    I: Copy + Ord,
    O: Clone + PartialEq,
    A: Clone,
{
    /// The replica takes over with what it had; nothing is granted for the longest lease
    /// a lost hold may have had.
    pub(super) fn fail_over(&mut self) {
        let (fair, longest_lease, quarantine) = (self.fair, self.longest_lease, self.quarantine);
        let (offer, others) = (self.offer, self.others);
        let fresh = || {
            Self::new(fair, longest_lease)
                .quarantining_for(quarantine)
                .offering_for(offer)
        };
        let replica = self.replica.take().map_or_else(fresh, |r| *r);
        let quarantine = if self.planted(Defect::R4QuarantineOfKnownLeases) {
            replica.longest_granted
        } else {
            self.quarantine
        };
        let (now, token, defect, retention) = (self.now, self.token, self.defect, self.retention);
        *self = replica;
        self.now = now;
        self.defect = defect;
        self.retention = retention;
        // Who listens is no write: the promoted store counts its listeners anew.
        self.others = others;
        // Tokens never go backwards: a store seeds them from a clock; the machine keeps
        // the highest it issued.
        self.token = self.token.max(token);
        self.quarantine_until = now.saturating_add(quarantine);
    }
}
