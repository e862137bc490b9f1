//! The exhaustive check of the grant rules: every sequence of events, up to a bound,
//! that clients and faults can produce on one lock name, with the invariants tested
//! after each step.
//!
//! Clients are modelled by what they believe: an acquisition waits, holds (from a grant,
//! or from a hand-over's notice, until its lease counted from its latest attempt), or is
//! over. Faults are the events a network and an operator add: a late copy of any
//! attempt sent before, a force-release, time passing, a failover that loses the writes
//! since the replica last caught up; and a client of another library that starts or
//! stops waiting (it listens, never registers: releases offer it the mutex).
//!
//! # The bound
//!
//! Three acquisitions of two owners (two suffice for every exclusion finding so far;
//! the third, of the first's owner, re-enters or follows it; on a read-write lock the
//! first two write and the third reads as the second's owner, so that a writer meets a
//! reader of another owner and reads beside its own write), one lease and one place
//! (the lease shorter, as in the kill -9 finding), two steps of time (a third of the
//! place, and a whole lease), late copies within a horizon shorter than the longest
//! lease, and sequences of up to [`Bound::depth`] events. States
//! already explored are not explored again, so the check visits each reachable state of
//! the bound once: with the default depth of 9 every finding below is caught within 7
//! events, and the whole space takes a few seconds.
//!
//! # The invariants
//!
//! - **Exclusion**: while an owner believes it writes, no other owner believes it holds,
//!   among holders not revoked by a force-release (those learn at their next renewal:
//!   revocation with notice).
//! - **One grant per acquisition**: a fresh grant (a new token) is never made twice to
//!   one id.
//! - **No grant for nobody**: no live hold has only grants of acquisitions that are over
//!   (a late copy of a cancelled acquisition's attempt, second review R2).
//! - **A handed hold lasts no longer than its waiter's lease.**

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::{Defect, Event, Name, Reply, Side};

/// How far the check goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bound {
    /// The longest sequence of events.
    pub depth: usize,
    /// Whether the lock is fair.
    pub fair: bool,
    /// Whether the lock is a read-write lock (its third acquisition reads).
    pub read_write: bool,
}

impl Default for Bound {
    fn default() -> Self {
        Self {
            depth: 9,
            fair: false,
            read_write: false,
        }
    }
}

/// The lease every acquisition asks for (ms).
const LEASE: u64 = 3;
/// How long a waiter keeps its place (ms).
const PLACE: u64 = 5;
/// How long after its send a copy of an attempt may still arrive (ms): a store keeps an
/// ended id at least this long (twice the retry window), and a failover's quarantine
/// (the longest lease) is longer, so that a copy sent before a failover that lost the
/// id's end cannot arrive after the quarantine.
const HORIZON: u64 = 2;
/// How many acquisitions there are.
const ACQUISITIONS: usize = 3;

/// What a client believes of one acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Belief {
    /// Not started.
    Idle,
    /// Waiting; its latest attempt was sent at this time.
    Waiting { asked: u64 },
    /// Holding until this time; revoked when a force-release deleted its hold.
    Holding { until: u64, revoked: bool },
    /// Over (released, gave up, or lost).
    Over,
}

/// An event of the check: a client's action or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Acquisition `i` sends an attempt (its first, or its next).
    Ask(usize),
    /// A copy of acquisition `i`'s attempt arrives late; its reply goes nowhere.
    LateCopy(usize),
    /// Acquisition `i` releases its grant.
    Release(usize),
    /// Acquisition `i` gives up waiting.
    GiveUp(usize),
    /// A client of another library starts (1) or stops (0) waiting: it listens and
    /// never registers.
    Others(u32),
    /// An operator force-releases the lock's side.
    Force(Side),
    /// Time passes.
    Elapse(u64),
    /// The replica catches up.
    Replicate,
    /// The store fails over.
    Failover,
}

/// The world of the check: the store and what its clients believe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    store: Name,
    /// Whether the lock is a read-write lock.
    read_write: bool,
    beliefs: [Belief; ACQUISITIONS],
    /// When each acquisition last sent an attempt, if it did (a late copy needs one).
    sent: [Option<u64>; ACQUISITIONS],
    /// Whether each acquisition was ever granted afresh (or handed the lock).
    granted: [bool; ACQUISITIONS],
    /// Whether each holding acquisition still has to take its handed hold up.
    to_take_up: [bool; ACQUISITIONS],
    /// Whether a client of another library waits.
    others: bool,
    /// An invariant broken by the last event.
    broken: Option<String>,
}

