//! The state of one lock name and its transition function (see the module docs of
//! [`crate::protocol`] for the rules).

use std::collections::BTreeMap;

use super::events::{Defect, Event, HandOver, Holder, Reader, Reply, Side, Step};

/// The owner's hold of the lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Hold<I, O> {
    owner: O,
    /// Its live grants, in the order granted.
    grants: Vec<I>,
    /// The grant that began it.
    origin: I,
    token: u64,
    expires: u64,
    since: u64,
    /// Handed to its origin and not taken up yet.
    handed: bool,
}

/// An owner's read hold of a read-write lock: each of its grants has a lease of its own
/// (a reader's hold ends grant by grant, as the older protocol's read locks do).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Reading<I, O> {
    owner: O,
    /// Its live grants, in the order granted, each with when its lease ends.
    grants: Vec<(I, u64)>,
    /// The grant that began it.
    origin: I,
    token: u64,
}

/// A waiting acquisition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Waiter<I, O, A> {
    id: I,
    owner: O,
    lease: u64,
    place: u64,
    keeps_until: u64,
    ask: A,
}

/// What the store knows of an acquisition id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Record<I> {
    /// Granted, with this answer; its grant lives while its hold lists it.
    Granted(Reply<I>),
    /// Handed the lock on a release, with this answer; not taken up yet.
    Handed(Reply<I>),
    /// Over: granted nothing more.
    Ended,
}

/// The state of one lock name: an exclusive lock, fair (waiters are served in
/// arrival order) or not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name<I = u32, O = u32, A = ()> {
    now: u64,
    fair: bool,
    /// The longest lease a hold may have.
    longest_lease: u64,
    /// How long a failover's quarantine lasts (the longest lease, unless a store
    /// bounds no lease and says otherwise).
    quarantine: u64,
    /// How long a record outlives its last change, if the store forgets.
    retention: Option<u64>,
    /// When records are next looked through for those to forget (see [`Name::expire`]).
    next_forget: LookAt,
    hold: Option<Hold<I, O>>,
    /// A read-write lock's read holds, one per owner, in the order begun. Beside a
    /// hold only its owner's (a writer may read).
    readers: Vec<Reading<I, O>>,
    waiters: Vec<Waiter<I, O, A>>,
    /// What the store knows of each acquisition id, and since when (0 unless it forgets).
    records: BTreeMap<I, (Record<I>, u64)>,
    token: u64,
    /// The longest lease granted so far (what the defect R4 trusted).
    longest_granted: u64,
    quarantine_until: u64,
    /// How many clients of other libraries wait for the mutex (they never register).
    others: u32,
    /// How long a release offers the mutex to them.
    offer: u64,
    /// Until when the mutex is offered to them (0: it is not).
    offered_until: u64,
    /// The state as the replica last caught up with it.
    replica: Option<Box<Self>>,
    defect: Option<Defect>,
}

