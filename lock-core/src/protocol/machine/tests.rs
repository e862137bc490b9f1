//! Sequences the exhaustive check's bound does not reach, found otherwise.

use super::*;

fn attempt(id: u32, owner: u32) -> Event {
    Event::Attempt {
        side: Side::Write,
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
        side: Side::Write,
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
    assert_eq!(
        name.step(Event::ForceRelease(Side::Write)).reply,
        Reply::Forced(true)
    );
    let step = name.step(Event::Cancel { id: 1, owner: 1 });
    assert_eq!(step.handed, None, "acquisition 3 was granted once already");
}

fn try_once(id: u32, owner: u32) -> Event {
    Event::Attempt {
        side: Side::Write,
        id,
        owner,
        lease: 30,
        place: None,
        ask: (),
    }
}

fn release(id: u32, owner: u32) -> Event {
    Event::Release {
        side: Side::Write,
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

fn read(id: u32, owner: u32, lease: u64) -> Event {
    Event::Attempt {
        side: Side::Read,
        id,
        owner,
        lease,
        place: None,
        ask: (),
    }
}

fn release_read(id: u32, owner: u32) -> Event {
    Event::Release {
        side: Side::Read,
        id,
        owner,
        lease: 30,
    }
}

/// Readers of two owners read together; a writer waits for the last of them, and is
/// handed the lock when it releases. Each owner's read hold has a token of its own.
#[test]
fn readers_share_and_the_last_one_out_hands_the_lock_to_a_writer() {
    let mut name: Name = Name::new(false, 100);
    let first = name.step(read(1, 1, 30)).reply;
    let second = name.step(read(2, 2, 30)).reply;
    let (Reply::Acquired { token: a, .. }, Reply::Acquired { token: b, .. }) = (first, second)
    else {
        panic!("{first:?} {second:?}");
    };
    assert_ne!(a, b);
    assert_eq!(name.step(attempt(3, 3)).reply, Reply::Busy);
    assert_eq!(name.waiting(), 1);
    let step = name.step(release_read(1, 1));
    assert_eq!((step.reply, step.handed), (Reply::Released, None));
    let step = name.step(release_read(2, 2));
    assert_eq!(step.handed.map(|hand_over| hand_over.id), Some(3));
    assert_eq!(name.step(read(4, 1, 30)).reply, Reply::Busy);
}

/// A writer may read (its read holds outlast its write hold, and let other readers in
/// once it stops writing); a reader that asks to write is refused, and its acquisition
/// is over: a late copy of the attempt grants nothing.
#[test]
fn a_writer_reads_and_a_reader_may_not_write() {
    let mut name: Name = Name::new(false, 100);
    assert!(matches!(
        name.step(attempt(1, 1)).reply,
        Reply::Acquired { .. }
    ));
    assert!(matches!(
        name.step(read(2, 1, 30)).reply,
        Reply::Acquired { .. }
    ));
    assert_eq!(name.step(read(3, 2, 30)).reply, Reply::Busy);
    assert_eq!(name.step(release(1, 1)).reply, Reply::Released);
    assert!(name.holder().is_none() && name.is_held());
    assert!(matches!(
        name.step(read(3, 2, 30)).reply,
        Reply::Acquired { .. }
    ));
    assert_eq!(name.step(attempt(4, 2)).reply, Reply::WouldDeadlock);
    assert_eq!(name.step(release_read(3, 2)).reply, Reply::Released);
    assert_eq!(name.step(release_read(2, 1)).reply, Reply::Released);
    assert_eq!(name.step(attempt(4, 2)).reply, Reply::Ended);
}

/// Each read grant has a lease of its own: the hold ends grant by grant, a renewal
/// re-arms every grant of the owner, and a force-release of the readers frees the
/// lock (not while a writer holds it).
#[test]
fn read_grants_expire_one_by_one_and_renew_together() {
    let mut name: Name = Name::new(false, 100);
    name.step(read(1, 1, 10));
    name.step(read(2, 1, 40));
    name.step(Event::Elapse(20));
    assert_eq!(name.step(read(1, 1, 10)).reply, Reply::Ended);
    assert_eq!(name.readers().map(|r| r.holds).sum::<usize>(), 1);
    let renew = Event::Renew {
        side: Side::Read,
        owner: 1,
        lease: 60,
    };
    assert_eq!(name.step(renew).reply, Reply::Renewed { origin: 1 });
    name.step(Event::Elapse(50));
    assert!(name.grant_lives(2));
    assert_eq!(
        name.step(Event::ForceRelease(Side::Write)).reply,
        Reply::Forced(false)
    );
    assert_eq!(
        name.step(Event::ForceRelease(Side::Read)).reply,
        Reply::Forced(true)
    );
    assert!(!name.is_held());
}

/// A store that forgets keeps an ended acquisition's record for its retention, and
/// forgets it within a quarter of that after (records are looked through every quarter
/// of the retention, not at every step). Would fail if records were forgotten early (a
/// late copy granted afresh within the retention), or never.
#[test]
fn an_ended_record_lasts_its_retention_and_is_forgotten_soon_after() {
    let mut name: Name = Name::new(false, 100).forgetting_after(1_000);
    assert!(matches!(
        name.step(try_once(1, 1)).reply,
        Reply::Acquired { .. }
    ));
    assert_eq!(name.step(release(1, 1)).reply, Reply::Released);
    // Other names' traffic steps the machine often meanwhile: its looks come due.
    for _ in 0..9 {
        name.step(Event::Elapse(100));
        assert_eq!(name.step(try_once(1, 1)).reply, Reply::Ended);
    }
    name.step(Event::Elapse(100));
    assert_eq!(
        name.step(try_once(1, 1)).reply,
        Reply::Ended,
        "kept for its whole retention"
    );
    name.step(Event::Elapse(300));
    assert!(
        matches!(name.step(try_once(1, 1)).reply, Reply::Acquired { .. }),
        "forgotten within a quarter of the retention after it"
    );
}

/// A settled release leaves no record of its acquisition; a grant still alive keeps
/// its own. Would fail if `forget_settled` dropped the record of a live grant (a take-up
/// or a late copy would then be granted afresh beside it) or kept a settled one.
#[test]
fn a_settled_release_leaves_no_record_and_a_live_grant_keeps_its_own() {
    let mut name: Name = Name::new(false, 100).forgetting_after(1_000);
    assert!(matches!(
        name.step(try_once(1, 1)).reply,
        Reply::Acquired { holds: 1, .. }
    ));
    assert!(matches!(
        name.step(try_once(2, 1)).reply,
        Reply::Acquired { holds: 2, .. }
    ));
    name.forget_settled(2);
    assert!(
        matches!(
            name.step(try_once(2, 1)).reply,
            Reply::Acquired { holds: 2, .. }
        ),
        "a live grant's retry gets its first answer"
    );
    assert_eq!(name.step(release(2, 1)).reply, Reply::StillHeld(1));
    name.forget_settled(2);
    assert_eq!(name.records.len(), 1, "only grant 1's record is left");
    assert_eq!(name.step(release(1, 1)).reply, Reply::Released);
    name.forget_settled(1);
    assert!(name.records.is_empty());
}

/// Before the time [`Name::steady_until`] names, time changes nothing but the clock, and
/// every event is answered as it would be now: what lets a store that knows the time only
/// within a window step the machine at the window's end. Runs random sequences of every
/// kind of event; would fail if any boundary (a lease, a read grant, a waiter's place,
/// the quarantine, an offer, a record's retention) were left out.
#[test]
fn before_its_next_boundary_a_machine_decides_as_it_does_now() {
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    for run in 0..300 {
        let mut name: Name = Name::new(run % 2 == 0, 100)
            .forgetting_after(60)
            .offering_for(7);
        for _ in 0..40 {
            let (id, owner) = (
                u32::try_from(next(6)).unwrap_or(0),
                u32::try_from(next(3)).unwrap_or(0),
            );
            let side = if next(4) == 0 {
                Side::Read
            } else {
                Side::Write
            };
            let event = match next(10) {
                0..=2 => Event::Attempt {
                    side,
                    id,
                    owner,
                    lease: 10 + next(40),
                    place: (next(3) > 0).then(|| 5 + next(30)),
                    ask: (),
                },
                3 | 4 => Event::Release {
                    side,
                    id,
                    owner,
                    lease: 20,
                },
                5 => Event::Cancel { id, owner },
                6 => Event::Renew {
                    side,
                    owner,
                    lease: 10 + next(40),
                },
                7 => Event::Others(u32::try_from(next(2)).unwrap_or(0)),
                8 => {
                    if next(5) == 0 {
                        Event::Failover
                    } else {
                        Event::Replicate
                    }
                }
                _ => Event::Elapse(next(25)),
            };
            // As a store does: the machine brought to its time first (a failover leaves
            // the replica's holds as they were, overdue ones too, until the next step).
            name.step(Event::Elapse(0));
            let steady = name.steady_until();
            let now = name.now;
            assert!(steady > now);
            let within = (steady - now - 1).min(40);
            for elapsed in [within / 2, within] {
                let mut later = name.clone();
                later.step(Event::Elapse(elapsed));
                let mut same = later.clone();
                same.now = now;
                assert_eq!(same, name, "time alone changed the machine before {steady}");
                assert_eq!(
                    later.step(event),
                    name.clone().step(event),
                    "{event:?} answered otherwise {elapsed} later, before {steady}"
                );
            }
            name.step(event);
        }
    }
}
