//! The state of one lock name and its transition function (see the module docs of
//! [`crate::protocol`] for the rules).

use std::collections::BTreeMap;

/// Something that happens to a lock name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// An attempt of acquisition `id` of `owner` with `lease`; `place` is how long it
    /// keeps its place when it waits (`None`: a try, which never waits).
    Attempt {
        /// The acquisition.
        id: u32,
        /// Its owner (reentry is per owner).
        owner: u32,
        /// The lease it asks for (ms).
        lease: u64,
        /// How long it keeps its place between attempts when it waits (ms).
        place: Option<u64>,
    },
    /// The release of grant `id` by `owner`.
    Release {
        /// The grant (the id of the acquisition that got it).
        id: u32,
        /// Its owner.
        owner: u32,
    },
    /// Acquisition `id` of `owner` gives up waiting.
    Cancel {
        /// The acquisition.
        id: u32,
        /// Its owner.
        owner: u32,
    },
    /// `owner` renews its hold with `lease`.
    Renew {
        /// The owner.
        owner: u32,
        /// The lease to re-arm (ms).
        lease: u64,
    },
    /// An operator deletes the lock whoever holds it.
    ForceRelease,
    /// Time passes (ms).
    Elapse(u64),
    /// The store's replica catches up with every write so far.
    Replicate,
    /// The store fails over to its replica, losing every write since it last caught up.
    Failover,
}

/// What the store answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reply {
    /// The owner holds the lock: `holds` grants in its hold, begun by grant `origin`,
    /// whose fencing token is `token`.
    Acquired {
        /// Grants in the owner's hold.
        holds: u32,
        /// The hold's fencing token.
        token: u64,
        /// The grant that began the hold.
        origin: u32,
    },
    /// Someone else holds it (or the failover quarantine lasts): ask again later.
    Busy,
    /// The acquisition is over: nothing was granted, and nothing will be under its id.
    Ended,
    /// A lease longer than the store grants.
    Refused,
    /// The last grant was released.
    Released,
    /// One grant was released and this many remain.
    StillHeld(u32),
    /// The named grant is not alive: nothing changed.
    NotHeld,
    /// The hold's lease was re-armed.
    Renewed,
    /// The owner holds nothing to renew.
    Gone,
    /// Whether a force-release found the lock held.
    Forced(bool),
    /// The event needs no answer.
    Done,
}

/// What one event did: the reply, and the hand-over it made, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The reply to the event.
    pub reply: Reply,
    /// The acquisition the freed lock was handed to, and the hold's token.
    pub handed: Option<(u32, u64)>,
}

/// A defect of the past, planted back for the checks to catch (see
/// [`check`](super::check)): each is a rule above written as it once was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Defect {
    /// R1: a take-up that finds its handed hold gone is granted afresh.
    R1TakeUpGrantsAfresh,
    /// R2: a cancellation ends only an acquisition it had handed the lock to.
    R2CancelLeavesNoEnd,
    /// R4: the failover quarantine lasts the longest lease the replica knew of.
    R4QuarantineOfKnownLeases,
    /// Issue 48: a handed hold lasts the waiter's place, whatever its lease.
    HandedHoldLastsThePlace,
    /// N3 (second review): a release of a grant that is not alive ends the owner's
    /// latest grant instead.
    N3ReleaseEndsAnyGrant,
    /// N2 (second review), as it stands without adoption: a release counts the owner's
    /// hold down whatever grant it names, and a copy of it runs again (a release
    /// delayed or retried past its holder's next hold ends that hold).
    N2ReleaseCountsDown,
}

/// The owner's hold of the lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Hold {
    owner: u32,
    /// Its live grants, in the order granted.
    grants: Vec<u32>,
    /// The grant that began it.
    origin: u32,
    token: u64,
    expires: u64,
    /// Handed to its origin and not taken up yet.
    handed: bool,
}

