//! The grant rules of one lock name, written once: a pure state machine of what a store
//! holds for a lock (a mutex, a fair lock, or a read-write lock), the events that change
//! it and the replies it gives.
//!
//! Every store (the memory store here, and each backend's server-side code) is held to
//! these rules: the exhaustive check in [`check`] enumerates every sequence of events
//! up to a bound and tests the invariants after each step; the differential test in
//! `lock-conformance` replays sequences on a store and on this machine and requires the
//! same replies. Read [`Name::step`] top to bottom: each event is a few lines, and each
//! rule says which finding it answers.
//!
//! # The rules
//!
//! - **One identity per acquisition.** Every attempt of one acquisition carries its id
//!   (a first try, a re-ask, the take-up of a handed hold, a retry after a lost reply,
//!   or a late copy). An id is granted at most once; once its grant ended (released,
//!   given back, force-released, expired) or its acquisition gave up, every later
//!   attempt under it is answered [`Reply::Ended`] and changes nothing (third review,
//!   R1 and R2). A retry while its grant lives gets the grant back.
//! - **Releases name their grant.** A release ends exactly the grant it names, only while
//!   it lives; anything else is [`Reply::NotHeld`] (second review, N3).
//! - **Hand-over.** A release (or a cancellation) that frees the lock makes the first
//!   waiter that still keeps its place and waits (one whose id the store knows nothing
//!   of: not granted, as by a reentry into its owner's hold, nor handed, nor ended) the
//!   holder, with a hold that lasts its place or its lease, whichever is shorter (issue
//!   48), and tells it ([`Step::handed`]). Its next attempt takes the hold up with its full lease, if the
//!   hold is still its own; a waiter that gave up gives it back. A force-release and an
//!   expiry hand nothing over: waiters are woken, or ask when their wait says.
//! - **Found again.** An attempt that finds its acquisition's grant alive gets the
//!   first answer again and re-arms the lease (never shortening it): its client counts
//!   the lease from this attempt. A cancellation ends a grant its acquisition never
//!   learnt of (its client holds nothing of a waiting acquisition).
//! - **Renewals name the owner and say which hold.** A renewal re-arms the owner's hold
//!   (never shortening it) and the store answers with the grant that began it
//!   ([`Reply::Renewed`]): a client whose hold began with another grant learns that its
//!   hold was revoked (or lapsed) and the owner's next one began, by an attempt whose
//!   answer it has not read (a revoked guard learns within one renewal interval).
//! - **Offers to other libraries.** Clients of other libraries (of the older protocol
//!   this one extends) wait on the lock's channel and never register; a store counts them
//!   ([`Event::Others`]). While any wait, a release (or cancellation) that frees a mutex
//!   with waiters of ours registered hands nothing over: it offers the lock to them
//!   for the offer's time ([`Name::offering_for`]). Meanwhile our attempts that would
//!   register keep back (busy, keeping their places), one that would not (a try) may
//!   take the lock, and an attempt that finds it held ends the offer: one of them took
//!   it. Without offers such a waiter lost every release to our registered waiters
//!   and starved (issue 48). A fair lock offers nothing: every waiter registers.
//! - **Readers.** A read-write lock's readers ([`Side::Read`]) hold beside each other,
//!   one read hold per owner, each grant with a lease of its own (it ends grant by
//!   grant, and a renewal re-arms them all). A reader is never granted beside another
//!   owner's write hold, a writer never beside another owner's read hold; a writer may
//!   read, and its read holds outlast its write hold. A reader never waits in line and
//!   is served while writers wait (as the older protocol's are); the last holder out hands the
//!   lock to the first waiting writer. An owner that reads and asks to write is refused
//!   ([`Reply::WouldDeadlock`]: it would wait for itself), and that ends its acquisition.
//! - **Expiry.** A hold ends when its lease does, and its grants with it; a waiter loses
//!   its place when it has not asked for its place's time.
//! - **Failover.** A failover may lose every write since the last replication; the
//!   promoted store then grants nothing for the longest lease any hold may have, and
//!   no lease is longer (third review, R4).
//!
//! Time is a count of a store's unit (the checks count milliseconds, the memory store
//! microseconds); ids and owners are any types (the checks use small numbers). The
//! checks keep every id granted or ended for good; a store keeps each for twice the
//! retry window from its grant or its end ([`Name::forgetting_after`]): a copy of a
//! request is assumed to arrive within that. An acquisition whose every attempt its
//! client sent once and heard answered has no copy on its way: its release says so
//! (`ReleaseRequest::settled`), and the store forgets it at once
//! ([`Name::forget_settled`]), so a name taken often keeps no more than a name taken
//! once.
//!
//! The memory store executes this machine for its mutexes and fair locks, the MySQL
//! store for every lock kind. The memory store's read-write lock is its own code still,
//! held to these rules by the differential test, as the servers' scripts are.

pub mod check;
mod events;
mod machine;

pub use events::{Defect, Event, HandOver, Holder, Reader, Reply, Side, Step};
pub use machine::{Field, Name};
