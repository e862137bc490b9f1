//! What this client holds of one name, and the rules between its own owners.
//!
//! The server knows sessions, not owners: a session that holds a lock gets it again at
//! once, whoever asks through it. So the client keeps, per name, which of its
//! owners hold it and on which session, and decides between its own owners itself; the
//! server decides between sessions. The server's state of a name follows from this
//! record alone: its session holds the exclusive lock once while an exclusive hold is
//! recorded, and the shared lock once while any reader is.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{LockKind, LockRef, Owner, RequestId};

/// One owner's hold: the grants it is made of, each with the end of its lease.
#[derive(Debug)]
pub(super) struct Hold {
    owner: Owner,
    kind: LockKind,
    /// The grant that began the hold (the renewal's origin).
    origin: RequestId,
    /// Every live grant and the end of its lease.
    grants: Vec<(RequestId, Instant)>,
    /// The fencing token of the grant that began the hold.
    token: Option<u64>,
}

impl Hold {
    fn new(lock: &LockRef, grant: RequestId, until: Instant, token: Option<u64>) -> Self {
        Self {
            owner: lock.owner.clone(),
            kind: lock.kind,
            origin: grant,
            grants: vec![(grant, until)],
            token,
        }
    }

    fn is(&self, lock: &LockRef) -> bool {
        self.owner == lock.owner && self.kind == lock.kind
    }

    /// How many grants the hold has (its hold count).
    pub(super) fn count(&self) -> u32 {
        u32::try_from(self.grants.len()).unwrap_or(u32::MAX)
    }

    pub(super) fn origin(&self) -> RequestId {
        self.origin
    }

    pub(super) fn token(&self) -> Option<u64> {
        self.token
    }

    /// Lengthens every grant's lease to at least `until`. An exclusive hold's grants
    /// share one lease, as the tables' holds do; a reader's keep their own, so that a
    /// short read lease ends on time beside a long one.
    fn lengthen(&mut self, until: Instant) {
        for (_, end) in &mut self.grants {
            *end = (*end).max(until);
        }
    }

    /// When the hold's last lease ends.
    pub(super) fn ends(&self) -> Option<Instant> {
        self.grants.iter().map(|(_, end)| *end).max()
    }
}

/// Whether a kind takes the exclusive lock of its name (readers take the shared one).
fn exclusive(kind: LockKind) -> bool {
    kind != LockKind::Read
}

/// A server lock this client must give back: its session, and whether it is the shared
/// one.
#[derive(Debug)]
pub(super) struct Unlock<S> {
    pub(super) session: Arc<S>,
    pub(super) shared: bool,
}

/// What an acquisition needs, by the record alone.
#[derive(Debug)]
pub(super) enum Decision<S> {
    /// The owner holds it already (or joins readers this client holds): granted here.
    Here,
    /// Take the server lock (`shared` for a reader), on `on` when the record says on
    /// which session (a writer's own read hold), on any session otherwise.
    Server { shared: bool, on: Option<Arc<S>> },
    /// Another owner of this client holds it, for about `ends_in` more.
    HeldHere { ends_in: Duration },
    /// The owner asks for the exclusive lock while it holds a read lock of the name: it
    /// would wait for itself.
    WouldDeadlock,
}

/// This client's holds of one name, on one session.
#[derive(Debug)]
pub(super) struct Held<S> {
    session: Arc<S>,
    exclusive: Option<Hold>,
    readers: Vec<Hold>,
}

impl<S> Held<S> {
    /// The session the server locks of this name are held on.
    pub(super) fn session(&self) -> &Arc<S> {
        &self.session
    }