/// A waiting acquisition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Waiter {
    id: u32,
    owner: u32,
    lease: u64,
    place: u64,
    keeps_until: u64,
}

/// What the store knows of an acquisition id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Record {
    /// Granted, with this answer; its grant lives while its hold lists it.
    Granted(Reply),
    /// Handed the lock on a release, with this answer; not taken up yet.
    Handed(Reply),
    /// Over: granted nothing more.
    Ended,
}

/// The state of one lock name: an exclusive lock, fair (waiters are served in
/// arrival order) or not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name {
    now: u64,
    fair: bool,
    /// The longest lease a hold may have, and a failover's quarantine.
    longest_lease: u64,
    hold: Option<Hold>,
    waiters: Vec<Waiter>,
    records: BTreeMap<u32, Record>,
    token: u64,
    /// The longest lease granted so far (what the defect R4 trusted).
    longest_granted: u64,
    quarantine_until: u64,
    /// The state as the replica last caught up with it.
    replica: Option<Box<Name>>,
    defect: Option<Defect>,
}

impl Name {
    /// A free lock at time 0 whose leases are at most `longest_lease` ms.
    #[must_use]
    pub fn new(fair: bool, longest_lease: u64) -> Self {
        Self {
            now: 0,
            fair,
            longest_lease,
            hold: None,
            waiters: Vec::new(),
            records: BTreeMap::new(),
            token: 0,
            longest_granted: 0,
            quarantine_until: 0,
            replica: None,
            defect: None,
        }
    }

    /// The same machine with `defect` planted back.
    #[must_use]
    pub fn with_defect(mut self, defect: Option<Defect>) -> Self {
        self.defect = defect;
        self
    }

    fn planted(&self, defect: Defect) -> bool {
        self.defect == Some(defect)
    }

    /// The time now (ms).
    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The fencing token issued last.
    #[must_use]
    pub fn last_token(&self) -> u64 {
        self.token
    }

    /// Whether the store has a record of acquisition `id` (granted, handed or ended).
    #[must_use]
    pub fn knows(&self, id: u32) -> bool {
        self.records.contains_key(&id)
    }

    /// The holder, its grants and its lease's end, if the lock is held.
    #[must_use]
    pub fn holder(&self) -> Option<(u32, &[u32], u64)> {
        self.hold
            .as_ref()
            .map(|hold| (hold.owner, hold.grants.as_slice(), hold.expires))
    }