/// A sequence that broke an invariant: what broke, and the events that led there.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The invariant, and how it broke.
    pub what: String,
    /// The events, first to last.
    pub trace: Vec<String>,
}

/// What an exhaustive run covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    /// Distinct states visited.
    pub states: usize,
    /// Events applied.
    pub steps: usize,
}

/// Explores every sequence of events within `bound` on a machine with `defect` planted
/// (none: the rules as written), and returns the first violation found, if any.
///
/// # Errors
///
/// The [`Violation`] found, with a shortest trace.
pub fn explore(bound: Bound, defect: Option<Defect>) -> Result<Coverage, Violation> {
    let start = World {
        store: Name::new(bound.fair, LEASE).with_defect(defect),
        read_write: bound.read_write,
        beliefs: [Belief::Idle; ACQUISITIONS],
        sent: [None; ACQUISITIONS],
        granted: [false; ACQUISITIONS],
        to_take_up: [false; ACQUISITIONS],
        others: false,
        broken: None,
    };
    let mut seen = HashSet::new();
    let mut coverage = Coverage {
        states: 0,
        steps: 0,
    };
    // How each explored state was reached: its parent's place here, and the action.
    let mut reached: Vec<(usize, Action)> = Vec::new();
    // Breadth first: the first violation found has a shortest trace.
    let mut frontier = vec![(start.clone(), None)];
    for _ in 0..bound.depth {
        let mut next = Vec::new();
        for (world, place) in frontier {
            for action in actions(&world) {
                let mut after = world.clone();
                coverage.steps += 1;
                after.apply(action);
                if let Some(what) = after.broken.take().or_else(|| after.excluded()) {
                    let mut actions = path(&reached, place);
                    actions.push(action);
                    return Err(Violation {
                        what,
                        trace: replay(start, &actions),
                    });
                }
                if seen.insert(fingerprint(&after)) {
                    coverage.states += 1;
                    reached.push((place.unwrap_or(usize::MAX), action));
                    next.push((after, Some(reached.len() - 1)));
                }
            }
        }
        frontier = next;
    }
    Ok(coverage)
}

/// The stores' states of every world reached within `depth` actions, on a mutex, on a
/// fair lock and on a read-write lock (for tests of what is kept of a state, such as
/// its bytes).
#[cfg(test)]
pub(crate) fn reachable_states(depth: usize) -> Vec<Name> {
    let mut states = Vec::new();
    for (fair, read_write) in [(false, false), (true, false), (false, true)] {
        let start = World {
            store: Name::new(fair, LEASE),
            read_write,
            beliefs: [Belief::Idle; ACQUISITIONS],
            sent: [None; ACQUISITIONS],
            granted: [false; ACQUISITIONS],
            to_take_up: [false; ACQUISITIONS],
            others: false,
            broken: None,
        };
        let mut seen = HashSet::new();
        let mut frontier = vec![start];
        for _ in 0..depth {
            let mut next = Vec::new();
            for world in frontier {
                for action in actions(&world) {
                    let mut after = world.clone();
                    after.apply(action);
                    if seen.insert(fingerprint(&after)) {
                        states.push(after.store.clone());
                        next.push(after);
                    }
                }
            }
            frontier = next;
        }
    }
    states
}

/// The actions that reached the state explored at `place`, first to last.
fn path(reached: &[(usize, Action)], mut place: Option<usize>) -> Vec<Action> {
    let mut actions = Vec::new();
    while let Some((parent, action)) = place.and_then(|at| reached.get(at)) {
        actions.push(*action);
        place = Some(*parent);
    }
    actions.reverse();
    actions
}

/// `actions` applied to `world` again, as the trace shows them.
fn replay(mut world: World, actions: &[Action]) -> Vec<String> {
    actions.iter().map(|action| world.apply(*action)).collect()
}

/// A 64-bit digest of `world`: the explored states are kept as digests (a collision
/// would skip a state; at a few million states it is a chance in millions of millions).
fn fingerprint(world: &World) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    world.hash(&mut hasher);
    hasher.finish()
}

/// Every action possible in `world`.
fn actions(world: &World) -> Vec<Action> {
    let mut all = Vec::new();
    for (i, belief) in world.beliefs.iter().enumerate() {
        match belief {
            Belief::Idle => all.push(Action::Ask(i)),
            Belief::Waiting { .. } => all.extend([Action::Ask(i), Action::GiveUp(i)]),
            Belief::Holding { .. } => {
                all.push(Action::Release(i));
                if world.to_take_up[i] {
                    all.push(Action::Ask(i));
                }
            }
            Belief::Over => {}
        }
        if world.sent[i].is_some_and(|at| at + HORIZON >= world.store.now()) {
            all.push(Action::LateCopy(i));
        }
    }
    if world.read_write {
        all.push(Action::Force(Side::Read));
    }
    all.extend([
        Action::Others(u32::from(!world.others)),
        Action::Force(Side::Write),
        Action::Elapse(PLACE / 3),
        Action::Elapse(LEASE),
        Action::Replicate,
        Action::Failover,
    ]);
    all
}

