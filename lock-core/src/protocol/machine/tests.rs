//! Sequences the exhaustive check's bound does not reach, found otherwise.

use super::*;

fn attempt(id: u32, owner: u32) -> Event {
    Event::Attempt {
        id,
        owner,
        lease: 30,
        place: Some(50),
        ask: (),
    }
}

/// A waiter that re-entered its owner's hold (handed to the owner's other waiter)
/// waits no more: when the lock is free again it is not handed it a second time.
/// Found by the simulation once the memory store executed this machine; the
/// exhaustive check's bound is two events short of it.
#[test]
fn a_waiter_that_reentered_is_not_handed_the_lock_again() {
    let mut name: Name = Name::new(false, 100);
    assert!(matches!(
        name.step(attempt(2, 2)).reply,
        Reply::Acquired { .. }
    ));
    assert_eq!(name.step(attempt(1, 1)).reply, Reply::Busy);
    assert_eq!(name.step(attempt(3, 1)).reply, Reply::Busy);
    let release = Event::Release {
        id: 2,
        owner: 2,
        lease: 30,
    };
    let handed = name.step(release).handed.map(|hand_over| hand_over.id);
    assert_eq!(handed, Some(1));
    let reentry = name.step(attempt(3, 1)).reply;
    assert!(
        matches!(reentry, Reply::Acquired { holds: 2, .. }),
        "{reentry:?}"
    );
    assert_eq!(name.step(Event::ForceRelease).reply, Reply::Forced(true));
    let step = name.step(Event::Cancel { id: 1, owner: 1 });
    assert_eq!(step.handed, None, "acquisition 3 was granted once already");
}

fn try_once(id: u32, owner: u32) -> Event {
    Event::Attempt {
        id,
        owner,
        lease: 30,
        place: None,
        ask: (),
    }
}

fn release(id: u32, owner: u32) -> Event {
    Event::Release {
        id,
        owner,
        lease: 30,
    }
}

/// While clients of other libraries wait, a release offers the mutex to them instead
/// of handing it to a waiter of ours: ours keep back, a try (one of those offered it)
/// takes it, and the next attempt of ours that finds it held ends the offer. With none
/// of them left, releases hand over again.
#[test]
fn a_release_offers_the_lock_to_other_libraries_while_they_wait() {
    let mut name: Name = Name::new(false, 100).offering_for(10);
    assert!(matches!(
        name.step(attempt(1, 1)).reply,
        Reply::Acquired { .. }
    ));
    assert_eq!(name.step(attempt(2, 2)).reply, Reply::Busy);
    name.step(Event::Others(1));
    let step = name.step(release(1, 1));
    assert_eq!(step.handed, None, "offered, not handed");
    assert_eq!(name.offered_until(), Some(10));
    assert_eq!(
        name.step(attempt(2, 2)).reply,
        Reply::Busy,
        "ours keep back"
    );
    assert!(matches!(
        name.step(try_once(3, 3)).reply,
        Reply::Acquired { .. }
    ));
    assert_eq!(name.offered_until(), None, "the taker used the offer up");
    name.step(Event::Others(0));
    let handed = name
        .step(release(3, 3))
        .handed
        .map(|hand_over| hand_over.id);
    assert_eq!(handed, Some(2), "none of them left: handed over");
}

/// An offer nobody takes lapses, and a waiter of ours takes the lock then.
#[test]
fn an_offer_nobody_takes_lapses() {
    let mut name: Name = Name::new(false, 100).offering_for(10);
    name.step(attempt(1, 1));
    name.step(attempt(2, 2));
    name.step(Event::Others(1));
    assert_eq!(name.step(release(1, 1)).handed, None);
    assert_eq!(name.step(attempt(2, 2)).reply, Reply::Busy);
    name.step(Event::Elapse(10));
    assert!(matches!(
        name.step(attempt(2, 2)).reply,
        Reply::Acquired { .. }
    ));
}

/// A fair lock's waiters all register, whatever their library: it offers nothing.
#[test]
fn a_fair_lock_offers_nothing() {
    let mut name: Name = Name::new(true, 100);
    name.step(attempt(1, 1));
    name.step(attempt(2, 2));
    name.step(Event::Others(1));
    let handed = name
        .step(release(1, 1))
        .handed
        .map(|hand_over| hand_over.id);
    assert_eq!(handed, Some(2));
}