    /// Applies `event` and answers it.
    pub fn step(&mut self, event: Event) -> Step {
        self.expire();
        let mut handed = None;
        let reply = match event {
            Event::Attempt {
                id,
                owner,
                lease,
                place,
            } => self.attempt(id, owner, lease, place),
            Event::Release { id, owner } => self.release(id, owner, &mut handed),
            Event::Cancel { id, owner } => self.cancel(id, owner, &mut handed),
            Event::Renew { owner, lease } => self.renew(owner, lease),
            // Waiters are woken to ask, not handed the lock: an operator's revocation
            // runs no hand-over.
            Event::ForceRelease => Reply::Forced(self.hold.take().is_some()),
            Event::Elapse(ms) => {
                self.now += ms;
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

    /// A hold whose lease ended is gone; its grants end with it. Nobody is handed the
    /// lock: waiters find it free when they next ask.
    fn expire(&mut self) {
        if self.hold.as_ref().is_some_and(|h| h.expires <= self.now)
            && let Some(hold) = self.hold.take()
        {
            for id in hold.grants {
                self.records.insert(id, Record::Ended);
            }
        }
    }

    fn attempt(&mut self, id: u32, owner: u32, lease: u64, place: Option<u64>) -> Reply {
        if lease > self.longest_lease {
            return Reply::Refused;
        }
        let alive = |hold: &Option<Hold>| {
            hold.as_ref()
                .is_some_and(|h| h.owner == owner && h.grants.contains(&id))
        };
        let record = self.records.get(&id).copied();
        if record == Some(Record::Ended) {
            return Reply::Ended;
        }
        // Nothing is granted during a failover's quarantine, nor taken up, replayed or
        // re-entered: the hold found may be one whose release, or whose revocation, the
        // failover lost. A known acquisition asks again after it; a new one waits.
        if self.quarantine_until > self.now {
            return match record {
                Some(_) => Reply::Busy,
                None => self.wait(id, owner, lease, place),
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
                    hold.expires = hold.expires.max(now + lease);
                }
                self.records.insert(id, Record::Granted(first));
                return first;
            }
            // One whose grant ended gets nothing: the take-up only takes up.
            Some(Record::Granted(_) | Record::Ended) => return Reply::Ended,
            Some(Record::Handed(_)) if !self.planted(Defect::R1TakeUpGrantsAfresh) => {
                self.records.insert(id, Record::Ended);
                return Reply::Ended;
            }
            Some(Record::Handed(_)) | None => {}
        }
        let now = self.now;
        if let Some(hold) = self.hold.as_mut() {
            if hold.owner != owner {
                return self.wait(id, owner, lease, place);
            }
            // Reentry joins the owner's hold, never shortening its lease.
            hold.grants.push(id);
            hold.expires = hold.expires.max(now + lease);
            let reply = self.acquired();
            self.records.insert(id, Record::Granted(reply));
            return reply;
        }
        if self.fair && self.head_other_than(owner) {
            return self.wait(id, owner, lease, place);
        }
        let fair = self.fair;
        self.waiters
            .retain(|w| w.id != id && !(fair && w.owner == owner));
        self.grant(id, owner, now + lease, false);
        self.acquired()
    }

    /// Whether a fair lock's first waiter that keeps its place is another owner's (a fair
    /// queue has one place per owner).
    fn head_other_than(&mut self, owner: u32) -> bool {
        let now = self.now;
        self.waiters.retain(|w| w.keeps_until > now);
        self.waiters.first().is_some_and(|w| w.owner != owner)
    }

    /// Busy; a waiting acquisition keeps (or takes) its place.
    fn wait(&mut self, id: u32, owner: u32, lease: u64, place: Option<u64>) -> Reply {
        if let Some(place) = place {
            let waiter = Waiter {
                id,
                owner,
                lease,
                place,
                keeps_until: self.now + place,
            };
            let fair = self.fair;
            match self
                .waiters
                .iter_mut()
                .find(|w| w.id == id || (fair && w.owner == owner))
            {
                Some(registered) => *registered = waiter,
                None => self.waiters.push(waiter),
            }
        }
        Reply::Busy
    }

    /// Makes `id` of `owner` the holder until `expires`, with a fresh token.
    fn grant(&mut self, id: u32, owner: u32, expires: u64, handed: bool) -> u64 {
        self.token = (self.token + 1).max(self.now * 1000);
        self.longest_granted = self.longest_granted.max(expires - self.now);
        self.hold = Some(Hold {
            owner,
            grants: vec![id],
            origin: id,
            token: self.token,
            expires,
            handed,
        });
        let reply = self.acquired();
        let record = if handed {
            Record::Handed(reply)
        } else {
            Record::Granted(reply)
        };
        self.records.insert(id, record);
        self.token
    }

    fn acquired(&self) -> Reply {
        self.hold
            .as_ref()
            .map_or(Reply::Busy, |hold| Reply::Acquired {
                holds: u32::try_from(hold.grants.len()).unwrap_or(u32::MAX),
                token: hold.token,
                origin: hold.origin,
            })
    }

    fn release(&mut self, id: u32, owner: u32, handed: &mut Option<(u32, u64)>) -> Reply {
        self.records.insert(id, Record::Ended);
        let named = self
            .hold
            .as_ref()
            .filter(|hold| hold.owner == owner)
            .and_then(|hold| hold.grants.iter().position(|g| *g == id));
        let counts_down = self.planted(Defect::N2ReleaseCountsDown);
        let at = match named {
            Some(_) | None if counts_down => {
                match self.hold.as_ref().filter(|hold| hold.owner == owner) {
                    Some(hold) => hold.grants.len() - 1,
                    None => return Reply::NotHeld,
                }
            }
            Some(at) => at,
            None if self.planted(Defect::N3ReleaseEndsAnyGrant) => {
                match self.hold.as_ref().filter(|hold| hold.owner == owner) {
                    Some(hold) => hold.grants.len() - 1,
                    None => return Reply::NotHeld,
                }
            }
            None => return Reply::NotHeld,
        };
        let Some(hold) = self.hold.as_mut() else {
            return Reply::NotHeld;
        };
        hold.grants.remove(at);
        if let Some(left) = u32::try_from(hold.grants.len()).ok().filter(|n| *n > 0) {
            return Reply::StillHeld(left);
        }
        self.hold = None;
        *handed = self.serve();
        Reply::Released
    }

    /// The acquisition gave up, so its client holds nothing of it: its place goes, a
    /// grant it got without learning of it (handed, or granted to a late copy of one of
    /// its attempts) ends, its own grant alone, and so does its id.
    fn cancel(&mut self, id: u32, owner: u32, handed: &mut Option<(u32, u64)>) -> Reply {
        self.waiters.retain(|w| w.id != id);
        let record = self.records.get(&id).copied();
        if matches!(record, Some(Record::Handed(_))) || !self.planted(Defect::R2CancelLeavesNoEnd) {
            if let Some(hold) = self.hold.as_mut().filter(|h| h.owner == owner) {
                hold.grants.retain(|g| *g != id);
                if hold.grants.is_empty() {
                    self.hold = None;
                }
            }
            self.records.insert(id, Record::Ended);
        }
        if self.hold.is_none() {
            *handed = self.serve();
        }
        Reply::Done
    }

    fn renew(&mut self, owner: u32, lease: u64) -> Reply {
        if lease > self.longest_lease {
            return Reply::Refused;
        }
        match self.hold.as_mut() {
            Some(hold) if hold.owner == owner => {
                hold.expires = hold.expires.max(self.now + lease);
                Reply::Renewed
            }
            _ => Reply::Gone,
        }
    }

    /// Hands the free lock to the first waiter that still keeps its place and waits (none
    /// during the quarantine), for its place or its lease, whichever is shorter.
    fn serve(&mut self) -> Option<(u32, u64)> {
        let now = self.now;
        // A waiter whose acquisition ended (its attempt's grant was undone) waits no more.
        let records = &self.records;
        self.waiters
            .retain(|w| w.keeps_until > now && records.get(&w.id) != Some(&Record::Ended));
        if self.quarantine_until > now || self.waiters.is_empty() {
            return None;
        }
        let waiter = self.waiters.remove(0);
        let lasts = if self.planted(Defect::HandedHoldLastsThePlace) {
            waiter.place
        } else {
            waiter.place.min(waiter.lease)
        };
        let token = self.grant(waiter.id, waiter.owner, now + lasts, true);
        Some((waiter.id, token))
    }

    /// The replica takes over with what it had; nothing is granted for the longest lease
    /// a lost hold may have had.
    fn fail_over(&mut self) {
        let replica = self
            .replica
            .take()
            .map_or_else(|| Self::new(self.fair, self.longest_lease), |r| *r);
        let quarantine = if self.planted(Defect::R4QuarantineOfKnownLeases) {
            replica.longest_granted
        } else {
            self.longest_lease
        };
        let (now, token, defect) = (self.now, self.token, self.defect);
        *self = replica;
        self.now = now;
        self.defect = defect;
        // Tokens never go backwards: a store seeds them from a clock; the machine keeps
        // the highest it issued.
        self.token = self.token.max(token);
        self.quarantine_until = now + quarantine;
    }
}