impl World {
    /// Applies `action`; returns how the trace shows it.
    fn apply(&mut self, action: Action) -> String {
        let now = self.store.now();
        let event = match action {
            Action::Ask(i) | Action::LateCopy(i) => Event::Attempt {
                side: self.side(i),
                id: id(i),
                owner: self.owner(i),
                lease: LEASE,
                place: (self.side(i) == Side::Write).then_some(PLACE),
                ask: (),
            },
            Action::Release(i) => Event::Release {
                side: self.side(i),
                id: id(i),
                owner: self.owner(i),
                lease: LEASE,
            },
            Action::GiveUp(i) => Event::Cancel {
                id: id(i),
                owner: self.owner(i),
            },
            Action::Others(listening) => {
                self.others = listening > 0;
                Event::Others(listening)
            }
            Action::Force(side) => Event::ForceRelease(side),
            Action::Elapse(ms) => Event::Elapse(ms),
            Action::Replicate => Event::Replicate,
            Action::Failover => Event::Failover,
        };
        let token_before = self.store.last_token();
        let step = self.store.step(event);
        let fresh = self.store.last_token() != token_before;
        let shown = format!("t={now} {action:?}: {:?}", step.reply);
        let granted =
            fresh && step.handed.is_none() || matches!(step.reply, Reply::Acquired { .. });
        if let Some(orphan) = self.orphaned(action, granted) {
            self.broken = Some(orphan);
        }
        if let Action::Ask(i) | Action::LateCopy(i) | Action::Release(i) | Action::GiveUp(i) =
            action
        {
            self.believe(action, i, step.reply, fresh && step.handed.is_none());
        }
        if action == Action::Failover {
            // What the failover lost, the store no longer knows: an id it granted may
            // be granted again (its client still releases what it holds).
            for i in 0..ACQUISITIONS {
                self.granted[i] &= self.store.knows(id(i));
            }
        }
        if matches!(action, Action::Force(_)) && step.reply == Reply::Forced(true) {
            for belief in &mut self.beliefs {
                if let Belief::Holding { revoked, .. } = belief {
                    *revoked = true;
                }
            }
        }
        let Some(handed) = step.handed.map(|hand_over| hand_over.id) else {
            return shown;
        };
        let i = index(handed);
        self.granted_afresh(i, "handed the lock");
        if self
            .store
            .holder()
            .is_some_and(|holder| holder.expires > self.store.now() + LEASE)
        {
            self.broken = Some(format!(
                "a hold handed to {handed} lasts longer than its lease of {LEASE} ms"
            ));
        }
        if let Belief::Waiting { asked } = self.beliefs[i] {
            // The client holds from the notice, for the handed hold's lease counted from
            // its latest attempt, and takes the hold up with its next attempt.
            self.beliefs[i] = Belief::Holding {
                until: asked + PLACE.min(LEASE),
                revoked: false,
            };
            self.to_take_up[i] = true;
        }
        format!("{shown}, handed to {handed}")
    }

    /// What acquisition `i`'s client makes of `reply`; `fresh`: the store granted
    /// anew (a new token). A late copy's reply goes nowhere.
    fn believe(&mut self, action: Action, i: usize, reply: Reply, fresh: bool) {
        let now = self.store.now();
        if fresh && matches!(reply, Reply::Acquired { origin, .. } if origin == id(i)) {
            self.granted_afresh(i, "granted");
        }
        match (action, reply) {
            (Action::Ask(_), Reply::Acquired { .. }) => {
                self.beliefs[i] = Belief::Holding {
                    until: now + LEASE,
                    revoked: false,
                };
                self.to_take_up[i] = false;
            }
            (Action::Ask(_), Reply::Busy) => self.beliefs[i] = Belief::Waiting { asked: now },
            // A take-up answered Ended: the guard learns it lost the lock. A waiting
            // acquisition answered Ended ends too (a client goes on under a new id), and
            // so does a reader's write attempt, refused as a deadlock.
            (Action::Ask(_), Reply::Ended | Reply::WouldDeadlock)
            | (Action::Release(_) | Action::GiveUp(_), _) => {
                self.beliefs[i] = Belief::Over;
                self.to_take_up[i] = false;
            }
            _ => {}
        }
        if matches!(action, Action::Ask(_)) {
            self.sent[i] = Some(now);
        }
    }

