//! What happens to a lock name, what the store answers, and the defects of the past the
//! checks plant back: the vocabulary of the protocol's machine ([`super::Name`]).

/// Which side of a lock an event concerns. A mutex's and a fair lock's holds are write
/// holds; a read-write lock's readers hold beside each other, each grant with a lease of
/// its own, and never wait in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Side {
    /// An exclusive hold: a mutex's, a fair lock's, a read-write lock's writer's.
    #[default]
    Write,
    /// A read-write lock's shared hold.
    Read,
}

/// Something that happens to a lock name. `I` names acquisitions, `O` owners, and `A`
/// is what a store keeps of a waiting attempt to tell it of a hand-over (the checks
/// keep nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event<I = u32, O = u32, A = ()> {
    /// An attempt of acquisition `id` of `owner` with `lease`; `place` is how long it
    /// keeps its place when it waits (`None`: a try, which never waits; a reader never
    /// keeps one).
    Attempt {
        /// The side it asks for.
        side: Side,
        /// The acquisition.
        id: I,
        /// Its owner (reentry is per owner).
        owner: O,
        /// The lease it asks for.
        lease: u64,
        /// How long it keeps its place between attempts when it waits.
        place: Option<u64>,
        /// What the store keeps of the attempt while it waits, for a hand-over.
        ask: A,
    },
    /// The release of grant `id` by `owner`; a hold that other grants keep gets `lease`
    /// (never shortened).
    Release {
        /// The side of the grant.
        side: Side,
        /// The grant (the id of the acquisition that got it).
        id: I,
        /// Its owner.
        owner: O,
        /// The lease the hold keeps when other grants remain.
        lease: u64,
    },
    /// Acquisition `id` of `owner` gives up waiting.
    Cancel {
        /// The acquisition.
        id: I,
        /// Its owner.
        owner: O,
    },
    /// `owner` renews its hold of `side` with `lease` (a reader's every grant).
    Renew {
        /// The side renewed.
        side: Side,
        /// The owner.
        owner: O,
        /// The lease to re-arm.
        lease: u64,
    },
    /// The store counts this many clients of other libraries (the older protocol: they
    /// wait on the lock's channel and never register) waiting for a mutex now.
    Others(u32),
    /// An operator deletes the lock's holds of one side, whoever holds them: the writer
    /// (with its own read holds), or the readers when no writer holds.
    ForceRelease(Side),
    /// Time passes.
    Elapse(u64),
    /// The store's replica catches up with every write so far.
    Replicate,
    /// The store fails over to its replica, losing every write since it last caught up.
    Failover,
}

/// What the store answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reply<I = u32> {
    /// The owner holds the lock: `holds` grants in its hold, begun by grant `origin`,
    /// whose fencing token is `token`.
    Acquired {
        /// Grants in the owner's hold.
        holds: u32,
        /// The hold's fencing token.
        token: u64,
        /// The grant that began the hold.
        origin: I,
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
    Renewed {
        /// The grant that began the hold renewed: a client whose hold began with
        /// another grant learns that its own ended and the owner's next one began.
        origin: I,
    },
    /// The owner holds nothing to renew.
    Gone,
    /// A write attempt of an owner that reads and does not write: it would wait for
    /// itself.
    WouldDeadlock,
    /// Whether a force-release found the lock held.
    Forced(bool),
    /// The event needs no answer.
    Done,
}

/// A hand-over: the freed lock is held by the waiting acquisition `id` of `owner`, with
/// fencing token `token`; `ask` is what the store kept of its latest attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandOver<I = u32, O = u32, A = ()> {
    /// The acquisition handed the lock.
    pub id: I,
    /// Its owner.
    pub owner: O,
    /// The hold's fencing token.
    pub token: u64,
    /// What the store kept of the acquisition's latest attempt.
    pub ask: A,
}

/// What one event did: the reply, and the hand-over it made, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step<I = u32, O = u32, A = ()> {
    /// The reply to the event.
    pub reply: Reply<I>,
    /// The waiter the freed lock was handed to.
    pub handed: Option<HandOver<I, O, A>>,
}

/// An owner's read hold, as [`Name::readers`](super::Name::readers) shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reader<'a, I, O> {
    /// The owner.
    pub owner: &'a O,
    /// Its live read grants.
    pub holds: usize,
    /// The grant that began it.
    pub origin: I,
    /// When its last grant's lease ends.
    pub expires: u64,
    /// The hold's fencing token.
    pub token: u64,
}

/// The lock's holder, as [`Name::holder`](super::Name::holder) shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder<'a, I, O> {
    /// The owner.
    pub owner: &'a O,
    /// Its live grants, in the order granted.
    pub grants: &'a [I],
    /// The grant that began it.
    pub origin: I,
    /// When its lease ends.
    pub expires: u64,
    /// When the hold began (0 unless the store forgets, see [`Name::forgetting_after`](super::Name::forgetting_after)).
    pub since: u64,
    /// The hold's fencing token.
    pub token: u64,
    /// Whether it was handed over and not taken up yet.
    pub handed: bool,
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
    /// Issue 48: a release hands a mutex to a waiter of ours while clients of other
    /// libraries wait too, so that they lose every turn.
    NoOfferToOthers,
    /// N2 (second review), as it stands without adoption: a release counts the owner's
    /// hold down whatever grant it names, and a copy of it runs again (a release
    /// delayed or retried past its holder's next hold ends that hold).
    N2ReleaseCountsDown,
    /// A write attempt is granted beside another owner's read holds (the writer
    /// looks at the writer's hold alone).
    WriteBesideReaders,
}