impl<I, O, A> Name<I, O, A>
where
    I: Copy + Ord,
    O: Clone + PartialEq,
    A: Clone,
{
    /// A free lock at time 0 whose leases are at most `longest_lease`, offered to the
    /// clients of other libraries for a tenth of that (see [`Name::offering_for`]).
    #[must_use]
    pub fn new(fair: bool, longest_lease: u64) -> Self {
        Self {
            now: 0,
            fair,
            longest_lease,
            quarantine: longest_lease,
            retention: None,
            next_forget: LookAt(0),
            hold: None,
            readers: Vec::new(),
            waiters: Vec::new(),
            records: BTreeMap::new(),
            token: 0,
            longest_granted: 0,
            quarantine_until: 0,
            others: 0,
            offer: (longest_lease / 10).max(1),
            offered_until: 0,
            replica: None,
            defect: None,
        }
    }

    /// The same machine offering a freed mutex to the clients of other libraries for
    /// `offer` (the servers' stores offer it for their reservation's lifetime, 100 ms by
    /// default).
    #[must_use]
    pub fn offering_for(mut self, offer: u64) -> Self {
        self.offer = offer.max(1);
        self
    }

    /// The same machine with `defect` planted back.
    #[must_use]
    pub fn with_defect(mut self, defect: Option<Defect>) -> Self {
        self.defect = defect;
        self
    }

    /// Plants `defect` back from now on (none: the rules as written).
    pub fn plant(&mut self, defect: Option<Defect>) {
        self.defect = defect;
    }

    /// The same machine at time `now`, whose tokens go on after `token`, and which
    /// grants nothing before `quarantine_until` (a store's failover quarantine, for a
    /// name the store first sees after it).
    #[must_use]
    pub fn starting(mut self, now: u64, token: u64, quarantine_until: u64) -> Self {
        self.now = now;
        self.token = token;
        self.quarantine_until = quarantine_until;
        self
    }

    /// The same machine with a failover quarantine of `quarantine` instead of the
    /// longest lease: for a store that bounds no lease, whose failovers are then safe
    /// only for leases within it.
    #[must_use]
    pub fn quarantining_for(mut self, quarantine: u64) -> Self {
        self.quarantine = quarantine;
        self
    }

    /// The same machine forgetting each id `retention` after its record last changed,
    /// once its grant is not alive (a store keeps an id twice the retry window; the
    /// checks keep every id, and no times, so that states that differ only by when are
    /// one state).
    #[must_use]
    pub fn forgetting_after(mut self, retention: u64) -> Self {
        self.forget_after(retention);
        self
    }

    /// From now on, forgets each id `retention` after its record last changed (see
    /// [`Name::forgetting_after`]).
    pub fn forget_after(&mut self, retention: u64) {
        self.retention = Some(retention);
    }

    fn planted(&self, defect: Defect) -> bool {
        self.defect == Some(defect)
    }

    /// Grants nothing before `until` (a store that found it took over from a replica
    /// that may have been behind: the holds of the writes it lost run out meanwhile).
    pub fn hold_back_until(&mut self, until: u64) {
        self.quarantine_until = self.quarantine_until.max(until);
    }

    /// Makes the next token greater than `token` (a composite lock's parts agree on
    /// one).
    pub fn raise_token(&mut self, token: u64) {
        self.token = self.token.max(token);
    }

    /// Applies `event` and answers it.
    pub fn step(&mut self, event: Event<I, O, A>) -> Step<I, O, A> {
        self.expire();
        let mut handed = None;
        let reply = match event {
            Event::Attempt {
                side: Side::Read,
                id,
                owner,
                lease,
                ..
            } => self.read(id, owner, lease),
            Event::Attempt {
                id,
                owner,
                lease,
                place,
                ask,
                ..
            } => self.attempt(id, owner, lease, place.map(|place| (place, ask))),
            Event::Release {
                side: Side::Read,
                id,
                owner,
                ..
            } => self.release_read(id, &owner, &mut handed),
            Event::Release {
                id, owner, lease, ..
            } => self.release(id, &owner, lease, &mut handed),
            Event::Cancel { id, owner } => self.cancel(id, &owner, &mut handed),
            Event::Renew {
                side: Side::Read,
                owner,
                lease,
            } => self.renew_reads(&owner, lease),
            Event::Renew { owner, lease, .. } => self.renew(&owner, lease),
            Event::Others(listening) => {
                self.others = listening;
                Reply::Done
            }
            // Waiters are woken to ask, not handed the lock: an operator's revocation
            // runs no hand-over.
            Event::ForceRelease(side) => Reply::Forced(self.force_release(side)),
            Event::Elapse(ms) => {
                self.now = self.now.saturating_add(ms);
                self.expire();
                Reply::Done
            }
            Event::Replicate => {
                let mut copy = self.clone();
                copy.replica = None;
                self.replica = Some(Box::new(copy));
                Reply::Done
            }
            Event::Failover => {
                self.fail_over();
                Reply::Done
            }
        };
        Step { reply, handed }
    }

    /// Records what became of `id`, now.
    fn record(&mut self, id: I, record: Record<I>) {
        let since = if self.retention.is_some() {
            self.now
        } else {
            0
        };
        self.records.insert(id, (record, since));
    }

    fn attempt(&mut self, id: I, owner: O, lease: u64, waits: Option<(u64, A)>) -> Reply<I> {
        if lease > self.longest_lease {
            return Reply::Refused;
        }
        let alive = |hold: &Option<Hold<I, O>>| {
            hold.as_ref()
                .is_some_and(|h| h.owner == owner && h.grants.contains(&id))
        };
        let record = self.records.get(&id).map(|(record, _)| *record);
        if record == Some(Record::Ended) {
            return Reply::Ended;
        }
        // Nothing is granted during a failover's quarantine, nor taken up, replayed or
        // re-entered: the hold found may be one whose release, or whose revocation, the
        // failover lost. A known acquisition asks again after it; a new one waits.
        if self.quarantine_until > self.now {
            return match record {
                Some(_) => Reply::Busy,
                None => self.wait(id, owner, lease, waits),
            };
        }
        match record {
            // An attempt that finds its acquisition's grant alive gets it back with its
            // lease re-armed (never shortened): a retry after a lost reply, the take-up
            // of a handed hold, or the next attempt of a waiter whose earlier attempt's
            // late copy was granted. Its client counts the lease from this attempt. The
            // answer is the first one, as for any request sent again.
            Some(Record::Granted(first) | Record::Handed(first)) if alive(&self.hold) => {
                let now = self.now;
                if let Some(hold) = self.hold.as_mut() {
                    hold.handed = false;
                    hold.expires = hold.expires.max(now.saturating_add(lease));
                }
                self.record(id, Record::Granted(first));
                return first;
            }
            // One whose grant ended gets nothing: the take-up only takes up.
            Some(Record::Granted(_) | Record::Ended) => return Reply::Ended,
            Some(Record::Handed(_)) if !self.planted(Defect::R1TakeUpGrantsAfresh) => {
                self.record(id, Record::Ended);
                return Reply::Ended;
            }
            Some(Record::Handed(_)) | None => {}
        }
        let now = self.now;
        if let Some(hold) = self.hold.as_mut() {
            if hold.owner != owner {
                // Someone took the offered lock: the offer is used up.
                self.offered_until = 0;
                return self.wait(id, owner, lease, waits);
            }
            // Reentry joins the owner's hold, never shortening its lease.
            hold.grants.push(id);
            hold.expires = hold.expires.max(now.saturating_add(lease));
            let reply = self.acquired();
            self.record(id, Record::Granted(reply));
            return reply;
        }
        // A reader that asks to write would wait for its own read holds to end. The
        // refusal ends the acquisition: a late copy of this attempt grants nothing.
        if self.readers.iter().any(|r| r.owner == owner) {
            self.waiters.retain(|w| w.id != id);
            self.record(id, Record::Ended);
            return Reply::WouldDeadlock;
        }
        if !self.readers.is_empty() && !self.planted(Defect::WriteBesideReaders) {
            return self.wait(id, owner, lease, waits);
        }
        if self.fair && self.head_other_than(&owner) {
            return self.wait(id, owner, lease, waits);
        }
        // While the lock is offered to the clients of other libraries, ours that would
        // register keep back; one that would not (a try) is one of those offered it.
        if self.offered_until > now && waits.is_some() {
            return self.wait(id, owner, lease, waits);
        }
        self.offered_until = 0;
        let fair = self.fair;
        self.waiters
            .retain(|w| w.id != id && !(fair && w.owner == owner));
        self.grant(id, owner, now.saturating_add(lease), false);
        self.acquired()
    }

    /// Whether a fair lock's first waiter that keeps its place is another owner's (a fair
    /// queue has one place per owner).
    fn head_other_than(&mut self, owner: &O) -> bool {
        let now = self.now;
        self.waiters.retain(|w| w.keeps_until > now);
        self.waiters.first().is_some_and(|w| w.owner != *owner)
    }

    /// Busy; a waiting acquisition keeps (or takes) its place.
    fn wait(&mut self, id: I, owner: O, lease: u64, waits: Option<(u64, A)>) -> Reply<I> {
        if let Some((place, ask)) = waits {
            let fair = self.fair;
            let waiter = Waiter {
                id,
                owner,
                lease,
                place,
                keeps_until: self.now.saturating_add(place),
                ask,
            };
            match self
                .waiters
                .iter_mut()
                .find(|w| w.id == id || (fair && w.owner == waiter.owner))
            {
                Some(registered) => *registered = waiter,
                None => self.waiters.push(waiter),
            }
        }
        Reply::Busy
    }

    /// Makes `id` of `owner` the holder until `expires`, with a fresh token.
    fn grant(&mut self, id: I, owner: O, expires: u64, handed: bool) -> u64 {
        self.token += 1;
        self.longest_granted = self.longest_granted.max(expires - self.now);
        let since = if self.retention.is_some() {
            self.now
        } else {
            0
        };
        self.hold = Some(Hold {
            owner,
            grants: vec![id],
            origin: id,
            token: self.token,
            expires,
            since,
            handed,
        });
        let reply = self.acquired();
        let record = if handed {
            Record::Handed(reply)
        } else {
            Record::Granted(reply)
        };
        self.record(id, record);
        self.token
    }

    fn acquired(&self) -> Reply<I> {
        self.hold
            .as_ref()
            .map_or(Reply::Busy, |hold| Reply::Acquired {
                holds: u32::try_from(hold.grants.len()).unwrap_or(u32::MAX),
                token: hold.token,
                origin: hold.origin,
            })
    }

    fn release(
        &mut self,
        id: I,
        owner: &O,
        lease: u64,
        handed: &mut Option<HandOver<I, O, A>>,
    ) -> Reply<I> {
        self.record(id, Record::Ended);
        let owners_hold = self.hold.as_ref().filter(|hold| hold.owner == *owner);
        let named = owners_hold.and_then(|hold| hold.grants.iter().position(|g| *g == id));
        let latest = owners_hold.map(|hold| hold.grants.len() - 1);
        // N2 counted the hold down whatever grant the release named; N3 did when it
        // named none alive.
        let at = match named {
            _ if self.planted(Defect::N2ReleaseCountsDown) => latest,
            None if self.planted(Defect::N3ReleaseEndsAnyGrant) => latest,
            named => named,
        };
        let (Some(at), Some(hold)) = (at, self.hold.as_mut()) else {
            return Reply::NotHeld;
        };
        hold.grants.remove(at);
        if let Some(left) = u32::try_from(hold.grants.len()).ok().filter(|n| *n > 0) {
            hold.expires = hold.expires.max(self.now.saturating_add(lease));
            return Reply::StillHeld(left);
        }
        self.hold = None;
        *handed = self.serve();
        Reply::Released
    }

    /// The acquisition gave up, so its client holds nothing of it: its place goes, a
    /// grant it got without learning of it (handed, or granted to a late copy of one of
    /// its attempts) ends, its own grant alone, and so does its id.
    fn cancel(&mut self, id: I, owner: &O, handed: &mut Option<HandOver<I, O, A>>) -> Reply<I> {
        self.waiters.retain(|w| w.id != id);
        let was_handed = self.handed_to(id);
        if was_handed || !self.planted(Defect::R2CancelLeavesNoEnd) {
            if let Some(hold) = self.hold.as_mut().filter(|h| h.owner == *owner) {
                hold.grants.retain(|g| *g != id);
                if hold.grants.is_empty() {
                    self.hold = None;
                }
            }
            for reading in self.readers.iter_mut().filter(|r| r.owner == *owner) {
                reading.grants.retain(|(grant, _)| *grant != id);
            }
            self.readers.retain(|reading| !reading.grants.is_empty());
            self.record(id, Record::Ended);
        }
        *handed = self.serve();
        Reply::Done
    }

    fn renew(&mut self, owner: &O, lease: u64) -> Reply<I> {
        if lease > self.longest_lease {
            return Reply::Refused;
        }
        match self.hold.as_mut() {
            Some(hold) if hold.owner == *owner => {
                hold.expires = hold.expires.max(self.now.saturating_add(lease));
                Reply::Renewed {
                    origin: hold.origin,
                }
            }
            _ => Reply::Gone,
        }
    }

    /// Hands the free lock to the first waiter that still keeps its place and waits (none
    /// during the quarantine, nobody while anyone holds), for its place or its lease,
    /// whichever is shorter.
    fn serve(&mut self) -> Option<HandOver<I, O, A>> {
        if self.hold.is_some() || !self.readers.is_empty() {
            return None;
        }
        let now = self.now;
        // A waiter the store knows anything of waits no more: it was granted (a
        // reentry into its owner's hold, a late copy), handed the lock, or it ended.
        let records = &self.records;
        self.waiters
            .retain(|w| w.keeps_until > now && !records.contains_key(&w.id));
        if self.quarantine_until > now || self.waiters.is_empty() {
            return None;
        }
        // Clients of other libraries wait too (they never register, so a hand-over to
        // ours would pass them over every time): the lock is offered to them instead,
        // until one takes it or the offer lapses; an offer made stands. With none left,
        // an offer ends.
        if !self.fair && !self.planted(Defect::NoOfferToOthers) {
            if self.others > 0 {
                if self.offered_until <= now {
                    self.offered_until = now.saturating_add(self.offer);
                }
                return None;
            }
            self.offered_until = 0;
        }
        let waiter = self.waiters.remove(0);
        let lasts = if self.planted(Defect::HandedHoldLastsThePlace) {
            waiter.place
        } else {
            waiter.place.min(waiter.lease)
        };
        let token = self.grant(
            waiter.id,
            waiter.owner.clone(),
            now.saturating_add(lasts),
            true,
        );
        Some(HandOver {
            id: waiter.id,
            owner: waiter.owner,
            token,
            ask: waiter.ask,
        })
    }
}

mod codec;
pub use codec::Field;
mod expiry;
use expiry::LookAt;
mod failover;
mod readers;
#[cfg(test)]
mod tests;
mod views;