    /// Records a fresh grant to acquisition `i`; a second one breaks the rules.
    fn granted_afresh(&mut self, i: usize, how: &str) {
        if self.granted[i] {
            self.broken = Some(format!(
                "acquisition {} was {how} a second time: one id, two grants",
                id(i)
            ));
        }
        self.granted[i] = true;
    }

    /// A grant that nobody will release or renew: one made (or found alive) for an
    /// acquisition that is over (a late copy of an attempt of one that gave up or
    /// released), or one left behind by an acquisition that gave up.
    fn orphaned(&self, action: Action, granted: bool) -> Option<String> {
        match action {
            Action::LateCopy(i) if granted && self.beliefs[i] == Belief::Over => Some(format!(
                "a grant for nobody: a late copy of acquisition {}'s attempt took the lock \
                 after it was over",
                id(i)
            )),
            Action::GiveUp(i) if self.store.grant_lives(id(i)) => Some(format!(
                "a grant for nobody: acquisition {} gave up and its grant lives on",
                id(i)
            )),
            _ => None,
        }
    }

    /// A writer and another owner that both believe they hold (revoked holders aside),
    /// if any.
    fn excluded(&self) -> Option<String> {
        let now = self.store.now();
        let holding: Vec<(u32, Side)> = (0..ACQUISITIONS)
            .filter(|i| {
                matches!(self.beliefs[*i], Belief::Holding { until, revoked: false } if until > now)
            })
            .map(|i| (self.owner(i), self.side(i)))
            .collect();
        let (writer, _) = holding.iter().find(|(_, side)| *side == Side::Write)?;
        let (other, side) = holding.iter().find(|(owner, _)| owner != writer)?;
        Some(format!(
            "TWO OWNERS at t={now}: owner {writer} believes it writes and owner {other} \
             that it holds ({side:?})"
        ))
    }

    /// The owner of acquisition `i`: the third is the first's on an exclusive lock (it
    /// re-enters, or follows it), the second's on a read-write lock (it reads).
    fn owner(&self, i: usize) -> u32 {
        match (i, self.read_write) {
            (2, false) => 1,
            (2, true) => 2,
            _ => id(i),
        }
    }

    /// The side acquisition `i` asks for: the third reads on a read-write lock.
    fn side(&self, i: usize) -> Side {
        if i == 2 && self.read_write {
            Side::Read
        } else {
            Side::Write
        }
    }
}

/// The id of acquisition `i`.
fn id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX).saturating_add(1)
}

/// The acquisition of id `id`.
fn index(id: u32) -> usize {
    usize::try_from(id).unwrap_or(usize::MAX).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules as written hold in every sequence within the bound: eight events for
    /// the mutex (1.8 million states), seven for the fair lock and the read-write lock.
    #[test]
    fn every_sequence_within_the_bound_keeps_the_invariants() {
        for (fair, read_write, depth) in [(false, false, 8), (true, false, 7), (false, true, 7)] {
            let bound = Bound {
                depth,
                fair,
                read_write,
            };
            match explore(bound, None) {
                Ok(coverage) => {
                    println!("{bound:?}: {coverage:?}");
                    assert!(coverage.states > 100_000, "{coverage:?}");
                }
                Err(violation) => panic!("{violation:#?}"),
            }
        }
    }

    /// Every defect planted back is caught within the bound, with the trace that shows
    /// it: a check never seen to fail proves little.
    #[test]
    fn every_planted_defect_is_caught() {
        for defect in [
            Defect::R1TakeUpGrantsAfresh,
            Defect::R2CancelLeavesNoEnd,
            Defect::R4QuarantineOfKnownLeases,
            Defect::HandedHoldLastsThePlace,
            Defect::N3ReleaseEndsAnyGrant,
            Defect::N2ReleaseCountsDown,
            Defect::WriteBesideReaders,
        ] {
            let bound = Bound {
                depth: 7,
                fair: false,
                read_write: defect == Defect::WriteBesideReaders,
            };
            match explore(bound, Some(defect)) {
                Ok(coverage) => panic!("{defect:?} was not caught in {coverage:?}"),
                Err(violation) => println!(
                    "{defect:?} caught in {} events: {}\n  {}",
                    violation.trace.len(),
                    violation.what,
                    violation.trace.join("\n  ")
                ),
            }
        }
    }
}