    /// What `lock` needs to be granted, judged by the record.
    pub(super) fn decide(record: Option<&Self>, lock: &LockRef, now: Instant) -> Decision<S> {
        let Some(this) = record else {
            return Decision::Server {
                shared: !exclusive(lock.kind),
                on: None,
            };
        };
        let busy = || Decision::HeldHere {
            ends_in: this
                .ends()
                .map_or(Duration::ZERO, |end| end.saturating_duration_since(now)),
        };
        let writer = this.exclusive.as_ref();
        if exclusive(lock.kind) {
            if writer.is_some_and(|own| own.is(lock)) {
                return Decision::Here;
            }
            if this.readers.iter().any(|reader| reader.owner == lock.owner) {
                return Decision::WouldDeadlock;
            }
            return busy();
        }
        match writer {
            None => Decision::Here,
            // A writer takes a read hold beside its own write hold (a downgrade): on the
            // same session, where the server never refuses it.
            Some(own) if own.owner == lock.owner && own.kind == LockKind::Write => {
                if this.readers.is_empty() {
                    Decision::Server {
                        shared: true,
                        on: Some(Arc::clone(&this.session)),
                    }
                } else {
                    Decision::Here
                }
            }
            Some(_) => busy(),
        }
    }

    /// When the name's last lease ends.
    pub(super) fn ends(&self) -> Option<Instant> {
        self.exclusive
            .iter()
            .chain(&self.readers)
            .filter_map(Hold::ends)
            .max()
    }

    /// Records a grant made here ([`Decision::Here`]): a reentry, or a reader joining
    /// this client's readers. Answers whether it began the owner's hold (a fresh
    /// acquisition, which may need a fencing token).
    pub(super) fn join(&mut self, lock: &LockRef, grant: RequestId, until: Instant) -> bool {
        Self::add(self, lock, (grant, until, None))
    }

    /// Adds grant `grant` to the owner's hold, or begins the hold with it; answers
    /// whether it began it.
    fn add(&mut self, lock: &LockRef, grant: (RequestId, Instant, Option<u64>)) -> bool {
        let (id, until, token) = grant;
        let hold = if exclusive(lock.kind) {
            self.exclusive.as_mut().filter(|hold| hold.is(lock))
        } else {
            self.readers.iter_mut().find(|hold| hold.is(lock))
        };
        if let Some(hold) = hold {
            hold.grants.push((id, until));
            if exclusive(lock.kind) {
                // An exclusive hold's grants share one lease: the latest grant's.
                hold.lengthen(until);
            }
            return false;
        }
        let hold = Hold::new(lock, id, until, token);
        if exclusive(lock.kind) {
            self.exclusive = Some(hold);
        } else {
            self.readers.push(hold);
        }
        true
    }

    /// Sets the fencing token of the owner's hold (issued after a grant made here).
    pub(super) fn set_token(&mut self, lock: &LockRef, token: u64) {
        let hold = if exclusive(lock.kind) {
            self.exclusive.as_mut().filter(|hold| hold.is(lock))
        } else {
            self.readers.iter_mut().find(|hold| hold.is(lock))
        };
        if let Some(hold) = hold {
            hold.token = Some(token);
        }
    }

    /// Records a grant the server made on `session` (`shared` for a reader), and
    /// answers the server lock to give back, if any: a reader granted on another session
    /// than the one this client's readers hold the name on joins them there. `Err`: the
    /// record says this client holds the name's exclusive lock on another session, which
    /// the server's grant proves wrong; the grant is to be given back.
    pub(super) fn granted(
        record: &mut Option<Self>,
        lock: &LockRef,
        session: &Arc<S>,
        grant: (RequestId, Instant, Option<u64>),
    ) -> Result<(bool, Option<Unlock<S>>), Unlock<S>> {
        let shared = !exclusive(lock.kind);
        let held = record.get_or_insert_with(|| Self {
            session: Arc::clone(session),
            exclusive: None,
            readers: Vec::new(),
        });
        let extra = if Arc::ptr_eq(&held.session, session) {
            None
        } else if shared && held.exclusive.is_none() {
            Some(Unlock {
                session: Arc::clone(session),
                shared: true,
            })
        } else {
            return Err(Unlock {
                session: Arc::clone(session),
                shared,
            });
        };
        let fresh = held.add(lock, grant);
        Ok((fresh, extra))
    }

    /// The owner's hold of `lock`, if it has one.
    pub(super) fn hold(&self, lock: &LockRef) -> Option<&Hold> {
        if exclusive(lock.kind) {
            self.exclusive.as_ref().filter(|hold| hold.is(lock))
        } else {
            self.readers.iter().find(|hold| hold.is(lock))
        }
    }

