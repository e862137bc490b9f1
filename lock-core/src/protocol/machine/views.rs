//! What a store reads of a name's machine: its clock, its holder and waiters, its
//! records, and whether it holds anything at all.

use super::{Holder, Name, Reader, Record};

impl<I, O, A> Name<I, O, A>
where
    I: Copy + Ord,
    O: Clone + PartialEq,
    A: Clone,
{
    /// The time now.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The longest lease a hold may have.
    #[must_use]
    pub fn longest_lease(&self) -> u64 {
        self.longest_lease
    }

    /// The fencing token issued last.
    #[must_use]
    pub fn last_token(&self) -> u64 {
        self.token
    }

    /// Whether the store has a record of acquisition `id` (granted, handed or ended).
    #[must_use]
    pub fn knows(&self, id: I) -> bool {
        self.records.contains_key(&id)
    }

    /// Whether acquisition `id` was handed the lock and has not taken it up.
    #[must_use]
    pub fn handed_to(&self, id: I) -> bool {
        matches!(self.records.get(&id), Some((Record::Handed(_), _)))
    }

    /// The holder, if the lock is held.
    #[must_use]
    pub fn holder(&self) -> Option<Holder<'_, I, O>> {
        self.hold.as_ref().map(|hold| Holder {
            owner: &hold.owner,
            grants: &hold.grants,
            origin: hold.origin,
            expires: hold.expires,
            since: hold.since,
            token: hold.token,
            handed: hold.handed,
        })
    }

    /// A read-write lock's read holds, one per owner, in the order begun.
    pub fn readers(&self) -> impl Iterator<Item = Reader<'_, I, O>> {
        self.readers.iter().map(|reading| Reader {
            owner: &reading.owner,
            holds: reading.grants.len(),
            origin: reading.origin,
            expires: reading
                .grants
                .iter()
                .map(|(_, expires)| *expires)
                .max()
                .unwrap_or(0),
            token: reading.token,
        })
    }

    /// Whether grant `id` lives: in the writer's hold, or in a reader's.
    #[must_use]
    pub fn grant_lives(&self, id: I) -> bool {
        self.hold.as_ref().is_some_and(|h| h.grants.contains(&id))
            || self
                .readers
                .iter()
                .any(|r| r.grants.iter().any(|(grant, _)| *grant == id))
    }

    /// Until when anyone holds the lock (the writer's lease, or its last reader's), if
    /// anyone does.
    #[must_use]
    pub fn held_until(&self) -> Option<u64> {
        let writer = self.hold.as_ref().map(|hold| hold.expires);
        let readers = self.readers().map(|reader| reader.expires).max();
        writer.max(readers)
    }

    /// Whether anyone holds the lock, writer or reader.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.hold.is_some() || !self.readers.is_empty()
    }

    /// The first waiter that keeps its place, and until when it keeps it.
    #[must_use]
    pub fn first_waiter(&self) -> Option<(&O, u64)> {
        self.waiters
            .iter()
            .find(|w| w.keeps_until > self.now)
            .map(|w| (&w.owner, w.keeps_until))
    }

    /// The first waiter that keeps its place: its owner and what it asked with (whom a
    /// store wakes when the lock comes free and nobody was handed it).
    #[must_use]
    pub fn first_waiting(&self) -> Option<(&O, &A)> {
        self.waiters
            .iter()
            .find(|w| w.keeps_until > self.now)
            .map(|w| (&w.owner, &w.ask))
    }

    /// How many waiters keep their places.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waiters
            .iter()
            .filter(|w| w.keeps_until > self.now)
            .count()
    }

    /// How many clients of other libraries the store last counted waiting.
    #[must_use]
    pub fn others(&self) -> u32 {
        self.others
    }

    /// Until when the mutex is offered to the clients of other libraries, if it is now.
    #[must_use]
    pub fn offered_until(&self) -> Option<u64> {
        (self.offered_until > self.now).then_some(self.offered_until)
    }

    /// When a failover's quarantine ends (0: there was none).
    #[must_use]
    pub fn quarantined_until(&self) -> u64 {
        self.quarantine_until
    }

    /// Whether the name holds nothing a store must keep: no hold, no waiter, no record,
    /// no quarantine and no replica (only its last token).
    #[must_use]
    pub fn at_rest(&self) -> bool {
        !self.is_held()
            && self.records.is_empty()
            && self.waiting() == 0
            && self.quarantine_until <= self.now
            && self.offered_until <= self.now
            && self.replica.is_none()
    }
}