    /// Lengthens the owner's hold to at least `until`; `None` when it has none.
    pub(super) fn renew(&mut self, lock: &LockRef, until: Instant) -> Option<RequestId> {
        let hold = if exclusive(lock.kind) {
            self.exclusive.as_mut().filter(|hold| hold.is(lock))
        } else {
            self.readers.iter_mut().find(|hold| hold.is(lock))
        }?;
        hold.lengthen(until);
        Some(hold.origin)
    }

    /// Ends grant `grant` of `lock`'s owner, re-arming the rest to `until`. Answers the
    /// holds left (`None`: the owner had no such grant) and the server locks to give
    /// back; the record is gone when nothing is left.
    pub(super) fn end(
        record: &mut Option<Self>,
        lock: &LockRef,
        grant: RequestId,
        until: Instant,
    ) -> (Option<u32>, Vec<Unlock<S>>) {
        let Some(this) = record.as_mut() else {
            return (None, Vec::new());
        };
        let owners = if exclusive(lock.kind) {
            this.exclusive.as_mut().filter(|own| own.is(lock))
        } else {
            this.readers.iter_mut().find(|reader| reader.is(lock))
        };
        let Some(own) = owners else {
            return (None, Vec::new());
        };
        let Some(at) = own.grants.iter().position(|(id, _)| *id == grant) else {
            return (None, Vec::new());
        };
        own.grants.remove(at);
        if exclusive(lock.kind) {
            own.lengthen(until);
        }
        let left = own.count();
        (Some(left), Self::tidy(record))
    }

    /// Ends every hold of the name of `kind`'s side, exclusive or shared (a
    /// force-release), returning whether there was one and the server locks to give
    /// back.
    pub(super) fn clear(record: &mut Option<Self>, kind: LockKind) -> (bool, Vec<Unlock<S>>) {
        let Some(held) = record.as_mut() else {
            return (false, Vec::new());
        };
        let holds: Vec<&mut Hold> = if exclusive(kind) {
            held.exclusive.iter_mut().collect()
        } else {
            held.readers.iter_mut().collect()
        };
        let mut was = false;
        for hold in holds {
            was = true;
            hold.grants.clear();
        }
        (was, Self::tidy(record))
    }

    /// Whether a hold of `kind`'s side (exclusive or shared) is recorded.
    pub(super) fn has_side(&self, kind: LockKind) -> bool {
        if exclusive(kind) {
            self.exclusive.is_some()
        } else {
            !self.readers.is_empty()
        }
    }

    /// Ends the grants whose lease is over, returning the server locks to give back.
    pub(super) fn expire(record: &mut Option<Self>, now: Instant) -> Vec<Unlock<S>> {
        let Some(held) = record.as_mut() else {
            return Vec::new();
        };
        for hold in held.exclusive.iter_mut().chain(held.readers.iter_mut()) {
            hold.grants.retain(|(_, end)| *end > now);
        }
        Self::tidy(record)
    }

    /// When the earliest lease of the name ends.
    pub(super) fn next_end(&self) -> Option<Instant> {
        self.exclusive
            .iter()
            .chain(&self.readers)
            .flat_map(|hold| hold.grants.iter().map(|(_, end)| *end))
            .min()
    }

    /// Removes holds without grants, and the record when nothing is left; returns the
    /// server locks that no hold needs any more.
    fn tidy(record: &mut Option<Self>) -> Vec<Unlock<S>> {
        let Some(held) = record.as_mut() else {
            return Vec::new();
        };
        let mut unlocks = Vec::new();
        if held
            .exclusive
            .as_ref()
            .is_some_and(|hold| hold.grants.is_empty())
        {
            held.exclusive = None;
            unlocks.push(Unlock {
                session: Arc::clone(&held.session),
                shared: false,
            });
        }
        let readers_before = held.readers.len();
        held.readers.retain(|hold| !hold.grants.is_empty());
        if readers_before > 0 && held.readers.is_empty() {
            unlocks.push(Unlock {
                session: Arc::clone(&held.session),
                shared: true,
            });
        }
        if held.exclusive.is_none() && held.readers.is_empty() {
            *record = None;
        }
        unlocks
    }
}
